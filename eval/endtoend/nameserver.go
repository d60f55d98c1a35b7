package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht"
	coral "github.com/coralcdn/coral/plugin/coredns"
	"github.com/coredns/coredns/plugin/metadata"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// The coral plugin's answer logic as this experiment runs it: the
// plugin's own handler (coral.New, the constructor the coral directive
// uses) on a node of the in-memory network, with the world's RTT probe and
// traces, asked without a DNS server in between. What each answer was
// based on comes from the plugin's metadata (coral/proximity, coral/hints),
// as the log plugin would print it.

// simOptions configures a name server of the experiment.
type simOptions struct {
	Zone string // the coral zone, e.g. "nyucd.net."
	// Levels are the node's RTT thresholds; none: one level.
	Levels []time.Duration
	// Probe measures the RTT to a resolver (nil: every resolver is level 0).
	Probe func(ctx context.Context, a netip.Addr) (time.Duration, error)
	// Trace returns the last hops toward a client, nearest it last; nil
	// turns proximity off.
	Trace func(ctx context.Context, target netip.Addr) ([]netip.Addr, error)
	// NoTarget makes choices ignore where the resolver is (its /24): the
	// paper's nodes() called without a target (proximity off).
	NoTarget bool
	// CheckInterval and LiveWithin are the live sweep's (defaults 5s, 15s).
	CheckInterval, LiveWithin time.Duration
}

// simulated is one name server.
type simulated struct{ c *coral.Coral }

// decision is what an answer's choice of proxies and name servers was
// based on.
type decision struct {
	// Source is the proximity source (hints, no_hints, pending, …); empty
	// when proximity was off or not consulted.
	Source string
	// Hop is, for each node ranked near the target, where its heaviest
	// hint was: 0 the target's /24, 1 the router nearest the target, 2 the
	// next one out.
	Hop map[netip.Addr]int
}

// newSimulated starts a name server on node; Close stops it.
func newSimulated(node *coraldht.Node, o simOptions) (*simulated, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "coral %s {\n", o.Zone)
	if o.CheckInterval > 0 {
		fmt.Fprintf(&b, "check_interval %v\n", o.CheckInterval)
	}
	if o.LiveWithin > 0 {
		fmt.Fprintf(&b, "live_within %v\n", o.LiveWithin)
	}
	switch {
	case o.Trace != nil:
		b.WriteString("proximity on\n")
	case o.NoTarget:
		b.WriteString("proximity off\n")
	default:
		b.WriteString("proximity subnet\n")
	}
	if o.Probe == nil {
		b.WriteString("probe none\n")
	}
	b.WriteString("}\n")
	opts := coral.Options{Node: node, Probe: o.Probe}
	if o.Trace != nil {
		opts.Trace = func(ctx context.Context, target netip.Addr, _ int) ([]netip.Addr, error) { return o.Trace(ctx, target) }
	}
	c, err := coral.New(b.String(), opts)
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	return &simulated{c: c}, nil
}

// Close stops the sweep and waits for the background work.
func (s *simulated) Close() { _ = s.c.Stop() }

// Serve answers q as sent by the resolver at from.
func (s *simulated) Serve(ctx context.Context, from netip.AddrPort, q *dns.Msg) *dns.Msg {
	m, _ := s.ServeObserved(ctx, from, q)
	return m
}

// ServeObserved is Serve, also returning what the answer was based on.
func (s *simulated) ServeObserved(ctx context.Context, from netip.AddrPort, q *dns.Msg) (*dns.Msg, decision) {
	w := &simWriter{remote: net.UDPAddrFromAddrPort(from)}
	// A resolver of the experiment talks to the name servers the way a
	// resolver on the Internet talks to a server it knows: its address is
	// proven (over TCP, a real resolver's first answer would be too).
	w.tcp = true
	ctx = metadata.ContextWithMetadata(ctx)
	ctx = s.c.Metadata(ctx, request.Request{W: w, Req: q})
	if _, err := s.c.ServeDNS(ctx, w, q); err != nil || w.msg == nil {
		m := new(dns.Msg)
		return m.SetRcode(q, dns.RcodeServerFailure), decision{}
	}
	d := decision{Source: metadata.ValueFunc(ctx, "coral/proximity")()}
	if hints := metadata.ValueFunc(ctx, "coral/hints")(); hints != "" {
		d.Hop = map[netip.Addr]int{}
		for _, h := range strings.Fields(hints) {
			a, hop, _ := strings.Cut(h, "=")
			n, _ := strconv.Atoi(hop)
			d.Hop[netip.MustParseAddr(a)] = n
		}
	}
	return w.msg, d
}

// simWriter keeps the response instead of sending it.
type simWriter struct {
	remote *net.UDPAddr
	tcp    bool
	msg    *dns.Msg
}

func (w *simWriter) LocalAddr() net.Addr { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (w *simWriter) RemoteAddr() net.Addr {
	if w.tcp {
		return &net.TCPAddr{IP: w.remote.IP, Port: w.remote.Port}
	}
	return w.remote
}
func (w *simWriter) WriteMsg(m *dns.Msg) error { w.msg = m.Copy(); return nil }
func (w *simWriter) Write(b []byte) (int, error) {
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return 0, err
	}
	w.msg = m
	return len(b), nil
}
func (w *simWriter) Close() error        { return nil }
func (w *simWriter) TsigStatus() error   { return nil }
func (w *simWriter) TsigTimersOnly(bool) {}
func (w *simWriter) Hijack()             {}
