package coral

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
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

// hopTracer traces toward target: the routers on the last hops, the one
// nearest target last, and the target's distance in hops when the trace
// learnt it. distance, when known (> 0: from an earlier trace of the
// prefix), lets the tracer probe only the hops that matter.
type hopTracer func(ctx context.Context, target netip.Addr, distance int) (traced, error)

// traced is what a trace found.
type traced struct {
	routers  []netip.Addr // nearest the target last
	distance int          // the hop limit that reached the target; 0: unknown
	sent     int          // echo requests sent (0: not counted)
}

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

// nearMapping is one mapping: the nodes ranked near the target, best
// first, never modified once stored, and the target's distance for the
// next trace.
type nearMapping struct {
	ranked   []nearNode
	distance int
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
	nearUnproven    = "unproven"      // the query's source has not shown it is there (proof.go)
	nearLimited     = "limited"       // the source's or the target's probe rate is spent
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
	gate    *probeGate    // who may start a mapping (proof.go)
	now     func() time.Time
	ctx     context.Context // ends at shutdown

	maps *measurements[nearMapping]
	wg   sync.WaitGroup
	// mapped, when set, observes each finished mapping (metrics): its
	// outcome, how long it took and how many echo requests it sent.
	mapped func(outcome string, d time.Duration, sent int)
}

func newProximity(ctx context.Context, trace hopTracer, hints hintFinder, o proximityConfig, gate *probeGate) *proximity {
	return &proximity{trace: trace, hints: hints, budget: o.wait, timeout: o.timeout, fresh: o.cache,
		failed: min(o.cache, time.Minute), limit: o.limit, gate: gate, now: time.Now, ctx: ctx,
		maps: newMeasurements[nearMapping](o.entries)}
}

// proximityConfig is the Corefile's proximity settings.
type proximityConfig struct {
	mode    string // on (default), subnet, off
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
// when there is none or it is old and the gate admits who. When the query
// should wait for a mapping it returns it as call; source is then
// nearPending until await says more.
func (p *proximity) lookup(target netip.Addr, who asker) (ranked []nearNode, call *measuring[nearMapping], source string) {
	if p.trace == nil {
		return nil, nil, nearUnavailable
	}
	pre := coraldht.SitePrefix(target)
	if e, ok := p.maps.get(pre); ok {
		if e.due(p.now(), p.fresh, p.failed) {
			p.start(pre, target, who, e.v.distance)
		}
		return e.v.ranked, nil, mappingSource(e)
	}
	call, v := p.start(pre, target, who, 0)
	switch v {
	case gateUnproven:
		return nil, nil, nearUnproven
	case gateLimited:
		return nil, nil, nearLimited
	case gateBusy:
		return nil, nil, nearSkipped
	}
	return nil, call, nearPending
}

// mappingSource is the proximity source of a finished mapping.
func mappingSource(m measured[nearMapping]) string {
	switch {
	case !m.ok:
		return nearFailed
	case len(m.v.ranked) == 0:
		return nearNoHints
	}
	return nearHints
}

// await waits for call until deadline or ctx ends.
func (p *proximity) await(ctx context.Context, call *measuring[nearMapping], deadline time.Time) ([]nearNode, string) {
	t := time.NewTimer(deadline.Sub(p.now()))
	defer t.Stop()
	select {
	case <-call.done:
		return call.m.v.ranked, mappingSource(call.m)
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, nearPending
}

// start returns the mapping in flight for pre, starting one when the gate
// admits who (nil and the verdict otherwise). Like the classifier's
// probes, a mapping runs detached from the query that started it.
func (p *proximity) start(pre netip.Prefix, target netip.Addr, who asker, distance int) (*measuring[nearMapping], gateVerdict) {
	admit := func(inflight int) gateVerdict { return p.gate.admit(who, target, inflight, p.limit) }
	return p.maps.start(pre, admit, &p.wg, func() measured[nearMapping] {
		ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
		begin := p.now()
		m, sent := p.mapTarget(ctx, target, distance)
		cancel()
		if p.mapped != nil {
			p.mapped(mappingSource(m), p.now().Sub(begin), sent)
		}
		return m
	}, func() bool { return p.ctx.Err() == nil })
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
// was found under: nearness first, then the weight of evidence. It also
// returns the echo requests the trace sent.
func (p *proximity) mapTarget(ctx context.Context, target netip.Addr, distance int) (measured[nearMapping], int) {
	tr, err := p.trace(ctx, target, distance)
	if err != nil && len(tr.routers) == 0 && !errors.Is(err, context.DeadlineExceeded) {
		// Even a trace that heard nobody leaves the target's own /24 to
		// look up; an error that is not a timeout is a failure.
		return measured[nearMapping]{at: p.now()}, tr.sent
	}
	keys := hintKeys(target, tr.routers)
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
	return measured[nearMapping]{v: nearMapping{ranked: ranked, distance: tr.distance}, ok: true, at: p.now()}, tr.sent
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
	b.near, b.nearCall, b.nearSrc = b.c.prox.lookup(b.target, b.who)
	if b.nearCall != nil {
		b.nearUntil = b.c.prox.now().Add(b.c.prox.budget)
	}
}

// nearAddr is the address whose /24 choices prefer: the target, unless
// proximity is off (the paper's nodes() without a target).
func (b *builder) nearAddr() netip.Addr {
	if b.c.cfg.prox.mode == proximityOff {
		return netip.Addr{}
	}
	return b.target
}

// measuredNear fills in o's rtt, beyond and nearWithin: this server's
// measured RTT to the target (or how long its probe went unanswered) and
// the tightest level's threshold, with which a pick puts
// the members proven far from the target last (pickOptions.provenFar).
// Only where proximity is on: subnet and off name members by prefix and
// rotation alone.
func (b *builder) measuredNear(o pickOptions) pickOptions {
	th := b.c.classifier.thresholds
	if b.c.cfg.prox.mode != proximityOn || len(th) == 0 {
		return o
	}
	b.level()
	o.rtt, o.beyond, o.nearWithin = b.cls.rtt, b.cls.beyond, slices.Min(th)
	return o
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
		if b.nearSrc == nearUnproven {
			b.needProof = true
		}
		b.place.countProximity(b.nearSrc)
		if len(b.near) > 0 {
			b.c.tracker.want(b.near)
		}
		b.info.setNear(b.nearSrc, b.near)
	}
	return b.near
}
