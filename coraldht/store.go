package coraldht

import (
	"bytes"
	"container/heap"
	"math/rand/v2"
	"net/netip"
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
// each with its own expiry. See Config.FullValues, MaxValues, MaxKeys,
// MaxStoreBytes and SourceShare for the rules it enforces.
//
// Every value is charged to a holder: the source IP address of the store
// that brought it, and that address's /24 (/48); this node's own puts
// are charged to itself. A source may hold its share of the bounds (a
// prefix twice that, one key half of l); beyond it, its own soonest-
// expiring value makes room. When a bound of the whole store is reached,
// the value to go is the soonest-expiring of the source holding the most
// values, whatever its lifetime: a member filling the store with values
// of the longest lifetime evicts its own, not those of the honest nodes
// that share its /24 (a member spreading over many addresses of its /24
// is held to the prefix's share).
type store struct {
	l         int
	maxValues int
	maxKeys   int
	maxBytes  int
	share     float64
	trust     bool // TrustMembers: the rule of before (evict only what expires sooner), no shares

	mu       sync.Mutex
	keys     map[levelKey]*keyEntry
	byExpiry valueHeap // every stored value, soonest expiry first
	bytes    int
	sources  map[netip.Addr]*holder
	prefixes map[netip.Prefix]*holder
	largest  holderHeap // sources, most values first

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
	from   holderID
	idx    [heapSlots]int // in byExpiry, its source's and its prefix's heaps
}

// holderID is who a value is charged to: the source IP address of the
// store (the zero Addr: this node itself), and in identity mode the
// certificate it came under.
type holderID struct {
	ip     netip.Addr
	serial uint64
}

func (h holderID) self() bool { return !h.ip.IsValid() }

func (h holderID) prefix() netip.Prefix {
	if h.self() {
		return netip.Prefix{}
	}
	return SitePrefix(h.ip)
}

// holder is what one source or one prefix holds.
type holder struct {
	values, bytes int
	heap          valueHeap // its values, soonest expiry first
	prefix        netip.Prefix
	hidx          int // in store.largest (sources only)
}

// Heap slots of a value: which of its indexes a valueHeap maintains.
const (
	slotExpiry = iota
	slotSource
	slotPrefix
	heapSlots
)

func newStore(cfg Config) *store {
	return &store{l: cfg.FullValues, maxValues: cfg.MaxValues, maxKeys: cfg.MaxKeys, maxBytes: cfg.MaxStoreBytes,
		share: cfg.SourceShare, trust: cfg.TrustMembers, keys: make(map[levelKey]*keyEntry),
		byExpiry: valueHeap{slot: slotExpiry}, sources: make(map[netip.Addr]*holder), prefixes: make(map[netip.Prefix]*holder)}
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

// put tries to store data under lk for ttl, charged to h. It returns the
// result code, the key's state afterwards, the values that were present
// before other than data itself (the "get" half of put+get), and whether
// h's share made one of its own values give way.
func (s *store) put(lk levelKey, data []byte, ttl time.Duration, now time.Time, h holderID) (result uint8, after keyStatus, before []wire.Value, quota bool) {
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
					s.fixLocked(v)
				}
				s.counters.Refreshed++
				return wire.StoreRefreshed, s.statusLocked(lk, now), before, false
			}
		}
		if ks := s.statusLocked(lk, now); ks.full(s.l, ttl) {
			s.counters.RefusedFull++
			return wire.StoreFull, ks, before, false
		}
		if len(e.values) >= s.l {
			// Not full for this value: some value expires before half its
			// lifetime. Make room by evicting the one expiring soonest.
			s.removeLocked(slices.MinFunc(e.values, byExpiry))
			s.counters.EvictedForNewer++
		}
	}
	if s.trust {
		if !s.boundsOfBeforeLocked(lk, expiry) {
			s.counters.RefusedExhausted++
			return wire.StoreExhausted, s.statusLocked(lk, now), before, false
		}
	} else {
		quota = s.shareLocked(lk, h, len(data))
		s.boundsLocked(lk, len(data))
	}
	e = s.keys[lk]
	if e == nil {
		e = &keyEntry{lk: lk}
		s.keys[lk] = e
	}
	s.addLocked(&storedValue{data: bytes.Clone(data), expiry: expiry, entry: e, from: h})
	s.counters.Stored++
	return wire.StoreStored, s.statusLocked(lk, now), before, quota
}

func byExpiry(a, b *storedValue) int { return a.expiry.Compare(b.expiry) }

// shareLocked makes room within h's share for a value of size bytes
// under lk: h's own soonest-expiring values give way, first under the
// key, then of the source, then of its prefix. It reports whether any did.
func (s *store) shareLocked(lk levelKey, h holderID, size int) (quota bool) {
	if h.self() {
		return false
	}
	if e := s.keys[lk]; e != nil {
		var own []*storedValue
		for _, v := range e.values {
			if v.from.ip == h.ip {
				own = append(own, v)
			}
		}
		if len(own) >= max(1, s.l/2) {
			s.removeLocked(slices.MinFunc(own, byExpiry))
			quota = true
		}
	}
	values := max(1, int(s.share*float64(min(s.maxValues, s.maxKeys))))
	size64 := max(size, int(s.share*float64(s.maxBytes)))
	for _, c := range []struct {
		h              *holder
		values, nbytes int
	}{{s.sources[h.ip], values, size64}, {s.prefixes[h.prefix()], 2 * values, 2 * size64}} {
		for c.h != nil && c.h.values > 0 && (c.h.values >= c.values || c.h.bytes+size > c.nbytes) {
			s.removeLocked(c.h.heap.vs[0])
			quota = true
		}
	}
	if quota {
		s.counters.EvictedForShare++
	}
	return quota
}

// boundsLocked makes room in the whole store for a value of size bytes
// under lk: the soonest-expiring value of the source holding the most
// gives way, as often as needed.
func (s *store) boundsLocked(lk levelKey, size int) {
	for s.overLocked(lk, size) && s.largest.Len() > 0 {
		s.removeLocked(s.largest[0].heap.vs[0])
		s.counters.EvictedForSpace++
	}
}

func (s *store) overLocked(lk levelKey, size int) bool {
	return (s.keys[lk] == nil && len(s.keys) >= s.maxKeys) || s.byExpiry.Len() >= s.maxValues || s.bytes+size > s.maxBytes
}

// boundsOfBeforeLocked is the rule before issue 35, for TrustMembers:
// displace whatever expires soonest in the whole store, but never
// something that outlives the newcomer.
func (s *store) boundsOfBeforeLocked(lk levelKey, expiry time.Time) bool {
	for s.overLocked(lk, 0) {
		if s.byExpiry.Len() == 0 || !s.byExpiry.vs[0].expiry.Before(expiry) {
			return false
		}
		victim := s.byExpiry.vs[0]
		if s.keys[lk] == nil && len(s.keys) >= s.maxKeys {
			for e := victim.entry; len(e.values) > 0; {
				s.removeLocked(e.values[0])
				s.counters.EvictedForSpace++
			}
		} else {
			s.removeLocked(victim)
			s.counters.EvictedForSpace++
		}
	}
	return true
}

// putForced stores like a plain DHT: the value always goes in, evicting the
// key's soonest-expiring value if the key is at capacity. Only PlainDHT
// nodes use it.
func (s *store) putForced(lk levelKey, data []byte, ttl time.Duration, now time.Time, h holderID) (uint8, keyStatus, []wire.Value, bool) {
	s.mu.Lock()
	if e := s.keys[lk]; e != nil && len(e.values) >= s.l {
		present := false
		for _, v := range e.values {
			present = present || bytes.Equal(v.data, data)
		}
		if !present {
			s.removeLocked(slices.MinFunc(e.values, byExpiry))
			s.counters.EvictedForNewer++
		}
	}
	s.mu.Unlock()
	return s.put(lk, data, ttl, now, h)
}

// holdersLocked returns v's source and prefix holders, creating them.
func (s *store) holdersLocked(v *storedValue) (src, pre *holder) {
	if src = s.sources[v.from.ip]; src == nil {
		src = &holder{heap: valueHeap{slot: slotSource}}
		s.sources[v.from.ip] = src
		heap.Push(&s.largest, src)
	}
	p := v.from.prefix()
	if pre = s.prefixes[p]; pre == nil {
		pre = &holder{heap: valueHeap{slot: slotPrefix}, prefix: p}
		s.prefixes[p] = pre
	}
	return src, pre
}

func (s *store) addLocked(v *storedValue) {
	v.entry.values = append(v.entry.values, v)
	heap.Push(&s.byExpiry, v)
	src, pre := s.holdersLocked(v)
	heap.Push(&src.heap, v)
	heap.Push(&pre.heap, v)
	n := len(v.data)
	s.bytes += n
	src.values, src.bytes = src.values+1, src.bytes+n
	pre.values, pre.bytes = pre.values+1, pre.bytes+n
	heap.Fix(&s.largest, src.hidx)
}

// fixLocked restores the heaps after v's expiry changed.
func (s *store) fixLocked(v *storedValue) {
	heap.Fix(&s.byExpiry, v.idx[slotExpiry])
	src, pre := s.holdersLocked(v)
	heap.Fix(&src.heap, v.idx[slotSource])
	heap.Fix(&pre.heap, v.idx[slotPrefix])
}

func (s *store) removeLocked(v *storedValue) {
	heap.Remove(&s.byExpiry, v.idx[slotExpiry])
	src, pre := s.holdersLocked(v)
	heap.Remove(&src.heap, v.idx[slotSource])
	heap.Remove(&pre.heap, v.idx[slotPrefix])
	n := len(v.data)
	s.bytes -= n
	src.values, src.bytes = src.values-1, src.bytes-n
	pre.values, pre.bytes = pre.values-1, pre.bytes-n
	if src.values == 0 {
		heap.Remove(&s.largest, src.hidx)
		delete(s.sources, v.from.ip)
	} else {
		heap.Fix(&s.largest, src.hidx)
	}
	if pre.values == 0 {
		delete(s.prefixes, pre.prefix)
	}
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
	for s.byExpiry.Len() > 0 && !s.byExpiry.vs[0].expiry.After(now) {
		s.removeLocked(s.byExpiry.vs[0])
		s.counters.Expired++
	}
}

func (s *store) expire(now time.Time) {
	s.mu.Lock()
	s.expireLocked(now)
	s.mu.Unlock()
}

// dropWhere forgets every value drop selects: those of a level after a
// cluster change (the old cluster's data no longer belongs here), those
// of a revoked certificate. It returns how many went.
func (s *store) dropWhere(drop func(*storedValue) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []*storedValue
	for _, v := range s.byExpiry.vs {
		if drop(v) {
			gone = append(gone, v)
		}
	}
	for _, v := range gone {
		s.removeLocked(v)
	}
	return len(gone)
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

// valueHeap orders values soonest expiry first, keeping each value's
// index for its slot.
type valueHeap struct {
	vs   []*storedValue
	slot int
}

func (h valueHeap) Len() int           { return len(h.vs) }
func (h valueHeap) Less(i, j int) bool { return h.vs[i].expiry.Before(h.vs[j].expiry) }
func (h valueHeap) Swap(i, j int) {
	h.vs[i], h.vs[j] = h.vs[j], h.vs[i]
	h.vs[i].idx[h.slot], h.vs[j].idx[h.slot] = i, j
}
func (h *valueHeap) Push(x any) {
	v := x.(*storedValue)
	v.idx[h.slot] = len(h.vs)
	h.vs = append(h.vs, v)
}
func (h *valueHeap) Pop() any {
	v := h.vs[len(h.vs)-1]
	h.vs[len(h.vs)-1] = nil
	h.vs = h.vs[:len(h.vs)-1]
	return v
}

// holderHeap orders sources most values first.
type holderHeap []*holder

func (h holderHeap) Len() int           { return len(h) }
func (h holderHeap) Less(i, j int) bool { return h[i].values > h[j].values }
func (h holderHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *holderHeap) Push(x any) {
	p := x.(*holder)
	p.hidx = len(*h)
	*h = append(*h, p)
}
func (h *holderHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return p
}
