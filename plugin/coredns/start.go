package coral

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/coralcdn/coral/coraldht/acmetxt"
	"github.com/coredns/coredns/plugin"

	"github.com/coralcdn/coral/coraldht/icmpprobe"
)

// A server block's coral from configuration to running: newCoral builds
// it, start takes the node from coraldht/host and starts the background
// work (client classification, proximity, the live-proxy tracker, the
// drain watch), stop undoes it.

// newCoral builds the handler; start brings up the node and the background
// work.
func newCoral(cfg *config) *Coral {
	sch, err := newScheme(cfg.zone, cfg.alias, len(cfg.levels)+1)
	if err != nil {
		panic(err) // parse checked it
	}
	// The cookie secret comes from coraldht/host at start-up, so that it
	// survives reloads; until then (tests) a fresh one.
	var secret [16]byte
	_, _ = rand.Read(secret[:])
	c := &Coral{scheme: sch, set: cfg.set, cfg: cfg, cookies: newServerCookies(secret), ecs: cfg.ecs}
	if cfg.rrl != nil {
		c.rrl = newRateLimiter(*cfg.rrl, time.Now)
	}
	return c
}

// start runs at server start-up: it takes the DSHT node from coraldht/host
// (creating it on first use, keeping it across reloads) and starts the
// liveness sweep.
func (c *Coral) start() error {
	cfg := c.cfg
	entry, err := acquireNode(cfg)
	if err != nil {
		return plugin.Error("coral", err)
	}
	registerDHTCollector()
	reloadSucceeded(configHash(cfg))
	c.entry = entry
	c.cookies = newServerCookies(entry.cookie)
	c.self = entry.node().Addr().Addr().Unmap()
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	var probe probeFunc
	switch cfg.probe {
	case "tcp":
		probe = tcpProbe
	case "auto":
		probe = tcpProbe
		if p, err := icmpprobe.NewProber(); err == nil {
			c.closers = append(c.closers, p.Close)
			probe = firstProbe(tcpProbe, p.Probe)
		} else {
			log.Infof("probe auto: ICMP unavailable (%v); measuring with TCP only", err)
		}
	case "icmp":
		p, err := icmpprobe.NewProber()
		if err != nil {
			log.Warningf("probe icmp: %v; measuring with TCP instead", err)
			probe = tcpProbe
		} else {
			c.closers = append(c.closers, p.Close)
			probe = p.Probe
		}
	}
	c.classifier = &classifier{
		thresholds: cfg.levels,
		overrides:  cfg.overrides,
		cache:      entry.rtts,
		probe:      probe,
		wait:       cfg.levels[0],
		fresh:      cfg.probeCache,
		failedFor:  min(cfg.probeCache, time.Minute),
		limit:      cfg.probeLimit,
		observe:    observeProbe,
		now:        time.Now,
		ctx:        ctx,
	}
	c.prox = startProximity(ctx, cfg.prox, runningNode{entry})
	if cfg.alias != "" {
		c.challenges = newChallenges(cfg.alias, func() acmetxt.Getter { return entry.node() })
	}
	c.tracker = newTracker(runningNode{entry}, len(cfg.levels)+1, cfg.checkInterval, cfg.liveWithin, cfg.syncWait)
	c.tracker.book = entry.names
	c.tracker.bookWindow = nsWindow(cfg.set.nsTTL)
	c.tracker.joined = entry.joined.Load
	c.tracker.onSweep = func(set *liveSet) {
		entry.live.Store(set)
		recordLive(entry.listen, set, c.tracker)
	}
	if prev := entry.live.Load(); prev != nil && !prev.empty() {
		// A reload: go on from the previous instance's view until this
		// node has joined and found somebody itself.
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

// stop ends the background work and hands the node back to coraldht/host,
// which closes it when no configuration uses it any more.
func (c *Coral) stop() error {
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
	for _, f := range c.closers {
		_ = f()
	}
	releaseNode(c.entry)
	c.cancel = nil
	return nil
}
