package coraldht

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht/memnet"
)

// TestPutGetBurstKeepsLocality: 12 nodes in 4 level-2 clusters of 3 inside
// 2 level-1 clusters of 6 put+get a fresh key at the same instant, 10
// times. Exactly one sees no values (the test-and-set), and the others are
// pointed at a copy within their own fastest cluster where there is one:
// in each level-2 cluster one node goes on to level 1 and the other two
// see its value at level 2 (8 answers at level 2), in each level-1
// cluster one of the two that arrive goes on (2 at level 1), and one
// answer at level 0. The answers form a tree rooted at the node that saw
// nothing: nobody waits on a node that waits on it. With the stores run
// global level first, most answers came from level 0.
func TestPutGetBurstKeepsLocality(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 12
		region := func(i int) int { return i / 6 }
		metro := func(i int) int { return i / 3 }
		tn := newTestNet(t, n, memnet.Config{Latency: pairLatency(time.Millisecond, 5*time.Millisecond)}, func(i int, c *Config) {
			c.Pins = map[int]string{1: fmt.Sprint("region ", region(i)), 2: fmt.Sprint("metro ", metro(i))}
		})
		tn.meshAll()
		index := map[string]int{}
		for i, nd := range tn.nodes {
			index[nd.Addr().String()] = i
		}
		for round := range 10 {
			key := KeyFor(fmt.Sprint("http://burst.example/", round))
			results := make([]PutGetResult, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i, nd := range tn.nodes {
				wg.Go(func() {
					results[i], errs[i] = nd.PutGet(context.Background(), key, []byte(nd.Addr().String()), 20*time.Second)
				})
			}
			wg.Wait()
			byLevel := map[int]int{}
			parent := make([]int, n)
			for i, r := range results {
				if errs[i] != nil {
					t.Fatalf("round %d node %d: %v", round, i, errs[i])
				}
				parent[i] = -1
				if len(r.Values) == 0 {
					byLevel[-1]++
					continue
				}
				byLevel[r.Level]++
				// The node waits on the first value it was shown.
				p, ok := index[string(r.Values[0].Data)]
				if !ok || p == i {
					t.Fatalf("round %d node %d shown %q", round, i, r.Values[0].Data)
				}
				parent[i] = p
				for _, v := range r.Values {
					j := index[string(v.Data)]
					switch {
					case r.Level == 2 && metro(j) != metro(i):
						t.Fatalf("round %d node %d: level-2 answer names node %d of another level-2 cluster", round, i, j)
					case r.Level == 1 && region(j) != region(i):
						t.Fatalf("round %d node %d: level-1 answer names node %d of another level-1 cluster", round, i, j)
					}
				}
			}
			for i := range n {
				steps, j := 0, i
				for parent[j] >= 0 {
					if j, steps = parent[j], steps+1; steps > n {
						t.Fatalf("round %d: node %d waits on a cycle (parents %v)", round, i, parent)
					}
				}
			}
			if byLevel[-1] != 1 || byLevel[2] != 8 || byLevel[1] != 2 || byLevel[0] != 1 {
				t.Fatalf("round %d: answers by level %v, want 8 at level 2, 2 at level 1, 1 at level 0 and 1 with none (-1)", round, byLevel)
			}
		}
	})
}
