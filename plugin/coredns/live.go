package coral

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// The answer path never waits on the DSHT. A background sweep keeps, per
// level, the members of this node's cluster that run an HTTP proxy or a DNS
// server and that were heard from first-hand recently, pinging those that
// have been quiet; queries pick from the latest sweep and drop anything not
// heard from within liveWithin at the moment of answering.

// sweepSize is how many members per level and service a sweep keeps fresh.
// Answers take a few of them, preferring the resolver's own /24.
const sweepSize = 64

// liveSet is one sweep's result; it is never modified once published.
type liveSet struct {
	at    time.Time
	proxy [][]coraldht.NodeInfo // per level
	dns   [][]coraldht.NodeInfo // per level
}

// nodeSource is the part of coraldht.Node the tracker uses.
type nodeSource interface {
	Nodes(ctx context.Context, level, count int, target netip.Addr, services coraldht.Services) []coraldht.NodeInfo
	Ping(ctx context.Context, addr netip.AddrPort) (time.Duration, error)
	PingNode(ctx context.Context, addr netip.AddrPort) (coraldht.NodeInfo, error)
	Levels() []coraldht.LevelInfo
	RoutingTable(level int) []coraldht.NodeInfo
}

type tracker struct {
	node       nodeSource
	levels     int
	interval   time.Duration
	liveWithin time.Duration
	syncWait   time.Duration
	now        func() time.Time
	intn       func(n int) int // random start of the rotation; rand.IntN

	onSweep func(*liveSet) // called after each sweep (metrics)
	// loadThreshold is the settings' load_threshold, for the metrics.
	loadThreshold int
	// warm, when set, is closed once the node has pinged the contacts it
	// had before a restart: the first sweep waits for it (at most an
	// interval), so that it finds them.
	warm <-chan struct{}
	// keepSeed, when set, says whether a sweep's result should leave the
	// seeded snapshot in place (see seed).
	keepSeed func(*liveSet) bool

	// book remembers the name servers sweeps saw (see nameservers.go), for
	// bookWindow; joined says whether the node has joined the network, so
	// that the book knows when its knowledge is complete (nil: joined).
	book       *nsBook
	bookWindow time.Duration
	joined     func() bool

	// wanted are the nodes that strong locality hints placed near recent
	// clients (see want), with when they were last wanted.
	wantMu sync.Mutex
	wanted map[netip.Addr]wantedNode

	snap   atomic.Pointer[liveSet]
	swept  chan struct{} // closed after the first sweep
	once   sync.Once
	pings  atomic.Uint64
	sweeps atomic.Uint64
}

func newTracker(node nodeSource, levels int, interval, liveWithin, syncWait time.Duration) *tracker {
	t := &tracker{node: node, levels: levels, interval: interval, liveWithin: liveWithin, syncWait: syncWait,
		now: time.Now, intn: rand.IntN, swept: make(chan struct{}), book: newNSBook(nsBookSize), bookWindow: nsRemember,
		wanted: make(map[netip.Addr]wantedNode)}
	t.snap.Store(&liveSet{proxy: make([][]coraldht.NodeInfo, levels), dns: make([][]coraldht.NodeInfo, levels)})
	return t
}

// run sweeps every interval until ctx ends.
func (t *tracker) run(ctx context.Context) {
	if t.warm != nil {
		first := time.NewTimer(t.interval)
		select {
		case <-t.warm:
		case <-first.C:
		case <-ctx.Done():
		}
		first.Stop()
	}
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		t.sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sweep refreshes the live sets. Members heard from longer ago than a third
// of liveWithin are pinged, so a member that is up stays in the set between
// sweeps and one that died drops out within liveWithin.
func (t *tracker) sweep(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(t.interval, time.Second))
	defer cancel()
	set := &liveSet{at: t.now(), proxy: make([][]coraldht.NodeInfo, t.levels), dns: make([][]coraldht.NodeInfo, t.levels)}
	type pending struct {
		ni   *coraldht.NodeInfo
		addr netip.AddrPort
	}
	var stale []pending
	for lvl := range t.levels {
		set.proxy[lvl] = t.node.Nodes(ctx, lvl, sweepSize, netip.Addr{}, coraldht.ServiceHTTP)
		set.dns[lvl] = t.node.Nodes(ctx, lvl, sweepSize, netip.Addr{}, coraldht.ServiceDNS)
		if lvl == 0 {
			t.addWanted(ctx, set)
		}
		for _, list := range [][]coraldht.NodeInfo{set.proxy[lvl], set.dns[lvl]} {
			for i := range list {
				if !list[i].Self && t.now().Sub(list[i].LastHeard) > t.liveWithin/3 {
					stale = append(stale, pending{&list[i], list[i].Addr})
				}
			}
		}
	}
	// One ping per address, however many lists it is in.
	heard := make(map[netip.AddrPort]time.Time)
	var addrs []netip.AddrPort
	for _, p := range stale {
		if _, seen := heard[p.addr]; !seen {
			heard[p.addr] = time.Time{}
			addrs = append(addrs, p.addr)
		}
	}
	var mu sync.Mutex
	t.pingEach(len(addrs), func(i int) {
		if _, err := t.node.Ping(ctx, addrs[i]); err == nil {
			mu.Lock()
			heard[addrs[i]] = t.now()
			mu.Unlock()
		}
	})
	for _, p := range stale {
		if at := heard[p.addr]; at.After(p.ni.LastHeard) {
			p.ni.LastHeard = at
		}
	}
	t.recordNameServers(set)
	t.sweeps.Add(1)
	if t.keepSeed != nil && t.keepSeed(set) {
		return
	}
	t.snap.Store(set)
	if t.onSweep != nil {
		t.onSweep(set)
	}
	t.once.Do(func() { close(t.swept) })
}

// The sweep keeps the sweepSize members nearest this node. At level 0,
// whose cluster is every node, the nodes that locality hints place near a
// client are members too, however far they are from this node: a server
// far from a client (the parent zone's, before the client's resolver is
// locked) must be able to name them, in the answer and in the NS set that
// locks the resolver onto servers near it. So a mapping's strong hints are
// wanted for wantFor, and each sweep adds the wanted nodes to level 0,
// pinging those it has not heard from lately (the reply says which
// services they run), so that only live ones are named.
const (
	wantMax = sweepSize
	wantFor = 10 * time.Minute
)

type wantedNode struct {
	dht netip.AddrPort
	at  time.Time
}

// want notes the strongly hinted nodes of a mapping (see strongHint).
func (t *tracker) want(ranked []nearNode) {
	now := t.now()
	t.wantMu.Lock()
	defer t.wantMu.Unlock()
	for _, n := range ranked {
		if !strongHint(n) || !n.dht.IsValid() {
			continue
		}
		if _, ok := t.wanted[n.addr]; !ok && len(t.wanted) >= wantMax {
			t.forgetWantedLocked(now)
		}
		t.wanted[n.addr] = wantedNode{n.dht, now}
	}
}

// forgetWantedLocked drops the wanted nodes older than wantFor, and the
// oldest one when that leaves no room.
func (t *tracker) forgetWantedLocked(now time.Time) {
	var oldest netip.Addr
	var at time.Time
	for a, w := range t.wanted {
		if now.Sub(w.at) > wantFor {
			delete(t.wanted, a)
		} else if !oldest.IsValid() || w.at.Before(at) {
			oldest, at = a, w.at
		}
	}
	if len(t.wanted) >= wantMax && oldest.IsValid() {
		delete(t.wanted, oldest)
	}
}

// addWanted adds to the level-0 lists of set the wanted nodes they lack,
// from the routing table when it heard from them lately, else from a ping.
func (t *tracker) addWanted(ctx context.Context, set *liveSet) {
	now := t.now()
	t.wantMu.Lock()
	var want []wantedNode
	for a, w := range t.wanted {
		if now.Sub(w.at) > wantFor {
			delete(t.wanted, a)
		} else if !listsAddr(set.proxy[0], a) && !listsAddr(set.dns[0], a) {
			want = append(want, w)
		}
	}
	t.wantMu.Unlock()
	if len(want) == 0 {
		return
	}
	known := make(map[netip.AddrPort]coraldht.NodeInfo)
	for _, ni := range t.node.RoutingTable(0) {
		known[ni.Addr] = ni
	}
	found := make([]coraldht.NodeInfo, len(want))
	var quiet []int // indices of want to ping
	for i, w := range want {
		if ni, ok := known[w.dht]; ok && now.Sub(ni.LastHeard) <= t.liveWithin/3 {
			found[i] = ni
		} else {
			quiet = append(quiet, i)
		}
	}
	t.pingEach(len(quiet), func(j int) {
		if ni, err := t.node.PingNode(ctx, want[quiet[j]].dht); err == nil {
			found[quiet[j]] = ni
		}
	})
	for _, ni := range found {
		if !ni.Addr.IsValid() {
			continue
		}
		if ni.Services.Has(coraldht.ServiceHTTP) {
			set.proxy[0] = append(set.proxy[0], ni)
		}
		if ni.Services.Has(coraldht.ServiceDNS) {
			set.dns[0] = append(set.dns[0], ni)
		}
	}
}

// pingEach runs ping(0..n-1), at most sweepPings at once, and waits for
// them; each counts as a ping of the sweep.
func (t *tracker) pingEach(n int, ping func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, sweepPings)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.pings.Add(1)
			ping(i)
		})
	}
	wg.Wait()
}

// sweepPings is how many pings a sweep has in flight at once.
const sweepPings = 16

// seed starts the tracker from the live set of the instance it replaces
// (a reload): answers go on from what that one saw instead of waiting for
// this one's first sweep, which after a node restart can come before the
// node has joined and find nobody.
func (t *tracker) seed(set *liveSet) {
	t.snap.Store(set)
	t.once.Do(func() { close(t.swept) })
}

// empty reports whether the set holds no member but this node itself at
// any level.
func (s *liveSet) empty() bool {
	for lvl := range s.proxy {
		for _, list := range [][]coraldht.NodeInfo{s.proxy[lvl], s.dns[lvl]} {
			for _, ni := range list {
				if !ni.Self {
					return false
				}
			}
		}
	}
	return true
}

// ready reports whether the first sweep has finished.
func (t *tracker) ready() bool {
	select {
	case <-t.swept:
		return true
	default:
		return false
	}
}

// pickSync is the slow path for when the latest sweep has nothing live at
// any level: it asks the node, which pings members synchronously, waiting
// at most syncWait.
func (t *tracker) pickSync(ctx context.Context, o pickOptions, buf []*coraldht.NodeInfo) []*coraldht.NodeInfo {
	ctx, cancel := context.WithTimeout(ctx, t.syncWait)
	defer cancel()
	return t.choose(t.node.Nodes(ctx, o.level, sweepSize, o.near, o.services), o, buf)
}
