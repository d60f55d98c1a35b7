package topology_test

import (
	"fmt"
	"time"

	"github.com/coralcdn/coral/eval/internal/topology"
)

// Example builds a small synthetic world, places two nodes on each of three
// sites and asks for one-way delays the way an in-memory network would.
// Real experiments would call topology.Load(seed) instead, to use the
// measured matrix where it is available.
func Example() {
	m := topology.Synthetic(50, 1)
	fmt.Println(m.Source, m.Len(), "sites")

	nodes := m.Place(6, 2, 1)
	for _, nd := range nodes {
		fmt.Println(nd.Addr, m.Sites[nd.Site].Name, m.Sites[nd.Site].Continent)
	}

	latency := topology.Latency(m, nodes)
	oneWay := func(i, j int) time.Duration {
		return latency(nodes[i].Addr, nodes[j].Addr).Round(10 * time.Microsecond)
	}
	fmt.Println("same site: ", oneWay(0, 1))
	fmt.Println("other site:", oneWay(0, 2), "=", (m.RTT(nodes[0].Site, nodes[2].Site) / 2).Round(10*time.Microsecond))
	fmt.Println("other site:", oneWay(0, 4))
	// Output:
	// synthetic 50 sites
	// 10.0.16.1:4000 br/c1/s1 South America
	// 10.0.16.2:4000 br/c1/s1 South America
	// 10.0.19.1:4000 uk-ie/c1/s1 Europe
	// 10.0.19.2:4000 uk-ie/c1/s1 Europe
	// 10.0.45.1:4000 nz/c1/s1 Oceania
	// 10.0.45.2:4000 nz/c1/s1 Oceania
	// same site:  960µs
	// other site: 110.1ms = 110.1ms
	// other site: 123.68ms
}
