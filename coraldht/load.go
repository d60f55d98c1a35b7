package coraldht

import (
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"
)

// requestKind says what a request for a key was, for the per-key counters.
type requestKind int

const (
	kindGet requestKind = iota
	kindPutProbe
	kindStore
)

// loadTracker decides whether the node is loaded for a key: it has seen more
// than β requests (gets and put probes) for the key in the last minute. It
// keeps the times of the last β+1 requests per key, which is exactly what
// that test needs. Under sustained load a loaded node still answers "not
// loaded" once every minute/β, the leak that keeps values near the key fresh.
// Any member can name new keys, so the counters are bounded (max keys): the
// key idle longest goes first, in constant time, as in a boundedMap.
//
// A node tracks up to MaxTrackedKeys keys, so the counters hold no Go
// pointer: fixed-size records in one slice, linked into the LRU list by
// record number, the request times of all keys in another (β+1 each), and
// an open-addressing table of record numbers finding them by key. The
// collector does not scan them, and a key takes about half as much as in
// a boundedMap of structs with time.Time fields and a slice each
// (BenchmarkLoadTrackerMemory). The counts a snapshot reports stop at
// 2³²−1 (they are 32 bits); the load test uses only the request times.
type loadTracker struct {
	beta     int
	interval time.Duration // minute/β: the leak spacing
	// epoch is what times are counted from (stamp): ns since it.
	epoch time.Time
	max   int

	mu sync.Mutex
	// table finds records by key: 1 + record number, 0 empty; linear
	// probing, at most half full, its length a power of two.
	table []int32
	seed  maphash.Seed
	n     int       // tracked keys
	recs  []keyLoad // records; free ones are linked through next
	times []int64   // β+1 request times per record: ring of record i at i*(β+1)
	// LRU list through the records, most recently used first; -1: none.
	head, tail, free int32
}

// keyLoad is one key's counters; times are stamps (ns since the
// tracker's epoch).
type keyLoad struct {
	lk         levelKey
	prev, next int32 // LRU neighbours (next links free records)
	ring       int32 // next slot of the ring of request times
	recorded   int32 // request times in the ring, at most β+1
	lastPass   int64 // last time this key was reported not loaded; never: neverPassed
	lastSeen   int64
	minute     int64 // start of the current counting minute

	thisMin, lastMin uint32 // requests in the current and previous minute
	gets, probes     uint32 // totals from other nodes
	stores           uint32
	local            uint32 // this node's own gets, probes and stores
	loadedAnswers    uint32 // requests answered "loaded"
}

// count adds one to a counter, which stops at its largest value.
func count(c *uint32) {
	if *c < math.MaxUint32 {
		*c++
	}
}

// neverPassed is lastPass of a key never reported not loaded: longer ago
// than any interval (and far enough from the int64 limits that time
// differences cannot overflow).
const neverPassed = math.MinInt64 / 2

// KeyLoad describes the requests a node has seen for one key since it began
// tracking it (it stops after a minute without requests).
type KeyLoad struct {
	Key           ID
	Level         int
	Gets          uint64 // get RPCs from other nodes
	PutProbes     uint64 // forward-phase put RPCs from other nodes
	Stores        uint64 // store RPCs from other nodes (not part of the load test)
	Local         uint64 // this node's own operations on the key
	LoadedAnswers uint64 // requests, local or remote, told "loaded"
	LastMinute    uint64 // gets and put probes, local or remote, in the last full minute
	Loaded        bool   // whether the next request would find the node loaded
}

func newLoadTracker(beta, max int) *loadTracker {
	return &loadTracker{beta: beta, interval: time.Minute / time.Duration(beta), epoch: time.Now(), max: max,
		seed: maphash.MakeSeed(), head: -1, tail: -1, free: -1}
}

// stamp is now as the records keep times (monotonic when now and the
// epoch both carry a monotonic reading, as time.Now's do).
func (t *loadTracker) stamp(now time.Time) int64 { return int64(now.Sub(t.epoch)) }

// ringOf is the request times of record i.
func (t *loadTracker) ringOf(i int32) []int64 {
	n := int(t.beta + 1)
	return t.times[int(i)*n : (int(i)+1)*n : (int(i)+1)*n]
}

// unlinkLocked takes record i out of the LRU list.
func (t *loadTracker) unlinkLocked(i int32) {
	kl := &t.recs[i]
	if kl.prev >= 0 {
		t.recs[kl.prev].next = kl.next
	} else {
		t.head = kl.next
	}
	if kl.next >= 0 {
		t.recs[kl.next].prev = kl.prev
	} else {
		t.tail = kl.prev
	}
	kl.prev, kl.next = -1, -1
}

// pushFrontLocked makes record i the most recently used.
func (t *loadTracker) pushFrontLocked(i int32) {
	kl := &t.recs[i]
	kl.prev, kl.next = -1, t.head
	if t.head >= 0 {
		t.recs[t.head].prev = i
	}
	t.head = i
	if t.tail < 0 {
		t.tail = i
	}
}

// home is the first table slot to look for lk in.
func (t *loadTracker) home(lk levelKey) int {
	return int(maphash.Comparable(t.seed, lk) & uint64(len(t.table)-1))
}

// findLocked returns lk's record number, or -1.
func (t *loadTracker) findLocked(lk levelKey) int32 {
	if t.n == 0 {
		return -1
	}
	for i := t.home(lk); ; i = (i + 1) & (len(t.table) - 1) {
		r := t.table[i]
		if r == 0 {
			return -1
		}
		if t.recs[r-1].lk == lk {
			return r - 1
		}
	}
}

// placeLocked enters record r in the table, which has room.
func (t *loadTracker) placeLocked(r int32) {
	i := t.home(t.recs[r].lk)
	for t.table[i] != 0 {
		i = (i + 1) & (len(t.table) - 1)
	}
	t.table[i] = r + 1
}

// unplaceLocked takes record r out of the table: backward-shift deletion
// moves later members of the probe run into the hole unless their home
// lies cyclically in (hole, them].
func (t *loadTracker) unplaceLocked(r int32) {
	mask := len(t.table) - 1
	hole := t.home(t.recs[r].lk)
	for t.table[hole] != r+1 {
		hole = (hole + 1) & mask
	}
	for j := (hole + 1) & mask; t.table[j] != 0; j = (j + 1) & mask {
		if h := t.home(t.recs[t.table[j]-1].lk); (j-h)&mask >= (j-hole)&mask {
			t.table[hole] = t.table[j]
			hole = j
		}
	}
	t.table[hole] = 0
}

// removeLocked forgets record i's key.
func (t *loadTracker) removeLocked(i int32) {
	t.unlinkLocked(i)
	t.unplaceLocked(i)
	t.n--
	t.recs[i] = keyLoad{prev: -1, next: t.free}
	t.free = i
}

// addLocked returns a new record for lk, evicting the key idle longest
// when max keys are tracked.
func (t *loadTracker) addLocked(lk levelKey) int32 {
	if t.n >= t.max && t.tail >= 0 {
		t.removeLocked(t.tail)
	}
	i := t.free
	if i >= 0 {
		t.free = t.recs[i].next
		clear(t.ringOf(i))
	} else {
		if len(t.recs) == cap(t.recs) {
			// Doubling up to the bound: at the bound, no slack.
			c := min(max(2*len(t.recs), 64), max(t.max, len(t.recs)+1))
			t.recs = append(make([]keyLoad, 0, c), t.recs...)
			t.times = append(make([]int64, 0, c*(t.beta+1)), t.times...)
		}
		i = int32(len(t.recs))
		t.recs = append(t.recs, keyLoad{})
		t.times = t.times[:len(t.times)+t.beta+1]
	}
	t.recs[i] = keyLoad{lk: lk, prev: -1, next: -1}
	if 2*(t.n+1) > len(t.table) {
		t.table = make([]int32, max(64, 2*len(t.table)))
		for r := t.head; r >= 0; r = t.recs[r].next {
			t.placeLocked(r)
		}
	}
	t.placeLocked(i)
	t.n++
	t.pushFrontLocked(i)
	return i
}

func (t *loadTracker) entryLocked(lk levelKey, now time.Time) int32 {
	stamp := t.stamp(now)
	i := t.findLocked(lk)
	if i < 0 {
		i = t.addLocked(lk)
		t.recs[i].lastPass, t.recs[i].minute = neverPassed, stamp
	} else if t.head != i {
		t.unlinkLocked(i)
		t.pushFrontLocked(i)
	}
	kl := &t.recs[i]
	if d := time.Duration(stamp - kl.minute); d >= time.Minute {
		if d >= 2*time.Minute {
			kl.lastMin = 0
		} else {
			kl.lastMin = kl.thisMin
		}
		kl.thisMin = 0
		kl.minute = stamp
	}
	kl.lastSeen = stamp
	return i
}

// request records a request for lk — from another node, or this node's own
// when local — and reports whether the node is loaded for it. Stores are
// counted but are not part of the load test.
func (t *loadTracker) request(lk levelKey, kind requestKind, local bool, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.entryLocked(lk, now)
	kl := &t.recs[i]
	switch {
	case local:
		count(&kl.local)
	case kind == kindGet:
		count(&kl.gets)
	case kind == kindPutProbe:
		count(&kl.probes)
	case kind == kindStore:
		count(&kl.stores)
	}
	if kind == kindStore {
		return false
	}
	count(&kl.thisMin)
	stamp := t.stamp(now)
	times := t.ringOf(i)
	times[kl.ring] = stamp
	kl.ring = (kl.ring + 1) % int32(len(times))
	kl.recorded = min(kl.recorded+1, int32(len(times)))
	// The oldest of the last β+1 requests sits at ring; all β+1 fall within
	// the last minute exactly when it does.
	loaded := kl.recorded == int32(len(times)) && time.Duration(stamp-times[kl.ring]) < time.Minute
	if loaded && time.Duration(stamp-kl.lastPass) >= t.interval {
		loaded = false // the leak
	}
	if loaded {
		count(&kl.loadedAnswers)
	} else {
		kl.lastPass = stamp
	}
	return loaded
}

func (t *loadTracker) snapshot(lk levelKey, now time.Time) KeyLoad {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.findLocked(lk)
	out := KeyLoad{Key: lk.key, Level: int(lk.level)}
	if i < 0 {
		return out
	}
	kl := &t.recs[i]
	stamp := t.stamp(now)
	out.Gets, out.PutProbes, out.Stores, out.Local, out.LoadedAnswers = uint64(kl.gets), uint64(kl.probes), uint64(kl.stores), uint64(kl.local), uint64(kl.loadedAnswers)
	out.LastMinute = uint64(kl.lastMin)
	if d := time.Duration(stamp - kl.minute); d >= 2*time.Minute {
		out.LastMinute = 0
	} else if d >= time.Minute {
		out.LastMinute = uint64(kl.thisMin)
	}
	// Would one more request now be loaded? All of the last β requests in
	// the last minute, and no leak due.
	times := t.ringOf(i)
	n := int32(len(times))
	oldestOfBeta := times[(kl.ring+1)%n]
	out.Loaded = kl.recorded >= n-1 && kl.recorded > 0 && time.Duration(stamp-oldestOfBeta) < time.Minute && time.Duration(stamp-kl.lastPass) < t.interval
	return out
}

// top returns up to n keys with the most requests in the last minute.
func (t *loadTracker) top(n int, now time.Time) []KeyLoad {
	t.mu.Lock()
	lks := make([]levelKey, 0, t.n)
	for i := t.head; i >= 0; i = t.recs[i].next { // most recently used first
		lks = append(lks, t.recs[i].lk)
	}
	t.mu.Unlock()
	out := make([]KeyLoad, 0, len(lks))
	for _, lk := range lks {
		out = append(out, t.snapshot(lk, now))
	}
	return busiest(out, n)
}

// busiest sorts loads by requests in the last minute, most first, and
// returns the first n.
func busiest(loads []KeyLoad, n int) []KeyLoad {
	slices.SortFunc(loads, func(a, b KeyLoad) int {
		if a.LastMinute != b.LastMinute {
			if a.LastMinute > b.LastMinute {
				return -1
			}
			return 1
		}
		return a.Key.Cmp(b.Key)
	})
	return loads[:min(n, len(loads))]
}

func (t *loadTracker) prune(before time.Time) {
	t.mu.Lock()
	t.pruneLocked(before)
	t.mu.Unlock()
}

// pruneLocked forgets the keys idle since before, idlest first.
func (t *loadTracker) pruneLocked(before time.Time) {
	b := t.stamp(before)
	for t.tail >= 0 && t.recs[t.tail].lastSeen < b {
		t.removeLocked(t.tail)
	}
}
