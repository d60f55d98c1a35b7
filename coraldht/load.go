package coraldht

import (
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
// Any member can name new keys, so the counters are a boundedMap: the key
// idle longest goes first, in constant time.
type loadTracker struct {
	beta     int
	interval time.Duration // minute/β: the leak spacing
	// epoch is what request times are counted from (keyLoad.times): a
	// node tracks up to MaxTrackedKeys keys, and a ring of β+1 int64s is a
	// third of one of time.Time values.
	epoch time.Time

	mu   sync.Mutex
	keys *boundedMap[levelKey, struct{}, *keyLoad]
}

type keyLoad struct {
	times    []int64 // ring of the last β+1 request times, ns since the tracker's epoch
	next     int32
	recorded int32     // request times in the ring, at most len(times)
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
	return &loadTracker{beta: beta, interval: time.Minute / time.Duration(beta), epoch: time.Now(), keys: newBoundedMap[levelKey, struct{}, *keyLoad](max, 0)}
}

// stamp is now as keyLoad.times keeps it (monotonic when now and the
// epoch both carry a monotonic reading, as time.Now's do).
func (t *loadTracker) stamp(now time.Time) int64 { return int64(now.Sub(t.epoch)) }

func (t *loadTracker) entryLocked(lk levelKey, now time.Time) *keyLoad {
	kl, ok := t.keys.get(lk)
	if !ok {
		kl = &keyLoad{times: make([]int64, t.beta+1), minute: now}
		t.keys.put(lk, struct{}{}, kl)
	} else {
		t.keys.touch(lk)
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
	stamp := t.stamp(now)
	kl.times[kl.next] = stamp
	kl.next = (kl.next + 1) % int32(len(kl.times))
	kl.recorded = min(kl.recorded+1, int32(len(kl.times)))
	// The oldest of the last β+1 requests sits at next; all β+1 fall within
	// the last minute exactly when it does.
	loaded := kl.recorded == int32(len(kl.times)) && time.Duration(stamp-kl.times[kl.next]) < time.Minute
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
	kl, ok := t.keys.get(lk)
	out := KeyLoad{Key: lk.key, Level: int(lk.level)}
	if !ok {
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
	n := int32(len(kl.times))
	oldestOfBeta := kl.times[(kl.next+1)%n]
	out.Loaded = kl.recorded >= n-1 && kl.recorded > 0 && time.Duration(t.stamp(now)-oldestOfBeta) < time.Minute && now.Sub(kl.lastPass) < t.interval
	return out
}

// top returns up to n keys with the most requests in the last minute.
func (t *loadTracker) top(n int, now time.Time) []KeyLoad {
	t.mu.Lock()
	lks := make([]levelKey, 0, t.keys.len())
	t.keys.each(func(lk levelKey, _ *keyLoad) bool { lks = append(lks, lk); return true })
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

// pruneLocked forgets the keys idle since before, idlest first.
func (t *loadTracker) pruneLocked(before time.Time) {
	for {
		lk, kl, ok := t.keys.oldest()
		if !ok || !kl.lastSeen.Before(before) {
			return
		}
		t.keys.remove(lk)
	}
}
