package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// testProxy is a proxy with its own disk cache, a real DSHT node on UDP
// loopback (seen through dht) and an HTTP server on its own 127.0.<subnet>.x.
type testProxy struct {
	px   *Proxy
	node *coraldht.Node
	dht  *testDHT
	srv  *httptest.Server
}

func startTestProxies(t *testing.T, n int) []*testProxy {
	t.Helper()
	return startTestProxiesIn(t, n, 4)
}

// startTestProxiesIn starts n test proxies on 127.0.<subnet>.10 and up,
// their nodes patient (patientNode): none of them dies in these tests.
func startTestProxiesIn(t *testing.T, n int, subnet byte) []*testProxy {
	t.Helper()
	return startTestProxiesWith(t, n, subnet, func(_ int, node *coraldht.Config, _ *Config) { patientNode(node) })
}

// patientNode makes a test's DSHT node wait up to 5 s for each RPC reply
// rather than its adaptive timeout, about 100 ms on loopback. On a loaded
// machine replies came later than that, live nodes were taken for dead,
// and put+gets that should have met at the key's node missed one
// another: two proxies each fetched from the origin what the test says
// one fetches (TestPeersAskingEachOther, TestSlicesCrowdAtOnce). Only for
// tests where no node dies: a dead node's timeouts are what others test.
func patientNode(cfg *coraldht.Config) {
	cfg.MinRPCTimeout, cfg.InitialRPCTimeout, cfg.MaxRPCTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	cfg.LookupTimeout = max(cfg.LookupTimeout, 2*cfg.MaxRPCTimeout)
}

// startTestProxiesWith is startTestProxiesIn with configure (if not nil)
// applied to proxy i's node's configuration and its own before they start.
func startTestProxiesWith(t *testing.T, n int, subnet byte, configure func(i int, node *coraldht.Config, proxy *Config)) []*testProxy {
	t.Helper()
	var out []*testProxy
	var boot []netip.AddrPort
	for i := range n {
		ip := netip.AddrFrom4([4]byte{127, 0, subnet, byte(10 + i)})
		ncfg := coraldht.DefaultConfig()
		ncfg.Services = coraldht.ServiceHTTP
		ncfg.HintHops = 0
		cfg := testConfig()
		if configure != nil {
			configure(i, &ncfg, &cfg)
		}
		tr, err := coraldht.ListenUDP(netip.AddrPortFrom(ip, 4000).String())
		if err != nil {
			t.Fatal(err)
		}
		node, err := coraldht.NewNode(ncfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		dht := &testDHT{Node: node}
		cfg.Store = openTestStore(t, diskcache.Options{Dir: t.TempDir(), MaxBytes: 64 << 20})
		cfg.Node = func() DHT { return dht }
		px, srv := serveAsPeer(t, cfg, ip)
		out = append(out, &testProxy{px: px, node: node, dht: dht, srv: srv})
		boot = append(boot, node.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range out {
		if err := p.node.Bootstrap(ctx, boot...); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// testNode starts a real DSHT node on a loopback UDP address.
func testNode(t *testing.T, addr string) *coraldht.Node {
	t.Helper()
	return testNodeWith(t, addr, nil)
}

// testNodeWith is testNode with tweak (if not nil) applied to the node's
// configuration.
func testNodeWith(t *testing.T, addr string, tweak func(*coraldht.Config)) *coraldht.Node {
	t.Helper()
	cfg := coraldht.DefaultConfig()
	cfg.Services = coraldht.ServiceHTTP
	cfg.HintHops = 0
	if tweak != nil {
		tweak(&cfg)
	}
	tr, err := coraldht.ListenUDP(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		_ = tr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// testDHT is a proxy's view of its DSHT node (Config.Node): the node, but
// that a test may run each put+get through around, to see what a
// partition or a slow node would do.
type testDHT struct {
	*coraldht.Node
	around atomic.Pointer[func(key coraldht.ID, putGet func() (coraldht.PutGetResult, error)) (coraldht.PutGetResult, error)]
}

func (d *testDHT) PutGet(ctx context.Context, key coraldht.ID, value []byte, ttl time.Duration, levels ...int) (coraldht.PutGetResult, error) {
	putGet := func() (coraldht.PutGetResult, error) { return d.Node.PutGet(ctx, key, value, ttl, levels...) }
	if f := d.around.Load(); f != nil {
		return (*f)(key, putGet)
	}
	return putGet()
}

// setAround runs the put+gets from now on through f.
func (d *testDHT) setAround(f func(key coraldht.ID, putGet func() (coraldht.PutGetResult, error)) (coraldht.PutGetResult, error)) {
	d.around.Store(&f)
}

// TestFlashCrowdAcrossProxies: five proxies asked for the same objects at
// the same instant fetch each object from the origin once; the others get
// it from a peer (or by joining a download), and every body is complete.
func TestFlashCrowdAcrossProxies(t *testing.T) {
	proxies := startTestProxies(t, 5)
	objects := []string{"/a.jpg", "/b.jpg", "/c.jpg"}
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond) // a slow origin (DSL line), not a synchronisation
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write(bytes.Repeat([]byte(r.URL.Path), 10_000))
	})
	start := make(chan struct{})
	var wg sync.WaitGroup
	sources := make(chan string, len(proxies)*len(objects))
	for _, p := range proxies {
		for _, obj := range objects {
			wg.Go(func() {
				<-start
				req, _ := http.NewRequest(http.MethodGet, p.srv.URL+obj, nil)
				req.Host = o.coralHost()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				var buf bytes.Buffer
				if _, err := buf.ReadFrom(resp.Body); err != nil {
					t.Errorf("%s via %s: %v", obj, p.srv.URL, err)
				}
				if resp.StatusCode != http.StatusOK || !bytes.Equal(buf.Bytes(), bytes.Repeat([]byte(obj), 10_000)) {
					t.Errorf("%s via %s: status %d, %d bytes", obj, p.srv.URL, resp.StatusCode, buf.Len())
				}
				sources <- resp.Header.Get("Cache-Status")
			})
		}
	}
	close(start)
	wg.Wait()
	close(sources)
	for _, obj := range objects {
		if n := o.count(obj); n != 1 {
			t.Errorf("%s fetched from the origin %d times by %d proxies, want 1", obj, n, len(proxies))
		}
	}
	kinds := map[string]int{}
	for s := range sources {
		for _, part := range strings.Split(s, ";") {
			if strings.HasPrefix(strings.TrimSpace(part), "detail=") {
				kinds[strings.TrimSpace(part)]++
			}
		}
	}
	t.Logf("where the bytes came from: %v", kinds)
	if kinds[`detail="origin"`] == len(proxies)*len(objects) {
		t.Errorf("no proxy used a peer")
	}
}

// TestPeerKilledMidTransfer: when the peer a proxy is copying from dies
// mid-body, the client gets a clean abort, never a short body that looks
// complete, and the next request succeeds from the origin.
func TestPeerKilledMidTransfer(t *testing.T) {
	proxies := startTestProxies(t, 2)
	half := bytes.Repeat([]byte("p"), 256<<10)
	_, ask := stallingOrigin(t, half) // the first fetch (P0's) stalls halfway
	// P0 starts the download from the origin; its client reads half.
	r0, err := ask(proxies[0])
	if err != nil {
		t.Fatal(err)
	}
	defer r0.Body.Close()
	if _, err := io.ReadFull(r0.Body, make([]byte, len(half))); err != nil {
		t.Fatal(err)
	}
	// P1 finds P0 through the DSHT and copies from it.
	r1, err := ask(proxies[1])
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Body.Close()
	if !strings.Contains(r1.Header.Get("Cache-Status"), "peer") {
		t.Fatalf("P1 did not use its peer: %q", r1.Header.Get("Cache-Status"))
	}
	if _, err := io.ReadFull(r1.Body, make([]byte, len(half))); err != nil {
		t.Fatal(err)
	}
	// P0 dies mid-transfer.
	proxies[0].srv.CloseClientConnections()
	proxies[0].srv.Close()
	rest, err := io.ReadAll(r1.Body)
	if err == nil && len(rest) == len(half) {
		t.Fatal("P1's client got the whole body from a dead peer")
	}
	if err == nil {
		t.Errorf("P1's client saw a clean end after %d more bytes: a truncated body presented as complete", len(rest))
	}
	// The next request at P1 goes to the origin and is whole.
	r2, err := ask(proxies[1])
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	all, err := io.ReadAll(r2.Body)
	if err != nil || len(all) != 2*len(half) {
		t.Errorf("retry at P1: %d bytes, %v, Cache-Status %q", len(all), err, r2.Header.Get("Cache-Status"))
	}
}

// TestVaryAcrossPeers: a proxy gets a variant from a peer only when the
// peer holds the variant its client selects; otherwise the peer answers
// 504 and the proxy goes to the origin.
func TestVaryAcrossPeers(t *testing.T) {
	proxies := startTestProxies(t, 2)
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Vary", "Accept-Language")
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write([]byte("lang=" + r.Header.Get("Accept-Language")))
	})
	ask := func(p *testProxy, lang string) (string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, p.srv.URL+"/v", nil)
		req.Host = o.coralHost()
		req.Header.Set("Accept-Language", lang)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), resp.Header.Get("Cache-Status")
	}
	waitIdle := func(p *testProxy) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for p.px.store.Stats().Writing > 0 {
			if time.Now().After(deadline) {
				t.Fatal("download still in progress after 10s")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if body, _ := ask(proxies[0], "fr"); body != "lang=fr" {
		t.Fatalf("P0 fr: %q", body)
	}
	waitIdle(proxies[0])
	body, cs := ask(proxies[1], "fr")
	if body != "lang=fr" || !strings.Contains(cs, "peer") {
		t.Errorf("P1 fr: %q, Cache-Status %q; want it from the peer", body, cs)
	}
	// The neutral request that learnt the origin varies on
	// Accept-Language (neutral.go), and P0's fr.
	if n := o.count("/v"); n != 2 {
		t.Errorf("origin fetches after fr at both proxies: %d, want 2", n)
	}
	body, cs = ask(proxies[1], "de")
	if body != "lang=de" || !strings.Contains(cs, "origin") {
		t.Errorf("P1 de: %q, Cache-Status %q; want it from the origin", body, cs)
	}
	// P1 stored fr's variant and the URL's Vary index: de goes with the
	// client's fields at once.
	if n := o.count("/v"); n != 3 {
		t.Errorf("origin fetches: %d, want 3", n)
	}
}

// TestServedFromPeerCache: only a peer's cached object (hit or joined
// download) is taken from it, never its own refusals or errors.
func TestServedFromPeerCache(t *testing.T) {
	for _, tc := range []struct {
		cacheStatus string
		want        bool
	}{
		{`coral; hit; detail="local"`, true},
		{`coral; hit; fwd=stale; detail="stale"`, true},
		{`coral; fwd=uri-miss; collapsed; detail="origin"`, true},
		{`coral; fwd=miss; detail="only-if-cached"`, false},
		{`coral; fwd=miss; detail="rate-limited"`, false},
		{`coral; fwd=uri-miss; stored=false; detail="origin"`, false},
		{`othercache; hit`, false},
		{``, false},
	} {
		if got := servedFromCache(tc.cacheStatus); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.cacheStatus, got, tc.want)
		}
	}
}

// askProxy fetches path from the Coralized host through p.
func askProxy(t *testing.T, p *testProxy, host, path string) (body, cacheStatus string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.srv.URL+path, nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), resp.Header.Get("Cache-Status")
}

// waitStored waits until p has finished writing objects.
func waitStored(t *testing.T, p *testProxy) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.px.store.Stats().Writing > 0 {
		if time.Now().After(deadline) {
			t.Fatal("download still in progress after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPeerReferencesToPrivateAddresses: a proxy asks peers only at
// addresses allow_peers permits (or public ones). These peers are on
// loopback: without allow_peers the second proxy ignores the first one's
// reference and goes to the origin.
func TestPeerReferencesToPrivateAddresses(t *testing.T) {
	proxies := startTestProxiesWith(t, 2, 4, func(i int, node *coraldht.Config, c *Config) {
		patientNode(node)
		if i == 1 {
			c.AllowPeers = nil // no allow_peers
		}
	})
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write([]byte("object"))
	})
	if body, _ := askProxy(t, proxies[0], o.coralHost(), "/x"); body != "object" {
		t.Fatalf("P0: %q", body)
	}
	waitStored(t, proxies[0])
	body, cs := askProxy(t, proxies[1], o.coralHost(), "/x")
	if body != "object" || !strings.Contains(cs, `detail="origin"`) {
		t.Errorf("P1 without allow_peers: %q, Cache-Status %q; want it from the origin", body, cs)
	}
	if n := o.count("/x"); n != 2 {
		t.Errorf("origin fetches: %d, want 2 (the loopback peer must not be asked)", n)
	}
	// The dialer refuses such addresses too, whatever asks it.
	if err := proxies[1].px.peerControl("tcp", proxies[0].srv.Listener.Addr().String(), nil); err == nil {
		t.Error("the peer dialer accepts a loopback address without allow_peers")
	}
}

// TestPeerFreshnessBounded: a copy taken from a peer is fresh no longer
// than the peer's own copy (which it says in Coral-Fresh), however long
// the origin's headers would allow, and the field is neither stored nor
// shown to clients.
func TestPeerFreshnessBounded(t *testing.T) {
	proxies := startTestProxies(t, 2)
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write([]byte("object"))
	})
	host := o.coralHost()
	if body, _ := askProxy(t, proxies[0], host, "/x"); body != "object" {
		t.Fatalf("P0: %q", body)
	}
	waitStored(t, proxies[0])
	// P0's copy has 20 s left (as after a min_ttl extension, say).
	key := coralname.CacheKey("http", "127.0.0.1", atoi(t, o.port()), "/x", "")
	m, ok := proxies[0].px.store.Peek(key)
	if !ok {
		t.Fatal("P0 did not store /x")
	}
	m.Expires = time.Now().Add(20 * time.Second)
	if err := proxies[0].px.store.UpdateMeta(key, m); err != nil {
		t.Fatal(err)
	}
	body, cs := askProxy(t, proxies[1], host, "/x")
	if body != "object" || !strings.Contains(cs, "peer") {
		t.Fatalf("P1: %q %q; want it from the peer", body, cs)
	}
	waitStored(t, proxies[1])
	m1, ok := proxies[1].px.store.Peek(key)
	if !ok {
		t.Fatal("P1 did not store /x")
	}
	if left := time.Until(m1.Expires); left > 21*time.Second {
		t.Errorf("P1's copy is fresh for %s more; the peer's had 20 s", left.Round(time.Second))
	}
	if v := m1.Header.Values(peerFreshnessField); len(v) != 0 {
		t.Errorf("%s stored: %q", peerFreshnessField, v)
	}
	req, _ := http.NewRequest(http.MethodGet, proxies[1].srv.URL+"/x", nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := resp.Header.Values(peerFreshnessField); len(v) != 0 {
		t.Errorf("%s sent to a client: %q", peerFreshnessField, v)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPeerFreshnessField(t *testing.T) {
	for _, tc := range []struct {
		vals []string
		want time.Duration
	}{
		{nil, 0},
		{[]string{"30"}, 30 * time.Second},
		{[]string{" 30 "}, 30 * time.Second},
		{[]string{"30", "30"}, 0},
		{[]string{"-1"}, 0},
		{[]string{"1.5"}, 0},
		{[]string{"abc"}, 0},
		{[]string{"99999999999999999999"}, maxPeerFreshness},
		{[]string{"31536000"}, maxPeerFreshness},
	} {
		h := http.Header{}
		for _, v := range tc.vals {
			h.Add(peerFreshnessField, v)
		}
		if got := peerFreshness(h); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.vals, got, tc.want)
		}
	}
}

// serveAsPeer builds a proxy from cfg whose peer address (peer_address)
// is ip and a free port, and serves it there as a server would, an *Error
// becoming its status code.
func serveAsPeer(t testing.TB, cfg Config, ip netip.Addr) (*Proxy, *httptest.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.PeerAddress = netip.MustParseAddrPort(ln.Addr().String())
	px, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveOrError(px, w, r)
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return px, srv
}

// TestPeerStillAtItsOriginIsWaitedFor: a proxy that asks a peer which is
// itself still waiting for the origin's response head waits for that peer
// longer than peer_timeout (origin_timeout + peer_timeout in all) and takes
// the object from it, rather than fetching it from the origin a second
// time. (With peer_timeout as the bound on the peer's head, a thin origin
// line cost one origin fetch per proxy.)
func TestPeerStillAtItsOriginIsWaitedFor(t *testing.T) {
	const peerTimeout = 200 * time.Millisecond
	proxies := startTestProxiesWith(t, 2, 187, func(_ int, node *coraldht.Config, c *Config) {
		patientNode(node)
		c.PeerTimeout, c.OriginTimeout = peerTimeout, 10*time.Second
	})
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		<-o.gate // the origin's head comes when the test says
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write(bytes.Repeat([]byte("thin line "), 1000))
	})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(o.gate) }) }
	t.Cleanup(openGate)

	ask := func(p *testProxy, out chan<- string) {
		req, _ := http.NewRequest(http.MethodGet, p.srv.URL+"/big", nil)
		req.Host = o.coralHost()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || len(b) != 10000 {
			out <- fmt.Sprintf("%d bytes, %v", len(b), err)
			return
		}
		out <- resp.Header.Get("Cache-Status")
	}
	first := make(chan string, 1)
	go ask(proxies[0], first)
	<-o.arrived // proxy 0 waits on the origin
	target, err := requestTarget(httptest.NewRequest(http.MethodGet, "http://"+o.coralHost()+"/big", nil), "nyud.test")
	if err != nil {
		t.Fatal(err)
	}
	d := proxies[0].px.inflightFor(target.Key())
	if d == nil {
		t.Fatal("proxy 0 has no download of /big while its origin request is open")
	}
	second := make(chan string, 1)
	go ask(proxies[1], second)
	// Proxy 1 found proxy 0's reference and waits on it: its request
	// holds proxy 0's download beside the first client's. The origin
	// answers well after peer_timeout.
	waitHolders(t, proxies[0].px, d, 2)
	time.AfterFunc(5*peerTimeout, openGate)
	if cs := <-first; !strings.Contains(cs, `detail="origin"`) {
		t.Errorf("first proxy: Cache-Status %q, want it from the origin", cs)
	}
	if cs := <-second; !strings.Contains(cs, "peer") {
		t.Errorf("second proxy: Cache-Status %q, want it from its peer", cs)
	}
	if n := o.count("/big"); n != 1 {
		t.Errorf("the origin served /big %d times to two proxies, want once", n)
	}
}

// TestPeersAskingEachOther: two proxies whose put+gets each found the
// other's reference (both downloads started at once) would each wait for
// the other until origin_timeout + peer_timeout and then both fetch from
// the origin. The one with the lower address answers the other 504 at
// once; the other fetches the object from the origin, once, for both.
func TestPeersAskingEachOther(t *testing.T) {
	proxies := startTestProxiesWith(t, 2, 188, func(_ int, node *coraldht.Config, c *Config) {
		patientNode(node)
		c.PeerTimeout, c.OriginTimeout = 200*time.Millisecond, 10*time.Second
	})
	// Each put+get answers once both references are in: each proxy
	// finds the other's.
	var both sync.WaitGroup
	both.Add(len(proxies))
	for _, p := range proxies {
		p.dht.setAround(func(key coraldht.ID, putGet func() (coraldht.PutGetResult, error)) (coraldht.PutGetResult, error) {
			r, err := putGet()
			both.Done()
			both.Wait()
			if err != nil {
				return r, err
			}
			g, err := p.node.Get(context.Background(), key)
			r.Values, r.Level = g.Values, g.Level
			return r, err
		})
	}
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write(bytes.Repeat([]byte("both "), 2000))
	})
	var wg sync.WaitGroup
	statuses := make([]string, len(proxies))
	for i, p := range proxies {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, p.srv.URL+"/both", nil)
			req.Host = o.coralHost()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 10000 {
				statuses[i] = fmt.Sprintf("%d bytes, %v", len(b), err)
				return
			}
			statuses[i] = resp.Header.Get("Cache-Status")
		})
	}
	wg.Wait()
	if n := o.count("/both"); n != 1 {
		t.Errorf("the origin served /both %d times to two proxies asking each other, want once; Cache-Status %q", n, statuses)
	}
	if !strings.Contains(strings.Join(statuses, " "), "peer") {
		t.Errorf("neither proxy took the object from the other: %q", statuses)
	}
}
