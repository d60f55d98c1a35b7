package coralname

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// The exported functions not covered by the host and origin tables, each
// with the hostile inputs a proxy or name server meets.

func TestNormalizeZone(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nyud.net", "nyud.net"},
		{"NYUD.Net.", "nyud.net"},
		{".nyud.net", "nyud.net"},
		{"cdn.example.org", "cdn.example.org"},
		{"my_zone.example", "my_zone.example"},
	} {
		if got, err := NormalizeZone(tc.in); err != nil || got != tc.want {
			t.Errorf("NormalizeZone(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", ".", "..", "1", "nyud.123", "nyud net", "nyud..net", "-nyud.net",
		"nyud.ne\u212a", "ny\x00ud.net", "nyud.n_t", strings.Repeat("a.", 127) + "net", strings.Repeat("a", 64) + ".net"} {
		_, err := NormalizeZone(bad)
		var e *Error
		if !errors.Is(err, ErrBadZone) || !errors.As(err, &e) || e.Host != bad {
			t.Errorf("NormalizeZone(%q): %v, want ErrBadZone naming the input", bad, err)
		}
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
		{"nyucd.net", ".nyucd.net.", true},
		{"www.example.com", "nyucd.net", false},
		{"xnyucd.net", "nyucd.net", false},
		{"nyucd.network", "nyucd.net", false},
		{"nyucd.ne\u212a", "nyucd.net", false}, // no Unicode folding
		{"www.example.com", "", false},         // an invalid zone is carried by nothing
		{"a..b", "..", false},
	} {
		if got := CarriesZone(tc.host, tc.zone); got != tc.want {
			t.Errorf("CarriesZone(%q, %q) = %v", tc.host, tc.zone, got)
		}
	}
}

// TestAbove: the empty non-terminals above Coralized names (RFC 8020).
func TestAbove(t *testing.T) {
	zs := NewZones("nyud.net", "nyucd.net")
	for _, tc := range []struct {
		rel  string
		want bool
	}{
		{"com", true},
		{"example.com", true}, // ParseOrigin accepts it; Above only says it may lie above
		{"8080", true},        // "www.example.com.8080" ends in it
		{"COM", true},
		{"", false},
		{"nyud.net", false},
		{"a.nyucd.net.com", false},
		{"-com", false},
		{"c m", false},
		{"c\x00m", false},
		{strings.Repeat("a.", 127) + "com", false},
	} {
		if got := zs.Above(tc.rel); got != tc.want {
			t.Errorf("Above(%q) = %v, want %v", tc.rel, got, tc.want)
		}
	}
}

func TestNewZones(t *testing.T) {
	zs := NewZones("NYUD.net.", "", ".", ".nyucd.net")
	if len(zs) != 2 || zs[0] != "nyud.net" || zs[1] != "nyucd.net" {
		t.Fatalf("NewZones = %q", zs)
	}
	if !zs.Carried("A.NYUCD.NET.") || zs.Carried("nyud.network") {
		t.Error("Carried disagrees with the normalized zones")
	}
	if NewZones().Carried("nyud.net") {
		t.Error("no zones carry something")
	}
}

func TestCanonicalHost(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"www.example.com", "www.example.com"},
		{"WWW.Example.COM.", "www.example.com"},
		{"example.com...", "example.com"},
		{"...", ""},
		{"", ""},
		{"EXAMPLE.CO\u212a", "example.co\u212a"}, // the Kelvin sign is not a 'k'
	} {
		if got := CanonicalHost(tc.in); got != tc.want {
			t.Errorf("CanonicalHost(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { CanonicalHost("www.example.com.") }); n != 0 {
		t.Errorf("CanonicalHost of a lower-case name allocates %v times", n)
	}
}

func TestCheckDomain(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	for _, tc := range []struct {
		in, want string
		ipv4     bool
	}{
		{"example.com", "example.com", false},
		{"Example.COM.", "example.com", false},
		{"com", "com", false}, // a whole top-level domain may be listed
		{"my_site.example.com", "my_site.example.com", false},
		{"xn--bcher-kva.de", "xn--bcher-kva.de", false},
		{"192.0.2.7", "192.0.2.7", true},
		{"1st.example", "1st.example", false},
		{strings.Join([]string{long63, long63, long63, "com"}, "."), strings.Join([]string{long63, long63, long63, "com"}, "."), false},
	} {
		got, ipv4, err := CheckDomain(tc.in)
		if err != nil || got != tc.want || ipv4 != tc.ipv4 {
			t.Errorf("CheckDomain(%q) = %q, %v, %v; want %q, %v", tc.in, got, ipv4, err, tc.want, tc.ipv4)
		}
	}
	for _, tc := range []struct{ in, detail string }{
		{"", "no name"},
		{".", "no name"},
		{"example.com..", "empty label"},
		{"a..b", "empty label"},
		{"-a.com", "label starts or ends with '-'"},
		{"a b.com", "invalid character ' ' in label"},
		{"a\x00.com", `invalid character '\x00' in label`},
		{"bücher.de", "non-ASCII host (send IDNs as punycode)"},
		{"example.c_m", "invalid character '_' in label"},
		{"example.123", "numeric top-level label (not a name, nor an IPv4 address in dotted-quad form)"},
		{"192.0.2.07", "numeric top-level label (not a name, nor an IPv4 address in dotted-quad form)"},
		{"256.0.0.1", "numeric top-level label (not a name, nor an IPv4 address in dotted-quad form)"},
		{long63 + "a.com", "label longer than 63 characters"},
		{strings.Repeat("a.", 127) + "com", "name longer than 253 characters"},
		{"*.example.com", "invalid character '*' in label"},
	} {
		_, _, err := CheckDomain(tc.in)
		var e *Error
		if !errors.As(err, &e) || e.Err != ErrBadHost || e.Detail != tc.detail || e.Host != tc.in {
			t.Errorf("CheckDomain(%q): %v; want ErrBadHost %q", tc.in, err, tc.detail)
		}
	}
}

func TestDefaultPort(t *testing.T) {
	for scheme, want := range map[string]int{"http": 80, "": 80, "https": 443, "ftp": 0, "HTTP": 0, "ws": 0} {
		if got := DefaultPort(scheme); got != want {
			t.Errorf("DefaultPort(%q) = %d, want %d", scheme, got, want)
		}
	}
}

func TestURLPort(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		port int
		ok   bool
	}{
		{"http://example.com/", 0, true},
		{"http://example.com:80/", 0, true},
		{"HTTP://example.com:80/", 0, true},
		{"https://example.com:443/", 0, true},
		{"https://example.com:80/", 80, true},
		{"http://example.com:8080/", 8080, true},
		{"http://example.com:65535/", 65535, true},
		{"http://example.com:/", 0, true}, // an empty port is no port (RFC 3986)
		{"http://example.com:0/", 0, false},
		{"http://example.com:08080/", 0, false},
		{"http://example.com:65536/", 0, false},
		{"http://example.com:99999999999999999999/", 0, false},
		{"http://[::1]:8080/", 8080, true},
	} {
		u, err := url.Parse(tc.raw)
		if err != nil {
			t.Fatalf("%s: %v", tc.raw, err)
		}
		if port, ok := URLPort(u); port != tc.port || ok != tc.ok {
			t.Errorf("URLPort(%s) = %d, %v; want %d, %v", tc.raw, port, ok, tc.port, tc.ok)
		}
	}
}

func TestOriginURL(t *testing.T) {
	for _, tc := range []struct {
		scheme, host string
		port         int
		path, query  string
		want         string
	}{
		{"http", "www.example.com", 8080, "/a/../b%7e", "x=1", "http://www.example.com:8080/b~?x=1"},
		{"https", "www.example.com", 443, "/b", "", "https://www.example.com/b"},
		{"", "www.example.com", 443, "/b", "", "http://www.example.com:443/b"},
		{"HTTP", "WWW.Example.COM.", 80, "", "", "http://www.example.com/"},
		{"http", "h.com", 0, "/../../etc/passwd", "", "http://h.com/etc/passwd"},
		{"http", "h.com", 0, "/a%2Fb/%zz", "q=a b#frag", "http://h.com/a%2Fb/%25zz?q=a%20b"},
		{"http", "h.com", 0, "//evil.example/x", "", "http://h.com//evil.example/x"},
		{"http", "2001:db8::1", 8080, "/", "", "http://[2001:db8::1]:8080/"},
	} {
		u := OriginURL(tc.scheme, tc.host, tc.port, tc.path, tc.query)
		if got := u.String(); got != tc.want {
			t.Errorf("OriginURL(%q, %q, %d, %q, %q) = %q, want %q", tc.scheme, tc.host, tc.port, tc.path, tc.query, got, tc.want)
		}
		checkOriginURL(t, tc.scheme, tc.host, tc.port, tc.path, tc.query)
	}
}

// checkOriginURL: the origin is asked for exactly the URL the key is
// computed from, and the request line is what the URL says.
func checkOriginURL(t *testing.T, scheme, host string, port int, path, query string) {
	t.Helper()
	u := OriginURL(scheme, host, port, path, query)
	back, err := url.Parse(u.String())
	if err != nil {
		t.Fatalf("OriginURL = %q does not parse: %v", u, err)
	}
	p, _ := URLPort(back)
	if n := NormalizeURL(back.Scheme, back.Hostname(), p, back.EscapedPath(), back.RawQuery); n != NormalizeURL(scheme, host, port, path, query) {
		t.Fatalf("OriginURL = %q normalizes to %q, not to the key's URL %q", u, n, NormalizeURL(scheme, host, port, path, query))
	}
	if !strings.HasPrefix(u.RequestURI(), "/") {
		t.Fatalf("OriginURL = %q: request target %q", u, u.RequestURI())
	}
}

func FuzzOriginURL(f *testing.F) {
	f.Add("http", "www.example.com", 8080, "/a/../b%7e", "x=1")
	f.Add("https", "h.com", 443, "//evil.example/%2e%2e/", "a=?#")
	f.Add("", "a.b", -1, "%zz", "%")
	f.Fuzz(func(t *testing.T, scheme, host string, port int, path, query string) {
		if !isDottedQuad(host) {
			if _, _, err := CheckDomain(host); err != nil || strings.HasSuffix(host, ".") {
				return // origins are names or IPv4 literals (ParseHost's)
			}
		}
		if port < 0 || port > 65535 || scheme != "" && scheme != "http" && scheme != "https" {
			return
		}
		checkOriginURL(t, scheme, host, port, path, query)
	})
}

func TestIsNormalizedPrefix(t *testing.T) {
	for _, tc := range []struct {
		p    string
		want bool
	}{
		{"//www.example.com/", true},
		{"//www.example.com:8080/a/b", true},
		{"//h.com/a%20b?x", true},
		{NormalizeURL("http", "Ex.COM", 8080, "/a b/../c", "q=1"), true},
		{"", false},
		{"/", false},
		{"//", false},
		{"//h.com", false},                // no path
		{"///a", false},                   // no host
		{"http://h.com/", false},          // a scheme
		{"//h.com:0/", false},             // port 0
		{"//h.com:080/", false},           // leading zero
		{"//h.com:65536/", false},         // out of range
		{"//h com/", false},               // space in the host
		{"//h.com/a b", false},            // space in the path
		{"//h.com/\x7f", false},           // control
		{"//h.com/ü", false},              // non-ASCII
		{"//user@h.com/", false},          // '@' is no host character
		{"//[::1]/", false},               // no IPv6 in Coralized URLs
		{"//h.com:8080:80/", false},       // two ports
		{"//h.com/a\r\nX-Evil: 1", false}, // header injection
	} {
		if got := IsNormalizedPrefix(tc.p); got != tc.want {
			t.Errorf("IsNormalizedPrefix(%q) = %v, want %v", tc.p, got, tc.want)
		}
	}
}

func TestEscapeQuery(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"a=1&b=2", "a=1&b=2"},
		{"a=%20b&c=%7e", "a=%20b&c=%7e"}, // valid escapes stay, even lower-case ones
		{"q=a b", "q=a%20b"},
		{"q=100%", "q=100%25"},
		{"q=%zz", "q=%25zz"},
		{"q=\"<x>\"", "q=%22%3Cx%3E%22"},
		{"q=ü", "q=%C3%BC"},
		{"a=?/:@", "a=?/:@"},
		{"x\r\nSet-Cookie: y", "x%0D%0ASet-Cookie:%20y"},
		{"#frag", "%23frag"},
	} {
		got := EscapeQuery(tc.in)
		if got != tc.want {
			t.Errorf("EscapeQuery(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if again := EscapeQuery(got); again != got {
			t.Errorf("EscapeQuery is not idempotent on %q: %q", got, again)
		}
	}
	if n := testing.AllocsPerRun(100, func() { EscapeQuery("a=1&b=%20") }); n != 0 {
		t.Errorf("EscapeQuery of a valid query allocates %v times", n)
	}
}

func FuzzEscapeQuery(f *testing.F) {
	for _, s := range []string{"", "a=1", "q=a b", "%", "%zz%4", "x\r\ny", "ü#?"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got := EscapeQuery(q)
		if again := EscapeQuery(got); again != got {
			t.Fatalf("EscapeQuery(%q) = %q, then %q", q, got, again)
		}
		u, err := url.Parse("http://h.com/?" + got)
		if err != nil || u.RawQuery != got {
			t.Fatalf("EscapeQuery(%q) = %q is not a query: %v", q, got, err)
		}
		if un, err := url.QueryUnescape(strings.ReplaceAll(got, "+", "%2B")); err != nil || un != unescapeValid(q) {
			t.Fatalf("EscapeQuery(%q) = %q changes the data: %q, %v", q, got, un, err)
		}
	})
}

// unescapeValid decodes the valid escapes of q and leaves everything else:
// what EscapeQuery's result must decode to.
func unescapeValid(q string) string {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		if q[i] == '%' && i+2 < len(q) && isHexDigit(q[i+1]) && isHexDigit(q[i+2]) {
			b.WriteByte(hexValue(q[i+1])<<4 | hexValue(q[i+2]))
			i += 2
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

func FuzzCheckDomain(f *testing.F) {
	for _, s := range []string{"example.com", "Example.COM.", "192.0.2.7", "1.2.3", "a..b", "bücher.de", "*.x", "com", "_x.y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		n, ipv4, err := CheckDomain(name)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Err != ErrBadHost || e.Detail == "" {
				t.Fatalf("CheckDomain(%q): %v is not an ErrBadHost with a detail", name, err)
			}
			return
		}
		if n2, ipv42, err := CheckDomain(n); err != nil || n2 != n || ipv42 != ipv4 {
			t.Fatalf("CheckDomain(%q) = %q, but that gives %q, %v, %v", name, n, n2, ipv42, err)
		}
		if ipv4 != isDottedQuad(n) || n != CanonicalHost(n) || len(n) > MaxNameLen {
			t.Fatalf("CheckDomain(%q) = %q, %v", name, n, ipv4)
		}
		// A listed name with a second label is an origin a Coralized
		// name can carry, and parses back to itself.
		if strings.Contains(n, ".") && len(n)+len(".nyud.net") <= MaxNameLen {
			if o, err := ParseHost(n+".nyud.net", "nyud.net"); err == nil && o.Host != n {
				t.Fatalf("CheckDomain(%q) = %q, ParseHost gives %q", name, n, o.Host)
			}
		}
	})
}
