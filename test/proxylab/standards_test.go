package proxylab

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStandards: the HTTP-cache behaviour of issue 13 through the real
// bin/caddy in strict mode (default_ttl 0, min_ttl 0), one case per area;
// module/caddy's rfc_*_test.go have the full tables. The origin is written
// here: it answers each path as the case needs, and a raw listener sends
// transfer codings net/http would not.
func TestStandards(t *testing.T) {
	var asked pathCounter
	mux := http.NewServeMux()
	date := func() string { return time.Now().UTC().Format(http.TimeFormat) }
	mux.HandleFunc("/age", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", date())
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Age", "7200")
		io.WriteString(w, "old")
	})
	mux.HandleFunc("/cdn", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("CDN-Cache-Control", "max-age=600")
		w.Header().Set("Coral-Cache-Control", "max-age=600")
		io.WriteString(w, "for CDNs")
	})
	mux.HandleFunc("/expires", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", date())
		w.Header().Set("Expires", "Thu, 18 Aug 2050 2:01:18 GMT")
		io.WriteString(w, "invalid expires")
	})
	mux.HandleFunc("/503", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "down for a minute")
	})
	mux.HandleFunc("/hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "page")
	})
	ln, err := net.Listen("tcp", netip.AddrPortFrom(originIP, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.add(r.URL.Path)
		mux.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	originHost := coralName(ln.Addr().String())

	// A raw origin for a gzip, chunked response.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, "decoded by the proxy")
	zw.Close()
	rawLn, err := net.Listen("tcp", netip.AddrPortFrom(originIP, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rawLn.Close() })
	go func() {
		for {
			c, err := rawLn.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				asked.add("/te")
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", gz.Len(), gz.Bytes())
			}()
		}
	}()
	rawHost := coralName(rawLn.Addr().String())

	// An origin that answers each path once and then closes every
	// connection without a response: "the origin cannot be reached" for
	// the stale cases. Its own address, so the proxy's origin-down memory
	// (keyed by host and port) does not touch the cases above.
	var answered sync.Map
	downLn, err := net.Listen("tcp", netip.AddrPortFrom(originIP, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	downSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.add(r.URL.Path)
		if _, again := answered.LoadOrStore(r.URL.Path, true); again {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		w.Header().Set("Date", date())
		w.Header().Set("Cache-Control", strings.TrimPrefix(r.URL.Path, "/"))
		io.WriteString(w, "stored once")
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = downSrv.Serve(downLn) }()
	t.Cleanup(func() { downSrv.Close() })
	downHost := coralName(downLn.Addr().String())

	p := startOne(t, netip.MustParseAddr("127.0.79.20"), proxyOptions{extra: []string{"default_ttl 0", "min_ttl 0"}})
	c := newClient(t)
	twice := func(host, path string) (first, second *http.Response, body string) {
		t.Helper()
		resp1, _, err := fetch(c, p, host, path)
		if err != nil {
			t.Fatal(err)
		}
		waitDownloads(t, p)
		resp2, b, err := fetch(c, p, host, path)
		if err != nil {
			t.Fatal(err)
		}
		return resp1, resp2, string(b)
	}

	t.Run("RFC 9111 §4.2.3 Age", func(t *testing.T) {
		first, _, _ := twice(originHost, "/age")
		if a, _ := strconv.Atoi(first.Header.Get("Age")); a < 7200 {
			t.Errorf("first response Age %q, want the origin's 7200 or more", first.Header.Get("Age"))
		}
		if n := asked.get("/age"); n != 2 {
			t.Errorf("origin asked %d times; a response older than its max-age must not be reused", n)
		}
	})
	t.Run("RFC 9213 CDN-Cache-Control", func(t *testing.T) {
		first, second, body := twice(originHost, "/cdn")
		if body != "for CDNs" || !strings.Contains(second.Header.Get("Cache-Status"), "hit") {
			t.Errorf("second: %q %q; want a hit despite Cache-Control: no-store", body, second.Header.Get("Cache-Status"))
		}
		if first.Header.Get("Coral-Cache-Control") != "" || first.Header.Get("CDN-Cache-Control") != "max-age=600" {
			t.Errorf("to the client: Coral-Cache-Control %q (want none), CDN-Cache-Control %q (want passed on)",
				first.Header.Get("Coral-Cache-Control"), first.Header.Get("CDN-Cache-Control"))
		}
	})
	t.Run("RFC 9111 §5.3 invalid Expires", func(t *testing.T) {
		twice(originHost, "/expires")
		if n := asked.get("/expires"); n != 2 {
			t.Errorf("origin asked %d times; an invalid Expires is already expired", n)
		}
	})
	t.Run("RFC 9111 §3 503 with max-age", func(t *testing.T) {
		_, second, body := twice(originHost, "/503")
		if second.StatusCode != http.StatusServiceUnavailable || body != "down for a minute" || asked.get("/503") != 1 {
			t.Errorf("second: %d %q, origin asked %d times; want the stored 503", second.StatusCode, body, asked.get("/503"))
		}
	})
	t.Run("RFC 9110 §15.2 interim responses", func(t *testing.T) {
		var hints atomic.Int32
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if code == http.StatusEarlyHints && h.Get("Link") != "" {
				hints.Add(1)
			}
			return nil
		}}
		ctx := httptrace.WithClientTrace(context.Background(), trace)
		resp, err := c.Do(request(ctx, p, originHost, "/hints"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if hints.Load() != 1 || string(b) != "page" || resp.Header.Get("Link") != "" {
			t.Errorf("103 Early Hints seen %d times, body %q, Link on the final response %q", hints.Load(), b, resp.Header.Get("Link"))
		}
	})
	t.Run("RFC 9112 §6 transfer codings", func(t *testing.T) {
		first, second, body := twice(rawHost, "/te")
		if first.StatusCode != http.StatusOK || body != "decoded by the proxy" || !strings.Contains(second.Header.Get("Cache-Status"), "hit") {
			t.Errorf("gzip, chunked: %d, second %q %q", first.StatusCode, body, second.Header.Get("Cache-Status"))
		}
		if te := second.Header.Get("Transfer-Encoding"); te != "" {
			t.Errorf("Transfer-Encoding %q stored", te)
		}
	})
	t.Run("RFC 9111 §4.2.4 no-cache is never served stale", func(t *testing.T) {
		// The path is the Cache-Control the origin sends. Both copies are
		// stale at once (max-age=0); the origin then drops the connection.
		// Without no-cache the stale copy is served (disconnected, §4.2.4);
		// with it the client gets an error, not the copy.
		_, second, body := twice(downHost, "/max-age=0")
		if second.StatusCode != http.StatusOK || body != "stored once" || !strings.Contains(second.Header.Get("Cache-Status"), "fwd=stale") {
			t.Errorf("max-age=0, origin gone: %d %q %q; want the stale copy", second.StatusCode, body, second.Header.Get("Cache-Status"))
		}
		_, second, body = twice(downHost, "/no-cache")
		if second.StatusCode != http.StatusBadGateway || body == "stored once" {
			t.Errorf("no-cache, origin gone: %d %q %q; want 502, never the stored copy", second.StatusCode, body, second.Header.Get("Cache-Status"))
		}
		// Two uses, each at the origin; Go's transport may retry the
		// dropped GET once on a new connection, so at least two.
		if asked.get("/no-cache") < 2 {
			t.Errorf("origin asked %d times for /no-cache; no-cache revalidates every use", asked.get("/no-cache"))
		}
	})
	t.Run("RFC 9111 §4.4 unsafe methods", func(t *testing.T) {
		resp, _ := raw(t, p, "POST /age HTTP/1.1\r\nHost: "+originHost+"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("POST: %d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
		}
	})
}

// coralName is the Coralized host of an origin address.
func coralName(addr string) string {
	ap := netip.MustParseAddrPort(addr)
	return fmt.Sprintf("%s.%d.%s", ap.Addr(), ap.Port(), zone)
}

// pathCounter counts requests per path.
type pathCounter struct {
	mu    sync.Mutex
	count map[string]int
}

func (c *pathCounter) add(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.count == nil {
		c.count = map[string]int{}
	}
	c.count[path]++
}

func (c *pathCounter) get(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count[path]
}
