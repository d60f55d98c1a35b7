package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/memnet"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// The lifetimes of the references a proxy puts in the DSHT, as the paper
// gives them (§4.2 and §5): 20 seconds for a download in progress (renewed
// while it runs), 2 hours after a successful fetch, 15 minutes network-wide
// for an error. The tests below observe them from another node, in virtual
// time, so each fails if its lifetime is removed or changed.

// lifetimeLab is one proxy (on node A) and an observer node B on an
// in-memory network, inside a synctest bubble.
type lifetimeLab struct {
	px       *Proxy
	observer *coraldht.Node
	origin   map[string]func() *http.Response
}

const lifetimeZone = "nyud.test"

func startLifetimeLab(t *testing.T) *lifetimeLab {
	t.Helper()
	mem := memnet.New(memnet.Config{
		Latency: func(from, to netip.AddrPort) time.Duration { return time.Millisecond },
	})
	var nodes []*coraldht.Node
	for i := range 3 {
		tr, err := mem.Listen(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 9, byte(10 + i)}), 4000))
		if err != nil {
			t.Fatal(err)
		}
		cfg := coraldht.DefaultConfig()
		cfg.Services = coraldht.ServiceHTTP
		cfg.HintHops = 0
		cfg.Seed = uint64(i + 1)
		node, err := coraldht.NewNode(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		nodes = append(nodes, node)
	}
	for _, n := range nodes[1:] {
		if err := n.Bootstrap(context.Background(), nodes[0].Addr()); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig()
	cfg.Zone = lifetimeZone
	cfg.Store = openTestStore(t, diskcache.Options{Dir: t.TempDir(), MaxBytes: 16 << 20})
	cfg.Node = func() DHT { return nodes[0] }
	cfg.PeerAddress = netip.MustParseAddrPort("127.0.9.10:8080")
	// An origin may keep a body silent for 5 minutes (origin_timeout):
	// TestReferenceLifetimeInProgress holds one a minute.
	cfg.OriginTimeout = 5 * time.Minute
	px, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lab := &lifetimeLab{px: px, observer: nodes[1], origin: map[string]func() *http.Response{}}
	// The origin is a function: the proxy runs in a synctest bubble,
	// where a real connection would be no good.
	lab.px.origin.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		respond, ok := lab.origin[r.URL.Path]
		if !ok {
			return nil, errors.New("no such test object")
		}
		resp := respond()
		resp.Request = r
		return resp, nil
	})
	return lab
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func originResponse(status int, body io.Reader) *http.Response {
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Cache-Control": {"max-age=86400"}}, Body: io.NopCloser(body), ContentLength: -1}
}

// get asks the proxy for path on origin 127.0.0.1:8080 and returns the status.
func (lab *lifetimeLab) get(t *testing.T, path string) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1.8080."+lifetimeZone+path, nil)
	rec := httptest.NewRecorder()
	if err := lab.px.ServeHTTP(rec, req); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return rec.Code
}

// refs returns the references the observer finds for path, with the
// lifetime each has left.
func (lab *lifetimeLab) refs(t *testing.T, path string) map[reference]time.Duration {
	t.Helper()
	key := coraldht.KeyFor(coralname.CacheKey("http", "127.0.0.1", 8080, path, ""))
	res, err := lab.observer.Get(context.Background(), key)
	if errors.Is(err, coraldht.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s: %v", path, err)
	}
	out := map[reference]time.Duration{}
	for _, v := range res.Values {
		r, err := decodeReference(v.Data)
		if err != nil {
			t.Fatalf("bad reference under %s: %v", path, err)
		}
		out[r] = v.TTL
	}
	return out
}

// checkLifetime asserts that a reference of the given kind is in the
// network with about want left now, still there just before want has
// passed, and gone just after.
func (lab *lifetimeLab) checkLifetime(t *testing.T, path string, want time.Duration, match func(reference) bool) {
	t.Helper()
	find := func() (time.Duration, bool) {
		for r, ttl := range lab.refs(t, path) {
			if match(r) {
				return ttl, true
			}
		}
		return 0, false
	}
	start := time.Now()
	ttl, ok := find()
	if !ok {
		t.Fatalf("%s: no reference in the network after the fetch", path)
	}
	if ttl > want || ttl < want-5*time.Second {
		t.Errorf("%s: reference put with %v to live, want %v", path, ttl, want)
	}
	time.Sleep(want - 10*time.Second - time.Since(start))
	if _, ok := find(); !ok {
		t.Errorf("%s: reference gone %v after the fetch, want it for %v", path, time.Since(start), want)
	}
	time.Sleep(want + 10*time.Second - time.Since(start))
	if ttl, ok := find(); ok {
		t.Errorf("%s: reference still there %v after the fetch (%v left), want it gone after %v", path, time.Since(start), ttl, want)
	}
}

// TestReferenceLifetimeGood: a successful fetch leaves a complete reference
// for 2 hours.
func TestReferenceLifetimeGood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lab := startLifetimeLab(t)
		lab.origin["/ok.jpg"] = func() *http.Response { return originResponse(http.StatusOK, strings.NewReader("picture")) }
		if code := lab.get(t, "/ok.jpg"); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		time.Sleep(time.Second) // the download's end puts the reference, a few RPCs
		lab.checkLifetime(t, "/ok.jpg", 2*time.Hour, func(r reference) bool { return r.Complete && !r.Negative })
	})
}

// TestReferenceLifetimeNegative: an error the origin means (404) is
// remembered network-wide for 15 minutes.
func TestReferenceLifetimeNegative(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lab := startLifetimeLab(t)
		lab.origin["/gone.jpg"] = func() *http.Response { return originResponse(http.StatusNotFound, strings.NewReader("no such file")) }
		if code := lab.get(t, "/gone.jpg"); code != http.StatusNotFound {
			t.Fatalf("status %d", code)
		}
		time.Sleep(time.Second) // the download's end puts the reference, a few RPCs
		lab.checkLifetime(t, "/gone.jpg", 15*time.Minute, func(r reference) bool { return r.Complete && r.Negative })
	})
}

// TestReferenceLifetimeInProgress: the put+get reference of a download in
// progress lives 20 seconds, is renewed while the download runs, and lapses
// 20 seconds after the last renewal once it is done.
func TestReferenceLifetimeInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lab := startLifetimeLab(t)
		body, feed := io.Pipe()
		lab.origin["/big.iso"] = func() *http.Response { return originResponse(http.StatusOK, body) }
		done := make(chan int)
		go func() { done <- lab.get(t, "/big.iso") }()
		fetching := func(r reference) bool { return !r.Complete }
		find := func() (time.Duration, bool) {
			for r, ttl := range lab.refs(t, "/big.iso") {
				if fetching(r) {
					return ttl, true
				}
			}
			return 0, false
		}
		time.Sleep(time.Second)
		if ttl, ok := find(); !ok || ttl > 20*time.Second || ttl < 18*time.Second {
			t.Errorf("1 s into the download: in-progress reference %v (found %v), want about 20s to live", ttl, ok)
		}
		// Well past one lifetime, the download still running: renewed.
		time.Sleep(time.Minute)
		if ttl, ok := find(); !ok || ttl > 20*time.Second {
			t.Errorf("61 s into the download: in-progress reference %v (found %v), want it renewed with at most 20s to live", ttl, ok)
		}
		feed.Write([]byte("the whole image"))
		feed.Close()
		if code := <-done; code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		finished := time.Now()
		if _, ok := find(); !ok {
			t.Errorf("in-progress reference gone as soon as the download ended")
		}
		time.Sleep(21*time.Second - time.Since(finished))
		if ttl, ok := find(); ok {
			t.Errorf("in-progress reference still there 21 s after the download ended (%v left)", ttl)
		}
	})
}
