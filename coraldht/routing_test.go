package coraldht

import (
	"cmp"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// contactInBucket returns a contact whose ID shares exactly prefix bits with
// self. Its address is fake: routing tables never check IDs against
// addresses, the wire codec does.
func contactInBucket(self ID, prefix int, rng *rand.Rand, i int) Contact {
	return Contact{ID: randomIDWithPrefix(self, prefix, rng), Addr: memAddr(i)}
}

// rankedContacts returns n contacts in one bucket, each ranked below the
// one before (see routingTable.rank), so that a full bucket keeps the
// first ones heard, as the tests of its other rules need.
func rankedContacts(rt *routingTable, prefix, n int, rng *rand.Rand, first int) []Contact {
	cs := make([]Contact, n)
	for i := range cs {
		cs[i] = contactInBucket(rt.self, prefix, rng, first+i)
	}
	slices.SortFunc(cs, func(a, b Contact) int { return cmp.Compare(rt.rank(a.ID), rt.rank(b.ID)) })
	for i := range cs {
		cs[i].Addr = memAddr(first + i)
	}
	return cs
}

func TestBucketFillsThenUsesReplacementCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	self := randID(rng)
	rt := newRoutingTable(self, 3, 2, 15*time.Minute, tableLimits{}, t0)
	cs := rankedContacts(rt, 0, 5, rng, 0)
	for i, c := range cs {
		if ping := rt.heard(c, t0); ping != nil {
			t.Fatalf("contact %d: asked to ping %v although nobody is questionable", i, *ping)
		}
	}
	if rt.len() != 3 {
		t.Fatalf("table has %d contacts, bucket size 3", rt.len())
	}
	if got := len(rt.buckets[0].replacements); got != 2 {
		t.Fatalf("%d replacements, want 2", got)
	}
	// One failure is forgiven; the second replaces the contact with the
	// freshest replacement.
	rt.failed(cs[0].ID)
	if indexOf(rt.buckets[0].entries, cs[0].ID) < 0 {
		t.Fatal("contact dropped after one failure")
	}
	rt.failed(cs[0].ID)
	if indexOf(rt.buckets[0].entries, cs[0].ID) >= 0 {
		t.Fatal("contact kept after MaxFailures failures with a replacement waiting")
	}
	if indexOf(rt.buckets[0].entries, cs[4].ID) < 0 {
		t.Fatal("freshest replacement did not take the slot")
	}
	if rt.len() != 3 {
		t.Fatalf("size %d after replacement", rt.len())
	}
}

func TestBadContactWithoutReplacementIsKeptButHidden(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	self := randID(rng)
	rt := newRoutingTable(self, 3, 2, 15*time.Minute, tableLimits{}, t0)
	c := contactInBucket(self, 5, rng, 1)
	rt.heard(c, t0)
	rt.failed(c.ID)
	rt.failed(c.ID)
	if len(rt.all()) != 0 || len(rt.closest(c.ID, 8, ID{})) != 0 {
		t.Fatal("a bad contact is still handed out")
	}
	// Hearing from it again rehabilitates it.
	rt.heard(c, t0.Add(time.Second))
	if len(rt.all()) != 1 {
		t.Fatal("contact not restored after it was heard from")
	}
	// A newcomer takes a bad contact's slot at once.
	rt2 := newRoutingTable(self, 1, 2, 15*time.Minute, tableLimits{}, t0)
	rt2.heard(c, t0)
	rt2.failed(c.ID)
	rt2.failed(c.ID)
	n := contactInBucket(self, 5, rng, 2)
	rt2.heard(n, t0)
	if all := rt2.all(); len(all) != 1 || all[0].ID != n.ID {
		t.Fatalf("newcomer did not replace the bad contact: %v", all)
	}
}

func TestQuestionableContactIsPingedBeforeEviction(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	self := randID(rng)
	rt := newRoutingTable(self, 2, 2, 15*time.Minute, tableLimits{}, t0)
	cs := rankedContacts(rt, 1, 4, rng, 1)
	old, mid, newcomer := cs[0], cs[1], cs[2]
	rt.heard(old, t0)
	rt.heard(mid, t0.Add(time.Minute))
	// Not quiet long enough: the newcomer just waits.
	if ping := rt.heard(newcomer, t0.Add(10*time.Minute)); ping != nil {
		t.Fatalf("pinged %v after 10 min of silence", ping)
	}
	later := t0.Add(20 * time.Minute)
	ping := rt.heard(newcomer, later)
	if ping == nil || ping.ID != old.ID {
		t.Fatalf("ping = %v, want the least recently heard contact %v", ping, old)
	}
	if again := rt.heard(cs[3], later); again != nil {
		t.Fatal("a second ping was started while one is outstanding")
	}
	// It answers: it stays, moves to the back, and the newcomer waits.
	rt.heard(old, later)
	if e := rt.buckets[1].entries; e[len(e)-1].ID != old.ID {
		t.Fatal("answering contact not moved to most recently heard")
	}
	// Next time it fails the check and the newcomer replaces it.
	ping = rt.heard(newcomer, later.Add(20*time.Minute))
	if ping == nil || ping.ID != mid.ID {
		t.Fatalf("second check pinged %v, want %v", ping, mid)
	}
	rt.failed(mid.ID)
	rt.evict(mid.ID)
	if indexOf(rt.buckets[1].entries, mid.ID) >= 0 || indexOf(rt.buckets[1].entries, newcomer.ID) < 0 {
		t.Fatal("failed check did not hand the slot to the newcomer")
	}
}

// TestFullBucketKeepsBestRanked: a full bucket keeps the contacts that
// rank best for its owner, whatever order it heard them in, and a
// contact it lets go waits in the replacement cache. Under the rule it
// replaced (keep the first contacts heard), the nodes that joined first
// were in most tables and took many putters' leaks on a hot key.
func TestFullBucketKeepsBestRanked(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	self := randID(rng)
	cs := rankedContacts(newRoutingTable(self, 3, 2, 15*time.Minute, tableLimits{}, t0), 2, 12, rng, 0)
	best := func(rt *routingTable) []ID {
		var ids []ID
		for _, e := range rt.buckets[2].entries {
			ids = append(ids, e.ID)
		}
		slices.SortFunc(ids, func(a, b ID) int { return cmp.Compare(rt.rank(a), rt.rank(b)) })
		return ids
	}
	want := []ID{cs[0].ID, cs[1].ID, cs[2].ID}
	for trial := range 4 {
		order := slices.Clone(cs)
		if trial > 0 {
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		} else {
			slices.Reverse(order) // the worst first
		}
		rt := newRoutingTable(self, 3, 2, 15*time.Minute, tableLimits{}, t0)
		for i, c := range order {
			rt.heard(c, t0.Add(time.Duration(i)*time.Second))
		}
		if got := best(rt); !slices.Equal(got, want) {
			t.Fatalf("trial %d: bucket holds %v, want the best ranked %v", trial, shortIDs(got), shortIDs(want))
		}
		if rt.len() != 3 {
			t.Fatalf("trial %d: size %d", trial, rt.len())
		}
		if trial == 0 && indexOf(rt.buckets[2].replacements, cs[3].ID) < 0 {
			t.Fatal("a contact let go for a better one is not in the replacement cache")
		}
	}
}

func TestClosestMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	self := randID(rng)
	rt := newRoutingTable(self, 8, 2, 15*time.Minute, tableLimits{}, t0)
	for i := range 400 {
		// Skewed prefixes, as in a real table.
		p := min(int(rng.ExpFloat64()*3), 30)
		rt.heard(contactInBucket(self, p, rng, i), t0)
	}
	var all []Contact
	for _, e := range rt.all() {
		all = append(all, e.Contact)
	}
	for range 200 {
		target := randID(rng)
		if rng.IntN(3) == 0 {
			target = randomIDWithPrefix(self, rng.IntN(12), rng)
		}
		n := 1 + rng.IntN(12)
		want := slices.Clone(all)
		slices.SortFunc(want, func(a, b Contact) int { return CompareDistance(target, a.ID, b.ID) })
		want = want[:min(n, len(want))]
		got := rt.closest(target, n, ID{})
		if !slices.Equal(got, want) {
			t.Fatalf("closest(%v, %d) = %v, want %v", target.Short(), n, got, want)
		}
	}
	skip := all[0]
	for _, c := range rt.closest(skip.ID, 20, skip.ID) {
		if c.ID == skip.ID {
			t.Fatal("closest returned the skipped ID")
		}
	}
}

func TestStaleBucketsAndTouch(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	self := randID(rng)
	rt := newRoutingTable(self, 8, 2, 15*time.Minute, tableLimits{}, t0)
	rt.heard(contactInBucket(self, 3, rng, 1), t0)
	later := t0.Add(time.Hour)
	// Buckets 0..4 (deepest non-empty + 1) are due.
	if got := rt.staleBuckets(later, 15*time.Minute); !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("stale = %v", got)
	}
	rt.touch(randomIDWithPrefix(self, 2, rng), later)
	if got := rt.staleBuckets(later, 15*time.Minute); slices.Contains(got, 2) {
		t.Fatalf("touched bucket still stale: %v", got)
	}
}

func TestRTTEstimatorAndTimeouts(t *testing.T) {
	p := newPeerTable(2, 50*time.Millisecond, 2*time.Second, time.Second)
	a := netip.MustParseAddrPort("10.0.0.1:4000")
	if hedge, hard := p.timeouts(a, false); hedge != time.Second || hard != 2*time.Second {
		t.Fatalf("no samples at all: hedge %v hard %v, want 1s and 2s", hedge, hard)
	}
	for range 20 {
		p.observe(a, 100*time.Millisecond, t0)
	}
	hedge, hard := p.timeouts(a, false)
	if hedge < 100*time.Millisecond || hedge > 160*time.Millisecond || hard < 2*hedge || hard > 300*time.Millisecond {
		t.Fatalf("steady 100ms RTT: hedge %v hard %v", hedge, hard)
	}
	if _, quick := p.timeouts(a, true); quick >= hard {
		t.Fatalf("quick timeout %v not below the normal %v", quick, hard)
	}
	b := netip.MustParseAddrPort("10.0.0.2:4000")
	hedge, hard = p.timeouts(b, false)
	if hedge > 200*time.Millisecond {
		t.Fatalf("unmeasured peer on a 100ms network: hedge %v, want the aggregate's", hedge)
	}
	if hard < time.Second {
		t.Fatalf("unmeasured peer given up on after %v, before InitialRPCTimeout", hard)
	}
	p.observe(b, 5*time.Millisecond, t0.Add(time.Millisecond))
	if hedge, hard := p.timeouts(b, false); hedge != 50*time.Millisecond || hard != 100*time.Millisecond {
		t.Fatalf("tiny RTT: hedge %v hard %v, want the 50ms floor and twice it", hedge, hard)
	}
	p.observe(a, 10*time.Second, t0)
	if _, hard := p.timeouts(a, false); hard != 2*time.Second {
		t.Fatalf("huge RTT: hard timeout %v, want the 2s cap", hard)
	}
	if r, _ := p.get(a); r.Min != 100*time.Millisecond {
		t.Fatalf("min RTT %v", r.Min)
	}
	c := netip.MustParseAddrPort("10.0.0.3:4000")
	p.observe(c, time.Millisecond, t0.Add(time.Second))
	if p.len() != 2 {
		t.Fatalf("%d peers, bound 2", p.len())
	}
	if _, ok := p.get(b); ok {
		t.Fatal("the peer updated longest ago was not evicted")
	}
}

func TestUnreachablePeers(t *testing.T) {
	p := newPeerTable(10, 50*time.Millisecond, 2*time.Second, time.Second)
	a := netip.MustParseAddrPort("10.0.0.1:4000")
	p.failed(a, t0)
	if !p.unreachable(a, t0.Add(time.Minute), 10*time.Minute) {
		t.Fatal("a peer that just failed is not unreachable")
	}
	if p.unreachable(a, t0.Add(11*time.Minute), 10*time.Minute) {
		t.Fatal("still unreachable after the window")
	}
	p.noteClusters(Contact{ID: NodeIDFor(a), Addr: a}, nil, t0.Add(2*time.Minute))
	if p.unreachable(a, t0.Add(3*time.Minute), 10*time.Minute) {
		t.Fatal("still unreachable after it was heard from")
	}
	p.failed(a, t0.Add(4*time.Minute))
	p.observe(a, 10*time.Millisecond, t0.Add(5*time.Minute))
	if p.unreachable(a, t0.Add(6*time.Minute), 10*time.Minute) {
		t.Fatal("still unreachable after it answered")
	}
}

// TestRepliesDoNotDisplaceByRank: a contact heard only in a reply (a
// node this one contacted) waits in the replacement cache of a full
// bucket even when it ranks better; the same contact sending a request
// takes the worst entry's slot. Replies come from the nodes a node's own
// walks visit, those near the keys it works on; when they competed by
// rank, far buckets filled with them and at n = 1024 the busiest node of
// a hot key took 2.4× the paper's bound (eval/hotspot -trace).
func TestRepliesDoNotDisplaceByRank(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	self := randID(rng)
	rt := newRoutingTable(self, 3, 2, 15*time.Minute, tableLimits{}, t0)
	cs := rankedContacts(rt, 2, 4, rng, 0) // cs[0] ranks best
	for _, c := range cs[1:] {
		rt.heard(c, t0)
	}
	rt.heardAs(cs[0], t0, false)
	if indexOf(rt.buckets[2].entries, cs[0].ID) >= 0 {
		t.Fatal("a contact heard in a reply displaced an entry by rank")
	}
	if indexOf(rt.buckets[2].replacements, cs[0].ID) < 0 {
		t.Fatal("a contact heard in a reply is not in the replacement cache")
	}
	rt.heardAs(cs[0], t0, true)
	if indexOf(rt.buckets[2].entries, cs[0].ID) < 0 || indexOf(rt.buckets[2].entries, cs[3].ID) >= 0 {
		t.Fatal("a request's better-ranked sender did not take the worst entry's slot")
	}
}
