package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// References keeps the long-lived DSHT references this proxy has put for
// the objects it holds, and renews each one when its TTL runs out, but only
// if the object was requested since the last put: a reference to an
// object nobody wants lapses on its own. It lives with the cache (across
// reloads), not with one proxy configuration.
//
// A node holds a reference for about every object it caches, so what a
// reference needs is kept in its object's entry of the disk cache's index
// (a diskcache mark, 8 bytes): when to put it again, its TTL, whether it
// was requested since, its Negative flag, and a small number naming what
// was put, the same for every reference but its flags (this proxy's HTTP
// and DSHT addresses: peers). No table, key or Go object per reference
// (see "Memory" in the package docs). A reference goes with its object:
// one evicted or purged is not renewed, as it would not be anyway. Only a
// cache key (40 lowercase hex digits, coralname.CacheKey) is kept; any
// other reference lapses at its TTL.
//
// Every hit notes its request (touchFirst): the first after a put looks
// its entry up again under the store's lock and sets a bit; later ones
// see the bit in the mark their look-up returned and do nothing.
type References struct {
	// epoch is when the table was made: marks keep times as seconds
	// since it (monotonic, so a clock step moves no renewal).
	epoch time.Time
	store *diskcache.Store
	// node finds the node running now (Config.Node): the table outlives
	// configurations, and so restarts of the node.
	node func() DHT

	peersMu sync.Mutex
	peers   []reference // what marks' peer numbers name; only grows

	cancel context.CancelFunc
	done   chan struct{}
}

// A reference's mark (diskcache.Store.SetMark): bits 0-31 when to put it
// again (dueAt), 32-51 its TTL in seconds, then refLive (so a mark is
// never 0), refRequested, refNegativeEntry, and the peer number.
const (
	refTTLShift = 32
	// maxRefTTL is the longest TTL a mark holds (about 12 days; a
	// reference lives at most refGoodTTL).
	maxRefTTL = 1<<20 - 1

	refLive          = 1 << 52
	refRequested     = 1 << 53 // since the last put
	refNegativeEntry = 1 << 54 // the reference's Negative flag
	refPeerShift     = 55
	// maxRefPeers bounds the distinct (HTTP, DSHT) address pairs named:
	// they change only when the node restarts on other addresses.
	maxRefPeers = 1 << (64 - refPeerShift)
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
// starts renewing them. With a nil store it keeps nothing.
func NewReferences(store *diskcache.Store, node func() DHT) *References {
	return &References{epoch: time.Now(), store: store, node: node}
}

// dhtNode is the node to put references through now, or nil.
func (t *References) dhtNode() DHT {
	if t.node == nil {
		return nil
	}
	return t.node()
}

// keeps reports whether t keeps key's reference: key is a cache key
// (coralname.CacheKey) and there is a store to keep it in.
func (t *References) keeps(key string) bool {
	if t == nil || t.store == nil {
		return false
	}
	_, ok := coralname.ParseCacheKey(key)
	return ok
}

// now is the time in the table's seconds.
func (t *References) now() int64 { return int64(time.Since(t.epoch) / time.Second) }

// peerNumber is the number that names r's addresses, or false when the
// table names too many.
func (t *References) peerNumber(r reference) (uint64, bool) {
	t.peersMu.Lock()
	defer t.peersMu.Unlock()
	for i, p := range t.peers {
		if p.Addr == r.Addr && p.DHT == r.DHT {
			return uint64(i), true
		}
	}
	if len(t.peers) >= maxRefPeers {
		return 0, false
	}
	t.peers = append(t.peers, reference{Addr: r.Addr, DHT: r.DHT, Complete: true})
	return uint64(len(t.peers) - 1), true
}

// put records a reference just put for key (a complete one: publish puts
// no other) in its object's mark. A key that is not a cache key, or whose
// object is no longer cached, is not kept, and its reference lapses at
// its TTL.
func (t *References) put(key string, ref reference, ttl time.Duration) {
	if !t.keeps(key) {
		return
	}
	peer, ok := t.peerNumber(ref)
	if !ok {
		return
	}
	ttlSec := min(int64(ttl/time.Second), maxRefTTL)
	mark := refLive | peer<<refPeerShift | uint64(ttlSec)<<refTTLShift | uint64(dueAt(t.now(), ttlSec))
	if ref.Negative {
		mark |= refNegativeEntry
	}
	t.store.SetMark(key, mark)
}

// Forget stops renewing the reference put for key: its object was purged
// (it makes *References a purge.RefTable). The reference already in the
// DSHT runs out on its own (at most refGoodTTL); a proxy that follows it
// meanwhile gets 504 from this one (only-if-cached) and moves on. It
// reports whether there was one.
func (t *References) Forget(key string) bool {
	if !t.keeps(key) {
		return false
	}
	old, _ := t.store.SetMark(key, 0)
	return old != 0
}

// Len is how many references the table renews (for the admin API).
func (t *References) Len() int {
	if t == nil || t.store == nil {
		return 0
	}
	return t.store.Marked()
}

// touch notes that key was requested.
func (t *References) touch(key string) {
	if t.keeps(key) {
		t.store.AddMarkBits(key, refRequested)
	}
}

// touchFirst notes that key was requested unless seen, key's mark as the
// request's look-up found it (diskcache.Reader.Mark), shows no reference
// or one already requested since its put: only the first hit after a put
// takes the store's lock again.
func (t *References) touchFirst(key string, seen uint64) {
	if seen&refLive != 0 && seen&refRequested == 0 {
		t.touch(key)
	}
}

// has reports whether t renews a reference for key.
func (t *References) has(key string) bool {
	return t.keeps(key) && t.store.Mark(key) != 0
}

// due calls renew with the references that are to be renewed now, a few
// thousand of the store's index slots at a time, and forgets those that
// lapse (not requested since their put), until renew returns false.
// renew runs with no lock held, and one batch is all that is held at once
// (a node renewing a million references does not allocate for all of
// them).
func (t *References) due(renew func([]refRenewal) bool) {
	if t.store == nil {
		return
	}
	var batch []refRenewal
	var now int64
	visit := func(o diskcache.MarkedObject, mark uint64) uint64 {
		if now < int64(uint32(mark)) {
			return mark
		}
		// Under the store's lock: a request after this point counts for
		// the next renewal, not this one.
		if mark&refRequested == 0 {
			return 0
		}
		ttl := int64(mark>>refTTLShift) & maxRefTTL
		batch = append(batch, refRenewal{key: o.Key(), ref: t.referenceOf(mark), ttl: time.Duration(ttl) * time.Second})
		return mark&^(refRequested|(1<<refTTLShift-1)) | uint64(dueAt(now, ttl))
	}
	for from := 0; from >= 0; {
		batch, now = batch[:0], t.now()
		from = t.store.UpdateMarks(from, visit)
		if len(batch) > 0 && !renew(batch) {
			return
		}
	}
}

// dueAt is when a reference put at now (table seconds) for ttl seconds is
// to be put again: renewAhead before it runs out (now, if it runs out
// sooner).
func dueAt(now, ttl int64) uint32 {
	return uint32(min(max(now+ttl-int64(renewAhead/time.Second), now), 1<<32-1))
}

// referenceOf is the reference mark records.
func (t *References) referenceOf(mark uint64) reference {
	t.peersMu.Lock()
	r := t.peers[mark>>refPeerShift]
	t.peersMu.Unlock()
	r.Negative = mark&refNegativeEntry != 0
	return r
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
