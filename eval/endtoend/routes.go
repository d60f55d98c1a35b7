package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// The router-level model: what a traceroute sees between two placed
// addresses. Nothing in it knows where the nodes published their hints:
// a node's hints come from its own trace toward its bootstrap node
// (startupHints), and a name server's view of a client from its own trace
// toward the client (tracer), through the same routers, some of them
// silent, with ICMP rate limits and the client's echo answered or not.
//
// Every /24 of hosts (the nodes' network at a site, a client network, an
// origin's) hangs off a gateway router, its .254, which hangs off the
// aggregation router of one access ISP's point of presence at the site
// (ISPs per site: routeParams.ISPs; the network's ISP is drawn from its
// prefix). A PoP has an aggregation router and two border routers in a
// /24 of the ISP's. Traffic leaving a PoP crosses one of two core routers
// of the site's region (an exchange); traffic between regions crosses one
// to five transit routers between the two regions' continents, more the
// longer the path. Which of two border routers, core routers or transit
// planes a path takes depends on its far end, so a path out of a site and
// a path into it share the gateway and the aggregation router but not
// always what lies beyond, as on the Internet.
//
// Addresses: gateway of network a.b.c.0/24: a.b.c.254. PoP of ISP i at
// site s = 256·hi + lo: 12.(hi+64·i).lo.{1 aggregation, 2–3 border}.
// Core routers of region r: 13.⌊r/256⌋.(r mod 256).{1,2}. Transit router j
// of a path between continents c1 ≤ c2 in plane p: 15.(16·c1+c2).(16·p+j).1.

// routeParams are the model's rates.
type routeParams struct {
	// ISPs is the number of access ISPs per site; a network's is drawn
	// from its /24, so a client network shares the nodes' ISP (and so
	// their aggregation router) with probability 1/ISPs.
	ISPs int
	// Silent is the share of routers that never answer a probe whose TTL
	// expires at them (drawn per router address, so the same routers are
	// silent in every trace).
	Silent float64
	// ClientEcho is the share of client-side hosts (clients and their
	// resolvers in a /24 of their own) that answer ICMP echo; hosts beside
	// a proxy, on its host, always answer.
	ClientEcho float64
	// ICMPBurst and ICMPPerSecond are a router's token bucket for ICMP
	// errors toward one source; ICMPGlobalBurst and ICMPGlobalPerSecond
	// its bucket for all sources together (Linux's defaults:
	// icmp_ratelimit of 1 s with a burst of 6 per peer, icmp_msgs_per_sec
	// 1000 and icmp_msgs_burst 50).
	ICMPBurst, ICMPPerSecond             float64
	ICMPGlobalBurst, ICMPGlobalPerSecond float64
	// TraceTimeout bounds one trace, as the plugin's half of its mapping
	// timeout does (proximity's default timeout is 1 s).
	TraceTimeout time.Duration
	// HintHops is how far out a node's start-up trace looks (coraldht's
	// Config.HintHops default).
	HintHops int
	// LastHops is how many routers nearest the client a name server's
	// trace keeps (the plugin's proximity hops default).
	LastHops int
}

func defaultRouteParams() routeParams {
	return routeParams{ISPs: 3, Silent: 0.1, ClientEcho: 0.5,
		ICMPBurst: 6, ICMPPerSecond: 1, ICMPGlobalBurst: 50, ICMPGlobalPerSecond: 1000,
		TraceTimeout: 500 * time.Millisecond, HintHops: 5, LastHops: 5}
}

// router kinds, for the report's breakdown of what a trace heard.
const (
	kindGateway = "gateway"
	kindAgg     = "aggregation"
	kindBorder  = "border"
	kindCore    = "region core"
	kindTransit = "transit"
)

// hop is a router on a path and the RTT from the path's source to it.
type hop struct {
	addr netip.Addr
	kind string
	rtt  time.Duration
}

// Positions of a site's routers, as RTT from a host at the site (and as
// RTT before the far end, on the far side).
var localRTT = map[string]time.Duration{
	kindGateway: 300 * time.Microsecond,
	kindAgg:     600 * time.Microsecond,
	kindBorder:  time.Millisecond,
	kindCore:    1500 * time.Microsecond,
}

// draw is a deterministic number in [0, 1) for (what, a, b) under the
// world's seed: the same seed gives the same silent routers, ISPs and slow
// paths in every run.
func (w *world) draw(what string, a, b netip.Addr) float64 {
	h := fnv.New64a()
	h.Write(binary.LittleEndian.AppendUint64(nil, w.seed))
	h.Write([]byte(what))
	h.Write(a.AsSlice())
	h.Write(b.AsSlice())
	x := h.Sum64()
	// SplitMix64's finaliser spreads FNV's low-entropy high bits.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// network is the /24 of a host.
func network(a netip.Addr) netip.Prefix { p, _ := a.Unmap().Prefix(24); return p }

func gatewayOf(a netip.Addr) netip.Addr {
	b := a.Unmap().As4()
	b[3] = 254
	return netip.AddrFrom4(b)
}

// ispOf is the access ISP of a's network.
func (w *world) ispOf(a netip.Addr) int {
	n := network(a).Addr()
	return min(int(w.draw("isp", n, n)*float64(w.rp.ISPs)), w.rp.ISPs-1)
}

func popRouter(site, isp int, host byte) netip.Addr {
	return netip.AddrFrom4([4]byte{12, byte(site>>8) + byte(64*isp), byte(site), host})
}

func (w *world) coreRouter(site, which int) netip.Addr {
	r := w.region[site]
	return netip.AddrFrom4([4]byte{13, byte(r >> 8), byte(r), byte(1 + which)})
}

// continentOf indexes the site's continent.
func (w *world) continentOf(site int) int { return w.continent[site] }

func transitRouter(c1, c2, plane, j int) netip.Addr {
	return netip.AddrFrom4([4]byte{15, byte(16*c1 + c2), byte(16*plane + j), 1})
}

// path is the routers from a to b, in order, with their RTT from a.
func (w *world) path(a, b netip.Addr) []hop {
	a, b = a.Unmap(), b.Unmap()
	if network(a) == network(b) {
		return nil // one LAN
	}
	sa, sb := w.site[a], w.site[b]
	ia, ib := w.ispOf(a), w.ispOf(b)
	var near, far []hop // routers on a's side, and on b's side from b outward
	near = append(near, hop{addr: gatewayOf(a), kind: kindGateway}, hop{addr: popRouter(sa, ia, 1), kind: kindAgg})
	far = append(far, hop{addr: gatewayOf(b), kind: kindGateway}, hop{addr: popRouter(sb, ib, 1), kind: kindAgg})
	var middle []hop
	if sa != sb || ia != ib {
		// Leave a's PoP by a border router chosen by the far end, and
		// enter b's by one chosen by the near end.
		near = append(near, hop{addr: popRouter(sa, ia, byte(2+w.pick("border", a, network(b).Addr()))), kind: kindBorder})
		far = append(far, hop{addr: popRouter(sb, ib, byte(2+w.pick("border", b, network(a).Addr()))), kind: kindBorder})
		ra, rb := w.region[sa], w.region[sb]
		if ra == rb {
			middle = append(middle, hop{addr: w.coreRouter(sa, w.pick("core", network(a).Addr(), network(b).Addr())), kind: kindCore})
		} else {
			near = append(near, hop{addr: w.coreRouter(sa, w.pick("core", a, network(b).Addr())), kind: kindCore})
			far = append(far, hop{addr: w.coreRouter(sb, w.pick("core", b, network(a).Addr())), kind: kindCore})
			middle = w.transit(sa, sb)
		}
	}
	out := slices.Concat(near, middle)
	for i := len(far) - 1; i >= 0; i-- {
		out = append(out, far[i])
	}
	w.position(out, len(near), len(middle), w.rtt(a, b))
	return out
}

// pick is a deterministic choice of 0 or 1 for (what, a, b).
func (w *world) pick(what string, a, b netip.Addr) int {
	if w.draw(what, a, b) < 0.5 {
		return 0
	}
	return 1
}

// transit is the routers between the regions of sites sa and sb: one per
// 30 ms of RTT, one to five, in one of two planes chosen by the pair of
// regions; a path and its reverse cross the same routers.
func (w *world) transit(sa, sb int) []hop {
	k := min(max(int(math.Round(float64(w.m.RTT(sa, sb))/float64(30*time.Millisecond))), 1), 5)
	ca, cb := w.continentOf(sa), w.continentOf(sb)
	ra, rb := w.region[sa], w.region[sb]
	lo, hi := min(ra, rb), max(ra, rb)
	plane := w.pick("plane", netip.AddrFrom4([4]byte{0, 0, byte(lo >> 8), byte(lo)}), netip.AddrFrom4([4]byte{0, 0, byte(hi >> 8), byte(hi)}))
	out := make([]hop, k)
	for j := range k {
		idx := j + 1
		if ca > cb || (ca == cb && ra > rb) {
			idx = k - j // the reverse path crosses them the other way
		}
		out[j] = hop{addr: transitRouter(min(ca, cb), max(ca, cb), plane, idx), kind: kindTransit}
	}
	return out
}

// position sets each hop's RTT from the source: the near side's routers a
// fixed distance from the source, the far side's the same distance before
// the destination, transit routers evenly between; never decreasing and
// never beyond the whole path's RTT.
func (w *world) position(hops []hop, nNear, nMiddle int, total time.Duration) {
	for i := range hops {
		var d time.Duration
		switch {
		case i < nNear:
			d = localRTT[hops[i].kind]
		case i < nNear+nMiddle && hops[i].kind == kindTransit:
			lo, hi := localRTT[kindCore], total-localRTT[kindCore]
			d = lo + (hi-lo)*time.Duration(i-nNear+1)/time.Duration(nMiddle+1)
		case i < nNear+nMiddle:
			d = total / 2 // a core router shared by both ends
		default:
			d = total - localRTT[hops[i].kind]
		}
		if i > 0 {
			d = max(d, hops[i-1].rtt)
		}
		hops[i].rtt = min(max(d, 0), total)
	}
}

// silent reports whether router r never answers.
func (w *world) silent(r netip.Addr) bool { return w.draw("silent", r, r) < w.rp.Silent }

// slowPath is the time router r takes to make an ICMP error: the slow
// path of its control plane, 0.1–2 ms.
func (w *world) slowPath(r netip.Addr) time.Duration {
	return 100*time.Microsecond + time.Duration(w.draw("slow", r, r)*float64(1900*time.Microsecond))
}

// answersEcho reports whether host a answers ICMP echo.
func (w *world) answersEcho(a netip.Addr) bool {
	a = a.Unmap()
	if w.besideNode(a) {
		return true
	}
	return w.draw("echo", a, a) < w.rp.ClientEcho
}

// besideNode reports whether a is a client or resolver on a node's host
// (in a node's /24).
func (w *world) besideNode(a netip.Addr) bool { return a.As4()[0] == 10 }

// bucket is a token bucket of ICMP errors.
type bucket struct {
	tokens float64
	at     time.Time
}

// take takes a token at now if there is one.
func (b *bucket) take(now time.Time, burst, rate float64) bool {
	switch {
	case b.at.IsZero():
		b.tokens = burst
		b.at = now
	case now.After(b.at):
		b.tokens = min(burst, b.tokens+now.Sub(b.at).Seconds()*rate)
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// icmpAllowed spends router r's tokens for an error toward src.
func (w *world) icmpAllowed(r, src netip.Addr, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.global[r]
	if g == nil {
		g = &bucket{}
		w.global[r] = g
	}
	k := [2]netip.Addr{r, src}
	p := w.perPeer[k]
	if p == nil {
		p = &bucket{}
		w.perPeer[k] = p
	}
	// A router checks its per-peer limit first and spends the global
	// budget only on errors it sends.
	if !p.take(now, w.rp.ICMPBurst, w.rp.ICMPPerSecond) {
		return false
	}
	return g.take(now, w.rp.ICMPGlobalBurst, w.rp.ICMPGlobalPerSecond)
}

// traceResult is one trace as icmpprobe's burst would see it.
type traceResult struct {
	routers []netip.Addr // distinct routers heard, in hop order
	kinds   []string     // their kinds
	took    time.Duration
	// complete is true when every hop short of the destination answered
	// and the destination answered echo, so the trace ended before its
	// timeout.
	complete      bool
	silent, limit int  // routers that did not answer: silent ones, rate-limited ones
	noEcho        bool // the destination did not answer echo
}

// trace is icmpprobe's burst from src toward dst with TTLs 1..maxHops,
// all sent at now: router h answers (unless silent or out of tokens) after
// its RTT plus its slow path, dst answers echo after the path's RTT, and
// the trace ends when every hop short of dst has answered, or at the
// timeout. (A burst limited to maxHops short of dst, as the start-up
// trace's, ends when those have answered.)
func (w *world) trace(src, dst netip.Addr, maxHops int, now time.Time) traceResult {
	hops := w.path(src, dst)
	var r traceResult
	var last time.Duration
	complete := true
	for i, h := range hops {
		if i >= maxHops {
			break
		}
		switch {
		case w.silent(h.addr):
			r.silent++
			complete = false
			continue
		case !w.icmpAllowed(h.addr, src, now):
			r.limit++
			complete = false
			continue
		}
		last = max(last, h.rtt+w.slowPath(h.addr))
		if !slices.Contains(r.routers, h.addr) {
			r.routers = append(r.routers, h.addr)
			r.kinds = append(r.kinds, h.kind)
		}
	}
	if maxHops > len(hops) {
		// Probes past the routers reach dst: it answers echo, ending the
		// trace, or the trace waits for hops that will never answer.
		if w.answersEcho(dst) {
			last = max(last, w.rtt(src, dst))
		} else {
			r.noEcho = true
			complete = false
		}
	}
	r.complete = complete
	r.took = w.rp.TraceTimeout
	if complete {
		r.took = min(last, w.rp.TraceTimeout)
	}
	return r
}

// traceOutcome names a trace's outcome for the report.
func (r traceResult) outcome() string {
	switch {
	case r.complete:
		return "complete"
	case r.noEcho && r.silent+r.limit == 0:
		return "timed out: no echo"
	case r.limit > 0 && r.silent == 0:
		return "timed out: rate-limited"
	}
	return "timed out: silent router"
}

// tracer is a name server's trace toward a client (icmpprobe.TraceLastHops
// in the model): the burst from the server, the last LastHops routers
// heard, nearest the client last, after the trace's time.
func (w *world) tracer(from netip.Addr) func(ctx context.Context, a netip.Addr) ([]netip.Addr, error) {
	return func(ctx context.Context, a netip.Addr) ([]netip.Addr, error) {
		a = a.Unmap()
		if _, ok := w.site[a]; !ok {
			return nil, nil
		}
		r := w.trace(from, a, 32, time.Now())
		w.noteTrace(from, a, r)
		if !sleepCtx(ctx, r.took) {
			return nil, ctx.Err()
		}
		rs := r.routers
		return rs[max(0, len(rs)-w.rp.LastHops):], nil
	}
}

// noteTrace keeps a trace's outcome per server and target /24, for the
// breakdown of the answers that followed it.
func (w *world) noteTrace(from, target netip.Addr, r traceResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.traces[traceKey{from, network(target)}] = r
	w.traceCount[r.outcome()]++
}

type traceKey struct {
	server netip.Addr
	target netip.Prefix
}

// lastTrace is server's last trace toward target's /24.
func (w *world) lastTrace(server, target netip.Addr) (traceResult, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.traces[traceKey{server, network(target)}]
	return r, ok
}

// startupHints are the hint prefixes a node at addr publishes after its
// start-up trace toward its bootstrap node (coraldht's publishHints): the
// routers heard within HintHops, each as itself and as its /24. Its own
// /24 the node adds itself.
func (w *world) startupHints(addr, bootstrap netip.Addr, now time.Time) ([]netip.Prefix, traceResult) {
	r := w.trace(addr, bootstrap, w.rp.HintHops, now)
	var out []netip.Prefix
	for _, a := range r.routers {
		for _, p := range []netip.Prefix{netip.PrefixFrom(a, 32), network(a)} {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out, r
}

// routerState is the world's mutable part: rate-limit buckets and the
// traces' outcomes.
type routerState struct {
	mu         sync.Mutex
	global     map[netip.Addr]*bucket
	perPeer    map[[2]netip.Addr]*bucket
	traces     map[traceKey]traceResult
	traceCount map[string]int
}

// validate names the first bad rate.
func (rp routeParams) validate() error {
	switch {
	case rp.ISPs < 1 || rp.ISPs > 4:
		return fmt.Errorf("-isps %d: want 1..4 (the address plan has room for four)", rp.ISPs)
	case rp.Silent < 0 || rp.Silent > 1:
		return fmt.Errorf("-silent %g: want a share, 0..1", rp.Silent)
	case rp.ClientEcho < 0 || rp.ClientEcho > 1:
		return fmt.Errorf("-echo %g: want a share, 0..1", rp.ClientEcho)
	}
	return nil
}
