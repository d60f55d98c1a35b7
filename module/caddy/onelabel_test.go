package coralcaddy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// TestOneLabelOverHTTPS: one Caddy serves the zone over http (every form)
// and its wildcard over https (one-label names, with Caddy's internal CA):
// a one-label name over http is sent to https with 308, a dotted one is
// served; over https the one-label name is served from the same copy the
// dotted name fetched; a cached redirect goes out in the form of the
// request that gets it (https one-label, or http dotted).
func TestOneLabelOverHTTPS(t *testing.T) {
	var o *countingOrigin
	o = newCountingOrigin(t, func(_ *countingOrigin, w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, o.URL+"/new?x=1", http.StatusMovedPermanently)
		default:
			w.Header().Set("Cache-Control", "max-age=600")
			fmt.Fprintf(w, "object %s", r.URL.Path)
		}
	})
	httpPort := 9180 + int(testProxyPort.Add(1))
	httpsPort := 9180 + int(testProxyPort.Add(1))
	dir := t.TempDir()
	storage := testCertStorage()
	tester := caddytest.NewTester(t)
	proxy := fmt.Sprintf("coral_proxy nyud.test {\n cache_dir %s\n allow_origins 127.0.0.0/8 127.0.0.1\n https_redirect %d\n }", dir, httpsPort)
	tester.InitServer(fmt.Sprintf(`{
		skip_install_trust
		storage file_system %[4]s
		admin {$CORAL_TEST_ADMIN}
		http_port %[1]d
		https_port %[2]d
		grace_period 1ns
		auto_https disable_redirects
		coral {
			listen 127.0.3.52:4000
		}
	}
	http://:%[1]d {
		bind 127.0.0.1
		%[3]s
	}
	https://*.nyud.test:%[2]d {
		bind 127.0.0.1
		tls internal
		%[3]s
	}`, httpPort, httpsPort, proxy, storage), "caddyfile")

	oneLabel := "127-0-0-1-" + o.port() + ".nyud.test"
	httpBase := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	noFollow := func(c *http.Client) *http.Client {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		return c
	}
	plain := noFollow(&http.Client{})
	secure := noFollow(tlsClient(t, storage, httpsPort))
	waitForCachedCert(t, "*.nyud.test")

	// Over http: one-label → https (with the path and query as sent);
	// dotted → served.
	for path, want := range map[string]string{
		"/a?b=1":            fmt.Sprintf("https://%s:%d/a?b=1", oneLabel, httpsPort),
		"/x%2Fy/%7Ez?q=%20": fmt.Sprintf("https://%s:%d/x%%2Fy/%%7Ez?q=%%20", oneLabel, httpsPort),
		"//evil.example/p":  fmt.Sprintf("https://%s:%d//evil.example/p", oneLabel, httpsPort),
	} {
		resp := do(t, plain, httpBase+path, oneLabel)
		loc, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusPermanentRedirect || err != nil || loc.String() != want || loc.Hostname() != oneLabel {
			t.Errorf("http %s%s: %d %q, want 308 to %q", oneLabel, path, resp.StatusCode, resp.Header.Get("Location"), want)
		}
	}
	if resp := do(t, plain, httpBase+"/shared", o.coralHost()); resp.StatusCode != http.StatusOK {
		t.Fatalf("dotted name over http: %d", resp.StatusCode)
	}

	// Over https: the one-label name, from the dotted name's copy.
	httpsBase := fmt.Sprintf("https://%s:%d", oneLabel, httpsPort)
	resp := do(t, secure, httpsBase+"/shared", "")
	// A hit, or (if the copy is a moment from its commit) joined to its
	// download: either way the dotted name's copy.
	if cs := resp.Header.Get("Cache-Status"); resp.StatusCode != http.StatusOK || !strings.Contains(cs, "hit") && !strings.Contains(cs, "collapsed") {
		t.Errorf("one-label over https: %d, Cache-Status %q; want a hit on the dotted name's copy", resp.StatusCode, resp.Header.Get("Cache-Status"))
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].VerifyHostname(oneLabel) != nil {
		t.Error("the certificate does not cover the one-label name")
	}
	if n := o.count("/shared"); n != 1 {
		t.Errorf("the origin was asked %d times for one object in two forms", n)
	}

	// A redirect, cached once, in each client's form.
	resp = do(t, secure, httpsBase+"/moved", "")
	if want := fmt.Sprintf("https://%s:%d/new?x=1", oneLabel, httpsPort); resp.Header.Get("Location") != want {
		t.Errorf("redirect over https: Location %q, want %q", resp.Header.Get("Location"), want)
	}
	resp = do(t, plain, httpBase+"/moved", o.coralHost())
	if want := "http://" + o.coralHost() + "/new?x=1"; resp.Header.Get("Location") != want {
		t.Errorf("redirect over http: Location %q, want %q", resp.Header.Get("Location"), want)
	}
	if n := o.count("/moved"); n != 1 {
		t.Errorf("the origin was asked %d times for the redirect", n)
	}
}

// tlsClient trusts the internal CA in Caddy's storage and dials every
// name at 127.0.0.1:port (the names are under the test zone, in no DNS).
func tlsClient(t *testing.T, storage string, port int) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(storage, "pki", "authorities", "local", "root.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("Caddy's root certificate does not parse")
	}
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", port))
		},
	}}
}

func do(t *testing.T, c *http.Client, rawURL, host string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp
}
