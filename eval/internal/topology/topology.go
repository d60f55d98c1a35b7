// Package topology provides a wide-area round-trip-time model for
// simulations of Coral.
//
// Coral's behaviour depends on the shape of the network it runs on: its
// clusters are defined by RTT thresholds (20 ms and 60 ms in the paper's
// three-level hierarchy), so a simulation with uniform or random latencies
// would exercise none of the locality machinery. This package supplies a
// site-to-site RTT [Matrix] that is either measured (the WonderProxy pings of
// July 2020, loaded with [LoadWonderProxy]) or generated ([Synthetic]) with
// comparable structure, then places simulated nodes on those sites
// ([Matrix.Place]) and turns the result into a per-datagram one-way delay
// function ([Latency]) for an in-memory network.
//
// The measured data set has no licence, so it is never part of the
// repository: $CORAL_RTT_DATA names its directory ([DataDir]; unset by
// default). Everything here, including the tests, works without it by
// falling back to the synthetic world ([Load]).
package topology

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Site is a location hosting simulated nodes: a WonderProxy server, or one
// generated point of the synthetic world.
type Site struct {
	// Index is the site's position in Matrix.Sites and the index to pass to
	// Matrix.RTT.
	Index int
	// ID is the server id in the source data set; for synthetic sites it
	// equals Index.
	ID int
	// Name is a short identifier without spaces ("SaoPaulo", or
	// "uk-ie/c2/s1", region/city/site, for a synthetic one).
	Name string
	// Region is the state or province for measured sites, and the
	// generating region (e.g. "us-east") for synthetic ones.
	Region string
	// Country is the country for measured sites; synthetic sites carry the
	// region's human-readable name instead, since they belong to no country.
	Country string
	// Continent is a coarse area name. For the WonderProxy data it is
	// derived from the data set's own continent codes, which put Asia and
	// Europe together ("Europe/Asia").
	Continent string
	// Lat and Lon are the coordinates in degrees.
	Lat, Lon float64
}

// Matrix is a symmetric site-to-site RTT matrix with a zero diagonal and
// strictly positive RTTs between distinct sites. It is immutable once built
// and safe for concurrent use.
type Matrix struct {
	// Sites lists the sites; Sites[i].Index == i.
	Sites []Site
	// Source names the origin: SourceWonderProxy or SourceSynthetic.
	Source string
	// Model is the RTT-versus-distance line: for measured data, the
	// least-squares fit over the measured pairs (used to fill the missing
	// ones); for synthetic data, the line the RTTs were generated from
	// (before per-site access delays and per-pair detours).
	Model DistanceModel
	// Filled counts the unordered site pairs whose RTT was not measured and
	// was predicted by Model instead. Always 0 for synthetic matrices.
	Filled int

	n   int
	rtt []time.Duration // n*n, row-major
}

// Values of Matrix.Source.
const (
	SourceWonderProxy = "wonderproxy-2020-07"
	SourceSynthetic   = "synthetic"
)

// DistanceModel is a straight line RTT = Intercept + Slope·distance. Between
// real Internet hosts RTT grows roughly linearly with great-circle distance
// (light in fibre plus path stretch), with a constant part from access
// links, routing detours and queueing; the line is the simplest model that
// captures both and is what fills unmeasured pairs.
type DistanceModel struct {
	// InterceptMs is the RTT predicted at zero distance, in milliseconds.
	InterceptMs float64
	// SlopeMsPerKm is the RTT added per kilometre of great-circle distance,
	// in milliseconds. 0.01 ms/km would be light in fibre along the great
	// circle both ways; real paths are longer.
	SlopeMsPerKm float64
	// Pairs is the number of site pairs the line was fitted to (0 for a
	// line chosen by hand).
	Pairs int
	// R is the Pearson correlation between distance and RTT over those
	// pairs (0 when not fitted).
	R float64
}

// Predict returns the RTT the line gives for a great-circle distance in
// kilometres, never less than one microsecond so that filled pairs stay
// strictly positive even under a pathological fit.
func (d DistanceModel) Predict(km float64) time.Duration {
	return max(msToDuration(d.InterceptMs+d.SlopeMsPerKm*km), time.Microsecond)
}

// String formats the model for experiment logs.
func (d DistanceModel) String() string {
	s := fmt.Sprintf("RTT = %.1f ms + %.4f ms/km × distance", d.InterceptMs, d.SlopeMsPerKm)
	if d.Pairs > 0 {
		s += fmt.Sprintf(" (fit over %d pairs, r = %.2f)", d.Pairs, d.R)
	}
	return s
}

// newMatrix allocates an n-site matrix with zero RTTs.
func newMatrix(source string, sites []Site) *Matrix {
	n := len(sites)
	for i := range sites {
		sites[i].Index = i
	}
	return &Matrix{Sites: sites, Source: source, n: n, rtt: make([]time.Duration, n*n)}
}

// set stores a symmetric entry.
func (m *Matrix) set(a, b int, d time.Duration) {
	m.rtt[a*m.n+b] = d
	m.rtt[b*m.n+a] = d
}

// Len returns the number of sites.
func (m *Matrix) Len() int { return m.n }

// RTT returns the round-trip time between sites a and b (0 when a == b). It
// panics if either index is out of range.
func (m *Matrix) RTT(a, b int) time.Duration {
	if uint(a) >= uint(m.n) || uint(b) >= uint(m.n) {
		panic(fmt.Sprintf("topology: site index (%d, %d) out of range [0, %d)", a, b, m.n))
	}
	return m.rtt[a*m.n+b]
}

// Distance returns the great-circle distance between sites a and b in
// kilometres.
func (m *Matrix) Distance(a, b int) float64 {
	sa, sb := m.Sites[a], m.Sites[b]
	return greatCircleKm(sa.Lat, sa.Lon, sb.Lat, sb.Lon)
}

// Nearest returns the site closest to a by RTT other than a itself, and
// that RTT; (-1, 0) for a matrix of fewer than two sites.
func (m *Matrix) Nearest(a int) (int, time.Duration) {
	best, bestRTT := -1, time.Duration(0)
	for b := range m.n {
		if b != a && (best < 0 || m.rtt[a*m.n+b] < bestRTT) {
			best, bestRTT = b, m.rtt[a*m.n+b]
		}
	}
	return best, bestRTT
}

// MatrixStats summarises a matrix with the figures that matter for Coral's
// clustering: how RTTs between site pairs are distributed, and how many
// sites have a neighbour close enough to share a level-2 (< 20 ms) or
// level-1 (< 60 ms) cluster with.
type MatrixStats struct {
	Sites int // number of sites
	Pairs int // unordered pairs of distinct sites

	// Quantiles of the pair RTTs (nearest-rank method).
	P10, Median, P90 time.Duration

	// Shares of pairs with an RTT strictly below 20 ms and 60 ms.
	PairsUnder20ms, PairsUnder60ms float64

	// Shares of sites whose nearest other site is strictly within 20 ms
	// and 60 ms.
	SitesNeighbour20ms, SitesNeighbour60ms float64
}

// Stats computes the summary in O(n² log n) time; call it once per matrix,
// not per datagram.
func (m *Matrix) Stats() MatrixStats {
	st := MatrixStats{Sites: m.n}
	if m.n < 2 {
		return st
	}
	pairs := make([]time.Duration, 0, m.n*(m.n-1)/2)
	var near20, near60 int
	for a := range m.n {
		for b := a + 1; b < m.n; b++ {
			pairs = append(pairs, m.rtt[a*m.n+b])
		}
		_, nearest := m.Nearest(a)
		if nearest < 20*time.Millisecond {
			near20++
		}
		if nearest < 60*time.Millisecond {
			near60++
		}
	}
	slices.Sort(pairs)
	st.Pairs = len(pairs)
	st.P10 = quantile(pairs, 0.10)
	st.Median = quantile(pairs, 0.50)
	st.P90 = quantile(pairs, 0.90)
	under := func(limit time.Duration) float64 {
		i, _ := slices.BinarySearch(pairs, limit) // first index >= limit
		return float64(i) / float64(len(pairs))
	}
	st.PairsUnder20ms = under(20 * time.Millisecond)
	st.PairsUnder60ms = under(60 * time.Millisecond)
	st.SitesNeighbour20ms = float64(near20) / float64(m.n)
	st.SitesNeighbour60ms = float64(near60) / float64(m.n)
	return st
}

// String formats the summary on one line for experiment logs.
func (s MatrixStats) String() string {
	return fmt.Sprintf("%d sites, %d pairs: RTT p10 %v, median %v, p90 %v; pairs <20ms %.1f%%, <60ms %.1f%%; sites with a neighbour <20ms %.0f%%, <60ms %.0f%%",
		s.Sites, s.Pairs,
		s.P10.Round(100*time.Microsecond), s.Median.Round(100*time.Microsecond), s.P90.Round(100*time.Microsecond),
		100*s.PairsUnder20ms, 100*s.PairsUnder60ms,
		100*s.SitesNeighbour20ms, 100*s.SitesNeighbour60ms)
}

// quantile returns the nearest-rank p-quantile of sorted, non-empty values:
// the smallest value with at least a fraction p of the values at or below it.
func quantile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// earthRadiusKm is the mean Earth radius (IUGG).
const earthRadiusKm = 6371.0088

// greatCircleKm returns the haversine distance between two points given in
// degrees. The haversine form is used because it stays accurate for the
// very short distances between sites of one metropolitan area.
func greatCircleKm(lat1, lon1, lat2, lon2 float64) float64 {
	const rad = math.Pi / 180
	φ1, φ2 := lat1*rad, lat2*rad
	dφ, dλ := (lat2-lat1)*rad, (lon2-lon1)*rad
	h := math.Sin(dφ/2)*math.Sin(dφ/2) + math.Cos(φ1)*math.Cos(φ2)*math.Sin(dλ/2)*math.Sin(dλ/2)
	return 2 * earthRadiusKm * math.Asin(math.Sqrt(min(h, 1)))
}

// msToDuration converts milliseconds to a Duration, rounded to the
// nanosecond.
func msToDuration(ms float64) time.Duration {
	return time.Duration(math.Round(ms * float64(time.Millisecond)))
}
