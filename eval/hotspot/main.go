// Command hotspot reproduces Figure 8 of the Coral paper (NSDI'04 §6.4):
// every node of a single-level network issues back-to-back put/get pairs on
// one key with random values, and we count the put RPCs each node receives
// per minute, sorted by the XOR distance of its ID to the key. The same
// workload then runs on a plain DHT (greedy routing, store at the closest
// node) for comparison, and optionally over a range of network sizes.
//
//	go run ./eval/hotspot [-n 494] [-minutes 4] [-sweep] [-seeds "1 2 3"] [-topologies both] [-trace 4] [-out docs/eval]
//
// It runs in virtual time on coraldht's in-memory network with latencies
// from the WonderProxy RTT matrix (or a synthetic one), 3 nodes per site.
// With -seeds and -topologies the main run is repeated on each topology and
// seed (different node addresses, hence IDs, and different keys), and the
// closest and the busiest node of every hot key are reported against the
// bound. With -trace, the busiest nodes of each key are broken down: the
// stage of the put that sent each RPC, the senders, how many routing
// tables list the node and how early it joined.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/sim"
	"github.com/coralcdn/coral/eval/internal/topology"
	"github.com/coralcdn/coral/eval/internal/vtime"
)

var (
	flagN       = flag.Int("n", 494, "nodes in the main run")
	flagPerSite = flag.Int("persite", 3, "nodes per site")
	flagMinutes = flag.Int("minutes", 4, "virtual minutes of workload per run (the first is warm-up)")
	flagRate    = flag.Float64("rate", 2, "put/get pairs per second per node and key, at most (back-to-back when slower); anything well above β per minute saturates every node")
	flagKeys    = flag.Int("keys", 3, "hot keys per run, hammered at once; loads are reported per key and averaged")
	flagTTL     = flag.Duration("ttl", 10*time.Minute, "TTL of the values put")
	flagSeed    = flag.Uint64("seed", 1, "random seed")
	flagPlain   = flag.Bool("plain", true, "also run the plain-DHT comparison")
	flagSweep   = flag.String("sweep", "", "sizes for the scaling run, e.g. \"128 256 512 1024 2048\" (empty: skip)")
	flagOut     = flag.String("out", "docs/eval", "directory for NAME.json and the PNG figures")
	flagName    = flag.String("name", "hotspot", "stem of the output files: NAME.json, NAME.png, NAME-sweep.png, NAME-seeds.png")
	flagReplot  = flag.Bool("replot", false, "only redraw the PNG figures from -out's NAME.json")
	flagWork    = flag.String("workload", workPaper, "paper: every node puts and gets the hot keys; zipf: many keys of Zipf popularity, each put by a few nodes and got by all")
	flagMemProf = flag.String("memprofile", "", "write a heap profile, taken at the end of the main run's workload, to this file")
	flagSeeds   = flag.String("seeds", "", "seeds for repeated main runs, e.g. \"1 2 3 4 5\" (empty: -seed only)")
	flagTopos   = flag.String("topologies", "", "topologies for the repeated main runs: synthetic, wonderproxy (needs $CORAL_RTT_DATA) or both (empty: whichever the data gives)")
)

// run is one workload on one network.
type run struct {
	Mode     string   `json:"mode"` // "coral" or "plain"
	N        int      `json:"n"`
	Predict  int      `json:"predicted_bound"` // β·⌈log2 n⌉
	Pairs    uint64   `json:"put_get_pairs"`
	PutFails uint64   `json:"put_failures"`
	GetFails uint64   `json:"get_failures"`
	Minutes  []minute `json:"minutes"`
	// Steady holds, per distance rank to the key (closest first), the put
	// RPCs a node received per minute over the steady minutes (all but the
	// first), averaged over the hot keys.
	Steady        []float64 `json:"steady_put_rpcs_per_min_by_distance"`
	ClosestSteady float64   `json:"closest_steady_per_min"` // mean over keys
	ClosestWorst  float64   `json:"closest_steady_worst_key"`
	ClosestByKey  []float64 `json:"closest_steady_by_key"`
	MaxSteady     float64   `json:"max_steady_per_min"` // busiest node, any key
	// BusiestByKey is, per hot key, the steady load of the node receiving
	// the most put RPCs for it, and BusiestRank that node's distance rank
	// to the key (0 = closest).
	BusiestByKey []float64 `json:"busiest_steady_by_key"`
	BusiestRank  []int     `json:"busiest_rank_by_key"`
	// TopByKey is, per hot key, the busiest nodes (at most topNodes),
	// busiest first, and OverBoundByKey how many nodes took more than
	// β·⌈log₂ n⌉ a minute for the key.
	TopByKey       [][]rankLoad `json:"top_nodes_by_key"`
	OverBoundByKey []int        `json:"nodes_over_bound_by_key"`
	Silent         float64      `json:"nodes_receiving_no_put_rpcs"` // mean over keys
	QueueDrops     uint64       `json:"datagrams_dropped_at_full_queues"`
	Lost           uint64       `json:"datagrams_lost_otherwise"`
	WallSeconds    float64      `json:"wall_seconds"`
}

// rankLoad is a node's steady put RPCs per minute for a key and its
// distance rank to the key (0 = closest).
type rankLoad struct {
	Rank int     `json:"rank"`
	Load float64 `json:"put_rpcs_per_min"`
}

// topNodes is how many of a key's busiest nodes a run keeps.
const topNodes = 10

// repeat is the main run on one topology with one seed.
type repeat struct {
	Topology string `json:"topology"`
	Seed     uint64 `json:"seed"`
	Run      *run   `json:"run"`
}

type minute struct {
	Index       int     `json:"minute"`
	Closest     float64 `json:"closest_node_put_rpcs"` // mean over keys
	Max         uint64  `json:"max_node_put_rpcs"`
	Total       uint64  `json:"total_put_rpcs"`
	PairsIssued uint64  `json:"pairs_issued"`
}

type report struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	// Workload is workPaper or workZipf.
	Workload  string  `json:"workload"`
	Topology  string  `json:"topology"`
	PerSite   int     `json:"nodes_per_site"`
	Rate      float64 `json:"pairs_per_second_per_node_and_key"`
	Keys      int     `json:"hot_keys"`
	TTL       string  `json:"ttl"`
	Beta      int     `json:"beta"`
	Coral     *run    `json:"coral"`
	Plain     *run    `json:"plain,omitempty"`
	PlainOver float64 `json:"plain_over_coral_closest,omitempty"`
	Sweep     []*run  `json:"sweep,omitempty"`
	SweepGrow float64 `json:"sweep_largest_over_smallest,omitempty"`
	// SweepBusiestGrow is the busiest node's load at the largest size over
	// that at the smallest; log2 of the sizes grows by SweepLogGrow.
	SweepBusiestGrow float64 `json:"sweep_busiest_largest_over_smallest,omitempty"`
	SweepLogGrow     float64 `json:"sweep_log2_ratio,omitempty"`
	// Repeats are the main run on every topology and seed asked for.
	Repeats []*repeat `json:"repeats,omitempty"`
	// Busiest summarises the busiest node of every hot key over the
	// repeats against β·⌈log₂ n⌉.
	Busiest *busiestSummary `json:"busiest,omitempty"`
	// Plains are the plain-DHT run on every topology (first seed), and
	// PlainOverBusiest, per topology, its busiest node's load over the
	// busiest node's of Coral's run with the same seed (the heaviest of
	// its keys).
	Plains           []*repeat          `json:"plain_runs,omitempty"`
	PlainOverBusiest map[string]float64 `json:"plain_over_coral_busiest,omitempty"`
	// Zipf holds the runs of the Zipf workload (-workload zipf).
	Zipf    []*zipfRun `json:"zipf,omitempty"`
	PeakRSS uint64     `json:"peak_rss_bytes"`
}

// busiestSummary is the busiest node per hot key over all repeats.
type busiestSummary struct {
	Keys       int     `json:"keys"`
	Within     int     `json:"within_bound"`
	Bound      int     `json:"bound"`
	Min        float64 `json:"min"`
	Median     float64 `json:"median"`
	Max        float64 `json:"max"`
	MaxOverBnd float64 `json:"max_over_bound"`
	// NearestRanks counts the busiest nodes over the bound that are
	// among the key's nearest nodes (ranks 1–8).
	OverNearest int `json:"over_bound_at_ranks_1_to_8"`
	// ClosestMax is the heaviest closest node of any key.
	ClosestMax float64 `json:"closest_max"`
}

func main() {
	flag.Parse()
	var sizes []int
	if *flagSweep != "" {
		for _, f := range splitFields(*flagSweep) {
			var v int
			if _, err := fmt.Sscan(f, &v); err != nil || v < 8 {
				fmt.Fprintf(os.Stderr, "hotspot: bad -sweep size %q\n", f)
				os.Exit(2)
			}
			sizes = append(sizes, v)
		}
	}
	if *flagReplot {
		if err := replot(); err != nil {
			fmt.Fprintln(os.Stderr, "hotspot:", err)
			os.Exit(1)
		}
		return
	}
	vtime.Main(func() error { return experiment(sizes) })
}

func splitFields(s string) []string {
	var out []string
	cur := ""
	for _, r := range s + " " {
		if r == ' ' || r == ',' {
			if cur != "" {
				out = append(out, cur)
			}
			cur = ""
			continue
		}
		cur += string(r)
	}
	return out
}

// matrices returns the topologies for the repeated runs, by name.
func matrices(seed uint64) ([]*topology.Matrix, error) {
	names := splitFields(*flagTopos)
	if len(names) == 1 && names[0] == "both" {
		names = []string{topology.NameSynthetic, topology.NameWonderProxy}
	}
	if len(names) == 0 {
		names = []string{topology.NameAuto}
	}
	var out []*topology.Matrix
	for _, name := range names {
		m, err := topology.Named(name, seed)
		if err != nil {
			return nil, fmt.Errorf("-topologies: %w", err)
		}
		out = append(out, m)
	}
	return out, nil
}

func experiment(sizes []int) error {
	var seeds []uint64
	for _, f := range splitFields(*flagSeeds) {
		var v uint64
		if _, err := fmt.Sscan(f, &v); err != nil {
			return fmt.Errorf("bad -seeds entry %q", f)
		}
		seeds = append(seeds, v)
	}
	if len(seeds) == 0 {
		seeds = []uint64{*flagSeed}
	}
	*flagSeed = seeds[0]
	ms, err := matrices(seeds[0])
	if err != nil {
		return err
	}
	m := ms[0]
	var sources []string
	for _, mm := range ms {
		sources = append(sources, mm.Source)
	}
	beta := coraldht.DefaultConfig().Leak
	rep := &report{Provenance: evalrun.StartProvenance("hotspot", strings.Join(sources, ", ")), Workload: *flagWork,
		Topology: m.Source, PerSite: *flagPerSite, Rate: *flagRate, Keys: *flagKeys, TTL: flagTTL.String(), Beta: beta}
	fmt.Println(rep.Provenance)
	switch *flagWork {
	case workZipf:
		return zipfExperiment(rep, ms, seeds)
	case workPaper:
	default:
		return fmt.Errorf("-workload %q: want %s or %s", *flagWork, workPaper, workZipf)
	}
	fmt.Printf("Hot-spot experiment (paper Fig. 8): topology %s, %d nodes/site, %d hot keys, %g put/get pairs/s per node and key, TTL %v, %d virtual minutes per run\n\n",
		m.Source, *flagPerSite, *flagKeys, *flagRate, *flagTTL, *flagMinutes)

	if rep.Coral, err = hotspot(m, *flagN, false); err != nil {
		return err
	}
	printRun(rep.Coral)
	rep.Repeats = append(rep.Repeats, &repeat{Topology: m.Source, Seed: seeds[0], Run: rep.Coral})
	if *flagPlain {
		if rep.Plain, err = hotspot(m, *flagN, true); err != nil {
			return err
		}
		printRun(rep.Plain)
		rep.PlainOver = rep.Plain.ClosestSteady / math.Max(rep.Coral.ClosestSteady, 1)
		fmt.Printf("Plain DHT / Coral, closest node's steady load: %.0f×\n\n", rep.PlainOver)
	}
	for _, n := range sizes {
		r, err := hotspot(m, n, false)
		if err != nil {
			return err
		}
		rep.Sweep = append(rep.Sweep, r)
	}
	if len(rep.Sweep) > 0 {
		fmt.Println("Scaling: closest node's steady put RPCs per minute (mean and worst over the hot keys)")
		fmt.Printf("  %6s  %8s  %8s  %10s  %9s  %8s\n", "n", "closest", "worst", "β⌈log2 n⌉", "max node", "wall s")
		for _, r := range rep.Sweep {
			fmt.Printf("  %6d  %8.1f  %8.1f  %10d  %9.1f  %8.1f\n", r.N, r.ClosestSteady, r.ClosestWorst, r.Predict, r.MaxSteady, r.WallSeconds)
		}
		first, last := rep.Sweep[0], rep.Sweep[len(rep.Sweep)-1]
		rep.SweepGrow = last.ClosestSteady / math.Max(first.ClosestSteady, 1)
		rep.SweepBusiestGrow = last.MaxSteady / math.Max(first.MaxSteady, 1)
		rep.SweepLogGrow = math.Log2(float64(last.N)) / math.Log2(float64(first.N))
		fmt.Printf("  closest node: load(%d) / load(%d) = %.2f; busiest node: %.2f (log2 ratio %.2f)\n\n", last.N, first.N, rep.SweepGrow,
			rep.SweepBusiestGrow, rep.SweepLogGrow)
	}
	if err := repeats(rep, ms, seeds); err != nil {
		return err
	}
	if *flagPlain {
		if err := plains(rep, ms, seeds[0]); err != nil {
			return err
		}
	}
	rep.Busiest = summarizeBusiest(rep.Repeats)
	if b := rep.Busiest; b != nil {
		fmt.Printf("Busiest node of each hot key over %d keys: %d within β·⌈log2 n⌉ = %d; min %.0f, median %.0f, max %.0f (%.2f× the bound); "+
			"%d of those over it are among the key's nearest 8 nodes; heaviest closest node %.0f\n\n",
			b.Keys, b.Within, b.Bound, b.Min, b.Median, b.Max, b.MaxOverBnd, b.OverNearest, b.ClosestMax)
	}
	rep.PeakRSS = sim.PeakRSS()
	fmt.Printf("Peak RSS %.0f MiB\n", float64(rep.PeakRSS)/(1<<20))

	rep.Provenance.Finish()
	if err := writeReport(rep); err != nil {
		return err
	}
	fmt.Printf("Wrote %s/%s.json and the PNG figures\n", *flagOut, *flagName)
	return nil
}

// Workloads.
const (
	workPaper = "paper"
	workZipf  = "zipf"
)

func writeReport(rep *report) error {
	if err := sim.WriteJSON(filepath.Join(*flagOut, *flagName+".json"), rep); err != nil {
		return err
	}
	return plotAll(rep)
}

func plotAll(rep *report) error {
	if rep.Workload == workZipf {
		return plotZipf(filepath.Join(*flagOut, *flagName+".png"), rep)
	}
	if err := plotCurve(filepath.Join(*flagOut, *flagName+".png"), rep); err != nil {
		return err
	}
	if len(rep.Sweep) > 0 {
		if err := plotSweep(filepath.Join(*flagOut, *flagName+"-sweep.png"), rep.Sweep); err != nil {
			return err
		}
	}
	if len(rep.Repeats) > 1 {
		return plotRepeats(filepath.Join(*flagOut, *flagName+"-seeds.png"), rep.Repeats)
	}
	return nil
}

// plains runs the plain DHT on every topology but the first (whose plain
// run is the main one's) with the first seed, and compares each plain
// run's busiest node with Coral's on the same topology and seed.
func plains(rep *report, ms []*topology.Matrix, seed uint64) error {
	rep.Plains = []*repeat{{Topology: rep.Topology, Seed: seed, Run: rep.Plain}}
	for _, m := range ms[1:] {
		if m.Source == topology.SourceSynthetic {
			m = topology.Synthetic(250, seed)
		}
		*flagSeed = seed
		r, err := hotspot(m, *flagN, true)
		if err != nil {
			return err
		}
		fmt.Printf("[%s, seed %d] ", m.Source, seed)
		printRun(r)
		rep.Plains = append(rep.Plains, &repeat{Topology: m.Source, Seed: seed, Run: r})
	}
	rep.PlainOverBusiest = map[string]float64{}
	for _, pl := range rep.Plains {
		for _, rp := range rep.Repeats {
			if rp.Topology == pl.Topology && rp.Seed == pl.Seed {
				rep.PlainOverBusiest[pl.Topology] = pl.Run.MaxSteady / math.Max(rp.Run.MaxSteady, 1)
				fmt.Printf("Plain DHT / Coral, busiest node's steady load, %s: %.0f / %.0f = %.0f×\n", pl.Topology,
					pl.Run.MaxSteady, rp.Run.MaxSteady, rep.PlainOverBusiest[pl.Topology])
			}
		}
	}
	return nil
}

// summarizeBusiest compares the busiest node of every hot key of every
// repeat with the bound.
func summarizeBusiest(rs []*repeat) *busiestSummary {
	if len(rs) == 0 {
		return nil
	}
	b := &busiestSummary{Bound: rs[0].Run.Predict}
	var all []float64
	for _, rp := range rs {
		r := rp.Run
		for k, v := range r.BusiestByKey {
			all = append(all, v)
			if v <= float64(r.Predict) {
				b.Within++
			} else if rank := r.BusiestRank[k]; rank >= 1 && rank <= 8 {
				b.OverNearest++
			}
			b.MaxOverBnd = math.Max(b.MaxOverBnd, v/float64(r.Predict))
		}
		for _, v := range r.ClosestByKey {
			b.ClosestMax = math.Max(b.ClosestMax, v)
		}
	}
	slices.Sort(all)
	b.Keys, b.Min, b.Max, b.Median = len(all), all[0], all[len(all)-1], evalrun.Median(all)
	return b
}

// repeats runs the main size on every topology and seed not yet run, then
// prints the closest and busiest node of each hot key beside the bound.
func repeats(rep *report, ms []*topology.Matrix, seeds []uint64) error {
	// Seeds outermost, so that a run cut short has covered every topology
	// about equally; the JSON and figures are rewritten after each run.
	for si, seed := range seeds {
		for mi, m := range ms {
			if mi == 0 && si == 0 {
				continue // the main run
			}
			if m.Source == topology.SourceSynthetic {
				m = topology.Synthetic(250, seed) // what -seed gives
			}
			*flagSeed = seed
			r, err := hotspot(m, *flagN, false)
			if err != nil {
				return err
			}
			fmt.Printf("[%s, seed %d] ", m.Source, seed)
			printRun(r)
			rep.Repeats = append(rep.Repeats, &repeat{Topology: m.Source, Seed: seed, Run: r})
			if err := writeReport(rep); err != nil {
				return err
			}
		}
	}
	*flagSeed = seeds[0]
	if len(rep.Repeats) < 2 {
		return nil
	}
	fmt.Printf("Closest and busiest node per hot key, n = %d, steady put RPCs/min (bound β·⌈log2 n⌉ = %d)\n", *flagN, rep.Coral.Predict)
	fmt.Printf("  %-20s  %4s  %-20s  %-26s  %s\n", "topology", "seed", "closest, per key", "busiest (its rank), per key", "within bound")
	for _, rp := range rep.Repeats {
		r := rp.Run
		busiest := make([]string, len(r.BusiestByKey))
		for k, v := range r.BusiestByKey {
			busiest[k] = fmt.Sprintf("%.0f (%d)", v, r.BusiestRank[k])
		}
		ok := "yes"
		if r.ClosestWorst > float64(r.Predict) {
			ok = "NO"
		}
		fmt.Printf("  %-20s  %4d  %-20s  %-26s  %s\n", rp.Topology, rp.Seed, fmtFloats(r.ClosestByKey), strings.Join(busiest, ", "), ok)
	}
	fmt.Println()
	return nil
}

func replot() error {
	b, err := os.ReadFile(filepath.Join(*flagOut, *flagName+".json"))
	if err != nil {
		return err
	}
	rep := &report{}
	if err := json.Unmarshal(b, rep); err != nil {
		return err
	}
	if rep.Coral == nil && rep.Workload != workZipf {
		return fmt.Errorf("%s/%s.json holds no main run", *flagOut, *flagName)
	}
	return plotAll(rep)
}

func printRun(r *run) {
	fmt.Printf("%s, n = %d (β·⌈log2 n⌉ = %d): put RPCs received per minute, per hot key\n", r.Mode, r.N, r.Predict)
	fmt.Printf("  %6s  %12s  %10s  %12s  %12s\n", "minute", "closest node", "max node", "all nodes", "pairs issued")
	for _, mi := range r.Minutes {
		fmt.Printf("  %6d  %12.1f  %10d  %12d  %12d\n", mi.Index, mi.Closest, mi.Max, mi.Total, mi.PairsIssued)
	}
	fmt.Printf("  steady state, by distance rank to the key (rank: put RPCs/min; all %d ranks in the JSON):\n   ", r.N)
	for i, v := range r.Steady[:min(24, len(r.Steady))] {
		fmt.Printf(" %d:%.0f", i, v)
	}
	fmt.Println()
	fmt.Printf("  steady state (minutes 2–%d): closest node %.1f/min (per key %s), busiest %.1f/min (per key %s); %.0f of %d nodes received none\n",
		len(r.Minutes), r.ClosestSteady, fmtFloats(r.ClosestByKey), r.MaxSteady, fmtFloats(r.BusiestByKey), r.Silent, r.N)
	fmt.Printf("  put failures %d, get failures %d over %d pairs; %d datagrams dropped at full queues; %.1f s wall\n\n", r.PutFails, r.GetFails, r.Pairs, r.QueueDrops, r.WallSeconds)
}

// hotspot runs the workload on a fresh network of n nodes.
func hotspot(m *topology.Matrix, n int, plain bool) (*run, error) {
	wallStart := sim.WallNow()
	s, err := sim.Start(sim.Options{N: n, PerSite: *flagPerSite, Seed: *flagSeed, Matrix: m, Tweak: func(i int, c *coraldht.Config) {
		c.Levels = nil // a single level-0 cluster, as in the paper's experiment
		c.PlainDHT = plain
	}})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	beta := coraldht.DefaultConfig().Leak
	r := &run{Mode: "coral", N: n, Predict: beta * int(math.Ceil(math.Log2(float64(n))))}
	if plain {
		r.Mode = "plain DHT"
	}
	keys := make([]coraldht.ID, *flagKeys)
	for k := range keys {
		keys[k] = coraldht.KeyFor(fmt.Sprintf("hot key %d/%d", *flagSeed, k))
	}
	// putRPCs[k][i]: put RPCs node i received from other nodes for key k.
	// Counters vanish after a minute without requests; a drop is a reset.
	putRPCs := func() [][]uint64 {
		out := make([][]uint64, len(keys))
		for k, key := range keys {
			out[k] = make([]uint64, n)
			for i, nd := range s.Nodes {
				kl := nd.KeyLoad(0, key)
				out[k][i] = kl.PutProbes + kl.Stores
			}
		}
		return out
	}
	var tr *tracer
	if *flagTrace > 0 && !plain {
		tr = newTracer(s, keys)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pairs, putFails, getFails atomic.Uint64
	period := time.Duration(float64(time.Second) / *flagRate)
	var wg sync.WaitGroup
	for i, nd := range s.Nodes {
		offset := time.Duration(i) * period / time.Duration(n)
		wg.Go(func() {
			time.Sleep(offset)
			val := make([]byte, 16)
			for ctx.Err() == nil {
				began := time.Now()
				for _, key := range keys {
					rand.Read(val)
					if _, err := nd.Put(ctx, key, val, *flagTTL); err != nil && ctx.Err() == nil {
						putFails.Add(1)
					}
					if _, err := nd.Get(ctx, key); err != nil && ctx.Err() == nil {
						getFails.Add(1)
					}
					pairs.Add(1)
				}
				if d := time.Since(began); d < period {
					time.Sleep(period - d)
				}
			}
		})
	}
	defer writeHeapProfile()
	prev, prevPairs := putRPCs(), uint64(0)
	perNode := make([][][]uint64, len(keys)) // [key][node][minute]
	for k := range keys {
		perNode[k] = make([][]uint64, n)
	}
	for mi := 1; mi <= *flagMinutes; mi++ {
		if mi == 2 && tr != nil {
			tr.start()
		}
		time.Sleep(time.Minute)
		cur, curPairs := putRPCs(), pairs.Load()
		mm := minute{Index: mi, PairsIssued: curPairs - prevPairs}
		for k := range keys {
			for i := range cur[k] {
				d := cur[k][i]
				if d >= prev[k][i] {
					d -= prev[k][i]
				}
				perNode[k][i] = append(perNode[k][i], d)
				mm.Total += d
				mm.Max = max(mm.Max, d)
			}
		}
		r.Minutes = append(r.Minutes, mm)
		prev, prevPairs = cur, curPairs
	}
	if tr != nil {
		tr.stop()
	}
	cancel()
	wg.Wait()
	if tr != nil {
		tr.report(float64(*flagMinutes-1), *flagSeed)
	}
	r.Pairs, r.PutFails, r.GetFails = pairs.Load(), putFails.Load(), getFails.Load()

	r.Steady = make([]float64, n)
	for k, key := range keys {
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return coraldht.CompareDistance(key, s.Nodes[a].ID(), s.Nodes[b].ID()) })
		for mi := range r.Minutes {
			r.Minutes[mi].Closest += float64(perNode[k][order[0]][mi]) / float64(len(keys))
		}
		busiest, busiestRank := -1.0, 0
		for rank, i := range order {
			var sum uint64
			steady := perNode[k][i][1:]
			for _, v := range steady {
				sum += v
			}
			avg := float64(sum) / float64(max(len(steady), 1))
			r.Steady[rank] += avg / float64(len(keys))
			r.MaxSteady = math.Max(r.MaxSteady, avg)
			if avg > busiest {
				busiest, busiestRank = avg, rank
			}
			if sum == 0 && perNode[k][i][0] == 0 {
				r.Silent += 1 / float64(len(keys))
			}
			if rank == 0 {
				r.ClosestByKey = append(r.ClosestByKey, avg)
				r.ClosestWorst = math.Max(r.ClosestWorst, avg)
			}
		}
		r.BusiestByKey = append(r.BusiestByKey, busiest)
		r.BusiestRank = append(r.BusiestRank, busiestRank)
		var loads []rankLoad
		over := 0
		for rank, i := range order {
			var sum uint64
			for _, v := range perNode[k][i][1:] {
				sum += v
			}
			avg := float64(sum) / float64(max(len(perNode[k][i])-1, 1))
			loads = append(loads, rankLoad{Rank: rank, Load: avg})
			if avg > float64(r.Predict) {
				over++
			}
		}
		slices.SortStableFunc(loads, func(a, b rankLoad) int { return cmp.Compare(b.Load, a.Load) })
		r.TopByKey = append(r.TopByKey, loads[:min(topNodes, len(loads))])
		r.OverBoundByKey = append(r.OverBoundByKey, over)
	}
	r.ClosestSteady = r.Steady[0]
	ns := s.Net.Stats()
	r.QueueDrops, r.Lost = ns.QueueFull, ns.Lost+ns.NoRoute
	r.WallSeconds = sim.WallNow().Sub(wallStart).Seconds()
	return r, nil
}

func fmtFloats(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

var heapProfiled bool

// writeHeapProfile saves a heap profile once, while the first network is
// still fully alive.
func writeHeapProfile() {
	if *flagMemProf == "" || heapProfiled {
		return
	}
	heapProfiled = true
	f, err := os.Create(*flagMemProf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "memprofile:", err)
		return
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "memprofile:", err)
	}
}
