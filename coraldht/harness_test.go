package coraldht

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht/memnet"
)

// testKey is the network key of every in-memory test network.
var testKey = func() *Key {
	k, err := NewKey([]byte("0123456789abcdef0123456789abcdef-test-network"))
	if err != nil {
		panic(err)
	}
	return k
}()

// memAddr returns the i-th test address, 10.x.y.z:4000.
func memAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 4000)
}

type testNet struct {
	t     testing.TB
	net   *memnet.Network
	nodes []*Node
}

// newTestNet starts n nodes on a fresh in-memory network and bootstraps each
// from the first. Call it inside a synctest bubble.
func newTestNet(t testing.TB, n int, netCfg memnet.Config, tweak func(i int, c *Config)) *testNet {
	t.Helper()
	tn := &testNet{t: t, net: memnet.New(netCfg)}
	for i := 0; i < n; i++ {
		tn.add(i, tweak)
	}
	t.Cleanup(tn.closeAll)
	ctx := context.Background()
	for i := 1; i < n; i++ {
		if err := tn.nodes[i].Bootstrap(ctx, tn.nodes[0].Addr()); err != nil {
			t.Fatalf("bootstrap node %d: %v", i, err)
		}
	}
	return tn
}

func (tn *testNet) add(i int, tweak func(i int, c *Config)) *Node {
	tn.t.Helper()
	tr, err := tn.net.Listen(memAddr(i + 1))
	if err != nil {
		tn.t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Key = testKey
	cfg.Seed = uint64(i + 1)
	if tweak != nil {
		tweak(i, &cfg)
	}
	node, err := NewNode(cfg, tr)
	if err != nil {
		tn.t.Fatal(err)
	}
	tn.nodes = append(tn.nodes, node)
	return node
}

func (tn *testNet) closeAll() {
	for _, n := range tn.nodes {
		n.Close()
	}
}

func (tn *testNet) byID() map[ID]*Node {
	m := make(map[ID]*Node)
	for _, n := range tn.nodes {
		m[n.ID()] = n
	}
	return m
}

var _ = fmt.Sprint
var _ = time.Second
