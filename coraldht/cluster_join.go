package coraldht

import (
	"context"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// Joining, validating and splitting clusters: the second half of a
// clustering round (cluster.go), once reconsider has picked a candidate or
// decided to leave.

// validateCluster contacts several members of candidate c: it asks the
// fastest known member for others, pings those not yet measured, and
// accepts the cluster when at least JoinFraction of the measured members
// are under the level's threshold.
func (n *Node) validateCluster(ctx context.Context, lv *level, c *clusterSample) (ClusterInfo, bool) {
	n.counters.clusterValidations.Add(1)
	lv.mu.Lock()
	newcomer := lv.changes == 0 && !lv.pinned
	lv.mu.Unlock()
	if newcomer && n.hasSiteMate(c, lv.threshold) {
		// A node still in the singleton it started in takes the word of a
		// node on its own site: that node stays in the cluster by the same
		// rule this one will apply from its next round on, from nearly the
		// same place. This is the hint-based join: a new node is in its
		// site's cluster in its first round.
		return c.info, true
	}
	f, _ := c.fastest()
	n.mu.Lock()
	target := randomIDWithPrefix(n.self.ID, 0, n.rng)
	n.mu.Unlock()
	reply, err := n.call(ctx, f.Contact, &wire.Message{Type: wire.Members, Level: uint8(lv.index), Target: target})
	if err != nil || reply.Status != wire.StatusOK {
		return ClusterInfo{}, false
	}
	known := make(map[ID]bool)
	var toPing []Contact
	for _, m := range c.members {
		known[m.ID] = true
		if m.minRTT == 0 {
			toPing = append(toPing, m.Contact)
		}
	}
	for _, nc := range reply.Nodes {
		if !known[nc.ID] && nc.ID != n.self.ID {
			known[nc.ID] = true
			if p, ok := n.peers.get(nc.Addr); !ok || p.Samples == 0 {
				toPing = append(toPing, nc)
			}
		}
	}
	if len(toPing) > n.cfg.ValidateMembers {
		toPing = toPing[:n.cfg.ValidateMembers]
	}
	n.pingAll(ctx, toPing)

	// Re-read the evidence: the pings refreshed both RTTs and which cluster
	// each member is in now.
	now := time.Now()
	fresh := groupClusters(n.peers.evidence(n.evidenceSince(now)), lv.index, n.self.ID)[c.info.ID]
	if fresh == nil {
		return ClusterInfo{}, false
	}
	measured, under := fresh.rttCounts(lv.threshold)
	need := min(n.cfg.ValidateMembers, len(fresh.members))
	if measured == 0 || 2*measured < need {
		return ClusterInfo{}, false
	}
	if float64(under) < n.joinFraction(fresh, lv.threshold)*float64(measured) {
		return ClusterInfo{}, false
	}
	return fresh.info, true
}

// joinFraction is the share of sampled members that must be under the
// threshold for this node to join cluster s: JoinFraction, except when a
// member is on this node's own /24 (/48) and under half the threshold away.
// That member sees the network much as this node does, and it has found
// the cluster good enough to stay in. Holding the newcomer to the stricter
// joining rule would split a site between clusters whenever the site sits
// between the 50 % and 80 % marks of a wide cluster, so it is held to the
// staying rule instead.
func (n *Node) joinFraction(s *clusterSample, threshold time.Duration) float64 {
	if n.hasSiteMate(s, threshold) {
		return 1 - n.cfg.LeaveFraction
	}
	return n.cfg.JoinFraction
}

// hasSiteMate reports whether cluster s has a member on this node's own /24
// (/48) under half the threshold away.
func (n *Node) hasSiteMate(s *clusterSample, threshold time.Duration) bool {
	site := SitePrefix(n.self.Addr.Addr())
	for _, m := range s.members {
		if m.minRTT > 0 && m.minRTT < threshold/2 && site.Contains(m.Addr.Addr().Unmap()) {
			return true
		}
	}
	return false
}

// joinCluster moves this node into cluster info at the level. The routing
// table starts over with the members the node knows of, and a lookup of its
// own ID introduces it to its new neighbours. The old neighbours keep it in
// their tables until it refuses them a request as a non-member; the refusal
// tells them of the new cluster, which is how a better cluster spreads
// through a worse one by avalanche; the few the node pings as it leaves
// hear at once.
func (n *Node) joinCluster(ctx context.Context, lv *level, info ClusterInfo, unacceptable bool) {
	now := time.Now()
	lv.mu.Lock()
	old := lv.cluster
	lv.cluster = ClusterInfo{Level: lv.index, ID: info.ID, Created: info.Created}
	lv.changes++
	lv.lastChange = now
	if lv.left == nil {
		lv.left = make(map[ID]leftCluster)
	}
	lv.left[old.ID] = leftCluster{at: now, unacceptable: unacceptable}
	lv.mu.Unlock()
	n.counters.clusterChanges.Add(1)
	n.log.Debug("cluster change", "level", lv.index, "from", old.ID.Short(), "to", info.ID.Short(), "unacceptable", unacceptable)
	var mates []Contact
	for _, e := range lv.rt.all() {
		if len(mates) == n.cfg.ValidateMembers {
			break
		}
		mates = append(mates, e.Contact)
	}
	lv.rt.clear()
	for _, v := range n.peers.evidence(n.evidenceSince(now)) {
		if ci, ok := v.clusterAt(lv.index); ok && ci.ID == info.ID && v.ID != n.self.ID {
			if counts, _ := n.claimCounts(lv, v.Contact); counts {
				lv.rt.heard(v.Contact, v.lastHeard)
			}
		}
	}
	if lv.rt.len() > 0 {
		n.findNode(ctx, lv.index, n.self.ID)
	}
	n.updateSizes()
	// Tell some members of the cluster left behind, in the pings' cluster
	// lists: one whose only mate this node was is alone now and looks
	// again within aloneFirstRetry (clusterLoop), following it if the
	// cluster suits it too. Without word from this node it would count it
	// as a member until their next exchange, minutes away in a quiet
	// network, and stay behind in the abandoned cluster.
	n.pingAll(ctx, mates)
}

// splitAway handles a cluster that is no longer acceptable to this node.
// The cluster's center is its member nearest clusterCenter(ID). Members
// close to the center keep the cluster; the others all move to the same
// derived cluster, which in turn splits around its own center if it is
// still spread too wide. Nodes whose neighbours are all far end up alone.
func (n *Node) splitAway(ctx context.Context, lv *level, cur ClusterInfo) {
	target := clusterCenter(cur.ID)
	center := n.self
	if lv.rt.len() > 0 {
		r := n.findNode(ctx, lv.index, target)
		if r.err != nil {
			return
		}
		if r.nearest != nil && CompareDistance(target, r.nearest.ID, center.ID) < 0 {
			center = r.nearest.Contact
		}
	}
	if center.ID == n.self.ID {
		return
	}
	rtt := time.Duration(0)
	if p, ok := n.peers.get(center.Addr); ok && p.Samples > 0 {
		rtt = p.Min
	} else if d, err := n.Ping(ctx, center.Addr); err == nil {
		rtt = d
	}
	if rtt > 0 && rtt < lv.threshold {
		return // near the center: this side keeps the cluster
	}
	n.counters.clusterSplits.Add(1)
	now := time.Now()
	far := ClusterInfo{Level: lv.index, ID: splitClusterID(cur.ID), Created: now.Truncate(time.Second)}
	if g := groupClusters(n.peers.evidence(n.evidenceSince(now)), lv.index, n.self.ID)[far.ID]; g != nil {
		far.Created = g.info.Created
	}
	n.joinCluster(ctx, lv, far, true)
	lv.mu.Lock()
	lv.lastSplit = time.Now()
	lv.mu.Unlock()
}
