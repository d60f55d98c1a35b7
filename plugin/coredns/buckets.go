package coral

import (
	"crypto/rand"
	"net/netip"
	"sync"
)

// bucketTable is a fixed number of slots of per-key state (V), in sets of
// bucketWays chosen by a keyed hash of the key: a key not in the table
// takes its set's unused or least recently used slot, so the memory is
// the table's size whatever the traffic, and nobody who does not know the
// key can aim a flood of keys at the set of the key they want evicted.
// Response rate limiting (rrl.go) and the probe gate (proof.go) keep their
// accounts in one.
type bucketTable[V any] struct {
	sets []bucketSet[V]
	key  [16]byte
}

type bucketSet[V any] struct {
	mu    sync.Mutex
	slots [bucketWays]bucketSlot[V]
}

type bucketSlot[V any] struct {
	id   bucketID
	last int64 // when last used (the caller's clock, > 0); 0: unused
	v    V
}

// bucketWays is the number of slots per set.
const bucketWays = 4

// bucketID is a key: an address (16 octets) and a category.
type bucketID [17]byte

func makeBucketID(a netip.Addr, cat uint8) bucketID {
	var id bucketID
	a16 := a.As16()
	copy(id[:], a16[:])
	id[16] = cat
	return id
}

// newBucketTable makes a table of at least size slots (a power of two
// number of sets).
func newBucketTable[V any](size int) *bucketTable[V] {
	sets := 1
	for sets*bucketWays < size {
		sets *= 2
	}
	t := &bucketTable[V]{sets: make([]bucketSet[V], sets)}
	_, _ = rand.Read(t.key[:])
	return t
}

// peek runs f on id's state under its set's lock when the table holds
// it, without making it recently used; it reports whether it did.
func (t *bucketTable[V]) peek(id bucketID, f func(v *V)) bool {
	s := &t.sets[siphash24(t.key, id[:])&uint64(len(t.sets)-1)]
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.slots {
		if b := &s.slots[i]; b.last != 0 && b.id == id {
			f(&b.v)
			return true
		}
	}
	return false
}

// update runs f on id's state under its set's lock, at now (> 0); fresh
// says the state is new (zero). It returns what f returns.
func (t *bucketTable[V]) update(id bucketID, now int64, f func(v *V, fresh bool) bool) bool {
	s := &t.sets[siphash24(t.key, id[:])&uint64(len(t.sets)-1)]
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := &s.slots[0]
	found := false
	for i := range s.slots {
		b := &s.slots[i]
		if b.last != 0 && b.id == id {
			slot, found = b, true
			break
		}
		if b.last < slot.last {
			slot = b
		}
	}
	if !found {
		var zero V
		slot.id, slot.v = id, zero
	}
	slot.last = now
	return f(&slot.v, !found)
}
