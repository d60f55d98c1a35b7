package coraldht

import (
	"net/netip"
	"sync/atomic"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// A node that runs an HTTP proxy publishes how loaded the proxy is with
// its liveness: every datagram it sends to a peer that reads extensions
// carries the load entry (PROTOCOL.md, Extensions), and every node
// remembers the latest load each peer sent with the rest of what it
// knows of that peer. A DNS server that keeps its proxies fresh by
// pinging them (plugin/coredns) so learns their load at the same rate as
// their liveness, without a message of its own.

// Load is how loaded a node's proxy says it is, each part a percent of
// what the proxy may carry (255 meaning 255 % or more).
type Load struct {
	// Known says the node publishes a load; a zero Load is a node that
	// does not (a DNS server, or a release before loads).
	Known bool
	// Bandwidth is the share of its bandwidth budget used in the current
	// window (0 without a budget).
	Bandwidth uint8
	// Requests is its requests in flight, of the number it is configured
	// to carry.
	Requests uint8
	// Disk is the share of its cache's configured room that its file
	// system cannot provide (0 when the disk has room for all of it).
	Disk uint8
}

// Percent is the load's largest part: what runs out first.
func (l Load) Percent() int {
	return int(max(l.Bandwidth, l.Requests, l.Disk))
}

// LoadPercent clamps a percent (any float, NaN as 0) into a Load part.
func LoadPercent(p float64) uint8 {
	switch {
	case !(p > 0):
		return 0
	case p >= 255:
		return 255
	}
	return uint8(p + 0.5)
}

func (l Load) wire() wire.Load {
	return wire.Load{Present: l.Known, Bandwidth: l.Bandwidth, Requests: l.Requests, Disk: l.Disk}
}

func loadOf(w wire.Load) Load {
	return Load{Known: w.Present, Bandwidth: w.Bandwidth, Requests: w.Requests, Disk: w.Disk}
}

// publishedLoad is the load this node publishes, packed for atomic use:
// bit 24 known, then bandwidth, requests, disk.
type publishedLoad struct{ v atomic.Uint32 }

func (p *publishedLoad) set(l Load) {
	if !l.Known {
		p.v.Store(0)
		return
	}
	p.v.Store(1<<24 | uint32(l.Bandwidth)<<16 | uint32(l.Requests)<<8 | uint32(l.Disk))
}

func (p *publishedLoad) get() Load {
	v := p.v.Load()
	if v == 0 {
		return Load{}
	}
	return Load{Known: true, Bandwidth: uint8(v >> 16), Requests: uint8(v >> 8), Disk: uint8(v)}
}

// SetLoad sets the load this node publishes from now on (a zero Load:
// none). A proxy calls it every second or so; the call is an atomic
// store.
func (n *Node) SetLoad(l Load) { n.published.set(l) }

// PublishedLoad is what SetLoad last set.
func (n *Node) PublishedLoad() Load { return n.published.get() }

// PeerLoad is the load the peer at addr last sent, if it sent one.
func (n *Node) PeerLoad(addr netip.AddrPort) Load {
	l, _ := n.peers.load(addr)
	return l
}
