package coral

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// A CoreDNS reload builds a new plugin instance and starts it before the
// old one stops, and several server blocks may name the same node. The DSHT
// node (its UDP socket, routing tables, clusters and stored values) and the
// resolver RTTs therefore live here, keyed by listen address, and are
// shared by every instance that configures the node identically. A changed
// node configuration replaces the node; the RTTs and the cookie secret carry
// over.

// nodeEntry is one node shared by plugin instances.
type nodeEntry struct {
	listen string
	ident  string // node configuration; equal ident → the node is reused
	node   *coraldht.Node
	rtts   *rttCache
	names  *nsBook  // name servers this node knew; kept across reloads like rtts
	cookie [16]byte // server cookie secret: cookies handed out stay valid across reloads
	refs   int
	joined atomic.Bool
	// live is the newest live set any instance's sweep published for this
	// listen address; a reload's new instance starts from it, also when the
	// node itself is replaced.
	live   atomic.Pointer[liveSet]
	cancel context.CancelFunc
	done   chan struct{}
}

var registry = struct {
	sync.Mutex
	nodes map[string]*nodeEntry
}{nodes: make(map[string]*nodeEntry)}

// rttCacheSize bounds the resolver prefixes remembered per node.
const rttCacheSize = 100_000

// nodeIdent summarises the settings that shape a node.
func nodeIdent(cfg *config) string {
	pins := slices.Sorted(maps.Keys(cfg.pins))
	var ps []string
	for _, l := range pins {
		ps = append(ps, fmt.Sprintf("%d=%s", l, cfg.pins[l]))
	}
	return fmt.Sprintf("adv=%v boot=%v key=%s levels=%v pins=%v", cfg.advertise, cfg.bootstrap, cfg.keyFile, cfg.levels, ps)
}

// acquireNode returns the node for cfg.listen, creating it if needed.
func acquireNode(cfg *config) (*nodeEntry, error) {
	registry.Lock()
	defer registry.Unlock()
	ident := nodeIdent(cfg)
	old := registry.nodes[cfg.listen]
	if old != nil && old.ident == ident {
		old.refs++
		return old, nil
	}
	rtts, names := newRTTCache(rttCacheSize), newNSBook(nsBookSize)
	if old != nil {
		// The configuration changed: close the old node first, since the new
		// one binds the same address. Instances still holding it see a
		// closed node until they stop, moments later.
		log.Infof("node %s: configuration changed, restarting the DSHT node", cfg.listen)
		old.close()
		delete(registry.nodes, cfg.listen)
		rtts, names = old.rtts, old.names
	}
	e, err := newNodeEntry(cfg, ident, rtts, names)
	if err != nil {
		return nil, err
	}
	if old != nil {
		e.cookie = old.cookie
		e.live.Store(old.live.Load())
	}
	registry.nodes[cfg.listen] = e
	return e, nil
}

// releaseNode drops one reference; the last one closes the node.
func releaseNode(e *nodeEntry) {
	registry.Lock()
	defer registry.Unlock()
	if registry.nodes[e.listen] != e {
		return // already replaced and closed
	}
	if e.refs--; e.refs <= 0 {
		e.close()
		delete(registry.nodes, e.listen)
	}
}

func newNodeEntry(cfg *config, ident string, rtts *rttCache, names *nsBook) (*nodeEntry, error) {
	nc := coraldht.DefaultConfig()
	nc.Services = coraldht.ServiceDNS
	nc.Levels = slices.Clone(cfg.levels)
	nc.Advertise = cfg.advertise
	if len(cfg.pins) > 0 {
		nc.Pins = maps.Clone(cfg.pins)
	}
	nc.Logger = slog.New(clogHandler{})
	if cfg.keyFile != "" {
		k, err := coraldht.LoadKeyFile(cfg.keyFile)
		if err != nil {
			return nil, err
		}
		nc.Key = k
	}
	if err := nc.Validate(); err != nil {
		return nil, err
	}
	tr, err := coraldht.ListenUDP(cfg.listen)
	if err != nil {
		return nil, err
	}
	node, err := coraldht.NewNode(nc, tr)
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &nodeEntry{listen: cfg.listen, ident: ident, node: node, rtts: rtts, names: names, refs: 1, cancel: cancel, done: make(chan struct{})}
	_, _ = rand.Read(e.cookie[:])
	go e.join(ctx, cfg.bootstrap)
	log.Infof("node %s (id %s) started, services %v", node.Addr(), node.ID().Short(), nc.Services)
	return e, nil
}

// join bootstraps until it succeeds, backing off from 1 s to 30 s. A node
// with no bootstrap addresses (the first of a network) succeeds as soon as
// some other node has contacted it.
func (e *nodeEntry) join(ctx context.Context, boot []netip.AddrPort) {
	defer close(e.done)
	if len(boot) == 0 {
		// The first node of a network is the network; it still bootstraps
		// (in the background) once others have found it, which starts its
		// clustering.
		e.joined.Store(true)
	}
	err := e.node.JoinRetrying(ctx, boot, func(err error, in time.Duration) {
		if len(boot) > 0 {
			log.Warningf("node %s: bootstrap: %v; retrying in %v", e.node.Addr(), err, in)
		}
	})
	if err == nil {
		e.joined.Store(true)
		log.Infof("node %s joined the network (%d contacts)", e.node.Addr(), e.node.Levels()[0].Contacts)
	}
}

func (e *nodeEntry) close() {
	e.cancel()
	_ = e.node.Close()
	<-e.done
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
