package proxylab

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
)

// Cache poisoning through what a request carries and what a member
// serves, against the real bin/caddy (issue 19: classes 3, 6 and 8 of the
// threat model in docs/operations.md).

// scriptOrigin is an origin on originIP answering with handler; it
// records every request's header per path.
type scriptOrigin struct {
	addr netip.AddrPort
	mu   sync.Mutex
	seen map[string][]http.Header
}

func newScriptOrigin(t *testing.T, handler http.HandlerFunc) *scriptOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(originIP, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	o := &scriptOrigin{addr: netip.MustParseAddrPort(ln.Addr().String()), seen: map[string][]http.Header{}}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.seen[r.URL.Path] = append(o.seen[r.URL.Path], r.Header.Clone())
		o.mu.Unlock()
		handler(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return o
}

func (o *scriptOrigin) coralHost() string {
	return o.addr.Addr().String() + "." + strconv.Itoa(int(o.addr.Port())) + "." + zone
}

// requests are the headers of the requests for path so far.
func (o *scriptOrigin) requests(path string) []http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]http.Header(nil), o.seen[path]...)
}

const chromeUA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"

// TestCachePoisoningByRequest: with Coral's defaults, a firewall's 403 to
// a scanner's User-Agent (a field outside the cache key) reaches the
// scanner only: a 403 without freshness information is not kept (it used
// to be, for min_ttl, and every browser got it), and a 403 the origin
// marks fresh does not replace the URL's Vary index while its variants
// are fresh. Negative caching stays for what it is for: a 404 is kept. A
// variant is keyed by the User-Agent the origin got, even when the client
// sent two lines.
func TestCachePoisoningByRequest(t *testing.T) {
	o := newScriptOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		ua := r.Header.Get("User-Agent")
		switch {
		case r.URL.Path == "/missing":
			w.Header().Set("Cache-Control", "max-age=600") // declared cacheable
			http.NotFound(w, r)
			return
		case r.URL.Path == "/provoked":
			http.NotFound(w, r) // no Cache-Control: a request could have provoked it
			return
		case r.URL.Path == "/negotiates":
			w.Header().Set("Cache-Control", "max-age=3600")
			w.Header().Set("Vary", "User-Agent")
			io.WriteString(w, "negotiated")
			return
		case r.URL.Path == "/ua":
			w.Header().Set("Cache-Control", "max-age=3600")
			w.Header().Set("Vary", "User-Agent")
			io.WriteString(w, "for "+strings.Join(r.Header.Values("User-Agent"), " | "))
			return
		case strings.Contains(ua, "sqlmap"):
			if r.URL.Path == "/i18n" {
				w.Header().Set("Cache-Control", "max-age=600")
			}
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "forbidden")
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		if r.URL.Path == "/i18n" {
			w.Header().Set("Vary", "Accept-Language")
		}
		io.WriteString(w, "page "+r.Header.Get("Accept-Language"))
	})
	p := startOne(t, netip.MustParseAddr("127.0.79.30"), proxyOptions{})
	host := o.coralHost()

	t.Run("a 403 without freshness reaches the scanner only", func(t *testing.T) {
		// A fetch for everyone goes without the client's fields until the
		// origin shows it looks at them (module/caddy/proxy/neutral.go):
		// a first scanner request would not reach the origin's filter as
		// a scanner at all. This origin negotiates on User-Agent, so the
		// proxy asks it with the client's fields from here on.
		if resp, _ := rawGet(t, p, "/negotiates", host, "User-Agent", chromeUA); resp.StatusCode != http.StatusOK {
			t.Fatalf("/negotiates: %d", resp.StatusCode)
		}
		waitDownloads(t, p)
		if resp, _ := rawGet(t, p, "/", host, "User-Agent", "sqlmap/1.8"); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("scanner: %d, want the origin's 403", resp.StatusCode)
		}
		waitDownloads(t, p)
		resp, body := rawGet(t, p, "/", host, "User-Agent", chromeUA)
		if resp.StatusCode != http.StatusOK || body != "page " {
			t.Errorf("a browser after the scanner: %d %q (Cache-Status %q), want the page", resp.StatusCode, body, resp.Header.Get("Cache-Status"))
		}
	})

	t.Run("a fresh 403 without Vary does not wipe fresh variants", func(t *testing.T) {
		if _, body := rawGet(t, p, "/i18n", host, "Accept-Language", "en"); body != "page en" {
			t.Fatalf("en: %q", body)
		}
		waitDownloads(t, p)
		if resp, _ := rawGet(t, p, "/i18n", host, "Accept-Language", "fr", "User-Agent", "sqlmap/1.8"); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("scanner: %d, want the origin's 403", resp.StatusCode)
		}
		waitDownloads(t, p)
		resp, body := rawGet(t, p, "/i18n", host, "Accept-Language", "en")
		if resp.StatusCode != http.StatusOK || body != "page en" || detail(resp.Header.Get("Cache-Status")) != "local" {
			t.Errorf("en after the scanner: %d %q (Cache-Status %q), want the stored English page", resp.StatusCode, body, resp.Header.Get("Cache-Status"))
		}
	})

	t.Run("a 404 the origin declares fresh is still kept, a bare one not", func(t *testing.T) {
		for i := range 2 {
			for _, path := range []string{"/missing", "/provoked"} {
				if resp, _ := rawGet(t, p, path, host); resp.StatusCode != http.StatusNotFound {
					t.Fatalf("%s, request %d: %d, want 404", path, i, resp.StatusCode)
				}
				waitDownloads(t, p)
			}
		}
		if n := len(o.requests("/missing")); n != 1 {
			t.Errorf("the origin was asked %d times for a 404 with max-age, want once (negative caching)", n)
		}
		if n := len(o.requests("/provoked")); n != 2 {
			t.Errorf("the origin was asked %d times for a bare 404, want every time (not stored)", n)
		}
	})

	t.Run("the variant key is the User-Agent the origin got", func(t *testing.T) {
		first, second, _ := strings.Cut(chromeUA, ", ")
		if resp, _ := rawGet(t, p, "/ua", host, "User-Agent", first, "User-Agent", second); resp.StatusCode != http.StatusOK {
			t.Fatalf("two User-Agent lines: %d", resp.StatusCode)
		}
		waitDownloads(t, p)
		got := o.requests("/ua")[0].Values("User-Agent")
		if len(got) != 1 || !strings.HasPrefix(got[0], chromeUA+" ") {
			t.Errorf("the origin got User-Agent %q, want the two lines as one, %q and the proxy's name", got, chromeUA)
		}
		_, body := rawGet(t, p, "/ua", host, "User-Agent", chromeUA)
		if !strings.HasPrefix(body, "for "+chromeUA+" ") {
			t.Errorf("Chrome got %q, want the page made for Chrome's User-Agent", body)
		}
	})
}

// TestForgedPeerCopy: a member of the network (here a DSHT node in the
// test with an HTTP server beside it) puts a reference to itself and
// serves a forged copy: Coral-Fresh 1, a year of max-age, a Last-Modified
// in the future, no ETag. The honest proxy takes it for a second (a
// member's copy is trusted as far as it says it is fresh). Once the
// member is gone, the proxy fetches the page from the origin again
// unconditionally: it used to send the forged date as If-Modified-Since,
// the origin (answering as Python's http.server and Express do) said 304,
// and the forged copy stayed fresh for a year.
func TestForgedPeerCopy(t *testing.T) {
	mtime := time.Now().Add(-time.Hour).Truncate(time.Second)
	o := newScriptOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if ims, err := http.ParseTime(r.Header.Get("If-Modified-Since")); err == nil && !mtime.After(ims) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Last-Modified", mtime.UTC().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "real")
	})
	honestIP, memberIP := netip.MustParseAddr("127.0.79.31"), netip.MustParseAddr("127.0.79.32")
	p := startOne(t, honestIP, proxyOptions{})

	// The member's HTTP server.
	ln, err := net.Listen("tcp", netip.AddrPortFrom(memberIP, httpPort).String())
	if err != nil {
		t.Fatal(err)
	}
	member := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Status", `coral; hit; detail="local"`)
		w.Header().Set("Coral-Fresh", "1")
		w.Header().Set("Cache-Control", "max-age=31536000")
		w.Header().Set("Last-Modified", time.Now().AddDate(1, 0, 0).UTC().Format(http.TimeFormat))
		io.WriteString(w, "forged")
	})}
	go func() { _ = member.Serve(ln) }()
	t.Cleanup(func() { _ = member.Close() })

	// The member's DSHT node joins the lab network (no network key on
	// loopback) and puts a complete reference to its HTTP server.
	cfg := coraldht.DefaultConfig()
	cfg.Services = coraldht.ServiceHTTP
	cfg.HintHops = 0
	tr, err := coraldht.ListenUDP(netip.AddrPortFrom(memberIP, dhtPort).String())
	if err != nil {
		t.Fatal(err)
	}
	node, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := node.Bootstrap(ctx, netip.AddrPortFrom(honestIP, dhtPort)); err != nil {
		t.Fatal(err)
	}
	path := "/forged.html"
	key := coralname.CacheKey("http", o.addr.Addr().String(), int(o.addr.Port()), path, "")
	// Reference version 1: version, flags (complete), HTTP port, IPv4.
	ref := []byte{1, 1, 0, 0}
	binary.BigEndian.PutUint16(ref[2:], httpPort)
	ref = append(ref, memberIP.AsSlice()...)
	if _, err := node.Put(ctx, coraldht.KeyFor(key), ref, time.Hour); err != nil {
		t.Fatal(err)
	}

	host := o.coralHost()
	resp, body := rawGet(t, p, path, host)
	if body != "forged" || !strings.HasPrefix(detail(resp.Header.Get("Cache-Status")), "peer") {
		t.Fatalf("first request: %q (Cache-Status %q), want the member's copy", body, resp.Header.Get("Cache-Status"))
	}
	waitDownloads(t, p)
	expires := expiryOfPath(t, p, path)
	if left := time.Until(expires); left > 2*time.Second {
		t.Fatalf("the member's copy is fresh for %v; it said 1 s", left)
	}
	// The member leaves; its second of freshness runs out.
	_ = member.Close()
	node.Close()
	time.Sleep(time.Until(expires) + 100*time.Millisecond)

	resp, body = rawGet(t, p, path, host)
	if body != "real" {
		t.Errorf("after the member's copy went stale: %q (Cache-Status %q), want the origin's page", body, resp.Header.Get("Cache-Status"))
	}
	for _, h := range o.requests(path) {
		if v := h.Get("If-Modified-Since"); v != "" {
			t.Errorf("the origin was asked If-Modified-Since %q, a validator the member wrote", v)
		}
	}
	waitDownloads(t, p)
	if left := time.Until(expiryOfPath(t, p, path)); left > 601*time.Second {
		t.Errorf("the copy is fresh for %v after revalidation; the origin gave 600 s", left.Round(time.Second))
	}
}

// expiryOfPath is when p's copy of the object at path expires.
func expiryOfPath(t *testing.T, p *proxy, path string) time.Time {
	t.Helper()
	objs, err := p.cacheObjects()
	if err != nil {
		t.Fatal(err)
	}
	for _, ob := range objs {
		if strings.HasSuffix(ob.URL, path) && ob.Expires != nil {
			return *ob.Expires
		}
	}
	t.Fatalf("%s not in %s's cache: %+v", path, p.name, objs)
	return time.Time{}
}
