package wan

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"
)

// The address plan, all inside 198.18.0.0/15:
//
//	198.18.s.0/24    site s's LAN: its gateway is .1 (and that is the
//	                 gateway's address in every Time Exceeded it sends)
//	198.19.s.0/24    site s's client LAN, behind the same gateway (.1)
//	198.19.128+r.1   region router r
//	198.19.239.1     the core router
//	198.19.240.0/20  the point-to-point links, a /31 each
//
// so a lab has at most maxSites sites and maxRegions regions.
const (
	maxSites   = 128
	maxRegions = 100
	maxLinks   = 16 * 128
)

// SiteLAN is site s's LAN; its gateway is .1.
func SiteLAN(s int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(s), 0}), 24)
}

// ClientLAN is site s's second LAN, which holds clients apart from the
// site's servers (another /24 behind the same gateway).
func ClientLAN(s int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(s), 0}), 24)
}

// HostAddr is host h (2..254) of site s's LAN.
func HostAddr(s, h int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(s), byte(h)}) }

// ClientAddr is host h (2..254) of site s's client LAN.
func ClientAddr(s, h int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, byte(s), byte(h)}) }

// GatewayAddr is site s's gateway.
func GatewayAddr(s int) netip.Addr { return HostAddr(s, 1) }

// RegionRouterAddr is region r's router.
func RegionRouterAddr(r int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, byte(128 + r), 1}) }

// CoreAddr is the core router.
var CoreAddr = netip.AddrFrom4([4]byte{198, 19, 239, 1})

// linkAddrs are the two ends of point-to-point link k.
func linkAddrs(k int) (netip.Addr, netip.Addr) {
	a := netip.AddrFrom4([4]byte{198, 19, byte(240 + k/128), byte(2 * (k % 128))})
	return a, a.Next()
}

// Site is one site of the emulated wide area.
type Site struct {
	// Name says where it is (reports; the site's namespaces are named by
	// its index).
	Name string
	// Region groups sites behind one region router: a state or province,
	// or a region of the synthetic world.
	Region string
}

// plan is how the lab reproduces a site-to-site RTT matrix on a tree of
// routers. A packet from site a to site b goes gateway(a) → region(a) →
// [core → region(b) →] gateway(b); each router delays what it sends on a
// wide-area link by that link's one-way delay, the same both ways: a
// site's access link (gateway–region) and a region's trunk
// (region–core). A tree's sums cannot match an arbitrary matrix, so the
// router where the pair's path turns (the region router of two sites in
// one region, else the core) adds the pair's turn: half the matrix's RTT
// minus the links' delays. Links are chosen small enough that no turn is
// negative: a site's access is a quarter of its RTT to its nearest lab
// site, a region's trunk half of what is left of its sites' nearest
// half-RTT to another region. So a site's first hops look as far as
// its nearest neighbours allow, and every pair's RTT is the matrix's.
type plan struct {
	sites   int
	region  []int // per site
	regions []string
	access  []time.Duration // per site: one-way, each way
	trunk   []time.Duration // per region
	turn    [][]time.Duration
}

func makePlan(sites []Site, rtt func(a, b int) time.Duration) (*plan, error) {
	n := len(sites)
	switch {
	case n == 0:
		return nil, errors.New("wan: no sites")
	case n > maxSites:
		return nil, fmt.Errorf("wan: %d sites, at most %d", n, maxSites)
	}
	p := &plan{sites: n, region: make([]int, n), access: make([]time.Duration, n)}
	idx := map[string]int{}
	for i, s := range sites {
		r, ok := idx[s.Region]
		if !ok {
			r = len(p.regions)
			idx[s.Region] = r
			p.regions = append(p.regions, s.Region)
		}
		p.region[i] = r
	}
	if len(p.regions) > maxRegions {
		return nil, fmt.Errorf("wan: %d regions, at most %d", len(p.regions), maxRegions)
	}
	half := func(a, b int) time.Duration {
		d := rtt(a, b)
		if d <= 0 {
			d = rtt(b, a)
		}
		return d / 2
	}
	for a := range n {
		for b := range n {
			if a != b && rtt(a, b) <= 0 {
				return nil, fmt.Errorf("wan: RTT between sites %d and %d is %v", a, b, rtt(a, b))
			}
		}
	}
	for a := range n {
		best := time.Duration(math.MaxInt64)
		for b := range n {
			if b != a {
				best = min(best, half(a, b))
			}
		}
		if best == math.MaxInt64 {
			best = 0
		}
		p.access[a] = (best / 2).Truncate(time.Microsecond)
	}
	p.trunk = make([]time.Duration, len(p.regions))
	for r := range p.regions {
		best := time.Duration(math.MaxInt64)
		for a := range n {
			for b := range n {
				if p.region[a] == r && p.region[b] != r {
					best = min(best, half(a, b)-p.access[a]-p.access[b])
				}
			}
		}
		if best == math.MaxInt64 {
			best = 0
		}
		p.trunk[r] = max(0, best/2).Truncate(time.Microsecond)
	}
	p.turn = make([][]time.Duration, n)
	for a := range n {
		p.turn[a] = make([]time.Duration, n)
		for b := range n {
			if a == b {
				continue
			}
			t := half(a, b) - p.links(a, b)
			if t < 0 {
				return nil, fmt.Errorf("wan: sites %d and %d: links sum to %v, past half their RTT %v", a, b, p.links(a, b), half(a, b))
			}
			p.turn[a][b] = t
		}
	}
	return p, nil
}

// links is the one-way delay of the links between sites a and b.
func (p *plan) links(a, b int) time.Duration {
	d := p.access[a] + p.access[b]
	if ra, rb := p.region[a], p.region[b]; ra != rb {
		d += p.trunk[ra] + p.trunk[rb]
	}
	return d
}

// oneWay is the delay the lab gives a packet from site a to site b.
func (p *plan) oneWay(a, b int) time.Duration {
	if a == b {
		return 0
	}
	return p.links(a, b) + p.turn[a][b]
}
