package host

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// An Instance is one run of a node on a listen address: Acquire starts the
// first, a restart replaces it with the next. Its methods are safe for
// concurrent use.
type Instance struct {
	listen  netip.AddrPort
	node    *coraldht.Node
	started time.Time

	joined     atomic.Bool
	joinedC    chan struct{}
	joinedOnce sync.Once

	cancel   context.CancelFunc
	loopDone chan struct{} // the join loop has returned
	stopOnce sync.Once
	stopped  chan struct{}
}

// Node is the running node. After the instance stops (a restart or the
// last Release), its operations return coraldht.ErrClosed.
func (i *Instance) Node() *coraldht.Node { return i.node }

// Listen is the address the node's socket is bound to.
func (i *Instance) Listen() netip.AddrPort { return i.listen }

// Started is when this node started: the last restart, or the first
// Acquire.
func (i *Instance) Started() time.Time { return i.started }

// Joined reports whether the node has joined the network: it has
// bootstrapped, or it has no bootstrap addresses.
func (i *Instance) Joined() bool { return i.joined.Load() }

// WhenJoined is closed once the node has joined the network.
func (i *Instance) WhenJoined() <-chan struct{} { return i.joinedC }

// Stopped is closed once the instance has stopped: its node is closed and
// its join loop has returned.
func (i *Instance) Stopped() <-chan struct{} { return i.stopped }

// startInstance starts a node on tr and its join loop.
func startInstance(p plan, tr coraldht.Transport) (*Instance, error) {
	node, err := coraldht.NewNode(p.cfg, tr)
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	i := &Instance{listen: p.listen, node: node, started: time.Now(), joinedC: make(chan struct{}),
		cancel: cancel, loopDone: make(chan struct{}), stopped: make(chan struct{})}
	if len(p.boot) == 0 {
		// The first node of a network is the network; it still bootstraps
		// (in the background) once others have found it, which starts its
		// clustering.
		i.markJoined()
	}
	go i.join(ctx, p.boot, p.log)
	if p.identity != nil && p.identity.Revocations != "" {
		go i.pollRevocations(ctx, p.identity, p.log)
	}
	p.log.Info("node started", "addr", node.Addr(), "id", node.ID().Short(), "services", p.cfg.Services)
	return i, nil
}

// join bootstraps until it succeeds (JoinRetrying: 1 s to 30 s apart) or
// the instance stops.
func (i *Instance) join(ctx context.Context, boot []netip.AddrPort, log *slog.Logger) {
	defer close(i.loopDone)
	err := i.node.JoinRetrying(ctx, boot, func(err error, in time.Duration) {
		if len(boot) > 0 {
			log.Warn(bootstrapFailure(err), "bootstrap", boot, "err", err, "in", in)
		}
	})
	if err == nil {
		i.markJoined()
		log.Info("node joined the network", "contacts", i.node.Levels()[0].Contacts)
	}
}

// noAnswerHint is the bootstrap failure message when no bootstrap node
// answered: a node with another network key drops every datagram without
// a reply, so a wrong key looks exactly like an unreachable address.
const noAnswerHint = "no answer from bootstrap: check UDP reachability and that the network key matches"

func bootstrapFailure(err error) string {
	if errors.Is(err, coraldht.ErrNoResponse) || errors.Is(err, coraldht.ErrTimeout) {
		return noAnswerHint + "; retrying"
	}
	return "bootstrap failed; retrying"
}

func (i *Instance) markJoined() {
	i.joinedOnce.Do(func() {
		i.joined.Store(true)
		close(i.joinedC)
	})
}

// stop closes the node and waits for the join loop.
func (i *Instance) stop() {
	i.stopOnce.Do(func() {
		i.cancel()
		_ = i.node.Close()
		<-i.loopDone
		close(i.stopped)
	})
}
