package proxy

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/internal/portguard"
)

// The node's own addresses are origins like no other: a service on this
// machine that listens on every interface and is private only by a
// firewall (the metrics, the admin API, a database) answers the proxy on
// the machine's public address, which the private-address policy lets
// through. So the guard also refuses every address of the node itself:
//
//   - the addresses of its network interfaces (net.InterfaceAddrs), which
//     are also what a listener bound to 0.0.0.0 or :: answers on;
//   - the address every listening socket of this process is bound to:
//     Caddy's servers, its admin endpoint, the DSHT's UDP socket (from
//     /proc on Linux), and the DSHT nodes' listen addresses;
//   - the addresses it advertises: the DSHT node's (what DNS hands out for
//     this proxy) and peer_address.
//
// allow_origins lets such an address through only when it lists that very
// address (a bare address, or a /32 or /128): a wider prefix such as
// 127.0.0.0/8 allows other local origins, not the node itself.
//
// The set is read again every selfRefresh, so addresses that come and go
// (DHCP, a new listener after a reload) are seen within that time.

// selfRefresh is how often the node's addresses are read again.
const selfRefresh = 30 * time.Second

// selfAddresses is the set of the node's own addresses, read from its
// sources at most every selfRefresh.
type selfAddresses struct {
	sources []func() []netip.Addr

	// snap is the set and when it was read; a request reads it without a
	// lock. The one request that finds it stale reads the sources again
	// (refresh, under mu) while others go on with the old set: only the
	// first read ever waits.
	snap atomic.Pointer[selfSnapshot]
	mu   sync.Mutex
}

type selfSnapshot struct {
	set  map[netip.Addr]bool
	read time.Time
}

func newSelfAddresses(sources ...func() []netip.Addr) *selfAddresses {
	return &selfAddresses{sources: sources}
}

// ownAddrSources are where a proxy reads the node's own addresses: its
// interfaces, its process's listening sockets, the addresses it advertises
// (advertisedAddrs) and more (Config.OwnAddrs), if set.
func (p *Proxy) ownAddrSources(more func() []netip.Addr) []func() []netip.Addr {
	out := []func() []netip.Addr{interfaceAddrs, processListenerAddrs, p.advertisedAddrs}
	if more != nil {
		out = append(out, more)
	}
	return out
}

// contains reports whether ip (unmapped, without zone) is one of the
// node's addresses.
func (s *selfAddresses) contains(ip netip.Addr) bool {
	if s == nil {
		return false
	}
	snap := s.snap.Load()
	switch {
	case snap == nil:
		s.mu.Lock()
		if snap = s.snap.Load(); snap == nil {
			snap = s.refreshLocked()
		}
		s.mu.Unlock()
	case s.stale(snap) && s.mu.TryLock():
		if snap = s.snap.Load(); s.stale(snap) {
			snap = s.refreshLocked()
		}
		s.mu.Unlock()
	}
	return snap.set[ip]
}

func (s *selfAddresses) stale(snap *selfSnapshot) bool {
	now := time.Now()
	return now.Sub(snap.read) >= selfRefresh || now.Before(snap.read)
}

// refreshLocked reads the sources again; s.mu is held.
func (s *selfAddresses) refreshLocked() *selfSnapshot {
	set := make(map[netip.Addr]bool)
	for _, src := range s.sources {
		for _, a := range src() {
			if a.IsValid() {
				set[a.Unmap().WithZone("")] = true
			}
		}
	}
	snap := &selfSnapshot{set: set, read: time.Now()}
	s.snap.Store(snap)
	return snap
}

// interfaceAddrs are the addresses of the machine's network interfaces.
func interfaceAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip)
			}
		}
	}
	return out
}

// processListenerAddrs are the local addresses of this process's
// listening TCP sockets and bound UDP sockets (internal/portguard reads
// them from /proc on Linux); nil where they cannot be read.
func processListenerAddrs() []netip.Addr {
	socks, err := portguard.Own()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(socks))
	for _, s := range socks {
		out = append(out, s.Addr.Addr())
	}
	return out
}
