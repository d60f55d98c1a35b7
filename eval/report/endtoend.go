package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Figure 5: eval/endtoend's files, one per topology.

type e2eReport struct {
	Topology string `json:"topology"`
	N        int    `json:"n"`
	PerSite  int    `json:"nodes_per_site"`
	Region   string `json:"region"`
	Params   struct {
		Duration, Jitter, Warmup, Window, Think time.Duration
		Pages, PerPage, Size                    int
		OriginBW, ProxyBW                       float64
		Route                                   struct {
			ISPs                     int
			Silent, ClientEcho       float64
			ICMPBurst, ICMPPerSecond float64
			ICMPGlobalBurst          float64
			ICMPGlobalPerSecond      float64
			TraceTimeout             time.Duration
			HintHops, LastHops       int
		}
	} `json:"params"`
	Results []*e2eResult `json:"results"`
	Paper   []struct {
		Config                           string
		AllP50, AllP96, AsiaP50, AsiaP96 float64
	} `json:"paper"`
	Ratios []struct {
		Config     string    `json:"config"`
		Over       string    `json:"over"`
		Variant    string    `json:"variant"`
		Whole      float64   `json:"whole_run"`
		Windows    []float64 `json:"by_window"`
		Cumulative []float64 `json:"cumulative"`
	} `json:"ratios"`
	Startup map[string]struct {
		Traces   int            `json:"traces"`
		Outcomes map[string]int `json:"outcomes"`
		Heard    []int          `json:"routers_heard"`
		Kinds    map[string]int `json:"kinds_heard"`
	} `json:"startup_traces"`
}

type e2eResult struct {
	Config   string         `json:"config"`
	Variant  string         `json:"variant"`
	Requests int            `json:"requests"`
	Failed   int            `json:"failed"`
	Sources  map[string]int `json:"served_from"`
	AllP50   float64        `json:"all_p50_s"`
	AllP96   float64        `json:"all_p96_s"`
	RegP50   float64        `json:"region_p50_s"`
	RegP96   float64        `json:"region_p96_s"`
	RegN     int            `json:"region_requests"`
	ProxyRTT float64        `json:"client_proxy_rtt_p50_s"`
	SameSite float64        `json:"proxy_at_client_site_share"`
	// Breakdown: scope (all, region) → dimension → classes.
	Breakdown map[string]map[string][]e2eClass `json:"breakdown"`
	Windows   []e2eWindow                      `json:"windows"`
	Cum       []e2eWindow                      `json:"cumulative"`
	Traces    map[string]int                   `json:"traces"`
}

type e2eClass struct {
	Class     string  `json:"class"`
	Requests  int     `json:"requests"`
	Share     float64 `json:"share"`
	P50       float64 `json:"p50_s"`
	P96       float64 `json:"p96_s"`
	ProxyRTT  float64 `json:"client_proxy_rtt_p50_s"`
	ServerRTT float64 `json:"server_resolver_rtt_p50_s"`
	Tail      float64 `json:"share_of_tail"`
}

type e2eWindow struct {
	End      float64 `json:"end_minutes"`
	Requests int     `json:"requests"`
	P50      float64 `json:"p50_s"`
	P96      float64 `json:"p96_s"`
}

// Short names in the regions' arguments.
var (
	e2eTopologies = map[string]string{"wonderproxy": "endtoend-wonderproxy.json", "synthetic": "endtoend-synthetic.json"}
	e2eConfigs    = map[string]string{"single": "single-level", "multi": "multi-level", "traceroute": "multi-level, traceroute"}
	e2eVariants   = map[string]string{"beside": "beside a proxy", "apart": "no shared prefix"}
	e2eConfigList = []string{"single", "multi", "traceroute"}
	// e2eWho names a variant's clients in prose.
	e2eWho = map[string]string{"beside": "clients beside a proxy", "apart": "clients sharing no prefix with a proxy"}
)

func (c *results) e2e(topology string) (*e2eReport, error) {
	f, ok := e2eTopologies[topology]
	if !ok {
		return nil, fmt.Errorf("topology %q: want wonderproxy or synthetic", topology)
	}
	var r e2eReport
	return &r, c.load(f, &r)
}

func (r *e2eReport) find(config, variant string) (*e2eResult, error) {
	cn, ok1 := e2eConfigs[config]
	vn, ok2 := e2eVariants[variant]
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("configuration %q, variant %q: want single, multi or traceroute, and beside or apart", config, variant)
	}
	for _, x := range r.Results {
		if x.Config == cn && x.Variant == vn {
			return x, nil
		}
	}
	return nil, fmt.Errorf("%s: no %s row for clients %s", r.Topology, cn, vn)
}

// class is a breakdown class's entry, a zero one when absent.
func (x *e2eResult) class(scope, dim, class string) e2eClass {
	for _, c := range x.Breakdown[scope][dim] {
		if c.Class == class {
			return c
		}
	}
	return e2eClass{Class: class}
}

func init() {
	// endtoend.table VARIANT: p50 / p96 of every configuration on both
	// topologies, all clients and Asia, beside the paper's.
	register("endtoend.table", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "beside|apart"); err != nil {
			return "", err
		}
		wp, err := c.e2e("wonderproxy")
		if err != nil {
			return "", err
		}
		syn, err := c.e2e("synthetic")
		if err != nil {
			return "", err
		}
		if e2eWho[args[0]] == "" {
			return "", fmt.Errorf("variant %q: want beside or apart", args[0])
		}
		head := []string{"request latency (s), p50 / p96, " + e2eWho[args[0]], "WonderProxy, all", "WonderProxy, Asia", "synthetic, all", "synthetic, Asia"}
		beside := args[0] == "beside"
		if beside {
			head = append(head, "paper, all", "paper, Asia")
		}
		var rows [][]string
		for i, cfg := range e2eConfigList {
			row := []string{e2eConfigs[cfg]}
			for _, r := range []*e2eReport{wp, syn} {
				x, err := r.find(cfg, args[0])
				if err != nil {
					return "", err
				}
				row = append(row, secs(x.AllP50)+" / "+secs(x.AllP96), secs(x.RegP50)+" / "+secs(x.RegP96))
			}
			if beside {
				p := wp.Paper[i]
				row = append(row, num(p.AllP50, 2)+" / "+num(p.AllP96, 2), num(p.AsiaP50, 2)+" / "+num(p.AsiaP96, 2))
			}
			rows = append(rows, row)
		}
		return table(head, rows), nil
	})

	// endtoend.ratio TOPOLOGY VARIANT CONFIG OVER [window]: one p50 over
	// another's, over the whole run (or the last window).
	register("endtoend.ratio", func(c *results, args []string) (string, error) {
		if len(args) != 4 && len(args) != 5 {
			return "", fmt.Errorf("want TOPOLOGY VARIANT CONFIG OVER [last-window]")
		}
		r, err := c.e2e(args[0])
		if err != nil {
			return "", err
		}
		a, err := r.find(args[2], args[1])
		if err != nil {
			return "", err
		}
		b, err := r.find(args[3], args[1])
		if err != nil {
			return "", err
		}
		if len(args) == 5 {
			if args[4] != "last-window" || len(a.Windows) == 0 || len(b.Windows) == 0 {
				return "", fmt.Errorf("fifth argument: last-window, with windows in the file")
			}
			return times(a.Windows[len(a.Windows)-1].P50/b.Windows[len(b.Windows)-1].P50, 1), nil
		}
		return times(a.AllP50/b.AllP50, 2), nil
	})

	// endtoend.value TOPOLOGY VARIANT CONFIG FIELD: one figure of a row:
	// p50, p96, asia-p50, asia-p96 (s), same-site (%), proxy-rtt (ms),
	// requests.
	register("endtoend.value", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 4, "TOPOLOGY VARIANT CONFIG FIELD"); err != nil {
			return "", err
		}
		r, err := c.e2e(args[0])
		if err != nil {
			return "", err
		}
		x, err := r.find(args[2], args[1])
		if err != nil {
			return "", err
		}
		switch args[3] {
		case "p50":
			return secs(x.AllP50), nil
		case "p96":
			return secs(x.AllP96), nil
		case "asia-p50":
			return secs(x.RegP50), nil
		case "asia-p96":
			return secs(x.RegP96), nil
		case "same-site":
			return pct(x.SameSite, 0), nil
		case "proxy-rtt":
			return ms(1000*x.ProxyRTT) + " ms", nil
		case "requests":
			return count(x.Requests), nil
		case "minutes":
			return num(r.Params.Duration.Minutes(), 0), nil
		}
		return "", fmt.Errorf("field %q: want p50, p96, asia-p50, asia-p96, same-site, proxy-rtt, requests or minutes", args[3])
	})

	// endtoend.share TOPOLOGY VARIANT CONFIG SCOPE DIM CLASS...: the share
	// of requests in a breakdown class (the class's words after DIM;
	// "_" for spaces is not needed: the rest of the arguments are joined).
	register("endtoend.share", func(c *results, args []string) (string, error) {
		if len(args) < 6 {
			return "", fmt.Errorf("want TOPOLOGY VARIANT CONFIG all|region DIM CLASS")
		}
		r, err := c.e2e(args[0])
		if err != nil {
			return "", err
		}
		x, err := r.find(args[2], args[1])
		if err != nil {
			return "", err
		}
		dim := strings.ReplaceAll(args[4], "_", " ")
		return pct(x.class(args[3], dim, strings.Join(args[5:], " ")).Share, 1), nil
	})

	// endtoend.breakdown TOPOLOGY VARIANT CONFIG SCOPE DIM: the classes of
	// one breakdown dimension.
	register("endtoend.breakdown", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 5, "TOPOLOGY VARIANT CONFIG all|region DIM"); err != nil {
			return "", err
		}
		r, err := c.e2e(args[0])
		if err != nil {
			return "", err
		}
		x, err := r.find(args[2], args[1])
		if err != nil {
			return "", err
		}
		dim := strings.ReplaceAll(args[4], "_", " ")
		classes := x.Breakdown[args[3]][dim]
		if len(classes) == 0 {
			return "", fmt.Errorf("no breakdown %s / %s", args[3], dim)
		}
		var rows [][]string
		for _, cl := range classes {
			rows = append(rows, []string{cl.Class, pct(cl.Share, 1), secs(cl.P50), secs(cl.P96), ms(1000 * cl.ProxyRTT), pct(cl.Tail, 0)})
		}
		return table([]string{dim + " (" + e2eConfigs[args[2]] + ")", "share of requests", "p50 (s)", "p96 (s)", "client–proxy RTT p50 (ms)", "share of the slowest 4 %"}, rows), nil
	})

	// endtoend.stability: the p50 ratios by window and up to each
	// window's end, both topologies, both variants.
	register("endtoend.stability", func(c *results, args []string) (string, error) {
		var rows [][]string
		var ends []float64
		for _, topo := range []string{"wonderproxy", "synthetic"} {
			r, err := c.e2e(topo)
			if err != nil {
				return "", err
			}
			for _, rt := range r.Ratios {
				x, _ := r.find("single", "beside")
				if x != nil && len(ends) == 0 {
					for _, w := range x.Cum {
						ends = append(ends, w.End)
					}
				}
				row := []string{r.Topology, rt.Variant, rt.Config + " / " + rt.Over, times(rt.Whole, 2)}
				var each, upTo []string
				for k := range rt.Windows {
					each = append(each, num(rt.Windows[k], 1))
					upTo = append(upTo, num(rt.Cumulative[k], 1))
				}
				row = append(row, strings.Join(each, ", "), strings.Join(upTo, ", "))
				rows = append(rows, row)
			}
		}
		var endNames []string
		for _, e := range ends {
			endNames = append(endNames, num(e, 0))
		}
		return table([]string{"topology", "clients", "p50 ratio", "whole run",
			"each window (ending at minute " + strings.Join(endNames, ", ") + ")", "up to each window's end"}, rows), nil
	})

	// endtoend.traces: what the traces heard, both topologies.
	register("endtoend.traces", func(c *results, args []string) (string, error) {
		var rows [][]string
		for _, topo := range []string{"wonderproxy", "synthetic"} {
			r, err := c.e2e(topo)
			if err != nil {
				return "", err
			}
			st := r.Startup["multi-level"]
			rows = append(rows, []string{r.Topology, "nodes' start-up traces (first hops toward the bootstrap node)", count(st.Traces), outcomes(st.Outcomes, st.Traces)})
			for _, v := range []string{"beside", "apart"} {
				x, err := r.find("traceroute", v)
				if err != nil {
					return "", err
				}
				n := 0
				for _, k := range x.Traces {
					n += k
				}
				rows = append(rows, []string{r.Topology, "name servers' traces toward the resolvers of " + e2eWho[v], count(n), outcomes(x.Traces, n)})
			}
		}
		return table([]string{"topology", "traces", "number", "outcomes"}, rows), nil
	})

	// endtoend.sensitivity FILE...: multi-level against traceroute for
	// clients sharing no prefix, under other rates of the router model.
	register("endtoend.sensitivity", func(c *results, args []string) (string, error) {
		files := append([]string{"endtoend-synthetic.json"}, args...)
		var rows [][]string
		for _, f := range files {
			var r e2eReport
			if err := c.load(f, &r); err != nil {
				return "", err
			}
			m, err1 := r.find("multi", "apart")
			t, err2 := r.find("traceroute", "apart")
			if err := firstErr(err1, err2); err != nil {
				return "", fmt.Errorf("%s: %w", f, err)
			}
			rp := r.Params.Route
			n := 0
			for _, k := range t.Traces {
				n += k
			}
			isps := fmt.Sprintf("%d ISPs", rp.ISPs)
			if rp.ISPs == 1 {
				isps = "1 ISP"
			}
			rows = append(rows, []string{"`" + f + "`", fmt.Sprintf("%s, %s silent, %s answer echo", isps, pct(rp.Silent, 0), pct(rp.ClientEcho, 0)),
				secs(m.AllP50) + " / " + secs(m.AllP96), secs(t.AllP50) + " / " + secs(t.AllP96), times(m.AllP50/t.AllP50, 2),
				pct(m.SameSite, 0) + " / " + pct(t.SameSite, 0), outcomes(t.Traces, n)})
		}
		return table([]string{"file (synthetic world)", "routers: ISPs per site, silent, clients answering echo", "multi-level p50 / p96 (s)",
			"traceroute p50 / p96 (s)", "multi-level over traceroute, p50", "proxy at the client's site, multi-level / traceroute", "traces toward resolvers"}, rows), nil
	})

	// endtoend.order VARIANT: the configurations from fastest to slowest,
	// at the median and the p96, on each topology.
	register("endtoend.order", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "beside|apart"); err != nil {
			return "", err
		}
		var parts []string
		for _, topo := range []string{"wonderproxy", "synthetic"} {
			r, err := c.e2e(topo)
			if err != nil {
				return "", err
			}
			var rows []*e2eResult
			for _, cfg := range e2eConfigList {
				x, err := r.find(cfg, args[0])
				if err != nil {
					return "", err
				}
				rows = append(rows, x)
			}
			for _, pc := range []string{"p50", "p96"} {
				val := func(x *e2eResult) float64 {
					if pc == "p50" {
						return x.AllP50
					}
					return x.AllP96
				}
				sorted := slices.Clone(rows)
				slices.SortStableFunc(sorted, func(a, b *e2eResult) int {
					switch {
					case val(a) < val(b):
						return -1
					case val(a) > val(b):
						return 1
					}
					return 0
				})
				var names []string
				for _, x := range sorted {
					names = append(names, strings.TrimPrefix(x.Config, "multi-level, ")+" "+secs(val(x))+" s")
				}
				parts = append(parts, fmt.Sprintf("%s, %s: %s", topoName(topo), pc, strings.Join(names, " < ")))
			}
		}
		return strings.Join(parts, "; "), nil
	})

	// endtoend.region TOPOLOGY: the region the tables break out.
	register("endtoend.region", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "TOPOLOGY"); err != nil {
			return "", err
		}
		r, err := c.e2e(args[0])
		if err != nil {
			return "", err
		}
		return r.Region, nil
	})

	// endtoend.model: the router model's rates and the workload, in a
	// sentence.
	register("endtoend.model", func(c *results, args []string) (string, error) {
		r, err := c.e2e("synthetic")
		if err != nil {
			return "", err
		}
		rp := r.Params.Route
		return fmt.Sprintf("%d access ISPs per site, %s of routers silent, %s of client-side hosts answering echo, "+
			"ICMP errors limited to a burst of %s then %s a second per source and %s then %s a second in all, traces cut off after %v, "+
			"start-up traces over %d hops, name servers keeping the last %d routers",
			rp.ISPs, pct(rp.Silent, 0), pct(rp.ClientEcho, 0), num(rp.ICMPBurst, 0), num(rp.ICMPPerSecond, 0),
			num(rp.ICMPGlobalBurst, 0), num(rp.ICMPGlobalPerSecond, 0), dur(rp.TraceTimeout), rp.HintHops, rp.LastHops), nil
	})

	// endtoend.workload: the workload in a sentence.
	register("endtoend.workload", func(c *results, args []string) (string, error) {
		r, err := c.e2e("synthetic")
		if err != nil {
			return "", err
		}
		p := r.Params
		return fmt.Sprintf("%d nodes (%d per site), each a DSHT node, a name server and a proxy; one origin behind a %s kbit/s line serving %d files of %s bytes, "+
			"%d on each of %d pages; every client starts within %v and fetches the %d files of a random page, over fresh connections, "+
			"every %s on average (exponential) for %s; proxies send at %s Mbit/s. Each network clusters for %s first; the report gives the latencies also by windows of %s",
			r.N, r.PerSite, num(p.OriginBW*8/1000, 0), p.Pages*p.PerPage, count(p.Size), p.PerPage, p.Pages, dur(p.Jitter), p.PerPage,
			dur(p.Think), dur(p.Duration), num(p.ProxyBW*8/1e6, 0), dur(p.Warmup), dur(p.Window)), nil
	})
}

// outcomes formats trace outcomes as shares, largest first.
func outcomes(m map[string]int, n int) string {
	type kv struct {
		k string
		v int
	}
	var l []kv
	for k, v := range m {
		l = append(l, kv{k, v})
	}
	slices.SortFunc(l, func(a, b kv) int {
		if a.v != b.v {
			return b.v - a.v
		}
		return strings.Compare(a.k, b.k)
	})
	var parts []string
	for _, e := range l {
		parts = append(parts, fmt.Sprintf("%s %s", e.k, pct(float64(e.v)/float64(max(n, 1)), 0)))
	}
	return strings.Join(parts, ", ")
}
