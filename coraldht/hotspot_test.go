package coraldht

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestPutWalkReachesNearestNodeLast: a put's forward walk contacts the
// key's nearest node only for the key itself, never as the hop toward an
// intermediate target, so every walk comes to it from a node next to it
// (which, on a hot key, throttles it). Gets still follow the b-bit rule
// literally, and the put still reaches and stores at the nearest node.
// Before the rule, walks whose first intermediate target fell in the empty
// region around the nearest node went straight to it.
func TestPutWalkReachesNearestNodeLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 20
		tn := newTestNet(t, n, MemNetworkConfig{Latency: pairLatency(time.Millisecond, 5*time.Millisecond)}, func(i int, c *Config) {
			c.Alpha, c.BucketSize, c.Replicas = 1, 12, 2
		})
		tn.meshAll()
		var ids []ID
		for _, nd := range tn.nodes {
			ids = append(ids, nd.ID())
		}
		rng := rand.New(rand.NewPCG(21, 21))
		straight := 0
		for trial := range 60 {
			origin := tn.nodes[rng.IntN(n)]
			key := randID(rng)
			others := slices.DeleteFunc(slices.Clone(ids), func(id ID) bool { return id == origin.ID() })
			byDistance := slices.SortedFunc(slices.Values(ids), func(x, y ID) int { return CompareDistance(key, x, y) })
			nearest, second := byDistance[0], byDistance[1]
			if origin.ID() == nearest {
				continue // its walk ends in the close phase
			}
			if literal := paperPath(origin.ID(), key, others, 1, 2); len(literal) > 1 && literal[1] == nearest {
				straight++
			}
			r := origin.lookup(context.Background(), lookupParams{level: 0, key: key, kind: lookupPut, ttl: time.Minute, start: origin.ID(), closing: 2})
			var got []ID
			for _, c := range r.answered {
				got = append(got, c.ID)
			}
			// With complete tables, the last intermediate target before the
			// key is nearest the key's second-nearest node: that is where
			// the walk must come from.
			at := slices.Index(got, nearest)
			switch {
			case at < 0:
				t.Fatalf("trial %d: put walk %v never reached the nearest node %v", trial, shortIDs(got), nearest.Short())
			case got[at-1] != second:
				t.Fatalf("trial %d: put walk %v reached the nearest node %v from %v, not from the second nearest %v",
					trial, shortIDs(got), nearest.Short(), got[at-1].Short(), second.Short())
			}
		}
		if straight == 0 {
			t.Fatal("no trial where the literal rule jumps straight to the nearest node: the test proves nothing")
		}
		t.Logf("%d of 60 walks would have gone straight to the nearest node", straight)
	})
}
