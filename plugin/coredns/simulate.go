package coral

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/miekg/dns"
)

// Simulated is this plugin's answer logic without a DNS server, for
// experiments that run a Coral network in virtual time (eval/endtoend): the
// same handler as a CoreDNS server runs (classification by RTT, the live
// sweep, proximity, answer and NS choice, locking), on a node of the
// in-memory network, with the probe and the trace supplied by the
// experiment.
type Simulated struct {
	c      *Coral
	cancel context.CancelFunc
	done   chan struct{}
}

// SimOptions configures a Simulated server.
type SimOptions struct {
	Zone string // the coral zone, e.g. "nyucd.net."
	// Levels are the RTT thresholds of levels 1..n, as the node's; none:
	// one level.
	Levels []time.Duration
	// Probe measures the RTT to a resolver (nil: every resolver is level 0).
	Probe func(ctx context.Context, a netip.Addr) (time.Duration, error)
	// Trace returns the last hops toward a client, nearest it last; nil
	// turns proximity off.
	Trace func(ctx context.Context, target netip.Addr) ([]netip.Addr, error)
	// NoTarget makes choices ignore where the resolver is (its /24): the
	// paper's nodes() called without a target.
	NoTarget bool
	// CheckInterval and LiveWithin are the live sweep's (defaults 5s, 15s).
	CheckInterval, LiveWithin time.Duration
}

// NewSimulated starts the answer logic on node; Close stops it.
func NewSimulated(node *coraldht.Node, o SimOptions) (*Simulated, error) {
	levels := len(o.Levels) + 1
	sch, err := newScheme(o.Zone, "", levels)
	if err != nil {
		return nil, err
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = defaultCheckInterval
	}
	if o.LiveWithin <= 0 {
		o.LiveWithin = defaultLiveWithin
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Coral{scheme: sch, self: node.Addr().Addr().Unmap(), noTarget: o.NoTarget,
		set: settings{answerTTL: defaultAnswerTTLs(levels), nsTTL: uint32(defaultNSTTL.Seconds()),
			negTTL: uint32(defaultNegTTL.Seconds()), retryTTL: uint32(defaultRetryTTL.Seconds()),
			answers: defaultAnswers, nameservers: defaultNameservers}}
	wait := time.Duration(0)
	if len(o.Levels) > 0 {
		wait = o.Levels[0]
	}
	c.classifier = &classifier{thresholds: o.Levels, cache: newRTTCache(rttCacheSize), wait: wait,
		fresh: defaultProbeCache, failedFor: time.Minute, now: time.Now, ctx: ctx}
	if o.Probe != nil && wait > 0 {
		c.classifier.probe = o.Probe
	}
	if o.Trace != nil {
		pc := proximityConfig{wait: defaultProximityWait, timeout: defaultProximityTimeout, cache: defaultProbeCache,
			hops: defaultProximityHops, limit: defaultProximityLimit, entries: proximityEntries}
		c.prox = newProximity(ctx, o.Trace, nodeHints(node), pc)
	}
	c.tracker = newTracker(node, levels, o.CheckInterval, o.LiveWithin, defaultSyncWait)
	s := &Simulated{c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		c.tracker.run(ctx)
	}()
	return s, nil
}

// Serve answers q as sent by the resolver at from.
func (s *Simulated) Serve(ctx context.Context, from netip.AddrPort, q *dns.Msg) *dns.Msg {
	w := &simWriter{remote: net.UDPAddrFromAddrPort(from)}
	if _, err := s.c.ServeDNS(ctx, w, q); err != nil || w.msg == nil {
		m := new(dns.Msg)
		return m.SetRcode(q, dns.RcodeServerFailure)
	}
	return w.msg
}

// Decision is what an answer's choice of proxies and name servers was based
// on, for experiments that break their results down by it.
type Decision struct {
	// Source is the proximity source (hints, no_hints, pending, …); empty
	// when proximity was off or not consulted.
	Source string
	// Hop is, for each node ranked near the target, where its heaviest
	// hint was: 0 the target's /24, 1 the router nearest the target, 2 the
	// next one out.
	Hop map[netip.Addr]int
}

type decisionKey struct{}

// ServeObserved is Serve, also returning what the answer was based on.
func (s *Simulated) ServeObserved(ctx context.Context, from netip.AddrPort, q *dns.Msg) (*dns.Msg, Decision) {
	var d Decision
	m := s.Serve(context.WithValue(ctx, decisionKey{}, &d), from, q)
	return m, d
}

// Close stops the sweep and waits for the background work.
func (s *Simulated) Close() {
	s.cancel()
	<-s.done
	s.c.classifier.background.Wait()
	if s.c.prox != nil {
		s.c.prox.wg.Wait()
	}
}

// simWriter keeps the response instead of sending it.
type simWriter struct {
	remote *net.UDPAddr
	msg    *dns.Msg
}

func (w *simWriter) LocalAddr() net.Addr       { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (w *simWriter) RemoteAddr() net.Addr      { return w.remote }
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
