package coral

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// ns-<ip> names spell their address, so any server can answer for any other
// server's name without asking anyone. Answered for every address, they
// would make the coral zone a name for anything (ns-127-0-0-1 for DNS
// rebinding, a victim's address under the CDN's name). So they are answered
// only for addresses that are, or were within nsRemember, Coral name
// servers as far as this node knows: its own address, the name servers of
// every sweep, and the DNS servers in its routing tables. The knowledge
// lives beside the node in coraldht/host, so a reload keeps it.

// nsRemember is how long a name server's name keeps answering after this
// node last heard from it (or ns_ttl, if that is longer): a resolver that
// was handed the name in an NS set may ask for its address until the NS
// record expires, and a server that is away for a while (a reboot, a
// partition) keeps its name meanwhile.
const nsRemember = 6 * time.Hour

// nsBookSize bounds the remembered name servers per node; past it the ones
// heard from longest ago are forgotten first.
const nsBookSize = 16384

// nsBook remembers Coral name servers and when they were last heard from.
type nsBook struct {
	mu   sync.RWMutex
	seen map[netip.Addr]time.Time
	max  int
	// warm is set by the first sweep made while the node had joined the
	// network: from then on an address the book does not know is not a
	// name server. Before it, the node may just not have heard yet.
	warm atomic.Bool
}

func newNSBook(max int) *nsBook {
	return &nsBook{seen: make(map[netip.Addr]time.Time), max: max}
}

// nsAnswer is what the book says about an address.
type nsAnswer int

const (
	nsKnown   nsAnswer = iota
	nsUnknown          // not a Coral name server (NXDOMAIN)
	nsNotYet           // not known, but the node does not know the network yet
)

// lookup reports whether a was heard from as a name server within within
// of now.
func (b *nsBook) lookup(a netip.Addr, now time.Time, within time.Duration) nsAnswer {
	b.mu.RLock()
	at, ok := b.seen[a.Unmap()]
	b.mu.RUnlock()
	switch {
	case ok && now.Sub(at) <= within:
		return nsKnown
	case b.warm.Load():
		return nsUnknown
	}
	return nsNotYet
}

// update records what one sweep saw and forgets what is older than within.
func (b *nsBook) update(heard map[netip.Addr]time.Time, now time.Time, within time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for a, at := range heard {
		if old, ok := b.seen[a]; !ok || at.After(old) {
			b.seen[a] = at
		}
	}
	for a, at := range b.seen {
		if now.Sub(at) > within {
			delete(b.seen, a)
		}
	}
	if over := len(b.seen) - b.max; over > 0 {
		type entry struct {
			a  netip.Addr
			at time.Time
		}
		all := make([]entry, 0, len(b.seen))
		for a, at := range b.seen {
			all = append(all, entry{a, at})
		}
		slices.SortFunc(all, func(x, y entry) int { return x.at.Compare(y.at) })
		for _, e := range all[:over] {
			delete(b.seen, e.a)
		}
	}
}

func (b *nsBook) len() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.seen)
}

// nsWindow is how long a name server is remembered with ns_ttl nsTTL.
func nsWindow(nsTTL uint32) time.Duration {
	return max(nsRemember, time.Duration(nsTTL)*time.Second)
}

// recordNameServers notes the name servers a sweep saw: the live ones of
// every level and every DNS server in the node's routing tables, with when
// this node last heard from them.
func (t *tracker) recordNameServers(set *liveSet) {
	now := t.now()
	heard := make(map[netip.Addr]time.Time)
	note := func(ni coraldht.NodeInfo) {
		at := ni.LastHeard
		if ni.Self {
			at = now
		}
		if a := ni.Addr.Addr().Unmap(); a.IsValid() && !at.IsZero() && at.After(heard[a]) {
			heard[a] = at
		}
	}
	for lvl := range t.levels {
		for _, ni := range set.dns[lvl] {
			note(ni)
		}
		for _, ni := range t.node.RoutingTable(lvl) {
			if ni.Services.Has(coraldht.ServiceDNS) {
				note(ni)
			}
		}
	}
	t.book.update(heard, now, t.bookWindow)
	if t.joined == nil || t.joined() {
		t.book.warm.Store(true)
	}
}

// isNameServer says whether a is a Coral name server whose ns-… name this
// server answers: itself, or one the book knows.
func (t *tracker) isNameServer(a, self netip.Addr) nsAnswer {
	if a = a.Unmap(); a == self {
		return nsKnown
	}
	return t.book.lookup(a, t.now(), t.bookWindow)
}
