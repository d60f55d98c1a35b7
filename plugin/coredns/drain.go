package coral

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/coredns/caddy"
)

// Draining takes this name server out of the name servers Coral hands out
// before it stops, as the health plugin's lameduck keeps a server up while
// load balancers notice. While draining, the node runs without its DNS
// service bit (coraldht/host's SetDraining restarts it in place), so the
// other Coral name servers drop it from their NS answers at their next
// sweep (check_interval, then live_within), and ready says not ready; the
// server goes on answering whoever still asks.
//
//	drain_file PATH   while PATH exists, drain (touch it; rm to undo)
//	drain DURATION    at shutdown (SIGTERM, SIGINT; not a reload), drain
//	                  for DURATION before the server stops

// drainFilePoll is how often drain_file is looked at.
const drainFilePoll = time.Second

// watchDrainFile drains while cfg.drainFile exists, until ctx ends.
func (c *Coral) watchDrainFile(ctx context.Context) {
	if c.cfg.drainFile == "" {
		return
	}
	tick := time.NewTicker(drainFilePoll)
	defer tick.Stop()
	for {
		_, err := os.Stat(c.cfg.drainFile)
		c.setDraining(err == nil, "drain_file "+c.cfg.drainFile)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// setDraining changes the node's drain state, logging the change.
func (c *Coral) setDraining(on bool, why string) {
	h := c.entry.handle
	if h == nil || h.Draining() == on {
		return
	}
	if err := h.SetDraining(on); err != nil {
		log.Errorf("drain (%s): %v", why, err)
		return
	}
	if on {
		log.Warningf("draining (%s): the node no longer offers its name server; other Coral name servers drop it within check_interval + live_within", why)
	} else {
		log.Infof("drain ended (%s): the node offers its name server again", why)
	}
	drainingGauge.WithLabelValues(c.entry.listen).Set(boolGauge(on))
}

// drainers are the running instances, for the shutdown hook.
var drainers = struct {
	sync.Mutex
	set map[*Coral]bool
}{set: map[*Coral]bool{}}

func addDrainer(c *Coral) {
	drainers.Lock()
	drainers.set[c] = true
	drainers.Unlock()
	registerDrainHook()
}

// registerDrainHook registers the shutdown hook. A SIGUSR1 reload purges
// the event hooks and restores them only if it fails, so every start
// registers it again; registering it twice panics in caddy, which means
// it is there already.
func registerDrainHook() {
	defer func() { _ = recover() }()
	caddy.RegisterEventHook("coral-drain", drainOnShutdown)
}

func removeDrainer(c *Coral) {
	drainers.Lock()
	delete(drainers.set, c)
	drainers.Unlock()
}

// drainOnShutdown runs when the server is told to quit, before any
// shutdown callback: every instance with drain set drains, and the
// longest drain passes while the servers still answer.
func drainOnShutdown(event caddy.EventName, _ any) error {
	if event != caddy.ShutdownEvent {
		return nil
	}
	drainers.Lock()
	var wait time.Duration
	var draining []*Coral
	for c := range drainers.set {
		if c.cfg.drain > 0 {
			draining = append(draining, c)
			wait = max(wait, c.cfg.drain)
		}
	}
	drainers.Unlock()
	if wait == 0 {
		return nil
	}
	for _, c := range draining {
		c.setDraining(true, "shutting down")
	}
	log.Infof("draining for %v before stopping", wait)
	time.Sleep(wait)
	return nil
}
