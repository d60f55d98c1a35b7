package proxy

import (
	"crypto/tls"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzLocalizeLocation: whatever Location an origin sends and whatever
// Host a client names, rewriting never panics, leaves anything but a
// dotted Coralized URL on this zone alone, and turns one into a valid
// absolute URL whose host is the one-label name of the same origin.
func FuzzLocalizeLocation(f *testing.F) {
	for _, seed := range [][2]string{
		{"http://www.example.com.nyud.test/new?x=1", "www-example-com.nyud.test"},
		{"http://www.example.com.8080.nyud.test/a#frag", "www-example-com-8080.nyud.test:8443"},
		{"https://other.example/", "www-example-com.nyud.test"},
		{"http://www.example.com.nyud.test/", "www.example.com.nyud.test"},
		{"/relative", "www-example-com.nyud.test"},
		{"http://u:p@www.example.com.nyud.test/", "www-example-com.nyud.test"},
		{"http://" + strings.Repeat("a", 60) + ".com.nyud.test/", "www-example-com.nyud.test"},
		{"http://[::1]/", "www-example-com.nyud.test"},
		{"ht tp://x", "x"},
	} {
		f.Add(seed[0], seed[1], true)
	}
	px := bareProxy(f)
	f.Fuzz(func(t *testing.T, loc, host string, overTLS bool) {
		r := &http.Request{Host: host}
		if overTLS {
			r.TLS = &tls.ConnectionState{}
		}
		hdr := http.Header{"Location": {loc}}
		px.localizeLocation(hdr, r)
		got := hdr.Get("Location")
		if got == loc {
			return
		}
		u, err := url.Parse(got)
		if err != nil || !u.IsAbs() {
			t.Fatalf("%q for host %q became %q: %v", loc, host, got, err)
		}
		orig, _ := url.Parse(loc)
		from, err1 := parseTarget(orig.Host, "nyud.test", "/", "")
		to, err2 := parseTarget(u.Host, "nyud.test", "/", "")
		if err1 != nil || err2 != nil || !to.OneLabel || from.Key() != to.Key() {
			t.Fatalf("%q became %q: %+v %v → %+v %v", loc, got, from, err1, to, err2)
		}
		if want := map[bool]string{true: "https", false: "http"}[overTLS]; u.Scheme != want {
			t.Fatalf("%q became %q: scheme %q, want %q", loc, got, u.Scheme, want)
		}
	})
}
