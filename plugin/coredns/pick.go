package coral

import (
	"net/netip"
	"slices"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// Picking the members of an answer or an NS set from the latest sweep
// (live.go): liveness, the client's prefix, locality hints, rotation.

// pickOptions says what to pick.
type pickOptions struct {
	level    int
	count    int
	near     netip.Addr // the resolver: members in its /24 (/48) come first
	services coraldht.Services
	family   int // 4 or 6: only addresses of that family; 0 any
	// nearOnly: when at least minNear members are in the resolver's prefix
	// or left strong hints near it, return only those. Name server sets use it:
	// servers that share the resolver's network are better than any other,
	// this server included.
	nearOnly bool
	// ranked are the nodes that left hints near the client (proximity.go),
	// best first. Members with strong hints come first, by score and then
	// by RTT from this server, then those in the resolver's prefix, then
	// those with weak hints (see appendHinted), then the rest.
	ranked []nearNode
	// now is when liveness is judged; zero: the tracker's clock, read
	// by the pick.
	now time.Time
	// maxLoad, when not 0, leaves out the members whose published load
	// (percent) is at least maxLoad (load.go).
	maxLoad int
	// rtt is this server's measured RTT to the target (0: not measured),
	// or else beyond, how long a probe of it went unanswered (the RTT is
	// at least that); nearWithin is the tightest level's threshold. With
	// them, members that the triangle inequality puts farther than
	// nearWithin from the target come after all others, and an NS set
	// names them only to make up minNear servers (provenFar).
	rtt, beyond, nearWithin time.Duration
}

// farBound is the least RTT between the target and ni that the triangle
// inequality proves from this server's RTTs to both: |rtt − RTT(ni)|, or
// beyond − RTT(ni) when only a lower bound of rtt is known; 0 when
// nothing is proven. For this server itself it is its RTT to the target.
func (o *pickOptions) farBound(ni *coraldht.NodeInfo) time.Duration {
	if o.rtt <= 0 && o.beyond <= 0 || !ni.Self && ni.RTT <= 0 {
		return 0
	}
	if o.rtt <= 0 {
		return max(o.beyond-measuredRTT(ni), 0)
	}
	d := o.rtt - measuredRTT(ni)
	if d < 0 {
		return -d
	}
	return d
}

// provenFar says whether ni is farther from the target than the tightest
// level's threshold, as far as this server's own measurements prove.
//
// Why it matters: a server far from a resolver that has one member near
// it (its strong hint, or its /24) fills the rest of the set by weak hints
// and RTT from itself, and weak hints, under a router where a region's
// paths meet or behind a silent one, tie for the near and the far members
// alike: the set would name this server and its own neighbours beside the
// one near the resolver. Resolvers spread their queries over a set's
// servers that answer within a few hundred milliseconds (Unbound: 400 ms),
// so each far server in the set gets its share of them, places the
// resolver at a lower level and keeps it from locking onto its own
// cluster.
func (o *pickOptions) provenFar(ni *coraldht.NodeInfo) bool {
	return o.nearWithin > 0 && o.farBound(ni) > o.nearWithin
}

// minNear is how many servers in the resolver's prefix make an NS set on
// their own: two, so the resolver always has a second server to try.
const minNear = 2

// pick returns up to count members of the level's cluster from the latest
// sweep that were heard from within liveWithin: those in the resolver's
// prefix first, then the rest from a random starting point so that load
// spreads over the cluster, and those proven far from the target last. Non-recursive proxies are only for resolvers in
// their own prefix.
//
// The members are appended to buf, as pointers into the sweep's lists:
// the lists are never changed once swept, and a caller with room in buf
// (an answer's pick fits an array on its stack) allocates nothing.
func (t *tracker) pick(o pickOptions, buf []*coraldht.NodeInfo) []*coraldht.NodeInfo {
	set := t.snap.Load()
	list := set.proxy
	if o.services.Has(coraldht.ServiceDNS) {
		list = set.dns
	}
	if o.level < 0 || o.level >= len(list) {
		return buf
	}
	return t.choose(list[o.level], o, buf)
}

// choose returns the members pick returns, in out's array while it has
// room.
func (t *tracker) choose(members []coraldht.NodeInfo, o pickOptions, out []*coraldht.NodeInfo) []*coraldht.NodeInfo {
	out = out[:0]
	now := o.now
	if now.IsZero() {
		now = t.now()
	}
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
		return o.maxLoad == 0 || !loaded(ni, o.maxLoad)
	}
	taken := func(ni *coraldht.NodeInfo) bool { return containsAddr(out, ni.Addr.Addr()) }
	// Strong evidence first: strong hints near the client, then members in
	// the resolver's prefix.
	out = appendHinted(out, members, o, usable, true)
	if o.near.IsValid() {
		for i := range members {
			if len(out) == o.count {
				return out
			}
			if usable(&members[i]) && nearP.Contains(members[i].Addr.Addr().Unmap()) && !taken(&members[i]) {
				out = append(out, &members[i])
			}
		}
	}
	if len(out) == o.count || o.nearOnly && len(out) >= minNear {
		return out
	}
	// Then weak hints, below members measured nearer, and the rest, of
	// the members not proven far from the target.
	notFar := func(ni *coraldht.NodeInfo) bool { return usable(ni) && !o.provenFar(ni) }
	out = appendHinted(out, members, o, notFar, false)
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
		if !notFar(ni) || taken(ni) {
			continue
		}
		out = append(out, ni)
	}
	// Last, the members proven far, least bound first: in an answer to
	// fill it, in an NS set only to make up minNear servers.
	want := o.count
	if o.nearOnly {
		want = min(o.count, minNear)
	}
	if len(out) < want {
		var far []int
		for i := range members {
			if usable(&members[i]) && o.provenFar(&members[i]) && !taken(&members[i]) {
				far = append(far, i)
			}
		}
		slices.SortStableFunc(far, func(x, y int) int { return int(o.farBound(&members[x]) - o.farBound(&members[y])) })
		for _, i := range far[:min(len(far), want-len(out))] {
			out = append(out, &members[i])
		}
	}
	return out
}

// measuredRTT is this server's RTT to a member (itself: zero), or an hour
// when it has not measured one.
func measuredRTT(ni *coraldht.NodeInfo) time.Duration {
	if ni.Self {
		return 0
	}
	if ni.RTT == 0 {
		return time.Hour
	}
	return ni.RTT
}

// appendHinted appends up to o.count usable members that left hints near
// the client, strong ones (strongHint) or weak ones, best score first, then
// lowest RTT from this server.
//
// A weak hint says only that a member is in the client's region. At level
// 1 and above the resolver is within the level's threshold of this server,
// so this server's RTT to a member bounds how far the member is from the
// resolver: there an unhinted member measured nearer than a weakly hinted
// one comes before it. At level 0 the RTT from this server says nothing
// about the client, and weak hints rank as they are.
func appendHinted(out []*coraldht.NodeInfo, members []coraldht.NodeInfo, o pickOptions, usable func(*coraldht.NodeInfo) bool, strong bool) []*coraldht.NodeInfo {
	if len(o.ranked) == 0 {
		return out
	}
	type scored struct {
		i, score int
	}
	var hits []scored
	for i := range members {
		n, ok := rankedNode(o.ranked, members[i].Addr.Addr().Unmap())
		if ok && strongHint(n) == strong && usable(&members[i]) && !containsAddr(out, members[i].Addr.Addr()) {
			hits = append(hits, scored{i, n.score})
		}
	}
	slices.SortStableFunc(hits, func(x, y scored) int {
		if x.score != y.score {
			return y.score - x.score
		}
		return int(measuredRTT(&members[x.i]) - measuredRTT(&members[y.i]))
	})
	for _, h := range hits {
		if len(out) >= o.count {
			break
		}
		w := &members[h.i]
		if !strong && o.level > 0 {
			out = appendNearer(out, members, o, usable, measuredRTT(w))
		}
		if len(out) < o.count && !containsAddr(out, w.Addr.Addr()) {
			out = append(out, w)
		}
	}
	return out
}

// appendNearer appends, nearest first, the usable members that left no
// hint near the client and that this server measured nearer than rtt.
func appendNearer(out []*coraldht.NodeInfo, members []coraldht.NodeInfo, o pickOptions, usable func(*coraldht.NodeInfo) bool, rtt time.Duration) []*coraldht.NodeInfo {
	var nearer []int
	for i := range members {
		ni := &members[i]
		if _, hinted := rankedNode(o.ranked, ni.Addr.Addr().Unmap()); !hinted && measuredRTT(ni) < rtt &&
			usable(ni) && !containsAddr(out, ni.Addr.Addr()) {
			nearer = append(nearer, i)
		}
	}
	slices.SortStableFunc(nearer, func(x, y int) int { return int(measuredRTT(&members[x]) - measuredRTT(&members[y])) })
	for _, i := range nearer[:min(len(nearer), o.count-len(out))] {
		out = append(out, &members[i])
	}
	return out
}

// containsAddr reports whether one of nodes has address a.
func containsAddr(nodes []*coraldht.NodeInfo, a netip.Addr) bool {
	a = a.Unmap()
	for _, ni := range nodes {
		if ni.Addr.Addr().Unmap() == a {
			return true
		}
	}
	return false
}

// listsAddr is containsAddr for a sweep's list.
func listsAddr(nodes []coraldht.NodeInfo, a netip.Addr) bool {
	a = a.Unmap()
	for i := range nodes {
		if nodes[i].Addr.Addr().Unmap() == a {
			return true
		}
	}
	return false
}

func containsSelf(nodes []*coraldht.NodeInfo) bool {
	for _, ni := range nodes {
		if ni.Self {
			return true
		}
	}
	return false
}
