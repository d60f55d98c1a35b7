package coraldht

import (
	"slices"
)

// Choosing a lookup's next hop (lookup.go): the candidate nearest the
// intermediate target, the reservation that keeps one RPC for it, and the
// pseudo-random spread over equally good hops that keeps hot keys from
// loading the same nodes.

// closestTo returns the usable candidate nearest t. Candidates sharing at
// least p = cpl(t, key) leading bits with the key form a prefix of sorted
// and are nearer t than any other; failing those, the nearest t are the
// first run of equal cpl after them.
func (ls *lookupState) closestTo(t ID) *candidate {
	p := CommonPrefixLen(t, ls.p.key)
	reserved := ls.reservedFor(t)
	if ls.spreads(t) {
		if c := ls.spreadHop(t, reserved); c != nil {
			return c
		}
	}
	var best *candidate
	i := 0
	for ; i < len(ls.sorted) && ls.sorted[i].cpl >= p; i++ {
		c := ls.sorted[i]
		if c == reserved {
			continue
		}
		if usable(c) && (best == nil || CompareDistance(t, c.ID, best.ID) < 0) {
			best = c
		}
	}
	if best != nil {
		return best
	}
	for ; i < len(ls.sorted); i++ {
		c := ls.sorted[i]
		if !usable(c) || c == reserved {
			continue
		}
		if best == nil {
			best = c
		} else if c.cpl != best.cpl {
			break
		} else if CompareDistance(t, c.ID, best.ID) < 0 {
			best = c
		}
	}
	if best == nil && reserved != nil && usable(reserved) {
		return reserved // no other way on
	}
	return best
}

// reservedFor returns the candidate a put's walk must not take as its hop
// toward the intermediate target t: the node nearest the key, while it has
// not been contacted and t is not yet the key itself. In the balanced ID
// tree behind the paper's load bound, the node nearest the key is nearest
// no other target, so only walks that got past a node one digit away
// (which throttles to β a minute) reach it. Real IDs are unevenly spread:
// when the key's nearest node sits alone in a sparse part of the space, it
// is also the nearest node to every target in the empty region around it,
// and walks from far away jumped straight to it on their first hop, each
// bringing its own β. Reserving it makes those walks stop one node short,
// at the nearest nodes around the key, whose leaks are what reaches it.
func (ls *lookupState) reservedFor(t ID) *candidate {
	if ls.p.kind != lookupPut || ls.n.cfg.PlainDHT || t == ls.p.key {
		return nil
	}
	for _, c := range ls.sorted {
		if c.state == candFailed {
			continue
		}
		if c.state == candNew || c.state == candSuspect {
			return c
		}
		return nil
	}
	return nil
}

// spreads reports whether the hop toward t is drawn among several good
// nodes rather than being the single nearest one: on a put's walk, until
// the target is the key itself.
func (ls *lookupState) spreads(t ID) bool {
	return ls.p.kind == lookupPut && !ls.n.cfg.PlainDHT && t != ls.p.key
}

// spreadHop picks the hop toward t among the usable candidates that
// share with the key the digits the walk has fixed so far (every one of
// them is progress: the hop the paper's rule would take is one of them),
// the BucketSize nearest t, by this walk's own pseudo-random order. Why:
// a putter that is loaded lets β of its puts a minute through, and with
// the nearest-node rule they all went to one node, the node nearest its
// first target in its own table: a node alone in a wide slice of the ID
// space, or listed in many tables, was that node for 15–20 putters (β
// times as many put RPCs a minute). Drawn among the bucket instead, each
// putter spreads its leak over the k nodes it knows there, and a node
// sharing d bits with the key gets about β from the putters of each of
// those d levels: β·d, which is the paper's bound at the nearest nodes.
// If one of those candidates has already answered, the walk moves on.
func (ls *lookupState) spreadHop(t ID, reserved *candidate) *candidate {
	var near []*candidate
	for i := 0; i < len(ls.sorted) && ls.sorted[i].cpl >= ls.fixed; i++ {
		if c := ls.sorted[i]; c != reserved && c.state != candFailed {
			near = append(near, c)
		}
	}
	if len(near) == 0 {
		return nil
	}
	slices.SortFunc(near, func(a, b *candidate) int { return CompareDistance(t, a.ID, b.ID) })
	near = near[:min(len(near), ls.n.cfg.BucketSize)]
	for _, c := range near {
		if c.state == candAnswered {
			return c
		}
	}
	var best *candidate
	var bestRank uint64
	for _, c := range near {
		if r := mix64(ls.salt ^ low64(c.ID)); best == nil || r < bestRank {
			best, bestRank = c, r
		}
	}
	if !usable(best) {
		// Drawn but slow or suspect: take the nearest usable one instead,
		// as the nearest-node rule would.
		for _, c := range near {
			if usable(c) {
				return c
			}
		}
		return nil
	}
	return best
}

// fixedAfter is how many leading bits of the key an intermediate target
// holds once the digit after the first p matching bits is fixed.
func fixedAfter(p, b int) int {
	return min((p/b+1)*b, IDBits)
}

// mix64 is SplitMix64's finalizer: a cheap, well-mixed hash of x.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
