//go:build linux

package demonet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dn "github.com/coralcdn/coral/internal/lab/demonet"
)

// The tests share one network (started by the first of them) and run in
// this order; TestKillNode comes last and restarts the node it kills.

// TestResolveAndFetch resolves the Coralized name through every resolver
// and fetches the site through the proxies the answer names, as a browser
// would: the page, then its images.
func TestResolveAndFetch(t *testing.T) {
	n := network(t)
	id := runID(t)
	for _, r := range n.Resolvers {
		t.Run(string(r.Kind), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// A few fresh Coralized names first, to see where the
			// resolver's queries land: a name server of the resolver's
			// region answers with that region's proxies (the resolver is
			// at level 2 to it), one of the other region with any of the
			// level-1 cluster (everyone). Which one a resolver asks is up
			// to it: on loopback every server is equally near.
			for k := 1; k <= 3; k++ {
				name := fmt.Sprintf("w%d-%s.example.com.%s", k, id, dn.AliasZone)
				addrs, ttl, err := dn.Lookup(ctx, r.Addr, name)
				if err != nil {
					t.Fatalf("%s: %v\n%s", name, err, r.LogTail(3000))
				}
				var regions []string
				for _, a := range addrs {
					nd := n.NodeAt(a)
					if nd == nil || !nd.Caddy.Running() {
						t.Fatalf("%s: %v is not a running proxy", name, a)
					}
					regions = append(regions, nd.Region)
				}
				t.Logf("%s → %v (TTL %d, regions %v; the resolver is in %s)", name, addrs, ttl, regions, r.Region)
			}

			addrs, ttl, err := dn.Lookup(ctx, r.Addr, n.CoralHost())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s → %v (TTL %d)", n.CoralHost(), addrs, ttl)
			if ttl > dn.AnswerTTL {
				t.Errorf("TTL %d, want at most %d", ttl, dn.AnswerTTL)
			}
			page := dn.PathIndex + "?r=" + id + "-" + string(r.Kind)
			resp := mustFetch(t, n, addrs, page)
			if nodeIndex(n, netip.MustParseAddr(resp.RemoteIP)) < 0 {
				t.Errorf("curl talked to %s, not a proxy", resp.RemoteIP)
			}
			if resp.Header.Get("Via") == "" || !strings.HasPrefix(resp.cacheStatus(), "coral;") {
				t.Errorf("no Via or Cache-Status from the proxy: %v", resp.Header)
			}
			// The embedded images, by their relative links, through the
			// same name.
			srcs := regexp.MustCompile(`<img src="([^"]+)"`).FindAllStringSubmatch(string(resp.Body), -1)
			if len(srcs) != 3 {
				t.Fatalf("the page has %d images, want 3", len(srcs))
			}
			for _, m := range srcs {
				img := mustFetch(t, n, addrs, m[1])
				t.Logf("%s: %d bytes, %s", m[1], len(img.Body), img.cacheStatus())
			}
		})
	}
}

// TestCrowd follows one object as the crowd grows: the first proxy gets it
// from the origin, a second one in the same cluster from that peer, then
// serves it from its own cache; a proxy in the other cluster finds it at
// level 1. The origin serves it once.
func TestCrowd(t *testing.T) {
	n := network(t)
	east, west := nodesIn(n, dn.RegionEast), nodesIn(n, dn.RegionWest)
	if len(east) < 2 || len(west) < 1 {
		t.Fatalf("need two east nodes and a west one")
	}
	obj := dn.PathPNG2 + "?crowd=" + runID(t)
	via := func(nd *dn.Node) []netip.Addr { return []netip.Addr{nd.Addr} }

	wantSource(t, "first, at node "+east[0].Addr.String(), mustFetch(t, n, via(east[0]), obj), `coral; fwd=uri-miss; detail="origin"`)
	waitCommitted(t, n, east[0], obj)
	wantSource(t, "second, at node "+east[1].Addr.String(), mustFetch(t, n, via(east[1]), obj), `coral; fwd=uri-miss; detail="peer-l2"`)
	waitCommitted(t, n, east[1], obj)
	wantSource(t, "again at node "+east[1].Addr.String(), mustFetch(t, n, via(east[1]), obj), `coral; hit; detail="local"`)
	wantSource(t, "other cluster, node "+west[0].Addr.String(), mustFetch(t, n, via(west[0]), obj), `coral; fwd=uri-miss; detail="peer-l1"`)
	if got := n.Origin.RequestsFor(obj); len(got) != 1 {
		t.Errorf("the origin served %s %d times, want once", obj, len(got))
	}
}

// TestFlashCrowd sends many clients at once, through every proxy, for an
// object none has: exactly one origin fetch (the first proxy's put+get
// reference of its download in progress, made at the key's closest node,
// which serializes them, sends every other proxy to a peer), the rest
// from peers or collapsed onto a download in progress; every client gets
// the origin's bytes.
func TestFlashCrowd(t *testing.T) {
	n := network(t)
	obj := dn.PathJPEG + "?flash=" + runID(t)
	const perNode = 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	sources := map[string]int{}
	var failed atomic.Int32
	for _, nd := range n.Nodes {
		for range perNode {
			wg.Go(func() {
				r, err := fetch(t, n, []netip.Addr{nd.Addr}, obj)
				switch {
				case err != nil:
					t.Errorf("node %d: %v", nd.Index, err)
					failed.Add(1)
				case r.Status != http.StatusOK:
					t.Errorf("node %d: status %d (%s)", nd.Index, r.Status, r.cacheStatus())
				default:
					checkBody(t, obj, r)
					mu.Lock()
					sources[r.cacheStatus()]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	origin := len(n.Origin.RequestsFor(obj))
	t.Logf("%d clients through %d proxies: origin fetches %d; Cache-Status %v", perNode*len(n.Nodes), len(n.Nodes), origin, sources)
	if origin != 1 {
		t.Errorf("origin fetches %d, want 1", origin)
	}
}

// TestCookies: a client's Cookie never reaches the origin, and the
// origin's Set-Cookie never reaches a client, from the origin or a peer.
func TestCookies(t *testing.T) {
	n := network(t)
	page := dn.PathIndex + "?cookie=" + runID(t)
	// The origin does set one.
	direct, err := curl(t, "http://"+n.Origin.Addr.String()+page)
	if err != nil {
		t.Fatal(err)
	}
	if direct.Header.Get("Set-Cookie") == "" {
		t.Fatal("the origin sent no Set-Cookie; nothing to check")
	}
	before := len(n.Origin.RequestsFor(page))
	for _, nd := range []*dn.Node{n.Nodes[2], n.Nodes[len(n.Nodes)-1]} {
		r := mustFetch(t, n, []netip.Addr{nd.Addr}, page, "-H", "Cookie: session=alice; theme=dark")
		t.Logf("node %d: %s", nd.Index, r.cacheStatus())
		if c := r.Header.Values("Set-Cookie"); len(c) > 0 {
			t.Errorf("node %d passed Set-Cookie %q", nd.Index, c)
		}
	}
	reqs := n.Origin.RequestsFor(page)[before:]
	if len(reqs) != 1 {
		t.Errorf("the origin got %d requests through the proxies, want 1", len(reqs))
	}
	for _, r := range reqs {
		if c := r.Header.Values("Cookie"); len(c) > 0 {
			t.Errorf("the origin got cookies %q from %s", c, r.Remote)
		}
		if r.Header.Get("Via") == "" {
			t.Errorf("the origin's request has no Via: %v", r.Header)
		}
	}
}

// TestRefusals: hosts that are not Coralized, origins on addresses outside
// allow_origins (literal, or by a name that resolves there) and methods
// other than GET and HEAD are refused, and the private server is never
// contacted.
func TestRefusals(t *testing.T) {
	n := network(t)
	// A private web server where intranet.demo.test points; no proxy may
	// ever reach it.
	var hits atomic.Int32
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.Layout.Intranet(), dn.PortHTTP).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("secret"))
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	proxy := n.Nodes[0].Addr
	intranetIP := n.Layout.Intranet().String()
	for _, tc := range []struct {
		what string
		host string
		args []string
		want int
	}{
		{"origin name without the zone", dn.OriginName, nil, http.StatusMisdirectedRequest},
		{"some other host", "www.example.com", nil, http.StatusMisdirectedRequest},
		{"private origin, literal", intranetIP + "." + dn.AliasZone, nil, http.StatusForbidden},
		{"loopback origin, literal", "127.0.0.1." + dn.AliasZone, nil, http.StatusForbidden},
		{"the zone twice", n.CoralHost() + "." + dn.AliasZone, nil, http.StatusForbidden},
		{"POST", n.CoralHost(), []string{"-X", "POST", "-d", "x=1"}, http.StatusMethodNotAllowed},
	} {
		args := append([]string{"-H", "Host: " + tc.host}, tc.args...)
		r, err := curl(t, append(args, "http://"+proxy.String()+dn.PathAbout)...)
		if err != nil {
			t.Errorf("%s: %v", tc.what, err)
			continue
		}
		t.Logf("%s (Host: %s): %d", tc.what, tc.host, r.Status)
		if r.Status != tc.want {
			t.Errorf("%s (Host: %s): status %d, want %d", tc.what, tc.host, r.Status, tc.want)
		}
	}

	// By name: intranet.demo.test resolves (through the proxies' resolver)
	// to the private address. The README says such origins get 403 too,
	// "checked on the address actually dialled, after name resolution".
	t.Run("private origin by name", func(t *testing.T) {
		host := dn.IntranetName + "." + dn.AliasZone
		r, err := curl(t, "-H", "Host: "+host, "http://"+proxy.String()+"/")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Host: %s: %d", host, r.Status)
		if hits.Load() != 0 {
			t.Fatalf("the private server was contacted %d times", hits.Load())
		}
		if r.Status != http.StatusForbidden {
			t.Errorf("status %d, want 403", r.Status)
		}
	})
	if hits.Load() != 0 {
		t.Errorf("the private server was contacted %d times", hits.Load())
	}
}

// TestStaleWhenOriginDown stops the origin: a copy past its max-age is
// served stale, a fresh one as a hit, byte for byte; then the origin comes
// back.
func TestStaleWhenOriginDown(t *testing.T) {
	n := network(t)
	nd := n.Nodes[len(n.Nodes)-2]
	id := runID(t)
	news, about := dn.PathNews+"?stale="+id, dn.PathAbout+"?stale="+id
	via := []netip.Addr{nd.Addr}
	mustFetch(t, n, via, news)
	mustFetch(t, n, via, about)
	obj := waitCommitted(t, n, nd, news)
	waitCommitted(t, n, nd, about)

	if err := n.StopOrigin(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.StartOrigin(); err != nil {
			t.Errorf("restarting the origin: %v", err)
		}
	})
	// Wait for the news page (max-age=5) to go stale.
	t.Logf("%s expires at %s (in %v)", news, obj.Expires.Format(time.TimeOnly), time.Until(obj.Expires).Round(time.Millisecond))
	waitFor(t, "the copy going stale", 15*time.Second, func() error {
		if time.Now().Before(obj.Expires.Add(100 * time.Millisecond)) {
			return fmt.Errorf("fresh until %s", obj.Expires.Format(time.TimeOnly))
		}
		return nil
	})
	r := mustFetch(t, n, via, news)
	wantSource(t, "stale copy, origin down", r, `coral; hit; fwd=stale; detail="stale"`)
	r = mustFetch(t, n, via, about)
	wantSource(t, "fresh copy, origin down", r, `coral; hit; detail="local"`)

	// A proxy in the same cluster that never had the page asks its peer.
	other := n.Nodes[len(n.Nodes)-1]
	if other.Region == nd.Region {
		r, err := fetch(t, n, []netip.Addr{other.Addr}, news)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %d, which never had it, with the origin down: %d %s", other.Index, r.Status, r.cacheStatus())
		if r.Status != http.StatusOK {
			t.Errorf("node %d: %d, want the peer's stale copy", other.Index, r.Status)
		}
		checkBody(t, news, r)
	}
}

// TestKillNode kills a node (both processes, SIGKILL) and measures how
// long DNS keeps handing it out, through Unbound, for fresh names and for
// a name the resolver has cached; a client that tries the cached answer's
// addresses in order, dead proxy first, still gets the page. Then the node
// is restarted and rejoins.
func TestKillNode(t *testing.T) {
	n := network(t)
	res := n.Resolvers[0] // Unbound, east
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The resolver's answer for the site's name; the victim is a node it
	// names (answers carry 2 of the region's proxies, rotated), other than
	// node 0, which started the DSHT.
	var before []netip.Addr
	var victim *dn.Node
	waitFor(t, "an answer naming a node other than node 0", 20*time.Second, func() error {
		addrs, _, err := dn.Lookup(ctx, res.Addr, n.CoralHost())
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if nd := n.NodeAt(a); nd != nil && nd.Index != 0 && nd.Caddy.Running() {
				before, victim = addrs, nd
				return nil
			}
		}
		return fmt.Errorf("answer %v", addrs)
	})
	id := runID(t)
	page := dn.PathAbout + "?kill=" + id
	mustFetch(t, n, before, page)

	killed := time.Now()
	n.KillNode(victim.Index)
	t.Cleanup(func() {
		if err := n.RestartNode(victim.Index); err != nil {
			t.Errorf("restarting node %d: %v", victim.Index, err)
			return
		}
		wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer wcancel()
		start := time.Now()
		if err := n.WaitReady(wctx); err != nil {
			t.Errorf("after restarting node %d: %v", victim.Index, err)
		}
		t.Logf("node %d restarted and seen by every name server after %v", victim.Index, time.Since(start).Round(time.Millisecond))
	})

	// A client with the answer from before the kill, dead proxy first.
	order := append([]netip.Addr{victim.Addr}, slices.DeleteFunc(slices.Clone(before), func(a netip.Addr) bool { return a == victim.Addr })...)
	r := mustFetch(t, n, order, page)
	t.Logf("client trying %v in order: served by %s, %s", order, r.RemoteIP, r.cacheStatus())
	if r.RemoteIP == victim.Addr.String() {
		t.Errorf("served by the dead node?")
	}

	// Until when does DNS name the dead node? Fresh names (answered by the
	// name servers now) and the cached name, every 200 ms, until neither
	// has named it for the answer TTL plus two seconds and every name
	// server's sweep has dropped it.
	var lastFresh, lastCached, sweptAt time.Time
	lookups, failures := 0, 0
	bound := 15*time.Second + dn.AnswerTTL*time.Second
	quiet := dn.AnswerTTL*time.Second + 2*time.Second
	for k := 0; ; k++ {
		now := time.Now()
		if now.Sub(killed) > bound+quiet+5*time.Second {
			t.Fatalf("DNS still names node %d %v after the kill (fresh names: last %v, cached name: last %v)",
				victim.Index, now.Sub(killed).Round(time.Millisecond), since(killed, lastFresh), since(killed, lastCached))
		}
		for _, name := range []string{fmt.Sprintf("k%d-%s.example.com.%s", k, id, dn.AliasZone), n.CoralHost()} {
			addrs, _, err := dn.Lookup(ctx, res.Addr, name)
			lookups++
			if err != nil {
				failures++
				t.Logf("%v after the kill: %s: %v", time.Since(killed).Round(time.Millisecond), name, err)
				continue
			}
			if slices.Contains(addrs, victim.Addr) {
				if name == n.CoralHost() {
					lastCached = time.Now()
				} else {
					lastFresh = time.Now()
				}
			}
		}
		if sweptAt.IsZero() && allSwept(n, victim) {
			sweptAt = time.Now()
		}
		latest := latestOf(lastFresh, lastCached, sweptAt, killed)
		if !sweptAt.IsZero() && time.Since(latest) > quiet {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("node %d killed: every name server's sweep dropped it after %v; DNS named it last %v after the kill for fresh names, %v for the cached name (TTL %d s); %d lookups, %d failed",
		victim.Index, since(killed, sweptAt), since(killed, lastFresh), since(killed, lastCached), dn.AnswerTTL, lookups, failures)
	if d := lastFresh.Sub(killed); !lastFresh.IsZero() && d > 15*time.Second {
		t.Errorf("fresh names named the dead node %v after the kill, want within 15 s", d)
	}
	if d := lastCached.Sub(killed); !lastCached.IsZero() && d > bound {
		t.Errorf("the cached name named the dead node %v after the kill, want within %v", d, bound)
	}
	if failures > lookups/10 {
		t.Errorf("%d of %d lookups failed after the kill", failures, lookups)
	}

	// And the site still works through whatever DNS says now.
	addrs, _, err := dn.Lookup(ctx, res.Addr, n.CoralHost())
	if err != nil {
		t.Fatal(err)
	}
	mustFetch(t, n, addrs, page)
}

func latestOf(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

func since(from, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Sub(from).Round(time.Millisecond).String()
}

// allSwept reports whether every running name server's last sweep left
// the victim's proxy out at level 0.
func allSwept(n *dn.Net, victim *dn.Node) bool {
	live := 0
	for _, nd := range n.Nodes {
		if nd.Caddy.Running() {
			live++
		}
	}
	for _, nd := range n.Nodes {
		if !nd.CoreDNS.Running() {
			continue
		}
		got, err := nd.LiveProxies()
		if err != nil || got[0] != live {
			return false
		}
	}
	return true
}
