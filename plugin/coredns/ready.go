package coral

// Ready implements ready.Readiness: the plugin is ready once its node has
// joined the network and a liveness sweep has finished since, so that
// answers carry proxies checked first-hand and ns-<ip> names are answered
// from what the joined node knows; and not while it drains. The node's
// current run counts: after a restart in place (a changed key, a drain)
// it is not ready until the new run has joined.
func (c *Coral) Ready() bool {
	return c.entry != nil && c.entry.joined.Load() && !c.entry.handle.Draining() &&
		c.tracker != nil && c.tracker.ready() && c.tracker.book.warm.Load()
}
