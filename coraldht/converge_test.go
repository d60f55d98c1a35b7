package coraldht

import (
	"context"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"
)

// TestFreshNetworkConverges: five nodes started together, all near each
// other (1 ms), the first without bootstrap and the others joining through
// it at once, end in one cluster at every level well before the first
// periodic round (ClusterInterval).
func TestFreshNetworkConverges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroupNet(t, time.Millisecond, 100*time.Millisecond)
		var nodes []*Node
		for i := range 5 {
			nodes = append(nodes, g.add(memAddr(i+1), 0, func(c *Config) { c.Levels = []time.Duration{60 * time.Millisecond, 20 * time.Millisecond} }))
		}
		ctx := context.Background()
		done := make(chan error, len(nodes))
		go func() { done <- nodes[0].JoinRetrying(ctx, nil, nil) }()
		time.Sleep(2 * time.Second) // the first node alone for a while, as a lab starts it
		for i, n := range nodes[1:] {
			go func() {
				time.Sleep(time.Duration(i) * 300 * time.Millisecond) // started one after another
				done <- n.JoinRetrying(ctx, []netip.AddrPort{nodes[0].Addr()}, nil)
			}()
		}
		for range nodes {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		for lvl := 1; lvl <= 2; lvl++ {
			ids := map[ID][]int{}
			for i, n := range nodes {
				ids[clusterOf(n, lvl)] = append(ids[clusterOf(n, lvl)], i)
			}
			if len(ids) != 1 {
				t.Errorf("level %d: %d clusters after a minute: %v", lvl, len(ids), ids)
			}
		}
	})
}
