package proxy

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/coralcdn/coral/coralname"
)

func TestStatusForHostError(t *testing.T) {
	for _, tc := range []struct {
		host string
		want int
	}{
		{"www.example.com", http.StatusMisdirectedRequest},
		{"a.nyud.net.nyud.net", http.StatusForbidden},
		{"-a.example.nyud.net", http.StatusBadRequest},
	} {
		_, err := parseTarget(tc.host, "nyud.net", "/", "")
		if got := statusForHostError(err); got != tc.want {
			t.Errorf("%q: status %d, want %d (%v)", tc.host, got, tc.want, err)
		}
	}
	_, err := parseTarget("a.example.nyud.net", "", "/", "")
	if got := statusForHostError(err); got != http.StatusInternalServerError {
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
		a, ok := ipLiteral(tc.origin)
		if ok != tc.ok || (ok && (a.IsLoopback() != tc.loopback || a.IsPrivate() != tc.private)) {
			t.Errorf("ipLiteral(%q) = %v, %v", tc.origin, a, ok)
		}
	}
}

func TestTarget(t *testing.T) {
	tg, err := parseTarget("WWW.Example.com.8080.nyud.net:80", "nyud.net", "/a/../b%7e", "x=1")
	if err != nil {
		t.Fatal(err)
	}
	want := target{Host: "www.example.com", Port: 8080, Scheme: "http", Path: "/a/../b%7e", RawQuery: "x=1"}
	if tg != want {
		t.Fatalf("parseTarget = %+v, want %+v", tg, want)
	}
	if got := tg.OriginURL().String(); got != "http://www.example.com:8080/b~?x=1" {
		t.Errorf("OriginURL = %q", got)
	}
	if got := coralname.NormalizeURL(tg.Scheme, tg.Host, tg.Port, tg.Path, tg.RawQuery); got != "//www.example.com:8080/b~?x=1" {
		t.Errorf("NormalizeURL = %q", got)
	}
	if tg.Key() != coralname.CacheKey("http", "www.example.com", 8080, "/b~", "x=1") {
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
	if _, err := parseTarget("example.com", "nyud.net", "/", ""); !errors.Is(err, coralname.ErrNotCoralized) {
		t.Errorf("parseTarget outside the zone: %v", err)
	}
}

// requestTarget parses a Coralized request into the origin resource it
// names, as admit does without its cache: the host from r.Host, the path
// and query from r.URL. Errors wrap a *coralname.Error (see parseTarget)
// or errBadTarget.
func requestTarget(r *http.Request, zone string) (target, error) {
	path, err := requestPath(r)
	if err != nil {
		return target{}, err
	}
	return parseTarget(r.Host, zone, path, r.URL.RawQuery)
}
