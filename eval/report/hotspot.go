package main

import (
	"fmt"
	"math"
	"strings"
)

// Figure 8: eval/hotspot's hotspot.json (the paper's workload on every
// topology and seed, the plain DHT, the sweep of sizes) and
// hotspot-zipf.json.

type hsRun struct {
	Mode           string       `json:"mode"`
	N              int          `json:"n"`
	Predict        int          `json:"predicted_bound"`
	Pairs          uint64       `json:"put_get_pairs"`
	Minutes        []struct{}   `json:"minutes"`
	Steady         []float64    `json:"steady_put_rpcs_per_min_by_distance"`
	ClosestByKey   []float64    `json:"closest_steady_by_key"`
	MaxSteady      float64      `json:"max_steady_per_min"`
	BusiestByKey   []float64    `json:"busiest_steady_by_key"`
	BusiestRank    []int        `json:"busiest_rank_by_key"`
	TopByKey       [][]rankLoad `json:"top_nodes_by_key"`
	OverBoundByKey []int        `json:"nodes_over_bound_by_key"`
	Silent         float64      `json:"nodes_receiving_no_put_rpcs"`
}

type rankLoad struct {
	Rank int     `json:"rank"`
	Load float64 `json:"put_rpcs_per_min"`
}

type hsRepeat struct {
	Topology string `json:"topology"`
	Seed     uint64 `json:"seed"`
	Run      *hsRun `json:"run"`
}

type hsReport struct {
	Workload string             `json:"workload"`
	PerSite  int                `json:"nodes_per_site"`
	Rate     float64            `json:"pairs_per_second_per_node_and_key"`
	Keys     int                `json:"hot_keys"`
	TTL      string             `json:"ttl"`
	Beta     int                `json:"beta"`
	Coral    *hsRun             `json:"coral"`
	Sweep    []*hsRun           `json:"sweep"`
	Grow     float64            `json:"sweep_busiest_largest_over_smallest"`
	GrowC    float64            `json:"sweep_largest_over_smallest"`
	LogGrow  float64            `json:"sweep_log2_ratio"`
	Repeats  []*hsRepeat        `json:"repeats"`
	Plains   []*hsRepeat        `json:"plain_runs"`
	PlainBus map[string]float64 `json:"plain_over_coral_busiest"`
	Busiest  *struct {
		Keys        int     `json:"keys"`
		Within      int     `json:"within_bound"`
		Bound       int     `json:"bound"`
		Min         float64 `json:"min"`
		Median      float64 `json:"median"`
		Max         float64 `json:"max"`
		MaxOverBnd  float64 `json:"max_over_bound"`
		OverNearest int     `json:"over_bound_at_ranks_1_to_8"`
		ClosestMax  float64 `json:"closest_max"`
	} `json:"busiest"`
	Zipf []*struct {
		Topology string  `json:"topology"`
		Seed     uint64  `json:"seed"`
		N        int     `json:"n"`
		Predict  int     `json:"predicted_bound"`
		Keys     int     `json:"keys"`
		S        float64 `json:"zipf_s"`
		Putters  int     `json:"putters_per_key"`
		Rate     float64 `json:"operations_per_second_per_node"`
		Puts     uint64  `json:"puts"`
		Gets     uint64  `json:"gets"`
		GetFails uint64  `json:"get_failures"`
		NodeLoad struct {
			P50, P90, P99, Max, Mean float64
		} `json:"node_requests_per_min"`
		MaxPutPair  float64 `json:"max_put_rpcs_per_min_node_and_key"`
		MaxGetPair  float64 `json:"max_get_rpcs_per_min_node_and_key"`
		MaxGetKey   int     `json:"max_get_key_rank"`
		PairsOver   int     `json:"node_key_pairs_over_bound_puts"`
		GetPairsOvr int     `json:"node_key_pairs_over_bound_gets"`
		Hottest     []struct {
			Rank        int     `json:"popularity_rank"`
			Share       float64 `json:"share_of_operations"`
			ClosestPuts float64 `json:"closest_put_rpcs_per_min"`
			ClosestGets float64 `json:"closest_get_rpcs_per_min"`
			BusiestPuts float64 `json:"busiest_put_rpcs_per_min"`
			BusiestGets float64 `json:"busiest_get_rpcs_per_min"`
			BusiestRank int     `json:"busiest_distance_rank"`
			GetsPerMin  float64 `json:"gets_issued_per_min"`
		} `json:"hottest_keys"`
	} `json:"zipf"`
}

func (c *results) hotspot(file string) (*hsReport, error) {
	var r hsReport
	if err := c.load(file, &r); err != nil {
		return nil, err
	}
	if r.Workload == "zipf" {
		if len(r.Zipf) == 0 {
			return nil, fmt.Errorf("%s: no run of the Zipf workload", file)
		}
		return &r, nil
	}
	if r.Coral == nil || len(r.Repeats) == 0 {
		return nil, fmt.Errorf("%s: no run of the paper's workload with its repeats (written by an older eval/hotspot?)", file)
	}
	return &r, nil
}

func loads(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = num(x, 0)
	}
	return strings.Join(parts, ", ")
}

func busiestCells(r *hsRun) string {
	parts := make([]string, len(r.BusiestByKey))
	for k, v := range r.BusiestByKey {
		s := num(v, 0)
		if v > float64(r.Predict) {
			s = "**" + s + "**"
		}
		parts[k] = fmt.Sprintf("%s (%d)", s, r.BusiestRank[k])
	}
	return strings.Join(parts, ", ")
}

func ints(v []int) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = count(x)
	}
	return strings.Join(parts, ", ")
}

func init() {
	// hotspot.seeds: closest and busiest node per hot key, every
	// topology and seed.
	register("hotspot.seeds", func(c *results, args []string) (string, error) {
		r, err := c.hotspot("hotspot.json")
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, rp := range r.Repeats {
			rows = append(rows, []string{rp.Topology, fmt.Sprint(rp.Seed), loads(rp.Run.ClosestByKey), busiestCells(rp.Run), ints(rp.Run.OverBoundByKey)})
		}
		b := r.Repeats[0].Run.Predict
		return table([]string{"topology", "seed", "closest node, per hot key",
			fmt.Sprintf("busiest node, per hot key (its distance rank; over %d in bold)", b), "nodes over the bound, per hot key"}, rows), nil
	})

	// hotspot.busiest FIELD: the busiest nodes over every key, seed and
	// topology.
	register("hotspot.busiest", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "keys|within|over|bound|min|median|max|max-over-bound|over-nearest|closest-max|closest-verdict|range|ratio-range"); err != nil {
			return "", err
		}
		r, err := c.hotspot("hotspot.json")
		if err != nil {
			return "", err
		}
		b := r.Busiest
		if b == nil {
			return "", fmt.Errorf("hotspot.json has no busiest summary")
		}
		switch args[0] {
		case "keys":
			return count(b.Keys), nil
		case "within":
			return count(b.Within), nil
		case "over":
			return count(b.Keys - b.Within), nil
		case "bound":
			return count(b.Bound), nil
		case "min":
			return num(b.Min, 0), nil
		case "median":
			return num(b.Median, 0), nil
		case "max":
			return num(b.Max, 0), nil
		case "max-over-bound":
			return times(b.MaxOverBnd, 2), nil
		case "over-nearest":
			return count(b.OverNearest), nil
		case "closest-max":
			return num(b.ClosestMax, 0), nil
		case "closest-verdict":
			if b.ClosestMax <= float64(b.Bound) {
				return "within the bound on every key of every run", nil
			}
			return "over the bound on some keys", nil
		case "range":
			return num(b.Min, 0) + "–" + num(b.Max, 0), nil
		case "ratio-range":
			return num(b.Min/float64(b.Bound), 2) + "–" + num(b.MaxOverBnd, 2) + "×", nil
		}
		return "", fmt.Errorf("field %q unknown", args[0])
	})

	// hotspot.ranks: the load by distance rank, over every key, seed and
	// topology: who takes the puts.
	register("hotspot.ranks", func(c *results, args []string) (string, error) {
		r, err := c.hotspot("hotspot.json")
		if err != nil {
			return "", err
		}
		bands := []struct {
			name   string
			lo, hi int
		}{{"the closest (rank 0)", 0, 0}, {"ranks 1–8", 1, 8}, {"ranks 9–32", 9, 32}, {"ranks 33–128", 33, 128}, {"the rest", 129, math.MaxInt}}
		var rows [][]string
		for _, bd := range bands {
			sum, n, peak, busiest := 0.0, 0, 0.0, 0
			for _, rp := range r.Repeats {
				for rank, v := range rp.Run.Steady {
					if rank >= bd.lo && rank <= bd.hi {
						sum += v
						n++
					}
				}
				if bd.lo == 0 {
					for _, v := range rp.Run.ClosestByKey {
						peak = math.Max(peak, v)
					}
				}
				for k, top := range rp.Run.TopByKey {
					for _, rl := range top {
						if rl.Rank >= bd.lo && rl.Rank <= bd.hi {
							peak = math.Max(peak, rl.Load)
						}
					}
					if rk := rp.Run.BusiestRank[k]; rk >= bd.lo && rk <= bd.hi {
						busiest++
					}
				}
			}
			if n == 0 {
				continue
			}
			most := num(peak, 0)
			if peak == 0 && bd.lo > 0 {
				most = "–" // none among any key's busiest ten
			}
			rows = append(rows, []string{bd.name, num(sum/float64(n), 0), most, count(busiest)})
		}
		return table([]string{"nodes, by distance to the key", "mean put RPCs/min (mean over the keys)", "most any of them took for a key (among each key's busiest ten)", "keys whose busiest node is here"}, rows), nil
	})

	// hotspot.plain: the plain DHT against Coral, per topology.
	register("hotspot.plain", func(c *results, args []string) (string, error) {
		r, err := c.hotspot("hotspot.json")
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, pl := range r.Plains {
			var coral *hsRun
			for _, rp := range r.Repeats {
				if rp.Topology == pl.Topology && rp.Seed == pl.Seed {
					coral = rp.Run
				}
			}
			if coral == nil {
				return "", fmt.Errorf("no Coral run for the plain run on %s, seed %d", pl.Topology, pl.Seed)
			}
			cc := 0.0
			for _, v := range coral.ClosestByKey {
				cc = math.Max(cc, v)
			}
			rows = append(rows, []string{pl.Topology, fmt.Sprint(pl.Seed), num(pl.Run.MaxSteady, 0), num(coral.MaxSteady, 0), num(cc, 0),
				times(pl.Run.MaxSteady/math.Max(coral.MaxSteady, 1), 0), times(pl.Run.MaxSteady/math.Max(cc, 1), 0)})
		}
		return table([]string{"topology", "seed", "plain DHT, busiest node (put RPCs/min)", "Coral, busiest node", "Coral, heaviest closest node",
			"plain over Coral's busiest", "plain over Coral's closest"}, rows), nil
	})

	// hotspot.sweep: the closest and busiest node against n.
	register("hotspot.sweep", func(c *results, args []string) (string, error) {
		r, err := c.hotspot("hotspot.json")
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, s := range r.Sweep {
			rows = append(rows, []string{count(s.N), loads(s.ClosestByKey), busiestCells(s), count(s.Predict)})
		}
		return table([]string{"n", "closest node, per key", "busiest node, per key (its distance rank)", "β·⌈log₂ n⌉"}, rows), nil
	})

	// hotspot.growth busiest|closest|log2|first|last: the sweep's growth.
	register("hotspot.growth", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "busiest|closest|log2|first|last|busiest-first|busiest-last|topology|max-over-bound"); err != nil {
			return "", err
		}
		r, err := c.hotspot("hotspot.json")
		if err != nil {
			return "", err
		}
		if len(r.Sweep) == 0 {
			return "", fmt.Errorf("hotspot.json has no sweep")
		}
		first, last := r.Sweep[0], r.Sweep[len(r.Sweep)-1]
		switch args[0] {
		case "busiest":
			return num(r.Grow, 2), nil
		case "closest":
			return num(r.GrowC, 2), nil
		case "log2":
			return num(r.LogGrow, 2), nil
		case "first":
			return count(first.N), nil
		case "last":
			return count(last.N), nil
		case "busiest-first":
			return num(first.MaxSteady, 0), nil
		case "busiest-last":
			return num(last.MaxSteady, 0), nil
		case "topology":
			return r.Repeats[0].Topology, nil
		case "max-over-bound":
			m := 0.0
			for _, s := range r.Sweep {
				m = math.Max(m, s.MaxSteady/float64(s.Predict))
			}
			return times(m, 2), nil
		}
		return "", fmt.Errorf("field %q unknown", args[0])
	})

	// hotspot.workload: the paper's workload in a sentence.
	register("hotspot.workload", func(c *results, args []string) (string, error) {
		r, err := c.hotspot("hotspot.json")
		if err != nil {
			return "", err
		}
		m := len(r.Coral.Minutes)
		return fmt.Sprintf("n = %d, %d nodes per site, a single level-0 cluster; every node issues back-to-back put/get pairs with random values on each of %d hot keys "+
			"(at most %s pairs a second per node and key, TTL %s) for %d virtual minutes, the first a warm-up; β = %d, so β·⌈log₂ n⌉ = %d",
			r.Coral.N, r.PerSite, r.Keys, num(r.Rate, 0), durString(r.TTL), m, r.Beta, r.Coral.Predict), nil
	})

	// hotspot.zipf: the Zipf workload's runs.
	register("hotspot.zipf", func(c *results, args []string) (string, error) {
		r, err := c.hotspot("hotspot-zipf.json")
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, z := range r.Zipf {
			h := z.Hottest[0]
			rows = append(rows, []string{z.Topology, count(z.N),
				num(z.NodeLoad.P50, 0) + " / " + num(z.NodeLoad.P99, 0) + " / " + num(z.NodeLoad.Max, 0),
				num(z.MaxPutPair, 0) + " (" + count(z.PairsOver) + ")",
				num(z.MaxGetPair, 0) + " (" + count(z.GetPairsOvr) + ")",
				pct(h.Share, 1) + ", " + num(h.GetsPerMin, 0),
				num(h.ClosestGets, 0) + " + " + num(h.ClosestPuts, 0)})
		}
		return table([]string{"topology", "n", "requests a node received a minute, all keys: p50 / p99 / max",
			"most put RPCs/min one node took for one key (pairs over the bound)", "most get RPCs/min one node took for one key (pairs over the bound)",
			"most popular key: share of operations, gets issued a minute", "its closest node: get + put RPCs/min"}, rows), nil
	})

	// hotspot.zipf-workload: the Zipf workload in a sentence.
	register("hotspot.zipf-workload", func(c *results, args []string) (string, error) {
		r, err := c.hotspot("hotspot-zipf.json")
		if err != nil {
			return "", err
		}
		if len(r.Zipf) == 0 {
			return "", fmt.Errorf("hotspot-zipf.json has no run")
		}
		z := r.Zipf[0]
		return fmt.Sprintf("n = %d, a single level-0 cluster; %s keys, key k drawn with probability ∝ 1/k^%s; each key put by %d random nodes "+
			"(every putter puts its keys once before the clock starts); every node issues %s operations a second: a drawn key's putter puts it again, "+
			"any other node gets it; the bound β·⌈log₂ n⌉ = %d is per key", z.N, count(z.Keys), num(z.S, 1), z.Putters, num(z.Rate, 0), z.Predict), nil
	})
}
