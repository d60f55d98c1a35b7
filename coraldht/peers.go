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
// over all peers used for peers never measured.
type peerTable struct {
	mu       sync.Mutex
	max      int
	peers    map[netip.AddrPort]*peerInfo
	all      rttEstimator
	min, cap time.Duration // RTO clamp
	initial  time.Duration
}

type peerInfo struct {
	rtt       rttEstimator
	lastHeard time.Time
	// failedAt is when an RPC to the peer last timed out with nothing heard
	// from it since; zero otherwise.
	failedAt time.Time
	// contact and clusters are what the peer's last authentic datagram said
	// about itself: clustering's evidence of which clusters exist nearby.
	contact  Contact
	clusters []ClusterInfo
}

// PeerRTT is a measured round-trip time to a peer.
type PeerRTT struct {
	Addr      netip.AddrPort
	Min       time.Duration // smallest sample
	Smoothed  time.Duration // RFC 6298 smoothed RTT
	Samples   int
	LastHeard time.Time
}

func newPeerTable(max int, minRTO, maxRTO, initial time.Duration) *peerTable {
	return &peerTable{max: max, peers: make(map[netip.AddrPort]*peerInfo), min: minRTO, cap: maxRTO, initial: initial}
}

func (p *peerTable) entryLocked(addr netip.AddrPort) *peerInfo {
	pi := p.peers[addr]
	if pi == nil {
		if len(p.peers) >= p.max {
			p.evictLocked()
		}
		pi = &peerInfo{}
		p.peers[addr] = pi
	}
	return pi
}

// observe records a reply from addr that took rtt.
func (p *peerTable) observe(addr netip.AddrPort, rtt time.Duration, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.entryLocked(addr)
	pi.rtt.observe(rtt)
	pi.lastHeard, pi.failedAt = now, time.Time{}
	p.all.observe(rtt)
}

// noteClusters records an authentic datagram from c carrying its cluster
// list. Unlike heard it creates an entry, since clustering wants to know of
// every nearby cluster, including those of peers that only ever ask.
func (p *peerTable) noteClusters(c Contact, clusters []ClusterInfo, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.entryLocked(c.Addr)
	pi.lastHeard, pi.failedAt = now, time.Time{}
	pi.contact = c
	pi.clusters = append(pi.clusters[:0], clusters...)
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
	for _, pi := range p.peers {
		if pi.clusters == nil || pi.lastHeard.Before(since) {
			continue
		}
		v := peerView{Contact: pi.contact, lastHeard: pi.lastHeard, clusters: slices.Clone(pi.clusters)}
		if pi.rtt.samples > 0 {
			v.minRTT = pi.rtt.min
		}
		out = append(out, v)
	}
	return out
}

// failed records an RPC to addr that went unanswered.
func (p *peerTable) failed(addr netip.AddrPort, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.entryLocked(addr)
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
	pi := p.peers[addr]
	return pi != nil && !pi.failedAt.IsZero() && now.Sub(pi.failedAt) < window
}

// evictLocked drops the peer heard from longest ago.
func (p *peerTable) evictLocked() {
	var oldest netip.AddrPort
	var when time.Time
	first := true
	for a, pi := range p.peers {
		if first || pi.lastHeard.Before(when) {
			oldest, when, first = a, pi.lastHeard, false
		}
	}
	delete(p.peers, oldest)
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
	if pi := p.peers[addr]; pi != nil && pi.rtt.samples > 0 {
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
	pi := p.peers[addr]
	if pi == nil {
		return PeerRTT{}, false
	}
	return PeerRTT{Addr: addr, Min: pi.rtt.min, Smoothed: pi.rtt.srtt, Samples: pi.rtt.samples, LastHeard: pi.lastHeard}, true
}

func (p *peerTable) prune(before time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, pi := range p.peers {
		if pi.lastHeard.Before(before) {
			delete(p.peers, a)
		}
	}
}
