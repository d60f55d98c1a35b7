package proxylab

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// The proxy on hostile input, against the real bin/caddy: requests written
// byte for byte on a raw socket (Go's client would normalize most of them
// away), origins that trickle or lie, and peers that claim too much.

// raw sends request as it is to p's HTTP port and returns the response
// and its body.
func raw(t *testing.T, p *proxy, request string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(p.ip, httpPort).String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%q: body: %v", request, err)
	}
	return resp, string(b)
}

// rawGet is a GET of target with Host host on a raw socket.
func rawGet(t *testing.T, p *proxy, target, host string, fields ...string) (*http.Response, string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\n", target, host)
	for i := 0; i+1 < len(fields); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", fields[i], fields[i+1])
	}
	b.WriteString("Connection: close\r\n\r\n")
	return raw(t, p, b.String())
}

// TestHostileRequests: request targets, header fields and credentials
// that must not make the proxy fetch another site, fetch another URL than
// the one it stores, or pass what is not in the cache key to the origin.
func TestHostileRequests(t *testing.T) {
	victim, evil := newOrigin(t), newOrigin(t)
	p := startOne(t, netip.MustParseAddr("127.0.79.10"), proxyOptions{extra: []string{"min_ttl 0"}})
	host := victim.coralHost()

	t.Run("request targets", func(t *testing.T) {
		for _, target := range []string{
			"http:@" + evil.addr.String() + "/poison.bin",
			"http:" + evil.addr.String() + "/poison.bin",
			"http://x@" + host + "/poison.bin",
			"ftp://" + host + "/poison.bin",
			"*",
		} {
			resp, body := rawGet(t, p, target, host)
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("GET %s: %d %s, want 400", target, resp.StatusCode, errorText(resp, []byte(body)))
			}
		}
		if n := evil.total(); n != 0 {
			t.Errorf("the other origin got %d requests", n)
		}
		if n := victim.count("/poison.bin") + victim.count("/"); n != 0 {
			t.Errorf("the victim was asked %d times", n)
		}
		// The absolute form of a Coralized URL is fine.
		resp, body := rawGet(t, p, "http://"+host+"/abs.bin?size=100", "ignored.example")
		if resp.StatusCode != http.StatusOK || body != string(newContent("/abs.bin", 100).bytes()) {
			t.Errorf("absolute-form Coralized target: %d, %d bytes", resp.StatusCode, len(body))
		}
	})

	t.Run("dot segments", func(t *testing.T) {
		before := len(victim.requestURIs())
		resp, body := rawGet(t, p, "/upload/%2e%2e/dots/index.bin?size=300", host)
		if resp.StatusCode != http.StatusOK || body != string(newContent("/dots/index.bin", 300).bytes()) {
			t.Errorf("dot segments: %d, %d bytes: not the body of /dots/index.bin", resp.StatusCode, len(body))
		}
		if got := victim.requestURIs()[before:]; !slices.Equal(got, []string{"/dots/index.bin?size=300"}) {
			t.Errorf("the origin was asked for %q, want [/dots/index.bin?size=300] (the URL the key is computed from)", got)
		}
		waitDownloads(t, p)
		// The stored URL is the fetched one.
		objs, err := p.cacheObjects()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, o := range objs {
			found = found || strings.HasSuffix(o.URL, "/dots/index.bin?size=300")
			if strings.Contains(o.URL, "%2e") || strings.Contains(o.URL, "upload") {
				t.Errorf("stored under a URL with dot segments: %s", o.URL)
			}
		}
		if !found {
			t.Errorf("/dots/index.bin not in the cache: %+v", objs)
		}
	})

	t.Run("header fields", func(t *testing.T) {
		resp, _ := rawGet(t, p, "/fields.bin?size=10", host,
			"X-Original-URL", "/admin", "X-Rewrite-URL", "/admin", "X-HTTP-Method-Override", "DELETE",
			"X-Forwarded-Host", "evil.example", "X-Forwarded-Port", "1", "X-Forwarded-Scheme", "https",
			"X-Host", "evil.example", "Referer", "http://evil.example/", "Accept-Language", "fr")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d", resp.StatusCode)
		}
		hdrs := victim.requestHeaders("/fields.bin")
		if len(hdrs) != 1 {
			t.Fatalf("origin asked %d times", len(hdrs))
		}
		for _, k := range []string{"X-Original-Url", "X-Rewrite-Url", "X-Http-Method-Override", "X-Forwarded-Host",
			"X-Forwarded-Port", "X-Forwarded-Scheme", "X-Host", "Referer"} {
			if v := hdrs[0].Values(k); len(v) != 0 {
				t.Errorf("%s reached the origin: %q", k, v)
			}
		}
		// The answer is stored for everyone and the origin never said it
		// looks at the client's fields, so the fetch went neutral
		// (module/caddy/proxy/neutral.go): not even an allow-listed field
		// reached it, and the User-Agent is the proxy's.
		if v := hdrs[0].Values("Accept-Language"); len(v) != 0 {
			t.Errorf("Accept-Language reached the origin on a fetch for everyone: %q", v)
		}
	})

	t.Run("credentials", func(t *testing.T) {
		for range 3 {
			resp, body := rawGet(t, p, "/auth.bin", host, "Authorization", "Basic dTpw")
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("with Authorization: %d %s, want 403", resp.StatusCode, errorText(resp, []byte(body)))
			}
		}
		if n := victim.count("/auth.bin"); n != 0 {
			t.Errorf("requests with Authorization reached the origin %d times", n)
		}
	})

	t.Run("only-if-cached never fetches", func(t *testing.T) {
		path, uri := "/oic.bin", "/oic.bin?size=100&maxage=1"
		if resp, _ := rawGet(t, p, uri, host); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d", resp.StatusCode)
		}
		waitDownloads(t, p)
		expires := expiryOf(t, p, path)
		waitFor(t, "the copy goes stale", 10*time.Second, []*proxy{p}, func() error {
			if left := time.Until(expires); left >= 0 {
				return fmt.Errorf("fresh for another %v", left)
			}
			return nil
		})
		resp, _ := rawGet(t, p, uri, host, "Cache-Control", "only-if-cached")
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("stale copy with only-if-cached: %d, want 504", resp.StatusCode)
		}
		if n := victim.count(path); n != 1 {
			t.Errorf("the origin was asked %d times, want 1", n)
		}
	})

	t.Run("origin down by port", func(t *testing.T) {
		down := fmt.Sprintf("%s.1.nyud.test", originIP)
		for range 4 {
			if resp, _ := rawGet(t, p, "/x", down); resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("port 1: %d, want 502", resp.StatusCode)
			}
		}
		if resp, _ := rawGet(t, p, "/up.bin?size=10", host); resp.StatusCode != http.StatusOK {
			t.Errorf("the same origin host on its working port after port 1 failed: %d, want 200", resp.StatusCode)
		}
	})
}

// expiryOf is when p's copy of path expires (from the admin API).
func expiryOf(t *testing.T, p *proxy, path string) time.Time {
	t.Helper()
	objs, err := p.cacheObjects()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if strings.Contains(o.URL, path+"?") && o.Expires != nil {
			return *o.Expires
		}
	}
	t.Fatalf("%s not in %s's cache: %+v", path, p.name, objs)
	return time.Time{}
}

// TestSlowOriginBounded: an origin announcing a body as large as the cache
// and trickling it neither evicts the cache nor blocks other objects; it
// is cut off at download_timeout. Downloads beyond max_downloads get 503
// with Retry-After.
func TestSlowOriginBounded(t *testing.T) {
	o := newOrigin(t)
	p := startOne(t, netip.MustParseAddr("127.0.79.11"), proxyOptions{extra: []string{
		"cache_size 4MiB", "download_timeout 3s", "max_downloads 8 2", "download_wait 200ms",
	}})
	c := newClient(t)
	host := o.coralHost()
	for i := range 10 {
		if resp, _, err := fetch(c, p, host, fmt.Sprintf("/fill/%d.bin?size=50000", i)); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("fill %d: %v %v", i, err, resp)
		}
	}
	waitDownloads(t, p)
	st, err := p.status()
	if err != nil {
		t.Fatal(err)
	}
	before := st.Caches[0].Objects

	// 4 MiB announced, 2 KB a second.
	resp, err := c.Do(request(t.Context(), p, host, "/slow.bin?size=4190000&rate=2000"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, 100)); err != nil {
		t.Fatalf("the slow body's first bytes: %v", err)
	}
	// A second download from the same origin fits max_downloads 8 2; a
	// third does not.
	second, err := c.Do(request(t.Context(), p, host, "/slow2.bin?size=100000&hold=10"))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Body.Close()
	if second.StatusCode != http.StatusOK {
		t.Fatalf("second download: %d", second.StatusCode)
	}
	third, body, err := fetch(c, p, host, "/third.bin?size=100")
	if err != nil {
		t.Fatal(err)
	}
	if third.StatusCode != http.StatusServiceUnavailable || third.Header.Get("Retry-After") == "" {
		t.Errorf("third download from one origin with max_downloads 8 2: %d %q, Retry-After %q; want 503 with Retry-After",
			third.StatusCode, errorText(third, body), third.Header.Get("Retry-After"))
	}
	o.release("/slow2.bin")
	if _, err := io.Copy(io.Discard, second.Body); err != nil {
		t.Fatalf("second download: %v", err)
	}
	st, err = p.status()
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Caches[0].Objects; n < before {
		t.Errorf("%d objects while the slow download runs, %d before: evicted for it", n, before)
	}
	if resp, _, err := fetch(c, p, host, "/during.bin?size=50000"); err != nil || resp.StatusCode != http.StatusOK ||
		strings.Contains(resp.Header.Get("Cache-Status"), "stored=false") {
		t.Errorf("an object during the slow download: %v %v", err, resp)
	}
	// download_timeout cuts the slow one off; it is not stored.
	if _, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Error("the slow body ended cleanly; want it cut off at download_timeout 3s")
	}
	waitDownloads(t, p)
	objs, err := p.cacheObjects()
	if err != nil {
		t.Fatal(err)
	}
	for _, ob := range objs {
		if strings.Contains(ob.URL, "/slow.bin") {
			t.Errorf("the cut-off object is in the cache: %+v", ob)
		}
	}
	if len(objs) < before+1 {
		t.Errorf("%d objects at the end, want at least %d", len(objs), before+1)
	}
}

// TestPeerClaimsBounded: a proxy takes another's copy fresh for no longer
// than that copy has left there, whatever its own policy would give the
// origin's headers; and a proxy without allow_peers ignores references to
// loopback peers.
func TestPeerClaimsBounded(t *testing.T) {
	o := newOrigin(t)
	ips := []netip.Addr{netip.MustParseAddr("127.0.79.12"), netip.MustParseAddr("127.0.79.13")}
	// The first proxy keeps a response without freshness information for
	// 30 s; the second would keep it 12 h (Coral's default_ttl).
	a := startOne(t, ips[0], proxyOptions{extra: []string{"default_ttl 30s", "min_ttl 0"}})
	b := startProxy(t, "proxy-b", ips[1], ips[0], proxyOptions{})
	ps := []*proxy{a, b}
	waitFor(t, "DSHT network formed", 60*time.Second, ps, func() error {
		for _, p := range ps {
			if err := p.ready(1); err != nil {
				return err
			}
		}
		return nil
	})
	c := newClient(t)
	host := o.coralHost()
	uri := "/peer/claims.bin?size=1000&nocc=1"
	if resp, _, err := fetch(c, a, host, uri); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a: %v %v", err, resp)
	}
	waitDownloads(t, a)
	resp, _, err := fetch(c, b, host, uri)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("b: %v %v", err, resp)
	}
	if d := detail(resp.Header.Get("Cache-Status")); !strings.HasPrefix(d, "peer") {
		t.Fatalf("b got it from %q, want a peer", d)
	}
	if v := resp.Header.Get("Coral-Fresh"); v != "" {
		t.Errorf("Coral-Fresh reached a client: %q", v)
	}
	waitDownloads(t, b)
	if left := time.Until(expiryOf(t, b, "/peer/claims.bin")); left > 31*time.Second {
		t.Errorf("b's copy from a peer is fresh for %v; the peer's had 30 s", left.Round(time.Second))
	}
	if n := o.count("/peer/claims.bin"); n != 1 {
		t.Errorf("origin asked %d times, want 1", n)
	}

	// A third proxy without allow_peers ignores the references (they name
	// loopback addresses) and goes to the origin.
	strict := startProxy(t, "proxy-strict", netip.MustParseAddr("127.0.79.14"), ips[0], proxyOptions{noAllowPeers: true})
	waitFor(t, "strict proxy joined", 60*time.Second, []*proxy{strict}, func() error { return strict.ready(2) })
	resp, _, err = fetch(c, strict, host, uri)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("strict: %v %v", err, resp)
	}
	if d := detail(resp.Header.Get("Cache-Status")); d != "origin" {
		t.Errorf("the proxy without allow_peers got it from %q, want the origin", d)
	}
	if n := o.count("/peer/claims.bin"); n != 2 {
		t.Errorf("origin asked %d times, want 2", n)
	}
}
