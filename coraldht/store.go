package coraldht

import (
	"bytes"
	"container/heap"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// levelKey names a key within one level's DSHT: each cluster a node belongs
// to has its own storage.
type levelKey struct {
	level uint8
	key   ID
}

// store is a node's soft-state storage: per (level, key) at most l values,
// each with its own expiry. See Config.FullValues and Config.MaxValues for
// the rules it enforces.
type store struct {
	l         int
	maxValues int
	maxKeys   int

	mu       sync.Mutex
	keys     map[levelKey]*keyEntry
	byExpiry expiryHeap // every stored value, soonest expiry first

	counters StoreCounters
}

type keyEntry struct {
	lk     levelKey
	values []*storedValue
}

type storedValue struct {
	data   []byte
	expiry time.Time
	entry  *keyEntry
	index  int // in byExpiry
}

func newStore(l, maxValues, maxKeys int) *store {
	return &store{l: l, maxValues: maxValues, maxKeys: maxKeys, keys: make(map[levelKey]*keyEntry)}
}

// keyStatus is what the forward phase of a put learns about a node.
type keyStatus struct {
	count        int
	minRemaining time.Duration // of the values present; 0 if none
}

// full reports whether a node in this state is full for a new value living
// ttl: it holds l values that all expire no sooner than half of ttl from now.
func (ks keyStatus) full(l int, ttl time.Duration) bool {
	return ks.count >= l && ks.minRemaining >= ttl/2
}

func (s *store) status(lk levelKey, now time.Time) keyStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	return s.statusLocked(lk, now)
}

func (s *store) statusLocked(lk levelKey, now time.Time) keyStatus {
	e := s.keys[lk]
	if e == nil {
		return keyStatus{}
	}
	ks := keyStatus{count: len(e.values)}
	for i, v := range e.values {
		if r := v.expiry.Sub(now); i == 0 || r < ks.minRemaining {
			ks.minRemaining = r
		}
	}
	return ks
}

// get returns the live values under lk in random order, so that readers
// spread over the nodes the values point to.
func (s *store) get(lk levelKey, now time.Time) []wire.Value {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	e := s.keys[lk]
	if e == nil {
		return nil
	}
	out := make([]wire.Value, len(e.values))
	for i, v := range e.values {
		out[i] = wire.Value{TTL: ttlMillis(v.expiry.Sub(now)), Data: v.data}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// put tries to store data under lk for ttl. It returns the result code, the
// key's state afterwards, and the values that were present before other than
// data itself (the "get" half of put+get).
func (s *store) put(lk levelKey, data []byte, ttl time.Duration, now time.Time) (result uint8, after keyStatus, before []wire.Value) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	expiry := now.Add(ttl)
	e := s.keys[lk]
	if e != nil {
		for _, v := range e.values {
			if !bytes.Equal(v.data, data) {
				before = append(before, wire.Value{TTL: ttlMillis(v.expiry.Sub(now)), Data: v.data})
			}
		}
		for _, v := range e.values {
			if bytes.Equal(v.data, data) {
				// The same value again: a longer lifetime replaces the
				// shorter, a shorter one changes nothing.
				if expiry.After(v.expiry) {
					v.expiry = expiry
					heap.Fix(&s.byExpiry, v.index)
				}
				s.counters.Refreshed++
				return wire.StoreRefreshed, s.statusLocked(lk, now), before
			}
		}
		if ks := s.statusLocked(lk, now); ks.full(s.l, ttl) {
			s.counters.RefusedFull++
			return wire.StoreFull, ks, before
		}
		if len(e.values) >= s.l {
			// Not full for this value: some value expires before half its
			// lifetime. Make room by evicting the one expiring soonest.
			soonest := slices.MinFunc(e.values, func(a, b *storedValue) int { return a.expiry.Compare(b.expiry) })
			s.removeLocked(soonest)
			s.counters.EvictedForNewer++
			if s.keys[lk] == nil {
				e = nil
			}
		}
	}
	// The memory bounds: displace whatever expires soonest in the whole
	// store, but never something that outlives the newcomer.
	for (e == nil && len(s.keys) >= s.maxKeys) || s.byExpiry.Len() >= s.maxValues {
		if s.byExpiry.Len() == 0 || !s.byExpiry[0].expiry.Before(expiry) {
			s.counters.RefusedExhausted++
			return wire.StoreExhausted, s.statusLocked(lk, now), before
		}
		victim := s.byExpiry[0]
		if e == nil && len(s.keys) >= s.maxKeys {
			for len(victim.entry.values) > 0 {
				s.removeLocked(victim.entry.values[0])
				s.counters.EvictedForSpace++
			}
		} else {
			s.removeLocked(victim)
			s.counters.EvictedForSpace++
		}
		if victim.entry == e && s.keys[lk] == nil {
			e = nil
		}
	}
	if e == nil {
		e = &keyEntry{lk: lk}
		s.keys[lk] = e
	}
	v := &storedValue{data: bytes.Clone(data), expiry: expiry, entry: e}
	e.values = append(e.values, v)
	heap.Push(&s.byExpiry, v)
	s.counters.Stored++
	return wire.StoreStored, s.statusLocked(lk, now), before
}

// putForced stores like a plain DHT: the value always goes in, evicting the
// key's soonest-expiring value if the key is at capacity. Only PlainDHT
// nodes use it.
func (s *store) putForced(lk levelKey, data []byte, ttl time.Duration, now time.Time) (uint8, keyStatus, []wire.Value) {
	s.mu.Lock()
	if e := s.keys[lk]; e != nil && len(e.values) >= s.l {
		present := false
		for _, v := range e.values {
			present = present || bytes.Equal(v.data, data)
		}
		if !present {
			soonest := slices.MinFunc(e.values, func(a, b *storedValue) int { return a.expiry.Compare(b.expiry) })
			s.removeLocked(soonest)
			s.counters.EvictedForNewer++
		}
	}
	s.mu.Unlock()
	return s.put(lk, data, ttl, now)
}

func (s *store) removeLocked(v *storedValue) {
	heap.Remove(&s.byExpiry, v.index)
	e := v.entry
	if i := slices.Index(e.values, v); i >= 0 {
		e.values = slices.Delete(e.values, i, i+1)
	}
	if len(e.values) == 0 && s.keys[e.lk] == e {
		delete(s.keys, e.lk)
	}
}

// expireLocked drops every value whose expiry has passed.
func (s *store) expireLocked(now time.Time) {
	for s.byExpiry.Len() > 0 && !s.byExpiry[0].expiry.After(now) {
		s.removeLocked(s.byExpiry[0])
		s.counters.Expired++
	}
}

func (s *store) expire(now time.Time) {
	s.mu.Lock()
	s.expireLocked(now)
	s.mu.Unlock()
}

// dropLevel forgets everything stored at one level (after a cluster change
// the old cluster's data no longer belongs here).
func (s *store) dropLevel(level uint8) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for lk, e := range s.keys {
		if lk.level == level {
			for len(e.values) > 0 {
				s.removeLocked(e.values[0])
			}
		}
	}
}

func (s *store) sizes() (keys, values int, counters StoreCounters) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys), s.byExpiry.Len(), s.counters
}

func ttlMillis(d time.Duration) uint32 {
	ms := d.Milliseconds()
	switch {
	case ms < 0:
		return 0
	case ms > 1<<32-1:
		return 1<<32 - 1
	}
	return uint32(ms)
}

type expiryHeap []*storedValue

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expiry.Before(h[j].expiry) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	v := x.(*storedValue)
	v.index = len(*h)
	*h = append(*h, v)
}
func (h *expiryHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return v
}

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
type loadTracker struct {
	beta     int
	interval time.Duration // minute/β: the leak spacing
	max      int

	mu   sync.Mutex
	keys map[levelKey]*keyLoad
}

type keyLoad struct {
	times    []time.Time // ring of the last β+1 request times
	next     int
	lastPass time.Time // last time this key was reported not loaded
	lastSeen time.Time

	minute           time.Time // start of the current counting minute
	thisMin, lastMin uint64    // requests in the current and previous minute
	gets, probes     uint64    // totals from other nodes
	stores           uint64
	local            uint64 // this node's own gets, probes and stores
	loadedAnswers    uint64 // requests answered "loaded"
}

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
	return &loadTracker{beta: beta, interval: time.Minute / time.Duration(beta), max: max, keys: make(map[levelKey]*keyLoad)}
}

func (t *loadTracker) entryLocked(lk levelKey, now time.Time) *keyLoad {
	kl := t.keys[lk]
	if kl == nil {
		if len(t.keys) >= t.max {
			t.pruneLocked(now.Add(-time.Minute))
			for k := range t.keys {
				if len(t.keys) < t.max {
					break
				}
				delete(t.keys, k)
			}
		}
		kl = &keyLoad{times: make([]time.Time, t.beta+1), minute: now}
		t.keys[lk] = kl
	}
	if d := now.Sub(kl.minute); d >= time.Minute {
		if d >= 2*time.Minute {
			kl.lastMin = 0
		} else {
			kl.lastMin = kl.thisMin
		}
		kl.thisMin = 0
		kl.minute = now
	}
	kl.lastSeen = now
	return kl
}

// request records a request for lk — from another node, or this node's own
// when local — and reports whether the node is loaded for it. Stores are
// counted but are not part of the load test.
func (t *loadTracker) request(lk levelKey, kind requestKind, local bool, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	kl := t.entryLocked(lk, now)
	switch {
	case local:
		kl.local++
	case kind == kindGet:
		kl.gets++
	case kind == kindPutProbe:
		kl.probes++
	case kind == kindStore:
		kl.stores++
	}
	if kind == kindStore {
		return false
	}
	kl.thisMin++
	kl.times[kl.next] = now
	kl.next = (kl.next + 1) % len(kl.times)
	// The oldest of the last β+1 requests sits at next; all β+1 fall within
	// the last minute exactly when it does.
	oldest := kl.times[kl.next]
	loaded := !oldest.IsZero() && now.Sub(oldest) < time.Minute
	if loaded && now.Sub(kl.lastPass) >= t.interval {
		loaded = false // the leak
	}
	if loaded {
		kl.loadedAnswers++
	} else {
		kl.lastPass = now
	}
	return loaded
}

func (t *loadTracker) snapshot(lk levelKey, now time.Time) KeyLoad {
	t.mu.Lock()
	defer t.mu.Unlock()
	kl := t.keys[lk]
	out := KeyLoad{Key: lk.key, Level: int(lk.level)}
	if kl == nil {
		return out
	}
	out.Gets, out.PutProbes, out.Stores, out.Local, out.LoadedAnswers = kl.gets, kl.probes, kl.stores, kl.local, kl.loadedAnswers
	out.LastMinute = kl.lastMin
	if now.Sub(kl.minute) >= 2*time.Minute {
		out.LastMinute = 0
	} else if now.Sub(kl.minute) >= time.Minute {
		out.LastMinute = kl.thisMin
	}
	// Would one more request now be loaded? All of the last β requests in
	// the last minute, and no leak due.
	n := len(kl.times)
	newest := kl.times[(kl.next+n-1)%n]
	oldestOfBeta := kl.times[(kl.next+1)%n]
	out.Loaded = !newest.IsZero() && !oldestOfBeta.IsZero() && now.Sub(oldestOfBeta) < time.Minute && now.Sub(kl.lastPass) < t.interval
	return out
}

// top returns up to n keys with the most requests in the last minute.
func (t *loadTracker) top(n int, now time.Time) []KeyLoad {
	t.mu.Lock()
	lks := make([]levelKey, 0, len(t.keys))
	for lk := range t.keys {
		lks = append(lks, lk)
	}
	t.mu.Unlock()
	out := make([]KeyLoad, 0, len(lks))
	for _, lk := range lks {
		out = append(out, t.snapshot(lk, now))
	}
	slices.SortFunc(out, func(a, b KeyLoad) int {
		if a.LastMinute != b.LastMinute {
			if a.LastMinute > b.LastMinute {
				return -1
			}
			return 1
		}
		return a.Key.Cmp(b.Key)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func (t *loadTracker) prune(before time.Time) {
	t.mu.Lock()
	t.pruneLocked(before)
	t.mu.Unlock()
}

func (t *loadTracker) pruneLocked(before time.Time) {
	for lk, kl := range t.keys {
		if kl.lastSeen.Before(before) {
			delete(t.keys, lk)
		}
	}
}
