package httpcache

import (
	"net/http"
	"reflect"
	"testing"
	"time"
)

// ccHdr builds a header from name/value pairs; a name may repeat.
func ccHdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

var (
	freshT0      = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	freshT0Str   = freshT0.Format(http.TimeFormat)
	strictPolicy = Policy{}
	coralPolicy  = DefaultPolicy()
	httpDate     = func(t time.Time) string { return t.Format(http.TimeFormat) }
)

func TestParseCacheControl(t *testing.T) {
	cases := []struct {
		name string
		h    http.Header
		want CacheControl
	}{
		{"empty", ccHdr(), CacheControl{}},
		{"§5.2.2.1 max-age", ccHdr("Cache-Control", "max-age=60"), CacheControl{MaxAge: 60 * time.Second, HasMaxAge: true}},
		{"case and whitespace", ccHdr("Cache-Control", "  Public ,\tMAX-AGE = 60 ,, NO-TRANSFORM"),
			CacheControl{Public: true, NoTransform: true, MaxAge: 60 * time.Second, HasMaxAge: true}},
		{"§5.2 quoted value accepted", ccHdr("Cache-Control", `max-age="120"`), CacheControl{MaxAge: 120 * time.Second, HasMaxAge: true}},
		{"§4.2.1 invalid max-age is stale", ccHdr("Cache-Control", "max-age=abc"), CacheControl{HasMaxAge: true}},
		{"negative max-age is stale", ccHdr("Cache-Control", "max-age=-5"), CacheControl{HasMaxAge: true}},
		{"max-age without value is stale", ccHdr("Cache-Control", "max-age"), CacheControl{HasMaxAge: true}},
		{"§1.2.2 huge delta clamps to 2^31", ccHdr("Cache-Control", "max-age=99999999999999999999999"),
			CacheControl{MaxAge: MaxDelta, HasMaxAge: true}},
		{"§1.2.2 10-digit delta beyond 2^31 clamps", ccHdr("Cache-Control", "s-mAXAge=9227000000"),
			CacheControl{SMaxAge: MaxDelta, HasSMaxAge: true}},
		{"leading zeros", ccHdr("Cache-Control", "s-maxage=0000000000000000000000030"),
			CacheControl{SMaxAge: 30 * time.Second, HasSMaxAge: true}},
		{"§4.2.1 duplicates: smallest max-age", ccHdr("Cache-Control", "max-age=600", "Cache-Control", "max-age=60, max-age=3600"),
			CacheControl{MaxAge: 60 * time.Second, HasMaxAge: true}},
		{"§5.2.2.4 qualified no-cache", ccHdr("Cache-Control", `no-cache="Set-Cookie, x-foo", max-age=10`),
			CacheControl{NoCacheFields: []string{"Set-Cookie", "X-Foo"}, MaxAge: 10 * time.Second, HasMaxAge: true}},
		{"comma inside quotes", ccHdr("Cache-Control", `private="a,b", no-store`),
			CacheControl{PrivateFields: []string{"A", "B"}, NoStore: true}},
		{"escaped quote inside quotes", ccHdr("Cache-Control", `ext="a\"b,c", public`), CacheControl{Public: true}},
		{"unterminated quote", ccHdr("Cache-Control", `no-cache="x, public`), CacheControl{NoCacheFields: []string{"X", "Public"}}},
		{"empty qualified is unqualified", ccHdr("Cache-Control", `no-cache="", private=""`), CacheControl{NoCache: true, Private: true}},
		{"unqualified and qualified", ccHdr("Cache-Control", `private, private="x"`), CacheControl{Private: true, PrivateFields: []string{"X"}}},
		{"request directives", ccHdr("Cache-Control", "max-stale=30, min-fresh=10, only-if-cached, no-cache"),
			CacheControl{MaxStale: 30 * time.Second, HasMaxStale: true, MinFresh: 10 * time.Second, HasMinFresh: true, OnlyIfCached: true, NoCache: true}},
		{"§5.2.1.2 max-stale without value", ccHdr("Cache-Control", "max-stale"), CacheControl{MaxStale: MaxDelta, HasMaxStale: true}},
		{"invalid max-stale ignored", ccHdr("Cache-Control", "max-stale=x"), CacheControl{}},
		{"min-fresh duplicates: largest", ccHdr("Cache-Control", "min-fresh=5, min-fresh=50, min-fresh=x"),
			CacheControl{MinFresh: 50 * time.Second, HasMinFresh: true}},
		{"RFC 5861 windows", ccHdr("Cache-Control", "stale-while-revalidate=30, stale-if-error=600, stale-if-error=x"),
			CacheControl{StaleWhileRevalidate: 30 * time.Second, HasStaleWhileRevalidate: true, StaleIfError: 600 * time.Second, HasStaleIfError: true}},
		{"flags", ccHdr("Cache-Control", "must-revalidate, proxy-revalidate, must-understand, immutable, unknown-ext=1"),
			CacheControl{MustRevalidate: true, ProxyRevalidate: true, MustUnderstand: true, Immutable: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseCacheControl(tc.h)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseCacheControl(%q)\n got %+v\nwant %+v", tc.h.Values("Cache-Control"), got, tc.want)
			}
		})
	}
}

func TestParseRequestCacheControlPragma(t *testing.T) {
	// RFC 9111 §5.4: Pragma: no-cache counts only without Cache-Control.
	if !ParseRequestCacheControl(ccHdr("Pragma", "No-Cache")).NoCache {
		t.Error("Pragma: no-cache alone should mean no-cache")
	}
	if ParseRequestCacheControl(ccHdr("Pragma", "no-cache", "Cache-Control", "max-age=5")).NoCache {
		t.Error("Pragma must be ignored when Cache-Control is present")
	}
	if ParseCacheControl(ccHdr("Pragma", "no-cache")).NoCache {
		t.Error("ParseCacheControl must not read Pragma")
	}
}

func TestStorable(t *testing.T) {
	auth := ccHdr("Authorization", "Basic Zm9vOmJhcg==")
	cases := []struct {
		name   string
		p      Policy
		req    http.Header
		status int
		resp   http.Header
		want   bool
	}{
		{"§3 200 cacheable by default", strictPolicy, ccHdr(), 200, ccHdr(), true},
		{"RFC 9110 §15.1 404 by default", strictPolicy, ccHdr(), 404, ccHdr(), true},
		{"RFC 9110 §15.1 410 by default", strictPolicy, ccHdr(), 410, ccHdr(), true},
		{"RFC 9110 §15.1 301 by default", strictPolicy, ccHdr(), 301, ccHdr(), true},
		{"RFC 9110 §15.1 308, 203, 204, 300, 405, 414, 501", strictPolicy, ccHdr(), 501, ccHdr(), true},
		{"§3 302 needs explicit freshness (strict)", strictPolicy, ccHdr(), 302, ccHdr(), false},
		{"§3 302 with max-age", strictPolicy, ccHdr(), 302, ccHdr("Cache-Control", "max-age=60"), true},
		{"§3 302 with Expires", strictPolicy, ccHdr(), 302, ccHdr("Expires", freshT0Str), true},
		{"§3 302 with invalid Expires is still explicit", strictPolicy, ccHdr(), 302, ccHdr("Expires", "0"), true},
		{"coral: 302 stored for MinTTL", coralPolicy, ccHdr(), 302, ccHdr(), true},
		{"coral: 307 stored for MinTTL", coralPolicy, ccHdr(), 307, ccHdr(), true},
		{"§3 403 needs explicit freshness (strict)", strictPolicy, ccHdr(), 403, ccHdr(), false},
		{"coral: 403 without freshness is not stored (CPDoS)", coralPolicy, ccHdr(), 403, ccHdr(), false},
		{"coral: 403 with max-age is stored", coralPolicy, ccHdr(), 403, ccHdr("Cache-Control", "max-age=60"), true},
		{"coral: 500 not stored", coralPolicy, ccHdr(), 500, ccHdr(), false},
		{"coral: 503 not stored", coralPolicy, ccHdr(), 503, ccHdr(), false},
		{"§3 500 with s-maxage", strictPolicy, ccHdr(), 500, ccHdr("Cache-Control", "s-maxage=10"), true},
		{"§3 public makes any final status storable", strictPolicy, ccHdr(), 418, ccHdr("Cache-Control", "public"), true},
		{"transient 500: public is not enough (Coral's choice, §3 allows it)", strictPolicy, ccHdr(), 500, ccHdr("Cache-Control", "public"), false},
		{"§3 503 with max-age", strictPolicy, ccHdr(), 503, ccHdr("Cache-Control", "max-age=60"), true},
		{"coral: 503 with max-age", coralPolicy, ccHdr(), 503, ccHdr("Cache-Control", "max-age=60"), true},
		{"§3 429 with Expires", strictPolicy, ccHdr(), 429, ccHdr("Expires", freshT0Str), true},
		{"§3 1xx is not final", coralPolicy, ccHdr(), 103, ccHdr("Cache-Control", "max-age=60"), false},
		{"unknown status", coralPolicy, ccHdr(), 600, ccHdr("Cache-Control", "max-age=60"), false},
		{"206 never stored", coralPolicy, ccHdr(), 206, ccHdr("Cache-Control", "max-age=60"), false},
		{"304 never stored", coralPolicy, ccHdr(), 304, ccHdr("Cache-Control", "max-age=60"), false},
		{"§5.2.2.5 response no-store", coralPolicy, ccHdr(), 200, ccHdr("Cache-Control", "max-age=60, no-store"), false},
		{"§5.2.1.5 request no-store", coralPolicy, ccHdr("Cache-Control", "no-store"), 200, ccHdr(), false},
		{"§5.2.2.7 private", coralPolicy, ccHdr(), 200, ccHdr("Cache-Control", "private, max-age=60"), false},
		{"§5.2.2.7 qualified private is storable", coralPolicy, ccHdr(), 200, ccHdr("Cache-Control", `private="X-User"`), true},
		{"§5.2.2.4 no-cache is storable", strictPolicy, ccHdr(), 200, ccHdr("Cache-Control", "no-cache"), true},
		{"§3.5 Authorization", coralPolicy, auth, 200, ccHdr("Cache-Control", "max-age=60"), false},
		{"§3.5 Authorization with public", strictPolicy, auth, 200, ccHdr("Cache-Control", "public"), true},
		{"§3.5 Authorization with s-maxage", strictPolicy, auth, 200, ccHdr("Cache-Control", "s-maxage=60"), true},
		{"§3.5 Authorization with must-revalidate", strictPolicy, auth, 200, ccHdr("Cache-Control", "must-revalidate"), true},
		{"§4.1 Vary: *", coralPolicy, ccHdr(), 200, ccHdr("Vary", "Accept, *"), false},
		{"§4.1 Vary on a field is fine", coralPolicy, ccHdr(), 200, ccHdr("Vary", "Accept-Encoding"), true},
		{"§5.2.2.3 must-understand overrides no-store", strictPolicy, ccHdr(), 200, ccHdr("Cache-Control", "no-store, must-understand"), true},
		{"§5.2.2.3 must-understand with unknown status", coralPolicy, ccHdr(), 299, ccHdr("Cache-Control", "no-store, must-understand, max-age=5"), false},
		{"§5.2.2.3 must-understand does not override request no-store", strictPolicy, ccHdr("Cache-Control", "no-store"), 200, ccHdr("Cache-Control", "must-understand"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason := tc.p.Storable(tc.req, tc.status, tc.resp)
			if ok != tc.want || reason == "" {
				t.Fatalf("Storable(%d, %v) = %v %q, want %v", tc.status, tc.resp, ok, reason, tc.want)
			}
		})
	}
	if ok, _ := Storable(ccHdr(), 403, ccHdr()); ok {
		t.Error("package Storable must be strict")
	}
}

func TestPolicyForRequest(t *testing.T) {
	if p := coralPolicy.ForRequest(ccHdr("Authorization", "x")); p.MinTTL != 0 || p.DefaultTTL != coralPolicy.DefaultTTL {
		t.Errorf("ForRequest with Authorization = %+v", p)
	}
	if p := coralPolicy.ForRequest(ccHdr()); p != coralPolicy {
		t.Errorf("ForRequest without Authorization = %+v", p)
	}
}

func TestLifetime(t *testing.T) {
	now := freshT0
	date := func(d time.Duration) string { return httpDate(now.Add(d)) }
	cases := []struct {
		name        string
		p           Policy
		status      int
		resp        http.Header
		want        time.Duration
		fromHeaders bool
	}{
		{"§4.2.1 s-maxage first", strictPolicy, 200, ccHdr("Cache-Control", "max-age=10, s-maxage=20", "Expires", date(time.Hour)), 20 * time.Second, true},
		{"§4.2.1 max-age before Expires", strictPolicy, 200, ccHdr("Cache-Control", "max-age=10", "Expires", date(time.Hour), "Date", date(0)), 10 * time.Second, true},
		{"§4.2.1 Expires minus Date", strictPolicy, 200, ccHdr("Expires", date(time.Hour), "Date", date(-30*time.Minute)), 90 * time.Minute, true},
		{"§4.2.1 Expires without Date uses receipt time", strictPolicy, 200, ccHdr("Expires", date(time.Hour)), time.Hour, true},
		{"§4.2.1 Expires in the past", strictPolicy, 200, ccHdr("Expires", date(-time.Hour), "Date", date(0)), 0, true},
		{"§5.3 invalid Expires is expired", strictPolicy, 200, ccHdr("Expires", "0"), 0, true},
		{"§5.3 conflicting Expires is expired", strictPolicy, 200, ccHdr("Expires", date(time.Hour), "Expires", date(2*time.Hour)), 0, true},
		{"§5.3 equal duplicate Expires", strictPolicy, 200, ccHdr("Expires", date(time.Hour), "Expires", date(time.Hour)), time.Hour, true},
		{"§4.2.2 strict: no heuristic", strictPolicy, 200, ccHdr("Last-Modified", date(-240*time.Hour)), 0, false},
		{"coral: DefaultTTL for 200", coralPolicy, 200, ccHdr(), 12 * time.Hour, false},
		{"coral: DefaultTTL for 301", coralPolicy, 301, ccHdr(), 12 * time.Hour, false},
		{"coral: a bare 404 gets the negative lifetime", coralPolicy, 404, ccHdr(), DefaultNegativeTTL, false},
		{"coral: a bare 410 gets the negative lifetime", coralPolicy, 410, ccHdr(), DefaultNegativeTTL, false},
		{"coral: a 404 lives what its max-age says", coralPolicy, 404, ccHdr("Cache-Control", "max-age=600"), 10 * time.Minute, true},
		{"coral: 302 gets MinTTL", coralPolicy, 302, ccHdr(), 5 * time.Minute, false},
		{"coral: 403 gets no MinTTL (CPDoS)", coralPolicy, 403, ccHdr(), 0, false},
		{"coral: 403 max-age=10 is not stretched to MinTTL", coralPolicy, 403, ccHdr("Cache-Control", "max-age=10"), 10 * time.Second, true},
		{"coral: 404 max-age=10 is not stretched to MinTTL", coralPolicy, 404, ccHdr("Cache-Control", "max-age=10"), 10 * time.Second, true},
		{"coral: 404 no-cache is not stretched to MinTTL", coralPolicy, 404, ccHdr("Cache-Control", "no-cache"), 0, true},
		{"coral: 400 gets nothing", coralPolicy, 400, ccHdr(), 0, false},
		{"coral: 500 gets nothing", coralPolicy, 500, ccHdr(), 0, false},
		{"coral: public 500 gets nothing (transient)", coralPolicy, 500, ccHdr("Cache-Control", "public"), 0, false},
		{"coral: 503 max-age=1 is not stretched to MinTTL", coralPolicy, 503, ccHdr("Cache-Control", "max-age=1"), time.Second, true},
		{"§3 504 with max-age", strictPolicy, 504, ccHdr("Cache-Control", "max-age=60"), time.Minute, true},
		{"RFC 9213 §2.1 CDN-Cache-Control over Cache-Control", strictPolicy, 200, ccHdr("Cache-Control", "max-age=3600", "CDN-Cache-Control", "max-age=1"), time.Second, true},
		{"RFC 9213 §2.1 targeted field: Expires ignored", strictPolicy, 200, ccHdr("CDN-Cache-Control", "public", "Expires", date(time.Hour)), 0, false},
		{"Coral-Cache-Control over CDN-Cache-Control", strictPolicy, 200, ccHdr("CDN-Cache-Control", "max-age=10", "Coral-Cache-Control", "max-age=20"), 20 * time.Second, true},
		{"RFC 9213 §2.2 invalid targeted field ignored", strictPolicy, 200, ccHdr("Cache-Control", "max-age=30", "CDN-Cache-Control", `max-age="10"`), 30 * time.Second, true},
		{"RFC 9110 §5.6.7 one-digit hour in Expires", strictPolicy, 200, ccHdr("Expires", "Thu, 18 Aug 2050 2:01:18 GMT"), 0, true},
		{"RFC 9110 §5.6.7 double spaces in Expires", strictPolicy, 200, ccHdr("Expires", "Thu, 18  Aug  2050 02:01:18 GMT"), 0, true},
		{"RFC 9110 §5.6.7 rfc850-date Expires", strictPolicy, 200, ccHdr("Expires", now.Add(time.Hour).Format("Monday, 02-Jan-06 15:04:05 GMT")), time.Hour, true},
		{"RFC 9110 §5.6.7 asctime-date Expires", strictPolicy, 200, ccHdr("Expires", now.Add(time.Hour).Format(time.ANSIC)), time.Hour, true},
		{"coral: public 302 gets MinTTL", coralPolicy, 302, ccHdr("Cache-Control", "public"), 5 * time.Minute, false},
		{"coral: explicit max-age wins over DefaultTTL", coralPolicy, 200, ccHdr("Cache-Control", "max-age=3600"), time.Hour, true},
		{"coral: MinTTL overrides short max-age", coralPolicy, 200, ccHdr("Cache-Control", "max-age=10"), 5 * time.Minute, true},
		{"coral: MinTTL overrides max-age=0", coralPolicy, 200, ccHdr("Cache-Control", "max-age=0"), 5 * time.Minute, true},
		{"coral: MinTTL overrides no-cache", coralPolicy, 200, ccHdr("Cache-Control", "no-cache, max-age=3600"), 5 * time.Minute, true},
		{"coral: MinTTL overrides past Expires", coralPolicy, 200, ccHdr("Expires", "0"), 5 * time.Minute, true},
		{"§5.2.2.4 strict: no-cache is 0", strictPolicy, 200, ccHdr("Cache-Control", "no-cache, max-age=3600"), 0, true},
		{"§5.2.2.2 must-revalidate keeps short max-age", coralPolicy, 200, ccHdr("Cache-Control", "max-age=10, must-revalidate"), 10 * time.Second, true},
		{"§5.2.2.8 proxy-revalidate keeps short max-age", coralPolicy, 200, ccHdr("Cache-Control", "max-age=10, proxy-revalidate"), 10 * time.Second, true},
		{"§5.2.2.10 s-maxage implies proxy-revalidate", coralPolicy, 200, ccHdr("Cache-Control", "s-maxage=0"), 0, true},
		{"§5.2.2.5 no-store never gets MinTTL", coralPolicy, 200, ccHdr("Cache-Control", "no-store"), 0, true},
		{"§5.2.2.7 private never gets MinTTL", coralPolicy, 200, ccHdr("Cache-Control", "private"), 0, true},
		{"§5.2.2.3 must-understand no-store", coralPolicy, 200, ccHdr("Cache-Control", "no-store, must-understand, max-age=60"), 5 * time.Minute, true},
		{"§1.2.2 clamp", strictPolicy, 200, ccHdr("Cache-Control", "max-age=999999999999"), MaxDelta, true},
		{"NegativeTTL 0 falls back to DefaultTTL", Policy{DefaultTTL: time.Hour, MinTTL: time.Minute}, 404, ccHdr(), time.Hour, false},
		{"negative NegativeTTL: errors get nothing, not even MinTTL", Policy{DefaultTTL: time.Hour, MinTTL: time.Minute, NegativeTTL: -1}, 404, ccHdr(), 0, false},
		{"strict with NegativeTTL 0", Policy{}, 404, ccHdr(), 0, false},
		{"MinTTL only with DefaultTTL 0", Policy{MinTTL: time.Minute}, 200, ccHdr(), time.Minute, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, fromHeaders := Lifetime(tc.p, now, tc.status, tc.resp)
			if got != tc.want || fromHeaders != tc.fromHeaders {
				t.Fatalf("Lifetime(%d, %v) = %v, %v; want %v, %v", tc.status, tc.resp, got, fromHeaders, tc.want, tc.fromHeaders)
			}
		})
	}
}

func TestCurrentAge(t *testing.T) {
	req := freshT0
	resp := freshT0.Add(2 * time.Second)
	cases := []struct {
		name string
		h    http.Header
		now  time.Time
		want time.Duration
	}{
		// RFC 9111 §4.2.3: corrected_initial_age = max(apparent_age,
		// age_value + response_delay); current_age = that + resident_time.
		{"no Age, Date = response time", ccHdr("Date", httpDate(resp)), resp.Add(10 * time.Second), 12 * time.Second},
		{"no Date, no Age", ccHdr(), resp.Add(10 * time.Second), 12 * time.Second},
		{"Age header", ccHdr("Age", "100", "Date", httpDate(resp)), resp.Add(10 * time.Second), 112 * time.Second},
		{"apparent age larger", ccHdr("Age", "5", "Date", httpDate(resp.Add(-time.Minute))), resp, time.Minute},
		{"Date in the future: apparent age 0", ccHdr("Date", httpDate(resp.Add(time.Hour))), resp, 2 * time.Second},
		{"invalid Age ignored", ccHdr("Age", "-3"), resp, 2 * time.Second},
		{"huge Age clamped", ccHdr("Age", "99999999999999999999"), resp, MaxDelta + 2*time.Second},
		{"now before response time", ccHdr("Age", "1"), resp.Add(-time.Hour), 3 * time.Second},
		{"Date in year 1 saturates", ccHdr("Date", "Mon, 01 Jan 0001 00:00:00 GMT"), resp.Add(time.Hour), time.Duration(1<<63 - 1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := CurrentAge(tc.h, req, resp, tc.now); got != tc.want {
				t.Fatalf("CurrentAge = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRequestAllows(t *testing.T) {
	cc := func(v string) CacheControl { return parseCacheControlValue(v) }
	min := time.Minute
	cases := []struct {
		name              string
		req, resp         string
		age, freshFor     time.Duration
		serve, revalidate bool
	}{
		{"§4.2 fresh", "", "", min, 2 * min, true, false},
		{"§4.2 age equal to lifetime is stale", "", "", 2 * min, 2 * min, false, true},
		{"§4.2 stale", "", "", 3 * min, 2 * min, false, true},
		{"§5.2.1.4 no-cache", "no-cache", "", 0, time.Hour, false, true},
		{"§5.2.1.1 max-age below age", "max-age=30", "", min, time.Hour, false, true},
		{"§5.2.1.1 max-age equal to age", "max-age=60", "", min, time.Hour, true, false},
		{"§5.2.1.1 max-age=0", "max-age=0", "", time.Second, time.Hour, false, true},
		{"§5.2.1.3 min-fresh satisfied", "min-fresh=60", "", min, 3 * min, true, false},
		{"§5.2.1.3 min-fresh not satisfied", "min-fresh=120", "", 2 * min, 3 * min, false, true},
		{"§5.2.1.2 max-stale covers", "max-stale=120", "", 3 * min, 2 * min, true, false},
		{"§5.2.1.2 max-stale too short", "max-stale=30", "", 3 * min, 2 * min, false, true},
		{"§5.2.1.2 max-stale any", "max-stale", "", 100 * time.Hour, 2 * min, true, false},
		{"§5.2.2.2 must-revalidate beats max-stale", "max-stale", "must-revalidate", 3 * min, 2 * min, false, true},
		{"§5.2.2.8 proxy-revalidate beats max-stale", "max-stale", "proxy-revalidate", 3 * min, 2 * min, false, true},
		{"§5.2.2.10 s-maxage beats max-stale", "max-stale", "s-maxage=120", 3 * min, 2 * min, false, true},
		{"§5.2.2.4 no-cache beats max-stale", "max-stale", "no-cache", 3 * min, 2 * min, false, true},
		{"§5.2.1.7 only-if-cached fresh", "only-if-cached", "", min, 2 * min, true, false},
		{"§5.2.1.7 only-if-cached stale: 504", "only-if-cached", "", 3 * min, 2 * min, false, false},
		{"§5.2.1.7 only-if-cached no-cache: 504", "only-if-cached, no-cache", "", 0, 2 * min, false, false},
		{"only-if-cached with max-stale", "only-if-cached, max-stale=3600", "", 3 * min, 2 * min, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			serve, reval := RequestAllows(cc(tc.req), cc(tc.resp), tc.age, tc.freshFor)
			if serve != tc.serve || reval != tc.revalidate {
				t.Fatalf("RequestAllows(%q, %q, %v, %v) = %v, %v; want %v, %v", tc.req, tc.resp, tc.age, tc.freshFor, serve, reval, tc.serve, tc.revalidate)
			}
		})
	}
}

func TestStaleWindows(t *testing.T) {
	cases := []struct {
		name     string
		cc       string
		swr, sie time.Duration
	}{
		{"RFC 5861 both", "max-age=60, stale-while-revalidate=30, stale-if-error=86400", 30 * time.Second, 24 * time.Hour},
		{"absent", "max-age=60", 0, 0},
		{"RFC 5861 with s-maxage", "s-maxage=60, stale-while-revalidate=30", 30 * time.Second, 0},
		{"RFC 9111 §5.2.2.2 must-revalidate forbids", "stale-while-revalidate=30, stale-if-error=30, must-revalidate", 0, 0},
		{"§5.2.2.8 proxy-revalidate forbids", "stale-if-error=30, proxy-revalidate", 0, 0},
		{"§5.2.2.4 no-cache forbids", "stale-if-error=30, no-cache", 0, 0},
		{"no-store", "stale-if-error=30, no-store", 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			swr, sie := StaleWindows(ccHdr("Cache-Control", tc.cc))
			if swr != tc.swr || sie != tc.sie {
				t.Fatalf("StaleWindows(%q) = %v, %v; want %v, %v", tc.cc, swr, sie, tc.swr, tc.sie)
			}
		})
	}
}

func TestStaleOnError(t *testing.T) {
	cases := []struct {
		name   string
		status int
		cc     string
		want   bool
	}{
		{"DESIGN §4 origin unreachable", 0, "", true},
		{"DESIGN §4 403", 403, "", true},
		{"DESIGN §4 404", 404, "", true},
		{"DESIGN §4 408", 408, "", true},
		{"DESIGN §4 500", 500, "", true},
		{"RFC 5861 §4 502", 502, "", true},
		{"DESIGN §4 503", 503, "", true},
		{"DESIGN §4 504", 504, "", true},
		{"200 is not an error", 200, "", false},
		{"410 is a real answer", 410, "", false},
		{"429", 429, "", false},
		{"no-cache does not prevent (like MinTTL)", 503, "no-cache", true},
		{"RFC 9111 §4.2.4 must-revalidate", 503, "must-revalidate", false},
		{"§4.2.4 proxy-revalidate", 0, "proxy-revalidate", false},
		{"§4.2.4 s-maxage", 0, "s-maxage=60", false},
		{"s-maxage with stale-if-error", 0, "s-maxage=60, stale-if-error=300", true},
		{"no-store", 0, "no-store", false},
		{"private", 0, "private", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefaultPolicy().StaleOnError(tc.status, ccHdr("Cache-Control", tc.cc), time.Hour); got != tc.want {
				t.Fatalf("StaleOnError(%d, %q) = %v", tc.status, tc.cc, got)
			}
		})
	}
}

func TestVaryKey(t *testing.T) {
	req := ccHdr("Accept-Encoding", "gzip,  br", "Accept-Encoding", " zstd", "Accept-Language", "en", "X-Empty", "")
	cases := []struct {
		name string
		vary string
		req  http.Header
		want string
		ok   bool
	}{
		{"none", "", req, "", true},
		{"§4.1 one field", "Accept-Encoding", req, `accept-encoding="gzip, br, zstd"`, true},
		{"§4.1 names are case-insensitive and sorted", "accept-language, ACCEPT-ENCODING", req,
			"accept-encoding=\"gzip, br, zstd\"\naccept-language=\"en\"", true},
		{"duplicates", "Accept-Language, accept-language,,", req, `accept-language="en"`, true},
		{"§4.1 absent differs from empty", "X-Empty, X-Absent", req, "x-absent!\nx-empty=\"\"", true},
		{"§4.1 star", "Accept, *", req, "", false},
		{"invalid name", "Accept Encoding", req, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := VaryKey(tc.vary, tc.req)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("VaryKey(%q) = %q, %v; want %q, %v", tc.vary, got, ok, tc.want, tc.ok)
			}
		})
	}
	// §4.1: whitespace normalization makes these match.
	a, _ := VaryKey("Accept-Encoding", ccHdr("Accept-Encoding", "gzip, br"))
	b, _ := VaryKey("Accept-Encoding", ccHdr("Accept-Encoding", "gzip", "Accept-Encoding", "br"))
	c, _ := VaryKey("Accept-Encoding", ccHdr("Accept-Encoding", "br, gzip"))
	if a != b {
		t.Errorf("combined field lines: %q vs %q", a, b)
	}
	if a == c {
		t.Errorf("different values must not match: %q", a)
	}
}

func TestAddValidators(t *testing.T) {
	lm := httpDate(freshT0)
	stored := ccHdr("ETag", `W/"v1"`, "Last-Modified", lm)
	dst := ccHdr("If-None-Match", `"client"`, "If-Range", `"x"`, "Accept", "*/*")
	if !AddValidators(dst, stored, freshT0) {
		t.Fatal("AddValidators reported nothing added")
	}
	// RFC 9111 §4.3.1.
	want := ccHdr("If-None-Match", `W/"v1"`, "If-Modified-Since", lm, "Accept", "*/*")
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("got %v, want %v", dst, want)
	}
	dst = ccHdr("If-Modified-Since", lm)
	if AddValidators(dst, ccHdr("Last-Modified", "garbage"), freshT0) || len(dst) != 0 {
		t.Fatalf("no validators: got %v", dst)
	}
	// RFC 9110 §8.8.2.1: a Last-Modified in the future is no validator.
	dst = http.Header{}
	if AddValidators(dst, ccHdr("Last-Modified", httpDate(freshT0.Add(time.Hour))), freshT0) || len(dst) != 0 {
		t.Fatalf("future Last-Modified: got %v", dst)
	}
}

func TestNotModified(t *testing.T) {
	lm := freshT0
	stored := ccHdr("ETag", `"abc"`, "Last-Modified", httpDate(lm))
	weakStored := ccHdr("ETag", `W/"abc"`)
	cases := []struct {
		name   string
		method string
		req    http.Header
		status int
		stored http.Header
		want   bool
	}{
		{"RFC 9110 §13.1.2 strong match", "GET", ccHdr("If-None-Match", `"abc"`), 200, stored, true},
		{"§13.1.2 weak comparison", "GET", ccHdr("If-None-Match", `W/"abc"`), 200, stored, true},
		{"§13.1.2 weak stored", "HEAD", ccHdr("If-None-Match", `"abc"`), 200, weakStored, true},
		{"§13.1.2 list", "GET", ccHdr("If-None-Match", `"x", "y,z" , W/"abc"`), 200, stored, true},
		{"§13.1.2 field lines combined", "GET", ccHdr("If-None-Match", `"x"`, "If-None-Match", `"abc"`), 200, stored, true},
		{"§13.1.2 no match", "GET", ccHdr("If-None-Match", `"abcd"`), 200, stored, false},
		{"§13.1.2 star", "GET", ccHdr("If-None-Match", "*"), 200, ccHdr(), true},
		{"§13.1.2 no stored ETag", "GET", ccHdr("If-None-Match", `"abc"`), 200, ccHdr(), false},
		{"§13.2.2 If-None-Match overrides IMS", "GET", ccHdr("If-None-Match", `"zzz"`, "If-Modified-Since", httpDate(lm)), 200, stored, false},
		{"§13.1.3 IMS equal", "GET", ccHdr("If-Modified-Since", httpDate(lm)), 200, stored, true},
		{"§13.1.3 IMS later", "GET", ccHdr("If-Modified-Since", httpDate(lm.Add(time.Hour))), 200, stored, true},
		{"§13.1.3 IMS earlier", "GET", ccHdr("If-Modified-Since", httpDate(lm.Add(-time.Second))), 200, stored, false},
		{"§13.1.3 IMS invalid", "GET", ccHdr("If-Modified-Since", "yesterday"), 200, stored, false},
		{"§13.1.3 IMS two members", "GET", ccHdr("If-Modified-Since", httpDate(lm), "If-Modified-Since", httpDate(lm)), 200, stored, false},
		{"§13.1.3 IMS only for GET/HEAD", "POST", ccHdr("If-Modified-Since", httpDate(lm)), 200, stored, false},
		{"RFC 9111 §4.3.2 IMS against Date", "GET", ccHdr("If-Modified-Since", httpDate(lm)), 200, ccHdr("Date", httpDate(lm.Add(-time.Minute))), true},
		{"§4.3.2 no Last-Modified or Date", "GET", ccHdr("If-Modified-Since", httpDate(lm)), 200, ccHdr(), false},
		{"§13.2.1 stored 404 ignores preconditions", "GET", ccHdr("If-None-Match", "*"), 404, stored, false},
		{"no conditionals", "GET", ccHdr(), 200, stored, false},
		{"malformed etag list", "GET", ccHdr("If-None-Match", `abc`), 200, stored, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := NotModified(tc.method, tc.req, tc.status, tc.stored); got != tc.want {
				t.Fatalf("NotModified(%s, %v, %d, %v) = %v", tc.method, tc.req, tc.status, tc.stored, got)
			}
		})
	}
}

func TestNotModifiedHeader(t *testing.T) {
	// RFC 9110 §15.4.5.
	stored := ccHdr("ETag", `"a"`, "Last-Modified", freshT0Str, "Content-Type", "text/html", "Content-Length", "5",
		"Cache-Control", "max-age=60", "Vary", "Accept-Encoding", "Date", freshT0Str)
	want := ccHdr("ETag", `"a"`, "Cache-Control", "max-age=60", "Vary", "Accept-Encoding", "Date", freshT0Str)
	if got := NotModifiedHeader(stored); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	stored.Del("ETag")
	if got := NotModifiedHeader(stored); got.Get("Last-Modified") != freshT0Str {
		t.Errorf("without ETag, Last-Modified should be kept: %v", got)
	}
}

func TestFreshen(t *testing.T) {
	base := func() http.Header {
		return ccHdr("ETag", `"v1"`, "Last-Modified", freshT0Str, "Content-Length", "10", "Content-Type", "text/plain",
			"Cache-Control", "max-age=60", "Date", freshT0Str)
	}
	later := httpDate(freshT0.Add(time.Hour))
	cases := []struct {
		name   string
		stored http.Header
		update http.Header
		ok     bool
		check  map[string]string // field → expected value after
	}{
		{"RFC 9111 §4.3.4 strong match updates", base(),
			ccHdr("ETag", `"v1"`, "Cache-Control", "max-age=600", "Date", later, "Content-Length", "0", "Connection", "X-Hop", "X-Hop", "1", "Keep-Alive", "timeout=5", "Set-Cookie", "a=b"),
			true, map[string]string{"Cache-Control": "max-age=600", "Date": later, "Content-Length": "10", "X-Hop": "", "Keep-Alive": "", "Set-Cookie": "", "Content-Type": "text/plain"}},
		{"§4.3.4 different strong ETag", base(), ccHdr("ETag", `"v2"`, "Cache-Control", "max-age=600"), false,
			map[string]string{"Cache-Control": "max-age=60"}},
		{"§4.3.4 weak 304 matches strong stored", base(), ccHdr("ETag", `W/"v1"`, "Expires", later), true,
			map[string]string{"Expires": later}},
		{"§4.3.4 strong 304 does not match weak stored", ccHdr("ETag", `W/"v1"`), ccHdr("ETag", `"v1"`), false, nil},
		{"§4.3.4 304 ETag but none stored", ccHdr(), ccHdr("ETag", `"v1"`), false, nil},
		{"Last-Modified differs", base(), ccHdr("Last-Modified", later), false, nil},
		{"Last-Modified equal", base(), ccHdr("Last-Modified", freshT0Str, "Age", "3"), true, map[string]string{"Age": "3"}},
		{"§4.3.4 no validators", base(), ccHdr("Cache-Control", "max-age=5"), true, map[string]string{"Cache-Control": "max-age=5"}},
		{"§5.2.2.7 qualified private stripped", base(), ccHdr("Cache-Control", `max-age=5, private="X-User"`, "X-User", "alice"), true,
			map[string]string{"X-User": ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if ok := Freshen(tc.stored, tc.update); ok != tc.ok {
				t.Fatalf("Freshen = %v, want %v (stored now %v)", ok, tc.ok, tc.stored)
			}
			for k, v := range tc.check {
				if got := tc.stored.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestStripQualifiedFields(t *testing.T) {
	h := ccHdr("Cache-Control", `max-age=60, private="X-User", no-cache="x-session"`, "X-User", "a", "X-Session", "s", "X-Other", "o")
	StripQualifiedFields(h)
	if h.Get("X-User") != "" || h.Get("X-Session") != "" || h.Get("X-Other") != "o" {
		t.Errorf("got %v", h)
	}
}

func TestFreshnessRoundTrip(t *testing.T) {
	// A response stored at freshT0 with max-age=60 under Coral's policy: fresh
	// for MinTTL (5 min) measured as age, stale after.
	resp := ccHdr("Cache-Control", "max-age=60", "Date", freshT0Str)
	freshFor, _ := Lifetime(coralPolicy, freshT0, 200, resp)
	cc := ParseCacheControl(resp)
	for _, tc := range []struct {
		after time.Duration
		serve bool
	}{{time.Minute, true}, {4 * time.Minute, true}, {5 * time.Minute, false}, {time.Hour, false}} {
		age := CurrentAge(resp, freshT0, freshT0, freshT0.Add(tc.after))
		if serve, _ := RequestAllows(CacheControl{}, cc, age, freshFor); serve != tc.serve {
			t.Errorf("after %v: serve = %v", tc.after, serve)
		}
	}
	// A peer's copy that is already 4 min old stays fresh 1 more minute,
	// not 5: MinTTL is measured from the origin.
	peer := ccHdr("Cache-Control", "max-age=60", "Date", freshT0Str, "Age", "240")
	freshFor, _ = Lifetime(coralPolicy, freshT0.Add(4*time.Minute), 200, peer)
	age := CurrentAge(peer, freshT0.Add(4*time.Minute), freshT0.Add(4*time.Minute), freshT0.Add(5*time.Minute+time.Second))
	if serve, _ := RequestAllows(CacheControl{}, cc, age, freshFor); serve {
		t.Errorf("peer copy fresh beyond MinTTL: age %v freshFor %v", age, freshFor)
	}
}

func FuzzParseCacheControl(f *testing.F) {
	for _, s := range []string{
		"max-age=60, public", `no-cache="a,b", private="c"`, `ext="\"", max-stale`, "s-maxage=99999999999999999999",
		`max-age="`, `=,=,"`, "min-fresh=1, min-fresh=2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cc := parseCacheControlValue(s)
		for _, d := range []time.Duration{cc.MaxAge, cc.SMaxAge, cc.MinFresh, cc.MaxStale, cc.StaleWhileRevalidate, cc.StaleIfError} {
			if d < 0 || d > MaxDelta {
				t.Fatalf("%q: duration %v out of range", s, d)
			}
		}
		h := http.Header{"Cache-Control": {s}}
		Lifetime(coralPolicy, freshT0, 200, h)
		StaleWindows(h)
		StripQualifiedFields(h)
	})
}
