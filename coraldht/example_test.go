package coraldht_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/memnet"
)

// startNetwork starts n nodes on an in-memory network, 10.0.0.1 to
// 10.0.0.n, and joins them through the first.
func startNetwork(n int) []*coraldht.Node {
	network := memnet.New(memnet.Config{})
	key, err := coraldht.NewKey([]byte("an example secret of at least 32 bytes"))
	if err != nil {
		panic(err)
	}
	var nodes []*coraldht.Node
	for i := 1; i <= n; i++ {
		tr, err := network.Listen(netip.MustParseAddrPort(fmt.Sprintf("10.0.0.%d:4000", i)))
		if err != nil {
			panic(err)
		}
		cfg := coraldht.DefaultConfig()
		cfg.Key = key
		cfg.Services = coraldht.ServiceHTTP
		node, err := coraldht.NewNode(cfg, tr)
		if err != nil {
			panic(err)
		}
		nodes = append(nodes, node)
	}
	for _, node := range nodes[1:] {
		if err := node.Bootstrap(context.Background(), nodes[0].Addr()); err != nil {
			panic(err)
		}
	}
	return nodes
}

func closeAll(nodes []*coraldht.Node) {
	for _, n := range nodes {
		n.Close()
	}
}

// A proxy records that it caches a URL; another node finds it.
func Example() {
	nodes := startNetwork(8)
	defer closeAll(nodes)
	ctx := context.Background()

	url := coraldht.KeyFor("http://www.example.com/logo.png")
	if _, err := nodes[2].Put(ctx, url, []byte("10.0.0.3:8090"), 2*time.Hour); err != nil {
		panic(err)
	}
	res, err := nodes[7].Get(ctx, url)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s caches it\n", res.Values[0].Data)

	_, err = nodes[7].Get(ctx, coraldht.KeyFor("http://www.example.com/missing"))
	fmt.Println(err)
	// Output:
	// 10.0.0.3:8090 caches it
	// coraldht: no values for key
}

// A flash crowd: every node misses at once and puts+gets a reference to
// itself. Exactly one learns it is first and fetches from the origin; the
// others learn of a peer to fetch from.
func ExampleNode_PutGet() {
	nodes := startNetwork(12)
	defer closeAll(nodes)
	url := coraldht.KeyFor("http://www.example.com/flash.html")

	var mu sync.Mutex
	var wg sync.WaitGroup
	first, toPeer := 0, 0
	for _, node := range nodes {
		wg.Go(func() {
			res, err := node.PutGet(context.Background(), url, []byte(node.Addr().String()), 20*time.Second)
			if err != nil {
				panic(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(res.Values) == 0 {
				first++
			} else {
				toPeer++
			}
		})
	}
	wg.Wait()
	fmt.Printf("%d fetches from the origin, %d from peers\n", first, toPeer)
	// Output: 1 fetches from the origin, 11 from peers
}

func ExampleNode_Levels() {
	nodes := startNetwork(1)
	defer closeAll(nodes)
	for _, l := range nodes[0].Levels() {
		if l.Threshold == 0 {
			fmt.Printf("level %d: global\n", l.Level)
		} else {
			fmt.Printf("level %d: clusters within %v\n", l.Level, l.Threshold)
		}
	}
	// Output:
	// level 0: global
	// level 1: clusters within 60ms
	// level 2: clusters within 20ms
}

func ExampleNode_Nodes() {
	nodes := startNetwork(4)
	defer closeAll(nodes)
	// Up to three nodes running an HTTP proxy in this node's level-0
	// cluster: this node first, then the others by measured RTT.
	found := nodes[0].Nodes(context.Background(), 0, 3, netip.Addr{}, coraldht.ServiceHTTP)
	fmt.Println(len(found), found[0].Addr, found[0].Self)
	// Output: 3 10.0.0.1:4000 true
}
