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
	flagOut     = flag.String("out", "docs/eval", "directory for hotspot.json and the PNG figures")
	flagReplot  = flag.Bool("replot", false, "only redraw the PNG figures from -out's hotspot.json")
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
	Silent       float64   `json:"nodes_receiving_no_put_rpcs"` // mean over keys
	QueueDrops   uint64    `json:"datagrams_dropped_at_full_queues"`
	Lost         uint64    `json:"datagrams_lost_otherwise"`
	WallSeconds  float64   `json:"wall_seconds"`
}

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
	PeakRSS uint64    `json:"peak_rss_bytes"`
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
		names = []string{topology.SourceSynthetic, "wonderproxy"}
	}
	if len(names) == 0 {
		return []*topology.Matrix{topology.Load(seed)}, nil
	}
	var out []*topology.Matrix
	for _, name := range names {
		switch name {
		case topology.SourceSynthetic:
			out = append(out, topology.Synthetic(250, seed))
		case "wonderproxy", topology.SourceWonderProxy:
			if topology.DataDir() == "" {
				return nil, fmt.Errorf("-topologies %s: $%s is not set", name, topology.EnvDataDir)
			}
			m, err := topology.LoadWonderProxy(topology.DataDir())
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		default:
			return nil, fmt.Errorf("-topologies: unknown topology %q (synthetic, wonderproxy or both)", name)
		}
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
	beta := coraldht.DefaultConfig().Leak
	rep := &report{Topology: m.Source, PerSite: *flagPerSite, Rate: *flagRate, Keys: *flagKeys, TTL: flagTTL.String(), Beta: beta}
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
	rep.PeakRSS = sim.PeakRSS()
	fmt.Printf("Peak RSS %.0f MiB\n", float64(rep.PeakRSS)/(1<<20))

	if err := writeReport(rep); err != nil {
		return err
	}
	fmt.Printf("Wrote %s/hotspot.json and the PNG figures\n", *flagOut)
	return nil
}

func writeReport(rep *report) error {
	if err := sim.WriteJSON(filepath.Join(*flagOut, "hotspot.json"), rep); err != nil {
		return err
	}
	return plotAll(rep)
}

func plotAll(rep *report) error {
	if err := plotCurve(filepath.Join(*flagOut, "hotspot.png"), rep); err != nil {
		return err
	}
	if len(rep.Sweep) > 0 {
		if err := plotSweep(filepath.Join(*flagOut, "hotspot-sweep.png"), rep.Sweep); err != nil {
			return err
		}
	}
	if len(rep.Repeats) > 1 {
		return plotRepeats(filepath.Join(*flagOut, "hotspot-seeds.png"), rep.Repeats)
	}
	return nil
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
	b, err := os.ReadFile(filepath.Join(*flagOut, "hotspot.json"))
	if err != nil {
		return err
	}
	rep := &report{}
	if err := json.Unmarshal(b, rep); err != nil {
		return err
	}
	if rep.Coral == nil {
		return fmt.Errorf("%s/hotspot.json holds no main run", *flagOut)
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
