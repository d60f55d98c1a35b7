package coral

// Ready implements ready.Readiness: the plugin is ready once its node has
// joined the network and the first liveness sweep has finished, so that
// answers carry proxies checked first-hand.
func (c *Coral) Ready() bool {
	return c.entry != nil && c.entry.joined.Load() && c.tracker != nil && c.tracker.ready()
}
