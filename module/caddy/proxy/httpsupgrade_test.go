package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// httpsLab is an origin host with a plain-http port, whose handler decides
// per path, and an https server that the proxy reaches as port 443 of the
// same host (its dialer maps :443 there).
type httpsLab struct {
	plain *recordingOrigin
	tls   *httptest.Server
	p     *localProxy
}

func newHTTPSLab(t *testing.T, plain http.HandlerFunc) *httpsLab {
	l := &httpsLab{}
	l.tls = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, "secure "+r.RequestURI)
	}))
	t.Cleanup(l.tls.Close)
	l.plain = newRecordingOrigin(t, plain)
	l.p = startLocalProxy(t, 0, nil)
	tr := l.p.px.origin.Transport.(*http.Transport)
	tr.TLSClientConfig = l.tls.Client().Transport.(*http.Transport).TLSClientConfig
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if strings.HasSuffix(addr, ":443") {
			addr = l.tls.Listener.Addr().String()
		}
		return d.DialContext(ctx, network, addr)
	}
	return l
}

// get fetches path through the proxy without following redirects.
func (l *httpsLab) get(t *testing.T, path string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, l.p.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = l.plain.coralHost()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Location")
}

// plainAsked counts the requests the plain-http port got for path.
func (l *httpsLab) plainAsked(path string) int {
	n := 0
	for _, r := range l.plain.requests() {
		if r.RequestURI == path {
			n++
		}
	}
	return n
}

// TestHTTPSUpgradeOnePathCannotSwitchHost: on a shared host, one user's
// path redirecting to https (on another port, or on 443) does not move
// the other users' paths to https. /~mallory/x redirecting to
// https://host:9443/~mallory/x used to make every URL of the host 502.
func TestHTTPSUpgradeOnePathCannotSwitchHost(t *testing.T) {
	l := newHTTPSLab(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		switch {
		case r.URL.Path == "/~mallory/x":
			// Nothing listens on 9443.
			http.Redirect(w, r, "https://127.0.0.1:9443"+r.RequestURI, http.StatusMovedPermanently)
		case strings.HasPrefix(r.URL.Path, "/~mallory/"):
			http.Redirect(w, r, "https://127.0.0.1"+r.RequestURI, http.StatusMovedPermanently)
		default:
			io.WriteString(w, "plain "+r.RequestURI)
		}
	})
	status, _, loc := l.get(t, "/~mallory/x")
	if status != http.StatusMovedPermanently || !strings.Contains(loc, "9443") {
		t.Fatalf("/~mallory/x: %d %q; want its redirect to port 9443 relayed", status, loc)
	}
	if status, body, _ := l.get(t, "/~alice/y"); status != http.StatusOK || body != "plain /~alice/y" {
		t.Fatalf("/~alice/y after mallory's redirect to 9443: %d %q", status, body)
	}
	// Redirects to the same URL on https port 443 upgrade those URLs,
	// however many of them: they are all under one first segment.
	for _, p := range []string{"/~mallory/a", "/~mallory/b", "/~mallory/c"} {
		if status, body, _ := l.get(t, p); status != http.StatusOK || body != "secure "+p {
			t.Fatalf("%s: %d %q, want it fetched over https", p, status, body)
		}
	}
	if status, body, _ := l.get(t, "/~mallory/a"); status != http.StatusOK || body != "secure /~mallory/a" || l.plainAsked("/~mallory/a") != 1 {
		t.Fatalf("/~mallory/a again: %d %q, plain port asked %d times; want https at once", status, body, l.plainAsked("/~mallory/a"))
	}
	if status, body, _ := l.get(t, "/~alice/z"); status != http.StatusOK || body != "plain /~alice/z" {
		t.Fatalf("/~alice/z after mallory's upgrades: %d %q, want plain http", status, body)
	}
}

// TestHTTPSUpgradeMemoryExpires: an upgraded URL, and a whole upgraded
// host, are fetched over plain http again httpsUpgradeMemory after they
// redirected (in virtual time).
func TestHTTPSUpgradeMemoryExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := newHTTPSUpgrades(100)
		a, b, other := mustURL(t, "http://host.example/~mallory/a"), mustURL(t, "http://host.example/b"), mustURL(t, "http://host.example/c")
		u.record(a)
		u.record(b)
		if !u.upgraded(a) || !u.upgraded(other) {
			t.Fatal("the URL, or its host after redirects under two first segments, is not upgraded")
		}
		time.Sleep(httpsUpgradeMemory - time.Minute)
		if !u.upgraded(a) || !u.upgraded(other) {
			t.Error("the upgrade expired early")
		}
		time.Sleep(2 * time.Minute)
		if u.upgraded(a) || u.upgraded(b) || u.upgraded(other) {
			t.Errorf("after %s: upgraded %v, %v, host %v", httpsUpgradeMemory+time.Minute, u.upgraded(a), u.upgraded(b), u.upgraded(other))
		}
	})
}

// TestHTTPSUpgradeWholeHost: a host whose URLs under two different first
// segments redirect to https is fetched over https at once for every URL;
// when https then fails, the host is asked over http again.
func TestHTTPSUpgradeWholeHost(t *testing.T) {
	l := newHTTPSLab(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://127.0.0.1"+r.RequestURI, http.StatusMovedPermanently)
	})
	for _, p := range []string{"/a?x=1", "/b/c"} {
		if status, body, _ := l.get(t, p); status != http.StatusOK || body != "secure "+p {
			t.Fatalf("%s: %d %q", p, status, body)
		}
	}
	if status, body, _ := l.get(t, "/d"); status != http.StatusOK || body != "secure /d" || l.plainAsked("/d") != 0 {
		t.Fatalf("/d: %d %q, plain port asked %d times; want https at once", status, body, l.plainAsked("/d"))
	}
	l.tls.Close()
	if status, _, _ := l.get(t, "/e"); status != http.StatusBadGateway {
		t.Fatalf("/e with https down: %d, want 502", status)
	}
	// Not straight to https: the plain port is asked (and redirects to
	// the https that is down, so the answer is 502 again).
	l.get(t, "/f")
	if n := l.plainAsked("/f"); n != 1 {
		t.Fatalf("/f after https failed: plain port asked %d times, want 1", n)
	}
}

// TestHTTPSUpgradeMemoryBounded: the memory of upgrades stays within its
// bound however many origins redirect.
func TestHTTPSUpgradeMemoryBounded(t *testing.T) {
	u := newHTTPSUpgrades(100)
	for i := range 1000 {
		for _, p := range []string{"/a", "/b"} {
			u.record(mustURL(t, fmt.Sprintf("http://host%d.example%s", i, p)))
		}
	}
	if n, m := u.urls.len(), u.hosts.len(); n != 100 || m != 100 {
		t.Errorf("%d URLs and %d hosts remembered, want the bound 100", n, m)
	}
	if !u.upgraded(mustURL(t, "http://host999.example/z")) {
		t.Error("the newest host is not upgraded")
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
