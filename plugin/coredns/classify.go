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

// rttEntry is one measurement, kept per /24 (IPv6 /48).
type rttEntry struct {
	rtt      time.Duration // 0 with ok false: the probe failed or timed out
	ok       bool
	measured time.Time
}

// probeCall is a probe in flight; later queries from the same prefix wait
// for it instead of probing again.
type probeCall struct {
	done chan struct{}
	e    rttEntry
}

// rttCache holds measured RTTs per prefix. It lives beside the node in coraldht/host so
// that a configuration reload keeps what was measured.
type rttCache struct {
	mu       sync.RWMutex
	entries  map[netip.Prefix]rttEntry
	inflight map[netip.Prefix]*probeCall
	max      int
}

func newRTTCache(max int) *rttCache {
	return &rttCache{entries: make(map[netip.Prefix]rttEntry), inflight: make(map[netip.Prefix]*probeCall), max: max}
}

func (c *rttCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}

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
	observe    func(outcome string, d time.Duration)
	now        func() time.Time
	background sync.WaitGroup
	ctx        context.Context // ends at shutdown; background probes stop with it
}

// classification is what the handler learns about a resolver.
type classification struct {
	level  int
	rtt    time.Duration
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

// classify returns the resolver's level. Only the first query from a prefix
// waits for a probe, and for at most c.wait; later ones use the cached RTT
// and refresh it in the background when it is old. When c.limit probes are
// in flight already, a query from a new prefix is level 0 at once and no
// probe starts: a flood from spoofed sources must not make this server
// probe thousands of third parties at the same time.
func (c *classifier) classify(ctx context.Context, a netip.Addr) classification {
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
	now := c.now()
	c.cache.mu.RLock()
	e, ok := c.cache.entries[p]
	c.cache.mu.RUnlock()
	if ok {
		age := now.Sub(e.measured)
		if (e.ok && age > c.fresh) || (!e.ok && age > c.failedFor) {
			c.startProbe(p, a)
		}
		return c.fromEntry(e, "cache")
	}
	call := c.startProbe(p, a)
	if call == nil {
		return classification{source: "skipped"}
	}
	t := time.NewTimer(c.wait)
	defer t.Stop()
	select {
	case <-call.done:
		src := "probe"
		if !call.e.ok {
			src = "timeout"
		}
		return c.fromEntry(call.e, src)
	case <-t.C:
		return classification{source: "timeout"}
	case <-ctx.Done():
		return classification{source: "timeout"}
	}
}

func (c *classifier) fromEntry(e rttEntry, src string) classification {
	if !e.ok {
		return classification{source: src}
	}
	return classification{level: c.levelFor(e.rtt), rtt: e.rtt, source: src}
}

// startProbe returns the probe in flight for p, starting one if there is
// none, or nil when there is none and the limit of probes in flight is
// reached. The probe runs detached from any query: a query that stops
// waiting does not cancel it, so its result still fills the cache. The
// probes in flight are those of the node's cache, which a reload shares
// with the configuration it replaces.
func (c *classifier) startProbe(p netip.Prefix, a netip.Addr) *probeCall {
	c.cache.mu.Lock()
	if call, ok := c.cache.inflight[p]; ok {
		c.cache.mu.Unlock()
		return call
	}
	limit := c.limit
	if limit <= 0 {
		limit = defaultProbeLimit
	}
	if len(c.cache.inflight) >= limit {
		c.cache.mu.Unlock()
		probesSkipped.Inc()
		return nil
	}
	call := &probeCall{done: make(chan struct{})}
	c.cache.inflight[p] = call
	c.cache.mu.Unlock()
	c.background.Add(1)
	go func() {
		defer c.background.Done()
		ctx, cancel := context.WithTimeout(c.ctx, c.wait)
		start := c.now()
		rtt, err := c.probe(ctx, a)
		cancel()
		e := rttEntry{rtt: rtt, ok: err == nil, measured: c.now()}
		outcome := "ok"
		switch {
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || isTimeout(err):
			outcome = "timeout"
		default:
			outcome = "error"
		}
		if c.observe != nil {
			c.observe(outcome, c.now().Sub(start))
		}
		c.cache.mu.Lock()
		if c.ctx.Err() == nil {
			if _, exists := c.cache.entries[p]; !exists && len(c.cache.entries) >= c.cache.max {
				c.evictOldestLocked()
			}
			c.cache.entries[p] = e
		}
		delete(c.cache.inflight, p)
		c.cache.mu.Unlock()
		call.e = e
		close(call.done)
	}()
	return call
}

// evictOldestLocked drops a sample of the oldest measurements so the cache
// stays bounded without a full scan on every insert.
func (c *classifier) evictOldestLocked() {
	var oldest netip.Prefix
	var at time.Time
	n := 0
	for p, e := range c.cache.entries { // map order is random: a sample
		if n == 0 || e.measured.Before(at) {
			oldest, at = p, e.measured
		}
		if n++; n == 32 {
			break
		}
	}
	delete(c.cache.entries, oldest)
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

// firstProbe runs probes concurrently and returns the first success: a
// resolver behind a firewall that drops TCP to port 53 may still answer
// ICMP echo, and the other way round. It fails only when all of them fail.
func firstProbe(probes ...probeFunc) probeFunc {
	return func(ctx context.Context, a netip.Addr) (time.Duration, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		type result struct {
			rtt time.Duration
			err error
		}
		results := make(chan result, len(probes))
		for _, p := range probes {
			go func() {
				rtt, err := p(ctx, a)
				results <- result{rtt, err}
			}()
		}
		var errs []error
		for range probes {
			r := <-results
			if r.err == nil {
				return r.rtt, nil
			}
			errs = append(errs, r.err)
		}
		return 0, errors.Join(errs...)
	}
}
