package coraldht

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht/memnet"
)

// TestPutWalkReachesNearestNodeLast: a put's forward walk contacts the
// key's nearest node only for the key itself, never as the hop toward an
// intermediate target, so every walk comes to it from a node near it
// (which, on a hot key, throttles it); and the put still reaches it.
// Before the rule, walks whose first intermediate target fell in the empty
// region around the nearest node went straight to it.
func TestPutWalkReachesNearestNodeLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 20
		tn := newTestNet(t, n, memnet.Config{Latency: pairLatency(time.Millisecond, 5*time.Millisecond)}, func(i int, c *Config) {
			c.Alpha, c.BucketSize, c.Replicas = 1, 12, 2
		})
		tn.meshAll()
		var ids []ID
		for _, nd := range tn.nodes {
			ids = append(ids, nd.ID())
		}
		// Every put probe the nearest node receives must aim at the key.
		var mu sync.Mutex
		var wrongTarget []string
		rng := rand.New(rand.NewPCG(21, 21))
		straight := 0
		for trial := range 60 {
			origin := tn.nodes[rng.IntN(n)]
			key := randID(rng)
			others := slices.DeleteFunc(slices.Clone(ids), func(id ID) bool { return id == origin.ID() })
			byDistance := slices.SortedFunc(slices.Values(ids), func(x, y ID) int { return CompareDistance(key, x, y) })
			nearest := byDistance[0]
			if origin.ID() == nearest {
				continue // its walk ends in the close phase
			}
			if literal := paperPath(origin.ID(), key, others, 1, 2); len(literal) > 1 && literal[1] == nearest {
				straight++
			}
			tn.byID()[nearest].TraceRequests(func(r RequestTrace) {
				if r.Type == "put_probe" && r.Target != key {
					mu.Lock()
					wrongTarget = append(wrongTarget, fmt.Sprintf("trial %d: target %v", trial, r.Target.Short()))
					mu.Unlock()
				}
			})
			r := origin.lookup(context.Background(), lookupParams{level: 0, key: key, kind: lookupPut, ttl: time.Minute, start: origin.ID(), closing: 2})
			tn.byID()[nearest].TraceRequests(nil)
			if !slices.ContainsFunc(r.answered, func(c *candidate) bool { return c.ID == nearest }) {
				t.Fatalf("trial %d: put walk never reached the nearest node %v", trial, nearest.Short())
			}
		}
		if len(wrongTarget) > 0 {
			t.Fatalf("the nearest node was the hop toward an intermediate target: %v", wrongTarget)
		}
		if straight == 0 {
			t.Fatal("no trial where the literal rule jumps straight to the nearest node: the test proves nothing")
		}
		t.Logf("%d of 60 walks would have gone straight to the nearest node", straight)
	})
}

// TestPutWalkSpreadsHops: the walks of one putter on one key do not all
// take the same hop toward a target short of the key: each draws it among
// the k good nodes nearest that target that share with the key the bits
// the walk has fixed.
// With the nearest-node rule every leaked put of a hot key's putter went to
// the same node, which was the busiest node of eval/hotspot (15–20 putters'
// leaks, 160–354 put RPCs a minute at n = 494, against β·⌈log₂ n⌉ = 108).
func TestPutWalkSpreadsHops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, k = 48, 8
		tn := newTestNet(t, n, memnet.Config{Latency: pairLatency(time.Millisecond, 5*time.Millisecond)}, func(i int, c *Config) {
			c.Alpha, c.BucketSize = 1, k
		})
		tn.meshAll()
		rng := rand.New(rand.NewPCG(7, 7))
		for trial := range 5 {
			origin := tn.nodes[rng.IntN(n)]
			key := randID(rng)
			t1, _ := nextTarget(key, origin.ID(), 1)
			p := CommonPrefixLen(origin.ID(), key) + 1
			// The first hop's candidates: the origin's contacts sharing
			// with the key the p bits fixed in t1 (but the key's nearest,
			// kept for last), the k nearest to t1.
			var prefix []ID
			for _, e := range origin.levels[0].rt.all() {
				if CommonPrefixLen(e.ID, key) >= p {
					prefix = append(prefix, e.ID)
				}
			}
			slices.SortFunc(prefix, func(x, y ID) int { return CompareDistance(key, x, y) })
			if len(prefix) < 4 {
				continue
			}
			prefix = prefix[1:]
			slices.SortFunc(prefix, func(x, y ID) int { return CompareDistance(t1, x, y) })
			allowed := prefix[:min(k, len(prefix))]
			firstHops := map[ID]int{}
			for range 40 {
				r := origin.lookup(context.Background(), lookupParams{level: 0, key: key, kind: lookupPut, ttl: time.Minute, start: origin.ID(), closing: 3})
				if len(r.answered) < 2 {
					t.Fatalf("trial %d: walk answered by %d nodes", trial, len(r.answered))
				}
				first := r.answered[1].ID
				if !slices.Contains(allowed, first) {
					t.Fatalf("trial %d: first hop %v is not among the %d nodes nearest t1 that share %d bits with the key", trial, first.Short(), len(allowed), p)
				}
				firstHops[first]++
			}
			if want := min(3, len(allowed)); len(firstHops) < want {
				t.Fatalf("trial %d: 40 walks took %d distinct first hops (%v) among %d candidates; want at least %d", trial, len(firstHops), firstHops, len(allowed), want)
			}
		}
	})
}
