package main

import (
	"context"
	"net/netip"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/topology"
)

// world places everything that is not a Coral node (clients, their
// resolvers, origins) on the sites of the RTT matrix, gives the modelled
// RTT between any two addresses, and the routers between them (routes.go).
//
// Addresses: node h at site s is 10.⌊s/256⌋.(s mod 256).h (topology.Place).
// A client beside node h shares its /24 (host 100+h) and its resolver too
// (host 200+h). A client apart from every proxy is at the same site in a
// /24 no node is in: 11.⌊s/256⌋.(s mod 256).(100+h), resolver .(200+h). An
// origin is in 14.⌊s/256⌋.(s mod 256).0/24. Each /24's gateway router is its
// .254; the routers beyond are routes.go's.
//
// The address book (site) is written while nothing runs (placing a run's
// clients, resolvers and origin before they start) and read without a
// lock; the routers' state has its own.
type world struct {
	m         *topology.Matrix
	site      map[netip.Addr]int // every address placed, to its site
	region    []int              // per site: index of its region
	continent []int              // per site: index of its continent
	// regionNames[r] is region r's name (Site.Region).
	regionNames []string
	rp          routeParams
	seed        uint64
	routerState
}

const (
	sameHostRTT = 200 * time.Microsecond // a client on a proxy's host
	lanRTT      = 500 * time.Microsecond // same /24
	siteRTT     = 2 * time.Millisecond   // same site, another /24
	originRTT   = 5 * time.Millisecond   // an origin server's own access delay
)

func newWorld(m *topology.Matrix, rp routeParams, seed uint64) *world {
	w := &world{m: m, site: make(map[netip.Addr]int), region: make([]int, m.Len()), continent: make([]int, m.Len()),
		rp: rp, seed: seed, routerState: routerState{global: map[netip.Addr]*bucket{}, perPeer: map[[2]netip.Addr]*bucket{},
			traces: map[traceKey]traceResult{}, traceCount: map[string]int{}}}
	idx, cont := map[string]int{}, map[string]int{}
	for i, s := range m.Sites {
		// A region serves a state or province of one country (the
		// WonderProxy data leaves the region empty in many countries) or
		// a region of the synthetic world.
		key := s.Country + "/" + s.Region
		r, ok := idx[key]
		if !ok {
			r = len(w.regionNames)
			idx[key] = r
			w.regionNames = append(w.regionNames, key)
		}
		w.region[i] = r
		c, ok := cont[s.Continent]
		if !ok {
			c = len(cont)
			cont[s.Continent] = c
		}
		w.continent[i] = c
	}
	return w
}

func siteAddr(first byte, site int, host byte) netip.Addr {
	return netip.AddrFrom4([4]byte{first, byte(site >> 8), byte(site), host})
}

func (w *world) place(a netip.Addr, site int) netip.Addr {
	w.site[a.Unmap()] = site
	return a
}

// rtt is the modelled round-trip time between two placed addresses.
func (w *world) rtt(a, b netip.Addr) time.Duration {
	a, b = a.Unmap(), b.Unmap()
	if a == b {
		return 0
	}
	sa, sb := w.site[a], w.site[b]
	if sa != sb {
		return w.m.RTT(sa, sb)
	}
	if coraldht.SitePrefix(a) == coraldht.SitePrefix(b) {
		if a.As4()[3]%100 == b.As4()[3]%100 && (a.As4()[3] >= 100) != (b.As4()[3] >= 100) {
			return sameHostRTT // a client (or resolver) and the node it is beside
		}
		return lanRTT
	}
	return siteRTT
}

// sleepCtx sleeps for d or until ctx ends, reporting whether it slept out.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// prober is a DNS server's RTT probe of a resolver: one round trip.
func (w *world) prober(from netip.Addr) func(ctx context.Context, a netip.Addr) (time.Duration, error) {
	return func(ctx context.Context, a netip.Addr) (time.Duration, error) {
		d := w.rtt(from, a)
		if !sleepCtx(ctx, d) {
			return 0, ctx.Err()
		}
		return d, nil
	}
}
