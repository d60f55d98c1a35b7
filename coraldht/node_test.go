package coraldht

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
	"github.com/coralcdn/coral/coraldht/memnet"
)

// pairLatency returns a symmetric one-way delay between lo and hi fixed per
// address pair, so datagrams from different senders interleave.
func pairLatency(lo, hi time.Duration) memnet.LatencyFunc {
	return func(a, b netip.AddrPort) time.Duration {
		x, y := a.String(), b.String()
		if x > y {
			x, y = y, x
		}
		h := KeyFor(x + "|" + y)
		frac := float64(uint16(h[0])<<8|uint16(h[1])) / 65536
		return lo + time.Duration(frac*float64(hi-lo))
	}
}

// meshAll makes every node ping every other, so routing tables hold the
// whole (small) network.
func (tn *testNet) meshAll() {
	tn.t.Helper()
	for _, a := range tn.nodes {
		for _, b := range tn.nodes {
			if a != b {
				if _, err := a.Ping(context.Background(), b.Addr()); err != nil {
					tn.t.Fatalf("ping %v → %v: %v", a.Addr(), b.Addr(), err)
				}
			}
		}
	}
}

// paperPath is the sequence of nodes the paper's rule visits when the
// originator knows every node: next hop = node closest to t, t advancing
// one b-bit digit at a time from the originator's ID, then the `closing`
// nodes nearest the key.
func paperPath(origin ID, key ID, all []ID, b, closing int) []ID {
	visited := map[ID]bool{origin: true}
	path := []ID{origin}
	visit := func(id ID) {
		if !visited[id] {
			visited[id] = true
			path = append(path, id)
		}
	}
	closest := func(t ID) ID {
		best := origin
		for _, id := range all {
			if CompareDistance(t, id, best) < 0 {
				best = id
			}
		}
		return best
	}
	t := origin
	for {
		visit(closest(t))
		next, ok := nextTarget(key, t, b)
		if !ok {
			break
		}
		t = next
	}
	sorted := append([]ID{origin}, all...)
	slices.SortFunc(sorted, func(x, y ID) int { return CompareDistance(key, x, y) })
	for _, id := range sorted[:closing] {
		visit(id)
	}
	return path
}

// TestHopChoiceFollowsSplice runs lookups with complete routing knowledge
// and one RPC at a time, and checks that the nodes visited are exactly those
// of the paper's rule — not a jump to the node closest to the key.
func TestHopChoiceFollowsSplice(t *testing.T) {
	for _, b := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("b=%d", b), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const n = 20
				tn := newTestNet(t, n, memnet.Config{Latency: pairLatency(time.Millisecond, 5*time.Millisecond)}, func(i int, c *Config) {
					c.B, c.Alpha, c.BucketSize, c.Replicas = b, 1, 12, 2
				})
				tn.meshAll()
				for _, nd := range tn.nodes {
					if got := len(nd.RoutingTable(0)); got != n-1 {
						t.Fatalf("%v knows %d of %d nodes; the test needs complete tables", nd.Addr(), got, n-1)
					}
				}
				var ids []ID
				for _, nd := range tn.nodes {
					ids = append(ids, nd.ID())
				}
				rng := rand.New(rand.NewPCG(uint64(b), 9))
				indirect := 0
				for trial := range 40 {
					origin := tn.nodes[rng.IntN(n)]
					key := randID(rng)
					others := slices.DeleteFunc(slices.Clone(ids), func(id ID) bool { return id == origin.ID() })
					want := paperPath(origin.ID(), key, others, b, 2)
					r := origin.lookup(context.Background(), lookupParams{level: 0, key: key, kind: lookupGet, start: origin.ID(), closing: 2})
					var got []ID
					for _, c := range r.answered {
						got = append(got, c.ID)
					}
					if !slices.Equal(got, want) {
						t.Fatalf("trial %d: visited %v, rule says %v", trial, shortIDs(got), shortIDs(want))
					}
					nearest := slices.MinFunc(others, func(x, y ID) int { return CompareDistance(key, x, y) })
					if len(got) > 1 && got[1] != nearest {
						indirect++
					}
				}
				if b == 1 && indirect == 0 {
					t.Fatal("every lookup jumped straight to the key's closest node")
				}
			})
		})
	}
}

func shortIDs(ids []ID) []string {
	var s []string
	for _, id := range ids {
		s = append(s, id.Short())
	}
	return s
}

func TestPutThenGetAcrossNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 40, memnet.Config{Latency: pairLatency(2*time.Millisecond, 40*time.Millisecond)}, nil)
		ctx := context.Background()
		for i := range 20 {
			key := KeyFor(fmt.Sprint("http://example.com/", i))
			val := []byte(fmt.Sprint("proxy-", i))
			pr, err := tn.nodes[i].Put(ctx, key, val, time.Hour)
			if err != nil {
				t.Fatalf("put %d: %v", i, err)
			}
			var level0 int
			for _, p := range pr.Stored {
				if p.Level == 0 {
					level0++
				}
			}
			if want := DefaultConfig().Replicas; level0 != want {
				t.Fatalf("put %d stored on %d level-0 nodes, want Replicas=%d: %+v", i, level0, want, pr.Stored)
			}
			gr, err := tn.nodes[39-i].Get(ctx, key)
			if err != nil {
				t.Fatalf("get %d: %v", i, err)
			}
			// Clustering runs meanwhile, so the values may come from a
			// cluster the two nodes share; any level is right.
			if len(gr.Values) != 1 || !bytes.Equal(gr.Values[0].Data, val) || gr.Level < 0 {
				t.Fatalf("get %d = %+v", i, gr)
			}
			if gr.Values[0].TTL <= 59*time.Minute || gr.Values[0].TTL > time.Hour {
				t.Fatalf("remaining TTL %v", gr.Values[0].TTL)
			}
		}
		if _, err := tn.nodes[5].Get(ctx, KeyFor("never stored")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get of a missing key: %v, want ErrNotFound", err)
		}
	})
}

// TestPutGetRace is the test-and-set property: many nodes put+get a fresh
// key at the same instant and exactly one of them sees no values.
func TestPutGetRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 24
		tn := newTestNet(t, n, memnet.Config{Latency: pairLatency(time.Millisecond, 60*time.Millisecond)}, nil)
		ctx := context.Background()
		for round := range 10 {
			key := KeyFor(fmt.Sprint("http://flash.example/", round))
			results := make([]PutGetResult, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i, nd := range tn.nodes {
				wg.Go(func() {
					results[i], errs[i] = nd.PutGet(ctx, key, []byte(nd.Addr().String()), 20*time.Second)
				})
			}
			wg.Wait()
			empty := 0
			for i, r := range results {
				if errs[i] != nil {
					t.Fatalf("round %d node %d: %v", round, i, errs[i])
				}
				if len(r.Stored) == 0 {
					t.Fatalf("round %d node %d stored nowhere", round, i)
				}
				if len(r.Values) == 0 {
					empty++
				}
				for _, v := range r.Values {
					if string(v.Data) == tn.nodes[i].Addr().String() {
						t.Fatalf("round %d node %d was shown its own value", round, i)
					}
				}
			}
			if empty != 1 {
				t.Fatalf("round %d: %d of %d nodes saw no values, want exactly 1", round, empty, n)
			}
		}
	})
}

// TestReverseStackWhenTopFills: the nearest node fills up between the
// forward and reverse phases; the store moves down the stack, and the
// refused node's values still count as found for put+get.
func TestReverseStackWhenTopFills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 16, memnet.Config{Latency: pairLatency(time.Millisecond, 10*time.Millisecond)}, func(i int, c *Config) {
			c.BucketSize = 12
		})
		tn.meshAll()
		nodes := tn.byID()
		key := KeyFor("fills meanwhile")
		putter := tn.nodes[0]
		var top, second *Node
		putter.testHookAfterForward = func(stacks []levelStack) {
			level0 := stacks[len(stacks)-1]
			if level0.level != 0 {
				return // put+get runs level by level: act before level 0's stores
			}
			if len(level0.stack) < 3 {
				t.Fatalf("level-0 stack holds %d nodes", len(level0.stack))
			}
			top, second = nodes[level0.stack[0].ID], nodes[level0.stack[1].ID]
			for i := range 4 {
				r, _, _ := top.store.putSelf(levelKey{key: key}, []byte(fmt.Sprint("other", i)), time.Hour, time.Now())
				if r != wire.StoreStored {
					t.Fatalf("filling the top: result %d", r)
				}
			}
		}
		res, err := putter.PutGet(context.Background(), key, []byte("mine"), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if top == nil || top == putter {
			t.Fatal("hook did not run, or the putter was the top of its own stack")
		}
		var level0 []ID
		for _, p := range res.Stored {
			if p.Level == 0 {
				level0 = append(level0, p.Node.ID)
			}
		}
		if slices.Contains(level0, top.ID()) {
			t.Fatal("stored at the node that had filled up")
		}
		if len(level0) == 0 || level0[0] != second.ID() {
			t.Fatalf("level-0 placements %v, want the next stack entry %v first", shortIDs(level0), second.ID().Short())
		}
		if len(res.Values) != 4 || res.From.ID != top.ID() {
			t.Fatalf("put+get reported %d values from %v; want the full node's 4", len(res.Values), res.From)
		}
	})
}

func TestLookupsSurviveDeadNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 80
		tn := newTestNet(t, n, memnet.Config{Latency: pairLatency(5*time.Millisecond, 80*time.Millisecond)}, nil)
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(11, 11))
		var keys []ID
		for i := range 40 {
			k := KeyFor(fmt.Sprint("k", i))
			if _, err := tn.nodes[rng.IntN(n)].Put(ctx, k, []byte("v"), time.Hour); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		// Kill a fifth of the nodes without warning.
		dead := map[int]bool{}
		for len(dead) < n/5 {
			i := rng.IntN(n)
			if !dead[i] {
				dead[i] = true
				tn.net.Kill(tn.nodes[i].Addr())
			}
		}
		found, worst := 0, time.Duration(0)
		for _, k := range keys {
			var i int
			for i = rng.IntN(n); dead[i]; i = rng.IntN(n) {
			}
			start := time.Now()
			_, err := tn.nodes[i].Get(ctx, k)
			worst = max(worst, time.Since(start))
			if err == nil {
				found++
			} else if !errors.Is(err, ErrNotFound) {
				t.Fatalf("get: %v", err)
			}
		}
		// Each value lives on three nodes; losing all to a 20% kill
		// happens to about 1 key in 125.
		if found < len(keys)-2 {
			t.Fatalf("found %d of %d keys after killing 20%% of nodes", found, len(keys))
		}
		if bound := 3 * time.Second; worst > bound {
			t.Fatalf("slowest get took %v of virtual time, want under %v", worst, bound)
		}
		t.Logf("found %d/%d, slowest get %v", found, len(keys), worst)
	})
}

// TestSlowNodeIsHedged: a node that answers only after seconds does not
// hold up lookups that pass it.
func TestSlowNodeIsHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 30
		base := pairLatency(5*time.Millisecond, 30*time.Millisecond)
		var slowAddr netip.AddrPort
		lat := func(a, b netip.AddrPort) time.Duration {
			if a == slowAddr || b == slowAddr {
				return 1500 * time.Millisecond
			}
			return base(a, b)
		}
		tn := newTestNet(t, n, memnet.Config{Latency: lat}, nil)
		tn.meshAll() // everyone learns RTTs first
		ctx := context.Background()
		slowAddr = tn.nodes[7].Addr()
		worst := time.Duration(0)
		hedged := 0
		for i := range 60 {
			key := KeyFor(fmt.Sprint("slow", i))
			start := time.Now()
			r := tn.nodes[(i%(n-1)+8)%n].lookup(ctx, lookupParams{level: 0, key: key, kind: lookupGet, start: tn.nodes[(i%(n-1)+8)%n].ID(), closing: 2})
			worst = max(worst, time.Since(start))
			if r.rpcs > r.hops {
				hedged++
			}
		}
		if worst >= 1500*time.Millisecond {
			t.Fatalf("a lookup waited %v for the slow node", worst)
		}
		if hedged == 0 {
			t.Fatal("no lookup ever met the slow node; the test proves nothing")
		}
	})
}

func TestContextCancellationAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 10, memnet.Config{Latency: pairLatency(100*time.Millisecond, 200*time.Millisecond)}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		_, err := tn.nodes[1].Get(ctx, KeyFor("x"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("get under a short deadline: %v", err)
		}
		done := make(chan error)
		go func() {
			_, err := tn.nodes[2].PutGet(context.Background(), KeyFor("y"), []byte("v"), time.Minute)
			done <- err
		}()
		time.Sleep(50 * time.Millisecond)
		tn.nodes[2].Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("put+get across Close: %v, want ErrClosed", err)
		}
		if _, err := tn.nodes[2].Get(context.Background(), KeyFor("y")); !errors.Is(err, ErrClosed) {
			t.Fatalf("get on a closed node: %v", err)
		}
	})
}

func TestInvalidArguments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 2, memnet.Config{}, nil)
		nd := tn.nodes[0]
		ctx := context.Background()
		k := KeyFor("k")
		cases := []struct {
			name string
			err  error
		}{
			{"empty value", func() error { _, err := nd.Put(ctx, k, nil, time.Minute); return err }()},
			{"value too large", func() error { _, err := nd.Put(ctx, k, make([]byte, 257), time.Minute); return err }()},
			{"TTL too long", func() error { _, err := nd.Put(ctx, k, []byte("v"), 25*time.Hour); return err }()},
			{"zero TTL", func() error { _, err := nd.PutGet(ctx, k, []byte("v"), 0); return err }()},
			{"no such level", func() error { _, err := nd.Get(ctx, k, 3); return err }()},
			{"negative level", func() error { _, err := nd.Put(ctx, k, []byte("v"), time.Minute, -1); return err }()},
		}
		for _, tc := range cases {
			if !errors.Is(tc.err, ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", tc.name, tc.err)
			}
		}
	})
}

func TestPartitionAndHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 20, memnet.Config{Latency: pairLatency(time.Millisecond, 20*time.Millisecond)}, nil)
		ctx := context.Background()
		var left, right []netip.AddrPort
		for i, nd := range tn.nodes {
			if i < 10 {
				left = append(left, nd.Addr())
			} else {
				right = append(right, nd.Addr())
			}
		}
		// Find a key whose values end up only on the right side.
		var key ID
		for i := 0; ; i++ {
			key = KeyFor(fmt.Sprint("part", i))
			pr, err := tn.nodes[15].Put(ctx, key, []byte("v"), time.Hour, 0)
			if err != nil {
				t.Fatal(err)
			}
			onRight := true
			for _, p := range pr.Stored {
				onRight = onRight && slices.Contains(right, p.Node.Addr)
			}
			if onRight {
				break
			}
		}
		tn.net.Partition(left, right)
		if _, err := tn.nodes[3].Get(ctx, key); err == nil {
			t.Fatal("a value crossed the partition")
		}
		if _, err := tn.nodes[12].Get(ctx, key); err != nil {
			t.Fatalf("same side get: %v", err)
		}
		tn.net.Heal()
		if _, err := tn.nodes[3].Get(ctx, key); err != nil {
			t.Fatalf("after heal: %v", err)
		}
		if s := tn.net.Stats(); s.Blocked == 0 {
			t.Fatal("partition blocked nothing")
		}
	})
}

func TestKillAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 12, memnet.Config{Latency: pairLatency(time.Millisecond, 10*time.Millisecond)}, nil)
		ctx := context.Background()
		victim := tn.nodes[5]
		addr := victim.Addr()
		tn.net.Kill(addr)
		victim.Close()
		if _, err := tn.nodes[0].Ping(ctx, addr); !errors.Is(err, ErrTimeout) {
			t.Fatalf("ping of a killed node: %v", err)
		}
		tr, err := tn.net.Restart(addr)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Key = testKey
		reborn, err := NewNode(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		defer reborn.Close()
		if reborn.ID() != victim.ID() {
			t.Fatal("a restarted node at the same address has a new ID")
		}
		if err := reborn.Bootstrap(ctx, tn.nodes[0].Addr()); err != nil {
			t.Fatal(err)
		}
		if _, err := tn.nodes[0].Ping(ctx, addr); err != nil {
			t.Fatalf("ping after restart: %v", err)
		}
	})
}

func TestLossyNetwork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 30, memnet.Config{Latency: pairLatency(5*time.Millisecond, 40*time.Millisecond), Jitter: 5 * time.Millisecond}, nil)
		tn.net.SetLoss(0.05)
		ctx := context.Background()
		ok := 0
		for i := range 30 {
			key := KeyFor(fmt.Sprint("lossy", i))
			if _, err := tn.nodes[i].Put(ctx, key, []byte("v"), time.Hour); err != nil {
				continue
			}
			if _, err := tn.nodes[(i+11)%30].Get(ctx, key); err == nil {
				ok++
			}
		}
		if ok < 28 {
			t.Fatalf("only %d of 30 put/get pairs succeeded with 5%% loss", ok)
		}
		if tn.net.Stats().Lost == 0 {
			t.Fatal("no datagram was lost; the test proves nothing")
		}
	})
}

func TestBootstrapFailsWithoutPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 1, memnet.Config{}, nil)
		err := tn.nodes[0].Bootstrap(context.Background(), memAddr(99))
		if !errors.Is(err, ErrNoResponse) {
			t.Fatalf("bootstrap from a dead address: %v, want ErrNoResponse", err)
		}
		// A lone node still works on its own storage.
		ctx := context.Background()
		k := KeyFor("solo")
		if _, err := tn.nodes[0].Put(ctx, k, []byte("v"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if r, err := tn.nodes[0].Get(ctx, k); err != nil || r.From.ID != tn.nodes[0].ID() {
			t.Fatalf("get on a lone node: %+v %v", r, err)
		}
	})
}

func TestNodesAndLevels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 8, memnet.Config{Latency: pairLatency(time.Millisecond, 30*time.Millisecond)}, func(i int, c *Config) {
			if i%2 == 0 {
				c.Services = ServiceHTTP | ServiceDNS
			} else {
				c.Services = ServiceDNS
			}
		})
		tn.meshAll()
		nd := tn.nodes[0]
		ctx := context.Background()
		got := nd.Nodes(ctx, 0, 10, netip.Addr{}, ServiceHTTP)
		if len(got) != 4 || !got[0].Self {
			t.Fatalf("Nodes(HTTP) = %v, want this node first and 3 other HTTP nodes", got)
		}
		for i := 1; i < len(got); i++ {
			if !got[i].Services.Has(ServiceHTTP) {
				t.Fatalf("node without HTTP returned: %v", got[i])
			}
			if got[i].RTT == 0 || (i > 1 && got[i].RTT < got[i-1].RTT) {
				t.Fatalf("not ordered by measured RTT: %v", got)
			}
		}
		// A node in the target's /24 comes first.
		if got := nd.Nodes(ctx, 0, 10, netip.MustParseAddr("10.0.0.5"), ServiceDNS); got[0].Addr.Addr() != netip.MustParseAddr("10.0.0.1") {
			// All test nodes share 10.0.0.0/24, so the order is by RTT with
			// this node (10.0.0.1) first.
			t.Fatalf("Nodes near 10.0.0.5 = %v", got)
		}
		if got := nd.Nodes(ctx, 0, 2, netip.Addr{}, 0); len(got) != 2 {
			t.Fatalf("count not honoured: %d", len(got))
		}
		// Contacts silent for longer than NodesLiveWithin are pinged
		// first: those that answer are back, dead ones drop out.
		time.Sleep(2 * time.Minute)
		for _, x := range tn.nodes[4:] {
			x.Close()
		}
		before := time.Now()
		got = nd.Nodes(ctx, 0, 10, netip.Addr{}, ServiceDNS)
		if len(got) != 4 {
			t.Fatalf("after 2 silent minutes and 4 deaths Nodes = %v, want this node and the 3 live ones", got)
		}
		for _, g := range got[1:] {
			if g.LastHeard.Before(before) {
				t.Fatalf("%v returned without a fresh ping (last heard %v)", g.Addr, g.LastHeard)
			}
		}
		dead := make(map[netip.AddrPort]bool)
		for _, x := range tn.nodes[4:] {
			dead[x.Addr()] = true
		}
		for _, g := range got {
			if dead[g.Addr] {
				t.Fatalf("dead node %v returned", g.Addr)
			}
		}
		// A context that has ended means no pings: only live members.
		time.Sleep(2 * time.Minute)
		done, cancel := context.WithCancel(ctx)
		cancel()
		if got := nd.Nodes(done, 0, 10, netip.Addr{}, ServiceDNS); len(got) != 1 {
			t.Fatalf("with a cancelled context Nodes = %v, want only this node", got)
		}
		lv := nd.Levels()
		if len(lv) != 3 || lv[0].Threshold != 0 || lv[1].Threshold != 60*time.Millisecond || lv[2].Threshold != 20*time.Millisecond {
			t.Fatalf("Levels = %+v", lv)
		}
		if !lv[0].Cluster.ID.IsZero() || lv[1].Cluster.ID.IsZero() {
			t.Fatalf("cluster IDs: %+v", lv)
		}
	})
}

func TestBucketRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 10, memnet.Config{Latency: pairLatency(time.Millisecond, 5*time.Millisecond)}, func(i int, c *Config) {
			c.RefreshInterval = 10 * time.Minute
		})
		before := tn.nodes[3].Stats().RequestsOut.FindNode
		time.Sleep(11 * time.Minute)
		synctest.Wait()
		if after := tn.nodes[3].Stats().RequestsOut.FindNode; after == before {
			t.Fatal("no refresh lookups after the refresh interval")
		}
	})
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		field string
		mod   func(*Config)
	}{
		{"Levels", func(c *Config) { c.Levels = []time.Duration{20 * time.Millisecond, 60 * time.Millisecond} }},
		{"Levels", func(c *Config) { c.Levels = make([]time.Duration, 8) }},
		{"B", func(c *Config) { c.B = 0 }},
		{"Alpha", func(c *Config) { c.Alpha = 0 }},
		{"BucketSize", func(c *Config) { c.BucketSize = 13 }},
		{"FullValues", func(c *Config) { c.FullValues = 0 }},
		{"Leak", func(c *Config) { c.Leak = 0 }},
		{"Replicas", func(c *Config) { c.Replicas = 0 }},
		{"MaxValueSize", func(c *Config) { c.MaxValueSize = MaxValueSizeLimit + 1 }},
		{"MaxTTL", func(c *Config) { c.MaxTTL = time.Millisecond }},
		{"MaxRPCTimeout", func(c *Config) { c.MaxRPCTimeout = time.Millisecond }},
		{"InitialRPCTimeout", func(c *Config) { c.InitialRPCTimeout = time.Hour }},
		{"LookupTimeout", func(c *Config) { c.LookupTimeout = time.Millisecond }},
		{"ReorderWindow", func(c *Config) { c.ReorderWindow = time.Hour }},
		{"Advertise", func(c *Config) { c.Advertise = netip.MustParseAddrPort("0.0.0.0:4000") }},
		{"MaxValues", func(c *Config) { c.MaxValues = 0 }},
		{"MaxKeys", func(c *Config) { c.MaxKeys = 0 }},
		{"MaxTrackedKeys", func(c *Config) { c.MaxTrackedKeys = 0 }},
		{"MinRPCTimeout", func(c *Config) { c.MinRPCTimeout = 0 }},
		{"MaxFailures", func(c *Config) { c.MaxFailures = 0 }},
		{"QuestionableAfter", func(c *Config) { c.QuestionableAfter = 0 }},
		{"RefreshInterval", func(c *Config) { c.RefreshInterval = 0 }},
		{"NodesLiveWithin", func(c *Config) { c.NodesLiveWithin = 0 }},
		{"MaxClockSkew", func(c *Config) { c.MaxClockSkew = time.Millisecond }},
		{"ClusterInterval", func(c *Config) { c.ClusterInterval = time.Millisecond }},
		{"JoinFraction", func(c *Config) { c.JoinFraction = 0 }},
		{"LeaveFraction", func(c *Config) { c.LeaveFraction = 1.5 }},
		{"ValidateMembers", func(c *Config) { c.ValidateMembers = 33 }},
		{"HintHops", func(c *Config) { c.HintHops = 17 }},
		{"Pins", func(c *Config) { c.Pins = map[int]string{3: "x"} }},
		{"Pins", func(c *Config) { c.Pins = map[int]string{1: " "} }},
		{"HintPrefixes", func(c *Config) { c.HintPrefixes = []netip.Prefix{{}} }},
	}
	d := DefaultConfig()
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.mod(&c)
		err := c.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || ce.Msg == "" ||
			err.Error() != "coraldht: config "+tc.field+": "+ce.Msg {
			t.Errorf("%s: error %v (%#v) is not a *ConfigError naming the field", tc.field, err, ce)
		}
	}
}

// TestPingNode: the reply names the node's services, whether or not this
// node knew it; a node that is gone is an error.
func TestPingNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 3, memnet.Config{Latency: pairLatency(time.Millisecond, 10*time.Millisecond)}, func(i int, c *Config) {
			c.Services = []Services{0, ServiceHTTP, ServiceDNS}[i]
		})
		ctx := context.Background()
		for i, want := range []Services{ServiceHTTP, ServiceDNS} {
			other := tn.nodes[i+1]
			ni, err := tn.nodes[0].PingNode(ctx, other.Addr())
			if err != nil {
				t.Fatal(err)
			}
			if ni.Addr != other.Addr() || ni.ID != other.ID() || ni.Services != want || ni.RTT <= 0 || ni.LastHeard.IsZero() {
				t.Errorf("PingNode(%v) = %+v, want services %v, its ID and a measured RTT", other.Addr(), ni, want)
			}
		}
		tn.nodes[2].Close()
		if _, err := tn.nodes[0].PingNode(ctx, tn.nodes[2].Addr()); err == nil {
			t.Error("PingNode of a closed node succeeded")
		}
	})
}

// TestGetAllGathersEveryValue: a value that reached only the node nearest
// the key (its other stores timed out, say) is missed by Get, which
// answers with the first values it finds (here the getter's own), and
// found by GetAll, which returns the union over the nodes its walk
// reaches, the nearest ones included. ACME challenge values need it: a
// name's and its wildcard's are published at once and validated apart.
func TestGetAllGathersEveryValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 12, memnet.Config{}, nil)
		key := KeyFor("challenge values")
		nodes := slices.Clone(tn.nodes)
		slices.SortFunc(nodes, func(a, b *Node) int { return CompareDistance(key, a.ID(), b.ID()) })
		nearest, getter := nodes[0], nodes[len(nodes)-1]
		now := time.Now()
		lk := levelKey{level: 0, key: key}
		for _, n := range nodes[1:] {
			n.storeLocal(lk, []byte("first"), time.Minute, now, holderID{}, netip.AddrPort{})
		}
		nearest.storeLocal(lk, []byte("second"), time.Minute, now, holderID{}, netip.AddrPort{})
		got := func(r GetResult) []string {
			var out []string
			for _, v := range r.Values {
				out = append(out, string(v.Data))
			}
			slices.Sort(out)
			return out
		}
		r, err := getter.Get(t.Context(), key, 0)
		if err != nil {
			t.Fatal(err)
		}
		if vs := got(r); !slices.Equal(vs, []string{"first"}) {
			t.Fatalf("Get = %v, want the getter's own [first] (the test's premise)", vs)
		}
		r, err = getter.GetAll(t.Context(), key, 0)
		if err != nil {
			t.Fatal(err)
		}
		if vs := got(r); !slices.Equal(vs, []string{"first", "second"}) {
			t.Fatalf("GetAll = %v, want [first second]", vs)
		}
	})
}

// TestRestartedNodeHeardAgain: a node that stopped answering went bad in
// a peer's table (sweeps and lookups pass a bad entry over). Restarted at
// its address, a new process without the cookie the peer gave the old
// one, its first request to the peer is unproven: the peer must verify it
// (the ping's reply puts it back) rather than take it for known, even
// within the holdoff of the verification it answered before it stopped.
// One request only: a restarted node's lookups may ask a peer just once,
// and nothing else makes it ask again for a long while.
func TestRestartedNodeHeardAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 3, memnet.Config{Latency: pairLatency(time.Millisecond, 5*time.Millisecond)}, nil)
		ctx := context.Background()
		peer, victim := tn.nodes[0], tn.nodes[2]
		addr := victim.Addr()
		listed := func() bool {
			return slices.ContainsFunc(peer.RoutingTable(0), func(ni NodeInfo) bool { return ni.Addr == addr })
		}
		if !listed() {
			t.Fatal("the victim is not in the peer's table after joining")
		}
		tn.net.Kill(addr)
		victim.Close()
		for range peer.cfg.MaxFailures {
			if _, err := peer.Ping(ctx, addr); !errors.Is(err, ErrTimeout) {
				t.Fatalf("ping of a killed node: %v", err)
			}
		}
		if listed() {
			t.Fatal("the killed node is still a good entry after failing every ping")
		}
		tr, err := tn.net.Restart(addr)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Key = testKey
		reborn, err := NewNode(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		defer reborn.Close()
		verified := peer.Stats().Verifications
		if _, err := reborn.call(ctx, Contact{ID: peer.ID(), Addr: peer.Addr(), Services: wire.CapExtensions}, &wire.Message{Type: wire.FindNode, Target: reborn.ID()}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // virtual: the verification's round trip
		synctest.Wait()
		if !listed() {
			t.Fatalf("the restarted node is not back in the peer's table after its request (%d verification pings)", peer.Stats().Verifications-verified)
		}
	})
}
