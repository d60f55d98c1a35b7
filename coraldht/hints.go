package coraldht

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"

	"github.com/coralcdn/coral/coraldht/icmpprobe"
)

// Locality hints: nodes publish their address in the level-0 DSHT under
// keys named after network prefixes they are in or near (their own /24, and
// the routers a few hops out: each router's own address and its /24), and
// read the same keys to meet nearby nodes at once, instead of waiting for
// chance RPCs to reveal them. A DNS server reads them too (HintedNodes), for
// the routers on the last hops toward a client: paths toward a client and
// out of its network often share routers and /24s.

const (
	// hintTTL is how long a published hint lives; hintRefresh how often the
	// node publishes again.
	hintTTL     = time.Hour
	hintRefresh = 30 * time.Minute

	// hintPingsPerPrefix bounds the nodes pinged per hint prefix.
	hintPingsPerPrefix = 8

	// traceTimeout bounds the start-up traceroute.
	traceTimeout = 2 * time.Second
)

// hintKey is the level-0 key under which nodes in or near prefix p publish
// their addresses.
func hintKey(p netip.Prefix) ID { return KeyFor("coral-hint " + p.Masked().String()) }

// SitePrefix is the /24 (IPv4) or /48 (IPv6) around a: the granularity at
// which Coral treats addresses as one site, for locality hints, for
// preferring nearby nodes in Nodes, and for placing DNS resolvers.
func SitePrefix(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := 24
	if a.Is6() {
		bits = 48
	}
	p, _ := a.Prefix(bits)
	return p
}

// privateHint reports addresses whose prefixes mean nothing about location:
// private, shared (RFC 6598 CGNAT), loopback, link-local and unspecified.
func privateHint(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() ||
		a.IsMulticast() || cgnat.Contains(a)
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// hintPrefixes lists the prefixes this node publishes itself under: its own
// address's, the routers', and the configured ones.
func (n *Node) hintPrefixes(routers []netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	add := func(p netip.Prefix) {
		if p.IsValid() && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	// Own subnets: the advertised address and, behind a NAT or port
	// forward, the address the socket is bound to.
	own := []netip.Addr{n.self.Addr.Addr(), n.tr.LocalAddr().Addr()}
	for _, a := range append(own, routers...) {
		if !a.IsValid() || a.IsUnspecified() {
			continue
		}
		if n.cfg.HintPrivate || !privateHint(a) {
			add(SitePrefix(a))
		}
	}
	for _, a := range routers {
		// The router itself, as the paper's nodes did: a client whose
		// path ends through the same router is nearer than one that only
		// shares its /24.
		if a = a.Unmap(); a.IsValid() && !a.IsUnspecified() && (n.cfg.HintPrivate || !privateHint(a)) {
			add(netip.PrefixFrom(a, a.BitLen()))
		}
	}
	for _, p := range n.cfg.HintPrefixes {
		add(p.Masked())
	}
	return out
}

// traceTarget picks where the traceroute aims: the first bootstrap node
// off this node's /24 (on its own LAN a trace meets no router), else the
// first one off this host. Routers on the way to it are this node's
// upstream.
func (n *Node) traceTarget() (netip.Addr, bool) {
	if n.cfg.HintHops == 0 {
		return netip.Addr{}, false
	}
	if _, real := n.tr.(*UDPTransport); !real {
		return netip.Addr{}, false // a simulated network has no routers to trace
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return traceTargetAmong(n.self.Addr.Addr(), n.bootstraps)
}

// traceTargetAmong is traceTarget's choice among the bootstrap addresses
// for a node at self.
func traceTargetAmong(self netip.Addr, boots []netip.AddrPort) (netip.Addr, bool) {
	var sameLAN netip.Addr
	for _, b := range boots {
		a := b.Addr().Unmap()
		if a.IsLoopback() || a == self.Unmap() {
			continue
		}
		if SitePrefix(a) != SitePrefix(self) {
			return a, true
		}
		if !sameLAN.IsValid() {
			sameLAN = a
		}
	}
	return sameLAN, sameLAN.IsValid()
}

// ownHalf is the part of a trace toward a bootstrap node that is this
// node's upstream: the first half of the routers heard (rounded up), at
// most hops. A trace toward a node a few routers away ends in that node's
// network, whose routers are not near this one: published as hints, they
// would make a DNS server tracing a client there rank this node among
// the client's neighbours. Traces across the Internet are longer than
// twice the hops kept, and keep their first hops as before.
func ownHalf(routers []netip.Addr, hops int) []netip.Addr {
	return routers[:min(hops, (len(routers)+1)/2)]
}

// publishHints publishes this node under each hint prefix with one PutGet
// per prefix and pings the nodes found there, so that the next clustering
// round has their RTTs and clusters as evidence.
func (n *Node) publishHints(ctx context.Context) {
	var routers []netip.Addr
	if dst, ok := n.traceTarget(); ok {
		var err error
		routers, err = icmpprobe.TraceRouters(ctx, dst, 2*n.cfg.HintHops, traceTimeout)
		if err != nil {
			n.log.Debug("traceroute skipped", "err", err)
		}
		routers = ownHalf(routers, n.cfg.HintHops)
	}
	self, _ := n.self.Addr.MarshalBinary()
	var wg sync.WaitGroup
	for _, p := range n.hintPrefixes(routers) {
		wg.Go(func() {
			n.counters.hintLookups.Add(1)
			r, err := n.PutGet(ctx, hintKey(p), self, hintTTL, 0)
			if err != nil {
				n.log.Debug("hint", "prefix", p, "err", err)
			}
			var found []Contact
			for _, a := range hintAddrs(r.Values) {
				if a != n.self.Addr && len(found) < hintPingsPerPrefix {
					found = append(found, Contact{ID: NodeIDFor(a), Addr: a})
				}
			}
			n.pingAll(ctx, found)
		})
	}
	wg.Wait()
}

// hintAddrs decodes the node addresses stored under a hint key, skipping
// values that are not a usable contact address.
func hintAddrs(vs []Value) []netip.AddrPort {
	var out []netip.AddrPort
	for _, v := range vs {
		var a netip.AddrPort
		if a.UnmarshalBinary(v.Data) != nil || wire.CheckAddr(a) != nil || slices.Contains(out, a) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// HintedNodes returns the DSHT addresses of the nodes that published a
// locality hint under prefix p: nodes in p, or whose first routers are in
// p (a /24 or /48), or are p (a single address). It searches this node's
// levels highest first, as Get does, and returns what the first level
// holding any hint for p has; ErrNotFound when none has.
func (n *Node) HintedNodes(ctx context.Context, p netip.Prefix) ([]netip.AddrPort, error) {
	if !p.IsValid() {
		return nil, fmt.Errorf("%w: invalid prefix", ErrInvalid)
	}
	r, err := n.Get(ctx, hintKey(p))
	if err != nil {
		return nil, err
	}
	return hintAddrs(r.Values), nil
}
