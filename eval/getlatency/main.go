// Command getlatency reproduces Figure 6 of the Coral paper (NSDI'04 §6.3):
// the latency of DSHT gets under a flash-crowd-like workload, on a
// single-level network (level 0 only) and on the default three-level
// hierarchy (RTT thresholds ∞, 60 ms, 20 ms), with the same nodes, keys and
// requests.
//
//	go run ./eval/getlatency [-topology auto] [-name getlatency] [-n 0] [-keys 12] [-gets 10] [-warmup 30m] [-out docs/eval]
//	go run ./eval/getlatency -workload zipf [-keys 1000] [-putters 3] [-zipf-s 0.9]
//
// Each network first runs for a warm-up (six clustering periods by default)
// so the multi-level one can form its clusters. Then, for each of a dozen
// popular keys (think URLs), a random quarter of the nodes put their address
// under it, the way proxies that cached a URL advertise themselves, and every
// node issues a few gets for keys it did not put, spread over a few virtual
// minutes. That is the paper workload (-workload paper), in which a
// quarter of the nodes hold every key, so most gets find a copy nearby.
// Beside it, -workload zipf: many keys whose popularity follows Zipf's
// law, each put by a few nodes, and every node's gets drawn by popularity.
// It runs in virtual time on coraldht's in-memory network with
// latencies from the WonderProxy RTT matrix (or a synthetic one), 3 nodes
// per site; each site owns its own /24, so with HintPrivate the multi-level
// nodes find their site neighbours through the /24 locality hints.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/sim"
	"github.com/coralcdn/coral/eval/internal/topology"
	"github.com/coralcdn/coral/eval/internal/vtime"
)

// params describes one run of the experiment. The flags fill it in main;
// the test builds its own.
type params struct {
	N           int           // nodes; 0 means PerSite per site of the topology
	PerSite     int           // nodes per site
	Keys        int           // popular keys
	PutFraction float64       // share of the nodes that put each key
	GetsPerNode int           // gets each node issues
	Spread      time.Duration // the gets start uniformly over this window
	Warmup      time.Duration // virtual time before the puts, for clustering
	Parallel    int           // most puts or gets in flight at once
	Seed        uint64        // topology, placement and workload
	Out         string        // directory for NAME.json and NAME.png
	Name        string        // stem of the output files
	Topology    string        // RTT matrix (topology.Named)
	// Workload is workPaper (PutFraction of the nodes put each key, keys
	// got uniformly) or workZipf (Putters nodes put each key, keys got
	// by Zipf popularity with exponent ZipfS).
	Workload string
	Putters  int
	ZipfS    float64
}

// Workloads.
const (
	workPaper = "paper"
	workZipf  = "zipf"
)

func defaultParams() params {
	return params{
		PerSite:     3,
		Keys:        12,
		PutFraction: 0.25,
		GetsPerNode: 10,
		Spread:      5 * time.Minute,
		Warmup:      6 * coraldht.DefaultConfig().ClusterInterval,
		Parallel:    64,
		Seed:        1,
		Out:         "docs/eval",
		Name:        "getlatency",
		Topology:    "auto",
		Workload:    workPaper,
		Putters:     3,
		ZipfS:       0.9,
	}
}

func main() {
	p := defaultParams()
	flag.IntVar(&p.N, "n", 0, "nodes (0: 3 per site of the topology, 738 on WonderProxy)")
	flag.IntVar(&p.Keys, "keys", p.Keys, "popular keys")
	flag.Float64Var(&p.PutFraction, "putfrac", p.PutFraction, "share of the nodes that put each key")
	flag.IntVar(&p.GetsPerNode, "gets", p.GetsPerNode, "gets per node")
	flag.DurationVar(&p.Spread, "spread", p.Spread, "virtual time over which the gets start")
	flag.DurationVar(&p.Warmup, "warmup", p.Warmup, "virtual time each network runs before the workload (clustering converges)")
	flag.IntVar(&p.Parallel, "parallel", p.Parallel, "puts or gets in flight at once, at most")
	flag.Uint64Var(&p.Seed, "seed", p.Seed, "random seed")
	flag.StringVar(&p.Out, "out", p.Out, "directory for NAME.json and NAME.png")
	flag.StringVar(&p.Name, "name", p.Name, "stem of the output files")
	flag.StringVar(&p.Topology, "topology", p.Topology, "RTT matrix: synthetic, wonderproxy ($CORAL_RTT_DATA) or auto")
	flag.StringVar(&p.Workload, "workload", p.Workload, "paper: -putfrac of the nodes put every key; zipf: -putters nodes put each key, gets by Zipf popularity")
	flag.IntVar(&p.Putters, "putters", p.Putters, "-workload zipf: nodes that put each key")
	flag.Float64Var(&p.ZipfS, "zipf-s", p.ZipfS, "-workload zipf: exponent of the keys' popularity (key k drawn ∝ 1/k^s)")
	keysSet := false
	flag.Parse()
	flag.Visit(func(f *flag.Flag) { keysSet = keysSet || f.Name == "keys" })
	if p.Workload == workZipf && !keysSet {
		p.Keys = 1000
	}
	vtime.Main(func() error {
		_, err := experiment(p)
		return err
	})
}

// Acceptance targets (the paper reports 2–5× at the median and 80th
// percentile for an extra RPC or two).
const (
	targetSpeedup  = 2.0
	targetExtraRPC = 2
)

// latencyFloorMs keeps ratios finite and the log-scale figure drawable: a
// get answered from the node's own store takes no virtual time at all.
const latencyFloorMs = 0.1

type report struct {
	Provenance  *evalrun.Provenance `json:"provenance"`
	Workload    string              `json:"workload"`
	Putters     int                 `json:"putters_per_key,omitempty"` // zipf
	ZipfS       float64             `json:"zipf_s,omitempty"`
	Topology    string              `json:"topology"`
	N           int                 `json:"n"`
	PerSite     int                 `json:"nodes_per_site"`
	Keys        int                 `json:"keys"`
	PutFraction float64             `json:"put_fraction"`
	GetsPerNode int                 `json:"gets_per_node"`
	Spread      string              `json:"get_spread"`
	Warmup      string              `json:"warmup"`
	Seed        uint64              `json:"seed"`

	Single *netResult `json:"single"`
	Multi  *netResult `json:"multi"`

	// Single-level latency over multi-level latency at each percentile
	// (both floored at latencyFloorMs).
	SpeedupP50    float64 `json:"speedup_p50"`
	SpeedupP80    float64 `json:"speedup_p80"`
	ExtraRPCsP50  float64 `json:"extra_rpcs_p50"` // multi − single, median RPCs per get
	PassSpeedup   bool    `json:"pass_speedup_ge_2x_at_p50_and_p80"`
	PassExtraRPCs bool    `json:"pass_extra_rpcs_le_2_at_p50"`

	Wall    float64 `json:"wall_seconds"`
	PeakRSS uint64  `json:"peak_rss_bytes"`
}

// netResult is one network's run.
type netResult struct {
	Name   string         `json:"name"`
	Levels int            `json:"levels"`
	Gets   int            `json:"gets"`
	Failed int            `json:"failed"`
	Errors map[string]int `json:"failures_by_cause"`

	// Latency over all gets, failed ones included, in milliseconds.
	LatP10 float64 `json:"latency_p10_ms"`
	LatP50 float64 `json:"latency_p50_ms"`
	LatP80 float64 `json:"latency_p80_ms"`
	LatP90 float64 `json:"latency_p90_ms"`
	LatP99 float64 `json:"latency_p99_ms"`
	LatMax float64 `json:"latency_max_ms"`
	// LatPercentiles[i] is the i-th percentile, i = 0..100.
	LatPercentiles []float64 `json:"latency_percentiles_ms"`

	RPCsP50  float64 `json:"rpcs_p50"`
	RPCsP90  float64 `json:"rpcs_p90"`
	RPCsMean float64 `json:"rpcs_mean"`
	HopsP50  float64 `json:"hops_p50"`
	Local    int     `json:"answered_locally"` // from the getter's own store
	// Latency of the gets that reached another node (not answered locally):
	// the figures without the zero-latency answers.
	RemoteP50 float64 `json:"remote_latency_p50_ms"`
	RemoteP80 float64 `json:"remote_latency_p80_ms"`

	ByLevel  []levelShare   `json:"answered_by_level"` // level -1: no values
	Clusters []clusterStats `json:"clusters,omitempty"`

	Puts       int     `json:"puts"`
	PutFailed  int     `json:"put_failures"`
	PutLatP50  float64 `json:"put_latency_p50_ms"`
	PutRPCsP50 float64 `json:"put_rpcs_p50"`

	Datagrams   uint64  `json:"datagrams_sent"`
	QueueDrops  uint64  `json:"datagrams_dropped_at_full_queues"`
	WallSeconds float64 `json:"wall_seconds"`

	latencies []float64 // sorted, ms, for the figure
}

type levelShare struct {
	Level   int     `json:"level"`
	Gets    int     `json:"gets"`
	Share   float64 `json:"share"`
	LatP50  float64 `json:"latency_p50_ms"`
	RPCsP50 float64 `json:"rpcs_p50"`
}

// clusterStats describes one level's clusters after the warm-up.
type clusterStats struct {
	Level      int     `json:"level"`
	Threshold  string  `json:"threshold"`
	Clusters   int     `json:"clusters"`
	Singletons int     `json:"singleton_clusters"`
	Largest    int     `json:"largest"`
	MeanSize   float64 `json:"mean_size_seen_by_a_node"` // Σ size² / n
	// PairsUnder is the share of same-cluster node pairs whose true RTT is
	// under the level's threshold: how tight the clusters really are.
	PairsUnder float64 `json:"same_cluster_pairs_under_threshold"`
	// SiteSplit counts sites whose nodes ended up in different clusters,
	// though they are a few ms apart.
	SiteSplit int `json:"sites_split"`
	// Moved counts nodes that changed cluster in the last ClusterInterval of
	// the warm-up: a large number means clustering had not settled.
	Moved int `json:"nodes_moved_in_last_interval"`
}

// workload is the requests both networks serve, drawn once from the seed.
type workload struct {
	keys    []coraldht.ID
	putters [][]int        // per key
	gets    [][]plannedGet // per node, by start time
}

type plannedGet struct {
	at  time.Duration // after the gets begin
	key int
}

func newWorkload(p params, n int) *workload {
	rng := rand.New(rand.NewPCG(p.Seed, 6))
	w := &workload{keys: make([]coraldht.ID, p.Keys), putters: make([][]int, p.Keys), gets: make([][]plannedGet, n)}
	putBy := make([]map[int]bool, n)
	for i := range putBy {
		putBy[i] = map[int]bool{}
	}
	count := min(n, max(1, int(math.Round(p.PutFraction*float64(n)))))
	if p.Workload == workZipf {
		count = min(n, p.Putters)
	}
	for k := range w.keys {
		w.keys[k] = coraldht.KeyFor(fmt.Sprintf("http://www.example%d.com/ seed %d", k, p.Seed))
		w.putters[k] = rng.Perm(n)[:count]
		for _, i := range w.putters[k] {
			putBy[i][k] = true
		}
	}
	// A proxy that cached a URL serves it without a lookup, so a node
	// gets only keys it did not put (any key if it put them all).
	var zipf *sim.Zipf
	if p.Workload == workZipf {
		zipf = sim.NewZipf(p.Keys, p.ZipfS)
	}
	for i := range n {
		var want []int
		for k := range p.Keys {
			if !putBy[i][k] {
				want = append(want, k)
			}
		}
		if len(want) == 0 {
			want = rng.Perm(p.Keys)
		}
		for range p.GetsPerNode {
			key := want[rng.IntN(len(want))]
			if zipf != nil {
				// By popularity, among the keys it did not put.
				key = zipf.Draw(rng)
				for putBy[i][key] && len(want) < p.Keys {
					key = zipf.Draw(rng)
				}
			}
			w.gets[i] = append(w.gets[i], plannedGet{at: time.Duration(rng.Int64N(int64(max(p.Spread, 1)))), key: key})
		}
		slices.SortFunc(w.gets[i], func(a, b plannedGet) int { return cmp.Compare(a.at, b.at) })
	}
	return w
}

func experiment(p params) (*report, error) {
	wallStart := sim.WallNow()
	if p.Keys < 1 || p.GetsPerNode < 1 || !(p.PutFraction > 0 && p.PutFraction <= 1) || p.PerSite < 1 || p.Putters < 1 || p.ZipfS < 0 {
		return nil, fmt.Errorf("getlatency: need keys ≥ 1, gets ≥ 1, 0 < putfrac ≤ 1, persite ≥ 1, putters ≥ 1, zipf-s ≥ 0; have %d, %d, %g, %d, %d, %g",
			p.Keys, p.GetsPerNode, p.PutFraction, p.PerSite, p.Putters, p.ZipfS)
	}
	if p.Workload != workPaper && p.Workload != workZipf {
		return nil, fmt.Errorf("getlatency: -workload %q: want %s or %s", p.Workload, workPaper, workZipf)
	}
	m, err := topology.Named(p.Topology, p.Seed)
	if err != nil {
		return nil, err
	}
	n := p.N
	if n == 0 {
		n = p.PerSite * m.Len()
	}
	rep := &report{Provenance: evalrun.StartProvenance("getlatency", m.Source), Workload: p.Workload, Topology: m.Source, N: n, PerSite: p.PerSite, Keys: p.Keys, PutFraction: p.PutFraction,
		GetsPerNode: p.GetsPerNode, Spread: p.Spread.String(), Warmup: p.Warmup.String(), Seed: p.Seed}
	fmt.Printf("Get latency, single-level vs multi-level (paper Fig. 6): %d nodes, %d per site, topology %s (%s)\n",
		n, p.PerSite, m.Source, m.Stats())
	fmt.Println(rep.Provenance)
	if p.Workload == workZipf {
		rep.PutFraction, rep.Putters, rep.ZipfS = 0, p.Putters, p.ZipfS
		fmt.Printf("Workload (zipf): %d keys, each put by %d nodes (TTL 1h); then %d gets per node for keys it did not put, drawn ∝ 1/k^%g, over %v; warm-up %v\n\n",
			p.Keys, p.Putters, p.GetsPerNode, p.ZipfS, p.Spread, p.Warmup)
	} else {
		fmt.Printf("Workload (paper): %d keys, each put by %.0f%% of the nodes (TTL 1h); then %d gets per node for keys it did not put, over %v; warm-up %v\n\n",
			p.Keys, 100*p.PutFraction, p.GetsPerNode, p.Spread, p.Warmup)
	}

	w := newWorkload(p, n)
	// One network at a time: they would otherwise compete for the CPU and
	// memory, and each gets the same virtual-time treatment either way.
	if rep.Single, err = runNetwork(m, p, n, w, false); err != nil {
		return nil, err
	}
	if rep.Multi, err = runNetwork(m, p, n, w, true); err != nil {
		return nil, err
	}

	s, mu := rep.Single, rep.Multi
	rep.SpeedupP50 = max(s.LatP50, latencyFloorMs) / max(mu.LatP50, latencyFloorMs)
	rep.SpeedupP80 = max(s.LatP80, latencyFloorMs) / max(mu.LatP80, latencyFloorMs)
	rep.ExtraRPCsP50 = mu.RPCsP50 - s.RPCsP50
	rep.PassSpeedup = rep.SpeedupP50 >= targetSpeedup && rep.SpeedupP80 >= targetSpeedup
	rep.PassExtraRPCs = rep.ExtraRPCsP50 <= targetExtraRPC
	printComparison(rep)

	rep.Wall = sim.WallNow().Sub(wallStart).Seconds()
	rep.PeakRSS = sim.PeakRSS()
	fmt.Printf("Wall time %.0f s, peak RSS %.0f MiB\n", rep.Wall, float64(rep.PeakRSS)/(1<<20))
	rep.Provenance.Finish()
	if err := sim.WriteJSON(filepath.Join(p.Out, p.Name+".json"), rep); err != nil {
		return nil, err
	}
	if err := plotCDF(filepath.Join(p.Out, p.Name+".png"), rep); err != nil {
		return nil, err
	}
	fmt.Printf("Wrote %s/%s.json and %[2]s.png\n", p.Out, p.Name)
	return rep, nil
}

// parallel runs f(0..n-1) with at most limit calls in flight.
func parallel(n, limit int, f func(i int)) {
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

type getSample struct {
	lat   float64 // ms
	rpcs  int
	hops  int
	level int // -1 when no values came back
	local bool
	err   error
}

// runNetwork builds a network, warms it up, and runs the workload on it.
func runNetwork(m *topology.Matrix, p params, n int, w *workload, multi bool) (*netResult, error) {
	wallStart := sim.WallNow()
	name := "single"
	if multi {
		name = "multi"
	}
	s, err := sim.Start(sim.Options{N: n, PerSite: p.PerSite, Seed: p.Seed, Matrix: m, JoinParallel: p.Parallel,
		Tweak: func(i int, c *coraldht.Config) {
			if multi {
				c.HintPrivate = true // the sim's 10.x.y.0/24 per site are meaningful hints
			} else {
				c.Levels = nil
			}
		}})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	r := &netResult{Name: name, Levels: len(s.Nodes[0].Levels()), Errors: map[string]int{}}
	fmt.Printf("%s-level network (levels: %d): %d nodes joined; warming up for %v of virtual time (%.0f s wall so far)\n",
		name, r.Levels, n, p.Warmup, sim.WallNow().Sub(wallStart).Seconds())
	time.Sleep(p.Warmup)
	if r.Levels > 1 {
		r.Clusters = clusterCensus(s)
		for _, c := range r.Clusters {
			fmt.Printf("  level %d (< %s): %d clusters (%d singletons, largest %d, a node's cluster has %.1f members on average); "+
				"%.1f%% of same-cluster pairs under the threshold; %d sites split; %d nodes moved in the last interval\n",
				c.Level, c.Threshold, c.Clusters, c.Singletons, c.Largest, c.MeanSize, 100*c.PairsUnder, c.SiteSplit, c.Moved)
		}
	}

	// Puts: every putter advertises itself under the key, at every level.
	ctx := context.Background()
	type putJob struct{ key, node int }
	var jobs []putJob
	for k, ps := range w.putters {
		for _, i := range ps {
			jobs = append(jobs, putJob{k, i})
		}
	}
	putLat := make([]float64, len(jobs))
	putRPCs := make([]float64, len(jobs))
	putErr := make([]error, len(jobs))
	parallel(len(jobs), p.Parallel, func(j int) {
		nd := s.Nodes[jobs[j].node]
		began := time.Now()
		pr, err := nd.Put(ctx, w.keys[jobs[j].key], []byte(nd.Addr().String()), time.Hour)
		putLat[j], putRPCs[j], putErr[j] = ms(time.Since(began)), float64(pr.RPCs), err
	})
	r.Puts = len(jobs)
	for _, e := range putErr {
		if e != nil {
			r.PutFailed++
		}
	}
	slices.Sort(putLat)
	slices.Sort(putRPCs)
	r.PutLatP50, r.PutRPCsP50 = sim.Percentile(putLat, 50), sim.Percentile(putRPCs, 50)

	// Gets: each node follows its schedule; at most p.Parallel are in
	// flight, which the default rate (about 25/s, ~0.5 s each) never hits.
	samples := make([][]getSample, n)
	sem := make(chan struct{}, max(p.Parallel, 1))
	begin := time.Now()
	var wg sync.WaitGroup
	for i, nd := range s.Nodes {
		samples[i] = make([]getSample, len(w.gets[i]))
		wg.Go(func() {
			for j, g := range w.gets[i] {
				if d := time.Until(begin.Add(g.at)); d > 0 {
					time.Sleep(d)
				}
				sem <- struct{}{}
				t0 := time.Now()
				gr, err := nd.Get(ctx, w.keys[g.key])
				lat := time.Since(t0)
				<-sem
				if err == nil && len(gr.Values) == 0 {
					err = coraldht.ErrNotFound
				}
				samples[i][j] = getSample{lat: ms(lat), rpcs: gr.RPCs, hops: gr.Hops, level: gr.Level,
					local: err == nil && gr.From.ID == nd.ID(), err: err}
			}
		})
	}
	wg.Wait()
	summarize(r, slices.Concat(samples...))
	ns := s.Net.Stats()
	r.Datagrams, r.QueueDrops = ns.Sent, ns.QueueFull
	r.WallSeconds = sim.WallNow().Sub(wallStart).Seconds()
	printNet(r)
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func summarize(r *netResult, samples []getSample) {
	r.Gets = len(samples)
	var lats, remote, rpcs, hops []float64
	byLevel := map[int][]getSample{}
	for _, s := range samples {
		lats = append(lats, s.lat)
		rpcs = append(rpcs, float64(s.rpcs))
		hops = append(hops, float64(s.hops))
		r.RPCsMean += float64(s.rpcs) / float64(len(samples))
		if s.local {
			r.Local++
		} else {
			remote = append(remote, s.lat)
		}
		switch {
		case s.err == nil:
		case errors.Is(s.err, coraldht.ErrNotFound):
			r.Errors["not found"]++
		case errors.Is(s.err, coraldht.ErrTimeout):
			r.Errors["timeout"]++
		case errors.Is(s.err, coraldht.ErrNoResponse):
			r.Errors["no response"]++
		default:
			r.Errors[s.err.Error()]++
		}
		if s.err != nil {
			r.Failed++
			s.level = -1
		}
		byLevel[s.level] = append(byLevel[s.level], s)
	}
	slices.Sort(lats)
	slices.Sort(rpcs)
	slices.Sort(hops)
	r.latencies = lats
	r.LatP10, r.LatP50, r.LatP80 = sim.Percentile(lats, 10), sim.Percentile(lats, 50), sim.Percentile(lats, 80)
	r.LatP90, r.LatP99, r.LatMax = sim.Percentile(lats, 90), sim.Percentile(lats, 99), lats[len(lats)-1]
	r.LatPercentiles = make([]float64, 101)
	for i := range r.LatPercentiles {
		r.LatPercentiles[i] = sim.Percentile(lats, float64(i))
	}
	slices.Sort(remote)
	r.RemoteP50, r.RemoteP80 = sim.Percentile(remote, 50), sim.Percentile(remote, 80)
	r.RPCsP50, r.RPCsP90 = sim.Percentile(rpcs, 50), sim.Percentile(rpcs, 90)
	r.HopsP50 = sim.Percentile(hops, 50)
	levels := make([]int, 0, len(byLevel))
	for l := range byLevel {
		levels = append(levels, l)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(levels))) // fastest level first
	for _, l := range levels {
		ss := byLevel[l]
		var ll, rr []float64
		for _, s := range ss {
			ll, rr = append(ll, s.lat), append(rr, float64(s.rpcs))
		}
		slices.Sort(ll)
		slices.Sort(rr)
		r.ByLevel = append(r.ByLevel, levelShare{Level: l, Gets: len(ss), Share: float64(len(ss)) / float64(len(samples)),
			LatP50: sim.Percentile(ll, 50), RPCsP50: sim.Percentile(rr, 50)})
	}
}

// clusterCensus reports, per level above 0, the clusters the nodes are in.
func clusterCensus(s *sim.Sim) []clusterStats {
	infos := make([][]coraldht.LevelInfo, len(s.Nodes))
	for i, nd := range s.Nodes {
		infos[i] = nd.Levels()
	}
	now := time.Now()
	interval := coraldht.DefaultConfig().ClusterInterval
	var out []clusterStats
	for l := 1; l < len(infos[0]); l++ {
		th := infos[0][l].Threshold
		members := map[coraldht.ID][]int{}
		cs := clusterStats{Level: l, Threshold: th.String()}
		for i, li := range infos {
			members[li[l].Cluster.ID] = append(members[li[l].Cluster.ID], i)
			if !li[l].LastChange.IsZero() && now.Sub(li[l].LastChange) < interval {
				cs.Moved++
			}
		}
		cs.Clusters = len(members)
		var pairs, under int
		for _, mem := range members {
			if len(mem) == 1 {
				cs.Singletons++
			}
			cs.Largest = max(cs.Largest, len(mem))
			cs.MeanSize += float64(len(mem)*len(mem)) / float64(len(s.Nodes))
			for a := range mem {
				for b := a + 1; b < len(mem); b++ {
					pairs++
					if s.Matrix.NodeRTT(s.Placed[mem[a]], s.Placed[mem[b]]) < th {
						under++
					}
				}
			}
		}
		if pairs > 0 {
			cs.PairsUnder = float64(under) / float64(pairs)
		}
		siteCluster := map[int]coraldht.ID{}
		split := map[int]bool{}
		for i, li := range infos {
			site := s.Placed[i].Site
			if id, ok := siteCluster[site]; ok && id != li[l].Cluster.ID {
				split[site] = true
			}
			siteCluster[site] = li[l].Cluster.ID
		}
		cs.SiteSplit = len(split)
		out = append(out, cs)
	}
	return out
}

func printNet(r *netResult) {
	fmt.Printf("  puts: %d, %d failed, latency p50 %.0f ms, RPCs p50 %.0f\n", r.Puts, r.PutFailed, r.PutLatP50, r.PutRPCsP50)
	fmt.Printf("  gets: %d, %d failed %v; %d answered from the getter's own store; %d datagrams sent, %d dropped at full queues; %.0f s wall\n",
		r.Gets, r.Failed, r.Errors, r.Local, r.Datagrams, r.QueueDrops, r.WallSeconds)
	fmt.Printf("  answered at:")
	for _, ls := range r.ByLevel {
		what := fmt.Sprintf("level %d", ls.Level)
		if ls.Level < 0 {
			what = "nowhere"
		}
		fmt.Printf("  %s %.1f%% (p50 %.0f ms, %.0f RPCs)", what, 100*ls.Share, ls.LatP50, ls.RPCsP50)
	}
	fmt.Print("\n\n")
}

func printComparison(rep *report) {
	s, m := rep.Single, rep.Multi
	fmt.Println("Get latency (ms, all gets) and cost:")
	fmt.Printf("  %-14s %8s %8s %8s %8s %8s %8s   %8s %8s %8s\n", "network", "p10", "p50", "p80", "p90", "p99", "max", "RPCs p50", "RPCs p90", "failed")
	for _, r := range []*netResult{s, m} {
		fmt.Printf("  %-14s %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f   %8.0f %8.0f %8d\n",
			r.Name+"-level", r.LatP10, r.LatP50, r.LatP80, r.LatP90, r.LatP99, r.LatMax, r.RPCsP50, r.RPCsP90, r.Failed)
	}
	fmt.Printf("  %-14s %8.1f× %7.1f× %7.1f× %7.1f× %7.1f×\n", "single/multi",
		ratio(s.LatP10, m.LatP10), rep.SpeedupP50, rep.SpeedupP80, ratio(s.LatP90, m.LatP90), ratio(s.LatP99, m.LatP99))
	fmt.Printf("  gets not answered from the getter's own store (single %d, multi %d): p50 %.0f vs %.0f ms (%.1f×), p80 %.0f vs %.0f ms (%.1f×)\n",
		s.Gets-s.Local, m.Gets-m.Local, s.RemoteP50, m.RemoteP50, ratio(s.RemoteP50, m.RemoteP50), s.RemoteP80, m.RemoteP80, ratio(s.RemoteP80, m.RemoteP80))
	fmt.Printf("  acceptance: multi-level ≥ %.0f× faster at p50 and p80 (paper: 2–5×) → %.1f× and %.1f× %s\n",
		targetSpeedup, rep.SpeedupP50, rep.SpeedupP80, verdict(rep.PassSpeedup))
	fmt.Printf("  acceptance: multi-level get costs ≤ %d RPCs more at the median → %+.0f (%.0f vs %.0f) %s\n\n",
		targetExtraRPC, rep.ExtraRPCsP50, m.RPCsP50, s.RPCsP50, verdict(rep.PassExtraRPCs))
}

func ratio(a, b float64) float64 { return max(a, latencyFloorMs) / max(b, latencyFloorMs) }

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
