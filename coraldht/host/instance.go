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
	warmC      chan struct{} // closed after the saved contacts' first round
	stateDir   string        // where the contacts are saved; "": not on disk
	log        *slog.Logger

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

// Warm is closed once the node has pinged the contacts it had before its
// restart (the previous run's on its address, or those saved in
// Options.StateDir), so that its tables hold those still there, or at
// once when it had none. A node whose Warm is open knows less than it
// soon will: servers should not say they are ready yet.
func (i *Instance) Warm() <-chan struct{} {
	if i.warmC == nil {
		return alreadyWarm // an instance host did not start (Detached)
	}
	return i.warmC
}

var alreadyWarm = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Stopped is closed once the instance has stopped: its node is closed and
// its join loop has returned.
func (i *Instance) Stopped() <-chan struct{} { return i.stopped }

// startInstance starts a node on tr and its join loop, which first
// rejoins through saved (the previous run's contacts; nil: those saved in
// the state directory, if any).
func startInstance(p plan, tr coraldht.Transport, saved []savedContact) (*Instance, error) {
	node, err := coraldht.NewNode(p.cfg, tr)
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	i := &Instance{listen: p.listen, node: node, started: time.Now(), joinedC: make(chan struct{}), warmC: make(chan struct{}),
		stateDir: p.stateDir, log: p.log, cancel: cancel, loopDone: make(chan struct{}), stopped: make(chan struct{})}
	if saved == nil && p.stateDir != "" {
		if saved, err = loadContacts(p.stateDir, p.listen, time.Now()); err != nil {
			p.log.Warn("saved contacts not read; joining without them", "err", err)
		}
	}
	if len(p.boot) == 0 {
		// The first node of a network is the network; it still bootstraps
		// (in the background) once others have found it, which starts its
		// clustering.
		i.markJoined()
	}
	go i.join(ctx, p.boot, saved, p.log)
	if p.identity != nil && p.identity.Revocations != "" {
		go i.pollRevocations(ctx, p.identity, p.log)
	}
	p.log.Info("node started", "addr", node.Addr(), "id", node.ID().Short(), "services", p.cfg.Services, "saved_contacts", len(saved))
	return i, nil
}

// join pings the saved contacts (with the bootstrap list) once, then
// bootstraps until it succeeds (JoinRetrying: 1 s to 30 s apart) or the
// instance stops, saving the contacts every saveEvery meanwhile.
func (i *Instance) join(ctx context.Context, boot []netip.AddrPort, saved []savedContact, log *slog.Logger) {
	defer close(i.loopDone)
	if i.stateDir != "" {
		go i.saveEvery(ctx)
	}
	if len(saved) > 0 {
		wctx, cancel := context.WithTimeout(ctx, warmTimeout)
		err := i.node.Bootstrap(wctx, rejoinAddrs(boot, saved)...)
		cancel()
		close(i.warmC)
		if err == nil {
			i.markJoined()
			log.Info("node rejoined through its saved contacts", "saved", len(saved), "contacts", i.node.Levels()[0].Contacts)
			return
		}
		log.Warn("no saved contact answered; joining through the bootstrap list", "saved", len(saved), "err", err)
	} else {
		close(i.warmC)
	}
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

// stop closes the node and waits for the join loop. It returns the
// node's contacts (saved in the state directory too, when there is one)
// for the next run on the address; nil after the first call.
func (i *Instance) stop() []savedContact {
	var contacts []savedContact
	i.stopOnce.Do(func() {
		i.cancel()
		contacts = snapshotContacts(i.node)
		if i.stateDir != "" {
			if err := saveContacts(i.stateDir, i.listen, contacts); err != nil {
				i.log.Warn("contacts not saved", "dir", i.stateDir, "err", err)
			}
		}
		_ = i.node.Close()
		<-i.loopDone
		close(i.stopped)
	})
	return contacts
}

// saveEvery writes the contacts every saveEvery until ctx ends, for a
// process that is killed without stopping its node.
func (i *Instance) saveEvery(ctx context.Context) {
	t := time.NewTicker(saveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := saveContacts(i.stateDir, i.listen, snapshotContacts(i.node)); err != nil {
				i.log.Warn("contacts not saved", "dir", i.stateDir, "err", err)
			}
		}
	}
}
