package proxy

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
)

// Freshness (RFC 9111 §4.2) and what may be stored (§3), in strict mode
// and, where Coral departs, in Coral's deployed policy.
func TestRFCFreshness(t *testing.T) {
	with := func(h ...string) rfcResponse { return rfcResponse{header: append([]string{"Date", "@0"}, h...)} }
	status := func(code int, h ...string) rfcResponse {
		return rfcResponse{status: code, header: append([]string{"Date", "@0"}, h...)}
	}
	runRFCCases(t, []rfcCase{
		{name: "max-age: fresh, then stale", section: "RFC 9111 §4.2.1", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=60"), origin: true},
			// 10 s short of max-age, not 1 s: the harness ages the copy,
			// then the request runs in real time, which took longer than
			// the second left under load with GOMAXPROCS=1 (stale at
			// "59 s").
			{advance: 50 * time.Second, origin: false, want: rfcWant{body: "body 1"}},
			{advance: 11 * time.Second, resp: with("Cache-Control", "max-age=60"), origin: true, want: rfcWant{body: "body 2"}},
		}},
		{name: "s-maxage before max-age", section: "RFC 9111 §4.2.1, §5.2.2.10", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=1, s-maxage=60"), origin: true},
			{advance: 30 * time.Second, origin: false},
		}},
		{name: "max-age before Expires", section: "RFC 9111 §4.2.1", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=1", "Expires", "@+1h"), origin: true},
			{advance: 2 * time.Second, origin: true},
		}},
		{name: "Expires minus Date", section: "RFC 9111 §4.2.1", steps: []rfcStep{
			{resp: with("Expires", "@+60s"), origin: true},
			{advance: 30 * time.Second, origin: false},
			{advance: 31 * time.Second, origin: true},
		}},
		{name: "an invalid Expires is already expired", section: "RFC 9111 §5.3", steps: []rfcStep{
			{resp: with("Expires", "0"), origin: true},
			{origin: true},
		}},
		{name: "Expires with a one-digit hour is invalid", section: "RFC 9111 §5.3, RFC 9110 §5.6.7", steps: []rfcStep{
			{resp: with("Expires", "Thu, 18 Aug 2050 2:01:18 GMT"), origin: true},
			{origin: true},
		}},
		{name: "Expires with runs of spaces is invalid", section: "RFC 9111 §5.3, RFC 9110 §5.6.7", steps: []rfcStep{
			{resp: with("Expires", "Thu, 18  Aug  2050 02:01:18 GMT"), origin: true},
			{origin: true},
		}},
		{name: "Expires in rfc850 form is accepted", section: "RFC 9110 §5.6.7", steps: []rfcStep{
			{resp: with("Expires", "Thursday, 18-Aug-50 02:01:18 GMT"), origin: true},
			{origin: false},
		}},
		{name: "no freshness information: not reused in strict mode", section: "RFC 9111 §4.2.2", steps: []rfcStep{
			{resp: with("Last-Modified", "@-240h"), origin: true},
			{origin: true},
		}},
		{name: "no freshness information: default_ttl in Coral's policy", section: "Coral policy (RFC 9111 §4.2.2 heuristic)", coral: true, steps: []rfcStep{
			{resp: with(), origin: true},
			{advance: 11 * time.Hour, origin: false},
			{advance: 2 * time.Hour, origin: true},
		}},
		{name: "no-cache: revalidated every time in strict mode", section: "RFC 9111 §5.2.2.4", steps: []rfcStep{
			{resp: with("Cache-Control", "no-cache, max-age=3600", "ETag", `"e"`), origin: true},
			{resp: status(http.StatusNotModified, "ETag", `"e"`), origin: true, want: rfcWant{conditional: true, body: "body 1"}},
		}},
		{name: "no-cache: Coral's min_ttl overrides it", section: "Coral policy (min_ttl)", coral: true, steps: []rfcStep{
			{resp: with("Cache-Control", "no-cache, max-age=3600"), origin: true},
			{advance: 4 * time.Minute, origin: false},
		}},
		{name: "a 503 with max-age is stored for exactly that", section: "RFC 9111 §3", steps: []rfcStep{
			{resp: status(503, "Cache-Control", "max-age=60"), origin: true, want: rfcWant{status: 503}},
			{advance: 30 * time.Second, origin: false, want: rfcWant{status: 503}},
			{advance: 31 * time.Second, origin: true},
		}},
		{name: "a 503 with max-age is not stretched to Coral's minimum", section: "RFC 9111 §3, Coral policy", coral: true, steps: []rfcStep{
			{resp: status(503, "Cache-Control", "max-age=10"), origin: true, want: rfcWant{status: 503}},
			{advance: 11 * time.Second, origin: true},
		}},
		{name: "a 500 without freshness is not stored", section: "RFC 9111 §3", coral: true, steps: []rfcStep{
			{resp: status(500), origin: true, want: rfcWant{status: 500}},
			{origin: true},
		}},
		{name: "a public 502 without freshness is not stored (Coral's choice)", section: "RFC 9111 §3", coral: true, steps: []rfcStep{
			{resp: status(502, "Cache-Control", "public"), origin: true, want: rfcWant{status: 502}},
			{origin: true},
		}},
		{name: "an unknown status with max-age is stored", section: "RFC 9111 §3", steps: []rfcStep{
			{resp: status(599, "Cache-Control", "max-age=60"), origin: true, want: rfcWant{status: 599}},
			{origin: false, want: rfcWant{status: 599}},
		}},
		{name: "an unknown status with no-store, must-understand is not stored", section: "RFC 9111 §5.2.2.3", steps: []rfcStep{
			{resp: status(599, "Cache-Control", "max-age=60, no-store, must-understand"), origin: true, want: rfcWant{status: 599}},
			{origin: true, want: rfcWant{status: 200}},
		}},
		{name: "a 404 the origin declares fresh is kept as long as it says", section: "RFC 9110 §15.1, Coral policy", coral: true, steps: []rfcStep{
			{resp: status(404, "Cache-Control", "max-age=900"), origin: true, want: rfcWant{status: 404}},
			{advance: 14 * time.Minute, origin: false, want: rfcWant{status: 404}},
			{advance: 2 * time.Minute, origin: true},
		}},
		{name: "a bare 404 is kept for the negative lifetime (the origin gives it without the client's fields too)", section: "RFC 9111 §4.2.2, RFC 9110 §15.1, Coral policy", coral: true, steps: []rfcStep{
			{resp: status(404), origin: true, want: rfcWant{status: 404}},
			{advance: httpcache.DefaultNegativeTTL - time.Second, origin: false, want: rfcWant{status: 404}},
			{advance: 2 * time.Second, resp: status(404), origin: true, want: rfcWant{status: 404}},
		}},
		{name: "private is never stored", section: "RFC 9111 §5.2.2.7", coral: true, steps: []rfcStep{
			{resp: with("Cache-Control", "private, max-age=3600"), origin: true},
			{origin: true},
		}},
		{name: "no-store is never stored", section: "RFC 9111 §5.2.2.5", coral: true, steps: []rfcStep{
			{resp: with("Cache-Control", "no-store, max-age=3600"), origin: true},
			{origin: true},
		}},
		{name: "request max-age=0 is a preference the proxy declines (a flash crowd's reloads)", section: "RFC 9111 §5.2.1", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=3600", "ETag", `"x"`), origin: true},
			{req: []string{"Cache-Control", "max-age=0"}, resp: status(http.StatusNotModified, "ETag", `"x"`), origin: false},
		}},
		{name: "only-if-cached of a stale response: 504, no origin contact", section: "RFC 9111 §5.2.1.7", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=1"), origin: true},
			{advance: 2 * time.Second, req: []string{"Cache-Control", "only-if-cached"}, origin: false, want: rfcWant{status: http.StatusGatewayTimeout}},
		}},
	})
}

// TestRFCNoCollapseOfStaleResponses: a request that arrives while a
// response is downloading joins it only if the response may be reused:
// one that is stale as it arrives (max-age=0 in strict mode) answers the
// request that fetched it, and the later request gets its own (RFC 9111
// §4). A fresh one is shared, which is what absorbs a flash crowd.
func TestRFCNoCollapseOfStaleResponses(t *testing.T) {
	for _, tc := range []struct {
		cc      string
		fetches int
	}{
		{"max-age=0", 2},
		{"max-age=60", 1},
	} {
		t.Run(tc.cc, func(t *testing.T) {
			gate := make(chan struct{})
			origin := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", tc.cc)
				w.Header().Set("Content-Length", "8")
				w.WriteHeader(http.StatusOK)
				io.WriteString(w, "half")
				w.(http.Flusher).Flush()
				select {
				case <-gate:
				case <-r.Context().Done():
				}
				io.WriteString(w, "done")
			})
			p := startLocalProxy(t, 0, func(c *Config, _ *diskcache.Options) {
				c.Policy.DefaultTTL, c.Policy.MinTTL = 0, 0
			})
			first := make(chan string, 1)
			go func() { _, body := p.get(t, origin.coralHost(), "/x"); first <- body }()
			for len(origin.requests()) == 0 {
				time.Sleep(time.Millisecond)
			}
			// The first download is under way (half its body is in).
			tg, _ := parseTarget(origin.coralHost(), "nyud.test", "/x", "")
			for {
				if rd, ok := p.store.Get(tg.Key()); ok {
					rd.Close()
					break
				}
				time.Sleep(time.Millisecond)
			}
			second := make(chan string, 1)
			go func() { _, body := p.get(t, origin.coralHost(), "/x"); second <- body }()
			if tc.fetches == 2 {
				// The second request must reach the origin while the
				// first download is still held.
				deadline := time.Now().Add(10 * time.Second)
				for len(origin.requests()) < 2 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
			close(gate)
			if a, b := <-first, <-second; a != "halfdone" || b != "halfdone" {
				t.Errorf("bodies %q, %q", a, b)
			}
			if n := len(origin.requests()); n != tc.fetches {
				t.Errorf("origin asked %d times, want %d", n, tc.fetches)
			}
		})
	}
}
