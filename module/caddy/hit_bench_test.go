package coralcaddy

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
)

// The measured budget of a cache hit: coral_proxy's ServeHTTP as Caddy
// calls it, with the metrics registered and the request's Caddy variables
// (client_ip) set, for the two object sizes of eval/httpbench. What is left
// out is Caddy's server and net/http around it (request parsing, the
// connection's writes), which file_server pays as well.
//
//	go test -run '^$' -bench 'BenchmarkHit' -benchmem ./module/caddy

func BenchmarkHit1KiB(b *testing.B)   { benchmarkHit(b, 1<<10) }
func BenchmarkHit100KiB(b *testing.B) { benchmarkHit(b, 100<<10) }

func benchmarkHit(b *testing.B, size int) {
	path := "/" + strconv.Itoa(size>>10) + "k"
	h, _, _ := hitHandler(b, path, size)
	var err error
	if h.metrics, err = newProxyMetrics(prometheus.NewRegistry(), nil, h.store); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.metrics.release)
	r := caddyRequest(hitRequest(http.MethodGet, path))
	w := &discardWriter{hdr: http.Header{}, buf: make([]byte, 32<<10)}
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

// caddyRequest gives r the context Caddy's server gives every request:
// the variables table with client_ip.
func caddyRequest(r *http.Request) *http.Request {
	vars := map[string]any{caddyhttp.ClientIPVarKey: "127.0.0.9"}
	return r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, vars))
}

// TestHitAllocations bounds what a hit allocates (BenchmarkHit's path). A
// small hot object's body is in memory (diskcache's hot set): its reader,
// the response's header values and the response writer's wrapper, 3 in
// all. A larger body is read from its file: opening it adds 4 (path,
// descriptor, file), and a body copied in pieces one more, discardWriter's
// (net/http's ReadFrom has none). A 1 KiB hit allocated 21 times before its
// request Cache-Control, its metrics and its metadata stopped allocating,
// 8 before its body was kept in memory, and 4 before its key came from the
// parsed-target cache (targetcache.go).
func TestHitAllocations(t *testing.T) {
	for _, size := range []int{1 << 10, 100 << 10} {
		limit := 3
		if size > 32<<10 {
			limit = 8
		}
		path := "/" + strconv.Itoa(size>>10) + "k"
		h, _, _ := hitHandler(t, path, size)
		var err error
		if h.metrics, err = newProxyMetrics(prometheus.NewRegistry(), nil, h.store); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.metrics.release)
		r := caddyRequest(hitRequest(http.MethodGet, path))
		w := &discardWriter{hdr: http.Header{}, buf: make([]byte, 32<<10)}
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
