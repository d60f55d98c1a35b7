package sim

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Zipf draws indices 0..n-1 with probability ∝ 1/(k+1)^s: the popularity
// of web objects, for the experiments' workloads beside the paper's.
// Unlike math/rand's Zipf it takes any s ≥ 0 (web popularity is usually
// put at s below 1).
type Zipf struct{ cdf []float64 }

// NewZipf returns the distribution over n ≥ 1 indices with exponent s.
func NewZipf(n int, s float64) *Zipf {
	z := &Zipf{cdf: make([]float64, n)}
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), s)
		z.cdf[k] = sum
	}
	for k := range z.cdf {
		z.cdf[k] /= sum
	}
	return z
}

// Draw returns an index.
func (z *Zipf) Draw(rng *rand.Rand) int {
	return min(sort.SearchFloat64s(z.cdf, rng.Float64()), len(z.cdf)-1)
}

// Share is index k's probability.
func (z *Zipf) Share(k int) float64 {
	if k == 0 {
		return z.cdf[0]
	}
	return z.cdf[k] - z.cdf[k-1]
}

// Len is the number of indices.
func (z *Zipf) Len() int { return len(z.cdf) }
