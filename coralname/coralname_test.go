package coralname

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

// The Host rules as the proxy meets them are in host_test.go; these are
// the origin part's, as the DNS
// plugin uses them, with two zones.
func TestParseOrigin(t *testing.T) {
	zs := NewZones("NYUD.net.", ".nyucd.net", "")
	long63 := strings.Repeat("a", 63)
	for _, tc := range []struct {
		rel  string
		want Origin
		err  error
	}{
		{"www.example.com", Origin{Host: "www.example.com"}, nil},
		{"WWW.Example.COM", Origin{Host: "www.example.com"}, nil},
		{"www.example.com.8080", Origin{Host: "www.example.com", Port: 8080}, nil},
		{"www.example.com.80", Origin{Host: "www.example.com", Port: 80}, nil},
		{"127.0.0.1", Origin{Host: "127.0.0.1"}, nil},
		{"127.0.0.1.8080", Origin{Host: "127.0.0.1", Port: 8080}, nil},
		{"my_site.example.com", Origin{Host: "my_site.example.com"}, nil},
		{"nyud.network", Origin{Host: "nyud.network"}, nil},
		{"xnyud.net", Origin{Host: "xnyud.net"}, nil},
		{strings.Join([]string{long63, long63, long63, "com"}, "."), Origin{Host: strings.Join([]string{long63, long63, long63, "com"}, ".")}, nil},

		{"a.nyud.net", Origin{}, ErrLoop},
		{"a.NYUCD.net", Origin{}, ErrLoop},
		{"nyucd.net", Origin{}, ErrLoop},
		{"nyucd.net.example.com", Origin{}, ErrLoop},
		{"x.nyud.net.example.com", Origin{}, ErrLoop},
		{"a.nyud.net.8080", Origin{}, ErrLoop},
		{"-a.nyud.net", Origin{}, ErrLoop}, // the loop is found first

		{"", Origin{}, ErrBadHost},
		{"localhost", Origin{}, ErrBadHost},
		{"localhost.8080", Origin{}, ErrBadHost},
		{"8080", Origin{}, ErrBadHost},
		{"example.com.0", Origin{}, ErrBadHost},
		{"example.com.080", Origin{}, ErrBadHost},
		{"example.com.65536", Origin{}, ErrBadHost},
		{"example.123.456", Origin{}, ErrBadHost},
		{"127.1", Origin{}, ErrBadHost},
		{"127.000.0.1", Origin{}, ErrBadHost},
		{"1.2.3", Origin{}, ErrBadHost},
		{"-a.example.com", Origin{}, ErrBadHost},
		{"a-.example.com", Origin{}, ErrBadHost},
		{"a.example_com", Origin{}, ErrBadHost},
		{"a..example.com", Origin{}, ErrBadHost},
		{".example.com", Origin{}, ErrBadHost},
		{"example.com.", Origin{}, ErrBadHost},
		{`a\.b.example.com`, Origin{}, ErrBadHost}, // a DNS escape
		{`a\000.example.com`, Origin{}, ErrBadHost},
		{long63 + "a.com", Origin{}, ErrBadHost},
		{strings.Join([]string{long63, long63, long63, long63}, "."), Origin{}, ErrBadHost},
	} {
		got, err := zs.ParseOrigin(tc.rel)
		if tc.err != nil {
			var e *Error
			if !errors.Is(err, tc.err) || !errors.As(err, &e) || e.Host != tc.rel || got != (Origin{}) {
				t.Errorf("ParseOrigin(%q) = %+v, %v; want %v", tc.rel, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseOrigin(%q) = %+v, %v; want %+v", tc.rel, got, err, tc.want)
		}
	}
}

// TestParseHostIsParseOrigin: ParseHost is the Host header's rules, then
// ParseOrigin against its zone.
func TestParseHostIsParseOrigin(t *testing.T) {
	zs := NewZones("nyud.net")
	for _, rel := range []string{"www.example.com", "a.example.com.8080", "10.0.0.1.80", "localhost", "a.nyud.net", "-a.b.c", "1.2.3"} {
		want, werr := zs.ParseOrigin(rel)
		for _, host := range []string{rel + ".nyud.net", strings.ToUpper(rel) + ".NYUD.NET.:8080"} {
			got, err := ParseHost(host, "nyud.net")
			if got != want || !errors.Is(err, errors.Unwrap(werr)) || (err == nil) != (werr == nil) {
				t.Errorf("ParseHost(%q) = %+v, %v; ParseOrigin(%q) = %+v, %v", host, got, err, rel, want, werr)
			}
		}
	}
	if _, err := ParseHost("www.example.com.nyud.net", "nyud.1"); !errors.Is(err, ErrBadZone) || err.(*Error).Host != "nyud.1" {
		t.Errorf("bad zone: %v", err)
	}
}

func TestIsDottedQuad(t *testing.T) {
	netipQuad := func(s string) bool {
		a, err := netip.ParseAddr(s)
		return err == nil && a.Is4() && a.String() == s
	}
	inputs := []string{"", "0.0.0.0", "255.255.255.255", "256.0.0.1", "01.2.3.4", "1.2.3", "1.2.3.4.", ".1.2.3.4",
		"1.2.3.4.5", "1..2.3", "1.2.3.04", "1.2.3.0004", "1.2.3.a", "::1", "1.2.3.4%x", "١.٢.٣.٤", "+1.2.3.4", "1.2.3.-4"}
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789.a"
	for range 200000 {
		b := make([]byte, r.IntN(17))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		inputs = append(inputs, string(b))
	}
	for i := range 256 {
		inputs = append(inputs, fmt.Sprintf("%d.%d.%d.%d", i, 255-i, i/2, i%7), fmt.Sprintf("10.0.0.%03d", i))
	}
	for _, s := range inputs {
		if got, want := isDottedQuad(s), netipQuad(s); got != want {
			t.Errorf("isDottedQuad(%q) = %v, netip says %v", s, got, want)
		}
	}
}

func TestCarried(t *testing.T) {
	zs := NewZones("nyud.net", "nyucd.net")
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"nyud.net", true},
		{"a.nyud.net", true},
		{"nyud.net.a", true},
		{"a.nyucd.net.b", true},
		{"A.NYUD.NET.", true},
		{"xnyud.net", false},
		{"nyud.netx", false},
		{"nyud.net..", true}, // labels "nyud", "net", ""
		{"anyud.net.nyud.netb", false},
		{"anyud.net.nyud.net", true}, // the second occurrence
		{"", false},
	} {
		if got := zs.Carried(tc.host); got != tc.want {
			t.Errorf("Carried(%q) = %v", tc.host, got)
		}
	}
	if CarriesZone("a.nyud.net", "") || !CarriesZone("a.nyud.net", ".NYUD.NET.") {
		t.Error("CarriesZone")
	}
}

func TestCoralize(t *testing.T) {
	for _, tc := range []struct {
		o    Origin
		zone string
		want string
	}{
		{Origin{Host: "www.example.com"}, "NYUD.net.", "www.example.com.nyud.net"},
		{Origin{Host: "127.0.0.1", Port: 8080}, "nyud.net", "127.0.0.1.8080.nyud.net"},
		{Origin{Host: "a.b"}, "bad zone", "a.b.bad zone"},
	} {
		if got := Coralize(tc.o, tc.zone); got != tc.want {
			t.Errorf("Coralize(%+v, %q) = %q", tc.o, tc.zone, got)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	_, err := ParseHost("-a.example.com.nyud.net", "nyud.net")
	if got := err.Error(); got != `host "-a.example.com.nyud.net": malformed origin host: label starts or ends with '-'` {
		t.Errorf("message %q", got)
	}
}

func ExampleParseHost() {
	for _, host := range []string{
		"www.example.com.8080.nyud.net:80",
		"www-example-com-8080.nyud.net",
		"my--site-example-com.nyud.net",
		"localhost.nyud.net",
		"a.nyud.net.nyud.net",
		"a-nyud-net.nyud.net",
	} {
		o, err := ParseHost(host, "nyud.net")
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s port %d one-label %v\n", o.Host, o.Port, o.OneLabel)
	}
	// Output:
	// www.example.com port 8080 one-label false
	// www.example.com port 8080 one-label true
	// my-site.example.com port 0 one-label true
	// host "localhost.nyud.net": malformed origin host: single-label origin
	// host "a.nyud.net.nyud.net": origin host carries the Coral zone
	// host "a-nyud-net.nyud.net": origin host carries the Coral zone
}

// TestOneLabel: the one-label form decodes to the dotted form's origin,
// CoralizeOneLabel is its inverse, and origins that cannot be written in
// one label are refused.
func TestOneLabel(t *testing.T) {
	for _, tc := range []struct {
		host, origin string
		port         int
		err          error
	}{
		{"www-example-com.nyud.net", "www.example.com", 0, nil},
		{"WWW-Example-COM.nyud.net.", "www.example.com", 0, nil},
		{"www-example-com-8080.nyud.net", "www.example.com", 8080, nil},
		{"a--b-example-com.nyud.net", "a-b.example.com", 0, nil},
		{"xn----bcher--kva-de.nyud.net", "xn--bcher-kva.de", 0, nil},
		{"127-0-0-1-8080.nyud.net", "127.0.0.1", 8080, nil},
		{"127-0-0-1.nyud.net", "127.0.0.1", 0, nil},
		{"my_site-example-com.nyud.net", "my_site.example.com", 0, nil},
		{"a---b-com.nyud.net", "", 0, ErrBadHost},        // a label would end or start with '-'
		{"-example-com.nyud.net", "", 0, ErrBadHost},     // leading '-'
		{"example-com-.nyud.net", "", 0, ErrBadHost},     // trailing '-'
		{"example-com-0080.nyud.net", "", 0, ErrBadHost}, // port with a leading zero
		{"example-123.nyud.net", "", 0, ErrBadHost},      // 123 is a port: single-label origin
		{"www-example-com-nyud-net.nyud.net", "", 0, ErrLoop},
		{"_acme-challenge.nyud.net", "", 0, ErrBadHost}, // reserved, not origin _acme.challenge
		{"_a-example-com.nyud.net", "", 0, ErrBadHost},
		{strings.Repeat("a", 60) + "-com.nyud.net", "", 0, ErrBadHost}, // 64 characters
	} {
		o, err := ParseHost(tc.host, "nyud.net")
		if !errors.Is(err, tc.err) || err == nil && (o.Host != tc.origin || o.Port != tc.port || !o.OneLabel) {
			t.Errorf("%s: %+v %v, want %s port %d, error %v", tc.host, o, err, tc.origin, tc.port, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		back, err := CoralizeOneLabel(o, "nyud.net")
		if want := lowerASCII(strings.TrimSuffix(tc.host, ".")); err != nil || back != want {
			t.Errorf("CoralizeOneLabel(%+v) = %q %v, want %q", o, back, err, want)
		}
		// The DNS side reads the same.
		if d, err := NewZones("nyud.net").ParseOrigin(strings.TrimSuffix(strings.TrimSuffix(lowerASCII(tc.host), "."), ".nyud.net")); err != nil || d != o {
			t.Errorf("ParseOrigin of %s: %+v %v", tc.host, d, err)
		}
	}
	long := Origin{Host: strings.Repeat("a", 55) + ".example.com"}
	if _, err := CoralizeOneLabel(long, "nyud.net"); !errors.Is(err, ErrBadHost) {
		t.Errorf("a 67-character origin in one label: %v", err)
	}
}
