package coraldht

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestLoadTrackerAsBefore: the pointer-free load tracker answers exactly
// as the one it replaced (a boundedMap of structs with time.Time fields,
// kept below as the model) through random requests of every kind, local
// and remote, on more keys than its bound, with snapshots, top lists and
// prunes, at times with and without a monotonic reading.
func TestLoadTrackerAsBefore(t *testing.T) {
	for _, c := range []struct{ beta, max, keys int }{{1, 50, 80}, {3, 50, 80}, {12, 300, 400}} {
		beta := c.beta
		rng := rand.New(rand.NewPCG(uint64(beta), 7))
		got, want := newLoadTracker(beta, c.max), newBoundedLoadTracker(beta, c.max)
		want.epoch = got.epoch
		now := time.Now()
		if beta == 3 {
			now = now.Round(0) // no monotonic reading: wall clock differences
		}
		keys := make([]levelKey, c.keys)
		for i := range keys {
			keys[i] = lk(fmt.Sprint(i))
			keys[i].level = uint8(i % 3)
		}
		for step := range 200000 {
			now = now.Add(time.Duration(rng.ExpFloat64() * float64(time.Second) / 4))
			k := keys[min(int(rng.ExpFloat64()*float64(c.keys)/8), len(keys)-1)]
			switch op := rng.IntN(100); {
			case op < 90:
				kind, local := requestKind(rng.IntN(3)), rng.IntN(4) == 0
				if g, w := got.request(k, kind, local, now), want.request(k, kind, local, now); g != w {
					t.Fatalf("β=%d step %d: request(%v) loaded %v, was %v", beta, step, k, g, w)
				}
			case op < 97:
				if g, w := got.snapshot(k, now), want.snapshot(k, now); g != w {
					t.Fatalf("β=%d step %d: snapshot %+v, was %+v", beta, step, g, w)
				}
			case op < 99:
				if g, w := got.top(10, now), want.top(10, now); !slices.Equal(g, w) {
					t.Fatalf("β=%d step %d: top %+v, was %+v", beta, step, g, w)
				}
			default:
				before := now.Add(-time.Duration(rng.IntN(120)) * time.Second)
				got.prune(before)
				want.prune(before)
				if got.n != want.keys.len() {
					t.Fatalf("β=%d step %d: %d keys after prune, was %d", beta, step, got.n, want.keys.len())
				}
			}
		}
	}
}

// boundedLoadTracker is the load tracker as it was (coraldht/load.go
// before its records left the boundedMap): the model.
type boundedLoadTracker struct {
	beta     int
	interval time.Duration // minute/β: the leak spacing
	// epoch is what request times are counted from (boundedKeyLoad.times): a
	// node tracks up to MaxTrackedKeys keys, and a ring of β+1 int64s is a
	// third of one of time.Time values.
	epoch time.Time

	mu   sync.Mutex
	keys *boundedMap[levelKey, struct{}, *boundedKeyLoad]
}

type boundedKeyLoad struct {
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

func newBoundedLoadTracker(beta, max int) *boundedLoadTracker {
	return &boundedLoadTracker{beta: beta, interval: time.Minute / time.Duration(beta), epoch: time.Now(), keys: newBoundedMap[levelKey, struct{}, *boundedKeyLoad](max, 0)}
}

// stamp is now as boundedKeyLoad.times keeps it (monotonic when now and the
// epoch both carry a monotonic reading, as time.Now's do).
func (t *boundedLoadTracker) stamp(now time.Time) int64 { return int64(now.Sub(t.epoch)) }

func (t *boundedLoadTracker) entryLocked(lk levelKey, now time.Time) *boundedKeyLoad {
	kl, ok := t.keys.get(lk)
	if !ok {
		kl = &boundedKeyLoad{times: make([]int64, t.beta+1), minute: now}
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
func (t *boundedLoadTracker) request(lk levelKey, kind requestKind, local bool, now time.Time) bool {
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

func (t *boundedLoadTracker) snapshot(lk levelKey, now time.Time) KeyLoad {
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
func (t *boundedLoadTracker) top(n int, now time.Time) []KeyLoad {
	t.mu.Lock()
	lks := make([]levelKey, 0, t.keys.len())
	t.keys.each(func(lk levelKey, _ *boundedKeyLoad) bool { lks = append(lks, lk); return true })
	t.mu.Unlock()
	out := make([]KeyLoad, 0, len(lks))
	for _, lk := range lks {
		out = append(out, t.snapshot(lk, now))
	}
	return busiest(out, n)
}

func (t *boundedLoadTracker) prune(before time.Time) {
	t.mu.Lock()
	t.pruneLocked(before)
	t.mu.Unlock()
}

// pruneLocked forgets the keys idle since before, idlest first.
func (t *boundedLoadTracker) pruneLocked(before time.Time) {
	for {
		lk, kl, ok := t.keys.oldest()
		if !ok || !kl.lastSeen.Before(before) {
			return
		}
		t.keys.remove(lk)
	}
}
