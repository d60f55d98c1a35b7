package coraldht

import (
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
type routingTable struct {
	self         ID
	k            int
	maxFailures  int
	questionable time.Duration

	mu      sync.Mutex
	buckets [IDBits]bucket
	size    int
}

type bucket struct {
	entries      []*rtEntry // least recently heard first
	replacements []*rtEntry // most recently heard last
	touched      time.Time  // last lookup aimed into this bucket's range
}

type rtEntry struct {
	Contact
	lastHeard time.Time
	failures  int  // consecutive unanswered RPCs
	pinging   bool // a liveness ping is outstanding
}

func newRoutingTable(self ID, k, maxFailures int, questionable time.Duration, now time.Time) *routingTable {
	rt := &routingTable{self: self, k: k, maxFailures: maxFailures, questionable: questionable}
	for i := range rt.buckets {
		rt.buckets[i].touched = now
	}
	return rt
}

func (rt *routingTable) bucketFor(id ID) *bucket {
	i := CommonPrefixLen(rt.self, id)
	if i >= IDBits {
		return nil
	}
	return &rt.buckets[i]
}

func (e *rtEntry) bad(maxFailures int) bool { return e.failures >= maxFailures }

// heard records that c sent us an authentic message now. If c cannot be
// placed because its bucket is full and the bucket's oldest contact has been
// quiet for a while, heard returns that contact so the caller can ping it;
// the caller reports the outcome through failed or a later heard.
func (rt *routingTable) heard(c Contact, now time.Time) (ping *Contact) {
	return rt.heardAs(c, now, true)
}

// heardAs is heard; with byRank false a newcomer to a full bucket does
// not displace an entry by rank (only a bad one) and waits in the
// replacement cache, as in Kademlia. The node passes false for contacts
// heard in replies: those are the nodes its own walks contact, which
// are the nodes near the keys it works on, not a sample of the bucket's
// range (coraldht/README.md, "the busiest node").
func (rt *routingTable) heardAs(c Contact, now time.Time, byRank bool) (ping *Contact) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	b := rt.bucketFor(c.ID)
	if b == nil {
		return nil
	}
	if i := indexOf(b.entries, c.ID); i >= 0 {
		e := b.entries[i]
		e.Contact, e.lastHeard, e.failures, e.pinging = c, now, 0, false
		copy(b.entries[i:], b.entries[i+1:])
		b.entries[len(b.entries)-1] = e
		return nil
	}
	if i := indexOf(b.replacements, c.ID); i >= 0 {
		b.replacements = slices.Delete(b.replacements, i, i+1)
	}
	e := &rtEntry{Contact: c, lastHeard: now}
	if len(b.entries) < rt.k {
		b.entries = append(b.entries, e)
		rt.size++
		return nil
	}
	for i, old := range b.entries {
		if old.bad(rt.maxFailures) {
			b.entries = slices.Delete(b.entries, i, i+1)
			b.entries = append(b.entries, e)
			return nil
		}
	}
	if worst := rt.worstRanked(b); byRank && rt.rank(c.ID) < rt.rank(b.entries[worst].ID) {
		old := b.entries[worst]
		b.entries = slices.Delete(b.entries, worst, worst+1)
		b.entries = append(b.entries, e)
		e = old
	}
	b.replacements = append(b.replacements, e)
	if len(b.replacements) > rt.k {
		b.replacements = b.replacements[1:]
	}
	if lru := b.entries[0]; !lru.pinging && now.Sub(lru.lastHeard) > rt.questionable {
		lru.pinging = true
		c := lru.Contact
		return &c
	}
	return nil
}

// rank orders the contacts a full bucket keeps: lower is kept. It is a
// pseudo-random function of the pair of IDs (their XOR's low-order bytes,
// which say nothing about distance), so every node's table is its own
// random sample of each bucket's range. Keeping the first contacts heard
// (Kademlia's rule) put the nodes that joined first in most tables, and a
// put's walk hops to a node in proportion to the tables listing it
// (coraldht/README.md, "the busiest node").
func (rt *routingTable) rank(id ID) uint64 {
	return mix64(low64(rt.self) ^ low64(id))
}

func (rt *routingTable) worstRanked(b *bucket) int {
	worst := 0
	for i, e := range b.entries {
		if rt.rank(e.ID) > rt.rank(b.entries[worst].ID) {
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
		b.replaceWithFreshest(i)
	}
}

// replaceWithFreshest swaps entry i for the most recently heard
// replacement, if there is one.
func (b *bucket) replaceWithFreshest(i int) {
	if len(b.replacements) == 0 {
		return
	}
	repl := b.replacements[len(b.replacements)-1]
	b.replacements = b.replacements[:len(b.replacements)-1]
	b.entries = slices.Delete(b.entries, i, i+1)
	b.insertByHeard(repl)
}

// insertByHeard adds e keeping entries ordered by lastHeard.
func (b *bucket) insertByHeard(e *rtEntry) {
	at, _ := slices.BinarySearchFunc(b.entries, e.lastHeard, func(x *rtEntry, t time.Time) int { return x.lastHeard.Compare(t) })
	b.entries = slices.Insert(b.entries, at, e)
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
		b.replaceWithFreshest(i)
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
	if i := indexOf(b.entries, id); i >= 0 {
		if len(b.replacements) > 0 {
			b.replaceWithFreshest(i)
		} else {
			b.entries = slices.Delete(b.entries, i, i+1)
			rt.size--
		}
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
