package coralcaddy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// The measured budget of a cache hit: coral_proxy's ServeHTTP as Caddy
// calls it, on a handler Caddy provisioned from a Caddyfile (its metrics
// registered, its abuse controls on with a rate that never refuses), with
// the request's Caddy variables (client_ip) set, for the two object sizes
// of eval/httpbench. What is left out is Caddy's server and net/http around
// it (request parsing, the connection's writes), which file_server pays as
// well, and write_idle_timeout, whose writer Caddy's server would supply.
//
//	go test -run '^$' -bench 'BenchmarkHit' -benchmem ./module/caddy

func BenchmarkHit1KiB(b *testing.B)   { benchmarkHit(b, 1<<10) }
func BenchmarkHit100KiB(b *testing.B) { benchmarkHit(b, 100<<10) }

func benchmarkHit(b *testing.B, size int) {
	path := "/" + strconv.Itoa(size>>10) + "k"
	h := hitHandler(b, path, size)
	r := caddyRequest(benchHitRequest(path))
	w := &benchWriter{hdr: http.Header{}, buf: make([]byte, 32<<10)}
	b.ReportAllocs()
	b.SetBytes(int64(size))
	for b.Loop() {
		clear(w.hdr)
		w.status, w.n = 0, 0
		if err := h.ServeHTTP(w, r, nil); err != nil {
			b.Fatal(err)
		}
		if w.status != http.StatusOK || w.n != int64(size) || w.hdr.Get("Cache-Status") != `coral; hit; detail="local"` {
			b.Fatalf("status %d, %d bytes, Cache-Status %q", w.status, w.n, w.hdr.Get("Cache-Status"))
		}
	}
}

// TestHitAllocations bounds what a hit allocates (BenchmarkHit's path). A
// small hot object's body is in memory (diskcache's hot set): its reader,
// the response's header values and the response writer's wrapper, 3 in
// all. A larger body is read from its file: opening it adds 4 (path,
// descriptor, file), and a body copied in pieces one more, benchWriter's
// (net/http's ReadFrom has none). A 1 KiB hit allocated 21 times before its
// request Cache-Control, its metrics and its metadata stopped allocating,
// 8 before its body was kept in memory, and 4 before its key came from the
// parsed-target cache (proxy/targetcache.go).
func TestHitAllocations(t *testing.T) {
	for _, size := range []int{1 << 10, 100 << 10} {
		limit := 3
		if size > 32<<10 {
			limit = 8
		}
		path := "/" + strconv.Itoa(size>>10) + "k"
		h := hitHandler(t, path, size)
		r := caddyRequest(benchHitRequest(path))
		w := &benchWriter{hdr: http.Header{}, buf: make([]byte, 32<<10)}
		allocs := testing.AllocsPerRun(100, func() {
			clear(w.hdr)
			w.status, w.n = 0, 0
			if err := h.ServeHTTP(w, r, nil); err != nil || w.status != http.StatusOK || w.n != int64(size) {
				t.Fatalf("status %d, %d bytes, %v", w.status, w.n, err)
			}
		})
		if allocs > float64(limit) {
			t.Errorf("%s: a hit allocates %.0f times, want at most %d", path, allocs, limit)
		}
	}
}

// benchHitHost is the Coralized host of the benchmark's object: origin
// 127.0.0.1:8080, never contacted.
const benchHitHost = "127.0.0.1.8080.nyud.test"

// hitHandler starts Caddy with a coral_proxy (write_idle_timeout off, a
// rate limit that never refuses, as in eval/httpbench) and returns its
// handler, whose cache holds path's object of size bytes, stored with the
// metadata the proxy keeps for an origin's response.
func hitHandler(tb testing.TB, path string, size int) *Handler {
	tb.Helper()
	startProxy(tb, "write_idle_timeout off", "rate_limit 1000000 1000000")
	h := newestHandler(tb)
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i*7 + i>>8)
	}
	key := coralname.CacheKey("http", "127.0.0.1", 8080, path, "")
	now := time.Now()
	m := diskcache.Meta{
		Key:    key,
		Status: http.StatusOK,
		Header: http.Header{
			"Content-Type":   {"application/octet-stream"},
			"Cache-Control":  {"public, max-age=86400"},
			"Content-Length": {strconv.Itoa(size)},
			"Date":           {now.UTC().Format(http.TimeFormat)},
		},
		Stored:  now,
		Expires: now.Add(24 * time.Hour),
		Size:    int64(size),
		Extra:   map[string]string{"source": "origin", "url": "http://127.0.0.1:8080" + path},
	}
	w, err := h.store.Create(key, m)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Write(body); err != nil {
		tb.Fatal(err)
	}
	if err := w.Commit(m); err != nil {
		tb.Fatal(err)
	}
	return h
}

func benchHitRequest(path string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://"+benchHitHost+path, nil)
	r.RemoteAddr = "127.0.0.9:40000"
	return r
}

// caddyRequest gives r the context Caddy's server gives every request:
// the variables table with client_ip, and net/http's local address (from
// which the proxy learns its address for peers, on the first request).
func caddyRequest(r *http.Request) *http.Request {
	vars := map[string]any{caddyhttp.ClientIPVarKey: "127.0.0.9"}
	ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, vars)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9180})
	return r.WithContext(ctx)
}

// benchWriter is a ResponseWriter that keeps nothing, with a ReadFrom as
// net/http's (so bodies may be copied through it without an allocation).
type benchWriter struct {
	hdr    http.Header
	status int
	n      int64
	buf    []byte
}

func (d *benchWriter) Header() http.Header { return d.hdr }

func (d *benchWriter) WriteHeader(code int) {
	if d.status == 0 {
		d.status = code
	}
}

func (d *benchWriter) Write(p []byte) (int, error) {
	d.WriteHeader(http.StatusOK)
	d.n += int64(len(p))
	return len(p), nil
}

func (d *benchWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{d}, r, d.buf)
}
