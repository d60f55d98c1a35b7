package proxylab

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSlicesAcrossFleet (issue 42): three bin/caddy proxies with
// slice_size 1MiB and a crowd of two clients at each, all at once, on a
// cold 20 MiB object of an origin that does ranges. Every client gets the
// origin's bytes, all of them; the origin is asked for the object once
// (a plain GET, of which the proxy keeps slice 0) and for every other
// slice once, whichever proxy needs it first; and a cold range at a proxy
// that has not seen the object comes from the slices its peers hold, 206
// with just the range.
func TestSlicesAcrossFleet(t *testing.T) {
	const size, slice = 20<<20 + 4321, 1 << 20
	body := make([]byte, size)
	rng := rand.New(rand.NewPCG(42, 42))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	var sent atomic.Int64
	o := newScriptOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Type", "video/mp4")
		w.Header().Set("Etag", `"big-1"`)
		http.ServeContent(&sentCounter{ResponseWriter: w, n: &sent}, r, "", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), bytes.NewReader(body))
	})
	ips := []netip.Addr{netip.MustParseAddr("127.0.79.60"), netip.MustParseAddr("127.0.79.61"), netip.MustParseAddr("127.0.79.62")}
	ps := startNetwork(t, ips, proxyOptions{extra: []string{"slice_size 1MiB", "cache_size 256MiB"}})
	c := newClient(t)

	var wg sync.WaitGroup
	for i := range 2 * len(ps) {
		wg.Go(func() {
			p := ps[i%len(ps)]
			resp, got, err := fetch(c, p, o.coralHost(), "/movie.mp4")
			switch {
			case err != nil:
				t.Errorf("%s: %v", p.name, err)
			case resp.StatusCode != http.StatusOK || !bytes.Equal(got, body):
				t.Errorf("%s: %d, %d bytes (the origin's: %v)", p.name, resp.StatusCode, len(got), bytes.Equal(got, body))
			}
		})
	}
	wg.Wait()
	var asked []string
	for _, h := range o.requests("/movie.mp4") {
		asked = append(asked, h.Get("Range"))
	}
	want := []string{""}
	for first := int64(slice); first < size; first += slice {
		want = append(want, fmt.Sprintf("bytes=%d-%d", first, min(first+slice, size)-1))
	}
	slices.Sort(asked)
	slices.Sort(want)
	if !slices.Equal(asked, want) {
		t.Errorf("the origin was asked (Range) %q; want the object once and each other slice once: %q", asked, want)
	}
	t.Logf("the origin sent %d bytes for the %d-byte object (%.3f times)", sent.Load(), size, float64(sent.Load())/size)

	// A cold range at a proxy that never saw the object: from the peers.
	fresh := startProxy(t, "proxy-fresh", netip.MustParseAddr("127.0.79.63"), ips[0], proxyOptions{extra: []string{"slice_size 1MiB"}})
	waitFor(t, "fresh proxy ready", 60*time.Second, []*proxy{fresh}, func() error { return fresh.ready(1) })
	before := len(o.requests("/movie.mp4"))
	resp, got, err := fetch(c, fresh, o.coralHost(), "/movie.mp4", "Range", "bytes=10000000-10000999")
	if err != nil || resp.StatusCode != http.StatusPartialContent || !bytes.Equal(got, body[10000000:10001000]) {
		t.Fatalf("a cold range at a fresh proxy: %v, %d bytes", err, len(got))
	}
	for _, h := range o.requests("/movie.mp4")[before:] {
		if h.Get("Range") == "bytes=10000000-10000999" {
			t.Errorf("the range was asked of the origin though peers hold its slice (Cache-Status %q)", resp.Header.Get("Cache-Status"))
		}
	}
}

// sentCounter counts the body bytes an origin writes.
type sentCounter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (s *sentCounter) Write(p []byte) (int, error) {
	k, err := s.ResponseWriter.Write(p)
	s.n.Add(int64(k))
	return k, err
}
