package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
)

// TestDownloaderDiesWithWaitingPeers: three proxies copy an object from
// the proxy downloading it from the origin, which dies halfway. Their
// clients are cut off and ask again, all at once: the object is fetched
// from the origin once more, by one of them, and the others copy it from
// that one. (Each used to go to the origin on its own once the dead peer
// refused them.) The proxies' retry delays are fixed and apart, as the
// random ones almost always are: their own random delay is off
// (PeerRetryJitter 0), and their DSHT view (testDHT) holds each round's
// put+get on the URL's key for the proxy's delay. "Apart" means longer
// than a whole retry round: a round is two put+gets, each of which may
// wait out the dead node's 500 ms RPC timeouts (retryTestConfig), and on
// a loaded machine more. With delays of 400 and 800 ms a clean-clone CI
// run saw the third retrier's round overlap the first's and both go to
// the origin (3 fetches); rounds that overlap are what "blind, at once"
// tests, with the retry key alone deciding.
func TestDownloaderDiesWithWaitingPeers(t *testing.T) {
	const apart = 2 * time.Second
	// Whether the proxy with the lowest address retries first or last.
	t.Run("lowest first", func(t *testing.T) {
		downloaderDies(t, []time.Duration{0, 0, apart, 2 * apart}, false)
	})
	t.Run("lowest last", func(t *testing.T) {
		downloaderDies(t, []time.Duration{0, 2 * apart, apart, 0}, false)
	})
	// The proxies' put+gets on the URL's key name only the downloader
	// (a get answers with the first values it finds: after a partition
	// that is often the downloader's reference alone), so the retriers
	// do not see one another there; the retry key still makes one of
	// them the downloader. Without it each went to the origin.
	t.Run("blind, apart", func(t *testing.T) {
		downloaderDies(t, []time.Duration{0, 0, apart, 2 * apart}, true)
	})
	t.Run("blind, at once", func(t *testing.T) {
		downloaderDies(t, []time.Duration{0, 0, 0, 0}, true)
	})
}

// retryTestConfig gives downloaderDies's DSHT nodes an RPC timeout floor
// of 500 ms instead of 50 ms. The test checks how the retriers agree on
// one downloader, not how fast a live node answers. A clean-clone CI run
// on a heavily loaded machine fetched 3 times where it wants 2 ("lowest
// last": the first two retriers each went to the origin); the likely
// cause, inferred and not seen in logs, is a live node starved for
// 50 ms that looked dead to a put+get, which then missed the value the
// retry key held. With the floor the test passed 6 times in a row beside
// three busy loops. TestRetrierFindsWhomItSentToTheOrigin keeps the
// default: its steps are timed against the dead node's 50 ms timeouts.
func retryTestConfig(_ int, cfg *coraldht.Config, proxy *Config) {
	cfg.MinRPCTimeout = 500 * time.Millisecond
	proxy.PeerRetryJitter = 0
}

func downloaderDies(t *testing.T, delays []time.Duration, blind bool) {
	proxies := startTestProxiesWith(t, 4, 186, retryTestConfig)
	dead := netip.MustParseAddrPort(proxies[0].srv.Listener.Addr().String())
	half := bytes.Repeat([]byte("q"), 256<<10)
	o, ask := stallingOrigin(t, half)
	urlKey := coraldht.KeyFor(coralname.CacheKey("http", "127.0.0.1", atoi(t, o.port()), "/big", ""))
	var first []*http.Response
	for i, p := range proxies {
		resp, err := ask(p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if i > 0 && !strings.Contains(resp.Header.Get("Cache-Status"), "peer") {
			t.Fatalf("P%d did not copy from P0: %q", i, resp.Header.Get("Cache-Status"))
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, len(half))); err != nil {
			t.Fatal(err)
		}
		first = append(first, resp)
	}
	// P0 dies: its HTTP server and its DSHT node. From now on each
	// proxy's put+gets on the URL's key after the first are its retry
	// rounds, held for its delay; blind, every one names only P0.
	proxies[0].srv.CloseClientConnections()
	proxies[0].srv.Close()
	proxies[0].node.Close()
	for i, p := range proxies[1:] {
		var rounds atomic.Int32
		p.dht.setAround(func(key coraldht.ID, putGet func() (coraldht.PutGetResult, error)) (coraldht.PutGetResult, error) {
			if key != urlKey {
				return putGet()
			}
			if rounds.Add(1) > 1 {
				time.Sleep(delays[i+1])
			}
			res, err := putGet()
			if blind {
				res.Values = onlyReference(dead)
			}
			return res, err
		})
	}
	for i, resp := range first[1:] {
		if rest, err := io.ReadAll(resp.Body); err == nil {
			t.Fatalf("P%d's client saw a clean end after %d more bytes from a dead peer", i+1, len(rest))
		}
	}
	// Their clients ask again, at once.
	var wg sync.WaitGroup
	for i, p := range proxies[1:] {
		wg.Go(func() {
			resp, err := ask(p)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(body, append(half, half...)) {
				t.Errorf("P%d again: %d bytes, %v, Cache-Status %q", i+1, len(body), err, resp.Header.Get("Cache-Status"))
			}
			t.Logf("P%d again: %s", i+1, resp.Header.Get("Cache-Status"))
		})
	}
	wg.Wait()
	if n := o.count("/big"); n != 2 {
		t.Errorf("origin fetches: %d, want 2 (P0's, then one for the three proxies it left)", n)
	}
}

// stallingOrigin serves /big as half twice; its first fetch (P0's)
// stalls after the first half until the test ends. ask requests /big
// from a proxy under the origin's Coralized name.
func stallingOrigin(t *testing.T, half []byte) (*countingOrigin, func(*testProxy) (*http.Response, error)) {
	var fetches atomic.Int32
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(2*len(half)))
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write(half)
		w.(http.Flusher).Flush()
		if fetches.Add(1) == 1 {
			<-o.gate
		}
		w.Write(half)
	})
	t.Cleanup(func() { close(o.gate) })
	ask := func(p *testProxy) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, p.srv.URL+"/big", nil)
		req.Host = o.coralHost()
		return http.DefaultClient.Do(req)
	}
	return o, ask
}

// TestPeerFailed: which errors leave a peer out of the next put+get.
func TestPeerFailed(t *testing.T) {
	timeout := &timeoutErr{}
	for _, c := range []struct {
		err       error
		connected bool
		want      bool
	}{
		{nil, true, false},
		{fmt.Errorf("%w: 504", errPeerNotCached), true, false},
		{errors.New("connection refused"), false, true},
		{io.ErrUnexpectedEOF, true, true},
		{timeout, false, true}, // could not connect: out of reach
		{timeout, true, false}, // connected, slow: alive, maybe waiting on its own peer
	} {
		if got := peerFailed(c.err, c.connected); got != c.want {
			t.Errorf("peerFailed(%v, connected %v) = %v, want %v", c.err, c.connected, got, c.want)
		}
	}
}

type timeoutErr struct{}

func (*timeoutErr) Error() string   { return "i/o timeout" }
func (*timeoutErr) Timeout() bool   { return true }
func (*timeoutErr) Temporary() bool { return true }

// TestRetryingPeerAnswers: a proxy whose download lost its peer answers a
// peer's only-if-cached request with the 504 that says it retries too,
// at once, and the asking proxy reads it as such (errPeerRetrying).
func TestRetryingPeerAnswers(t *testing.T) {
	proxies := startTestProxiesIn(t, 2, 186)
	req, _ := http.NewRequest(http.MethodGet, proxies[0].srv.URL+"/x", nil)
	req.Host = "127.0.0.1.8080.nyud.test"
	target, err := requestTarget(req, "nyud.test")
	if err != nil {
		t.Fatal(err)
	}
	e := proxies[0].px
	d := &download{ready: make(chan struct{}), key: target.Key(), background: true} // nobody cancels it
	d.peerRetry.set(true)
	e.mu.Lock()
	e.inflight[target.Key()] = d
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.inflight, target.Key())
		e.mu.Unlock()
	}()
	fr := fetchRequest{key: target.Key(), baseKey: target.Key(), target: target, scheme: "http"}
	ref := reference{Addr: netip.MustParseAddrPort(proxies[0].srv.Listener.Addr().String())}
	start := time.Now()
	_, err = proxies[1].px.askPeer(t.Context(), fr, ref)
	if !errors.Is(err, errPeerRetrying) {
		t.Fatalf("asking a retrying peer: %v, want errPeerRetrying", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("the retrying peer answered after %v, want at once", waited)
	}
	// Not retrying (searching its peers): the peer holds the request
	// until its download is ready or peer_timeout, and a retry that
	// starts meanwhile releases it with the same answer.
	d.peerRetry.set(false)
	go func() {
		time.Sleep(200 * time.Millisecond) // let the request arrive and wait; the answer does not depend on it
		d.peerRetry.set(true)
	}()
	_, err = proxies[1].px.askPeer(t.Context(), fr, ref)
	if !errors.Is(err, errPeerRetrying) {
		t.Fatalf("asking a peer that starts to retry: %v, want errPeerRetrying", err)
	}
}

// TestRetrierFindsWhomItSentToTheOrigin: proxy B lost the downloader it
// copied from and retries; proxy A, whose put+get named only B, asks B,
// is told B retries, and being the lower address goes to the origin
// itself. B's next round must find A on the URL's key and copy from it,
// not claim the retry key (where A never stored) and fetch once more.
// (eval/chaos caught the claim-first order: 3 fetches of one object in a
// partition, bound 2.)
func TestRetrierFindsWhomItSentToTheOrigin(t *testing.T) {
	// B's own random retry delay is off: the test holds its rounds.
	proxies := startTestProxiesWith(t, 3, 186, func(i int, _ *coraldht.Config, c *Config) {
		if i == 2 {
			c.PeerRetryJitter = 0
		}
	})
	p0, a, b := proxies[0], proxies[1], proxies[2]
	addrOf := func(p *testProxy) netip.AddrPort { return netip.MustParseAddrPort(p.srv.Listener.Addr().String()) }
	if addrOf(a).Compare(addrOf(b)) >= 0 {
		t.Fatal("the test wants A's address below B's")
	}
	dead := addrOf(p0)
	half := bytes.Repeat([]byte("r"), 256<<10)
	// The origin: P0's fetch stalls after half the body; A's (the
	// second) is held after half until the test lets it go on.
	var fetches atomic.Int32
	aGoesOn := make(chan struct{})
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(2*len(half)))
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write(half)
		w.(http.Flusher).Flush()
		switch fetches.Add(1) {
		case 1:
			<-o.gate
		case 2:
			<-aGoesOn
		}
		w.Write(half)
	})
	var aGoOnce sync.Once
	aGoOn := func() { aGoOnce.Do(func() { close(aGoesOn) }) }
	t.Cleanup(func() { close(o.gate); aGoOn() })
	ask := func(p *testProxy) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, p.srv.URL+"/big", nil)
		req.Host = o.coralHost()
		return http.DefaultClient.Do(req)
	}
	urlKey := coraldht.KeyFor(coralname.CacheKey("http", "127.0.0.1", atoi(t, o.port()), "/big", ""))
	var p0Dead atomic.Bool
	var bRounds atomic.Int32
	// B's first put+get on the URL's key after the death names only the
	// dead downloader (as across a partition), and its retry rounds wait
	// until A, told that B retries, has gone to the origin; A's put+gets
	// there name only B. (B's rounds used to wait 600 ms instead, a
	// guess at how long A takes: under load with GOMAXPROCS=1 B fetched
	// too, 3 fetches, in 4 runs of 40.)
	aAtOrigin := func() {
		for deadline := time.Now().Add(10 * time.Second); o.count("/big") < 2 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond) // polling the origin's count: no other event says A is there
		}
	}
	b.dht.setAround(func(key coraldht.ID, putGet func() (coraldht.PutGetResult, error)) (coraldht.PutGetResult, error) {
		if key != urlKey || !p0Dead.Load() {
			return putGet()
		}
		n := bRounds.Add(1)
		if n > 1 {
			aAtOrigin()
		}
		res, err := putGet()
		if n == 1 {
			res.Values = onlyReference(dead)
		}
		return res, err
	})
	a.dht.setAround(func(key coraldht.ID, putGet func() (coraldht.PutGetResult, error)) (coraldht.PutGetResult, error) {
		res, err := putGet()
		if key == urlKey {
			res.Values = slices.DeleteFunc(res.Values, func(v coraldht.Value) bool {
				r, err := decodeReference(v.Data)
				return err != nil || r.Addr != addrOf(b)
			})
		}
		return res, err
	})
	var first []*http.Response
	for _, p := range []*testProxy{p0, b} {
		resp, err := ask(p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := io.ReadFull(resp.Body, make([]byte, len(half))); err != nil {
			t.Fatal(err)
		}
		first = append(first, resp)
	}
	p0.srv.CloseClientConnections()
	p0.srv.Close()
	p0.node.Close()
	p0Dead.Store(true)
	if _, err := io.ReadAll(first[1].Body); err == nil {
		t.Fatal("B's client saw a clean end from a dead peer")
	}
	want := append(half, half...)
	fetch := func(name string, p *testProxy) {
		resp, err := ask(p)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(body, want) {
			t.Errorf("%s: %d bytes, %v", name, len(body), err)
		}
		t.Logf("%s: %s", name, resp.Header.Get("Cache-Status"))
	}
	var wg sync.WaitGroup
	wg.Go(func() { fetch("B", b) })
	// A asks once B's download waits to retry.
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/big", nil)
	req.Host = o.coralHost()
	target, err := requestTarget(req, "nyud.test")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		b.px.mu.Lock()
		d := b.px.inflight[target.Key()]
		b.px.mu.Unlock()
		if d != nil {
			if retrying, _ := d.peerRetry.state(); retrying {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("B never started to retry")
		}
		time.Sleep(5 * time.Millisecond) // polling B's state; the outcome does not depend on the interval
	}
	wg.Go(func() { fetch("A", a) })
	// B's round finds A, which is at the origin, and asks it: B's
	// request joins A's download, whose origin response the test holds
	// until then. (Unheld, A's download could end just as B asked, and
	// B at times fetched too: 2 runs in 40 under load with GOMAXPROCS=1.)
	aAtOrigin()
	a.px.mu.Lock()
	aDownload := a.px.inflight[target.Key()]
	a.px.mu.Unlock()
	if aDownload == nil {
		t.Fatal("A has no download of /big while at the origin")
	}
	waitHolders(t, a.px, aDownload, 2)
	aGoOn()
	wg.Wait()
	if n := o.count("/big"); n != 2 {
		t.Errorf("origin fetches: %d, want 2 (P0's, then A's, which B copies)", n)
	}
}

// onlyReference is a put+get's values when they name only addr, as a
// get's first answer often does after a partition or a death.
func onlyReference(addr netip.AddrPort) []coraldht.Value {
	return []coraldht.Value{{Data: reference{Addr: addr}.encode()}}
}
