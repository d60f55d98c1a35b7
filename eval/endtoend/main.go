// Command endtoend reproduces Figure 5 of the Coral paper (NSDI'04 §6.2):
// the end-to-end latency of a client fetching a Coralized URL (resolve the
// name, connect to the proxy it got, the proxy serves the object), with a
// single-level network, a multi-level one, and a multi-level one whose DNS
// servers map clients with a trace toward them and locality hints.
//
//	go run ./eval/endtoend [-topology synthetic|wonderproxy] [-name endtoend] [-n 168] [-persite 2]
//	                       [-configs 0,1,2] [-variants 0,1] [-duration 30m] [-out docs/eval]
//
// It runs in virtual time on coraldht's in-memory network with latencies
// from the WonderProxy RTT matrix (CORAL_RTT_DATA names it) or the
// synthetic world. Every node runs a Coral name server (the coral plugin's
// own handler, built by coral.New: nameserver.go) and a proxy. Each client sits beside a
// node, as in the paper (same host and /24), or, in the second variant, at
// the same site in a /24 no node is in. Traces, the nodes' start-up traces
// that decide their locality hints and the name servers' traces toward
// clients, walk a router-level model of the paths hop by hop, with silent
// routers, ICMP rate limits and clients that do not answer echo
// (routes.go). See docs/evaluation.md for what is real and what is
// modelled.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/sim"
	"github.com/coralcdn/coral/eval/internal/topology"
	"github.com/coralcdn/coral/eval/internal/vtime"
)

// params are the paper's workload (§6): one origin behind a 384 kbit/s
// DSL line serving 12 files of 41 KB, three images on each of four pages;
// every client, after a random delay of up to 180 s, fetches the three
// images of a random page again and again for 30 minutes.
type params struct {
	N        int           // nodes (the paper had 166)
	PerSite  int           // nodes per site
	Pages    int           // pages, each of PageObjects objects
	PerPage  int           // objects per page
	Size     int           // bytes per object
	OriginBW float64       // bytes per second from the origin
	ProxyBW  float64       // bytes per second from a proxy
	Think    time.Duration // mean pause between a client's pages
	Jitter   time.Duration // clients start uniformly over this
	Duration time.Duration // each client fetches pages for this long
	Warmup   time.Duration // virtual time for clustering before the DNS servers start
	Seed     uint64
	Out      string
	// Name is the stem of the output files: NAME.json, NAME.png and
	// NAME-region.png.
	Name string
	// Topology names the RTT matrix (topology.Named).
	Topology string
	// Window is the length of the slices of the run whose latencies the
	// report gives apart, to show whether the run was long enough.
	Window time.Duration
	Route  routeParams
	// Configs and Variants select what to run, indices into configs and
	// variants (all by default); fewer make a cheaper run for iterating.
	Configs  []int
	Variants []int
}

func defaultParams() params {
	return params{N: 168, PerSite: 2, Pages: 4, PerPage: 3, Size: 41 << 10, OriginBW: 384e3 / 8, ProxyBW: 10e6 / 8,
		Think: 10 * time.Second, Jitter: 180 * time.Second, Duration: 30 * time.Minute,
		Warmup: 6 * coraldht.DefaultConfig().ClusterInterval, Seed: 1, Out: "docs/eval", Name: "endtoend",
		Topology: topology.NameAuto, Window: 5 * time.Minute, Route: defaultRouteParams(),
		Configs: []int{0, 1, 2}, Variants: []int{0, 1}}
}

// indexList parses "0,2" into indices below n.
func indexList(s string, n int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		var i int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &i); err != nil || i < 0 || i >= n {
			return nil, fmt.Errorf("%q: want indices 0..%d separated by commas", s, n-1)
		}
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out, nil
}

func main() {
	p := defaultParams()
	flag.IntVar(&p.N, "n", p.N, "nodes (at least 166, as in the paper, for the figure)")
	flag.IntVar(&p.PerSite, "persite", p.PerSite, "nodes per site")
	flag.DurationVar(&p.Jitter, "jitter", p.Jitter, "clients start uniformly over this")
	flag.DurationVar(&p.Think, "think", p.Think, "mean pause between a client's pages")
	flag.DurationVar(&p.Duration, "duration", p.Duration, "virtual time each client fetches pages")
	flag.DurationVar(&p.Warmup, "warmup", p.Warmup, "virtual time each network clusters before the clients start")
	flag.Uint64Var(&p.Seed, "seed", p.Seed, "random seed")
	flag.StringVar(&p.Out, "out", p.Out, "directory for NAME.json and the PNG figures")
	flag.StringVar(&p.Name, "name", p.Name, "stem of the output files: NAME.json, NAME.png, NAME-region.png")
	flag.StringVar(&p.Topology, "topology", p.Topology, "RTT matrix: synthetic, wonderproxy ($CORAL_RTT_DATA) or auto")
	flag.DurationVar(&p.Window, "window", p.Window, "slices of the run whose latencies are reported apart (stability)")
	flag.IntVar(&p.Route.ISPs, "isps", p.Route.ISPs, "access ISPs per site (a client network shares the nodes' with probability 1/isps)")
	flag.Float64Var(&p.Route.Silent, "silent", p.Route.Silent, "share of routers that never answer a trace's probes")
	flag.Float64Var(&p.Route.ClientEcho, "echo", p.Route.ClientEcho, "share of hosts in client networks that answer ICMP echo")
	cfgs := flag.String("configs", "0,1,2", "configurations to run: 0 single-level, 1 multi-level, 2 multi-level, traceroute")
	vars := flag.String("variants", "0,1", "client variants to run: 0 beside a proxy, 1 no shared prefix")
	flag.Parse()
	var err error
	if p.Configs, err = indexList(*cfgs, len(configs)); err == nil {
		p.Variants, err = indexList(*vars, len(variants))
	}
	if err == nil {
		err = p.Route.validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "endtoend:", err)
		os.Exit(2)
	}
	vtime.Main(func() error {
		_, err := experiment(p)
		return err
	})
}

const zone = "nyucd.net."

// configuration names, in the paper's order.
var configs = []string{"single-level", "multi-level", "multi-level, traceroute"}

// variants: where the clients are.
var variants = []string{"beside a proxy", "no shared prefix"}

type report struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Topology   string              `json:"topology"`
	N          int                 `json:"n"`
	PerSite    int                 `json:"nodes_per_site"`
	Clients    int                 `json:"clients"`
	Region     string              `json:"region"`
	Params     params              `json:"params"`
	Results    []*runResult        `json:"results"`
	Paper      []paperResult       `json:"paper"`
	// Ratio is single-level p50 over traceroute p50, all clients beside a
	// proxy (paper: 0.79/0.19 = 4.2).
	Ratio float64 `json:"single_over_traceroute_p50"`
	// Ratios are the same for every pair of configurations run, per
	// client variant, over the whole run and over each window.
	Ratios []ratio `json:"ratios"`
	// StartupTraces says what the nodes' start-up traces heard, by
	// network (single-level, multi-level).
	StartupTraces map[string]traceSummary `json:"startup_traces"`
	Wall          float64                 `json:"wall_seconds"`
	PeakRSS       uint64                  `json:"peak_rss_bytes"`
}

// ratio is one configuration's p50 over another's.
type ratio struct {
	Of      string    `json:"config"`
	Over    string    `json:"over"`
	Variant string    `json:"variant"`
	Whole   float64   `json:"whole_run"`
	Windows []float64 `json:"by_window"`
	// Cumulative is the ratio over the run up to the end of each window.
	Cumulative []float64 `json:"cumulative"`
}

// traceSummary counts traces by outcome, and the routers they heard.
type traceSummary struct {
	Traces   int            `json:"traces"`
	Outcomes map[string]int `json:"outcomes"`
	// RoutersHeard is how many traces heard 0, 1, … routers.
	RoutersHeard []int `json:"routers_heard"`
	// Kinds counts the routers heard by kind (gateway, aggregation, …).
	Kinds map[string]int `json:"kinds_heard"`
}

type paperResult struct {
	Config                           string
	AllP50, AllP96, AsiaP50, AsiaP96 float64
}

var paper = []paperResult{
	{"single-level", 0.79, 9.54, 2.52, 8.01},
	{"multi-level", 0.31, 4.17, 0.04, 4.16},
	{"multi-level, traceroute", 0.19, 2.50, 0.03, 1.75},
}

type runResult struct {
	Config   string         `json:"config"`
	Variant  string         `json:"variant"`
	Requests int            `json:"requests"`
	Failed   int            `json:"failed"`
	Sources  map[string]int `json:"served_from"`
	// Latencies in seconds, failed requests left out.
	AllP50        float64 `json:"all_p50_s"`
	AllP96        float64 `json:"all_p96_s"`
	RegionP50     float64 `json:"region_p50_s"`
	RegionP96     float64 `json:"region_p96_s"`
	RegionN       int     `json:"region_requests"`
	DNSP50        float64 `json:"dns_p50_s"`
	ProxyRTTP50   float64 `json:"client_proxy_rtt_p50_s"`
	SameSiteShare float64 `json:"proxy_at_client_site_share"`
	// Breakdown classifies the requests by how their proxy was chosen.
	Breakdown breakdown `json:"breakdown"`
	// Windows are the latencies over consecutive slices of the run
	// (params.Window long, by the request's start), and Cumulative over
	// the run up to the end of each slice.
	Windows    []window `json:"windows"`
	Cumulative []window `json:"cumulative"`
	// Traces counts the name servers' traces toward clients by outcome.
	Traces map[string]int `json:"traces"`

	all, region []float64
}

// window is a slice of a run.
type window struct {
	EndMinutes float64 `json:"end_minutes"`
	Requests   int     `json:"requests"`
	P50        float64 `json:"p50_s"`
	P96        float64 `json:"p96_s"`
}

func experiment(p params) (*report, error) {
	wallStart := sim.WallNow()
	m, err := topology.Named(p.Topology, p.Seed)
	if err != nil {
		return nil, err
	}
	prov := evalrun.StartProvenance("endtoend", m.Source)
	w := newWorld(m, p.Route, p.Seed)
	region := asiaName(m)
	rep := &report{Provenance: prov, Topology: m.Source, N: p.N, PerSite: p.PerSite, Params: p, Region: region, Paper: paper,
		StartupTraces: map[string]traceSummary{}}
	fmt.Printf("End-to-end latency (paper Fig. 5): %d nodes, %d per site, topology %s (%s); region %q\n",
		p.N, p.PerSite, m.Source, m.Stats(), region)
	fmt.Println(prov)
	for _, multi := range []bool{false, true} {
		if !slices.Contains(p.Configs, 0) && !multi || !slices.Contains(p.Configs, 1) && !slices.Contains(p.Configs, 2) && multi {
			continue
		}
		res, st, err := runNetwork(m, w, p, multi, region)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, res...)
		rep.StartupTraces[networkName(multi)] = st
	}
	rep.Clients = p.N
	if s, t := find(rep, configs[0], variants[0]), find(rep, configs[2], variants[0]); s != nil && t != nil && t.AllP50 > 0 {
		rep.Ratio = s.AllP50 / t.AllP50
	}
	rep.Ratios = ratios(rep)
	printTable(rep)
	rep.Wall = sim.WallNow().Sub(wallStart).Seconds()
	rep.PeakRSS = sim.PeakRSS()
	fmt.Printf("Wall time %.0f s, peak RSS %.0f MiB\n", rep.Wall, float64(rep.PeakRSS)/(1<<20))
	prov.Finish()
	if err := sim.WriteJSON(filepath.Join(p.Out, p.Name+".json"), rep); err != nil {
		return nil, err
	}
	if err := plotCDFs(p.Out, p.Name, rep); err != nil {
		return nil, err
	}
	fmt.Printf("Wrote %s/%s.json, %[2]s.png and %[2]s-region.png\n", p.Out, p.Name)
	return rep, nil
}

func networkName(multi bool) string {
	if multi {
		return "multi-level"
	}
	return "single-level"
}

// ratios are, per client variant, each configuration's p50 over each
// faster one's: over the whole run, per window and cumulatively.
func ratios(rep *report) []ratio {
	var out []ratio
	for _, v := range variants {
		for i := range configs {
			for j := i + 1; j < len(configs); j++ {
				a, b := find(rep, configs[i], v), find(rep, configs[j], v)
				if a == nil || b == nil || b.AllP50 <= 0 {
					continue
				}
				r := ratio{Of: a.Config, Over: b.Config, Variant: v, Whole: a.AllP50 / b.AllP50}
				for k := range min(len(a.Windows), len(b.Windows)) {
					r.Windows = append(r.Windows, safeRatio(a.Windows[k].P50, b.Windows[k].P50))
					r.Cumulative = append(r.Cumulative, safeRatio(a.Cumulative[k].P50, b.Cumulative[k].P50))
				}
				out = append(out, r)
			}
		}
	}
	return out
}

func safeRatio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// asiaName names the region the table breaks out: Asia. The synthetic
// world has it as a continent; the WonderProxy data puts Europe and Asia
// together, so there it is the sites of that continent east of 60°E.
func asiaName(m *topology.Matrix) string {
	if m.Source == topology.SourceSynthetic {
		return "Asia"
	}
	return "Asia (east of 60°E)"
}

func inRegion(m *topology.Matrix, site int) bool {
	s := m.Sites[site]
	return s.Continent == "Asia" || (strings.Contains(s.Continent, "Asia") && s.Lon >= 60)
}

func find(rep *report, config, variant string) *runResult {
	for _, r := range rep.Results {
		if r.Config == config && r.Variant == variant {
			return r
		}
	}
	return nil
}

// runNetwork builds one network (single-level, or multi-level), warms it
// up, and runs its configurations for both client variants, each with its
// own name servers, resolvers, proxy caches and URLs.
func runNetwork(m *topology.Matrix, w *world, p params, multi bool, region string) ([]*runResult, traceSummary, error) {
	wallStart := sim.WallNow()
	placed := m.Place(p.N, p.PerSite, p.Seed)
	for _, n := range placed {
		w.place(n.Addr.Addr(), n.Site)
	}
	// Each node's start-up trace toward its bootstrap node decides the
	// routers it publishes hints under: as if every node were configured
	// with node 0 as its bootstrap (node 0 with node 1).
	st := traceSummary{Outcomes: map[string]int{}, Kinds: map[string]int{}}
	hints := make([][]netip.Prefix, len(placed))
	if multi {
		for i, n := range placed {
			boot := placed[0].Addr.Addr()
			if i == 0 {
				boot = placed[1].Addr.Addr()
			}
			var tr traceResult
			hints[i], tr = w.startupHints(n.Addr.Addr(), boot, time.Now())
			st.add(tr)
		}
	}
	s, err := sim.Start(sim.Options{N: p.N, PerSite: p.PerSite, Seed: p.Seed, Matrix: m,
		Tweak: func(i int, c *coraldht.Config) {
			if multi {
				c.HintPrivate = true // the sim's 10.x.y.0/24 per site are meaningful hints
				c.HintPrefixes = hints[i]
			} else {
				c.Levels = nil
			}
			c.Services = coraldht.ServiceDNS | coraldht.ServiceHTTP
		}})
	if err != nil {
		return nil, st, err
	}
	defer s.Close()
	levels := len(s.Nodes[0].Levels())
	fmt.Printf("network %d levels: %d nodes joined; warming up %v (wall %.0f s)\n", levels, p.N, p.Warmup, sim.WallNow().Sub(wallStart).Seconds())
	time.Sleep(p.Warmup)
	var out []*runResult
	var names []string
	for _, ci := range p.Configs {
		if (ci > 0) == multi {
			names = append(names, configs[ci])
		}
	}
	for _, cfg := range names {
		for _, vi := range p.Variants {
			variant := variants[vi]
			r, err := runConfig(s, w, p, cfg, vi, region)
			if err != nil {
				return nil, st, err
			}
			r.Variant = variant
			out = append(out, r)
			fmt.Printf("  %-24s %-17s p50 %.3f s  p96 %.3f s  %s p50 %.3f s  p96 %.3f s  (wall %.0f s)\n", cfg, variant,
				r.AllP50, r.AllP96, region, r.RegionP50, r.RegionP96, sim.WallNow().Sub(wallStart).Seconds())
		}
	}
	return out, st, nil
}

// add counts one trace.
func (st *traceSummary) add(r traceResult) {
	st.Traces++
	st.Outcomes[r.outcome()]++
	for len(st.RoutersHeard) <= len(r.routers) {
		st.RoutersHeard = append(st.RoutersHeard, 0)
	}
	st.RoutersHeard[len(r.routers)]++
	for _, k := range r.kinds {
		st.Kinds[k]++
	}
}

// runConfig starts the name servers for one configuration, lets them sweep,
// and has every client fetch its requests.
func runConfig(s *sim.Sim, w *world, p params, cfg string, variant int, region string) (*runResult, error) {
	var levels []time.Duration
	if len(s.Nodes[0].Levels()) > 1 {
		levels = coraldht.DefaultConfig().Levels
	}
	servers := map[netip.Addr]*simulated{}
	proxies := map[netip.Addr]*proxy{}
	var all []netip.Addr
	for _, n := range s.Nodes {
		a := n.Addr().Addr()
		o := simOptions{Zone: zone, Levels: levels, Probe: w.prober(a), NoTarget: cfg != configs[2],
			CheckInterval: 10 * time.Second, LiveWithin: 30 * time.Second}
		if cfg == configs[2] {
			o.Trace = w.tracer(a)
		}
		srv, err := newSimulated(n, o)
		if err != nil {
			return nil, err
		}
		servers[a] = srv
		proxies[a] = &proxy{node: n, addr: a, ready: map[string]*fetch{}}
		all = append(all, a)
	}
	defer func() {
		for _, srv := range servers {
			srv.Close()
		}
	}()
	time.Sleep(30 * time.Second) // the first sweeps

	tag := strings.NewReplacer(" ", "", ",", "", "-", "").Replace(cfg) + fmt.Sprint(variant)
	rng := rand.New(rand.NewPCG(p.Seed, uint64(len(tag))*7919+uint64(variant)))
	// A name and URLs of their own per run: the DSHT outlives the runs.
	host := "www.origin-" + tag + ".example.com"
	originSite := rng.IntN(w.m.Len())
	rn := &run{w: w, proxies: proxies, origin: w.place(siteAddr(14, originSite, byte(1+variant)), originSite),
		size: p.Size, proxyBW: p.ProxyBW, originBW: p.OriginBW, putTTL: time.Hour}
	name := host + ".http." + levelLabels(len(levels)+1) + zone
	// The parent zone delegates to a few servers anywhere, as the paper's
	// nyucd.net did.
	parent := make([]netip.Addr, 0, 4)
	for _, i := range rng.Perm(len(all))[:4] {
		parent = append(parent, all[i])
	}

	w.mu.Lock()
	w.traceCount = map[string]int{}
	w.mu.Unlock()
	var mu sync.Mutex
	var samples []sample
	failed, requests := 0, 0
	var wg sync.WaitGroup
	// Every client and resolver is placed before any of them starts: the
	// world's address book is read without a lock.
	first := byte(10)
	if variant == 1 {
		first = 11
	}
	clients := make([]netip.Addr, len(s.Placed))
	resolvers := make([]*resolver, len(s.Placed))
	for i, n := range s.Placed {
		h := n.Addr.Addr().As4()[3]
		clients[i] = w.place(siteAddr(first, n.Site, 100+h), n.Site)
		resolvers[i] = newResolver(w.place(siteAddr(first, n.Site, 200+h), n.Site), w, servers, zone, parent, p.Seed*1000+uint64(i))
	}
	begin := time.Now()
	for i, n := range s.Placed {
		site, client, res := n.Site, clients[i], resolvers[i]
		crng := rand.New(rand.NewPCG(p.Seed, uint64(i)+1000*uint64(variant+1)))
		wg.Go(func() {
			time.Sleep(time.Duration(crng.Int64N(int64(p.Jitter))))
			end := time.Now().Add(p.Duration)
			for time.Now().Before(end) {
				page := crng.IntN(p.Pages)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				t0 := time.Now()
				addrs, info, err := res.resolve(ctx, name)
				dnsTime := time.Since(t0)
				mu.Lock()
				requests += p.PerPage
				mu.Unlock()
				if err != nil || len(addrs) == 0 {
					mu.Lock()
					failed += p.PerPage
					mu.Unlock()
				} else {
					// The browser connects to the first address, one
					// connection per image, all at once.
					px := proxies[addrs[0]]
					rtt := w.rtt(client, px.addr)
					var pg sync.WaitGroup
					for k := range p.PerPage {
						pg.Go(func() {
							url := fmt.Sprintf("http://%s/page%d/img%d.jpg", host, page, k)
							time.Sleep(2 * rtt) // connect, request
							src := rn.serve(ctx, px, url)
							time.Sleep(rn.transfer(rtt, p.ProxyBW))
							sm := sample{at: t0.Sub(begin), lat: time.Since(t0), dns: dnsTime, proxyRTT: rtt, serverRTT: w.rtt(res.addr, info.server),
								src: src, region: inRegion(w.m, site), sameSite: w.site[px.addr] == site}
							w.describe(&sm, site, px.addr, res.addr, info)
							mu.Lock()
							samples = append(samples, sm)
							mu.Unlock()
						})
					}
					pg.Wait()
				}
				cancel()
				time.Sleep(time.Duration(crng.ExpFloat64() * float64(p.Think)))
			}
		})
	}
	wg.Wait()

	r := &runResult{Config: cfg, Requests: requests, Failed: failed, Sources: map[string]int{}}
	var dnsT, prox []float64
	same := 0
	for _, sm := range samples {
		r.Sources[sm.src]++
		r.all = append(r.all, sm.lat.Seconds())
		dnsT = append(dnsT, sm.dns.Seconds())
		prox = append(prox, sm.proxyRTT.Seconds())
		if sm.region {
			r.region = append(r.region, sm.lat.Seconds())
		}
		if sm.sameSite {
			same++
		}
	}
	for _, l := range [][]float64{r.all, r.region, dnsT, prox} {
		slices.Sort(l)
	}
	r.AllP50, r.AllP96 = sim.Percentile(r.all, 50), sim.Percentile(r.all, 96)
	r.RegionP50, r.RegionP96, r.RegionN = sim.Percentile(r.region, 50), sim.Percentile(r.region, 96), len(r.region)
	r.DNSP50, r.ProxyRTTP50 = sim.Percentile(dnsT, 50), sim.Percentile(prox, 50)
	if len(samples) > 0 {
		r.SameSiteShare = float64(same) / float64(len(samples))
	}
	r.Breakdown = breakDown(samples)
	r.Windows, r.Cumulative = windows(samples, p.Window, p.Jitter+p.Duration)
	w.mu.Lock()
	r.Traces = w.traceCount
	w.mu.Unlock()
	return r, nil
}

// windows are the latencies of the requests started in each slice of
// length win of a run of length total, and of those started up to each
// slice's end.
func windows(samples []sample, win, total time.Duration) (each, upTo []window) {
	if win <= 0 {
		return nil, nil
	}
	n := int((total + win - 1) / win)
	slots := make([][]float64, n)
	for _, sm := range samples {
		k := min(int(sm.at/win), n-1)
		slots[k] = append(slots[k], sm.lat.Seconds())
	}
	var acc []float64
	for k, l := range slots {
		end := (time.Duration(k+1) * win).Minutes()
		slices.Sort(l)
		each = append(each, window{EndMinutes: end, Requests: len(l), P50: sim.Percentile(l, 50), P96: sim.Percentile(l, 96)})
		acc = append(acc, l...)
		sorted := slices.Sorted(slices.Values(acc))
		upTo = append(upTo, window{EndMinutes: end, Requests: len(sorted), P50: sim.Percentile(sorted, 50), P96: sim.Percentile(sorted, 96)})
	}
	return each, upTo
}

func fmtRatios(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " ")
}

// levelLabels is "l<n-1>.….l0." for n levels.
func levelLabels(n int) string {
	var b strings.Builder
	for k := n - 1; k >= 0; k-- {
		fmt.Fprintf(&b, "l%d.", k)
	}
	return b.String()
}

func printTable(rep *report) {
	fmt.Printf("\nRequest latency (s)            all clients        %-18s  paper all      paper Asia\n", rep.Region)
	fmt.Printf("%-26s %-17s  p50     p96       p50     p96        p50    p96     p50    p96\n", "configuration", "clients")
	for _, v := range variants {
		for i, c := range configs {
			r := find(rep, c, v)
			if r == nil {
				continue
			}
			pp := paper[i]
			fmt.Printf("%-26s %-17s  %.3f   %.3f     %.3f   %.3f      %.2f   %.2f    %.2f   %.2f\n", c, v,
				r.AllP50, r.AllP96, r.RegionP50, r.RegionP96, pp.AllP50, pp.AllP96, pp.AsiaP50, pp.AsiaP96)
		}
	}
	fmt.Printf("\nsingle-level p50 / traceroute p50, clients beside a proxy: %.1f× (paper 4.2×)\n", rep.Ratio)
	fmt.Printf("p50 ratios, whole run; per %v window; up to each window's end:\n", rep.Params.Window)
	for _, r := range rep.Ratios {
		fmt.Printf("  %-24s / %-24s %-17s %5.2f;  %s;  %s\n", r.Of, r.Over, r.Variant, r.Whole, fmtRatios(r.Windows), fmtRatios(r.Cumulative))
	}
	for name, st := range rep.StartupTraces {
		fmt.Printf("start-up traces, %s network: %d, outcomes %v, routers heard (0, 1, …) %v, by kind %v\n",
			name, st.Traces, st.Outcomes, st.RoutersHeard, st.Kinds)
	}
	for _, r := range rep.Results {
		fmt.Printf("  %-24s %-17s failed %d/%d, proxy at the client's site %.0f%%, DNS p50 %.3f s, client–proxy RTT p50 %.4f s, served from %v\n",
			r.Config, r.Variant, r.Failed, r.Requests, 100*r.SameSiteShare, r.DNSP50, r.ProxyRTTP50, r.Sources)
	}
	for _, r := range rep.Results {
		if len(r.Traces) > 0 {
			fmt.Printf("  %-24s %-17s name servers' traces toward clients: %v\n", r.Config, r.Variant, r.Traces)
		}
	}
	fmt.Printf("\nBreakdown of the requests by how their proxy was chosen:\n")
	for _, r := range rep.Results {
		printBreakdown(r, rep.Region)
	}
}
