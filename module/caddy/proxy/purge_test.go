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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/purge"
	"go.uber.org/zap"
)

// The purge tests' proxies run on 127.0.6.0/24 (DSHT nodes on port 4000).

// purgeOrigin is an origin for the purge tests: every path is cacheable for
// an hour with a body made from the path, /vary/… varies on
// Accept-Language, /slow/… sends half its body and waits for release,
// /late/… waits for release before its response header. It counts
// requests per path.
type purgeOrigin struct {
	*httptest.Server
	mu       sync.Mutex
	requests map[string]int
	// releaseSlow and releaseLate let /slow/… and /late/… go on.
	releaseSlow, releaseLate chan struct{}
	arrived                  chan string
}

func newPurgeOrigin(t *testing.T) *purgeOrigin {
	o := &purgeOrigin{requests: map[string]int{}, releaseSlow: make(chan struct{}), releaseLate: make(chan struct{}), arrived: make(chan string, 16)}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.requests[r.URL.Path]++
		o.mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=3600")
		body := purgeBody(r.URL.Path)
		switch {
		case strings.HasPrefix(r.URL.Path, "/vary/"):
			w.Header().Set("Vary", "Accept-Language")
			body = append(body, "lang="+r.Header.Get("Accept-Language")...)
		case strings.HasPrefix(r.URL.Path, "/slow/"):
			w.Header().Set("Content-Length", fmt.Sprint(2*len(body)))
			w.Write(body)
			w.(http.Flusher).Flush()
			o.arrived <- r.URL.Path
			select {
			case <-o.releaseSlow:
			case <-r.Context().Done():
				return
			}
			w.Write(body)
			return
		case strings.HasPrefix(r.URL.Path, "/late/"):
			o.arrived <- r.URL.Path
			select {
			case <-o.releaseLate:
			case <-r.Context().Done():
				return
			}
		}
		w.Write(body)
	}))
	t.Cleanup(func() {
		for _, c := range []chan struct{}{o.releaseSlow, o.releaseLate} {
			select {
			case <-c:
			default:
				close(c)
			}
		}
		o.Close()
	})
	return o
}

func purgeBody(path string) []byte { return bytes.Repeat([]byte(path+";"), 200) }

func (o *purgeOrigin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests[path]
}

func (o *purgeOrigin) port() string {
	_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
	return port
}

// coralHost is the origin's Coralized host; originURL and coralURL name a
// path of it both ways.
func (o *purgeOrigin) coralHost() string { return "127.0.0.1." + o.port() + ".nyud.test" }
func (o *purgeOrigin) originURL(path string) string {
	return "http://127.0.0.1:" + o.port() + path
}
func (o *purgeOrigin) coralURL(path string) string { return "http://" + o.coralHost() + path }

// purgeProxy is a proxy as in peers_test.go, with a reference table and,
// optionally, a DSHT node.
type purgeProxy struct {
	px   *Proxy
	dir  string
	node *coraldht.Node
	srv  *httptest.Server
	refs *References
}

// startPurgeProxies starts n proxies at 127.0.6.first… with DSHT nodes
// (joined into one network) when network is set. Each node serves purges
// for its own proxy's cache only (in Caddy: every cache of the process).
func startPurgeProxies(t *testing.T, n, first int, network bool) []*purgeProxy {
	t.Helper()
	var out []*purgeProxy
	var boot []netip.AddrPort
	for i := range n {
		ip := netip.AddrFrom4([4]byte{127, 0, 6, byte(first + i)})
		cfg := testConfig()
		var node *coraldht.Node
		if network {
			node = testNode(t, netip.AddrPortFrom(ip, 4000).String())
			boot = append(boot, node.Addr())
			cfg.Node = func() DHT { return node }
		}
		dir := t.TempDir()
		cfg.Store = openTestStore(t, diskcache.Options{Dir: dir, MaxBytes: 64 << 20, NoSync: true})
		cfg.References = NewReferences(cfg.Store, cfg.Node)
		px, srv := serveAsPeer(t, cfg, ip)
		p := &purgeProxy{px: px, dir: dir, node: node, srv: srv, refs: cfg.References}
		if node != nil {
			node.HandleApp(purge.Kind, purge.PeerHandler(func() []purge.Cache { return []purge.Cache{p.cache()} }, zap.NewNop))
		}
		out = append(out, p)
	}
	if network && n > 1 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, p := range out {
			if err := p.node.Bootstrap(ctx, boot...); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// cache is p's cache as purge sees it.
func (p *purgeProxy) cache() purge.Cache {
	return PurgeCache(p.dir, []string{p.px.zone}, p.px.store, []*Proxy{p.px}, []*References{p.refs})
}

// purge purges url (with prefix, everything under it) at p, as the
// adapter's POST /coral/purge does in every cache it runs.
func (p *purgeProxy) purge(t *testing.T, url string, prefix bool) purge.Response {
	t.Helper()
	spec, err := purge.ParseURL(url, prefix, []string{p.px.zone})
	if err != nil {
		t.Fatalf("purge %s: %v", url, err)
	}
	res := purge.Response{URL: url, Normalized: spec.Norm, Key: spec.Key, Prefix: spec.Prefix}
	res.Local = purge.Local(context.Background(), spec, []purge.Cache{p.cache()})
	return res
}

// get fetches path through p with optional header pairs.
func (p *purgeProxy) get(t *testing.T, o *purgeOrigin, path string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.srv.URL+path, nil)
	req.Host = o.coralHost()
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s %s", path, resp.Status, b)
	}
	return resp, b
}

// settle waits until p has no download in progress (a download commits in
// the background after its last byte reached the client) and, with a DSHT
// node, has put the references of what it holds (after the commit).
func (p *purgeProxy) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.px.mu.Lock()
		n := len(p.px.inflight)
		p.px.mu.Unlock()
		refsDone := true
		if p.node != nil {
			urls := 0
			p.px.store.Walk(0, func(infos []diskcache.Info) bool {
				for _, in := range infos {
					if m, ok := p.px.store.Peek(in.Key); ok && m.Extra[varyIndexField] == "" {
						if norm, ok := purge.StoredNorm(m.Extra["url"]); ok {
							if !p.refs.has(purge.KeyOfNorm(norm)) {
								refsDone = false
							}
						}
					}
					urls++
				}
				return true
			})
		}
		if n == 0 && p.px.store.Stats().Writing == 0 && refsDone {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("downloads still running: %d in flight", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hasRef reports whether p renews a reference for key.
func (p *purgeProxy) hasRef(key string) bool {
	return p.refs.has(key)
}

func (p *purgeProxy) cached(path string, o *purgeOrigin) bool {
	_, ok := p.px.store.Peek(coralname.CacheKey("http", "127.0.0.1", atoiPort(o.port()), path, ""))
	return ok
}

func atoiPort(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// TestPurgeLocal: exact purges by either URL form remove the object (and
// its reference), the next request goes to the origin; a Vary'd URL loses
// its index and every variant; a prefix removes what is under it and
// nothing else; an uncached URL purges nothing.
func TestPurgeLocal(t *testing.T) {
	p := startPurgeProxies(t, 1, 10, true)[0]
	o := newPurgeOrigin(t)
	for _, path := range []string{"/a.jpg", "/img/1.png", "/img/2.png", "/imgx.png", "/other.png"} {
		p.get(t, o, path)
	}
	p.get(t, o, "/vary/page", "Accept-Language", "en")
	p.get(t, o, "/vary/page", "Accept-Language", "fr")
	p.settle(t)
	before := p.px.store.Stats().Entries
	if before != 8 { // five objects, a Vary index and two variants
		t.Fatalf("%d objects cached, want 8", before)
	}
	aKey := coralname.CacheKey("http", "127.0.0.1", atoiPort(o.port()), "/a.jpg", "")
	if !p.hasRef(aKey) {
		t.Fatal("no reference recorded for /a.jpg")
	}

	// The origin's URL.
	res := p.purge(t, o.originURL("/a.jpg"), false)
	if res.Local.Purged != 1 || res.Local.ReferencesDropped != 1 || res.Key != aKey || res.Normalized != "//127.0.0.1:"+o.port()+"/a.jpg" ||
		!res.Local.Complete || len(res.Local.Caches) != 1 || res.Network != nil || res.Local.Scanned != 0 {
		t.Fatalf("purge by origin URL: %+v", res)
	}
	if p.cached("/a.jpg", o) {
		t.Fatal("/a.jpg still cached")
	}
	if p.hasRef(aKey) {
		t.Error("/a.jpg's reference is still renewed")
	}
	p.get(t, o, "/a.jpg")
	if n := o.count("/a.jpg"); n != 2 {
		t.Errorf("origin asked %d times for /a.jpg, want 2", n)
	}
	p.settle(t)
	// The Coralized URL, with the proxy's port.
	res = p.purge(t, "http://"+o.coralHost()+":8090/a.jpg", false)
	if res.Local.Purged != 1 || p.cached("/a.jpg", o) {
		t.Fatalf("purge by Coralized URL: %+v", res)
	}
	// Nothing cached: nothing purged, still 200.
	if res := p.purge(t, o.originURL("/a.jpg"), false); res.Local.Purged != 0 || res.Local.ReferencesDropped != 0 {
		t.Errorf("second purge: %+v", res)
	}

	// Vary: the index and both variants.
	res = p.purge(t, o.coralURL("/vary/page"), false)
	if res.Local.Purged != 3 || res.Local.Variants != 2 || res.Local.Scanned == 0 {
		t.Fatalf("purge of a Vary'd URL: %+v", res.Local)
	}
	for _, lang := range []string{"en", "fr"} {
		_, b := p.get(t, o, "/vary/page", "Accept-Language", lang)
		if !strings.HasSuffix(string(b), "lang="+lang) {
			t.Errorf("variant %s after the purge: %q", lang, b[len(b)-10:])
		}
	}
	// 2 before the purge, 2 after; and the neutral request that first
	// learnt the origin varies (neutral.go).
	if n := o.count("/vary/page"); n != 5 {
		t.Errorf("origin asked %d times for the variants, want 5", n)
	}
	p.settle(t)

	// A prefix: /img/ and nothing else (not /imgx.png).
	res = p.purge(t, o.originURL("/img/"), true)
	if res.Local.Purged != 2 || !res.Prefix || res.Key != "" || res.Local.Scanned != p.px.store.Stats().Entries+2 {
		t.Fatalf("prefix purge: %+v", res.Local)
	}
	for path, want := range map[string]bool{"/img/1.png": false, "/img/2.png": false, "/imgx.png": true, "/other.png": true} {
		if p.cached(path, o) != want {
			t.Errorf("after the prefix purge %s cached: %v", path, !want)
		}
	}
	// A prefix without the slash takes /imgx.png too; the whole origin,
	// everything.
	if res := p.purge(t, o.coralURL("/img"), true); res.Local.Purged != 1 {
		t.Errorf("prefix /img: %+v", res.Local)
	}
	left := p.px.store.Stats().Entries
	if res := p.purge(t, "https://127.0.0.1:"+o.port(), true); res.Local.Purged != left || p.px.store.Stats().Entries != 0 {
		t.Errorf("whole origin: purged %d of %d", res.Local.Purged, left)
	}
}

// TestPurgeDownloads: a download writing into the cache is aborted with
// its entry (its client is cut off); one still waiting for its response
// header is waited for and removed once it arrives.
func TestPurgeDownloads(t *testing.T) {
	p := startPurgeProxies(t, 1, 11, false)[0]
	o := newPurgeOrigin(t)

	// Writing: the origin has sent half the body, and the client has it.
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	half := len(purgeBody("/slow/x"))
	reading := make(chan struct{})
	go func() {
		req, _ := http.NewRequest(http.MethodGet, p.srv.URL+"/slow/x", nil)
		req.Host = o.coralHost()
		resp, err := http.DefaultClient.Do(req)
		close(reading)
		if err != nil {
			done <- result{0, err}
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- result{0, fmt.Errorf("status %s", resp.Status)}
			return
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, half)); err != nil {
			done <- result{0, err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		done <- result{half + len(b), err}
	}()
	<-o.arrived
	<-reading
	res := p.purge(t, o.coralURL("/slow/x"), false)
	if res.Local.Purged != 1 || res.Local.DownloadsAborted != 1 || res.Local.DownloadsPending != 0 {
		t.Fatalf("purge of a download: %+v", res.Local)
	}
	r := <-done
	if r.err == nil || r.n >= 2*half {
		t.Errorf("the client of the aborted download read %d bytes and %v", r.n, r.err)
	}
	// The download notices at its next write into the cache (or at
	// origin_timeout, if the origin stays silent).
	close(o.releaseSlow)
	p.settle(t)
	if p.cached("/slow/x", o) {
		t.Error("aborted download cached")
	}

	// Waiting for its header: the purge waits, then removes it.
	go func() {
		req, _ := http.NewRequest(http.MethodGet, p.srv.URL+"/late/y", nil)
		req.Host = o.coralHost()
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		done <- result{}
	}()
	<-o.arrived
	time.AfterFunc(300*time.Millisecond, func() { close(o.releaseLate) })
	start := time.Now()
	res = p.purge(t, o.originURL("/late/y"), false)
	if res.Local.Purged != 1 || res.Local.DownloadsPending != 0 || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("purge of a download waiting for its header: %+v after %v", res.Local, time.Since(start))
	}
	<-done
	p.settle(t)
	if p.cached("/late/y", o) {
		t.Error("the download that was waiting got cached after the purge")
	}
}

// TestPurgeNetwork: three proxies with one object each got from the first
// (origin) or its peers; an exact network purge at one reaches the others
// through the references; a prefix purge reaches every proxy the node
// knows; a dead proxy is reported as not reached; a version 1 reference
// as one without a DSHT address.
func TestPurgeNetwork(t *testing.T) {
	ps := startPurgeProxies(t, 3, 20, true)
	o := newPurgeOrigin(t)
	for _, p := range ps {
		p.get(t, o, "/n.jpg")
		p.settle(t)
	}
	if n := o.count("/n.jpg"); n != 1 {
		t.Fatalf("origin asked %d times, want 1 (the others from peers)", n)
	}
	ctx := context.Background()
	spec, err := purge.ParseURL(o.coralURL("/n.jpg"), false, []string{"nyud.test"})
	if err != nil {
		t.Fatal(err)
	}
	caches := []purge.Cache{ps[0].cache()}
	local := purge.Local(ctx, spec, caches)
	net := PurgeNetwork(ps[0].node, []*Proxy{ps[0].px}).Purge(ctx, spec, "references")
	t.Logf("network purge: %+v", *net)
	if local.Purged != 1 || net.Asked != 2 || net.Reached != 2 || net.Purged != 2 || net.Unreachable != 0 || net.References < 3 {
		t.Fatalf("local %+v, network %+v", local, *net)
	}
	for _, peer := range net.Peers {
		if !peer.Reached || peer.Purged != 1 || !peer.Complete || peer.Error != "" || peer.Via[0] != "reference" || peer.HTTP == "" {
			t.Errorf("peer %+v", peer)
		}
	}
	for i, p := range ps {
		if p.cached("/n.jpg", o) {
			t.Errorf("proxy %d still has it", i)
		}
	}
	ps[1].get(t, o, "/n.jpg")
	if n := o.count("/n.jpg"); n != 2 {
		t.Errorf("after the purge the origin was asked %d times in all, want 2", n)
	}
	ps[1].settle(t)

	// A prefix: every proxy known, whatever it holds.
	for _, p := range ps {
		p.get(t, o, "/dir/a")
		p.settle(t)
	}
	pspec, _ := purge.ParseURL(o.originURL("/dir/"), true, nil)
	purge.Local(ctx, pspec, caches)
	net = PurgeNetwork(ps[0].node, []*Proxy{ps[0].px}).Purge(ctx, pspec, "known")
	if net.Asked != 2 || net.Reached != 2 || net.Purged != 2 || net.References != 0 {
		t.Fatalf("prefix: %+v", *net)
	}
	for i, p := range ps {
		if p.cached("/dir/a", o) {
			t.Errorf("prefix: proxy %d still has /dir/a", i)
		}
		if i > 0 && !p.cached("/n.jpg", o) && i == 1 {
			t.Errorf("prefix: proxy %d lost /n.jpg", i)
		}
	}

	// A dead proxy, and an old one: put a version 1 reference.
	for _, p := range ps {
		p.get(t, o, "/m.jpg")
		p.settle(t)
	}
	mspec, _ := purge.ParseURL(o.originURL("/m.jpg"), false, nil)
	old := reference{Addr: netip.MustParseAddrPort("127.0.6.99:8090"), Complete: true}
	if _, err := ps[1].node.Put(ctx, coraldht.KeyFor(mspec.Key), old.encode(), time.Minute); err != nil {
		t.Fatal(err)
	}
	ps[2].node.Close()
	ps[2].srv.Close()
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	net = PurgeNetwork(ps[0].node, []*Proxy{ps[0].px}).Purge(tctx, mspec, "all")
	t.Logf("with a dead and an old proxy, after %v: %+v", time.Since(start), *net)
	var dead, oldOne, live *purge.Peer
	for i, peer := range net.Peers {
		switch {
		case peer.Node == ps[2].node.Addr().String():
			dead = &net.Peers[i]
		case peer.HTTP == "127.0.6.99:8090":
			oldOne = &net.Peers[i]
		case peer.Node == ps[1].node.Addr().String():
			live = &net.Peers[i]
		}
	}
	switch {
	case dead == nil || dead.Reached || !strings.Contains(dead.Error, "no answer before the timeout"):
		t.Errorf("dead proxy: %+v", dead)
	case oldOne == nil || oldOne.Reached || oldOne.Node != "" || !strings.Contains(oldOne.Error, "no DSHT address"):
		t.Errorf("old proxy: %+v", oldOne)
	case live == nil || !live.Reached || live.Purged != 1 || len(live.Via) != 2:
		t.Errorf("live proxy: %+v", live)
	}
	if net.Reached != 1 || net.Unreachable != 1 || net.NoAddress != 1 || net.Asked != 2 {
		t.Errorf("totals: %+v", *net)
	}
	if ps[1].cached("/m.jpg", o) {
		t.Error("the live proxy still has /m.jpg")
	}
}

// TestPurgeSkipsPeersAfterwards: after a purge, a miss for the object goes
// to the origin, not to a peer that may still hold the old copy while a
// network purge is on its way to it.
func TestPurgeSkipsPeersAfterwards(t *testing.T) {
	proxies := startTestProxies(t, 2)
	version := "v1"
	var mu sync.Mutex
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write([]byte(version))
	})
	host := o.coralHost()
	for _, p := range proxies {
		if body, _ := askProxy(t, p, host, "/obj"); body != "v1" {
			t.Fatalf("before: %q", body)
		}
		waitStored(t, p)
	}
	mu.Lock()
	version = "v2"
	mu.Unlock()
	// Purge at P1 only (as if a network purge had not reached P0 yet).
	tg, _ := parseTarget(host, "nyud.test", "/obj", "")
	c := PurgeCache("", nil, proxies[1].px.store, []*Proxy{proxies[1].px}, nil)
	if r := purge.Local(context.Background(), purge.Spec{Key: tg.Key()}, []purge.Cache{c}); r.Purged == 0 {
		t.Fatal("nothing purged")
	}
	body, cs := askProxy(t, proxies[1], host, "/obj")
	if body != "v2" || !strings.Contains(cs, `detail="origin"`) {
		t.Errorf("after the purge: %q from %q; want v2 from the origin, not v1 from the peer", body, cs)
	}
}
