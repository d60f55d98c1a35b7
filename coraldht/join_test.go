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
