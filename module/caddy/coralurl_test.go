package coralcaddy

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestParseCoralized(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	// 4 labels of 63 + 3 dots = 255 > 253; 3 of 63 + "com" = 195.
	tooLong := strings.Join([]string{long63, long63, long63, long63}, ".")
	okLong := strings.Join([]string{long63, long63, long63, "com"}, ".")
	cases := []struct {
		name, host, zone string
		origin           string
		port             int
		err              error
	}{
		{"plain", "www.example.com.nyud.net", "nyud.net", "www.example.com", 0, nil},
		{"proxy port ignored", "www.example.com.nyud.net:8080", "nyud.net", "www.example.com", 0, nil},
		{"empty proxy port", "www.example.com.nyud.net:", "nyud.net", "www.example.com", 0, nil},
		{"trailing dot", "www.example.com.nyud.net.", "nyud.net", "www.example.com", 0, nil},
		{"trailing dot and port", "www.example.com.nyud.net.:80", "nyud.net", "www.example.com", 0, nil},
		{"upper case", "WWW.Example.COM.NYUD.Net", "nyud.net", "www.example.com", 0, nil},
		{"zone normalized", "www.example.com.nyud.net", ".NYUD.NET.", "www.example.com", 0, nil},
		{"origin port", "www.example.com.8080.nyud.net", "nyud.net", "www.example.com", 8080, nil},
		{"origin port 80 kept", "www.example.com.80.nyud.net", "nyud.net", "www.example.com", 80, nil},
		{"origin port 65535", "example.com.65535.nyud.net", "nyud.net", "example.com", 65535, nil},
		{"origin port 1", "example.com.1.nyud.net", "nyud.net", "example.com", 1, nil},
		{"punycode", "xn--bcher-kva.example.nyud.net", "nyud.net", "xn--bcher-kva.example", 0, nil},
		{"underscore in sub-domain", "my_site.example.com.nyud.net", "nyud.net", "my_site.example.com", 0, nil},
		{"digits in labels", "1st.example.com.nyud.net", "nyud.net", "1st.example.com", 0, nil},
		{"63-char label", long63 + ".com.nyud.net", "nyud.net", long63 + ".com", 0, nil},
		{"253-char origin", okLong + ".nyud.net", "nyud.net", okLong, 0, nil},
		{"multi-label zone", "example.com.cdn.example.org", "cdn.example.org", "example.com", 0, nil},

		// IP literal origins are returned for the handler's address policy.
		{"ipv4 origin", "127.0.0.1.nyud.net", "nyud.net", "127.0.0.1", 0, nil},
		{"ipv4 origin with port", "127.0.0.1.8080.nyud.net", "nyud.net", "127.0.0.1", 8080, nil},
		{"ipv4 origin port 80", "10.1.2.3.80.nyud.net", "nyud.net", "10.1.2.3", 80, nil},
		{"ipv4 leading zero", "127.000.0.1.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"ipv4 short form", "127.1.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"ipv4 octal form", "0177.0.0.1.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"ipv4 out of range", "256.0.0.1.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"three numbers", "1.2.3.nyud.net", "nyud.net", "", 0, ErrBadHost},

		// Not under the zone.
		{"other domain", "www.example.com", "nyud.net", "", 0, ErrNotCoralized},
		{"suffix without dot", "www.examplenyud.net", "nyud.net", "", 0, ErrNotCoralized},
		{"zone not at end", "nyud.net.example.com", "nyud.net", "", 0, ErrNotCoralized},
		{"empty host", "", "nyud.net", "", 0, ErrNotCoralized},
		{"ipv6 literal", "[::1]", "nyud.net", "", 0, ErrNotCoralized},
		{"ipv6 literal with port", "[2001:db8::1]:8080", "nyud.net", "", 0, ErrNotCoralized},
		{"ipv4 proxy address", "192.0.2.1:8080", "nyud.net", "", 0, ErrNotCoralized},
		{"kelvin sign does not fold", "a.nyud.ne\u212a", "nyud.net", "", 0, ErrNotCoralized},
		{"percent-encoded dot before zone", "a%2Enyud.net", "nyud.net", "", 0, ErrNotCoralized},

		// Loops: the zone inside the origin.
		{"zone twice", "a.nyud.net.nyud.net", "nyud.net", "", 0, ErrLoop},
		{"zone inside", "x.nyud.net.example.com.nyud.net", "nyud.net", "", 0, ErrLoop},
		{"zone at start", "nyud.net.example.com.nyud.net", "nyud.net", "", 0, ErrLoop},
		{"zone twice with port", "a.nyud.net.8080.nyud.net", "nyud.net", "", 0, ErrLoop},
		{"zone twice mixed case", "a.NYUD.net.nyud.net", "nyud.net", "", 0, ErrLoop},
		{"zone only twice", "nyud.net.nyud.net", "nyud.net", "", 0, ErrLoop},
		{"zone-like label is fine", "nyud.network.nyud.net", "nyud.net", "nyud.network", 0, nil},

		// Malformed.
		{"zone only", "nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"zone only with port", "NYUD.NET:80", "nyud.net", "", 0, ErrBadHost},
		{"empty origin label", ".nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"empty label inside", "www..example.com.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"leading dot", ".example.com.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"two trailing dots", "example.com.nyud.net..", "nyud.net", "", 0, ErrNotCoralized},
		{"single label", "localhost.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"single label with port", "localhost.8080.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"hex single label", "0x7f000001.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"port only", "8080.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"port zero", "example.com.0.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"port leading zero", "example.com.080.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"port too big", "example.com.65536.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"port huge", "example.com.99999999999999999999.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"numeric tld", "example.123.456.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"label too long", long63 + "a.com.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"origin too long", tooLong + ".nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"host header too long", strings.Repeat("a.", 600) + "nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"leading hyphen", "-a.example.com.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"trailing hyphen", "a-.example.com.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"underscore in tld", "example.c_m.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"nul byte", "a\x00b.example.com.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"space", "a b.example.com.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"percent-encoded dot", "a%2Eb.example.com.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"slash", "a/b.example.com.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"at sign", "user@example.com.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"unicode", "bücher.example.nyud.net", "nyud.net", "", 0, ErrBadHost},
		{"bad proxy port", "example.com.nyud.net:http", "nyud.net", "", 0, ErrBadHost},
		{"proxy port too big", "example.com.nyud.net:70000", "nyud.net", "", 0, ErrBadHost},
		{"two colons", "example.com.nyud.net:80:80", "nyud.net", "", 0, ErrBadHost},
		{"bare ipv6", "::1", "nyud.net", "", 0, ErrBadHost},
		{"ipv6 unterminated", "[::1", "nyud.net", "", 0, ErrBadHost},
		{"ipv6 garbage", "[example.com.nyud.net]", "nyud.net", "", 0, ErrBadHost},
		{"ipv6 junk after", "[::1]x", "nyud.net", "", 0, ErrBadHost},
		{"ipv6 in origin", "::1.nyud.net", "nyud.net", "", 0, ErrBadHost},

		// Bad zones.
		{"empty zone", "example.com.nyud.net", "", "", 0, ErrBadZone},
		{"numeric zone", "example.com.1", "1", "", 0, ErrBadZone},
		{"zone with space", "example.com.nyud net", "nyud net", "", 0, ErrBadZone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			origin, port, err := ParseCoralized(tc.host, tc.zone)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("ParseCoralized(%q, %q) = %q, %d, %v; want error %v", tc.host, tc.zone, origin, port, err, tc.err)
				}
				var he *HostError
				if !errors.As(err, &he) {
					t.Fatalf("error %T is not a *HostError", err)
				}
				if origin != "" || port != 0 {
					t.Errorf("on error got %q, %d; want zero values", origin, port)
				}
				return
			}
			if err != nil || origin != tc.origin || port != tc.port {
				t.Fatalf("ParseCoralized(%q, %q) = %q, %d, %v; want %q, %d", tc.host, tc.zone, origin, port, err, tc.origin, tc.port)
			}
		})
	}
}

func TestCarriesZone(t *testing.T) {
	for _, tc := range []struct {
		host, zone string
		want       bool
	}{
		{"www.example.com.http.l2.l1.l0.nyucd.net", "nyucd.net", true},
		{"WWW.NYUCD.NET.", "nyucd.net", true},
		{"nyucd.net.example.com", "NYUCD.NET", true},
		{"www.example.com", "nyucd.net", false},
		{"xnyucd.net", "nyucd.net", false},
		{"www.example.com", "", false},
	} {
		if got := CarriesZone(tc.host, tc.zone); got != tc.want {
			t.Errorf("CarriesZone(%q, %q) = %v", tc.host, tc.zone, got)
		}
	}
}

func TestStatusForHostError(t *testing.T) {
	for _, tc := range []struct {
		host string
		want int
	}{
		{"www.example.com", http.StatusMisdirectedRequest},
		{"a.nyud.net.nyud.net", http.StatusForbidden},
		{"-a.example.nyud.net", http.StatusBadRequest},
	} {
		_, _, err := ParseCoralized(tc.host, "nyud.net")
		if got := StatusForHostError(err); got != tc.want {
			t.Errorf("%q: status %d, want %d (%v)", tc.host, got, tc.want, err)
		}
	}
	_, _, err := ParseCoralized("a.example.nyud.net", "")
	if got := StatusForHostError(err); got != http.StatusInternalServerError {
		t.Errorf("bad zone: status %d", got)
	}
	if msg := err.Error(); !strings.Contains(msg, "zone") {
		t.Errorf("error message %q", msg)
	}
}

func TestOriginAddr(t *testing.T) {
	for _, tc := range []struct {
		origin   string
		ok       bool
		loopback bool
		private  bool
	}{
		{"127.0.0.1", true, true, false},
		{"10.0.0.1", true, false, true},
		{"192.0.2.7", true, false, false},
		{"www.example.com", false, false, false},
		{"127.1", false, false, false},
		{"", false, false, false},
	} {
		a, ok := OriginAddr(tc.origin)
		if ok != tc.ok || (ok && (a.IsLoopback() != tc.loopback || a.IsPrivate() != tc.private)) {
			t.Errorf("OriginAddr(%q) = %v, %v", tc.origin, a, ok)
		}
	}
}

func TestNormalizeURL(t *testing.T) {
	cases := []struct {
		name              string
		scheme, host      string
		port              int
		path, query, want string
	}{
		{"basic", "http", "www.example.com", 0, "/a.jpg", "", "//www.example.com/a.jpg"},
		{"host case and dot", "HTTP", "WWW.Example.COM.", 0, "/", "", "//www.example.com/"},
		{"empty path", "http", "example.com", 0, "", "", "//example.com/"},
		{"relative path", "http", "example.com", 0, "a/b", "", "//example.com/a/b"},
		{"default http port", "http", "example.com", 80, "/", "", "//example.com/"},
		{"default https port", "https", "example.com", 443, "/", "", "//example.com/"},
		{"https 80 kept", "https", "example.com", 80, "/", "", "//example.com:80/"},
		{"http 443 kept", "http", "example.com", 443, "/", "", "//example.com:443/"},
		{"other port", "http", "example.com", 8080, "/", "", "//example.com:8080/"},
		{"negative port is default", "http", "example.com", -1, "/", "", "//example.com/"},
		{"scheme independent", "https", "example.com", 0, "/x", "", "//example.com/x"},
		{"ipv6 host", "http", "2001:DB8::1", 8080, "/", "", "//[2001:db8::1]:8080/"},
		{"ipv6 bracketed", "http", "[::1]", 0, "/", "", "//[::1]/"},
		{"host cannot run into path", "http", "a/b", 0, "/c", "", "//a%2Fb/c"},

		// RFC 3986 §6.2.2.2: percent-encoding normalization.
		{"hex upper", "http", "h.com", 0, "/a%2fb%3a", "", "//h.com/a%2Fb%3A"},
		{"decode unreserved", "http", "h.com", 0, "/%7Euser/%41%62%2D%2E%5F", "", "//h.com/~user/Ab-._"},
		{"reserved stays encoded", "http", "h.com", 0, "/a%2Fb", "", "//h.com/a%2Fb"},
		{"stray percent", "http", "h.com", 0, "/100%", "", "//h.com/100%25"},
		{"bad escape", "http", "h.com", 0, "/%zz%4", "", "//h.com/%25zz%254"},
		{"encode space and unicode", "http", "h.com", 0, "/a b/ü", "", "//h.com/a%20b/%C3%BC"},
		{"encode nul", "http", "h.com", 0, "/a\x00", "", "//h.com/a%00"},
		{"sub-delims kept", "http", "h.com", 0, "/!$&'()*+,;=:@", "", "//h.com/!$&'()*+,;=:@"},

		// RFC 3986 §5.2.4: dot segments.
		{"dot segments", "http", "h.com", 0, "/a/b/c/./../../g", "", "//h.com/a/g"},
		{"climb above root", "http", "h.com", 0, "/../../etc/passwd", "", "//h.com/etc/passwd"},
		{"only dots", "http", "h.com", 0, "/..", "", "//h.com/"},
		{"trailing dotdot", "http", "h.com", 0, "/a/b/..", "", "//h.com/a/"},
		{"trailing dot", "http", "h.com", 0, "/a/.", "", "//h.com/a/"},
		{"encoded dots", "http", "h.com", 0, "/a/%2e%2E/b", "", "//h.com/b"},
		{"double slash kept", "http", "h.com", 0, "/a//b/", "", "//h.com/a//b/"},
		{"dots in names kept", "http", "h.com", 0, "/a/.../b..c", "", "//h.com/a/.../b..c"},

		// Query: order kept, nothing dropped; fragment dropped.
		{"query kept", "http", "h.com", 0, "/", "b=2&a=1&a=&c", "//h.com/?b=2&a=1&a=&c"},
		{"query plus kept", "http", "h.com", 0, "/", "q=a+b%20c", "//h.com/?q=a+b%20c"},
		{"query escapes", "http", "h.com", 0, "/", "x=%7e%2f", "//h.com/?x=~%2F"},
		{"query encodes", "http", "h.com", 0, "/", "x=a b\"", "//h.com/?x=a%20b%22"},
		{"query question mark", "http", "h.com", 0, "/", "a=?/", "//h.com/?a=?/"},
		{"fragment in path", "http", "h.com", 0, "/a#frag", "", "//h.com/a"},
		{"fragment in query", "http", "h.com", 0, "/a", "x=1#frag", "//h.com/a?x=1"},
		{"encoded hash is data", "http", "h.com", 0, "/a%23b", "", "//h.com/a%23b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := NormalizeURL(tc.scheme, tc.host, tc.port, tc.path, tc.query)
			if got != tc.want {
				t.Fatalf("NormalizeURL(%q, %q, %d, %q, %q) = %q, want %q", tc.scheme, tc.host, tc.port, tc.path, tc.query, got, tc.want)
			}
			sum := sha1.Sum([]byte(got))
			if key := CacheKey(tc.scheme, tc.host, tc.port, tc.path, tc.query); key != hex.EncodeToString(sum[:]) {
				t.Fatalf("CacheKey = %s, not SHA-1 of %q", key, got)
			}
		})
	}
}

func TestCacheKeyEquivalence(t *testing.T) {
	same := [][5]any{
		{"http", "www.example.com", 0, "/a.jpg", ""},
		{"HTTP", "WWW.EXAMPLE.COM.", 80, "/a.jpg", ""},
		{"https", "www.example.com", 443, "/x/../a.jpg", ""},
		{"https", "www.example.com", 0, "/%61.jpg", ""},
		{"http", "www.example.com", 0, "/./a.jpg#top", ""},
	}
	key := func(v [5]any) string {
		return CacheKey(v[0].(string), v[1].(string), v[2].(int), v[3].(string), v[4].(string))
	}
	want := key(same[0])
	if len(want) != 40 {
		t.Fatalf("key %q is not 40 hex digits", want)
	}
	for _, v := range same[1:] {
		if got := key(v); got != want {
			t.Errorf("key%v = %s, want %s", v, got, want)
		}
	}
	different := [][5]any{
		{"http", "www.example.com", 8080, "/a.jpg", ""},
		{"http", "example.com", 0, "/a.jpg", ""},
		{"http", "www.example.com", 0, "/A.jpg", ""},
		{"http", "www.example.com", 0, "/a.jpg", "v=1"},
		{"http", "www.example.com", 0, "/a.jpg/", ""},
		{"http", "www.example.com", 0, "/a%2Ejpg%2F", ""},
	}
	for _, v := range different {
		if got := key(v); got == want {
			t.Errorf("key%v collides with the base key", v)
		}
	}
}

func TestTarget(t *testing.T) {
	tg, err := ParseTarget("WWW.Example.com.8080.nyud.net:80", "nyud.net", "/a/../b%7e", "x=1")
	if err != nil {
		t.Fatal(err)
	}
	want := Target{Host: "www.example.com", Port: 8080, Scheme: "http", Path: "/a/../b%7e", RawQuery: "x=1"}
	if tg != want {
		t.Fatalf("ParseTarget = %+v, want %+v", tg, want)
	}
	if got := tg.OriginURL().String(); got != "http://www.example.com:8080/b~?x=1" {
		t.Errorf("OriginURL = %q", got)
	}
	if got := tg.NormalizedURL(); got != "//www.example.com:8080/b~?x=1" {
		t.Errorf("NormalizedURL = %q", got)
	}
	if tg.Key() != CacheKey("http", "www.example.com", 8080, "/b~", "x=1") {
		t.Errorf("Key differs from CacheKey")
	}
	if got := tg.CoralHost("NYUD.NET."); got != "www.example.com.8080.nyud.net" {
		t.Errorf("CoralHost = %q", got)
	}
	tg.Scheme, tg.Port = "https", 443
	if got := tg.OriginURL().String(); got != "https://www.example.com/b~?x=1" {
		t.Errorf("https OriginURL = %q", got)
	}
	tg.Scheme = ""
	if got := tg.OriginURL().String(); got != "http://www.example.com:443/b~?x=1" {
		t.Errorf("default-scheme OriginURL = %q", got)
	}
	if _, err := ParseTarget("example.com", "nyud.net", "/", ""); !errors.Is(err, ErrNotCoralized) {
		t.Errorf("ParseTarget outside the zone: %v", err)
	}
}

// checkParseConsistent checks ParseCoralized's invariants for one input.
func checkParseConsistent(t *testing.T, host, zone string) {
	origin, port, err := ParseCoralized(host, zone)
	if err != nil {
		if !errors.Is(err, ErrNotCoralized) && !errors.Is(err, ErrLoop) && !errors.Is(err, ErrBadHost) && !errors.Is(err, ErrBadZone) {
			t.Fatalf("ParseCoralized(%q, %q): unclassified error %v", host, zone, err)
		}
		if origin != "" || port != 0 {
			t.Fatalf("ParseCoralized(%q, %q): non-zero results with error", host, zone)
		}
		return
	}
	if origin == "" || origin != strings.ToLower(origin) || strings.HasSuffix(origin, ".") || len(origin) > 253 {
		t.Fatalf("ParseCoralized(%q, %q): bad origin %q", host, zone, origin)
	}
	if port < 0 || port > 65535 {
		t.Fatalf("ParseCoralized(%q, %q): bad port %d", host, zone, port)
	}
	for i := 0; i < len(origin); i++ {
		if c := origin[i]; c >= 0x80 || c <= ' ' || strings.IndexByte("/%:@[]?#", c) >= 0 {
			t.Fatalf("ParseCoralized(%q, %q): origin %q has %q", host, zone, origin, c)
		}
	}
	if a, ok := OriginAddr(origin); ok && (!a.Is4() || a.String() != origin) {
		t.Fatalf("ParseCoralized(%q, %q): IP origin %q is not canonical IPv4", host, zone, origin)
	}
	if CarriesZone(origin, zone) {
		t.Fatalf("ParseCoralized(%q, %q): origin %q carries the zone", host, zone, origin)
	}
	rebuilt := CoralizeHost(origin, port, zone)
	for _, h := range []string{rebuilt, strings.ToUpper(rebuilt) + ".", rebuilt + ":8080"} {
		o2, p2, err := ParseCoralized(h, zone)
		if err != nil || o2 != origin || p2 != port {
			t.Fatalf("ParseCoralized(%q, %q) = %q, %d; rebuilt %q parses as %q, %d, %v", host, zone, origin, port, h, o2, p2, err)
		}
	}
}

func FuzzParseCoralized(f *testing.F) {
	for _, s := range []string{
		"www.example.com.nyud.net", "www.example.com.8080.nyud.net:80", "127.0.0.1.nyud.net",
		"127.0.0.1.8080.nyud.net.", "a.nyud.net.nyud.net", "x.nyud.net.example.com.nyud.net",
		"[::1]:80", "nyud.net", ".nyud.net", "EXAMPLE.COM.NYUD.NET", "my_site.example.com.nyud.net",
		"1.2.3.nyud.net", "a\x00.nyud.net", "bücher.de.nyud.net", "example.com.080.nyud.net",
	} {
		f.Add(s, "nyud.net")
	}
	f.Add("example.com.cdn.example.org", "cdn.example.org.")
	f.Fuzz(func(t *testing.T, host, zone string) {
		checkParseConsistent(t, host, zone)
	})
}

func TestParseCoralizedConsistency(t *testing.T) {
	// The fuzz invariants over the table inputs, so plain "go test"
	// exercises them.
	for _, h := range []string{
		"www.example.com.nyud.net", "www.example.com.8080.nyud.net:80", "127.0.0.1.nyud.net",
		"10.0.0.1.65535.nyud.net", "my_site.example.com.nyud.net.", "xn--bcher-kva.example.nyud.net",
	} {
		checkParseConsistent(t, h, "nyud.net")
	}
}

// checkNormalizeIdempotent checks NormalizeURL's invariants for one input.
func checkNormalizeIdempotent(t *testing.T, scheme, host string, port int, path, query string) {
	n := NormalizeURL(scheme, host, port, path, query)
	h, p, q := normalizeHost(host), normalizePath(path), normalizeQuery(query)
	if normalizeHost(h) != h || normalizePath(p) != p || normalizeQuery(q) != q {
		t.Fatalf("not idempotent: host %q→%q→%q, path %q→%q→%q, query %q→%q→%q",
			host, h, normalizeHost(h), path, p, normalizePath(p), query, q, normalizeQuery(q))
	}
	if n2 := NormalizeURL(scheme, h, port, p, q); n2 != n {
		t.Fatalf("NormalizeURL not idempotent: %q then %q", n, n2)
	}
	if !strings.HasPrefix(n, "//") || !strings.HasPrefix(p, "/") {
		t.Fatalf("NormalizeURL = %q, path %q", n, p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			t.Fatalf("dot segment left in %q", p)
		}
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; c <= ' ' || c >= 0x7f || c == '#' {
			t.Fatalf("NormalizeURL = %q has byte %#x", n, c)
		}
	}
	sum := sha1.Sum([]byte(n))
	if k := CacheKey(scheme, host, port, path, query); k != hex.EncodeToString(sum[:]) {
		t.Fatalf("CacheKey is not SHA-1 of NormalizeURL")
	}
}

func FuzzCacheKey(f *testing.F) {
	f.Add("http", "www.example.com", 0, "/a.jpg", "")
	f.Add("https", "WWW.Example.COM.", 443, "/a/./b/../c%7e%2f", "b=2&a=1#frag")
	f.Add("http", "[::1]", 8080, "/../..", "x=%zz")
	f.Add("", "a%2E", -5, "%2e%2E/x", "?#")
	f.Add("HTTP", "h.com", 80, "/a b/ü\x00", "q=a+b")
	f.Fuzz(func(t *testing.T, scheme, host string, port int, path, query string) {
		checkNormalizeIdempotent(t, scheme, host, port, path, query)
	})
}
