package coral

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/host"
)

// A CoreDNS reload builds a new plugin instance and starts it before the
// old one stops, and several server blocks may name the same node. The DSHT
// node (its UDP socket, routing tables, clusters and stored values) lives
// in coraldht/host, one per listen address, shared by every instance that
// holds it; a changed node configuration restarts it in place on the same
// socket (the reload policy is host's, the same as Caddy's). The resolver
// RTTs, the name servers and the cookie secret are attached to the listen
// address, so they carry over reloads and restarts alike.

// nodeState is what the plugin keeps per listen address beside the node.
type nodeState struct {
	rtts   *rttCache
	names  *nsBook  // name servers this node knew
	cookie [16]byte // server cookie secret: cookies handed out stay valid across reloads
	// familiar are the addresses answered before (proof.go), so that a
	// reload does not make every resolver prove itself again.
	familiar *bucketTable[familiarity]
	// live is the newest live set any instance's sweep published for this
	// listen address; a reload's new instance starts from it, also when the
	// node itself restarted.
	live atomic.Pointer[liveSet]
}

func newNodeState() *nodeState {
	st := &nodeState{rtts: newRTTCache(rttCacheSize), names: newNSBook(nsBookSize), familiar: newBucketTable[familiarity](familiarTable)}
	_, _ = rand.Read(st.cookie[:])
	return st
}

// nodeEntry is one instance's hold on the node and the state of its
// listen address. The node is read through the handle at each use, so
// that a restart in place (a newer configuration's, or a drain) is
// followed.
type nodeEntry struct {
	*nodeState
	listen string
	joined loadFunc     // the running node has joined
	handle *host.Handle // nil: a node of the program's (Options.Node)
	given  *coraldht.Node
}

// node is the node running now.
func (e *nodeEntry) node() *coraldht.Node {
	if e.handle == nil {
		return e.given
	}
	return e.handle.Node()
}

// draining reports whether the node drains (never a given node).
func (e *nodeEntry) draining() bool { return e.handle != nil && e.handle.Draining() }

// warm is closed once the running node has pinged the contacts it saved
// before a restart (at once for a given node).
func (e *nodeEntry) warm() <-chan struct{} {
	if e.handle == nil {
		return closedChan
	}
	return e.handle.Instance().Warm()
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// givenNode is the entry of a node the program runs itself
// (Options.Node): state of its own, joined.
func givenNode(n *coraldht.Node) *nodeEntry {
	return &nodeEntry{nodeState: newNodeState(), listen: n.Addr().String(), given: n, joined: func() bool { return true }}
}

// runningNode is the nodeSource of the node running on an entry's listen
// address now.
type runningNode struct{ e *nodeEntry }

func (r runningNode) Nodes(ctx context.Context, level, count int, target netip.Addr, services coraldht.Services) []coraldht.NodeInfo {
	return r.e.node().Nodes(ctx, level, count, target, services)
}
func (r runningNode) Ping(ctx context.Context, addr netip.AddrPort) (time.Duration, error) {
	return r.e.node().Ping(ctx, addr)
}
func (r runningNode) PingNode(ctx context.Context, addr netip.AddrPort) (coraldht.NodeInfo, error) {
	return r.e.node().PingNode(ctx, addr)
}
func (r runningNode) HintedNodes(ctx context.Context, prefix netip.Prefix) ([]netip.AddrPort, error) {
	return r.e.node().HintedNodes(ctx, prefix)
}
func (r runningNode) Levels() []coraldht.LevelInfo           { return r.e.node().Levels() }
func (r runningNode) RoutingTable(l int) []coraldht.NodeInfo { return r.e.node().RoutingTable(l) }

// loadFunc reads a flag, like an atomic.Bool's Load.
type loadFunc func() bool

func (f loadFunc) Load() bool { return f() }

// rttCacheSize bounds the resolver prefixes remembered per node.
const rttCacheSize = 100_000

// nodeOptions are the node settings of cfg, which parse has checked.
func (cfg *config) nodeOptions() host.Options {
	o := cfg.node
	o.Services = coraldht.ServiceDNS
	o.Logger = slog.New(clogHandler{})
	return o
}

// acquireNode takes the node for cfg.listen, starting or restarting it as
// its settings require. The nodes running in the process, for the metrics,
// are host.Running().
func acquireNode(cfg *config) (*nodeEntry, error) {
	h, err := host.Acquire(cfg.nodeOptions())
	if err != nil {
		return nil, err
	}
	return &nodeEntry{nodeState: host.Attached(h, newNodeState), listen: cfg.listen, handle: h,
		joined: func() bool { return h.Instance().Joined() }}, nil
}

// releaseNode drops the instance's hold; the last one closes the node.
func releaseNode(e *nodeEntry) {
	if e.handle != nil {
		e.handle.Release()
	}
}

// clogHandler sends the node's slog output to CoreDNS's log.
type clogHandler struct{ attrs []slog.Attr }

func (h clogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h clogHandler) Handle(_ context.Context, r slog.Record) error {
	msg := "dht: " + r.Message
	add := func(a slog.Attr) bool { msg += " " + a.String(); return true }
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	switch {
	case r.Level >= slog.LevelError:
		log.Error(msg)
	case r.Level >= slog.LevelWarn:
		log.Warning(msg)
	default:
		log.Info(msg)
	}
	return nil
}

func (h clogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return clogHandler{attrs: append(slices.Clone(h.attrs), as...)}
}

func (h clogHandler) WithGroup(string) slog.Handler { return h }
