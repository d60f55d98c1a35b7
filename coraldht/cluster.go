package coraldht

import (
	"context"
	"crypto/sha1"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// This file is the self-organizing cluster hierarchy: every ClusterInterval
// a node weighs the clusters it has heard of at each level above 0 and
// joins, stays, or splits away. The evidence is what every authentic
// datagram carries anyway: the sender's cluster list (kept in the peer
// table) and, for replies, the round-trip time (min-filtered per peer).

// ClusterIDFor returns the ID of the statically named cluster: SHA-1 of the
// name. Nodes pinned to the same name at a level share that cluster.
func ClusterIDFor(name string) ID { return ID(sha1.Sum([]byte(name))) }

// pinnedCreated is the creation time every node gives a pinned cluster, so
// that all of them report the same age for it.
var pinnedCreated = time.Unix(1_600_000_000, 0)

const (
	// minSizeMargin is the least difference in log2 size that makes a
	// node prefer the larger of two acceptable clusters when δ is 0. Size
	// estimates drawn from routing tables wander by a few tenths in log2;
	// without a floor, two clusters of about the same size would trade
	// members back and forth for the whole even hour.
	minSizeMargin = 0.5

	// maxCandidates is how many better clusters one round validates.
	maxCandidates = 3

	// probesPerRound bounds the pings a round sends to peers never measured.
	probesPerRound = 8

	// rejoinHoldoff is how long a node stays away from a cluster it left.
	// Acceptability is judged from samples: a node that left a wide cluster
	// because half the members it measured were far could otherwise find a
	// lucky sample of near members a few rounds later, rejoin, and leave
	// again. And a node on the border of two acceptable clusters, one larger
	// and one with the lower ID, would follow δ's square wave back and forth
	// every hour; it may return during the holdoff only if the cluster it
	// left now wins in both phases of δ.
	rejoinHoldoff = 3 * time.Hour
)

// leftCluster records why and when a node left a cluster.
type leftCluster struct {
	at           time.Time
	unacceptable bool // left by the 50 % rule, not for a better cluster
}

// clusterDelta is δ, the square wave of the paper's merge rule: 0 in even
// hours of a cluster's age, 2 in odd ones. During the even hours the larger
// cluster wins and clusters merge; during the odd ones only a clearly larger
// cluster wins, otherwise the lower ID, which ends any oscillation between
// clusters of similar size.
func clusterDelta(age time.Duration) float64 {
	if age > 0 && int64(age/time.Hour)%2 == 1 {
		return 2
	}
	return 0
}

// preferCluster reports whether a node should move from acceptable cluster
// a to acceptable cluster b.
func preferCluster(b, a ClusterInfo, now time.Time) bool {
	return preferClusterAt(b, a, clusterDelta(min(now.Sub(a.Created), now.Sub(b.Created))))
}

// preferClusterAt is preferCluster with δ given.
func preferClusterAt(b, a ClusterInfo, delta float64) bool {
	if b.ID == a.ID {
		return false
	}
	diff := b.LogSize - a.LogSize
	if math.Abs(diff) > max(delta, minSizeMargin) {
		return diff > 0
	}
	return b.ID.Cmp(a.ID) < 0
}

// preferredAlways reports whether b beats a whatever δ's phase: the test a
// node applies before returning to a cluster it left for a better one.
func preferredAlways(b, a ClusterInfo) bool {
	return preferClusterAt(b, a, 0) && preferClusterAt(b, a, 2)
}

// splitClusterID is the cluster that the members far from a cluster's
// center move to when the cluster is no longer acceptable. It is derived
// from the old ID so that every far member picks the same one, and the
// split has a direction: near members keep the old cluster.
func splitClusterID(old ID) ID {
	return ID(sha1.Sum(append([]byte("coral split "), old[:]...)))
}

// clusterCenter is the target whose nearest member is a cluster's center.
func clusterCenter(cid ID) ID { return ID(sha1.Sum(cid[:])) }

// clusterSample is what the node knows of one cluster at one level.
type clusterSample struct {
	info    ClusterInfo // LogSize: the largest a member advertised; Created: the earliest
	members []peerView
}

// rttCounts returns how many members have a measured RTT and how many of
// those are under the threshold.
func (s *clusterSample) rttCounts(threshold time.Duration) (measured, under int) {
	for _, m := range s.members {
		if m.minRTT > 0 {
			measured++
			if m.minRTT < threshold {
				under++
			}
		}
	}
	return measured, under
}

// fastest returns the member with the smallest measured RTT.
func (s *clusterSample) fastest() (peerView, bool) {
	var best peerView
	ok := false
	for _, m := range s.members {
		if m.minRTT > 0 && (!ok || m.minRTT < best.minRTT) {
			best, ok = m, true
		}
	}
	return best, ok
}

// groupClusters sorts the evidence by each peer's cluster at level lvl.
func groupClusters(ev []peerView, lvl int, self ID) map[ID]*clusterSample {
	out := make(map[ID]*clusterSample)
	for _, v := range ev {
		if v.ID == self {
			continue
		}
		ci, ok := v.clusterAt(lvl)
		if !ok {
			continue
		}
		s := out[ci.ID]
		if s == nil {
			s = &clusterSample{info: ci}
			out[ci.ID] = s
		}
		if v.minRTT > 0 {
			// A size claim counts once the claimant is measured: an
			// unmeasured one could inflate any cluster to lure nodes in.
			s.info.LogSize = max(s.info.LogSize, ci.LogSize)
		}
		if ci.Created.Before(s.info.Created) {
			s.info.Created = ci.Created
		}
		s.members = append(s.members, v)
	}
	return out
}

// evidenceSince is the oldest evidence a round considers: an hour, as long
// as the peer table keeps a silent peer. RTTs are minima and change little;
// which cluster a peer is in is refreshed by every datagram from it.
func (n *Node) evidenceSince(now time.Time) time.Time {
	return now.Add(-max(time.Hour, 2*n.cfg.ClusterInterval))
}

// clusterLoop runs the clustering rounds: the first as soon as the node
// joins (after publishing and reading its locality hints), then every
// ClusterInterval with ±10 % jitter so that nodes do not move in lockstep.
// A node that has not joined yet still runs rounds on what it hears.
//
// A node alone in its cluster at some level looks again soon (aloneWait).
// So does one that was not alone at its last round but has become alone
// since, its cluster's other members having moved on: in a network
// starting up, a node often joins the singleton of a neighbour (its own
// site's, or the lowest ID) in the same second as that neighbour leaves
// it for a larger cluster. Judged alone only at its rounds, the node
// stayed in the abandoned cluster for a whole ClusterInterval, its site
// split between clusters; the watch checks every aloneFirstRetry.
//
// And during the first ClusterInterval after it joins, a node runs a
// round every settleRetry whatever its rounds find. A network starting up forms small clusters first: the
// two nodes of one host (a CoreDNS and a Caddy) or of one site join each
// other within seconds, before they hear of their neighbours. Such a pair
// is not alone, so it waited a whole ClusterInterval before weighing the
// pair of the next site, and a metro stayed split between two clusters
// for five minutes (eval/wan's figure run: one metro stayed the three
// two-node clusters of its sites for the whole watch). The
// settling rounds merge them within seconds; the same rules of
// size and ID decide, so they add probes, not moves.
func (n *Node) clusterLoop() {
	defer n.wg.Done()
	if !n.clusterable() {
		return
	}
	joined := n.joined
	hintsDue := time.Time{} // zero: not joined yet
	t := time.NewTimer(n.nextRound())
	defer t.Stop()
	firstRetry := min(aloneFirstRetry, n.cfg.ClusterInterval)
	watch := time.NewTicker(firstRetry)
	defer watch.Stop()
	aloneWait := firstRetry
	wasAlone := true          // a node starts alone, in its own singletons
	var settleUntil time.Time // the end of the first interval after joining
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-joined:
			joined = nil
			hintsDue = time.Now()
			settleUntil = hintsDue.Add(n.cfg.ClusterInterval)
		case <-t.C:
		case <-watch.C:
			if wasAlone || !n.aloneSomewhere() {
				// A node still alone backs off on t; one with company
				// waits for its round.
				continue
			}
		}
		if !hintsDue.IsZero() && !time.Now().Before(hintsDue) {
			n.publishHints(n.ctx)
			hintsDue = time.Now().Add(hintRefresh)
		}
		wasAlone = n.clusterRound(n.ctx)
		switch {
		case time.Now().Before(settleUntil):
			// Settling after the join: a round every settleRetry.
			t.Reset(min(settleRetry, n.cfg.ClusterInterval))
		case wasAlone:
			// Alone at some level: look again soon, backing off to the
			// normal interval while nobody near turns up.
			t.Reset(aloneWait)
			aloneWait = min(2*aloneWait, n.nextRound())
		default:
			aloneWait = firstRetry
			t.Reset(n.nextRound())
		}
	}
}

// aloneSomewhere reports whether, at some level that may change cluster,
// no other member of this node's cluster is known: what reconsider calls
// alone, judged on the evidence as it is now.
func (n *Node) aloneSomewhere() bool {
	ev := n.peers.evidence(n.evidenceSince(time.Now()))
	for _, lv := range n.levels[1:] {
		if !lv.pinned && groupClusters(ev, lv.index, n.self.ID)[lv.info().ID] == nil {
			return true
		}
	}
	return false
}

// aloneFirstRetry is how soon a node alone in its cluster at some level
// runs its next clustering round (then twice as long each time, up to
// ClusterInterval).
const aloneFirstRetry = 30 * time.Second

// settleRetry is how often a node runs its clustering rounds during its
// first ClusterInterval after joining, when the clusters around it are
// still forming. Resolvers cache a level-2 answer for a minute: the
// sooner a site's pair merges with its metro, the fewer clients get a
// proxy of the pair's short-lived cluster.
const settleRetry = 10 * time.Second

// nextRound is the jittered wait until the next clustering round.
func (n *Node) nextRound() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return time.Duration(float64(n.cfg.ClusterInterval) * (0.9 + 0.2*n.rng.Float64()))
}

// clusterable reports whether any level may change cluster.
func (n *Node) clusterable() bool {
	for _, lv := range n.levels[1:] {
		if !lv.pinned {
			return true
		}
	}
	return false
}

// clusterRound measures the peers it knows too little about, then
// reconsiders each unpinned level, fastest level last so it sees the
// evidence the slower levels' probes gathered.
func (n *Node) clusterRound(ctx context.Context) (alone bool) {
	n.counters.clusterRounds.Add(1)
	// Peers compare clusters by the sizes members advertise: keep ours
	// current at the pace of the rounds, not only of maintenance.
	n.updateSizes()
	n.probeUnmeasured(ctx)
	for _, lv := range n.levels[1:] {
		if ctx.Err() != nil {
			return false
		}
		if !lv.pinned && n.reconsider(ctx, lv) {
			alone = true
		}
	}
	return alone
}

// probeUnmeasured pings members of this node's clusters, and other recent
// peers, whose RTT it has never measured: peers that only ever sent it
// requests. Their RTTs decide whether to stay, and which clusters nearby
// are worth a closer look.
func (n *Node) probeUnmeasured(ctx context.Context) {
	now := time.Now()
	var targets []Contact
	seen := make(map[ID]bool)
	add := func(c Contact) {
		if !seen[c.ID] && c.ID != n.self.ID {
			seen[c.ID] = true
			targets = append(targets, c)
		}
	}
	// Members never measured, or quiet since the last round: whether they
	// are still members, and how far, decides whether to stay. A member
	// that moved answers with its new cluster, which is also how news of a
	// better cluster reaches nodes that have no traffic of their own.
	for _, lv := range n.levels[1:] {
		picked := 0
		for _, e := range lv.rt.all() {
			if picked >= n.cfg.ValidateMembers {
				break
			}
			if p, ok := n.peers.get(e.Addr); !ok || p.Samples == 0 || now.Sub(e.lastHeard) >= n.cfg.ClusterInterval {
				add(e.Contact)
				picked++
			}
		}
	}
	ev := n.peers.evidence(n.evidenceSince(now))
	n.mu.Lock()
	n.rng.Shuffle(len(ev), func(i, j int) { ev[i], ev[j] = ev[j], ev[i] })
	n.mu.Unlock()
	picked := 0
	for _, v := range ev {
		if picked >= probesPerRound {
			break
		}
		if v.minRTT == 0 && !seen[v.ID] {
			add(v.Contact)
			picked++
		}
	}
	// Nearby peers gone quiet: without fresh word from them a node with no
	// traffic of its own (alone in its cluster, say) would forget every
	// cluster around it. Nearest first.
	widest := n.levels[1].threshold
	var quiet []peerView
	for _, v := range ev {
		if v.minRTT > 0 && v.minRTT < widest && now.Sub(v.lastHeard) >= n.cfg.ClusterInterval && !seen[v.ID] {
			quiet = append(quiet, v)
		}
	}
	slices.SortFunc(quiet, func(a, b peerView) int { return int(a.minRTT - b.minRTT) })
	for _, v := range quiet[:min(len(quiet), probesPerRound)] {
		add(v.Contact)
	}
	n.pingAll(ctx, targets)
}

// pingAll pings every contact concurrently and waits for all answers or
// timeouts; the replies land in the peer table.
func (n *Node) pingAll(ctx context.Context, cs []Contact) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { _, _ = n.call(ctx, c, &wire.Message{Type: wire.Ping}) })
	}
	wg.Wait()
}

// reconsider is one clustering decision at one level: join a better
// acceptable cluster if one validates; otherwise, if the current cluster has
// stopped being acceptable, split away from it.
func (n *Node) reconsider(ctx context.Context, lv *level) (alone bool) {
	now := time.Now()
	groups := groupClusters(n.peers.evidence(n.evidenceSince(now)), lv.index, n.self.ID)
	cur := lv.info() // LogSize as of this round's updateSizes
	curGroup := groups[cur.ID]
	// Alone: no other member of this node's cluster is known (a singleton,
	// typically the one it started in). Such a node joins any acceptable
	// cluster larger than its own whatever δ's phase, and looks again soon
	// (clusterLoop): in a network starting up, nodes join one by one and
	// the first ones only find singletons. Larger is asymmetric, so two
	// lone nodes never swap.
	alone = curGroup == nil
	stay := true
	if curGroup != nil {
		cur.LogSize = max(cur.LogSize, curGroup.info.LogSize)
		measured, under := curGroup.rttCounts(lv.threshold)
		if measured > 0 && float64(measured-under) >= n.cfg.LeaveFraction*float64(measured) {
			stay = false
		}
	}
	cands := n.clusterCandidates(lv, groups, cur, stay, alone, now)
	for i, c := range cands {
		if i == maxCandidates || ctx.Err() != nil {
			break
		}
		if info, ok := n.validateCluster(ctx, lv, c); ok {
			n.joinCluster(ctx, lv, info, !stay)
			return false
		}
	}
	lv.mu.Lock()
	sinceSplit := now.Sub(lv.lastSplit)
	lv.mu.Unlock()
	// Right after a split the far side is still sorting itself out: some
	// of its members are about to join better clusters. Splitting it again
	// at once made cascades of moves; give it two periods.
	if !stay && sinceSplit >= 2*n.cfg.ClusterInterval {
		n.splitAway(ctx, lv, cur)
	}
	return alone
}

// clusterCandidates lists, best first, the clusters at lv worth
// validating this round: acceptable on what the node already knows, not
// left recently (except for a better one), and preferred to cur, or any
// acceptable one when the node must leave (!stay), or a larger one when it
// is alone.
func (n *Node) clusterCandidates(lv *level, groups map[ID]*clusterSample, cur ClusterInfo, stay, alone bool, now time.Time) []*clusterSample {
	left := n.recentlyLeft(lv, now)
	var cands []*clusterSample
	for id, g := range groups {
		if id == cur.ID {
			continue
		}
		if l, ok := left[id]; ok && (l.unacceptable || !preferredAlways(g.info, cur)) {
			// Left recently. Back only to a cluster it left for a better
			// one, and only if that one now wins in either phase of δ:
			// not merely because the phase turned.
			continue
		}
		if f, ok := g.fastest(); !ok || f.minRTT >= lv.threshold {
			continue
		}
		// What the node already knows may rule a cluster out without any
		// probing: choose among the clusters that look acceptable, and
		// validate only those.
		if measured, under := g.rttCounts(lv.threshold); measured >= 2 && float64(under) < n.joinFraction(g, lv.threshold)*float64(measured) {
			continue
		}
		if !stay || preferCluster(g.info, cur, now) || (alone && g.info.LogSize > cur.LogSize) {
			cands = append(cands, g)
		}
	}
	// Best first, except that clusters of a node on this node's own site
	// come before all others: the hint that introduced them says this node
	// belongs with them, and a newcomer (whose fresh singleton makes δ 0)
	// would otherwise take any larger cluster that happens to validate and
	// leave its site split.
	slices.SortFunc(cands, func(a, b *clusterSample) int {
		if sa, sb := n.hasSiteMate(a, lv.threshold), n.hasSiteMate(b, lv.threshold); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		switch {
		case preferCluster(a.info, b.info, now):
			return -1
		case preferCluster(b.info, a.info, now):
			return 1
		}
		return a.info.ID.Cmp(b.info.ID)
	})
	return cands
}

// recentlyLeft forgets the clusters lv left longer than rejoinHoldoff ago
// and returns the others.
func (n *Node) recentlyLeft(lv *level, now time.Time) map[ID]leftCluster {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	for id, l := range lv.left {
		if now.Sub(l.at) >= rejoinHoldoff {
			delete(lv.left, id)
		}
	}
	return maps.Clone(lv.left)
}

// logSizeEstimate estimates log2 of the size of the cluster a routing table
// belongs to. A table holding fewer than k contacts is taken to hold the
// whole cluster. Otherwise the k-th nearest contact's distance says how
// densely the ID space is populated: with n nodes spread evenly, the k
// nearest fill about k/n of it.
func logSizeEstimate(rt *routingTable, self ID, k int) float64 {
	size := rt.len()
	lower := math.Log2(float64(size + 1))
	if size < k {
		return lower
	}
	cs := rt.closest(self, k, ID{})
	if len(cs) < k {
		return lower
	}
	var d ID
	for i := range d {
		d[i] = self[i] ^ cs[k-1].ID[i]
	}
	est := math.Log2(float64(k)) + float64(IDBits) - log2ID(d)
	return math.Min(math.Max(est, lower), 31)
}

// log2ID returns log2 of d read as a 160-bit integer (0 for zero).
func log2ID(d ID) float64 {
	for i, b := range d {
		if b == 0 {
			continue
		}
		// Take the 8 bytes from the first non-zero one as a mantissa.
		var m uint64
		for j := range 8 {
			m <<= 8
			if i+j < IDLen {
				m |= uint64(d[i+j])
			}
		}
		return math.Log2(float64(m)) + float64(8*(IDLen-i-8))
	}
	return 0
}
