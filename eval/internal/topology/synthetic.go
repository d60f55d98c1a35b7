package topology

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// synthRegion is one region of the synthetic world: a centre around which
// cities are scattered, with a share of the sites.
//
// The table is hand-made from general geography (where the big hosting
// markets are), not derived from any data set. Weights give roughly the mix
// of a commercial server fleet: a third of the sites in North America, two
// fifths in Europe, the rest spread over Asia, South America, Oceania and
// Africa. The exit delay models regions whose traffic to the rest of the
// world takes long detours (African and South American routes through
// Europe or the USA, Chinese routes through a few gateways); it is paid
// only by pairs that leave the region, so it lengthens long paths without
// destroying local clusters.
type synthRegion struct {
	code, name, continent string
	lat, lon              float64 // centre, degrees
	spreadKm              float64 // mean distance of a city from the centre
	weight                float64 // relative share of sites
	exitMs                float64 // extra RTT for pairs leaving the region
}

var synthRegions = []synthRegion{
	{"us-east", "US East", "North America", 40.0, -76.5, 460, 9, 0},
	{"us-south", "US South", "North America", 32.0, -88.0, 780, 5, 0},
	{"us-central", "US Central", "North America", 41.0, -92.0, 720, 4, 0},
	{"us-mountain", "US Mountain", "North America", 39.5, -108.0, 650, 2, 0},
	{"us-west", "US West", "North America", 38.0, -121.0, 650, 6, 0},
	{"ca-east", "Canada East", "North America", 45.5, -74.0, 460, 4, 0},
	{"ca-west", "Canada West", "North America", 50.5, -117.0, 580, 2, 0},
	{"mx-ca", "Mexico and Central America", "North America", 18.0, -94.0, 910, 2, 8},
	{"br", "Brazil", "South America", -21.0, -46.0, 780, 2, 10},
	{"sa-north", "Andean north", "South America", 3.0, -75.0, 1170, 1.5, 12},
	{"sa-south", "Southern Cone", "South America", -34.0, -63.0, 910, 1.5, 12},
	{"uk-ie", "British Isles", "Europe", 52.5, -2.5, 320, 7, 0},
	{"benelux", "Benelux", "Europe", 51.5, 4.8, 160, 5, 0},
	{"fr", "France", "Europe", 47.0, 2.5, 390, 3, 0},
	{"de-central", "Central Europe", "Europe", 49.5, 10.5, 460, 8, 0},
	{"iberia", "Iberia", "Europe", 40.0, -4.0, 460, 2.5, 0},
	{"it", "Italy", "Europe", 43.0, 12.0, 460, 3, 0},
	{"nordic", "Nordics and Baltics", "Europe", 59.0, 18.0, 650, 3.5, 0},
	{"eu-east", "Eastern Europe", "Europe", 49.5, 22.0, 580, 4, 0},
	{"balkans", "Balkans and Turkey", "Europe", 42.0, 24.0, 650, 4, 2},
	{"ru", "Russia", "Europe", 56.0, 40.0, 910, 2, 5},
	{"me", "Middle East", "Asia", 29.0, 43.0, 1170, 2.5, 8},
	{"in", "South Asia", "Asia", 21.0, 78.0, 1040, 3, 15},
	{"sea", "Southeast Asia", "Asia", 6.0, 106.0, 1170, 3, 6},
	{"cn", "China", "Asia", 31.0, 115.0, 910, 2, 25},
	{"jp-kr", "Japan and Korea", "Asia", 36.0, 135.0, 650, 3, 0},
	{"au", "Australia", "Oceania", -33.0, 147.0, 780, 3, 4},
	{"nz", "New Zealand", "Oceania", -40.0, 174.5, 390, 1, 6},
	{"af-north", "North Africa", "Africa", 32.0, 3.0, 1300, 1.5, 12},
	{"af-west", "West Africa", "Africa", 7.0, -1.0, 780, 1, 25},
	{"af-east", "East Africa", "Africa", -1.0, 36.0, 910, 1, 20},
	{"af-south", "Southern Africa", "Africa", -28.0, 27.0, 650, 1.5, 12},
}

// Parameters of the synthetic world, tuned by hand so that Synthetic(250, ·)
// lands near the WonderProxy figures (see the package tests).
//
// The distance line is steeper and starts much lower than the one fitted to
// the WonderProxy data (about 25 ms + 0.017 ms/km): that fit absorbs routing
// detours and badly peered sites into its intercept, whereas here they are
// explicit terms, so that short paths can stay short and local clusters
// exist.
const (
	synthInterceptMs = 1.0
	synthSlopeMsKm   = 0.0143 // ≈1.4× light in fibre along the great circle

	// Per-pair noise: path stretch (multiplies the distance term by 1+s,
	// s exponential with this mean) and, for half of the pairs, an additive
	// detour (exponential with this mean). Real RTTs scatter widely around
	// the distance line (median residual ≈23 ms in the WonderProxy data).
	synthStretchMean  = 0.25
	synthDetourProb   = 0.5
	synthDetourMeanMs = 10.0

	// Per-site access delay, paid on every path of the site: uniform in
	// [min, max]; a site is badly peered with probability
	// synthPoorProb + exit delay of its region / synthPoorDiv, and then
	// pays an extra uniform delay in [poorMin, poorMax]. Badly peered sites
	// and isolated cities are why about a fifth of the real sites have no
	// other site within 20 ms (Nairobi, Lagos and Lahore, for instance, are
	// 70–105 ms from their nearest measured neighbour).
	synthAccessMinMs = 0.1
	synthAccessMaxMs = 1.5
	synthPoorProb    = 0.06
	synthPoorDiv     = 60.0
	synthPoorMinMs   = 5.0
	synthPoorMaxMs   = 30.0

	// City formation: a region's next site joins an existing city with
	// this probability (picking cities in proportion to their size), else
	// founds one at an exponentially distributed distance (mean spreadKm,
	// capped at 3×) from the region's centre. Sites lie within
	// synthCityRadiusKm of their city's centre.
	synthJoinCity     = 0.35
	synthCityRadiusKm = 25.0
)

// Synthetic builds a deterministic clustered world of n sites, for
// simulations when the measured data set is not available and for
// experiments that need more or fewer sites than it has.
//
// Structure: continents hold regions (a fixed table of about thirty,
// weighted like a commercial server fleet); each region gets its share of
// the n sites (largest-remainder apportionment, so the mix does not depend
// on the seed); within a region, sites cluster into cities by a
// preferential "join a city or found one" process.
//
// RTT between distinct sites a and b at great-circle distance d:
//
//	1 ms + 0.0143 ms/km · d · (1 + stretch) + detour
//	     + access(a) + access(b) [+ exit(a) + exit(b) if in different regions]
//
// with per-pair random stretch and detour, per-site random access delays
// (a minority of sites badly peered), and per-region exit delays; see the
// constants in synthetic.go for the distributions. The result is symmetric
// with a zero diagonal. With 250 sites its statistics are close to the
// WonderProxy data's: median pair RTT ≈140 ms, ≈5 % of pairs under 20 ms,
// ≈80–90 % of sites with a neighbour within 20 ms. The Model field holds
// the line above without the noise terms.
//
// The same (n, seed) always gives the same matrix; different n give
// unrelated worlds. n must be at least 1.
func Synthetic(n int, seed uint64) *Matrix {
	if n < 1 {
		panic(fmt.Sprintf("topology: Synthetic(%d): need at least one site", n))
	}
	rng := rand.New(rand.NewPCG(seed, 0x73796e7468657469)) // "syntheti"

	counts := apportion(n)
	sites := make([]Site, 0, n)
	region := make([]int, 0, n) // region index of each site
	type city struct {
		lat, lon float64
		sites    int
	}
	for ri, r := range synthRegions {
		var cities []city
		for k := range counts[ri] {
			ci := -1
			if len(cities) > 0 && rng.Float64() < synthJoinCity {
				// Preferential attachment: big metros attract more sites.
				x := rng.IntN(k)
				for ci = 0; x >= cities[ci].sites; ci++ {
					x -= cities[ci].sites
				}
			} else {
				d := math.Min(rng.ExpFloat64()*r.spreadKm, 3*r.spreadKm)
				lat, lon := destination(r.lat, r.lon, rng.Float64()*360, d)
				cities = append(cities, city{lat: lat, lon: lon})
				ci = len(cities) - 1
			}
			cities[ci].sites++
			lat, lon := destination(cities[ci].lat, cities[ci].lon, rng.Float64()*360, synthCityRadiusKm*math.Sqrt(rng.Float64()))
			sites = append(sites, Site{
				Name:      fmt.Sprintf("%s/c%d/s%d", r.code, ci+1, cities[ci].sites),
				Region:    r.code,
				Country:   r.name,
				Continent: r.continent,
				Lat:       lat,
				Lon:       lon,
			})
			region = append(region, ri)
		}
	}

	m := newMatrix(SourceSynthetic, sites)
	for i := range m.Sites {
		m.Sites[i].ID = i
	}
	m.Model = DistanceModel{InterceptMs: synthInterceptMs, SlopeMsPerKm: synthSlopeMsKm}
	access := make([]float64, n)
	for i := range access {
		access[i] = synthAccessMinMs + (synthAccessMaxMs-synthAccessMinMs)*rng.Float64()
		if rng.Float64() < synthPoorProb+synthRegions[region[i]].exitMs/synthPoorDiv {
			access[i] += synthPoorMinMs + (synthPoorMaxMs-synthPoorMinMs)*rng.Float64()
		}
	}
	for a := range n {
		for b := a + 1; b < n; b++ {
			ms := synthInterceptMs + synthSlopeMsKm*m.Distance(a, b)*(1+synthStretchMean*rng.ExpFloat64()) +
				access[a] + access[b]
			if rng.Float64() < synthDetourProb {
				ms += synthDetourMeanMs * rng.ExpFloat64()
			}
			if region[a] != region[b] {
				ms += synthRegions[region[a]].exitMs + synthRegions[region[b]].exitMs
			}
			m.set(a, b, msToDuration(ms))
		}
	}
	return m
}

// apportion splits n sites over synthRegions in proportion to their weights
// by the largest-remainder method (ties to the earlier region), so every
// region gets its fair share rounded, independent of any seed.
func apportion(n int) []int {
	var total float64
	for _, r := range synthRegions {
		total += r.weight
	}
	counts := make([]int, len(synthRegions))
	rem := make([]float64, len(synthRegions))
	left := n
	for i, r := range synthRegions {
		q := float64(n) * r.weight / total
		counts[i] = int(q)
		rem[i] = q - float64(counts[i])
		left -= counts[i]
	}
	for ; left > 0; left-- {
		best := 0
		for i := range rem {
			if rem[i] > rem[best] {
				best = i
			}
		}
		counts[best]++
		rem[best] = -1
	}
	return counts
}

// destination returns the point reached from (lat, lon) by travelling
// distKm along the great circle with the given initial bearing (degrees
// clockwise from north).
func destination(lat, lon, bearingDeg, distKm float64) (float64, float64) {
	const rad = math.Pi / 180
	φ1, λ1, θ := lat*rad, lon*rad, bearingDeg*rad
	δ := distKm / earthRadiusKm
	φ2 := math.Asin(math.Sin(φ1)*math.Cos(δ) + math.Cos(φ1)*math.Sin(δ)*math.Cos(θ))
	λ2 := λ1 + math.Atan2(math.Sin(θ)*math.Sin(δ)*math.Cos(φ1), math.Cos(δ)-math.Sin(φ1)*math.Sin(φ2))
	lon2 := math.Mod(λ2/rad+540, 360) - 180 // normalise to [-180, 180)
	return φ2 / rad, lon2
}
