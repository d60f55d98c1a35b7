package proxylab

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// purgeResult is the part of POST /coral/purge's answer this lab reads
// (module/caddy/purge).
type purgeResult struct {
	Normalized string `json:"normalized"`
	Key        string `json:"key"`
	Prefix     bool   `json:"prefix"`
	Local      struct {
		Purged            int  `json:"purged"`
		Scanned           int  `json:"scanned"`
		ReferencesDropped int  `json:"references_dropped"`
		Complete          bool `json:"complete"`
	} `json:"local"`
	Network *struct {
		Mode        string `json:"mode"`
		References  int    `json:"references"`
		Asked       int    `json:"asked"`
		Reached     int    `json:"reached"`
		Unreachable int    `json:"unreachable"`
		NoAddress   int    `json:"no_address"`
		Purged      int    `json:"purged"`
		Peers       []struct {
			Node    string   `json:"node"`
			HTTP    string   `json:"http"`
			Via     []string `json:"via"`
			Reached bool     `json:"reached"`
			Purged  int      `json:"purged"`
			Error   string   `json:"error"`
		} `json:"peers"`
	} `json:"network"`
}

// purge POSTs /coral/purge at p's admin API and decodes the answer.
func (p *proxy) purge(t *testing.T, form url.Values) purgeResult {
	t.Helper()
	code, body, err := p.adminPost("/coral/purge", form)
	if err != nil || code != http.StatusOK {
		t.Fatalf("%s: purge %v: %d %s %v", p.name, form, code, body, err)
	}
	var res purgeResult
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatalf("%s: purge answer: %v\n%s", p.name, err, body)
	}
	t.Logf("%s: purge %v:\n%s", p.name, form, body)
	return res
}

// holds reports whether p's admin cache listing has an object fetched from
// path.
func (p *proxy) holds(t *testing.T, path string) bool {
	t.Helper()
	objs, err := p.cacheObjects()
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	for _, o := range objs {
		if u, err := url.Parse(o.URL); err == nil && u.Path == path {
			return true
		}
	}
	return false
}

// settleRefs waits until each proxy has no download in progress and keeps
// at least refs DSHT references (put after each download's commit).
func settleRefs(t *testing.T, refs int, ps ...*proxy) {
	t.Helper()
	waitDownloads(t, ps...)
	waitFor(t, "references put", 30*time.Second, ps, func() error {
		for _, p := range ps {
			st, err := p.status()
			if err != nil {
				return err
			}
			if len(st.Caches) != 1 || st.Caches[0].References < refs {
				return fmt.Errorf("%s: caches %+v, want %d references", p.name, st.Caches, refs)
			}
		}
		return nil
	})
}

// TestPurgeNetwork: three proxies in one DSHT network each hold an object
// (the first from the origin, the others from peers). POST /coral/purge
// with network=1 at one admin API removes it at all three (the admin cache
// listings, and the origin asked again) and lists the peers reached; a
// prefix purge removes only what is under the prefix, everywhere; a killed
// proxy is reported as not reached; and the public listener has no purge.
func TestPurgeNetwork(t *testing.T) {
	o := newOrigin(t)
	var ips []netip.Addr
	for i := range 3 {
		ips = append(ips, netip.AddrFrom4([4]byte{127, 0, 69, byte(21 + i)}))
	}
	ps := startNetwork(t, ips, proxyOptions{})
	a, b, c := ps[0], ps[1], ps[2]
	cl := newClient(t)
	get := func(p *proxy, path string) string {
		t.Helper()
		resp, body, err := fetch(cl, p, o.coralHost(), path)
		if err != nil {
			t.Fatalf("%s %s: %v", p.name, path, err)
		}
		if resp.StatusCode != http.StatusOK || len(body) != 64<<10 {
			t.Fatalf("%s %s: %s, %d bytes", p.name, path, resp.Status, len(body))
		}
		return resp.Header.Get("Cache-Status")
	}
	originURL := func(path string) string { return "http://" + o.addr.String() + path }
	coralURL := func(path string) string { return "http://" + o.coralHost() + path }

	// One object at all three: the first from the origin, the others from
	// peers.
	for _, p := range ps {
		cs := get(p, "/purge/a.bin")
		t.Logf("%s: /purge/a.bin: %s", p.name, cs)
		settleRefs(t, 1, p)
	}
	if n := o.count("/purge/a.bin"); n != 1 {
		t.Fatalf("origin asked %d times for /purge/a.bin, want 1", n)
	}
	for _, p := range ps {
		if !p.holds(t, "/purge/a.bin") {
			t.Fatalf("%s does not list /purge/a.bin", p.name)
		}
	}

	// The public listener has no purge route: 421 for the proxy's own
	// address, 405 for a Coralized host; nothing is purged.
	for host, want := range map[string]int{
		a.ip.String() + ":8090": http.StatusMisdirectedRequest,
		o.coralHost():           http.StatusMethodNotAllowed,
	} {
		req, _ := http.NewRequest(http.MethodPost, a.base()+"/coral/purge?network=1&url="+url.QueryEscape(originURL("/purge/a.bin")), nil)
		req.Host = host
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST /coral/purge on the proxy's listener, Host %s: %s, want %d", host, resp.Status, want)
		}
	}
	if !a.holds(t, "/purge/a.bin") {
		t.Fatal("a POST to the public listener purged the object")
	}
	// And the admin route is POST only.
	var v any
	if err := a.admin("/coral/purge?url="+url.QueryEscape(originURL("/purge/a.bin")), &v); err == nil || !strings.Contains(err.Error(), "405") {
		t.Errorf("GET /coral/purge: %v, want 405", err)
	}

	// The network purge, by the origin's URL, at A.
	start := time.Now()
	res := a.purge(t, url.Values{"url": {originURL("/purge/a.bin")}, "network": {"1"}})
	took := time.Since(start)
	if res.Local.Purged != 1 || res.Network == nil || res.Network.Mode != "references" ||
		res.Network.Reached != 2 || res.Network.Purged != 2 || res.Network.Unreachable != 0 {
		t.Fatalf("network purge: %+v %+v", res, res.Network)
	}
	reached := map[string]bool{}
	for _, peer := range res.Network.Peers {
		if peer.Reached && peer.Purged == 1 {
			reached[peer.Node] = true
		}
	}
	for _, p := range []*proxy{b, c} {
		if !reached[netip.AddrPortFrom(p.ip, dhtPort).String()] {
			t.Errorf("%s not listed as reached and purged: %+v", p.name, res.Network.Peers)
		}
	}
	t.Logf("network purge of one URL at 3 proxies: %v", took)
	for _, p := range ps {
		if p.holds(t, "/purge/a.bin") {
			t.Errorf("%s still lists /purge/a.bin", p.name)
		}
	}
	// The next request goes to the origin (no proxy has it any more).
	if cs := get(b, "/purge/a.bin"); detail(cs) != "origin" {
		t.Errorf("after the purge B's copy came from %q", cs)
	}
	if n := o.count("/purge/a.bin"); n != 2 {
		t.Errorf("origin asked %d times for /purge/a.bin, want 2", n)
	}

	// A prefix, by its Coralized form, at B: only what is under it.
	paths := []string{"/purge/dir/1.bin", "/purge/dir/2.bin", "/purge/dirt.bin", "/purge/other.bin"}
	for _, p := range ps {
		for _, path := range paths {
			get(p, path)
		}
		settleRefs(t, len(paths), p)
	}
	res = b.purge(t, url.Values{"url": {coralURL("/purge/dir/")}, "prefix": {"1"}, "network": {"1"}})
	if res.Local.Purged != 2 || res.Network == nil || res.Network.Mode != "known" || res.Network.Reached != 2 || res.Network.Purged != 4 {
		t.Fatalf("prefix purge: %+v %+v", res, res.Network)
	}
	for _, p := range ps {
		for _, path := range paths {
			want := !strings.HasPrefix(path, "/purge/dir/")
			if got := p.holds(t, path); got != want {
				t.Errorf("after the prefix purge %s lists %s: %v, want %v", p.name, path, got, want)
			}
		}
	}
	if !b.holds(t, "/purge/a.bin") {
		t.Error("the prefix purge took /purge/a.bin")
	}

	// A killed proxy: not reached, and said so.
	for _, p := range ps {
		get(p, "/purge/k.bin")
		settleRefs(t, 1, p)
	}
	c.kill()
	start = time.Now()
	res = a.purge(t, url.Values{"url": {coralURL("/purge/k.bin")}, "network": {"1"}, "timeout": {"2s"}})
	t.Logf("network purge with a dead proxy: %v", time.Since(start))
	if res.Network == nil || res.Network.Reached != 1 || res.Network.Unreachable != 1 || res.Local.Purged != 1 {
		t.Fatalf("purge with a dead proxy: %+v %+v", res, res.Network)
	}
	for _, peer := range res.Network.Peers {
		switch peer.Node {
		case netip.AddrPortFrom(c.ip, dhtPort).String():
			if peer.Reached || !strings.Contains(peer.Error, "no answer") {
				t.Errorf("dead proxy reported as %+v", peer)
			}
		case netip.AddrPortFrom(b.ip, dhtPort).String():
			if !peer.Reached || peer.Purged != 1 {
				t.Errorf("live proxy reported as %+v", peer)
			}
		}
	}
	if b.holds(t, "/purge/k.bin") || a.holds(t, "/purge/k.bin") {
		t.Error("/purge/k.bin survived at a live proxy")
	}
}
