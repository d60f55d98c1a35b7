//go:build linux

package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/coralcdn/coral/eval/internal/topology"
)

// The world's metros are within 20 ms, paired metros under 60 ms apart,
// the client-only site of the first metro near it, the others far; and
// the node sites written as a data set load back with the same RTTs.
func TestPickWorld(t *testing.T) {
	for _, m := range []*topology.Matrix{topology.Load(1), topology.Synthetic(250, 7)} {
		w, err := pickWorld(m, worldShape{Groups: 4, GroupSize: 3, ClientOnly: 2}, 1)
		if err != nil {
			t.Fatal(m.Source, err)
		}
		if len(w.NodeSites) != 12 || len(w.ClientSites) != 2 || len(w.Sites) != 16 {
			t.Fatalf("%s: %+v", m.Source, w)
		}
		for g := range 4 {
			for i := g * 3; i < g*3+3; i++ {
				for j := g * 3; j < g*3+3; j++ {
					if i != j && w.RTT(i, j) >= within {
						t.Errorf("%s: metro %d: sites %d and %d %v apart", m.Source, g, i, j, w.RTT(i, j))
					}
				}
			}
		}
		if r := w.RTT(0, 3); r >= 60*time.Millisecond || r < 30*time.Millisecond {
			t.Errorf("%s: metros 0 and 1 %v apart, want 30–60 ms", m.Source, r)
		}
		if r := w.RTT(0, w.ClientSites[0]); r >= within {
			t.Errorf("%s: the first client-only site is %v from metro 0", m.Source, r)
		}
		for _, n := range w.NodeSites {
			if w.RTT(n, w.ClientSites[1]) <= 60*time.Millisecond {
				t.Errorf("%s: the far client-only site is %v from node site %d", m.Source, w.RTT(n, w.ClientSites[1]), n)
			}
		}
		dir := filepath.Join(t.TempDir(), "matrix")
		if err := w.writeMatrix(dir, w.NodeSites); err != nil {
			t.Fatal(err)
		}
		sub, err := topology.LoadWonderProxy(dir)
		if err != nil {
			t.Fatal(err)
		}
		if sub.Len() != 12 || sub.Filled != 0 {
			t.Fatalf("%s: the data set has %d sites, %d filled", m.Source, sub.Len(), sub.Filled)
		}
		for a := range 12 {
			for b := range 12 {
				if d := sub.RTT(a, b) - w.RTT(a, b); d > time.Microsecond || d < -time.Microsecond {
					t.Errorf("%s: sites %d–%d: %v in the data set, %v in the world", m.Source, a, b, sub.RTT(a, b), w.RTT(a, b))
				}
			}
		}
	}
}
