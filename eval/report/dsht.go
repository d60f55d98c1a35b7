package main

import (
	"fmt"
	"time"
)

// The DSHT's other experiments: eval/getlatency (Figure 6), eval/lookup
// and eval/clusters (Figure 7).

type glNet struct {
	Levels    int     `json:"levels"`
	Gets      int     `json:"gets"`
	Failed    int     `json:"failed"`
	P10       float64 `json:"latency_p10_ms"`
	P50       float64 `json:"latency_p50_ms"`
	P80       float64 `json:"latency_p80_ms"`
	P90       float64 `json:"latency_p90_ms"`
	P99       float64 `json:"latency_p99_ms"`
	RPCsP50   float64 `json:"rpcs_p50"`
	RPCsP90   float64 `json:"rpcs_p90"`
	Local     int     `json:"answered_locally"`
	RemoteP50 float64 `json:"remote_latency_p50_ms"`
	RemoteP80 float64 `json:"remote_latency_p80_ms"`
	ByLevel   []struct {
		Level   int     `json:"level"`
		Share   float64 `json:"share"`
		LatP50  float64 `json:"latency_p50_ms"`
		RPCsP50 float64 `json:"rpcs_p50"`
	} `json:"answered_by_level"`
	PutRPCsP50 float64 `json:"put_rpcs_p50"`
	Datagrams  uint64  `json:"datagrams_sent"`
}

type glReport struct {
	Workload    string  `json:"workload"`
	Topology    string  `json:"topology"`
	N           int     `json:"n"`
	PerSite     int     `json:"nodes_per_site"`
	Keys        int     `json:"keys"`
	PutFraction float64 `json:"put_fraction"`
	Putters     int     `json:"putters_per_key"`
	ZipfS       float64 `json:"zipf_s"`
	GetsPerNode int     `json:"gets_per_node"`
	Spread      string  `json:"get_spread"`
	Warmup      string  `json:"warmup"`
	Single      *glNet  `json:"single"`
	Multi       *glNet  `json:"multi"`
	SpeedupP50  float64 `json:"speedup_p50"`
	SpeedupP80  float64 `json:"speedup_p80"`
}

// getlatency files by workload and topology.
func glFile(workload, topology string) (string, error) {
	switch workload {
	case "paper":
		return "getlatency-" + topology + ".json", nil
	case "zipf":
		return "getlatency-zipf-" + topology + ".json", nil
	}
	return "", fmt.Errorf("workload %q: want paper or zipf", workload)
}

func (c *results) getlatency(workload, topology string) (*glReport, error) {
	f, err := glFile(workload, topology)
	if err != nil {
		return nil, err
	}
	var r glReport
	return &r, c.load(f, &r)
}

// ratioFloor keeps ratios of gets answered in no time finite, as the
// experiment does (0.1 ms).
const ratioFloor = 0.1

func speedup(a, b float64) string { return times(max(a, ratioFloor)/max(b, ratioFloor), 1) }

// levelShare is the share of a network's gets answered at level l, and
// their p50.
func (n *glNet) level(l int) (share, p50, rpcs float64) {
	for _, b := range n.ByLevel {
		if b.Level == l {
			return b.Share, b.LatP50, b.RPCsP50
		}
	}
	return 0, 0, 0
}

func init() {
	// getlatency.table WORKLOAD TOPOLOGY: single against multi-level gets.
	register("getlatency.table", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 2, "paper|zipf wonderproxy|synthetic"); err != nil {
			return "", err
		}
		r, err := c.getlatency(args[0], args[1])
		if err != nil {
			return "", err
		}
		s, m := r.Single, r.Multi
		row := func(name string, n *glNet) []string {
			return []string{name, ms(n.P10), ms(n.P50), ms(n.P80), ms(n.P90), ms(n.P99), num(n.RPCsP50, 0) + " / " + num(n.RPCsP90, 0),
				pct(float64(n.Local)/float64(max(n.Gets, 1)), 0), count(n.Failed)}
		}
		rows := [][]string{row("single level", s), row("three levels", m),
			{"speed-up", speedup(s.P10, m.P10), speedup(s.P50, m.P50), speedup(s.P80, m.P80), speedup(s.P90, m.P90), speedup(s.P99, m.P99), "", "", ""}}
		return table([]string{"gets (ms), " + r.Topology, "p10", "p50", "p80", "p90", "p99", "RPCs p50 / p90", "answered from the getter's own store", "failed"}, rows), nil
	})

	// getlatency.value WORKLOAD TOPOLOGY FIELD: one figure.
	register("getlatency.value", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 3, "paper|zipf TOPOLOGY FIELD"); err != nil {
			return "", err
		}
		r, err := c.getlatency(args[0], args[1])
		if err != nil {
			return "", err
		}
		s, m := r.Single, r.Multi
		l2, l2p50, l2rpc := m.level(2)
		l1, l1p50, _ := m.level(1)
		l0, l0p50, _ := m.level(0)
		switch args[2] {
		case "speedup-p50":
			return speedup(s.P50, m.P50), nil
		case "speedup-p80":
			return speedup(s.P80, m.P80), nil
		case "remote-speedup-p50":
			return speedup(s.RemoteP50, m.RemoteP50), nil
		case "remote-speedup-p80":
			return speedup(s.RemoteP80, m.RemoteP80), nil
		case "local-multi":
			return pct(float64(m.Local)/float64(max(m.Gets, 1)), 0), nil
		case "local-single":
			return pct(float64(s.Local)/float64(max(s.Gets, 1)), 0), nil
		case "level2":
			return pct(l2, 0), nil
		case "level2-p50":
			return ms(l2p50) + " ms", nil
		case "level2-rpcs":
			return num(l2rpc, 0), nil
		case "level1":
			return pct(l1, 0), nil
		case "level1-p50":
			return ms(l1p50) + " ms", nil
		case "level0":
			return pct(l0, 0), nil
		case "level0-p50":
			return ms(l0p50) + " ms", nil
		case "get-rpcs":
			return num(m.RPCsP50, 0) + " against " + num(s.RPCsP50, 0), nil
		case "put-rpcs":
			return num(m.PutRPCsP50, 0) + " against " + num(s.PutRPCsP50, 0), nil
		case "putfrac":
			return pct(r.PutFraction, 0), nil
		case "persite":
			return count(r.PerSite), nil
		case "putters":
			return count(r.Putters), nil
		case "datagrams":
			return count(m.Datagrams) + " against " + count(s.Datagrams), nil
		}
		return "", fmt.Errorf("field %q unknown", args[2])
	})

	// getlatency.workload WORKLOAD TOPOLOGY: the workload in a sentence.
	register("getlatency.workload", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 2, "paper|zipf TOPOLOGY"); err != nil {
			return "", err
		}
		r, err := c.getlatency(args[0], args[1])
		if err != nil {
			return "", err
		}
		who := fmt.Sprintf("each put by a random %s of the nodes", pct(r.PutFraction, 0))
		how := "keys it did not put, drawn uniformly"
		if r.Workload == "zipf" {
			who = fmt.Sprintf("each put by %d random nodes", r.Putters)
			how = fmt.Sprintf("keys it did not put, key k drawn with probability ∝ 1/k^%s", num(r.ZipfS, 1))
		}
		return fmt.Sprintf("%d nodes (%d per site) on %s, one network after the other in one process: level 0 only, and the default three levels after %s of clustering; "+
			"%s keys, %s; then every node gets %d %s, spread over %s",
			r.N, r.PerSite, r.Topology, durString(r.Warmup), count(r.Keys), who, r.GetsPerNode, how, durString(r.Spread)), nil
	})

	// lookup.static and lookup.churn: eval/lookup's tables.
	register("lookup.static", func(c *results, args []string) (string, error) {
		var r lookupReport
		if err := c.load("lookup.json", &r); err != nil {
			return "", err
		}
		row := func(name string, o lookupOp) []string {
			return []string{name, pct(o.Success, 2), fmt.Sprintf("%d / %d / %d", o.HopsP50, o.HopsP99, o.HopsMax),
				fmt.Sprintf("%s / %s / %s / %s s", num(o.P50, 2), num(o.P90, 2), num(o.P99, 2), num(o.Max, 2))}
		}
		return table([]string{fmt.Sprintf("static network, %d nodes on %s", r.N, r.Topology), "success", "hops p50 / p99 / max", "latency p50 / p90 / p99 / max"},
			[][]string{row("put", r.Put), row("get after put", r.Get)}), nil
	})
	register("lookup.churn", func(c *results, args []string) (string, error) {
		var r lookupReport
		if err := c.load("lookup.json", &r); err != nil {
			return "", err
		}
		var rows [][]string
		for _, ch := range r.Churn {
			name := fmt.Sprintf("%d copies", ch.Replicas)
			if ch.Replicas == 1 {
				name = "1 copy (the paper's)"
			}
			rows = append(rows, []string{name, pct(ch.Once.Success, 2), pct(ch.Four.Success, 2), num(max(ch.Once.Max, ch.Four.Max), 1) + " s",
				count(ch.Errors["cut short by LookupTimeout"])})
		}
		killed := 0
		if len(r.Churn) > 0 {
			killed = r.Churn[0].Killed
		}
		return table([]string{fmt.Sprintf("after killing %d of %d nodes", killed, r.N), "keys put once", "keys put by 4 nodes", "slowest get", "gets cut short by the lookup timeout"}, rows), nil
	})
	// lookup.lost REPLICAS once|four: the share of keys lost after the
	// kill with that many copies per put.
	register("lookup.lost", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 2, "REPLICAS once|four"); err != nil {
			return "", err
		}
		var r lookupReport
		if err := c.load("lookup.json", &r); err != nil {
			return "", err
		}
		for _, ch := range r.Churn {
			if fmt.Sprint(ch.Replicas) != args[0] {
				continue
			}
			switch args[1] {
			case "once":
				return pct(1-ch.Once.Success, 1), nil
			case "four":
				return pct(1-ch.Four.Success, 1), nil
			}
			return "", fmt.Errorf("want once or four, not %q", args[1])
		}
		return "", fmt.Errorf("lookup.json has no run with %s copies", args[0])
	})
	register("lookup.value", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "n|log2n|killed"); err != nil {
			return "", err
		}
		var r lookupReport
		if err := c.load("lookup.json", &r); err != nil {
			return "", err
		}
		switch args[0] {
		case "n":
			return count(r.N), nil
		case "log2n":
			return count(r.Log2N), nil
		case "killed":
			return count(r.Churn[0].Killed), nil
		}
		return "", fmt.Errorf("field %q unknown", args[0])
	})

	// clusters.periods: quality per period and the greedy baseline.
	register("clusters.periods", func(c *results, args []string) (string, error) {
		var r clustersReport
		if err := c.load("clusters.json", &r); err != nil {
			return "", err
		}
		q := func(label string, qs []clusterQuality) []string {
			row := []string{label}
			for _, x := range qs {
				row = append(row, count(x.Clusters), num(x.MeanSize, 2), pct(x.PairRule, 1), pct(x.NotAlone, 1))
			}
			return row
		}
		var rows [][]string
		for _, p := range r.Periods {
			rows = append(rows, q(fmt.Sprintf("period %d", p.Period), p.Quality))
		}
		rows = append(rows, q("end of the run", r.Final), q("greedy, offline", r.Greedy))
		return table([]string{fmt.Sprintf("%d nodes, %s", r.N, r.Topology), "L1 clusters", "L1 mean size", "L1 pairs rule", "L1 not alone",
			"L2 clusters", "L2 mean size", "L2 pairs rule", "L2 not alone"}, rows), nil
	})
	register("clusters.stability", func(c *results, args []string) (string, error) {
		var r clustersReport
		if err := c.load("clusters.json", &r); err != nil {
			return "", err
		}
		s := r.Stability
		var rows [][]string
		for i := range s.PerNodeHour {
			rows = append(rows, []string{fmt.Sprintf("level %d", i+1), num(s.PerNodeHour[i], 3), count(s.MaxPerNode[i]), count(s.MoreThanTwice[i])})
		}
		return table([]string{fmt.Sprintf("over %s after the periods", num(s.Hours, 0)+" h"), "cluster changes per node per hour", "most changes of one node", "nodes changing more than twice"}, rows), nil
	})
	register("clusters.value", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "converged-1|converged-2|joiners|joined|join-median|join-max"); err != nil {
			return "", err
		}
		var r clustersReport
		if err := c.load("clusters.json", &r); err != nil {
			return "", err
		}
		switch args[0] {
		case "converged-1", "converged-2":
			i := int(args[0][len(args[0])-1] - '1')
			if r.Converged[i] < 0 {
				return "not within the run", nil
			}
			return num(r.Converged[i], 0) + " virtual minutes", nil
		case "joiners":
			return count(r.Late.Joiners), nil
		case "joined":
			return count(r.Late.Joined), nil
		case "join-median":
			return num(r.Late.Median, 1) + " s", nil
		case "join-max":
			return num(r.Late.Max, 1) + " s", nil
		}
		return "", fmt.Errorf("field %q unknown", args[0])
	})
}

// durString renders a Go duration string ("30m0s") the documents' way.
func durString(s string) string {
	d, err := time.ParseDuration(s)
	if err != nil {
		return s
	}
	return dur(d)
}

type lookupOp struct {
	Success float64 `json:"success_rate"`
	HopsP50 int     `json:"hops_p50"`
	HopsP99 int     `json:"hops_p99"`
	HopsMax int     `json:"hops_max"`
	P50     float64 `json:"latency_p50_s"`
	P90     float64 `json:"latency_p90_s"`
	P99     float64 `json:"latency_p99_s"`
	Max     float64 `json:"latency_max_s"`
}

type lookupReport struct {
	Topology string   `json:"topology"`
	N        int      `json:"n"`
	Log2N    int      `json:"ceil_log2_n"`
	Get      lookupOp `json:"static_get_after_put"`
	Put      lookupOp `json:"static_put"`
	Churn    []struct {
		Replicas int            `json:"replicas"`
		Killed   int            `json:"killed"`
		Once     lookupOp       `json:"get_keys_put_once"`
		Four     lookupOp       `json:"get_keys_put_by_4_nodes"`
		Errors   map[string]int `json:"errors"`
	} `json:"churn"`
}

type clusterQuality struct {
	Level    int     `json:"level"`
	Clusters int     `json:"clusters"`
	MeanSize float64 `json:"mean_size"`
	PairRule float64 `json:"pair_rule_ok"`
	NotAlone float64 `json:"non_singleton_of_those"`
}

type clustersReport struct {
	Topology string `json:"topology"`
	N        int    `json:"n"`
	Periods  []struct {
		Period  int              `json:"period"`
		Quality []clusterQuality `json:"quality"`
	} `json:"periods"`
	Converged []float64        `json:"converged_minutes"`
	Greedy    []clusterQuality `json:"greedy"`
	Final     []clusterQuality `json:"final"`
	Stability struct {
		Hours         float64   `json:"hours"`
		MaxPerNode    []int     `json:"max_changes_per_node"`
		PerNodeHour   []float64 `json:"changes_per_node_hour"`
		MoreThanTwice []int     `json:"nodes_changing_more_than_twice"`
	} `json:"stability"`
	Late struct {
		Joiners int     `json:"joiners"`
		Joined  int     `json:"in_site_mates_level2_cluster"`
		Median  float64 `json:"median_seconds_to_join"`
		Max     float64 `json:"max_seconds_to_join"`
	} `json:"late_joiners"`
}
