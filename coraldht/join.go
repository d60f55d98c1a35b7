package coraldht

import (
	"context"
	"errors"
	"net/netip"
	"time"
)

// Join retry bounds: the first retry comes quickly (a bootstrap node
// starting at the same moment), then the wait doubles so that a network
// whose bootstrap nodes are down is not flooded by every node restarting.
const (
	joinFirstRetry = time.Second
	joinMaxRetry   = 30 * time.Second
)

// JoinRetrying calls Bootstrap with addrs until it succeeds or ctx ends,
// waiting 1 s after the first failure and twice as long after each next
// one, up to 30 s. onFailure, if not nil, hears each failure and the wait
// before the next attempt. It returns nil once joined, or ctx's error.
//
// A node with no addrs is the first of its network; Bootstrap then only
// succeeds once other nodes have found it, which is what starts its
// clustering, so callers should treat such a node as joined at once and
// let this run in the background.
func (n *Node) JoinRetrying(ctx context.Context, addrs []netip.AddrPort, onFailure func(err error, retryIn time.Duration)) error {
	wait := joinFirstRetry
	for {
		err := n.Bootstrap(ctx, addrs...)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrClosed) {
			return err
		}
		if onFailure != nil {
			onFailure(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, joinMaxRetry)
	}
}
