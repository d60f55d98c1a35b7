package coraldht

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// routingTable holds one cluster's Kademlia k-buckets. Bucket i holds
// contacts whose IDs share exactly i leading bits with ours. Within a bucket
// contacts are ordered least recently heard first; a full bucket takes a
// newcomer that ranks better for its owner than its worst entry (rank),
// keeps other newcomers in a replacement cache, and asks its oldest
// contact to prove it is alive before giving its slot away.
//
// Only contacts that have proven their address are heard (dispatch.go),
// and the table caps what one IP address and one /24 (/48) may hold
// (tableLimits), so one member cannot fill it however many addresses it
// claims or ports it listens on.
type routingTable struct {
	self         ID
	k            int
	maxFailures  int
	questionable time.Duration
	limits       tableLimits

	mu      sync.Mutex
	buckets [IDBits]bucket
	size    int
	perIP   map[netip.Addr]int
	perNet  map[netip.Prefix]int
}

// tableLimits are a table's defences against one member filling it.
type tableLimits struct {
	perIP, perNet int          // entries per table from one IP, one /24 (/48); 0: no cap
	own           netip.Prefix // this node's /24 (/48), exempt from perNet: its site-mates
	// rankKey is mixed into every rank, so that no one else can compute
	// which IDs a table prefers; nil: the public rank of before.
	rankKey *[32]byte
}

// bucketCap is the per-bucket share of a per-table cap: half, at least 1,
// at most half a bucket.
func bucketCap(table, k int) int { return max(1, min(table/2, k/2)) }

type bucket struct {
	entries      []*rtEntry // least recently heard first
	replacements []*rtEntry // most recently heard last
	touched      time.Time  // last lookup aimed into this bucket's range
}

type rtEntry struct {
	Contact
	rank      uint64 // rt.rank(ID), computed once
	lastHeard time.Time
	failures  int  // consecutive unanswered RPCs
	pinging   bool // a liveness ping is outstanding
}

func newRoutingTable(self ID, k, maxFailures int, questionable time.Duration, limits tableLimits, now time.Time) *routingTable {
	rt := &routingTable{self: self, k: k, maxFailures: maxFailures, questionable: questionable, limits: limits,
		perIP: make(map[netip.Addr]int), perNet: make(map[netip.Prefix]int)}
	for i := range rt.buckets {
		rt.buckets[i].touched = now
	}
	return rt
}

// fitsLocked reports whether c may join bucket b under the caps, in
// place of entry out (nil: in addition).
func (rt *routingTable) fitsLocked(b *bucket, c Contact, out *rtEntry) bool {
	ip, net := c.Addr.Addr(), SitePrefix(c.Addr.Addr())
	capNet := rt.limits.perNet > 0 && net != rt.limits.own
	if rt.limits.perIP == 0 && !capNet {
		return true
	}
	sameIP, sameNet := 0, 0
	if out != nil && out.Addr.Addr() == ip {
		sameIP--
	}
	if out != nil && SitePrefix(out.Addr.Addr()) == net {
		sameNet--
	}
	inIP, inNet := sameIP, sameNet
	for _, e := range b.entries {
		if e.Addr.Addr() == ip {
			inIP++
		}
		if SitePrefix(e.Addr.Addr()) == net {
			inNet++
		}
	}
	if rt.limits.perIP > 0 && (rt.perIP[ip]+sameIP >= rt.limits.perIP || inIP >= bucketCap(rt.limits.perIP, rt.k)) {
		return false
	}
	return !capNet || (rt.perNet[net]+sameNet < rt.limits.perNet && inNet < bucketCap(rt.limits.perNet, rt.k))
}

// addLocked puts e in b's entries, at position at (len: the end).
func (rt *routingTable) addLocked(b *bucket, e *rtEntry, at int) {
	b.entries = slices.Insert(b.entries, at, e)
	rt.size++
	rt.perIP[e.Addr.Addr()]++
	rt.perNet[SitePrefix(e.Addr.Addr())]++
}

// dropLocked removes b's entry i.
func (rt *routingTable) dropLocked(b *bucket, i int) *rtEntry {
	e := b.entries[i]
	b.entries = slices.Delete(b.entries, i, i+1)
	rt.size--
	ip, net := e.Addr.Addr(), SitePrefix(e.Addr.Addr())
	if rt.perIP[ip]--; rt.perIP[ip] <= 0 {
		delete(rt.perIP, ip)
	}
	if rt.perNet[net]--; rt.perNet[net] <= 0 {
		delete(rt.perNet, net)
	}
	return e
}

func (rt *routingTable) bucketFor(id ID) *bucket {
	i := CommonPrefixLen(rt.self, id)
	if i >= IDBits {
		return nil
	}
	return &rt.buckets[i]
}

func (e *rtEntry) bad(maxFailures int) bool { return e.failures >= maxFailures }

// heard records that c, whose address is proven, sent us an authentic
// message now. If c cannot be placed because its bucket is full and the
// bucket's oldest contact has been quiet for a while, heard returns that
// contact so the caller can ping it; the caller reports the outcome
// through failed or a later heard.
func (rt *routingTable) heard(c Contact, now time.Time) (ping *Contact) {
	ping, _ = rt.heardAs(c, now, true)
	return ping
}

// heardAs is heard; with byRank false a newcomer to a full bucket does
// not displace an entry by rank (only a bad one) and waits in the
// replacement cache, as in Kademlia. The node passes false for contacts
// heard in replies: those are the nodes its own walks contact, which
// are the nodes near the keys it works on, not a sample of the bucket's
// range (coraldht/README.md, "the busiest node"). refused reports a
// newcomer kept out by the caps.
func (rt *routingTable) heardAs(c Contact, now time.Time, byRank bool) (ping *Contact, refused bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	b := rt.bucketFor(c.ID)
	if b == nil {
		return nil, false
	}
	if i := indexOf(b.entries, c.ID); i >= 0 {
		e := b.entries[i]
		e.Contact, e.lastHeard, e.failures, e.pinging = c, now, 0, false
		copy(b.entries[i:], b.entries[i+1:])
		b.entries[len(b.entries)-1] = e
		return nil, false
	}
	if i := indexOf(b.replacements, c.ID); i >= 0 {
		b.replacements = slices.Delete(b.replacements, i, i+1)
	}
	e := &rtEntry{Contact: c, rank: rt.rank(c.ID), lastHeard: now}
	if len(b.entries) < rt.k {
		if !rt.fitsLocked(b, c, nil) {
			return nil, true
		}
		rt.addLocked(b, e, len(b.entries))
		return nil, false
	}
	for i, old := range b.entries {
		if old.bad(rt.maxFailures) && rt.fitsLocked(b, c, old) {
			rt.dropLocked(b, i)
			rt.addLocked(b, e, len(b.entries))
			return nil, false
		}
	}
	if worst := rt.worstRanked(b); byRank && e.rank < b.entries[worst].rank {
		if !rt.fitsLocked(b, c, b.entries[worst]) {
			return nil, true
		}
		old := rt.dropLocked(b, worst)
		rt.addLocked(b, e, len(b.entries))
		e = old
	}
	b.replacements = append(b.replacements, e)
	if len(b.replacements) > rt.k {
		b.replacements = b.replacements[1:]
	}
	if lru := b.entries[0]; !lru.pinging && now.Sub(lru.lastHeard) > rt.questionable {
		lru.pinging = true
		c := lru.Contact
		return &c, false
	}
	return nil, false
}

// admits reports whether c, not yet known to the table, would take a
// slot now (free, bad, or by rank when byRank) within the caps: whether
// proving its address is worth a ping. A known contact that has missed
// calls since it was last heard is worth one too: a node restarted at its
// address (a new process, without the cookie this node gave the old one)
// is heard again only through a proof, and a bad entry is never pinged
// otherwise (sweeps and lookups pass it over).
func (rt *routingTable) admits(c Contact, byRank bool) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	b := rt.bucketFor(c.ID)
	if b == nil {
		return false
	}
	if i := indexOf(b.entries, c.ID); i >= 0 {
		return b.entries[i].failures > 0
	}
	if len(b.entries) < rt.k {
		return rt.fitsLocked(b, c, nil)
	}
	for _, old := range b.entries {
		if old.bad(rt.maxFailures) && rt.fitsLocked(b, c, old) {
			return true
		}
	}
	worst := rt.worstRanked(b)
	return byRank && rt.rank(c.ID) < b.entries[worst].rank && rt.fitsLocked(b, c, b.entries[worst])
}

// rank orders the contacts a full bucket keeps: lower is kept. It is a
// pseudo-random function of the pair of IDs (their XOR's low-order bytes,
// which say nothing about distance), so every node's table is its own
// random sample of each bucket's range. Keeping the first contacts heard
// (Kademlia's rule) put the nodes that joined first in most tables, and a
// put's walk hops to a node in proportion to the tables listing it
// (coraldht/README.md, "the busiest node").
//
// The rank mixes in a secret of the table's own (tableLimits.rankKey):
// SHA-256 of the secret and the ID. Were it a public function of the two
// IDs, a member could pick addresses offline whose IDs rank first in a
// victim's table (the review of issue 35 did) and displace every honest
// entry.
func (rt *routingTable) rank(id ID) uint64 {
	if rt.limits.rankKey == nil {
		return mix64(low64(rt.self) ^ low64(id))
	}
	var in [32 + IDLen]byte
	copy(in[:32], rt.limits.rankKey[:])
	copy(in[32:], id[:])
	sum := sha256.Sum256(in[:])
	return binary.BigEndian.Uint64(sum[:8])
}

func (rt *routingTable) worstRanked(b *bucket) int {
	worst := 0
	for i, e := range b.entries {
		if e.rank > b.entries[worst].rank {
			worst = i
		}
	}
	return worst
}

// failed records an unanswered RPC to id. A contact that fails maxFailures
// times in a row is replaced by the freshest replacement, if there is one;
// without one it stays (it may come back) but is no longer handed out.
func (rt *routingTable) failed(id ID) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	b := rt.bucketFor(id)
	if b == nil {
		return
	}
	i := indexOf(b.entries, id)
	if i < 0 {
		if j := indexOf(b.replacements, id); j >= 0 {
			b.replacements = slices.Delete(b.replacements, j, j+1)
		}
		return
	}
	e := b.entries[i]
	e.failures++
	e.pinging = false
	if e.bad(rt.maxFailures) {
		rt.replaceWithFreshestLocked(b, i)
	}
}

// replaceWithFreshestLocked swaps entry i for the most recently heard
// replacement that fits the caps in its place, if there is one, and
// reports whether it did.
func (rt *routingTable) replaceWithFreshestLocked(b *bucket, i int) bool {
	for j := len(b.replacements) - 1; j >= 0; j-- {
		repl := b.replacements[j]
		if !rt.fitsLocked(b, repl.Contact, b.entries[i]) {
			continue
		}
		b.replacements = slices.Delete(b.replacements, j, j+1)
		rt.dropLocked(b, i)
		at, _ := slices.BinarySearchFunc(b.entries, repl.lastHeard, func(x *rtEntry, t time.Time) int { return x.lastHeard.Compare(t) })
		rt.addLocked(b, repl, at)
		return true
	}
	return false
}

// evict replaces id by the freshest replacement, if id is still unanswered
// since it was last pinged and a replacement exists.
func (rt *routingTable) evict(id ID) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	b := rt.bucketFor(id)
	if b == nil {
		return
	}
	if i := indexOf(b.entries, id); i >= 0 && b.entries[i].failures > 0 {
		rt.replaceWithFreshestLocked(b, i)
	}
}

// remove drops id from the table (used when a node changes clusters).
func (rt *routingTable) remove(id ID) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	b := rt.bucketFor(id)
	if b == nil {
		return
	}
	if i := indexOf(b.entries, id); i >= 0 && !rt.replaceWithFreshestLocked(b, i) {
		rt.dropLocked(b, i)
	}
}

// clear empties the table, as when the node moves to another cluster and
// its old neighbours are no longer members.
func (rt *routingTable) clear() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for i := range rt.buckets {
		rt.buckets[i].entries, rt.buckets[i].replacements = nil, nil
	}
	rt.size = 0
	clear(rt.perIP)
	clear(rt.perNet)
}

// touch records that a lookup was aimed at target, so its bucket needs no
// refresh for a while.
func (rt *routingTable) touch(target ID, now time.Time) {
	rt.mu.Lock()
	if b := rt.bucketFor(target); b != nil {
		b.touched = now
	}
	rt.mu.Unlock()
}

// staleBuckets lists buckets that need a refresh lookup: untouched for the
// interval and not beyond the deepest non-empty bucket plus one (deeper
// ranges are empty of nodes by construction).
func (rt *routingTable) staleBuckets(now time.Time, interval time.Duration) []int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	deepest := -1
	for i := range rt.buckets {
		if len(rt.buckets[i].entries) > 0 {
			deepest = i
		}
	}
	var out []int
	for i := 0; i <= deepest+1 && i < IDBits; i++ {
		if now.Sub(rt.buckets[i].touched) >= interval {
			out = append(out, i)
		}
	}
	return out
}

// entryView is a copy of a routing-table entry, safe to use unlocked.
type entryView struct {
	Contact
	lastHeard time.Time
	failures  int
}

// all returns every contact not known to be bad.
func (rt *routingTable) all() []entryView {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]entryView, 0, rt.size)
	for i := range rt.buckets {
		for _, e := range rt.buckets[i].entries {
			if !e.bad(rt.maxFailures) {
				out = append(out, entryView{e.Contact, e.lastHeard, e.failures})
			}
		}
	}
	return out
}

// closest returns up to n good contacts nearest to target, nearest first,
// leaving out the one with ID skip.
func (rt *routingTable) closest(target ID, n int, skip ID) []Contact {
	return rt.closestFiltered(target, n, skip, false)
}

// closestAnswering is closest without contacts that have missed an RPC
// since they were last heard from: what a node hands to others, so that
// the failures it has seen spare them the same timeouts.
func (rt *routingTable) closestAnswering(target ID, n int, skip ID) []Contact {
	return rt.closestFiltered(target, n, skip, true)
}

func (rt *routingTable) closestFiltered(target ID, n int, skip ID, answering bool) []Contact {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	// With start = cpl(self, target): contacts in bucket start agree with
	// target beyond bit start and are the nearest; contacts in deeper
	// buckets share exactly start bits with target; those in bucket i <
	// start share i bits. So take bucket start and every deeper one, then
	// shallower buckets until n contacts are found, and sort.
	out := make([]Contact, 0, n+rt.k)
	start := CommonPrefixLen(rt.self, target)
	collect := func(i int) {
		for _, e := range rt.buckets[i].entries {
			if !e.bad(rt.maxFailures) && e.ID != skip && (!answering || e.failures == 0) {
				out = append(out, e.Contact)
			}
		}
	}
	for i := IDBits - 1; i > start && i >= 0; i-- {
		collect(i)
	}
	if start < IDBits {
		collect(start)
	}
	for i := min(start, IDBits) - 1; i >= 0 && len(out) < n; i-- {
		collect(i)
	}
	slices.SortFunc(out, func(a, b Contact) int { return CompareDistance(target, a.ID, b.ID) })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func (rt *routingTable) len() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.size
}

func indexOf(es []*rtEntry, id ID) int {
	for i, e := range es {
		if e.ID == id {
			return i
		}
	}
	return -1
}
