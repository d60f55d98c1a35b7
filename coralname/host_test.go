package coralname

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// TestParseHostTable: the Host rules as the proxy meets them, hostile
// values included.
func TestParseHostTable(t *testing.T) {
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
			o, err := ParseHost(tc.host, tc.zone)
			origin, port := o.Host, o.Port
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("ParseHost(%q, %q) = %q, %d, %v; want error %v", tc.host, tc.zone, origin, port, err, tc.err)
				}
				var e *Error
				if !errors.As(err, &e) || e.Err != tc.err {
					t.Fatalf("error %T (%v) is not an *Error with %v", err, err, tc.err)
				}
				if origin != "" || port != 0 {
					t.Errorf("on error got %q, %d; want zero values", origin, port)
				}
				return
			}
			if err != nil || origin != tc.origin || port != tc.port {
				t.Fatalf("ParseHost(%q, %q) = %q, %d, %v; want %q, %d", tc.host, tc.zone, origin, port, err, tc.origin, tc.port)
			}
		})
	}
}

// checkParseConsistent checks ParseHost's invariants for one input.
func checkParseConsistent(t *testing.T, host, zone string) {
	o, err := ParseHost(host, zone)
	origin, port := o.Host, o.Port
	if err != nil {
		if !errors.Is(err, ErrNotCoralized) && !errors.Is(err, ErrLoop) && !errors.Is(err, ErrBadHost) && !errors.Is(err, ErrBadZone) {
			t.Fatalf("ParseHost(%q, %q): unclassified error %v", host, zone, err)
		}
		if origin != "" || port != 0 {
			t.Fatalf("ParseHost(%q, %q): non-zero results with error", host, zone)
		}
		return
	}
	if origin == "" || origin != strings.ToLower(origin) || strings.HasSuffix(origin, ".") || len(origin) > 253 {
		t.Fatalf("ParseHost(%q, %q): bad origin %q", host, zone, origin)
	}
	if port < 0 || port > 65535 {
		t.Fatalf("ParseHost(%q, %q): bad port %d", host, zone, port)
	}
	for i := 0; i < len(origin); i++ {
		if c := origin[i]; c >= 0x80 || c <= ' ' || strings.IndexByte("/%:@[]?#", c) >= 0 {
			t.Fatalf("ParseHost(%q, %q): origin %q has %q", host, zone, origin, c)
		}
	}
	if a, err := netip.ParseAddr(origin); err == nil && (!a.Is4() || a.String() != origin) {
		t.Fatalf("ParseHost(%q, %q): IP origin %q is not canonical IPv4", host, zone, origin)
	}
	if CarriesZone(origin, zone) {
		t.Fatalf("ParseHost(%q, %q): origin %q carries the zone", host, zone, origin)
	}
	rebuilt := Coralize(Origin{Host: origin, Port: port}, zone)
	for _, h := range []string{rebuilt, strings.ToUpper(rebuilt) + ".", rebuilt + ":8080"} {
		o2, err := ParseHost(h, zone)
		if err != nil || o2.Host != origin || o2.Port != port {
			t.Fatalf("ParseHost(%q, %q) = %q, %d; rebuilt %q parses as %+v, %v", host, zone, origin, port, h, o2, err)
		}
	}
}

func FuzzParseHost(f *testing.F) {
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

func TestParseHostConsistency(t *testing.T) {
	// The fuzz invariants over the table inputs, so plain "go test"
	// exercises them.
	for _, h := range []string{
		"www.example.com.nyud.net", "www.example.com.8080.nyud.net:80", "127.0.0.1.nyud.net",
		"10.0.0.1.65535.nyud.net", "my_site.example.com.nyud.net.", "xn--bcher-kva.example.nyud.net",
	} {
		checkParseConsistent(t, h, "nyud.net")
	}
}
