package coral

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// A resolver's level is the highest level whose RTT threshold the
// resolver's RTT from this server is under; level 0 when it is over all of
// them or could not be measured in time. Clients are assumed to sit near
// their resolvers, so the level says which of this server's clusters is
// near the client.

// probeFunc measures the RTT to a resolver. It must return by ctx's
// deadline.
type probeFunc func(ctx context.Context, a netip.Addr) (time.Duration, error)

// override is a `classify` line: resolvers in prefix are at level.
type override struct {
	prefix netip.Prefix
	level  int
}

// rttCache holds measured RTTs per prefix (measurements: a failed probe
// is a measurement that is not ok). It lives beside the node in
// coraldht/host so that a configuration reload keeps what was measured.
type rttCache = measurements[time.Duration]

func newRTTCache(max int) *rttCache { return newMeasurements[time.Duration](max) }

// classifier turns a resolver address into a level.
type classifier struct {
	thresholds []time.Duration // thresholds[i] bounds level i+1
	overrides  []override      // longest prefix first
	cache      *rttCache
	probe      probeFunc     // nil: never measure; unknown resolvers are level 0
	wait       time.Duration // the longest a query waits for a probe
	fresh      time.Duration // a measurement older than this is refreshed in the background
	failedFor  time.Duration // a failed probe is retried after this long
	limit      int           // the most probes in flight at once; 0: defaultProbeLimit
	gate       *probeGate    // who may start a probe (proof.go)
	observe    func(outcome string, d time.Duration)
	now        func() time.Time
	background sync.WaitGroup
	ctx        context.Context // ends at shutdown; background probes stop with it
}

// classification is what the handler learns about a resolver.
type classification struct {
	level int
	rtt   time.Duration
	// beyond is set when a probe went unanswered for that long (it timed
	// out, or is still out): if the target is there, its RTT is at least
	// that. Picks use it as they use rtt (pickOptions.provenFar).
	beyond time.Duration
	source string // "classify", "cache", "probe", "timeout", "skipped", "none"
}

// levelFor maps an RTT to a level.
func (c *classifier) levelFor(rtt time.Duration) int {
	lvl := 0
	for i, th := range c.thresholds {
		if rtt < th {
			lvl = i + 1
		}
	}
	return lvl
}

// defaultProbeLimit is the default of probe_limit: with probes that end by
// the largest threshold (60 ms), some thousand new prefixes a second.
const defaultProbeLimit = 64

// classify returns the level of a resolver (or ECS client) at a, asked by
// who. Only the first query from a prefix waits for a probe, and for at
// most c.wait; later ones use the cached RTT and refresh it in the
// background when it is old. A probe starts only when the probe gate
// admits who (proof.go): a source that has not shown it is there
// ("unproven"), one over its rate ("limited"), or a query that finds the
// share of probe_limit its proof may use in flight ("skipped") gets level 0
// at once, and no probe starts.
func (c *classifier) classify(ctx context.Context, a netip.Addr, who asker) classification {
	a = a.Unmap()
	for _, o := range c.overrides {
		if o.prefix.Contains(a) {
			return classification{level: o.level, source: "classify"}
		}
	}
	if c.probe == nil || !a.IsValid() {
		return classification{source: "none"}
	}
	p := coraldht.SitePrefix(a)
	if e, ok := c.cache.get(p); ok {
		if e.due(c.now(), c.fresh, c.failedFor) {
			c.startProbe(p, a, who)
		}
		return c.fromEntry(e, "cache")
	}
	call, v := c.startProbe(p, a, who)
	if call == nil {
		return classification{source: v.source()}
	}
	t := time.NewTimer(c.wait)
	defer t.Stop()
	select {
	case <-call.done:
		src := "probe"
		if !call.m.ok {
			src = "timeout"
		}
		return c.fromEntry(call.m, src)
	case <-t.C:
		return classification{source: "timeout", beyond: c.wait}
	case <-ctx.Done():
		return classification{source: "timeout"}
	}
}

func (c *classifier) fromEntry(e measured[time.Duration], src string) classification {
	if !e.ok {
		return classification{source: src, beyond: e.v}
	}
	return classification{level: c.levelFor(e.v), rtt: e.v, source: src}
}

// startProbe returns the probe in flight for p, starting one if there is
// none and the gate admits who, or nil and the gate's verdict. The probes
// in flight are those of the node's cache, which a reload shares with the
// configuration it replaces.
func (c *classifier) startProbe(p netip.Prefix, a netip.Addr, who asker) (*measuring[time.Duration], gateVerdict) {
	limit := c.limit
	if limit <= 0 {
		limit = defaultProbeLimit
	}
	admit := func(inflight int) gateVerdict {
		v := c.gate.admit(who, a, inflight, limit)
		switch v {
		case gateBusy:
			probesSkipped.Inc()
		case gateUnproven, gateLimited:
			probesRefused.WithLabelValues(v.source()).Inc()
		}
		return v
	}
	return c.cache.start(p, admit, &c.background, func() measured[time.Duration] {
		ctx, cancel := context.WithTimeout(c.ctx, c.wait)
		start := c.now()
		rtt, err := c.probe(ctx, a)
		cancel()
		outcome := "ok"
		switch {
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || isTimeout(err):
			// A failed entry's value is how long the probe went
			// unanswered (classification.beyond); 0 for an error,
			// which says nothing about distance.
			outcome, rtt = "timeout", c.wait
		default:
			outcome, rtt = "error", 0
		}
		if c.observe != nil {
			c.observe(outcome, c.now().Sub(start))
		}
		return measured[time.Duration]{v: rtt, ok: err == nil, at: c.now()}
	}, func() bool { return c.ctx.Err() == nil })
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// tcpProbe measures the time to a TCP answer from port 53 of the resolver:
// either the connection is accepted or it is refused (a RST), and both
// take one round trip. It needs no privilege. Anything else (silence,
// unreachable) is a failure.
func tcpProbe(ctx context.Context, a netip.Addr) (time.Duration, error) {
	var d net.Dialer
	start := time.Now()
	conn, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, 53).String())
	rtt := time.Since(start)
	if err == nil {
		_ = conn.Close()
		return rtt, nil
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return rtt, nil
	}
	return 0, err
}

// preferTCP runs the TCP probe and the ICMP echo together and returns
// the TCP probe's RTT when the resolver answers it: the answer to a SYN
// must acknowledge its random initial sequence number, which nobody off
// the path can guess (the echo's nonce is as good, icmpprobe; the TCP
// answer is what the resolver's own stack says). A resolver that drops TCP
// to port 53 may still answer echo: when the echo answered first, the TCP
// probe gets as long again as the echo took (its answer, if any, comes in
// about one round trip) before the echo's RTT counts. It fails only when
// both fail.
func preferTCP(tcp, icmp probeFunc) probeFunc {
	return func(ctx context.Context, a netip.Addr) (time.Duration, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		type result struct {
			rtt time.Duration
			err error
		}
		tcpc, icmpc := make(chan result, 1), make(chan result, 1)
		start := time.Now()
		go func() { rtt, err := tcp(ctx, a); tcpc <- result{rtt, err} }()
		go func() { rtt, err := icmp(ctx, a); icmpc <- result{rtt, err} }()
		var echo *result
		var grace <-chan time.Time
		var errs []error
		for len(errs) < 2 {
			select {
			case r := <-tcpc:
				if r.err == nil {
					return r.rtt, nil
				}
				if echo != nil {
					return echo.rtt, nil
				}
				errs, tcpc = append(errs, r.err), nil
			case r := <-icmpc:
				if r.err != nil {
					errs, icmpc = append(errs, r.err), nil
					continue
				}
				if tcpc == nil {
					return r.rtt, nil
				}
				echo, icmpc = &r, nil
				t := time.NewTimer(max(time.Until(start.Add(2*r.rtt)), time.Millisecond))
				defer t.Stop()
				grace = t.C
			case <-grace:
				return echo.rtt, nil
			}
		}
		return 0, errors.Join(errs...)
	}
}
