package coraldht

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// Introspection: what the node knows about its peers and clusters, for the
// servers (Nodes, Levels) and for operators and experiments (routing tables,
// RTTs, key load). Counters are in stats.go.

// NodeInfo describes a node known to this one.
type NodeInfo struct {
	Contact
	RTT       time.Duration // smallest RTT measured by this node; 0 if never measured
	LastHeard time.Time     // last authentic datagram from it
	Self      bool          // this node itself
	// Load is the load it published with its last datagram that had one
	// (for this node itself: what SetLoad set).
	Load Load
}

// Nodes returns up to count live members of this node's cluster at level
// that run all of services, preferring nodes near target: those in target's
// /24 (IPv6 /48) first, then by measured RTT from this node, unmeasured ones
// last. Live means heard from within Config.NodesLiveWithin; when fewer
// than count members are live, members heard from longer ago are pinged
// (concurrently, until ctx ends) and included if they answer. This node
// itself is included when it runs the services. A zero target means no
// preference beyond RTT.
func (n *Node) Nodes(ctx context.Context, level, count int, target netip.Addr, services Services) []NodeInfo {
	if level < 0 || level >= len(n.levels) || count <= 0 {
		return nil
	}
	now := time.Now()
	var out []NodeInfo
	if n.self.Services.Has(services) {
		out = append(out, NodeInfo{Contact: n.public, LastHeard: now, Self: true, Load: n.published.get()})
	}
	var stale []Contact
	for _, e := range n.levels[level].rt.all() {
		if !e.Services.Has(services) {
			continue
		}
		if e.failures > 0 || now.Sub(e.lastHeard) > n.cfg.NodesLiveWithin {
			stale = append(stale, e.Contact)
			continue
		}
		out = append(out, n.nodeInfo(e.Contact, e.lastHeard))
	}
	if missing := count - len(out); missing > 0 && len(stale) > 0 && !n.closed.Load() {
		// Ping a few more than are missing, since some will be gone.
		stale = stale[:min(len(stale), 2*missing)]
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range stale {
			wg.Go(func() {
				if _, err := n.call(ctx, c, &wire.Message{Type: wire.Ping}); err == nil {
					mu.Lock()
					out = append(out, n.nodeInfo(c, time.Now()))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	target = target.Unmap()
	site := SitePrefix(target)
	near := func(ni NodeInfo) bool {
		return target.IsValid() && site.Contains(ni.Addr.Addr().Unmap())
	}
	slices.SortStableFunc(out, func(a, b NodeInfo) int {
		if na, nb := near(a), near(b); na != nb {
			if na {
				return -1
			}
			return 1
		}
		ra, rb := a.RTT, b.RTT
		if a.Self {
			ra = 0
		}
		if b.Self {
			rb = 0
		}
		switch {
		case (ra == 0 && !a.Self) != (rb == 0 && !b.Self):
			if ra == 0 && !a.Self {
				return 1
			}
			return -1
		case ra != rb:
			return int(ra - rb)
		}
		return a.ID.Cmp(b.ID)
	})
	if len(out) > count {
		out = out[:count]
	}
	return out
}

// nodeInfo describes contact c, last heard at heard.
func (n *Node) nodeInfo(c Contact, heard time.Time) NodeInfo {
	ni := NodeInfo{Contact: publicContact(c), LastHeard: heard}
	if p, ok := n.peers.get(c.Addr); ok {
		ni.RTT = p.Min
	}
	ni.Load, _ = n.peers.load(c.Addr)
	return ni
}

// LevelInfo describes one level of the hierarchy.
type LevelInfo struct {
	Level      int
	Threshold  time.Duration // RTT bound of the level's clusters; 0 at level 0 (unbounded)
	Cluster    ClusterInfo   // this node's cluster at the level
	Contacts   int           // routing-table size at the level
	Pinned     bool          // the cluster is fixed by Config.Pins
	Changes    int           // times this node changed cluster at the level
	LastChange time.Time     // zero if never
}

// Levels returns the levels of the hierarchy, level 0 first: their number
// and RTT thresholds, with this node's cluster at each.
func (n *Node) Levels() []LevelInfo {
	infos := n.clusterInfos()
	out := make([]LevelInfo, len(n.levels))
	for i, lv := range n.levels {
		lv.mu.Lock()
		changes, last := lv.changes, lv.lastChange
		lv.mu.Unlock()
		out[i] = LevelInfo{Level: i, Threshold: lv.threshold, Cluster: infos[i], Contacts: lv.rt.len(),
			Pinned: lv.pinned, Changes: changes, LastChange: last}
	}
	return out
}

// RoutingTable lists the good contacts of the level's routing table, nearest
// this node's ID first.
func (n *Node) RoutingTable(level int) []NodeInfo {
	if level < 0 || level >= len(n.levels) {
		return nil
	}
	es := n.levels[level].rt.all()
	out := make([]NodeInfo, 0, len(es))
	for _, e := range es {
		out = append(out, n.nodeInfo(e.Contact, e.lastHeard))
	}
	slices.SortFunc(out, func(a, b NodeInfo) int { return CompareDistance(n.self.ID, a.ID, b.ID) })
	return out
}

// PeerRTT returns the RTT measurements this node holds for addr.
func (n *Node) PeerRTT(addr netip.AddrPort) (PeerRTT, bool) { return n.peers.get(addr) }

// KeyLoad returns the request counters this node keeps for key at level.
func (n *Node) KeyLoad(level int, key ID) KeyLoad {
	return n.load.snapshot(levelKey{level: uint8(level), key: key}, time.Now())
}
