package topology

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"
)

// NodePort is the UDP port every placed node listens on. All nodes share it
// because each has its own IP address; a fixed port keeps addresses short
// and predictable in logs.
const NodePort = 4000

// MaxPerSite is the largest number of nodes one site can host: a site's
// nodes share one /24 and use host numbers 1–254.
const MaxPerSite = 254

// Intra-site RTT bounds: two nodes at one site (think: one data centre or
// one metropolitan area) are 0.5–5 ms apart, which keeps them well inside
// Coral's tightest (20 ms) cluster while still giving them distinct,
// non-zero distances.
const (
	IntraSiteMinRTT = 500 * time.Microsecond
	IntraSiteMaxRTT = 5 * time.Millisecond
)

// Node is a simulated node placed on a site of a Matrix.
type Node struct {
	// Addr is the node's unique address (see Matrix.Place for the scheme).
	Addr netip.AddrPort
	// Site is the index of the node's site in the Matrix.
	Site int
	// Key seeds the node's intra-site RTTs: two nodes at one site are
	// IntraSiteRTT(a.Key, b.Key) apart. Place draws it from its seed.
	Key uint64
}

// Place puts n nodes on the matrix's sites and returns them in placement
// order.
//
// Sites are visited in a random order fixed by seed, and each visited site
// receives perSite consecutive nodes, except the last visited one, which
// receives what is left (between 1 and perSite nodes); unvisited sites get
// none. So nodes [0, perSite) share the first site, and so on. If the sites
// cannot hold n nodes at perSite each, or perSite <= 0, perSite is raised to
// ceil(n / number of sites), spreading the nodes as evenly as that rule
// allows. Place panics if that exceeds MaxPerSite, if n < 0, or if the
// matrix has no sites.
//
// Address scheme: the node with host number h (1, 2, … in placement order
// within its site) at site index s is 10.⌊s/256⌋.(s mod 256).h:4000. Every
// site thus owns the /24 10.⌊s/256⌋.(s mod 256).0/24, nodes at one site share
// it and nodes at different sites never do, which is what matters to code
// that treats a shared /24 as a hint of proximity. The prefixes carry no
// other meaning: sites in one /16 are not closer than others. The address
// depends only on the site index and the node's rank at its site, so the
// same site keeps the same /24 whatever the seed.
//
// Each node also gets a random Key (see IntraSiteRTT). The result is a
// pure function of (matrix, n, perSite, seed).
func (m *Matrix) Place(n, perSite int, seed uint64) []Node {
	if n < 0 {
		panic(fmt.Sprintf("topology: Place(%d nodes): negative count", n))
	}
	if m.n == 0 {
		panic("topology: Place on a matrix without sites")
	}
	if need := (n + m.n - 1) / m.n; perSite < need || perSite <= 0 {
		perSite = max(need, 1)
	}
	if perSite > MaxPerSite {
		panic(fmt.Sprintf("topology: Place(%d nodes) on %d sites needs %d nodes per site, more than the %d a /24 holds",
			n, m.n, perSite, MaxPerSite))
	}
	rng := rand.New(rand.NewPCG(seed, 0x706c6163656d656e)) // "placemen"
	order := rng.Perm(m.n)
	nodes := make([]Node, n)
	for i := range nodes {
		site := order[i/perSite]
		if site >= 1<<16 {
			panic(fmt.Sprintf("topology: site index %d does not fit the 10.x.y.0/24 address scheme", site))
		}
		host := byte(i%perSite + 1)
		nodes[i] = Node{
			Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(site >> 8), byte(site), host}), NodePort),
			Site: site,
			Key:  rng.Uint64(),
		}
	}
	return nodes
}

// IntraSiteRTT returns the RTT between two distinct nodes at the same site
// given their keys: a fixed value, uniformly distributed in
// [IntraSiteMinRTT, IntraSiteMaxRTT] over pairs, symmetric in its arguments.
//
// It is derived from the pair rather than summed from per-node delays
// because a sum of two per-node delays is not uniform (it piles up in the
// middle), and because per-node delays would also leak into cross-site
// paths, which must equal the matrix exactly.
func IntraSiteRTT(keyA, keyB uint64) time.Duration {
	lo, hi := min(keyA, keyB), max(keyA, keyB)
	h := mix64(mix64(lo) ^ hi)
	u := float64(h>>11) / (1 << 53) // uniform in [0, 1)
	return IntraSiteMinRTT + time.Duration(u*float64(IntraSiteMaxRTT-IntraSiteMinRTT))
}

// mix64 is the SplitMix64 finaliser, a cheap bijective 64-bit hash.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// NodeRTT returns the RTT between two placed nodes: 0 for the same node
// (same address), IntraSiteRTT for two nodes at one site, and the matrix
// RTT between their sites otherwise. Latency uses the same model.
func (m *Matrix) NodeRTT(a, b Node) time.Duration {
	switch {
	case a.Addr == b.Addr:
		return 0
	case a.Site == b.Site:
		return IntraSiteRTT(a.Key, b.Key)
	default:
		return m.RTT(a.Site, b.Site)
	}
}

// Latency returns a one-way delay function for datagrams between the given
// nodes, of the type an in-memory network's latency hook expects:
// NodeRTT/2 (rounded down to the nanosecond) between known addresses, and
// 0 from a node to itself.
//
// A datagram with an address that is not among nodes (a typo, a node added
// later, a spoofed source) gets half the matrix's median site-pair RTT:
// a typical wide-area delay, so stray traffic is neither free nor
// pathological. For a one-site matrix that default is IntraSiteMaxRTT/2.
//
// The address-to-node map and per-node data are built once here, so the
// returned function costs two map look-ups per call. It does not retain or
// read nodes after Latency returns, and is safe for concurrent use. Latency
// panics if two nodes share an address or a node's site is out of range.
func Latency(m *Matrix, nodes []Node) func(from, to netip.AddrPort) time.Duration {
	index := make(map[netip.AddrPort]int32, len(nodes))
	site := make([]int32, len(nodes))
	key := make([]uint64, len(nodes))
	for i, nd := range nodes {
		if _, dup := index[nd.Addr]; dup {
			panic(fmt.Sprintf("topology: Latency: duplicate node address %v", nd.Addr))
		}
		if nd.Site < 0 || nd.Site >= m.n {
			panic(fmt.Sprintf("topology: Latency: node %v at site %d, matrix has %d sites", nd.Addr, nd.Site, m.n))
		}
		index[nd.Addr] = int32(i)
		site[i] = int32(nd.Site)
		key[i] = nd.Key
	}
	unknown := IntraSiteMaxRTT / 2
	if m.n >= 2 {
		unknown = m.medianRTT() / 2
	}
	n, rtt := m.n, m.rtt
	return func(from, to netip.AddrPort) time.Duration {
		i, ok1 := index[from]
		j, ok2 := index[to]
		switch {
		case !ok1 || !ok2:
			return unknown
		case i == j:
			return 0
		case site[i] == site[j]:
			return IntraSiteRTT(key[i], key[j]) / 2
		default:
			return rtt[int(site[i])*n+int(site[j])] / 2
		}
	}
}

// medianRTT returns the median pair RTT without computing the rest of
// Stats.
func (m *Matrix) medianRTT() time.Duration {
	pairs := make([]time.Duration, 0, m.n*(m.n-1)/2)
	for a := range m.n {
		pairs = append(pairs, m.rtt[a*m.n+a+1:(a+1)*m.n]...)
	}
	slices.Sort(pairs)
	return quantile(pairs, 0.5)
}
