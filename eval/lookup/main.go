// Command lookup measures coraldht lookups on a wide-area topology: hops and
// latency of gets, get-after-put success on a static network, and what
// happens when a tenth of the nodes die without warning — for values put
// once and for values put by several nodes, with one and with two replicas
// per put.
//
//	go run ./eval/lookup [-n 0] [-keys 2000] [-out docs/eval]
//
// It runs in virtual time on coraldht's in-memory network with latencies
// from the WonderProxy RTT matrix (or a synthetic one), 3 nodes per site, as
// a single level-0 cluster: this experiment is about routing, not clustering.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/sim"
	"github.com/coralcdn/coral/eval/internal/topology"
	"github.com/coralcdn/coral/eval/internal/vtime"
)

var (
	flagN        = flag.Int("n", 0, "nodes (0: 3 per site of the topology)")
	flagKeys     = flag.Int("keys", 2000, "keys per phase")
	flagKill     = flag.Float64("kill", 0.10, "fraction of nodes killed in the churn phase")
	flagParallel = flag.Int("parallel", 64, "operations in flight at once")
	flagSeed     = flag.Uint64("seed", 1, "random seed")
	flagOut      = flag.String("out", "docs/eval", "directory for lookup.json and lookup.png")
	flagTopology = flag.String("topology", "auto", "RTT matrix: synthetic, wonderproxy ($CORAL_RTT_DATA) or auto")
)

type opStats struct {
	Ops       int       `json:"ops"`
	Succeeded int       `json:"succeeded"`
	Success   float64   `json:"success_rate"`
	HopsP50   int       `json:"hops_p50"`
	HopsP99   int       `json:"hops_p99"`
	HopsMax   int       `json:"hops_max"`
	LatP50    float64   `json:"latency_p50_s"`
	LatP90    float64   `json:"latency_p90_s"`
	LatP99    float64   `json:"latency_p99_s"`
	LatMax    float64   `json:"latency_max_s"`
	latencies []float64 // sorted, for the CDF figure
}

type churnResult struct {
	Replicas  int            `json:"replicas"`
	Killed    int            `json:"killed"`
	PutOnce   opStats        `json:"get_keys_put_once"`
	PutByFour opStats        `json:"get_keys_put_by_4_nodes"`
	Errors    map[string]int `json:"errors"`
}

type report struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Topology   string              `json:"topology"`
	N          int                 `json:"n"`
	Log2N      int                 `json:"ceil_log2_n"`
	Static     opStats             `json:"static_get_after_put"`
	StaticPut  opStats             `json:"static_put"`
	Churn      []*churnResult      `json:"churn"`
	Wall       float64             `json:"wall_seconds"`
	PeakRSS    uint64              `json:"peak_rss_bytes"`
}

func main() {
	flag.Parse()
	vtime.Main(experiment)
}

type sample struct {
	ok   bool
	hops int
	lat  time.Duration
	err  error
}

func summarize(samples []sample) opStats {
	st := opStats{Ops: len(samples)}
	var hops []int
	var lats []float64
	for _, s := range samples {
		if s.ok {
			st.Succeeded++
		}
		hops = append(hops, s.hops)
		lats = append(lats, s.lat.Seconds())
	}
	slices.Sort(hops)
	slices.Sort(lats)
	st.Success = float64(st.Succeeded) / float64(max(st.Ops, 1))
	st.HopsP50, st.HopsP99, st.HopsMax = sim.Percentile(hops, 50), sim.Percentile(hops, 99), hops[len(hops)-1]
	st.LatP50, st.LatP90, st.LatP99, st.LatMax = sim.Percentile(lats, 50), sim.Percentile(lats, 90), sim.Percentile(lats, 99), lats[len(lats)-1]
	st.latencies = lats
	return st
}

// parallel runs f(0..n-1) with at most *flagParallel in flight.
func parallel(n int, f func(i int)) {
	sem := make(chan struct{}, *flagParallel)
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

func experiment() error {
	wallStart := sim.WallNow()
	m, err := topology.Named(*flagTopology, *flagSeed)
	if err != nil {
		return err
	}
	n := *flagN
	if n == 0 {
		n = 3 * m.Len()
	}
	rep := &report{Provenance: evalrun.StartProvenance("lookup", m.Source), Topology: m.Source, N: n, Log2N: int(math.Ceil(math.Log2(float64(n))))}
	fmt.Printf("Lookup experiment: %d nodes, 3 per site, topology %s (%s)\n%s\n\n", n, m.Source, m.Stats(), rep.Provenance)

	// Static network.
	s, err := start(m, n, 2)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(*flagSeed, 3))
	ctx := context.Background()
	puts := make([]sample, *flagKeys)
	gets := make([]sample, *flagKeys)
	pairs := make([][2]int, *flagKeys)
	for i := range pairs {
		a := rng.IntN(n)
		b := (a + 1 + rng.IntN(n-1)) % n
		pairs[i] = [2]int{a, b}
	}
	parallel(*flagKeys, func(i int) {
		key := coraldht.KeyFor(fmt.Sprint("static/", *flagSeed, "/", i))
		w, r := s.Nodes[pairs[i][0]], s.Nodes[pairs[i][1]]
		began := time.Now()
		pr, err := w.Put(ctx, key, []byte(w.Addr().String()), time.Hour)
		puts[i] = sample{ok: err == nil, hops: pr.Hops, lat: time.Since(began), err: err}
		began = time.Now()
		gr, err := r.Get(ctx, key)
		gets[i] = sample{ok: err == nil && len(gr.Values) > 0, hops: gr.Hops, lat: time.Since(began), err: err}
	})
	s.Close()
	rep.StaticPut, rep.Static = summarize(puts), summarize(gets)
	fmt.Println("Static network, a put then a get of the same key from another node:")
	printStats("put", rep.StaticPut)
	printStats("get", rep.Static)
	fmt.Printf("  acceptance: success ≥ 99.9%% → %.2f%%; hops p99 ≤ ⌈log2 n⌉+1 = %d → %d\n\n",
		100*rep.Static.Success, rep.Log2N+1, rep.Static.HopsP99)

	// The published algorithm stores one copy; coraldht's default is 3.
	for _, replicas := range []int{1, 2, 3} {
		cr, err := churn(m, n, replicas)
		if err != nil {
			return err
		}
		rep.Churn = append(rep.Churn, cr)
	}
	rep.Wall = sim.WallNow().Sub(wallStart).Seconds()
	rep.PeakRSS = sim.PeakRSS()
	fmt.Printf("Wall time %.0f s, peak RSS %.0f MiB\n", rep.Wall, float64(rep.PeakRSS)/(1<<20))
	rep.Provenance.Finish()
	if err := sim.WriteJSON(filepath.Join(*flagOut, "lookup.json"), rep); err != nil {
		return err
	}
	if err := plotCDF(filepath.Join(*flagOut, "lookup.png"), rep); err != nil {
		return err
	}
	fmt.Printf("Wrote %s/lookup.json and lookup.png\n", *flagOut)
	return nil
}

func start(m *topology.Matrix, n, replicas int) (*sim.Sim, error) {
	return sim.Start(sim.Options{N: n, PerSite: 3, Seed: *flagSeed, Matrix: m, Tweak: func(i int, c *coraldht.Config) {
		c.Levels = nil
		c.Replicas = replicas
	}})
}

func printStats(what string, st opStats) {
	fmt.Printf("  %-28s %5d ops, %7.3f%% ok, hops p50 %d p99 %d max %d, latency p50 %.3f s p90 %.3f s p99 %.3f s max %.3f s\n",
		what, st.Ops, 100*st.Success, st.HopsP50, st.HopsP99, st.HopsMax, st.LatP50, st.LatP90, st.LatP99, st.LatMax)
}

// churn puts keys (some once, some by four nodes), kills a fraction of the
// nodes without warning, and gets every key from a live node.
func churn(m *topology.Matrix, n, replicas int) (*churnResult, error) {
	s, err := start(m, n, replicas)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(*flagSeed, uint64(10+replicas)))
	keys := *flagKeys
	keyOf := func(set string, i int) coraldht.ID { return coraldht.KeyFor(fmt.Sprint(set, "/", *flagSeed, "/", i)) }
	putters := make([][]int, 2*keys)
	for i := range putters {
		count := 1
		if i >= keys {
			count = 4
		}
		putters[i] = rng.Perm(n)[:count]
	}
	parallel(2*keys, func(i int) {
		set, idx := "once", i
		if i >= keys {
			set, idx = "four", i-keys
		}
		for _, p := range putters[i] {
			nd := s.Nodes[p]
			if _, err := nd.Put(ctx, keyOf(set, idx), []byte(nd.Addr().String()), time.Hour); err != nil {
				fmt.Fprintf(os.Stderr, "put: %v\n", err)
			}
		}
	})
	killed := int(math.Round(*flagKill * float64(n)))
	dead := map[int]bool{}
	for _, i := range rng.Perm(n)[:killed] {
		dead[i] = true
		s.Net.Kill(s.Nodes[i].Addr())
	}
	var live []int
	for i := range n {
		if !dead[i] {
			live = append(live, i)
		}
	}
	getters := make([]int, 2*keys)
	for i := range getters {
		getters[i] = live[rng.IntN(len(live))]
	}
	samples := make([]sample, 2*keys)
	parallel(2*keys, func(i int) {
		set, idx := "once", i
		if i >= keys {
			set, idx = "four", i-keys
		}
		began := time.Now()
		gr, err := s.Nodes[getters[i]].Get(ctx, keyOf(set, idx))
		samples[i] = sample{ok: err == nil && len(gr.Values) > 0, hops: gr.Hops, lat: time.Since(began), err: err}
	})
	cr := &churnResult{Replicas: replicas, Killed: killed, Errors: map[string]int{}}
	for _, sm := range samples {
		switch {
		case sm.err == nil:
		case errors.Is(sm.err, coraldht.ErrNotFound):
			cr.Errors["not found"]++
		case errors.Is(sm.err, coraldht.ErrTimeout):
			cr.Errors["cut short by LookupTimeout"]++
		default:
			cr.Errors[sm.err.Error()]++
		}
	}
	cr.PutOnce, cr.PutByFour = summarize(samples[:keys]), summarize(samples[keys:])
	fmt.Printf("Churn, %d replica(s) per put: %d of %d nodes killed without warning after the puts\n", replicas, killed, n)
	printStats("get, keys put once", cr.PutOnce)
	printStats("get, keys put by 4 nodes", cr.PutByFour)
	worst := math.Max(cr.PutOnce.LatMax, cr.PutByFour.LatMax)
	fmt.Printf("  acceptance: every lookup ends within 3 s → slowest %.2f s; put once ≥ 88%% → %.1f%%; put by 4 ≥ 99%% → %.1f%%\n",
		worst, 100*cr.PutOnce.Success, 100*cr.PutByFour.Success)
	fmt.Printf("  failures by cause: %v\n\n", cr.Errors)
	return cr, nil
}
