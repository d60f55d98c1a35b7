package proxy

import (
	"context"
	"encoding/hex"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/internal/offheap"
)

// References keeps the long-lived DSHT references this proxy has put for
// the objects it holds, and renews each one when its TTL runs out, but only
// if the object was requested since the last put: a reference to an
// object nobody wants lapses on its own. It lives with the cache (across
// reloads), not with one proxy configuration.
//
// A node holds a reference for about every object it caches, so the table
// is sized like diskcache's index: 32 bytes per reference, no Go pointer,
// string or map entry per reference (see "Memory" in the package docs).
// A reference is known by its object's cache key, 40 lowercase hex digits
// (a SHA-1), kept as its 20 bytes; what was put is the same for every
// reference but its flags (this proxy's HTTP and DSHT addresses), so an
// entry names it by a small number (peers).
//
// Every hit notes its request (touch): it takes its shard's lock for
// reading and sets a bit atomically, and only the first request after a
// put writes. put, Forget and due take a shard's lock for writing.
type References struct {
	shards *[refShards]refShard
	// epoch is when the table was made: entries keep times as seconds
	// since it (monotonic, so a clock step moves no renewal).
	epoch time.Time
	store *diskcache.Store
	// node finds the node running now (Config.Node): the table outlives
	// configurations, and so restarts of the node.
	node func() DHT

	peersMu sync.Mutex
	peers   []reference // what entries' peer numbers name; only grows

	cancel context.CancelFunc
	done   chan struct{}
}

// refShards is how many independently locked parts the table has: hits
// on different objects rarely wait for one another, and a renewal pass
// holds one part at a time.
const refShards = 64

// A refShard is an open-addressing table of entries (linear probing,
// backward-shift deletion), at most 3/4 full, off the Go heap.
type refShard struct {
	mu    sync.RWMutex
	seed  maphash.Seed // the table's: one hash chooses the shard and the slot
	slots []refEntry   // offheap.Make; empty slots have state 0
	n     int
	_     [64]byte // the next shard's lock on another cache line
}

// refEntry is one reference: 32 bytes, no pointers.
type refEntry struct {
	key [sha1Len]byte
	// dueAt is when to put it again, seconds since epoch (its put plus
	// its TTL less renewAhead).
	dueAt uint32
	ttl   uint32 // seconds
	// state is refLive | refRequested | refNegativeEntry | peer<<refPeerShift;
	// 0 for an empty slot. touch sets refRequested atomically under the
	// shard's read lock; everything else changes under its write lock.
	state uint32
}

const (
	sha1Len = 20

	refLive          = 1 << 0
	refRequested     = 1 << 1 // since the last put
	refNegativeEntry = 1 << 2 // the reference's Negative flag
	refPeerShift     = 8
	// maxRefPeers bounds the distinct (HTTP, DSHT) address pairs named:
	// they change only when the node restarts on other addresses.
	maxRefPeers = 1 << (32 - refPeerShift)
)

// refRenewal is a reference to put again.
type refRenewal struct {
	key string
	ref reference
	ttl time.Duration
}

// renewAhead is how long before a reference expires it is renewed.
const renewAhead = 2 * time.Minute

// NewReferences is the reference table of store, whose references are put
// through the node that node returns (Config.Node; nil: never a node). Run
// starts renewing them.
func NewReferences(store *diskcache.Store, node func() DHT) *References {
	t := &References{shards: new([refShards]refShard), epoch: time.Now(), store: store, node: node}
	seed := maphash.MakeSeed()
	for i := range t.shards {
		t.shards[i].seed = seed
	}
	// The tables are outside the Go heap: give them back when the table
	// is gone (a Proxy or a renewal in progress keeps it reachable).
	runtime.AddCleanup(t, func(shards *[refShards]refShard) {
		for i := range shards {
			offheap.Free(shards[i].slots)
		}
	}, t.shards)
	return t
}

// dhtNode is the node to put references through now, or nil.
func (t *References) dhtNode() DHT {
	if t.node == nil {
		return nil
	}
	return t.node()
}

// refKey is key's 20 bytes, if key is a cache key (coralname.CacheKey).
func refKey(key string) ([sha1Len]byte, bool) { return coralname.ParseCacheKey(key) }

// locate returns k's shard and hash.
func (t *References) locate(k *[sha1Len]byte) (*refShard, uint64) {
	h := t.shards[0].hash(k)
	return &t.shards[h>>(64-6)], h
}

// now is the time in the table's seconds.
func (t *References) now() int64 { return int64(time.Since(t.epoch) / time.Second) }

// peerNumber is the number that names r's addresses, or false when the
// table names too many.
func (t *References) peerNumber(r reference) (uint32, bool) {
	t.peersMu.Lock()
	defer t.peersMu.Unlock()
	for i, p := range t.peers {
		if p.Addr == r.Addr && p.DHT == r.DHT {
			return uint32(i), true
		}
	}
	if len(t.peers) >= maxRefPeers {
		return 0, false
	}
	t.peers = append(t.peers, reference{Addr: r.Addr, DHT: r.DHT, Complete: true})
	return uint32(len(t.peers) - 1), true
}

// put records a reference just put for key (a complete one: publish puts
// no other). A key that is not a cache key is not kept, and its reference
// lapses at its TTL.
func (t *References) put(key string, ref reference, ttl time.Duration) {
	if t == nil {
		return
	}
	k, ok := refKey(key)
	if !ok {
		return
	}
	peer, ok := t.peerNumber(ref)
	if !ok {
		return
	}
	ttlSec := min(int64(ttl/time.Second), 1<<32-1)
	state := uint32(refLive) | peer<<refPeerShift
	if ref.Negative {
		state |= refNegativeEntry
	}
	sh, h := t.locate(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(&k, h)
	if e == nil {
		e = sh.add(&k, h)
	}
	*e = refEntry{key: k, dueAt: dueAt(t.now(), ttlSec), ttl: uint32(ttlSec), state: state}
}

// Forget stops renewing the reference put for key: its object was purged
// (it makes *References a purge.RefTable). The reference already in the
// DSHT runs out on its own (at most refGoodTTL); a proxy that follows it
// meanwhile gets 504 from this one (only-if-cached) and moves on. It
// reports whether there was one.
func (t *References) Forget(key string) bool {
	if t == nil {
		return false
	}
	k, ok := refKey(key)
	if !ok {
		return false
	}
	sh, h := t.locate(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(&k, h)
	if e == nil {
		return false
	}
	sh.remove(e)
	return true
}

// Len is how many references the table renews (for the admin API).
func (t *References) Len() int {
	if t == nil {
		return 0
	}
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.RLock()
		n += sh.n
		sh.mu.RUnlock()
	}
	return n
}

// Bytes is the memory the table's entries take (its slots, used or not).
func (t *References) Bytes() int64 {
	if t == nil {
		return 0
	}
	var b int64
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.RLock()
		b += int64(len(sh.slots)) * refEntrySize
		sh.mu.RUnlock()
	}
	return b
}

// refEntrySize is unsafe.Sizeof(refEntry{}) (TestRefEntrySize).
const refEntrySize = 32

// touch notes that key was requested.
func (t *References) touch(key string) {
	if t == nil {
		return
	}
	k, ok := refKey(key)
	if !ok {
		return
	}
	sh, h := t.locate(&k)
	sh.mu.RLock()
	if e := sh.find(&k, h); e != nil && atomic.LoadUint32(&e.state)&refRequested == 0 {
		// Only the first request after a put writes: the entry's cache
		// line is not bounced between CPUs on every hit.
		atomic.OrUint32(&e.state, refRequested)
	}
	sh.mu.RUnlock()
}

// due calls renew with the references of one shard at a time that are to
// be renewed now, and forgets those that lapse (not requested since their
// put, or no longer cached), until renew returns false. renew runs with
// no lock held, and a shard's batch is all that is held at once (a node
// renewing a million references does not allocate for all of them).
func (t *References) due(renew func([]refRenewal) bool) {
	var batch []refRenewal
	for i := range t.shards {
		batch = t.dueIn(&t.shards[i], batch[:0])
		if len(batch) > 0 && !renew(batch) {
			return
		}
	}
}

// dueIn appends the renewals due in sh to out.
func (t *References) dueIn(sh *refShard, out []refRenewal) []refRenewal {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := t.now()
	for i := 0; i < len(sh.slots); {
		e := &sh.slots[i]
		if e.state&refLive == 0 || now < int64(e.dueAt) {
			i++
			continue
		}
		key := hex.EncodeToString(e.key[:])
		// Under the write lock: a request after this point counts for
		// the next renewal, not this one.
		_, cached := t.store.Stat(key) // the index alone: no disk read under the lock
		if e.state&refRequested == 0 || !cached {
			// Backward-shift deletion may move a later entry into slot
			// i: look at i again.
			sh.remove(e)
			continue
		}
		e.state &^= refRequested
		e.dueAt = dueAt(now, int64(e.ttl))
		out = append(out, refRenewal{key: key, ref: t.referenceOf(e), ttl: time.Duration(e.ttl) * time.Second})
		i++
	}
	return out
}

// dueAt is when a reference put at now (table seconds) for ttl seconds is
// to be put again: renewAhead before it runs out (now, if it runs out
// sooner).
func dueAt(now, ttl int64) uint32 {
	return uint32(min(max(now+ttl-int64(renewAhead/time.Second), now), 1<<32-1))
}

// referenceOf is the reference e records.
func (t *References) referenceOf(e *refEntry) reference {
	t.peersMu.Lock()
	r := t.peers[e.state>>refPeerShift]
	t.peersMu.Unlock()
	r.Negative = e.state&refNegativeEntry != 0
	return r
}

// home is the first slot to look for hash h in a table of n slots.
func home(h uint64, n int) int {
	// The low 58 bits (the top 6 chose the shard), scaled to [0, n).
	return int((h << 6 >> 32) * uint64(n) >> 32)
}

// find returns the entry of k, or nil. Under mu (either way).
func (sh *refShard) find(k *[sha1Len]byte, h uint64) *refEntry {
	n := len(sh.slots)
	if n == 0 {
		return nil
	}
	for i := home(h, n); ; i = next(i, n) {
		e := &sh.slots[i]
		if atomic.LoadUint32(&e.state)&refLive == 0 {
			return nil
		}
		if e.key == *k {
			return e
		}
	}
}

func next(i, n int) int {
	if i++; i == n {
		return 0
	}
	return i
}

// add returns an empty slot for k, which has none, growing the table
// first if it is full. Under mu for writing.
func (sh *refShard) add(k *[sha1Len]byte, h uint64) *refEntry {
	if 4*(sh.n+1) > 3*len(sh.slots) {
		sh.grow()
	}
	sh.n++
	return sh.slot(h)
}

// slot returns the first empty slot from h's home.
func (sh *refShard) slot(h uint64) *refEntry {
	n := len(sh.slots)
	i := home(h, n)
	for sh.slots[i].state&refLive != 0 {
		i = next(i, n)
	}
	return &sh.slots[i]
}

// grow moves the entries into a table half as large again. Under mu for
// writing.
func (sh *refShard) grow() {
	old := sh.slots
	sh.slots = offheap.Make[refEntry](max(64, len(old)+len(old)/2))
	for i := range old {
		if old[i].state&refLive != 0 {
			*sh.slot(sh.hash(&old[i].key)) = old[i]
		}
	}
	offheap.Free(old)
}

// hash is k's hash, whose top bits chose this shard.
func (sh *refShard) hash(k *[sha1Len]byte) uint64 { return maphash.Bytes(sh.seed, k[:]) }

// remove empties e's slot, moving later members of its probe run back
// into the hole when their home is not between the hole and them. Under
// mu for writing.
func (sh *refShard) remove(e *refEntry) {
	n := len(sh.slots)
	i := int((uintptr(unsafe.Pointer(e)) - uintptr(unsafe.Pointer(&sh.slots[0]))) / refEntrySize)
	for j := next(i, n); sh.slots[j].state&refLive != 0; j = next(j, n) {
		h := home(sh.hash(&sh.slots[j].key), n)
		// Move j to i when i lies cyclically in [h, j): the entry's probe
		// run from h passes the hole.
		if (j-h+n)%n >= (j-i+n)%n {
			sh.slots[i] = sh.slots[j]
			i = j
		}
	}
	sh.slots[i] = refEntry{}
	sh.n--
}

// Run renews references every interval until Stop.
func (t *References) Run(interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel, t.done = cancel, make(chan struct{})
	go func() {
		defer close(t.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			t.due(func(batch []refRenewal) bool {
				for _, r := range batch {
					pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
					if node := t.dhtNode(); node != nil {
						_, _ = node.Put(pctx, coraldht.KeyFor(r.key), r.ref.encode(), r.ttl)
					}
					pcancel()
				}
				return ctx.Err() == nil
			})
		}
	}()
}

// Stop ends what Run started and waits for it.
func (t *References) Stop() {
	if t.cancel != nil {
		t.cancel()
		<-t.done
	}
}
