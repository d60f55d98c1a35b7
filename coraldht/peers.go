package coraldht

import (
	"net/netip"
	"slices"
	"sync"
	"time"
)

// rttEstimator keeps the RFC 6298 smoothed RTT and variation of a path, plus
// the minimum seen (the queue-free RTT that clustering compares with level
// thresholds).
type rttEstimator struct {
	srtt, rttvar, min time.Duration
	samples           int
}

func (e *rttEstimator) observe(rtt time.Duration) {
	if rtt <= 0 {
		rtt = time.Microsecond
	}
	if e.samples == 0 {
		e.srtt, e.rttvar, e.min = rtt, rtt/2, rtt
	} else {
		diff := e.srtt - rtt
		if diff < 0 {
			diff = -diff
		}
		e.rttvar = (3*e.rttvar + diff) / 4
		e.srtt = (7*e.srtt + rtt) / 8
		e.min = min(e.min, rtt)
	}
	e.samples++
}

func (e *rttEstimator) rto() time.Duration { return e.srtt + 4*e.rttvar }

// peerTable remembers the RTT to every address the node has exchanged RPCs
// with recently, whether or not it is in a routing table, plus an aggregate
// over all peers used for peers never measured. It holds at most max
// addresses and at most max/16 (at least 64) of one source prefix (/24, /48), evicting
// the least recently used (boundedMap), so a flood of claimed senders
// cannot push out the peers a node measured.
type peerTable struct {
	mu       sync.Mutex
	max      int
	peers    *boundedMap[netip.AddrPort, netip.Prefix, *peerInfo]
	all      rttEstimator
	min, cap time.Duration // RTO clamp
	initial  time.Duration
}

type peerInfo struct {
	rtt       rttEstimator
	lastHeard time.Time
	touched   time.Time // last update of any kind: the order prune forgets in
	// failedAt is when an RPC to the peer last timed out with nothing heard
	// from it since; zero otherwise.
	failedAt time.Time
	// contact and clusters are what the peer's last authentic datagram said
	// about itself: clustering's evidence of which clusters exist nearby.
	contact  Contact
	clusters []ClusterInfo
	// ext: its datagrams say it reads the extension area; grant: the
	// address cookie it last granted this node, echoed in requests to it.
	ext   bool
	grant uint64
	// serial is the certificate its datagrams carried (identity mode).
	serial uint64
	// load is the load its last datagram with one published.
	load Load
}

// PeerRTT is a measured round-trip time to a peer.
type PeerRTT struct {
	Addr      netip.AddrPort
	Min       time.Duration // smallest sample
	Smoothed  time.Duration // RFC 6298 smoothed RTT
	Samples   int
	LastHeard time.Time
}

// peersPerPrefixShare: one source prefix may hold 1/16 of the table
// (512 by default), and never fewer than minPerPrefix.
const peersPerPrefixShare = 16

// minPerPrefix is the least a per-prefix bound of a table allows: a
// fleet may well have tens of nodes on one /24.
const minPerPrefix = 64

func newPeerTable(max int, minRTO, maxRTO, initial time.Duration) *peerTable {
	return &peerTable{max: max, min: minRTO, cap: maxRTO, initial: initial}
}

// entryLocked returns addr's record, creating it (and evicting as the
// bounds require) if needed, and marks it used now.
func (p *peerTable) entryLocked(addr netip.AddrPort, now time.Time) *peerInfo {
	if p.peers == nil || p.peers.max != p.max {
		p.resizeLocked()
	}
	pi, ok := p.peers.get(addr)
	if !ok {
		pi = &peerInfo{}
		p.peers.put(addr, SitePrefix(addr.Addr()), pi)
	} else {
		p.peers.touch(addr)
	}
	pi.touched = now
	return pi
}

// resizeLocked applies max, which tests lower: the records move to a
// table of the new size, most recent first.
func (p *peerTable) resizeLocked() {
	old := p.peers
	p.peers = newBoundedMap[netip.AddrPort, netip.Prefix, *peerInfo](p.max, max(p.max/peersPerPrefixShare, minPerPrefix))
	if old == nil {
		return
	}
	var keep []netip.AddrPort
	old.each(func(a netip.AddrPort, _ *peerInfo) bool { keep = append(keep, a); return true })
	for i := len(keep) - 1; i >= 0; i-- {
		pi, _ := old.get(keep[i])
		p.peers.put(keep[i], SitePrefix(keep[i].Addr()), pi)
	}
}

// lookup returns addr's record without creating one.
func (p *peerTable) lookupLocked(addr netip.AddrPort) *peerInfo {
	if p.peers == nil {
		return nil
	}
	pi, _ := p.peers.get(addr)
	return pi
}

// observe records a reply from addr that took rtt.
func (p *peerTable) observe(addr netip.AddrPort, rtt time.Duration, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.entryLocked(addr, now)
	pi.rtt.observe(rtt)
	pi.lastHeard, pi.failedAt = now, time.Time{}
	p.all.observe(rtt)
}

// noteClusters records an authentic datagram from c, whose address is
// proven, carrying its cluster list. Unlike heard it creates an entry,
// since clustering wants to know of every nearby cluster, including those
// of peers that only ever ask.
func (p *peerTable) noteClusters(c Contact, clusters []ClusterInfo, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.entryLocked(c.Addr, now)
	pi.lastHeard, pi.failedAt = now, time.Time{}
	pi.contact = c
	pi.clusters = append(pi.clusters[:0], clusters...)
}

// noteSender records what a datagram from addr, sent from that address,
// says of its sender: whether it reads extensions, the cookie it granted
// (0: none) and its certificate serial (0: none).
func (p *peerTable) noteSender(addr netip.AddrPort, ext bool, grant, serial uint64, load Load, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.entryLocked(addr, now)
	pi.ext = ext
	if load.Known {
		pi.load = load
	}
	if grant != 0 {
		pi.grant = grant
	}
	if serial != 0 {
		pi.serial = serial
	}
}

// load is the load the peer at addr last published.
func (p *peerTable) load(addr netip.AddrPort) (Load, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pi := p.lookupLocked(addr); pi != nil {
		return pi.load, true
	}
	return Load{}, false
}

// sendState is what sending to addr needs: whether the peer reads
// extensions and the cookie to echo.
func (p *peerTable) sendState(addr netip.AddrPort) (ext bool, grant uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pi := p.lookupLocked(addr); pi != nil {
		return pi.ext, pi.grant
	}
	return false, 0
}

// minRTT is the smallest RTT measured to addr; 0 if never measured.
func (p *peerTable) minRTT(addr netip.AddrPort) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pi := p.lookupLocked(addr); pi != nil && pi.rtt.samples > 0 {
		return pi.rtt.min
	}
	return 0
}

// withSerial lists the addresses whose last datagram carried one of the
// given certificate serials.
func (p *peerTable) withSerial(revoked func(uint64) bool) []netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []netip.AddrPort
	if p.peers != nil {
		p.peers.each(func(a netip.AddrPort, pi *peerInfo) bool {
			if pi.serial != 0 && revoked(pi.serial) {
				out = append(out, a)
			}
			return true
		})
	}
	return out
}

func (p *peerTable) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.peers == nil {
		return 0
	}
	return p.peers.len()
}

// peerView is one peer's clustering evidence.
type peerView struct {
	Contact
	minRTT    time.Duration // 0 if never measured
	lastHeard time.Time
	clusters  []ClusterInfo
}

// clusterAt returns the peer's cluster at level lvl, as last advertised.
func (v *peerView) clusterAt(lvl int) (ClusterInfo, bool) {
	for _, c := range v.clusters {
		if c.Level == lvl {
			return c, true
		}
	}
	return ClusterInfo{}, false
}

// evidence lists the peers heard from since the given time whose cluster
// list is known.
func (p *peerTable) evidence(since time.Time) []peerView {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []peerView
	if p.peers == nil {
		return nil
	}
	p.peers.each(func(_ netip.AddrPort, pi *peerInfo) bool {
		if pi.clusters == nil || pi.lastHeard.Before(since) {
			return true
		}
		v := peerView{Contact: pi.contact, lastHeard: pi.lastHeard, clusters: slices.Clone(pi.clusters)}
		if pi.rtt.samples > 0 {
			v.minRTT = pi.rtt.min
		}
		out = append(out, v)
		return true
	})
	return out
}

// failed records an RPC to addr that went unanswered.
func (p *peerTable) failed(addr netip.AddrPort, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.entryLocked(addr, now)
	if pi.failedAt.IsZero() {
		pi.failedAt = now
	}
	if pi.lastHeard.IsZero() {
		// Keep never-heard peers evictable in age order.
		pi.lastHeard = now
	}
}

// unreachable reports whether addr failed to answer within the last window
// and has not been heard from since. Lookups try such peers only when
// nothing else is left: as the Coral thesis notes, remembering unreachable
// nodes saves waiting for the same timeout again.
func (p *peerTable) unreachable(addr netip.AddrPort, now time.Time, window time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.lookupLocked(addr)
	return pi != nil && !pi.failedAt.IsZero() && now.Sub(pi.failedAt) < window
}

// timeouts returns, for an RPC to addr, when a lookup should hedge (also
// ask another node) and when to give up on the reply.
//
// A measured peer hedges at 1.25× its minimum RTT (at least 10 ms over it,
// never later than its RFC 6298 timeout) and gives up at twice that timeout. A peer never measured
// hedges on the aggregate of all peers, but is given up on no sooner than
// InitialRPCTimeout: the aggregate says nothing about how far this one is,
// and declaring a live peer dead costs more than waiting. A quick call (to a
// peer that recently failed to answer) gives up at the hedge time, or at its
// timeout if it was ever measured.
func (p *peerTable) timeouts(addr netip.AddrPort, quick bool) (hedge, hard time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	clamp := func(d time.Duration) time.Duration { return min(max(d, p.min), p.cap) }
	hedgeOf := func(e *rttEstimator) time.Duration {
		return min(clamp(e.srtt*3/2+10*time.Millisecond), clamp(e.rto()))
	}
	if pi := p.lookupLocked(addr); pi != nil && pi.rtt.samples > 0 {
		// A path's minimum RTT predicts the next reply far better than the
		// smoothed RTT after a sample or two (RFC 6298 starts the variance
		// at half the first sample): hedge shortly after it.
		rto := clamp(pi.rtt.rto())
		hedge = min(clamp(max(pi.rtt.min*5/4, pi.rtt.min+10*time.Millisecond)), rto)
		hard = clamp(2 * rto)
		if quick {
			hard = rto
		}
		return hedge, hard
	}
	if p.all.samples == 0 {
		return p.initial, clamp(2 * p.initial)
	}
	hedge = hedgeOf(&p.all)
	if quick {
		return hedge, hedge
	}
	return hedge, min(max(clamp(2*p.all.rto()), p.initial), p.cap)
}

func (p *peerTable) get(addr netip.AddrPort) (PeerRTT, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.lookupLocked(addr)
	if pi == nil {
		return PeerRTT{}, false
	}
	return PeerRTT{Addr: addr, Min: pi.rtt.min, Smoothed: pi.rtt.srtt, Samples: pi.rtt.samples, LastHeard: pi.lastHeard}, true
}

// prune forgets the peers untouched since before, oldest first.
func (p *peerTable) prune(before time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.peers != nil {
		a, pi, ok := p.peers.oldest()
		if !ok || !pi.touched.Before(before) {
			return
		}
		p.peers.remove(a)
	}
}
