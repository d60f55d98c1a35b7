package coraldht

import (
	"context"
	"errors"
	"net/netip"
	"slices"
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
// one, up to 30 s, or only until one of addrs reaches this node. onFailure, if not nil, hears each failure and the wait
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
		if err := n.waitForBootstrap(ctx, addrs, wait, time.Now()); err != nil {
			return err
		}
		wait = min(2*wait, joinMaxRetry)
	}
}

// bootstrapPoll is how often a node waiting to retry its bootstrap list
// looks for a request from one of those nodes.
const bootstrapPoll = 250 * time.Millisecond

// waitForBootstrap waits d before the next try of the bootstrap list, or
// less: until one of addrs has been heard from since failed (the first
// node of a fleet, whose bootstrap list names the others, joins as soon
// as one of them comes up and reaches it, not at its next retry). It
// returns ctx's error if ctx ends first.
func (n *Node) waitForBootstrap(ctx context.Context, addrs []netip.AddrPort, d time.Duration, failed time.Time) error {
	t := time.NewTimer(d)
	defer t.Stop()
	poll := time.NewTicker(bootstrapPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case <-poll.C:
			for _, e := range n.levels[0].rt.all() {
				if e.lastHeard.After(failed) && slices.Contains(addrs, e.Addr) {
					return nil
				}
			}
		}
	}
}
