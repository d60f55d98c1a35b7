package coral

import (
	"context"
	"crypto/rand"
	"errors"
	"net/netip"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/acmetxt"
	"github.com/coralcdn/coral/coraldht/icmpprobe"
	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
)

// A server block's coral from configuration to running: newCoral builds
// it (the coral directive's setup and New both), Start takes the node and
// starts the background work (client classification, proximity, the
// live-proxy tracker, the drain watch), Stop undoes it.

// Options are what a handler runs on besides its coral block: its DSHT
// node and how it measures the way to resolvers and clients. The zero
// value is what the coral directive uses.
type Options struct {
	// Node is the DSHT node to answer from. Nil: the node coraldht/host
	// runs for the block's listen address, acquired by Start, released by
	// Stop and kept across reloads. A node given here is the program's: it
	// is used as it is (joined, never drained, never closed), its levels
	// are the block's, and the block has no node lines (listen, advertise,
	// bootstrap, key, levels, cluster).
	Node *coraldht.Node

	// Probe measures the RTT to a resolver, returning by ctx's deadline.
	// Nil: the block's probe setting (a TCP connection attempt and an
	// ICMP echo, by default).
	Probe func(ctx context.Context, a netip.Addr) (time.Duration, error)

	// Trace returns up to hops routers on the last hops toward a client,
	// the one nearest it last (proximity on). Nil: a trace of this host's
	// (icmpprobe), when the process may send one.
	Trace func(ctx context.Context, target netip.Addr, hops int) ([]netip.Addr, error)
}

// New builds a handler from the text of a coral block as a Corefile has
// it ("coral ZONE { … }"), checked as the coral directive checks it, to run
// with o; Start starts it. The coral directive builds its handlers the
// same way, from the block it reads.
func New(block string, o Options) (*Coral, error) {
	c := caddy.NewTestController("dns", block)
	cfg, err := parseWith(c, o.Node)
	if err != nil {
		return nil, err
	}
	return newCoral(cfg, o), nil
}

// newCoral builds the handler; Start brings up the node and the background
// work.
func newCoral(cfg *config, o Options) *Coral {
	sch, err := newScheme(cfg.zone, cfg.alias, len(cfg.levels)+1)
	if err != nil {
		panic(err) // parse checked it
	}
	// The cookie secret comes from coraldht/host at start-up, so that it
	// survives reloads; until then a fresh one.
	var secret [16]byte
	_, _ = rand.Read(secret[:])
	c := &Coral{scheme: sch, set: cfg.set, cfg: cfg, opts: o, cookies: newServerCookies(secret), ecs: cfg.ecs,
		gate: newProbeGate(cfg.probeRate[0], cfg.probeRate[1], time.Now)}
	if cfg.rrl != nil {
		c.rrl = newRateLimiter(*cfg.rrl, time.Now)
	}
	return c
}

// Start takes the DSHT node (from coraldht/host, which creates it on first
// use and keeps it across reloads, unless Options.Node gave one) and
// starts the liveness sweep and the rest of the background work.
func (c *Coral) Start() error {
	cfg := c.cfg
	var entry *nodeEntry
	if c.opts.Node != nil {
		entry = givenNode(c.opts.Node)
	} else {
		var err error
		if entry, err = acquireNode(cfg); err != nil {
			return plugin.Error("coral", err)
		}
		reloadSucceeded(configHash(cfg))
		// The drain gauge exists from the start, 0 until a drain.
		drainingGauge.WithLabelValues(entry.listen).Set(boolGauge(entry.draining()))
	}
	c.entry = entry
	c.cookies = newServerCookies(entry.cookie)
	c.gate.familiar = entry.familiar
	c.self = entry.node().Addr().Addr().Unmap()
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	probe, echo := c.probes()
	wait := time.Duration(0)
	if len(cfg.levels) > 0 {
		wait = cfg.levels[0]
	} else {
		probe = nil // one level: nothing to measure
	}
	c.classifier = &classifier{
		thresholds: cfg.levels,
		overrides:  cfg.overrides,
		cache:      entry.rtts,
		probe:      probe,
		wait:       wait,
		fresh:      cfg.probeCache,
		failedFor:  min(cfg.probeCache, time.Minute),
		limit:      cfg.probeLimit,
		gate:       c.gate,
		observe:    observeProbe,
		now:        time.Now,
		ctx:        ctx,
	}
	c.prox = startProximity(ctx, cfg.prox, runningNode{entry}, c.gate, experimentTracer(c.opts.Trace, cfg.prox.hops), echo, wait)
	if cfg.alias != "" {
		c.challenges = newChallenges(cfg.alias, func() acmetxt.Getter { return entry.node() })
	}
	c.tracker = newTracker(runningNode{entry}, len(cfg.levels)+1, cfg.checkInterval, cfg.liveWithin, cfg.syncWait)
	c.tracker.loadThreshold = cfg.set.loadThreshold
	c.tracker.book = entry.names
	c.tracker.bookWindow = nsWindow(cfg.set.nsTTL)
	c.tracker.joined = entry.joined.Load
	c.tracker.warm = entry.warm()
	c.tracker.onSweep = func(set *liveSet) {
		entry.live.Store(set)
		recordLive(entry.listen, set, c.tracker)
	}
	if prev := entry.live.Load(); prev != nil && !prev.empty() {
		// A reload or a restart: go on from the last live set (the
		// previous instance's, or the one saved before the process
		// restarted) until this node has joined and found somebody
		// itself.
		c.tracker.seed(prev)
		c.tracker.keepSeed = func(set *liveSet) bool { return set.empty() && !entry.joined.Load() }
	}
	c.done = make(chan struct{})
	c.drainDone = make(chan struct{})
	go func() {
		defer close(c.done)
		c.tracker.run(ctx)
	}()
	go func() {
		defer close(c.drainDone)
		c.watchDrainFile(ctx)
	}()
	addDrainer(c)
	return nil
}

// probes are the RTT probe and the ICMP echo (nil: none) this handler
// measures with: Options.Probe, or the probe setting's on this host.
func (c *Coral) probes() (probeFunc, func(context.Context, netip.Addr) (icmpprobe.EchoReply, error)) {
	if c.cfg.probe == "none" {
		return nil, nil
	}
	if c.opts.Probe != nil {
		return c.opts.Probe, nil
	}
	p, err := icmpprobe.NewProber()
	switch {
	case err == nil:
		c.closers = append(c.closers, p.Close)
	case c.cfg.probe == "icmp":
		log.Warningf("probe icmp: %v; measuring with TCP instead", err)
		return tcpProbe, nil
	default:
		log.Infof("probe %s: ICMP unavailable (%v); measuring with TCP only", c.cfg.probe, err)
		return tcpProbe, nil
	}
	switch c.cfg.probe {
	case "tcp":
		return tcpProbe, p.Echo
	case "icmp":
		return p.Probe, p.Echo
	}
	return preferTCP(tcpProbe, p.Probe), p.Echo
}

// Stop ends the background work and hands the node back to coraldht/host,
// which closes it when no configuration uses it any more.
func (c *Coral) Stop() error {
	if c.cancel == nil {
		return nil
	}
	removeDrainer(c)
	c.cancel()
	<-c.done
	<-c.drainDone
	c.classifier.background.Wait()
	if c.prox != nil {
		c.prox.wg.Wait()
	}
	var errs []error
	for _, f := range c.closers {
		errs = append(errs, f())
	}
	c.closers = nil
	releaseNode(c.entry)
	c.cancel = nil
	return errors.Join(errs...)
}

func boolGauge(on bool) float64 {
	if on {
		return 1
	}
	return 0
}
