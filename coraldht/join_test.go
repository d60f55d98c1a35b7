package coraldht

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht/memnet"
)

// TestJoinRetrying: a node whose bootstrap node is not up yet keeps trying,
// 1 s, 2 s, 4 s … apart, and joins once the bootstrap node appears.
func TestJoinRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 1, memnet.Config{}, nil)
		late := memAddr(50)
		var waits []time.Duration
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			done <- tn.nodes[0].JoinRetrying(context.Background(), []netip.AddrPort{late}, func(err error, in time.Duration) {
				waits = append(waits, in)
			})
		}()
		// Let it fail a few times, then bring the bootstrap node up.
		time.Sleep(20 * time.Second)
		synctest.Wait()
		tr, err := tn.net.Listen(late)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Key = testKey
		boot, err := NewNode(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		defer boot.Close()
		if err := <-done; err != nil {
			t.Fatalf("JoinRetrying: %v", err)
		}
		if len(waits) < 3 || waits[0] != time.Second || waits[1] != 2*time.Second || waits[2] != 4*time.Second {
			t.Errorf("waits %v, want 1s, 2s, 4s, …", waits)
		}
		for _, w := range waits {
			if w > 30*time.Second {
				t.Errorf("wait %v beyond the 30 s bound", w)
			}
		}
		if took := time.Since(start); took < 20*time.Second {
			t.Errorf("joined after %v, before the bootstrap node existed", took)
		}
		if c := tn.nodes[0].Levels()[0].Contacts; c == 0 {
			t.Error("joined without contacts")
		}
	})
}

// TestJoinRetryingStops: cancelling the context ends the retries, and a
// closed node stops at once.
func TestJoinRetryingStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 1, memnet.Config{}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := tn.nodes[0].JoinRetrying(ctx, []netip.AddrPort{memAddr(60)}, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("after the deadline: %v", err)
		}
		tn.nodes[0].Close()
		if err := tn.nodes[0].JoinRetrying(context.Background(), []netip.AddrPort{memAddr(60)}, nil); !errors.Is(err, ErrClosed) {
			t.Errorf("closed node: %v", err)
		}
	})
}

// TestJoinNotThroughAnotherJoiner: a node whose bootstrap node has not
// answered yet has not joined, even when another node that is joining too
// has found it meanwhile (the second node's bootstrap is the first). As
// the walk-through's fleet starts (each node's bootstrap the next one,
// started a second later), the two used to take each other for the
// network, and stayed an island of their own beside it: their gets never
// found the rest's values. The node keeps retrying its bootstrap list and
// joins the network when its bootstrap node answers.
func TestJoinNotThroughAnotherJoiner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(memnet.Config{})
		start := func(i int) *Node {
			tr, err := net.Listen(memAddr(i))
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.Key = testKey
			cfg.Seed = uint64(i)
			nd, err := NewNode(cfg, tr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { nd.Close() })
			return nd
		}
		joining := func(nd *Node, boot int) <-chan error {
			done := make(chan error, 1)
			go func() { done <- nd.JoinRetrying(t.Context(), []netip.AddrPort{memAddr(boot)}, nil) }()
			return done
		}
		// a joins through b, b through c; neither is up yet. b comes up
		// after a's first ping to it was lost, c after b's: a's retry
		// (its ping timed out after 2 s, and 1 s later) reaches b before
		// b's own ping to c times out.
		a := start(1)
		aJoined := joining(a, 2)
		time.Sleep(1500 * time.Millisecond)
		b := start(2)
		bJoined := joining(b, 3)
		time.Sleep(500 * time.Millisecond)
		// The network: c, and d joined through it.
		c, d := start(3), start(4)
		if err := d.Bootstrap(t.Context(), c.Addr()); err != nil {
			t.Fatal(err)
		}
		for _, done := range []<-chan error{aJoined, bJoined} {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		key := KeyFor("put in the network")
		if _, err := d.Put(t.Context(), key, []byte("d"), time.Minute); err != nil {
			t.Fatal(err)
		}
		for name, nd := range map[string]*Node{"a": a, "b": b} {
			if r, err := nd.Get(t.Context(), key); err != nil || len(r.Values) == 0 {
				t.Errorf("%s (%d contacts) does not find the network's value: %+v %v", name, nd.Levels()[0].Contacts, r, err)
			}
		}
	})
}

// TestJoinWhenBootstrapReachesIt: a node waiting to retry its bootstrap
// list joins as soon as one of those nodes comes up and reaches it (the
// first node of a fleet, whose list names the second), not at its next
// retry, seconds later.
func TestJoinWhenBootstrapReachesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(memnet.Config{})
		start := func(i int) *Node {
			tr, err := net.Listen(memAddr(i))
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.Key = testKey
			nd, err := NewNode(cfg, tr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { nd.Close() })
			return nd
		}
		begin := time.Now()
		a := start(1)
		var lastWait time.Duration
		aJoined := make(chan time.Duration, 1)
		go func() {
			if err := a.JoinRetrying(t.Context(), []netip.AddrPort{memAddr(2)}, func(_ error, in time.Duration) { lastWait = in }); err != nil {
				t.Error(err)
			}
			aJoined <- time.Since(begin)
		}()
		time.Sleep(9500 * time.Millisecond) // a waits 4 s after its third try
		synctest.Wait()
		b := start(2)
		if err := b.Bootstrap(t.Context(), a.Addr()); err != nil {
			t.Fatal(err)
		}
		came := time.Since(begin)
		if took := <-aJoined; took > came+time.Second {
			t.Errorf("a joined %v after b reached it at %v (its wait then %v), want within a second", took-came, came, lastWait)
		}
	})
}
