package host

import (
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/coralcdn/coral/coraldht"
)

// slot is one listen address: its socket, the node running on it and the
// handles that hold it.
type slot struct {
	listen   netip.AddrPort
	sock     *socket
	plan     plan // the running node's settings, before draining; guarded by mu
	inst     atomic.Pointer[Instance]
	holders  []*Handle            // in Acquire order; guarded by mu
	values   map[reflect.Type]any // Attached; guarded by mu
	draining bool                 // guarded by mu
}

// mu guards slots and every slot's plan, holders, values and draining. Starting,
// restarting and stopping nodes happen under it, so they never interleave.
var (
	mu    sync.Mutex
	slots = map[netip.AddrPort]*slot{}
)

// betweenRuns, when set (by tests), runs during a restart after the old
// node has stopped and before the new one starts.
var betweenRuns func()

// A Handle is one holder's reference to the node on a listen address.
type Handle struct {
	s        *slot
	plan     plan // the settings this holder acquired the node with
	released atomic.Bool
}

// Acquire returns a handle on the node for opts.Listen. The first Acquire
// for an address binds the socket and starts the node. A later one with
// the same settings shares the running node; one with different settings
// restarts it in place on the same socket (see the package documentation).
// Everything that can fail (Validate, reading the key file) is checked
// before a running node is touched: a failed Acquire leaves it running.
func Acquire(opts Options) (*Handle, error) {
	p, err := opts.plan()
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	s := slots[p.listen]
	switch {
	case s == nil:
		if s, err = openSlot(p); err != nil {
			return nil, err
		}
		slots[p.listen] = s
	case !s.plan.st.equal(p.st):
		if err := s.restart(p); err != nil {
			return nil, err
		}
	case p.st.keyed && !slices.Equal(s.inst.Load().Node().Keyring().Fingerprints(), p.keys):
		// Compared with the running keyring rather than the previous
		// plan: the configuration also wins over keys changed through
		// an admin call since.
		if err := s.rekey(p, "network keys changed; updating the running node's keyring in place"); err != nil {
			return nil, err
		}
	}
	h := &Handle{s: s, plan: p}
	s.holders = append(s.holders, h)
	return h, nil
}

// Check validates opts and reads the key file, as Acquire does first,
// without binding or touching any node: a configuration check.
func Check(opts Options) error {
	_, err := opts.plan()
	return err
}

func openSlot(p plan) (*slot, error) {
	sock, err := openSocket(p.listen)
	if err != nil {
		return nil, err
	}
	s := &slot{listen: p.listen, sock: sock, values: map[reflect.Type]any{}}
	if err := s.start(p, nil); err != nil {
		sock.close()
		return nil, err
	}
	return s, nil
}

// start starts a node with p's settings on the slot's socket, without the
// node's services while the slot is draining, rejoining through saved
// (the previous run's contacts; nil: those saved on disk).
func (s *slot) start(p plan, saved []savedContact) error {
	tr, err := s.sock.transport()
	if err != nil {
		return err
	}
	run := p
	if s.draining {
		run.cfg.Services = 0
	}
	inst, err := startInstance(run, tr, saved)
	if err != nil {
		return err
	}
	s.plan = p
	s.inst.Store(inst)
	return nil
}

// restart replaces the running node with one with p's settings. Should the
// new node fail to start, the previous settings start again.
func (s *slot) restart(p plan) error {
	return s.restartWhy(p, "node settings changed; restarting the node in place on the same socket")
}

func (s *slot) restartWhy(p plan, why string) error {
	p.log.Info(why)
	saved := s.inst.Load().stop()
	if saved == nil {
		saved = []savedContact{} // none: not a reason to read the file
	}
	if betweenRuns != nil {
		betweenRuns()
	}
	err := s.start(p, saved)
	if err != nil {
		p.log.Error("restart failed; starting the node again with its previous settings", "err", err)
		if err2 := s.start(s.plan, saved); err2 != nil {
			p.log.Error("node stopped", "err", err2)
		}
	}
	return err
}

// rekey gives the running node p's keyring; the node keeps running,
// with its ID, tables and store.
func (s *slot) rekey(p plan, why string) error {
	if err := s.inst.Load().Node().Keyring().Set(p.cfg.Key, p.cfg.AcceptedKeys...); err != nil {
		return err
	}
	p.log.Info(why, "keys", p.keys)
	s.plan = p
	return nil
}

// Instance is the node running on the handle's address now: after a
// restart, the new one.
func (h *Handle) Instance() *Instance { return h.s.inst.Load() }

// Node is the running node, Instance().Node().
func (h *Handle) Node() *coraldht.Node { return h.Instance().Node() }

// Release drops the handle's reference; the last one stops the node and
// closes the socket. It reports whether it did. Calls after the first are
// no-ops.
//
// When the newest holder lets go while older ones remain, and the node
// runs with its settings but none of the others', the configuration that
// brought those settings failed after acquiring the node (a server stops
// the new configuration and keeps the old one): the node restarts with
// the settings of the newest remaining holder, which is still running.
func (h *Handle) Release() (closed bool) {
	if !h.released.CompareAndSwap(false, true) {
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	s := h.s
	newest := len(s.holders) > 0 && s.holders[len(s.holders)-1] == h
	s.holders = slices.DeleteFunc(s.holders, func(x *Handle) bool { return x == h })
	if len(s.holders) > 0 {
		back := s.holders[len(s.holders)-1].plan
		switch {
		case newest && !s.plan.st.equal(back.st) && h.plan.st.equal(s.plan.st) &&
			!slices.ContainsFunc(s.holders, func(x *Handle) bool { return x.plan.st.equal(s.plan.st) }):
			_ = s.restartWhy(back, "the configuration that changed the node settings stopped; restarting the node with the previous settings")
		case newest && s.plan.st.equal(back.st) && !s.plan.keysEqual(back) && h.plan.keysEqual(s.plan) &&
			!slices.ContainsFunc(s.holders, func(x *Handle) bool { return x.plan.keysEqual(s.plan) }):
			_ = s.rekey(back, "the configuration that changed the network keys stopped; restoring the previous keys")
		}
		return false
	}
	s.inst.Load().stop()
	s.sock.close()
	delete(slots, s.listen)
	return true
}

// SetDraining takes the node out of service, or back in: while draining
// it runs without its services (Options.Services), so peers that hear from
// it, and the CoreDNS nodes that check their cluster's members, stop
// handing it out. Changing it restarts the node in place (see Reloads in
// the package documentation); the state lasts until changed again or the
// last Release, across reloads.
func (h *Handle) SetDraining(on bool) error {
	mu.Lock()
	defer mu.Unlock()
	s := h.s
	if h.released.Load() || s.draining == on {
		return nil
	}
	s.draining = on
	why := "draining: restarting the node in place without its services"
	if !on {
		why = "drain ended: restarting the node in place with its services"
	}
	return s.restartWhy(s.plan, why)
}

// Draining reports whether the node is draining (SetDraining).
func (h *Handle) Draining() bool {
	mu.Lock()
	defer mu.Unlock()
	return h.s.draining
}

// Attached returns the value of type T attached to the handle's listen
// address, creating it with init on first use. It lives as long as the
// address is held, across reloads and restarts: state a server keeps
// beside the node (caches, secrets) that a restart must not lose. init
// runs under this package's lock and must not call into it.
func Attached[T any](h *Handle, init func() *T) *T {
	mu.Lock()
	defer mu.Unlock()
	key := reflect.TypeFor[T]()
	if v, ok := h.s.values[key]; ok {
		return v.(*T)
	}
	v := init()
	h.s.values[key] = v
	return v
}

// Running lists the instances running in this process, by listen address.
func Running() []*Instance {
	mu.Lock()
	out := make([]*Instance, 0, len(slots))
	for _, s := range slots {
		out = append(out, s.inst.Load())
	}
	mu.Unlock()
	slices.SortFunc(out, func(a, b *Instance) int { return a.listen.Compare(b.listen) })
	return out
}
