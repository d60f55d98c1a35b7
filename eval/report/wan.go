package main

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// eval/wan (issue 39): the real bin/coredns and bin/caddy as a fleet on an
// emulated wide area, Figures 7, 4 and 5 beside the same in virtual time
// (wan.json), and the DSHT alone at scale (wan-dht.json).

type wanQuality struct {
	Level      int     `json:"level"`
	Threshold  float64 `json:"threshold_ns"`
	Clusters   int     `json:"clusters"`
	Singletons int     `json:"singletons"`
	MeanSize   float64 `json:"mean_size"`
	PairRule   float64 `json:"pair_rule_ok"`
	NotAlone   float64 `json:"non_singleton_of_those"`
}

type wanClusters struct {
	Snapshots []struct {
		At      float64      `json:"at_seconds"`
		Quality []wanQuality `json:"quality"`
	} `json:"snapshots"`
	Greedy   []wanQuality `json:"greedy"`
	Criteria []float64    `json:"criteria_seconds"`
	Formed   []float64    `json:"formed_seconds"`
}

// last is the clusters' final snapshot.
func (w wanClusters) last() []wanQuality {
	if len(w.Snapshots) == 0 {
		return nil
	}
	return w.Snapshots[len(w.Snapshots)-1].Quality
}

type wanWorkload struct {
	Files     int           `json:"files"`
	FileBytes float64       `json:"file_bytes"`
	Duration  time.Duration `json:"duration_ns"`
	Jitter    time.Duration `json:"jitter_ns"`
	Think     time.Duration `json:"think_ns"`
	Exp       bool          `json:"exponential_think"`
}

type wanSummary struct {
	Class      string         `json:"class"`
	Requests   int            `json:"requests"`
	Failed     int            `json:"failed"`
	P50        float64        `json:"p50_s"`
	P96        float64        `json:"p96_s"`
	DNSP50     float64        `json:"dns_p50_ms"`
	DNSP96     float64        `json:"dns_p96_ms"`
	AtSite     float64        `json:"proxy_at_client_site_share"`
	InAnswer   float64        `json:"site_in_answer_share"`
	RTTP50     float64        `json:"client_proxy_rtt_p50_ms"`
	ServedFrom map[string]int `json:"served_from"`
	Errors     map[string]int `json:"errors"`
}

type wanCrowd struct {
	Workload wanWorkload `json:"workload"`
	Minutes  []struct {
		Minute   int            `json:"minute"`
		Requests int            `json:"requests"`
		Failed   int            `json:"failed"`
		BySource map[string]int `json:"client_requests_by_source"`
		Origin   int            `json:"origin_fetches"`
		P50      float64        `json:"p50_ms"`
		P99      float64        `json:"p99_ms"`
	} `json:"minutes"`
	PerFile     map[string]int `json:"origin_fetches_per_file"`
	Origin      int            `json:"origin_fetches"`
	Latency     wanSummary     `json:"latency"`
	PeerByLevel map[string]int `json:"peer_fetches_by_level"`
	Model       map[string]int `json:"model_fetches_by_level"`
}

type wanReport struct {
	Provenance struct {
		CommandLine string `json:"command_line"`
	} `json:"provenance"`
	World struct {
		Sites      []string `json:"site_names"`
		Regions    []string `json:"site_regions"`
		NodeSites  []int    `json:"node_sites"`
		ClientOnly []int    `json:"client_only_sites"`
		Origin     int      `json:"origin_site"`
		DNS        int      `json:"dns_site"`
		Nodes      int      `json:"nodes"`
		PerSite    int      `json:"nodes_per_site"`
		Clients    int      `json:"clients"`
		Routers    int      `json:"routers"`
		Silent     []string `json:"silent_routers"`
	} `json:"world"`
	LabChecks []struct {
		Phase    string    `json:"phase"`
		Load     string    `json:"load"`
		Pairs    []any     `json:"pairs"`
		Within   int       `json:"within"`
		MaxErr   float64   `json:"max_error_ms"`
		Traces   []any     `json:"traces"`
		TracesOK int       `json:"traces_ok"`
		Late     []float64 `json:"delayer_late"`
		Bounds   []float64 `json:"delayer_late_bounds_us"`
		MaxLate  float64   `json:"delayer_max_late_us"`
	} `json:"lab_checks"`
	Fig7 struct {
		Real    wanClusters `json:"real"`
		Virtual wanClusters `json:"virtual"`
	} `json:"figure7_clusters"`
	Crowd            wanCrowd `json:"figure4_flash_crowd"`
	CrowdPeerTimeout wanCrowd `json:"figure4_flash_crowd_peer_timeout"`
	Fig5             struct {
		Workload wanWorkload `json:"workload"`
		Warmup   float64     `json:"warmup_seconds"`
		Real     []struct {
			Config struct {
				Name string `json:"name"`
			} `json:"config"`
			Summary []wanSummary   `json:"summary"`
			Slowest map[string]int `json:"slowest_4pct_by_proxy_and_source"`
		} `json:"real"`
		Virtual struct {
			Topology string `json:"topology"`
			Command  string `json:"command"`
			Results  []struct {
				Config  string  `json:"config"`
				Variant string  `json:"variant"`
				P50     float64 `json:"all_p50_s"`
				P96     float64 `json:"all_p96_s"`
				AtSite  float64 `json:"proxy_at_client_site_share"`
			} `json:"results"`
		} `json:"virtual"`
	} `json:"figure5_end_to_end"`
	Compare []struct {
		Figure string   `json:"figure"`
		Metric string   `json:"metric"`
		Real   float64  `json:"real"`
		Virt   float64  `json:"virtual"`
		Diff   *float64 `json:"diff_pct"`
		Over   bool     `json:"over_25pct"`
	} `json:"simulation_vs_reality"`
	Cost struct {
		FleetCores float64 `json:"idle_fleet_cores"`
		CoreDNSRSS float64 `json:"coredns_rss_mib_mean"`
		CaddyRSS   float64 `json:"caddy_rss_mib_mean"`
		Processes  int     `json:"server_processes"`
		Ready      float64 `json:"fleet_ready_seconds"`
	} `json:"cost"`
}

func (c *results) wan() (wanReport, error) {
	var r wanReport
	err := c.load("wan.json", &r)
	return r, err
}

// lateOver counts the delayer's verdicts later than bound µs, of all.
func lateOver(late, bounds []float64, bound float64) (over, all float64) {
	for i, n := range late {
		all += n
		if i > 0 && i-1 < len(bounds) && bounds[i-1] >= bound {
			over += n
		}
	}
	return over, all
}

// crowd picks a flash crowd: "default" or "peer-timeout".
func (r wanReport) crowd(which string) (wanCrowd, error) {
	switch which {
	case "default":
		return r.Crowd, nil
	case "peer-timeout":
		return r.CrowdPeerTimeout, nil
	}
	return wanCrowd{}, fmt.Errorf("crowd %q: want default or peer-timeout", which)
}

// e2e is a Figure 5 configuration's summary of a class of clients.
func (r wanReport) e2e(config, class string) (wanSummary, error) {
	for _, x := range r.Fig5.Real {
		if x.Config.Name != config {
			continue
		}
		for _, s := range x.Summary {
			if s.Class == class {
				return s, nil
			}
		}
	}
	return wanSummary{}, fmt.Errorf("wan.json has no Figure 5 result %q, %q", config, class)
}

// commandFlag is a flag's value in eval/wan's recorded command line
// ("-crowd-peer-timeout=18s"), "" when the line does not have it.
func commandFlag(line, name string) string {
	flags, err := evalrun.ParseCommandLine(line, "wan")
	if err != nil {
		return ""
	}
	return flags[name]
}

var levelNames = map[string]string{"peer-l2": "peer L2", "peer-l1": "peer L1", "peer-l0": "peer L0", "local": "local hits", "origin": "origin", "collapsed": "collapsed"}

// dnsErrors sums a crowd's DNS failures: page lookups that timed out and
// those answered SERVFAIL, each with the requests it failed, and the
// sites (third octet of the client's address) they came from.
func dnsErrors(errs map[string]int) (timeouts, timeoutReqs, servfails, servfailReqs int, sites []int) {
	site := regexp.MustCompile(`^dns: read udp 198\.1[89]\.(\d+)\.`)
	for k, n := range errs {
		if !strings.HasPrefix(k, "dns:") {
			continue
		}
		if strings.Contains(k, "SERVFAIL") {
			servfails, servfailReqs = servfails+1, servfailReqs+n
			continue
		}
		timeouts, timeoutReqs = timeouts+1, timeoutReqs+n
		if m := site.FindStringSubmatch(k); m != nil {
			if s, err := strconv.Atoi(m[1]); err == nil && !slices.Contains(sites, s) {
				sites = append(sites, s)
			}
		}
	}
	slices.Sort(sites)
	return
}

// httpErrors names a crowd's other failures, most first.
func httpErrors(errs map[string]int) string {
	kinds := map[string]int{}
	for k, n := range errs {
		switch {
		case strings.HasPrefix(k, "dns:"):
			if strings.Contains(k, "SERVFAIL") {
				kinds["DNS SERVFAIL"] += n
			} else {
				kinds["DNS time-outs"] += n
			}
		case strings.HasPrefix(k, "status "):
			kinds[k] += n
		case strings.Contains(k, "unexpected EOF"):
			kinds["bodies cut short"] += n
		case strings.Contains(k, "Client.Timeout"), strings.Contains(k, "deadline exceeded"):
			kinds["client time-outs"] += n
		default:
			kinds["other"] += n
		}
	}
	names := slices.Collect(maps.Keys(kinds))
	slices.SortFunc(names, func(a, b string) int {
		if kinds[a] != kinds[b] {
			return kinds[b] - kinds[a]
		}
		return strings.Compare(a, b)
	})
	var out []string
	for _, k := range names {
		out = append(out, count(kinds[k])+" "+k)
	}
	return strings.Join(out, ", ")
}

func cell(m map[string]int, k string) string {
	if n, ok := m[k]; ok {
		return count(n)
	}
	return ""
}

func pair(a, b float64, d int) string { return num(a, d) + " / " + num(b, d) }

func init() {
	// wan.world: the sites, nodes, routers and clients of the figure run.
	register("wan.world", func(c *results, args []string) (string, error) {
		r, err := c.wan()
		if err != nil {
			return "", err
		}
		w := r.World
		name := func(i int) string { return w.Sites[i] + " (" + strings.Split(w.Regions[i], "/")[0] + ")" }
		var clientOnly []string
		for _, s := range w.ClientOnly {
			clientOnly = append(clientOnly, name(s))
		}
		return fmt.Sprintf("%s sites: %s with %s Coral nodes each (%s nodes), %s with clients and no node (%s), the origin at %s, the fake root and TLD at %s; %s routers, of which %s are silent (%s); %s clients",
			count(len(w.Sites)), count(len(w.NodeSites)), count(w.PerSite), count(w.Nodes), count(len(w.ClientOnly)), strings.Join(clientOnly, ", "),
			name(w.Origin), name(w.DNS), count(w.Routers), count(len(w.Silent)), strings.Join(w.Silent, ", "), count(w.Clients)), nil
	})

	// wan.labchecks: the lab against its matrix, three times.
	register("wan.labchecks", func(c *results, args []string) (string, error) {
		r, err := c.wan()
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, x := range r.LabChecks {
			traces := "–"
			if x.TracesOK > 0 || len(x.Traces) > 0 {
				traces = count(x.TracesOK) + " of " + count(len(x.Traces))
			}
			over, all := lateOver(x.Late, x.Bounds, 1000)
			rows = append(rows, []string{x.Phase, firstField(x.Load), count(x.Within) + " of " + count(len(x.Pairs)), ms(x.MaxErr) + " ms", traces,
				num(over, 0) + " of " + num(all, 0), ms(x.MaxLate/1000) + " ms"})
		}
		return table([]string{"when", "load", "pairs within 10 % or 2 ms", "largest error", "traces listing the expected routers (silent ones missing)",
			"delayer verdicts > 1 ms late", "latest"}, rows), nil
	})

	// wan.clusters: Figure 7, the clusters at the end of the watch, real,
	// virtual and greedy.
	register("wan.clusters", func(c *results, args []string) (string, error) {
		r, err := c.wan()
		if err != nil {
			return "", err
		}
		real, virt := r.Fig7.Real.last(), r.Fig7.Virtual.last()
		var rows [][]string
		for i := range real {
			level := count(real[i].Level) + " (" + dur(time.Duration(real[i].Threshold)) + ")"
			for _, side := range []struct {
				name   string
				q      wanQuality
				formed string
			}{
				{"real servers", real[i], secsAt(r.Fig7.Real.Formed, i)},
				{"virtual time", virt[i], secsAt(r.Fig7.Virtual.Formed, i)},
				{"greedy offline", r.Fig7.Real.Greedy[i], ""},
			} {
				q := side.q
				rows = append(rows, []string{level, side.name, count(q.Clusters), count(q.Singletons), num(q.MeanSize, 2), pct(q.PairRule, 0), pct(q.NotAlone, 1), side.formed})
				level = count(real[i].Level)
			}
		}
		return table([]string{"level", "", "clusters", "singletons", "mean size", "pairs rule 80 %", "nodes with a neighbour not alone", "last change"}, rows), nil
	})

	// wan.crowd default|peer-timeout: Figure 4, minute by minute.
	register("wan.crowd", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "default|peer-timeout"); err != nil {
			return "", err
		}
		r, err := c.wan()
		if err != nil {
			return "", err
		}
		cr, err := r.crowd(args[0])
		if err != nil {
			return "", err
		}
		head := "minute"
		if args[0] == "peer-timeout" {
			head = "minute (peer_timeout " + durString(commandFlag(r.Provenance.CommandLine, "crowd-peer-timeout")) + ")"
		}
		var rows [][]string
		for _, m := range cr.Minutes {
			origin := count(m.Origin)
			if m.Origin > 0 {
				origin = "**" + origin + "**"
			}
			rows = append(rows, []string{count(m.Minute), count(m.Requests), count(m.Failed), origin,
				cell(m.BySource, "local"), cell(m.BySource, "collapsed"), cell(m.BySource, "peer-l2"), cell(m.BySource, "peer-l1"), cell(m.BySource, "peer-l0"),
				cell(m.BySource, "origin"), ms(m.P50) + " / " + ms(m.P99)})
		}
		return table([]string{head, "requests", "failed", "origin fetches", "served: local", "collapsed", "peer L2", "peer L1", "peer L0", "from origin", "p50 / p99 ms"}, rows), nil
	})

	// wan.e2e: Figure 5's latencies, real and virtual.
	register("wan.e2e", func(c *results, args []string) (string, error) {
		r, err := c.wan()
		if err != nil {
			return "", err
		}
		virt := func(config, variant string) string {
			for _, v := range r.Fig5.Virtual.Results {
				if v.Config == config && v.Variant == variant {
					return pair(v.P50, v.P96, 3)
				}
			}
			return "–"
		}
		var rows [][]string
		for _, x := range r.Fig5.Real {
			cells := []string{x.Config.Name}
			for _, cl := range []string{"beside a proxy", "", "client LAN", "", "site without proxy"} {
				switch cl {
				case "":
					v := "beside a proxy"
					if len(cells) == 4 {
						v = "no shared prefix"
					}
					cells = append(cells, virt(x.Config.Name, v))
				default:
					s, err := r.e2e(x.Config.Name, cl)
					if err != nil {
						return "", err
					}
					cells = append(cells, pair(s.P50, s.P96, 3))
				}
			}
			rows = append(rows, cells)
		}
		return table([]string{"latency (s), p50 / p96", "real, beside a proxy", "virtual, beside", "real, client LAN", "virtual, no shared prefix", "real, site without proxy"}, rows), nil
	})

	// wan.e2e-breakdown: Figure 5's clients beside a proxy, and the
	// slowest requests of all.
	register("wan.e2e-breakdown", func(c *results, args []string) (string, error) {
		r, err := c.wan()
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, x := range r.Fig5.Real {
			s, err := r.e2e(x.Config.Name, "beside a proxy")
			if err != nil {
				return "", err
			}
			var all, elsewhere int
			bySource := map[string]int{}
			for k, n := range x.Slowest {
				all += n
				if src, ok := strings.CutPrefix(k, "proxy elsewhere, "); ok {
					elsewhere += n
					bySource[src] += n
				}
			}
			srcs := slices.Collect(maps.Keys(bySource))
			slices.SortFunc(srcs, func(a, b string) int {
				if bySource[a] != bySource[b] {
					return bySource[b] - bySource[a]
				}
				return strings.Compare(a, b)
			})
			var parts []string
			for _, k := range srcs {
				name := levelNames[k]
				if name == "" {
					name = k
				}
				parts = append(parts, name+" "+count(bySource[k]))
			}
			rows = append(rows, []string{x.Config.Name, ms(s.DNSP50) + " / " + ms(s.DNSP96) + " ms", pct(s.InAnswer, 0), pct(s.AtSite, 0), msOrZero(s.RTTP50),
				"proxy elsewhere " + count(elsewhere) + " of " + count(all) + ": " + strings.Join(parts, ", ")})
		}
		return table([]string{"breakdown: clients beside a proxy, and (last column) the slowest 4 % of all requests", "DNS p50 / p96",
			"answer names a proxy at the client's site", "served by a proxy at the site", "client–proxy RTT p50", "slowest 4 % of all requests"}, rows), nil
	})

	// wan.value FIELD [ARGS]: the section's figures for its prose.
	register("wan.value", func(c *results, args []string) (string, error) {
		if len(args) == 0 {
			return "", fmt.Errorf("want a field")
		}
		r, err := c.wan()
		if err != nil {
			return "", err
		}
		return wanValue(r, args[0], args[1:])
	})

	// wan.dht: the DSHT alone at each size.
	register("wan.dht", func(c *results, args []string) (string, error) {
		d, err := c.wanDHT()
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, x := range d.Runs {
			q := x.Clusters.last()
			cl := "–"
			if len(q) == 2 && len(x.Clusters.Greedy) == 2 {
				cl = fmt.Sprintf("%s / %s (%s / %s)", count(q[0].Clusters), count(q[1].Clusters), count(x.Clusters.Greedy[0].Clusters), count(x.Clusters.Greedy[1].Clusters))
			}
			rows = append(rows, []string{count(x.N), count(x.Sites), count(x.Joined),
				num(x.Join.P50, 1) + " / " + num(x.Join.P90, 1) + " / " + num(x.Join.Max, 1), cl,
				count(x.Found) + " of " + count(x.Lookups), num(x.Hops.P50, 0) + " / " + num(x.Hops.P99, 0), num(x.RPCs.P50, 0),
				ms(x.Get.P50) + " / " + ms(x.Get.P90) + " / " + ms(x.Get.P99), ms(x.Put.P50),
				num(x.RSS.Mean, 1) + " MiB", num(x.RSS.Total/1024, 1) + " GiB", num(x.IdleCores, 3) + " cores"})
		}
		return table([]string{"n", "sites", "joined", "join s p50 / p90 / max", "clusters L1 / L2 at the end (greedy offline)", "get found", "get hops p50 / p99",
			"get RPCs p50", "get ms p50 / p90 / p99", "put ms p50", "RSS per process", "all processes", "idle CPU, all nodes"}, rows), nil
	})

	// wan-dht.value FIELD: the DSHT run's figures for the prose.
	register("wan-dht.value", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "FIELD"); err != nil {
			return "", err
		}
		d, err := c.wanDHT()
		if err != nil {
			return "", err
		}
		if len(d.Runs) == 0 {
			return "", fmt.Errorf("wan-dht.json has no runs")
		}
		first, last := d.Runs[0], d.Runs[len(d.Runs)-1]
		log2 := func(n int) string { return count(int(math.Ceil(math.Log2(float64(n))))) }
		switch args[0] {
		case "sizes":
			var s []string
			for _, x := range d.Runs {
				s = append(s, count(x.N))
			}
			return strings.Join(s, ", "), nil
		case "per-site":
			return count(first.PerSite), nil
		case "lookups":
			return count(first.Lookups), nil
		case "rss-range":
			lo, hi := math.Inf(1), 0.0
			for _, x := range d.Runs {
				lo, hi = min(lo, x.RSS.Mean), max(hi, x.RSS.Mean)
			}
			return num(lo, 1) + "–" + num(hi, 1) + " MiB", nil
		case "rss-total-last":
			return num(last.RSS.Total/1024, 1) + " GiB", nil
		case "n-first":
			return count(first.N), nil
		case "n-last":
			return count(last.N), nil
		case "hops":
			return num(first.Hops.P50, 0) + " → " + num(last.Hops.P50, 0), nil
		case "log2":
			return log2(first.N) + " → " + log2(last.N), nil
		case "get-p50":
			return ms(first.Get.P50) + " → " + ms(last.Get.P50) + " ms", nil
		case "idle-last":
			return num(last.IdleCores, 3) + " cores", nil
		case "idle-per-node-last":
			return pct(last.IdleCores/float64(last.N), 3) + " of a core", nil
		case "join-max":
			m := 0.0
			for _, x := range d.Runs {
				m = max(m, x.Join.Max)
			}
			return num(m, 0) + " s", nil
		case "l1-last":
			if q := last.Clusters.last(); len(q) > 0 {
				return count(q[0].Clusters), nil
			}
		case "greedy-l1-last":
			if len(last.Clusters.Greedy) > 0 {
				return count(last.Clusters.Greedy[0].Clusters), nil
			}
		case "sites-last":
			return count(last.Sites), nil
		case "memory":
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(d.Memory), " kB"), 64)
			return num(kb/(1<<20), 0) + " GiB", nil
		case "capacity":
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(d.Memory), " kB"), 64)
			perNode := last.RSS.Total / float64(last.N) // MiB
			return num(math.Floor(kb/1024/perNode/100)*100, 0), nil
		}
		return "", fmt.Errorf("field %q unknown", args[0])
	})
}

// msOrZero is ms with its unit, "0 ms" for nothing measurable.
func msOrZero(v float64) string {
	if v == 0 {
		return "0 ms"
	}
	return ms(v) + " ms"
}

func secsAt(v []float64, i int) string {
	if i >= len(v) || v[i] < 0 {
		return "–"
	}
	return num(v[i], 1) + " s"
}

type wanDHTReport struct {
	Memory string `json:"machine_memory"`
	Runs   []struct {
		N         int                             `json:"n"`
		Sites     int                             `json:"sites"`
		PerSite   int                             `json:"per_site"`
		Joined    int                             `json:"joined"`
		Join      struct{ P50, P90, Max float64 } `json:"join_seconds"`
		Clusters  wanClusters                     `json:"clusters"`
		Lookups   int                             `json:"lookups"`
		Found     int                             `json:"found"`
		Hops      struct{ P50, P99 float64 }      `json:"get_hops"`
		RPCs      struct{ P50 float64 }           `json:"get_rpcs"`
		Get       struct{ P50, P90, P99 float64 } `json:"get_latency_ms"`
		Put       struct{ P50 float64 }           `json:"put_latency_ms"`
		RSS       struct{ Mean, Total float64 }   `json:"rss_mib"`
		IdleCores float64                         `json:"idle_cores"`
	} `json:"runs"`
}

func (c *results) wanDHT() (wanDHTReport, error) {
	var r wanDHTReport
	err := c.load("wan-dht.json", &r)
	return r, err
}

// wanValue is one figure of wan.json for the prose.
func wanValue(r wanReport, field string, args []string) (string, error) {
	want := func(n int, usage string) error { return needArgs(args, n, usage) }
	switch field {
	case "nodes":
		return count(r.World.Nodes), nil
	case "clients":
		return count(r.World.Clients), nil
	case "node-sites":
		return count(len(r.World.NodeSites)), nil
	case "processes":
		return count(r.Cost.Processes), nil
	case "idle-cores":
		return num(r.Cost.FleetCores, 3) + " cores", nil
	case "idle-per-process":
		return pct(r.Cost.FleetCores/float64(r.Cost.Processes), 2) + " of a core", nil
	case "coredns-rss":
		return num(r.Cost.CoreDNSRSS, 0) + " MiB", nil
	case "caddy-rss":
		return num(r.Cost.CaddyRSS, 0) + " MiB", nil
	case "ready":
		return num(r.Cost.Ready, 0) + " s", nil
	case "pairs":
		if len(r.LabChecks) == 0 {
			return "", fmt.Errorf("no lab checks")
		}
		return count(len(r.LabChecks[0].Pairs)), nil
	case "late-max": // the latest verdict of every check
		m := 0.0
		for _, x := range r.LabChecks {
			m = max(m, x.MaxLate)
		}
		return ms(m/1000) + " ms", nil
	case "late-within-1ms": // the share of verdicts within 1 ms, the worst check
		share := 1.0
		for _, x := range r.LabChecks {
			over, all := lateOver(x.Late, x.Bounds, 1000)
			if all > 0 {
				share = min(share, 1-over/all)
			}
		}
		return pct(share, 1), nil
	case "load-max": // the highest 1-minute load of the checks
		m := 0.0
		for _, x := range r.LabChecks {
			if f, err := strconv.ParseFloat(firstField(x.Load), 64); err == nil {
				m = max(m, f)
			}
		}
		return num(m, 0), nil
	case "flag": // a flag of the run's command line
		if err := want(1, "flag NAME"); err != nil {
			return "", err
		}
		v := commandFlag(r.Provenance.CommandLine, args[0])
		if v == "" {
			return "", fmt.Errorf("the run's command line has no -%s", args[0])
		}
		if d, err := time.ParseDuration(v); err == nil {
			return dur(d), nil
		}
		return v, nil
	case "fig7": // fig7 real|virtual|greedy LEVEL clusters|mean|half-mean|formed|criteria
		if err := want(3, "fig7 real|virtual|greedy LEVEL FIELD"); err != nil {
			return "", err
		}
		level, err := strconv.Atoi(args[1])
		if err != nil || level < 1 || level > 2 {
			return "", fmt.Errorf("level %q", args[1])
		}
		cl := r.Fig7.Real
		if args[0] == "virtual" {
			cl = r.Fig7.Virtual
		}
		qs := cl.last()
		if args[0] == "greedy" {
			qs = cl.Greedy
		}
		if len(qs) < level {
			return "", fmt.Errorf("no level %d", level)
		}
		q := qs[level-1]
		switch args[2] {
		case "clusters":
			return count(q.Clusters), nil
		case "mean":
			return num(q.MeanSize, 1), nil
		case "half-mean":
			return num(q.MeanSize/2, 1), nil
		case "formed":
			return secsAt(cl.Formed, level-1), nil
		case "criteria":
			return secsAt(cl.Criteria, level-1), nil
		}
		return "", fmt.Errorf("fig7 field %q unknown", args[2])
	case "over25": // over25 FIGURE [count]: the comparison's differences beyond 25 %
		if len(args) != 1 && (len(args) != 2 || args[1] != "count") {
			return "", fmt.Errorf("want over25 FIGURE [count], have %q", args)
		}
		var out []string
		compared := 0
		for _, x := range r.Compare {
			if x.Figure == args[0] {
				compared++
			}
			if x.Figure == args[0] && x.Over && x.Diff != nil {
				sign := "+"
				if *x.Diff < 0 {
					sign = ""
				}
				out = append(out, x.Metric+" "+sign+num(*x.Diff, 0)+" %")
			}
		}
		switch {
		case len(args) == 2:
			return count(len(out)) + " of the " + count(compared) + " figures compared", nil
		case len(out) == 0:
			return "none", nil
		}
		return strings.Join(out, ", "), nil
	case "crowd": // crowd default|peer-timeout FIELD
		if err := want(2, "crowd default|peer-timeout FIELD"); err != nil {
			return "", err
		}
		cr, err := r.crowd(args[0])
		if err != nil {
			return "", err
		}
		return crowdValue(cr, args[1])
	case "e2e": // e2e CONFIG CLASS p50|p96|p50-ms|dns-p50|dns-p96|at-site|in-answer
		if err := want(3, "e2e CONFIG CLASS FIELD"); err != nil {
			return "", err
		}
		config := strings.ReplaceAll(args[0], "_", " ")
		if config == "traceroute" {
			config = "multi-level, traceroute"
		}
		s, err := r.e2e(config, strings.ReplaceAll(args[1], "_", " "))
		if err != nil {
			return "", err
		}
		switch args[2] {
		case "p50":
			return num(s.P50, 3), nil
		case "p96":
			return num(s.P96, 3), nil
		case "p50-ms":
			return ms(s.P50*1000) + " ms", nil
		case "dns-p50":
			return ms(s.DNSP50) + " ms", nil
		case "dns-p96":
			return ms(s.DNSP96) + " ms", nil
		case "at-site":
			return pct(s.AtSite, 0), nil
		case "in-answer":
			return pct(s.InAnswer, 0), nil
		case "not-in-answer":
			return pct(1-s.InAnswer, 0), nil
		}
		return "", fmt.Errorf("e2e field %q unknown", args[2])
	case "e2e-ratio": // single-level p50 over traceroute p50, beside a proxy
		a, err := r.e2e("single-level", "beside a proxy")
		if err != nil {
			return "", err
		}
		b, err := r.e2e("multi-level, traceroute", "beside a proxy")
		if err != nil {
			return "", err
		}
		return times(a.P50/b.P50, 1), nil
	case "e2e-virtual-p50": // the range of the model's p50s
		lo, hi := math.Inf(1), 0.0
		for _, v := range r.Fig5.Virtual.Results {
			lo, hi = min(lo, v.P50), max(hi, v.P50)
		}
		return ms(lo*1000) + "–" + ms(hi*1000) + " ms", nil
	case "e2e-real-p50": // the range of the real p50s, clients at node sites
		lo, hi := math.Inf(1), 0.0
		for _, x := range r.Fig5.Real {
			for _, s := range x.Summary {
				if s.Class == "beside a proxy" || s.Class == "client LAN" {
					lo, hi = min(lo, s.P50), max(hi, s.P50)
				}
			}
		}
		return ms(lo*1000) + "–" + ms(hi*1000) + " ms", nil
	case "e2e-virtual-at-site": // the range of the model's shares at the site, single- and multi-level
		lo, hi := math.Inf(1), 0.0
		for _, v := range r.Fig5.Virtual.Results {
			if v.Config != "multi-level, traceroute" {
				lo, hi = min(lo, v.AtSite), max(hi, v.AtSite)
			}
		}
		return pct(lo, 0) + "–" + pct(hi, 0), nil
	case "e2e-real-at-site": // the same, real
		lo, hi := math.Inf(1), 0.0
		for _, x := range r.Fig5.Real {
			for _, s := range x.Summary {
				if x.Config.Name != "multi-level, traceroute" && (s.Class == "beside a proxy" || s.Class == "client LAN") {
					lo, hi = min(lo, s.AtSite), max(hi, s.AtSite)
				}
			}
		}
		return pct(lo, 0) + "–" + pct(hi, 0), nil
	case "e2e-virtual": // e2e-virtual CONFIG VARIANT p50|p96|at-site
		if err := want(3, "e2e-virtual CONFIG VARIANT FIELD"); err != nil {
			return "", err
		}
		config := strings.ReplaceAll(args[0], "_", " ")
		if config == "traceroute" {
			config = "multi-level, traceroute"
		}
		for _, v := range r.Fig5.Virtual.Results {
			if v.Config == config && v.Variant == strings.ReplaceAll(args[1], "_", " ") {
				switch args[2] {
				case "p50":
					return num(v.P50, 3), nil
				case "p96":
					return num(v.P96, 3), nil
				case "at-site":
					return pct(v.AtSite, 0), nil
				}
				return "", fmt.Errorf("e2e-virtual field %q unknown", args[2])
			}
		}
		return "", fmt.Errorf("no virtual result %q %q", config, args[1])
	case "e2e-workload":
		w := r.Fig5.Workload
		how := "uniform"
		if w.Exp {
			how = "exponential"
		}
		return fmt.Sprintf("after %s of clustering, the %s clients load pages for %s, %s apart on average (%s)",
			dur(time.Duration(r.Fig5.Warmup*float64(time.Second))), count(r.World.Clients), dur(w.Duration), dur(w.Think), how), nil
	case "dns-sites": // the sites whose clients' lookups timed out, in both crowds
		var sites []int
		for _, cr := range []wanCrowd{r.Crowd, r.CrowdPeerTimeout} {
			_, _, _, _, s := dnsErrors(cr.Latency.Errors)
			for _, x := range s {
				if !slices.Contains(sites, x) {
					sites = append(sites, x)
				}
			}
		}
		slices.Sort(sites)
		var out []string
		for _, x := range sites {
			if x < len(r.World.Regions) {
				out = append(out, strings.Split(r.World.Regions[x], "/")[0]+" (site "+count(x)+")")
			}
		}
		return strings.Join(out, ", "), nil
	case "e2e-virtual-command":
		return "`" + r.Fig5.Virtual.Command + "`", nil
	}
	return "", fmt.Errorf("field %q unknown", field)
}

// crowdValue is one figure of a Figure 4 crowd.
func crowdValue(cr wanCrowd, field string) (string, error) {
	switch field {
	case "workload":
		w := cr.Workload
		return fmt.Sprintf("start within %s on cold caches and load pages of the %s files for %s, %s ± 50 %% apart", dur(w.Jitter), count(w.Files), dur(w.Duration), dur(w.Think)), nil
	case "origin":
		return count(cr.Origin), nil
	case "files":
		return count(cr.Workload.Files), nil
	case "extra-origin":
		return count(cr.Origin - cr.Workload.Files), nil
	case "most-per-file":
		m := 0
		for _, n := range cr.PerFile {
			m = max(m, n)
		}
		return count(m), nil
	case "failed":
		return count(cr.Latency.Failed), nil
	case "failed-first-minute":
		if len(cr.Minutes) == 0 {
			return "", fmt.Errorf("no minutes")
		}
		return count(cr.Minutes[0].Failed), nil
	case "errors":
		return httpErrors(cr.Latency.Errors), nil
	case "dns": // requests whose page's lookup failed
		_, tr, _, sr, _ := dnsErrors(cr.Latency.Errors)
		out := count(tr) + " timed out"
		if sr > 0 {
			out += ", " + count(sr) + " got SERVFAIL"
		}
		return out, nil
	case "peers": // peer fetches at levels 2 / 1 / 0
		return count(cr.PeerByLevel["peer-l2"]) + " / " + count(cr.PeerByLevel["peer-l1"]) + " / " + count(cr.PeerByLevel["peer-l0"]), nil
	case "model":
		if cr.Model == nil {
			return "", fmt.Errorf("this crowd has no model")
		}
		return count(cr.Model["peer-l2"]) + " / " + count(cr.Model["peer-l1"]) + " / " + count(cr.Model["peer-l0"]), nil
	case "model-l0-missing":
		return count(cr.Model["peer-l0"] - cr.PeerByLevel["peer-l0"]), nil
	case "later-p50": // the range of p50 after the first minute
		lo, hi := math.Inf(1), 0.0
		for _, m := range cr.Minutes[1:] {
			lo, hi = min(lo, m.P50), max(hi, m.P50)
		}
		return ms(lo) + "–" + ms(hi) + " ms", nil
	}
	return "", fmt.Errorf("crowd field %q unknown", field)
}
