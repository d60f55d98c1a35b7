package coral

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"

	"github.com/coralcdn/coral/coraldht/icmpprobe"
)

// Proximity is the paper's nodes(level, count, target): the client's
// address is the target. A mapping traces the last hops toward the target
// (icmpprobe.TraceLastHops: one burst of TTL-limited probes), looks the
// routers' addresses and /24s, and the target's own /24, up as locality
// hints in the DSHT, and ranks the nodes that published hints there by how
// near the client the hint is. Mappings are cached per /24 (IPv6 /48); only
// the first query from a prefix waits for one, and for at most the
// first-query budget: past it the answer is the choice made without a
// target, and the mapping goes on to serve later queries.

// hopTracer returns the routers on the last hops toward target, the one
// nearest target last.
type hopTracer func(ctx context.Context, target netip.Addr) ([]netip.Addr, error)

// hintFinder returns the DSHT addresses of the nodes that published a
// locality hint under p.
type hintFinder func(ctx context.Context, p netip.Prefix) ([]netip.AddrPort, error)

// nearNode is a node that left a hint near a target, with its score: the
// larger, the nearer the target its hints were.
type nearNode struct {
	addr  netip.Addr     // its address (unmapped), the one answers name
	dht   netip.AddrPort // its DSHT address, as the hint had it
	score int
	// hop is where the node's heaviest hint was: 0 the target's own /24,
	// 1 the router nearest the target, 2 the next one out, and so on.
	hop int
}

// nearEntry is one mapping; ranked is best first and never modified once
// stored.
type nearEntry struct {
	ranked   []nearNode
	ok       bool // false: the trace failed; retried after failedFor
	measured time.Time
}

type nearCall struct {
	done chan struct{}
	e    nearEntry
}

// proximity sources, the "source" label of coredns_coral_proximity_total:
// what an answer's choice of proxies and name servers was based on.
const (
	nearHints       = "hints"         // ranked by the target's hints
	nearNoHints     = "no_hints"      // mapped: no node left hints near the target
	nearPending     = "pending"       // the mapping outlasted the first-query budget
	nearSkipped     = "skipped"       // proximity_limit mappings were in flight
	nearFailed      = "failed"        // the last mapping failed (trace error, timeout)
	nearUnavailable = "no_raw_socket" // this process may not trace
)

// maxRanked bounds the nodes a mapping keeps, so ranking an answer stays
// cheap whatever the hints hold.
const maxRanked = 16

// proximity maps targets to nearby nodes.
type proximity struct {
	trace   hopTracer // nil: cannot trace (no raw sockets); every choice falls back
	hints   hintFinder
	budget  time.Duration // the longest a query waits for a mapping
	timeout time.Duration // bounds one mapping, trace and hint lookups
	fresh   time.Duration // a mapping older than this is redone in the background
	failed  time.Duration // a failed mapping is retried after this long
	limit   int           // mappings in flight at once
	max     int           // mappings kept
	now     func() time.Time
	ctx     context.Context // ends at shutdown

	mu       sync.RWMutex
	entries  map[netip.Prefix]nearEntry
	inflight map[netip.Prefix]*nearCall
	wg       sync.WaitGroup
	// mapped, when set, observes each finished mapping (metrics).
	mapped func(outcome string, d time.Duration)
}

func newProximity(ctx context.Context, trace hopTracer, hints hintFinder, o proximityConfig) *proximity {
	return &proximity{trace: trace, hints: hints, budget: o.wait, timeout: o.timeout, fresh: o.cache,
		failed: min(o.cache, time.Minute), limit: o.limit, max: o.entries, now: time.Now, ctx: ctx,
		entries: make(map[netip.Prefix]nearEntry), inflight: make(map[netip.Prefix]*nearCall)}
}

// proximityConfig is the Corefile's proximity settings.
type proximityConfig struct {
	off     bool
	wait    time.Duration
	timeout time.Duration
	cache   time.Duration
	hops    int
	limit   int
	entries int
}

const (
	defaultProximityWait    = 100 * time.Millisecond
	defaultProximityTimeout = time.Second
	defaultProximityHops    = 5
	defaultProximityLimit   = 64
	proximityEntries        = 65536
)

// lookup returns the cached ranking for target's prefix, starting a mapping
// when there is none or it is old. When the query should wait for a mapping
// it returns it as call; source is then nearPending until await says more.
func (p *proximity) lookup(target netip.Addr) (ranked []nearNode, call *nearCall, source string) {
	if p.trace == nil {
		return nil, nil, nearUnavailable
	}
	pre := coraldht.SitePrefix(target)
	p.mu.RLock()
	e, ok := p.entries[pre]
	p.mu.RUnlock()
	if ok {
		age := p.now().Sub(e.measured)
		if (e.ok && age > p.fresh) || (!e.ok && age > p.failed) {
			p.start(pre, target)
		}
		return e.ranked, nil, e.source()
	}
	if call = p.start(pre, target); call == nil {
		return nil, nil, nearSkipped
	}
	return nil, call, nearPending
}

func (e nearEntry) source() string {
	switch {
	case !e.ok:
		return nearFailed
	case len(e.ranked) == 0:
		return nearNoHints
	}
	return nearHints
}

// await waits for call until deadline or ctx ends.
func (p *proximity) await(ctx context.Context, call *nearCall, deadline time.Time) ([]nearNode, string) {
	t := time.NewTimer(deadline.Sub(p.now()))
	defer t.Stop()
	select {
	case <-call.done:
		return call.e.ranked, call.e.source()
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, nearPending
}

// start returns the mapping in flight for pre, starting one unless limit
// mappings are in flight (nil). Like the classifier's probes, a mapping
// runs detached from the query that started it.
func (p *proximity) start(pre netip.Prefix, target netip.Addr) *nearCall {
	p.mu.Lock()
	if call, ok := p.inflight[pre]; ok {
		p.mu.Unlock()
		return call
	}
	if len(p.inflight) >= p.limit {
		p.mu.Unlock()
		return nil
	}
	call := &nearCall{done: make(chan struct{})}
	p.inflight[pre] = call
	p.mu.Unlock()
	p.wg.Go(func() {
		ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
		begin := p.now()
		e := p.mapTarget(ctx, target)
		cancel()
		if p.mapped != nil {
			p.mapped(e.source(), p.now().Sub(begin))
		}
		p.mu.Lock()
		if p.ctx.Err() == nil {
			if _, exists := p.entries[pre]; !exists && len(p.entries) >= p.max {
				p.evictOldestLocked()
			}
			p.entries[pre] = e
		}
		delete(p.inflight, pre)
		p.mu.Unlock()
		call.e = e
		close(call.done)
	})
	return call
}

// evictOldestLocked drops the oldest of a sample of mappings.
func (p *proximity) evictOldestLocked() {
	var oldest netip.Prefix
	var at time.Time
	n := 0
	for pre, e := range p.entries {
		if n == 0 || e.measured.Before(at) {
			oldest, at = pre, e.measured
		}
		if n++; n == 32 {
			break
		}
	}
	delete(p.entries, oldest)
}

// hintKeyWeight is a hint key to look up and how near the target a node
// found under it is.
type hintKeyWeight struct {
	p      netip.Prefix
	weight int
	hop    int // 0: the target's /24; k: the k-th router out from the target
}

// hintKeys lists the keys for a target whose last hops are hops (nearest
// the target last): the target's own /24 first and heaviest, then each hop
// from the target outward, its own address above its /24. Private hops
// mean nothing about a public target's location and are left out; the
// hops kept are numbered from the target outward.
func hintKeys(target netip.Addr, hops []netip.Addr) []hintKeyWeight {
	target = target.Unmap()
	w := 2*len(hops) + 2
	keys := []hintKeyWeight{{coraldht.SitePrefix(target), w, 0}}
	hop := 0 // among the hops kept: the nearest the target is 1
	for i := len(hops) - 1; i >= 0; i-- {
		a := hops[i].Unmap()
		if !a.IsValid() || (privateAddr(a) && !privateAddr(target)) {
			continue
		}
		w = 2*i + 1
		hop++
		keys = append(keys, hintKeyWeight{netip.PrefixFrom(a, a.BitLen()), w + 1, hop}, hintKeyWeight{coraldht.SitePrefix(a), w, hop})
	}
	return keys
}

func privateAddr(a netip.Addr) bool {
	return a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified()
}

// mapTarget traces toward target and looks its hint keys up, all at once.
// A node's score is its heaviest hint times 64 plus the number of keys it
// was found under: nearness first, then the weight of evidence.
func (p *proximity) mapTarget(ctx context.Context, target netip.Addr) nearEntry {
	hops, err := p.trace(ctx, target)
	if err != nil && len(hops) == 0 && !errors.Is(err, context.DeadlineExceeded) {
		// Even a trace that heard nobody leaves the target's own /24 to
		// look up; an error that is not a timeout is a failure.
		return nearEntry{measured: p.now()}
	}
	keys := hintKeys(target, hops)
	type found struct {
		weight, hop int
		addrs       []netip.AddrPort
	}
	results := make([]found, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			addrs, _ := p.hints(ctx, k.p)
			results[i] = found{k.weight, k.hop, addrs}
		})
	}
	wg.Wait()
	best := make(map[netip.Addr]int)
	hop := make(map[netip.Addr]int)
	count := make(map[netip.Addr]int)
	dht := make(map[netip.Addr]netip.AddrPort)
	for _, r := range results {
		for _, ap := range r.addrs {
			a := ap.Addr().Unmap()
			if r.weight > best[a] {
				best[a], hop[a], dht[a] = r.weight, r.hop, netip.AddrPortFrom(a, ap.Port())
			}
			count[a]++
		}
	}
	ranked := make([]nearNode, 0, len(best))
	for a, w := range best {
		ranked = append(ranked, nearNode{addr: a, dht: dht[a], score: w*64 + count[a], hop: hop[a]})
	}
	slices.SortFunc(ranked, func(x, y nearNode) int {
		if x.score != y.score {
			return y.score - x.score
		}
		return x.addr.Compare(y.addr)
	})
	if len(ranked) > maxRanked {
		ranked = ranked[:maxRanked]
	}
	return nearEntry{ranked: ranked, ok: true, measured: p.now()}
}

// strongHint says whether n's hint is strong evidence that n is near the
// target: it was found under the target's own /24 or the router nearest
// the target. Routers farther out (a regional or national router, where
// many networks' paths meet) are weak: they place n in the same region,
// which may be large. Only strong hints make an NS set of their own
// (pickOptions.nearOnly), and a weak hint ranks below a member measured
// nearer (appendHinted).
func strongHint(n nearNode) bool { return n.hop <= 1 }

// rankedNode is a's entry in ranked; ok is false when a left no hint near
// the target.
func rankedNode(ranked []nearNode, a netip.Addr) (n nearNode, ok bool) {
	for _, n := range ranked {
		if n.addr == a {
			return n, true
		}
	}
	return nearNode{}, false
}

// nodeTracer is the production tracer: the last hops of a real trace.
func nodeTracer(hops int, timeout time.Duration) hopTracer {
	return func(ctx context.Context, target netip.Addr) ([]netip.Addr, error) {
		return icmpprobe.TraceLastHops(ctx, target, hops, timeout)
	}
}

// nodeHints looks hints up through the node.
func nodeHints(n interface {
	HintedNodes(context.Context, netip.Prefix) ([]netip.AddrPort, error)
}) hintFinder {
	return n.HintedNodes
}

// startNear looks the target's mapping up, starting one if needed.
func (b *builder) startNear() {
	if b.nearState != 0 || b.c.prox == nil {
		return
	}
	b.nearState = 1
	b.near, b.nearCall, b.nearSrc = b.c.prox.lookup(b.target)
	if b.nearCall != nil {
		b.nearUntil = b.c.prox.now().Add(b.c.prox.budget)
	}
}

// nearAddr is the address whose /24 choices prefer.
func (b *builder) nearAddr() netip.Addr {
	if b.c.noTarget {
		return netip.Addr{}
	}
	return b.target
}

// nearby returns the nodes ranked near the target, waiting for a new
// mapping until the first-query budget is spent.
func (b *builder) nearby() []nearNode {
	if b.c.prox == nil {
		return nil
	}
	b.startNear()
	if b.nearState == 1 {
		if b.nearCall != nil {
			b.near, b.nearSrc = b.c.prox.await(b.ctx, b.nearCall, b.nearUntil)
		}
		b.nearState = 2
		countProximity(b.nearSrc)
		if len(b.near) > 0 {
			b.c.tracker.want(b.near)
		}
		if d, ok := b.ctx.Value(decisionKey{}).(*Decision); ok {
			d.Source = b.nearSrc
			d.Hop = make(map[netip.Addr]int, len(b.near))
			for _, n := range b.near {
				d.Hop[n.addr] = n.hop
			}
		}
	}
	return b.near
}
