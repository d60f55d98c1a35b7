package coral

// Ready implements ready.Readiness: the plugin is ready once its node has
// joined the network, has pinged the contacts it saved before a restart,
// and a liveness sweep has finished since, so that answers carry proxies
// checked first-hand and ns-<ip> names are answered from what the joined
// node knows; and not while it drains. The node's current run counts:
// after a restart in place (a changed key, a drain) it is not ready until
// the new run has joined.
//
// CoreDNS's ready plugin asks only until every plugin has been ready once
// unless it has `monitor continuously`: the Corefiles this repository
// ships have it, so that /ready says 503 while a node drains or has lost
// the network (README.md, Ready).
func (c *Coral) Ready() bool {
	if c.entry == nil || !c.entry.joined.Load() || c.entry.draining() || c.tracker == nil {
		return false
	}
	select {
	case <-c.entry.warm():
	default:
		return false
	}
	return c.tracker.ready() && c.tracker.book.warm.Load()
}
