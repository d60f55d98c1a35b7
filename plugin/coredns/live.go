package coral

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
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
	// keepSeed, when set, says whether a sweep's result should leave the
	// seeded snapshot in place (see seed).
	keepSeed func(*liveSet) bool

	// book remembers the name servers sweeps saw (see nameservers.go), for
	// bookWindow; joined says whether the node has joined the network, so
	// that the book knows when its knowledge is complete (nil: joined).
	book       *nsBook
	bookWindow time.Duration
	joined     func() bool

	snap   atomic.Pointer[liveSet]
	swept  chan struct{} // closed after the first sweep
	once   sync.Once
	pings  atomic.Uint64
	sweeps atomic.Uint64
}

func newTracker(node nodeSource, levels int, interval, liveWithin, syncWait time.Duration) *tracker {
	t := &tracker{node: node, levels: levels, interval: interval, liveWithin: liveWithin, syncWait: syncWait,
		now: time.Now, intn: rand.IntN, swept: make(chan struct{}), book: newNSBook(nsBookSize), bookWindow: nsRemember}
	t.snap.Store(&liveSet{proxy: make([][]coraldht.NodeInfo, levels), dns: make([][]coraldht.NodeInfo, levels)})
	return t
}

// run sweeps every interval until ctx ends.
func (t *tracker) run(ctx context.Context) {
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
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, p := range stale {
		mu.Lock()
		_, seen := heard[p.addr]
		if !seen {
			heard[p.addr] = time.Time{}
		}
		mu.Unlock()
		if seen {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.pings.Add(1)
			if _, err := t.node.Ping(ctx, p.addr); err == nil {
				mu.Lock()
				heard[p.addr] = t.now()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
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

// pickOptions says what to pick.
type pickOptions struct {
	level    int
	count    int
	near     netip.Addr // the resolver: members in its /24 (/48) come first
	services coraldht.Services
	family   int // 4 or 6: only addresses of that family; 0 any
	// nearOnly: when at least minNear members are in the resolver's prefix
	// or left hints near it, return only those. Name server sets use it:
	// servers that share the resolver's network are better than any other,
	// this server included.
	nearOnly bool
	// ranked are the nodes that left hints near the client (proximity.go),
	// best first: those that are members come before all others, by score
	// and then by RTT from this server.
	ranked []nearNode
}

// minNear is how many servers in the resolver's prefix make an NS set on
// their own: two, so the resolver always has a second server to try.
const minNear = 2

// pick returns up to count members of the level's cluster from the latest
// sweep that were heard from within liveWithin: those in the resolver's
// prefix first, then the rest from a random starting point so that load
// spreads over the cluster. Non-recursive proxies are only for resolvers in
// their own prefix.
func (t *tracker) pick(o pickOptions) []coraldht.NodeInfo {
	set := t.snap.Load()
	list := set.proxy
	if o.services.Has(coraldht.ServiceDNS) {
		list = set.dns
	}
	if o.level < 0 || o.level >= len(list) {
		return nil
	}
	return t.choose(list[o.level], o)
}

func (t *tracker) choose(members []coraldht.NodeInfo, o pickOptions) []coraldht.NodeInfo {
	now := t.now()
	nearP := coraldht.SitePrefix(o.near)
	usable := func(ni *coraldht.NodeInfo) bool {
		a := ni.Addr.Addr().Unmap()
		if o.family == 4 && !a.Is4() || o.family == 6 && !a.Is6() {
			return false
		}
		if !ni.Self && now.Sub(ni.LastHeard) > t.liveWithin {
			return false
		}
		if ni.Services.Has(coraldht.ServiceNonRecursive) && (!o.near.IsValid() || !nearP.Contains(a)) {
			return false
		}
		return true
	}
	out := make([]coraldht.NodeInfo, 0, o.count)
	hinted := 0
	if len(o.ranked) > 0 {
		out = appendHinted(out, members, o, usable)
		hinted = len(out)
		if len(out) == o.count {
			return out
		}
	}
	if o.near.IsValid() {
		for i := range members {
			if len(out) == o.count {
				return out
			}
			if usable(&members[i]) && nearP.Contains(members[i].Addr.Addr().Unmap()) &&
				(hinted == 0 || !containsAddr(out[:hinted], members[i].Addr.Addr())) {
				out = append(out, members[i])
			}
		}
	}
	if o.nearOnly && len(out) >= minNear {
		return out
	}
	n := len(members)
	if n == 0 {
		return out
	}
	start := t.intn(n)
	for j := range n {
		if len(out) == o.count {
			break
		}
		ni := &members[(start+j)%n]
		if !usable(ni) || (o.near.IsValid() && nearP.Contains(ni.Addr.Addr().Unmap())) ||
			(hinted > 0 && containsAddr(out[:hinted], ni.Addr.Addr())) {
			continue
		}
		out = append(out, *ni)
	}
	return out
}

// appendHinted appends up to o.count usable members that left hints near
// the client, best score first, then lowest RTT from this server (itself
// first: zero).
func appendHinted(out, members []coraldht.NodeInfo, o pickOptions, usable func(*coraldht.NodeInfo) bool) []coraldht.NodeInfo {
	type scored struct {
		i, score int
	}
	var hits []scored
	for i := range members {
		if s := scoreOf(o.ranked, members[i].Addr.Addr().Unmap()); s > 0 && usable(&members[i]) {
			hits = append(hits, scored{i, s})
		}
	}
	rtt := func(ni *coraldht.NodeInfo) time.Duration {
		if ni.Self {
			return 0
		}
		if ni.RTT == 0 {
			return time.Hour // unmeasured last
		}
		return ni.RTT
	}
	slices.SortStableFunc(hits, func(x, y scored) int {
		if x.score != y.score {
			return y.score - x.score
		}
		return int(rtt(&members[x.i]) - rtt(&members[y.i]))
	})
	for _, h := range hits[:min(len(hits), o.count-len(out))] {
		out = append(out, members[h.i])
	}
	return out
}

// pickSync is the slow path for when the latest sweep has nothing live at
// any level: it asks the node, which pings members synchronously, waiting
// at most syncWait.
func (t *tracker) pickSync(ctx context.Context, o pickOptions) []coraldht.NodeInfo {
	ctx, cancel := context.WithTimeout(ctx, t.syncWait)
	defer cancel()
	return t.choose(t.node.Nodes(ctx, o.level, sweepSize, o.near, o.services), o)
}

func containsAddr(nodes []coraldht.NodeInfo, a netip.Addr) bool {
	a = a.Unmap()
	for _, ni := range nodes {
		if ni.Addr.Addr().Unmap() == a {
			return true
		}
	}
	return false
}

func containsSelf(nodes []coraldht.NodeInfo) bool {
	for _, ni := range nodes {
		if ni.Self {
			return true
		}
	}
	return false
}
