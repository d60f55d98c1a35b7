package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// --- the diskcache index, in this process ---------------------------------------

// indexKey is the i-th object's cache key, as coral_proxy computes it.
func indexKey(i int) string {
	return coralname.CacheKey("http", "127.0.0.1", 8080, objPrefix+strconv.Itoa(i), "")
}

// heapInuse is the heap in use after a full GC.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// indexMemory puts n objects into a diskcache.Store, through its public API
// the way coral_proxy does (Create with the origin's metadata, Write,
// Commit), and measures the heap in use after a GC before and at every
// quarter; then reopens the store, which rebuilds the index from disk, and
// measures that too. Bodies and metadata stay on disk; what remains on the
// heap is the index.
//
// The store goes on tmpfs (/dev/shm) when there is one: the measurement is
// of memory, and a busy disk would make creating a few hundred thousand
// small files take minutes.
func indexMemory(ctx context.Context, n int) (*indexResult, error) {
	parent := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		parent = "/dev/shm"
	}
	dir, err := os.MkdirTemp(parent, "coral-httpbench-index-")
	if err != nil {
		dir, err = os.MkdirTemp("", "coral-httpbench-index-")
	}
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	res := &indexResult{Objects: n, KeyBytes: 40, BodyBytes: 100, Dir: filepath.Dir(dir)}
	opts := diskcache.Options{Dir: dir, MaxBytes: 1 << 40, NoSync: true}
	start := time.Now()
	base := heapInuse()
	s, err := diskcache.Open(opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	opened := heapInuse()
	res.EmptyStoreBytes = int64(opened) - int64(base)
	body := make([]byte, res.BodyBytes)
	now := time.Now()
	meta := diskcache.Meta{
		Status: http.StatusOK,
		Header: http.Header{
			"Content-Type":   {"application/octet-stream"},
			"Cache-Control":  {"public, max-age=86400"},
			"Last-Modified":  {lastModified.Format(http.TimeFormat)},
			"Content-Length": {strconv.Itoa(res.BodyBytes)},
		},
		Stored:  now,
		Expires: now.Add(24 * time.Hour),
		Size:    int64(res.BodyBytes),
	}
	quarter := max(1, n/4)
	for i := range n {
		if i%1000 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		key := indexKey(i)
		m := meta
		m.Key = key
		m.Extra = map[string]string{"source": "origin", "url": "http://127.0.0.1:8080" + objPrefix + strconv.Itoa(i)}
		w, err := s.Create(key, m)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(body); err != nil {
			w.Close()
			return nil, err
		}
		if err := w.Commit(w.Meta()); err != nil {
			return nil, err
		}
		if done := i + 1; done%quarter == 0 || done == n {
			h := heapInuse()
			res.Steps = append(res.Steps, indexStep{Objects: done, HeapBytes: int64(h) - int64(opened),
				PerObject: float64(int64(h)-int64(opened)) / float64(done)})
		}
	}
	res.InsertSeconds = time.Since(start).Seconds()
	if st := s.Stats(); st.Entries != n {
		return nil, fmt.Errorf("index measurement: the store holds %d objects, want %d", st.Entries, n)
	}
	last := res.Steps[len(res.Steps)-1]
	res.PerObject = last.PerObject
	if len(res.Steps) >= 2 {
		first := res.Steps[0]
		res.Marginal = float64(last.HeapBytes-first.HeapBytes) / float64(last.Objects-first.Objects)
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	s = nil
	closed := heapInuse()
	s, err = diskcache.Open(opts)
	if err != nil {
		return nil, err
	}
	if st := s.Stats(); st.Entries != n {
		return nil, fmt.Errorf("index measurement: the reopened store holds %d objects, want %d", st.Entries, n)
	}
	reopened := heapInuse()
	res.ReopenPerObject = float64(int64(reopened)-int64(closed)-res.EmptyStoreBytes) / float64(n)

	// The hot set: the second Get of an object (as the second hit does)
	// keeps its decoded metadata in memory, within the store's bound; the
	// last ones read stay.
	for range 2 {
		for i := range n {
			if i%1000 == 0 && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			r, ok := s.Get(indexKey(i))
			if !ok {
				return nil, fmt.Errorf("index measurement: object %d missing after reopening", i)
			}
			r.Close()
		}
	}
	read := heapInuse()
	st := s.Stats()
	hot := &hotResult{Reads: n, Limit: diskcache.DefaultHotMetaBytes, Entries: st.HotEntries,
		Estimated: st.HotBytes, HeapBytes: int64(read) - int64(reopened), MetaReads: st.MetaReads}
	if hot.Entries > 0 {
		hot.PerEntry = float64(hot.HeapBytes) / float64(hot.Entries)
	}
	res.Hot = hot
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// --- the whole proxy, in Caddy ------------------------------------------------

// caddyHeap has Caddy collect its garbage (its admin endpoint's
// /debug/pprof/heap?gc=1) and returns its heap in use from /metrics
// (go_memstats_heap_inuse_bytes), and its resident set.
func (b *bench) caddyHeap() (heap, rss int64, err error) {
	for range 2 {
		if _, err := b.adminGet("/debug/pprof/heap?gc=1"); err != nil {
			return 0, 0, err
		}
	}
	raw, err := b.adminGet("/metrics")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, 0, err
			}
			return int64(f), vmRSS(b.caddy.Pid()), nil
		}
	}
	return 0, 0, errors.New("caddy's /metrics has no go_memstats_heap_inuse_bytes")
}

// adminGet fetches a path of Caddy's admin endpoint.
func (b *bench) adminGet(path string) ([]byte, error) {
	return adminGetAt(b.target("coral").addr.Addr(), path)
}

// adminGetAt fetches a path of the admin endpoint of the Caddy on addr.
func adminGetAt(addr netip.Addr, path string) ([]byte, error) {
	c := http.Client{Timeout: 30 * time.Second}
	url := fmt.Sprintf("http://%v:%d%s", addr, adminPort, path)
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return raw, nil
}

// coralRequests reads caddy_coral_requests_total from the /metrics of the
// Caddy serving t, summed by cache status (hit, miss, collapsed, stale,
// refused).
func (b *bench) coralRequests(t *target) (map[string]float64, error) {
	raw, err := adminGetAt(t.addr.Addr(), "/metrics")
	if err != nil {
		return nil, err
	}
	return parseCoralRequests(string(raw)), nil
}

func parseCoralRequests(text string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, "caddy_coral_requests_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		status := "?"
		for _, l := range strings.Split(labels, ",") {
			if k, val, ok := strings.Cut(l, "="); ok && k == "cache_status" {
				status = strings.Trim(val, `"`)
			}
		}
		out[status] += v
	}
	return out
}

// proxyMemory fetches n distinct objects through coral_proxy (each a miss:
// a DSHT put+get, an origin fetch, a disk write, and the long-lived DSHT
// reference) and measures Caddy's heap before and after.
func (b *bench) proxyMemory(ctx context.Context, n int) (*proxyResult, error) {
	t := b.target("coral")
	res := &proxyResult{Objects: n, BodyBytes: objBytes}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16,
		DisableCompression:  true,
	}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	heap0, rss0, err := b.caddyHeap()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	o0 := b.origin.objects.Load()
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	var misses atomic.Int64
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url(objPrefix+strconv.Itoa(i)), nil)
				if err != nil {
					fail(err)
					return
				}
				req.Host = t.host
				resp, err := client.Do(req)
				if err != nil {
					fail(err)
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					fail(err)
					return
				case resp.StatusCode != http.StatusOK || len(body) != objBytes || body[len(body)-1] != byte(i):
					fail(fmt.Errorf("%s: %s, %d bytes", req.URL, resp.Status, len(body)))
					return
				}
				if strings.Contains(resp.Header.Get("Cache-Status"), "fwd=uri-miss") {
					misses.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if firstErr != nil {
		return nil, fmt.Errorf("proxy memory: %w", firstErr)
	}
	res.Seconds = time.Since(start).Seconds()
	res.Misses = misses.Load()
	res.OriginFetches = b.origin.objects.Load() - o0
	tr.CloseIdleConnections()
	// Every object must be cached: a later request for a sample is a hit
	// (within a moment: the last bytes reach the client just before the
	// cache commits them).
	for _, i := range []int{0, n / 2, n - 1} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			r, err := get(t, objPrefix+strconv.Itoa(i))
			if err != nil {
				return nil, err
			}
			cs := r.Header.Get("Cache-Status")
			if strings.Contains(cs, "; hit;") {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("proxy memory: %s%d is not cached after the fetch (Cache-Status %q)", objPrefix, i, cs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Let connections close and the download goroutines end.
	time.Sleep(time.Second)
	heap1, rss1, err := b.caddyHeap()
	if err != nil {
		return nil, err
	}
	if b.p.Profile != "" {
		if res.HeapProfile, err = b.saveHeapProfile("fetched"); err != nil {
			return nil, err
		}
	}
	res.HeapBefore, res.HeapAfter = heap0, heap1
	res.RSSBefore, res.RSSAfter = rss0, rss1
	res.PerObject = float64(heap1-heap0) / float64(n)
	res.RSSPerObject = float64(rss1-rss0) / float64(n)
	return res, nil
}

// saveHeapProfile writes Caddy's heap profile (after a GC) to the -profile
// directory.
func (b *bench) saveHeapProfile(when string) (string, error) {
	if err := os.MkdirAll(b.p.Profile, 0o755); err != nil {
		return "", err
	}
	raw, err := b.adminGet("/debug/pprof/heap?gc=1")
	if err != nil {
		return "", err
	}
	path := filepath.Join(b.p.Profile, "httpbench-caddy-heap-"+when+".pprof")
	return path, os.WriteFile(path, raw, 0o644)
}
