package coraldht

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"
)

// TestUDPNetwork runs 32 nodes on real UDP sockets, one per loopback
// address 127.0.0.10–41, and exercises put, get and the put+get race.
// The nodes wait for every reply (patientRPCs): with the adaptive
// timeout of loopback, about 100 ms, a loaded machine's delays were
// taken for dead nodes, and lookups passed over the nodes holding the
// values ("no node accepted the value", "no values for key", two nodes
// seeing no values in the race: 11 runs in 110 under load). What is
// asserted is what the DSHT does with live nodes.
func TestUDPNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 32 real UDP nodes")
	}
	const n = 32
	nodes := startUDPNodes(t, n, 10, func(_ int, cfg *Config) { patientRPCs(cfg) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, nd := range nodes[1:] {
		wg.Go(func() {
			if err := nd.Bootstrap(ctx, nodes[0].Addr()); err != nil {
				t.Errorf("bootstrap %v: %v", nd.Addr(), err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i := range 10 {
		key := KeyFor(fmt.Sprint("udp", i))
		val := []byte(nodes[i].Addr().String())
		if _, err := nodes[i].Put(ctx, key, val, time.Minute); err != nil {
			t.Fatalf("put: %v", err)
		}
		r, err := nodes[n-1-i].Get(ctx, key)
		if err != nil || string(r.Values[0].Data) != string(val) {
			t.Fatalf("get: %+v %v", r, err)
		}
	}
	key := KeyFor("udp race")
	empty := make(chan int, n)
	for _, nd := range nodes {
		wg.Go(func() {
			r, err := nd.PutGet(ctx, key, []byte(nd.Addr().String()), 20*time.Second)
			if err != nil {
				t.Errorf("put+get %v: %v", nd.Addr(), err)
				return
			}
			if len(r.Values) == 0 {
				empty <- 1
			}
		})
	}
	wg.Wait()
	close(empty)
	if got := len(empty); got != 1 {
		t.Fatalf("%d of %d nodes saw no values in a put+get race over UDP, want 1", got, n)
	}
	var table int
	for _, nd := range nodes {
		table += len(nd.RoutingTable(0))
		if d := nd.Stats().Drops; d.BadAuth+d.Malformed+d.Replay+d.Stale != 0 {
			t.Errorf("%v dropped honest traffic: %+v", nd.Addr(), d)
		}
	}
	if avg := table / n; avg < 10 {
		t.Fatalf("average routing table holds %d of %d nodes", avg, n-1)
	}
}

// TestKeylessNodeOnlyOnLoopback binds real sockets.
func TestKeylessNodeOnlyOnLoopback(t *testing.T) {
	tr, err := ListenUDP("127.0.0.9:0")
	if err != nil {
		t.Fatal(err)
	}
	nd, err := NewNode(DefaultConfig(), tr)
	if err != nil {
		t.Fatalf("keyless node on loopback: %v", err)
	}
	nd.Close()

	tr, err = ListenUDP("0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Advertise = netip.MustParseAddrPort("127.0.0.9:4000")
	_, err = NewNode(cfg, tr)
	if !errors.Is(err, ErrNoKey) {
		t.Fatalf("keyless node on 0.0.0.0: %v, want ErrNoKey", err)
	}
	tr.Close()
}

// TestUDPClusters: nodes on real loopback sockets, some pinned to named
// clusters at level 1, the rest left to cluster themselves. The dynamic
// ones end in one cluster at every level (loopback RTTs are far under
// every threshold); level-1 values stay inside each pinned cluster.
func TestUDPClusters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real UDP nodes")
	}
	nodes := startUDPNodes(t, 10, 50, func(i int, cfg *Config) {
		cfg.ClusterInterval = time.Second
		cfg.HintPrivate = true // loopback /24: all are neighbours
		if os.Getenv("CORAL_DEBUG") != "" {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		switch {
		case i < 3:
			cfg.Pins = map[int]string{1: "east"}
		case i < 6:
			cfg.Pins = map[int]string{1: "west"}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, nd := range nodes[1:] {
		if err := nd.Bootstrap(ctx, nodes[0].Addr()); err != nil {
			t.Fatalf("bootstrap %v: %v", nd.Addr(), err)
		}
	}
	dynamic := nodes[6:]
	settled := func() bool {
		for _, lvl := range []int{1, 2} {
			for _, nd := range dynamic {
				if clusterOf(nd, lvl) != clusterOf(dynamic[0], lvl) {
					return false
				}
			}
		}
		return true
	}
	// Real sockets, real time: poll until the rounds (one a second) have
	// merged the dynamic nodes, or the context ends.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !settled() {
		select {
		case <-ctx.Done():
			for _, nd := range dynamic {
				t.Logf("%v: level 1 %v, level 2 %v", nd.Addr(), clusterOf(nd, 1).Short(), clusterOf(nd, 2).Short())
			}
			t.Fatal("dynamic nodes did not form one cluster within a minute")
		case <-tick.C:
		}
	}
	for i, nd := range nodes[:6] {
		want := ClusterIDFor(map[bool]string{true: "east", false: "west"}[i < 3])
		if got := nd.Levels()[1]; got.Cluster.ID != want || !got.Pinned || got.Changes != 0 {
			t.Fatalf("pinned node %v: %+v", nd.Addr(), got)
		}
	}
	key := KeyFor("udp level 1")
	if _, err := nodes[0].Put(ctx, key, []byte("east"), time.Minute, 1); err != nil {
		t.Fatal(err)
	}
	if r, err := nodes[2].Get(ctx, key, 1); err != nil || string(r.Values[0].Data) != "east" {
		t.Fatalf("east member's level-1 get: %+v %v", r, err)
	}
	if _, err := nodes[4].Get(ctx, key, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("west member read east's level-1 value: %v", err)
	}
}

// startUDPNodes starts n nodes on real UDP sockets at 127.0.0.first,
// 127.0.0.first+1, …, closed when the test ends. tweak, if not nil,
// adjusts node i's configuration.
func startUDPNodes(t *testing.T, n, first int, tweak func(i int, cfg *Config)) []*Node {
	t.Helper()
	var nodes []*Node
	for i := range n {
		tr, err := ListenUDP(fmt.Sprintf("127.0.0.%d:0", first+i))
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Key = testKey
		if tweak != nil {
			tweak(i, &cfg)
		}
		nd, err := NewNode(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
	}
	return nodes
}
