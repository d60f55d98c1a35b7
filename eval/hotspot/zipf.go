package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/sim"
	"github.com/coralcdn/coral/eval/internal/topology"
)

// The Zipf workload (-workload zipf), beside the paper's: many keys
// (think URLs) whose popularity follows Zipf's law, each put by a few
// nodes (the proxies that hold a copy) and got by every other node. Each
// node issues -rate operations a second: it draws a key by popularity and
// puts it if it is one of the key's putters (renewing its reference), and
// gets it otherwise. Before the clock starts every putter puts its keys
// once, so every key has values. What is counted, per node and key, is
// every get, put probe and store a node receives from others, per minute.

var (
	flagZipfKeys = flag.Int("zipf-keys", 1000, "-workload zipf: keys")
	flagZipfS    = flag.Float64("zipf-s", 0.9, "-workload zipf: Zipf exponent of the keys' popularity (key k drawn ∝ 1/k^s)")
	flagPutters  = flag.Int("putters", 3, "-workload zipf: nodes that put each key")
)

// zipfRun is one run of the Zipf workload.
type zipfRun struct {
	Topology string  `json:"topology"`
	Seed     uint64  `json:"seed"`
	N        int     `json:"n"`
	Predict  int     `json:"predicted_bound"` // β·⌈log2 n⌉, put RPCs a minute per key
	Keys     int     `json:"keys"`
	S        float64 `json:"zipf_s"`
	Putters  int     `json:"putters_per_key"`
	Rate     float64 `json:"operations_per_second_per_node"`

	Puts     uint64 `json:"puts"`
	Gets     uint64 `json:"gets"`
	PutFails uint64 `json:"put_failures"`
	// GetFails counts gets that failed or found no value.
	GetFails uint64 `json:"get_failures"`
	// GetsLocal counts gets answered from the getter's own store.
	GetsLocal uint64 `json:"gets_answered_locally"`

	// Over the steady minutes (all but the first), per minute:
	// NodeLoad is the distribution over nodes of all requests received
	// (gets, put probes, stores), all keys together.
	NodeLoad distribution `json:"node_requests_per_min"`
	// Loads is every node's requests per minute, busiest first.
	Loads []float64 `json:"node_requests_per_min_sorted"`
	// MaxPutPair is the most put RPCs (probes and stores) one node took
	// for one key, and MaxPutKey that key's popularity rank (0 = most
	// popular); MaxGetPair and MaxGetKey the same for gets.
	MaxPutPair float64 `json:"max_put_rpcs_per_min_node_and_key"`
	MaxPutKey  int     `json:"max_put_key_rank"`
	MaxGetPair float64 `json:"max_get_rpcs_per_min_node_and_key"`
	MaxGetKey  int     `json:"max_get_key_rank"`
	// PairsOverBound counts (node, key) pairs over β·⌈log₂ n⌉ put RPCs a
	// minute; GetPairsOverBound the same for get RPCs.
	PairsOverBound    int `json:"node_key_pairs_over_bound_puts"`
	GetPairsOverBound int `json:"node_key_pairs_over_bound_gets"`
	// Hottest are the most popular keys (at most 3).
	Hottest []zipfKey `json:"hottest_keys"`

	Minutes     []zipfMinute `json:"minutes"`
	QueueDrops  uint64       `json:"datagrams_dropped_at_full_queues"`
	WallSeconds float64      `json:"wall_seconds"`
}

// distribution summarises a load over nodes.
type distribution struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// zipfKey is one popular key's load.
type zipfKey struct {
	Rank  int     `json:"popularity_rank"`
	Share float64 `json:"share_of_operations"`
	// Closest is the key's nearest node; Busiest the node that took the
	// most requests for it (its distance Rank).
	ClosestPuts float64 `json:"closest_put_rpcs_per_min"`
	ClosestGets float64 `json:"closest_get_rpcs_per_min"`
	BusiestPuts float64 `json:"busiest_put_rpcs_per_min"`
	BusiestGets float64 `json:"busiest_get_rpcs_per_min"`
	BusiestRank int     `json:"busiest_distance_rank"`
	// GetsPerMin is how many gets for the key the workload issues a
	// minute (its share of every non-putter's operations).
	GetsPerMin float64 `json:"gets_issued_per_min"`
}

type zipfMinute struct {
	Index    int    `json:"minute"`
	Ops      uint64 `json:"operations"`
	Requests uint64 `json:"requests_received"`
	MaxNode  uint64 `json:"max_node_requests"`
}

// zipfCounter counts the requests each node receives, per key and kind,
// through coraldht's request tracing.
type zipfCounter struct {
	index map[coraldht.ID]int // key → its index
	nodes []nodeCount
}

type nodeCount struct {
	mu   sync.Mutex
	puts map[int]uint64 // key → put probes and stores this minute
	gets map[int]uint64
}

func newZipfCounter(s *sim.Sim, keys []coraldht.ID) *zipfCounter {
	c := &zipfCounter{index: map[coraldht.ID]int{}, nodes: make([]nodeCount, len(s.Nodes))}
	for k, key := range keys {
		c.index[key] = k
	}
	for i, nd := range s.Nodes {
		c.nodes[i].puts, c.nodes[i].gets = map[int]uint64{}, map[int]uint64{}
		nd.TraceRequests(func(r coraldht.RequestTrace) {
			k, ok := c.index[r.Key]
			if !ok {
				return
			}
			n := &c.nodes[i]
			n.mu.Lock()
			if r.Type == "get" {
				n.gets[k]++
			} else {
				n.puts[k]++
			}
			n.mu.Unlock()
		})
	}
	return c
}

// take returns node i's counts since the last take and starts anew.
func (c *zipfCounter) take(i int) (puts, gets map[int]uint64) {
	n := &c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	puts, gets = n.puts, n.gets
	n.puts, n.gets = map[int]uint64{}, map[int]uint64{}
	return puts, gets
}

// zipfExperiment runs the Zipf workload on every topology and seed.
func zipfExperiment(rep *report, ms []*topology.Matrix, seeds []uint64) error {
	fmt.Printf("Zipf workload: %d keys, popularity ∝ 1/k^%g, %d putters per key, %g operations/s per node, n = %d, %d virtual minutes per run\n\n",
		*flagZipfKeys, *flagZipfS, *flagPutters, *flagRate, *flagN, *flagMinutes)
	for _, seed := range seeds {
		for _, m := range ms {
			if m.Source == topology.SourceSynthetic {
				m = topology.Synthetic(250, seed)
			}
			*flagSeed = seed
			r, err := zipfHotspot(m, *flagN)
			if err != nil {
				return err
			}
			printZipf(r)
			rep.Zipf = append(rep.Zipf, r)
			if err := writeReport(rep); err != nil {
				return err
			}
		}
	}
	rep.PeakRSS = sim.PeakRSS()
	rep.Provenance.Finish()
	if err := writeReport(rep); err != nil {
		return err
	}
	fmt.Printf("Wrote %s/%s.json and %[2]s.png\n", *flagOut, *flagName)
	return nil
}

// zipfHotspot runs the Zipf workload on a fresh network of n nodes.
func zipfHotspot(m *topology.Matrix, n int) (*zipfRun, error) {
	if *flagZipfKeys < 1 || *flagPutters < 1 || *flagPutters >= n || *flagZipfS < 0 {
		return nil, fmt.Errorf("-zipf-keys %d, -putters %d, -zipf-s %g: want ≥ 1 key, 1..n-1 putters, s ≥ 0", *flagZipfKeys, *flagPutters, *flagZipfS)
	}
	wallStart := sim.WallNow()
	s, err := sim.Start(sim.Options{N: n, PerSite: *flagPerSite, Seed: *flagSeed, Matrix: m, Tweak: func(i int, c *coraldht.Config) {
		c.Levels = nil
	}})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	beta := coraldht.DefaultConfig().Leak
	r := &zipfRun{Topology: m.Source, Seed: *flagSeed, N: n, Predict: beta * int(math.Ceil(math.Log2(float64(n)))),
		Keys: *flagZipfKeys, S: *flagZipfS, Putters: *flagPutters, Rate: *flagRate}
	rng := rand.New(rand.NewPCG(*flagSeed, 0x7a697066)) // "zipf"
	keys := make([]coraldht.ID, r.Keys)
	putters := make([]map[int]bool, r.Keys) // key → its putters
	for k := range keys {
		keys[k] = coraldht.KeyFor(fmt.Sprintf("http://www.example.com/%d seed %d", k, *flagSeed))
		putters[k] = map[int]bool{}
		for _, i := range rng.Perm(n)[:r.Putters] {
			putters[k][i] = true
		}
	}
	z := sim.NewZipf(r.Keys, r.S)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every putter puts its keys once, 64 at a time.
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for k := range keys {
		for i := range putters[k] {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				val, _ := s.Nodes[i].Addr().MarshalBinary()
				_, _ = s.Nodes[i].Put(ctx, keys[k], val, *flagTTL)
			})
		}
	}
	wg.Wait()

	counter := newZipfCounter(s, keys)
	var ops, puts, gets, putFails, getFails, local atomic.Uint64
	period := time.Duration(float64(time.Second) / *flagRate)
	for i, nd := range s.Nodes {
		offset := time.Duration(i) * period / time.Duration(n)
		nrng := rand.New(rand.NewPCG(*flagSeed, uint64(i)+1))
		val, _ := nd.Addr().MarshalBinary()
		wg.Go(func() {
			time.Sleep(offset)
			for ctx.Err() == nil {
				began := time.Now()
				k := z.Draw(nrng)
				if putters[k][i] {
					if _, err := nd.Put(ctx, keys[k], val, *flagTTL); err != nil && ctx.Err() == nil {
						putFails.Add(1)
					}
					puts.Add(1)
				} else {
					res, err := nd.Get(ctx, keys[k])
					switch {
					case ctx.Err() != nil:
					case err != nil || len(res.Values) == 0:
						getFails.Add(1)
					case res.From.ID == nd.ID():
						local.Add(1)
					}
					gets.Add(1)
				}
				ops.Add(1)
				if d := time.Since(began); d < period {
					time.Sleep(period - d)
				}
			}
		})
	}
	// perPut[k][i], perGet[k][i]: steady requests for key k at node i.
	perPut := make([]map[int]uint64, r.Keys)
	perGet := make([]map[int]uint64, r.Keys)
	for k := range perPut {
		perPut[k], perGet[k] = map[int]uint64{}, map[int]uint64{}
	}
	nodeTotal := make([]uint64, n)
	prevOps := uint64(0)
	steady := *flagMinutes - 1
	for mi := 1; mi <= *flagMinutes; mi++ {
		time.Sleep(time.Minute)
		zm := zipfMinute{Index: mi, Ops: ops.Load() - prevOps}
		prevOps = ops.Load()
		for i := range s.Nodes {
			p, g := counter.take(i)
			var tot uint64
			for k, v := range p {
				tot += v
				if mi > 1 {
					perPut[k][i] += v
				}
			}
			for k, v := range g {
				tot += v
				if mi > 1 {
					perGet[k][i] += v
				}
			}
			zm.Requests += tot
			zm.MaxNode = max(zm.MaxNode, tot)
			if mi > 1 {
				nodeTotal[i] += tot
			}
		}
		r.Minutes = append(r.Minutes, zm)
	}
	cancel()
	wg.Wait()
	r.Puts, r.Gets, r.PutFails, r.GetFails, r.GetsLocal = puts.Load(), gets.Load(), putFails.Load(), getFails.Load(), local.Load()

	per := func(v uint64) float64 { return float64(v) / float64(max(steady, 1)) }
	loads := make([]float64, n)
	for i, v := range nodeTotal {
		loads[i] = per(v)
	}
	slices.Sort(loads)
	r.NodeLoad = distribution{P50: sim.Percentile(loads, 50), P90: sim.Percentile(loads, 90), P99: sim.Percentile(loads, 99),
		Max: loads[n-1]}
	for _, v := range loads {
		r.NodeLoad.Mean += v / float64(n)
	}
	r.Loads = sortedDesc(loads)
	for k := range keys {
		for _, v := range perPut[k] {
			if l := per(v); l > r.MaxPutPair {
				r.MaxPutPair, r.MaxPutKey = l, k
			}
			if per(v) > float64(r.Predict) {
				r.PairsOverBound++
			}
		}
		for _, v := range perGet[k] {
			if l := per(v); l > r.MaxGetPair {
				r.MaxGetPair, r.MaxGetKey = l, k
			}
			if per(v) > float64(r.Predict) {
				r.GetPairsOverBound++
			}
		}
	}
	for k := range min(3, r.Keys) {
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return coraldht.CompareDistance(keys[k], s.Nodes[a].ID(), s.Nodes[b].ID()) })
		zk := zipfKey{Rank: k, Share: z.Share(k), ClosestPuts: per(perPut[k][order[0]]), ClosestGets: per(perGet[k][order[0]]),
			GetsPerMin: z.Share(k) * float64(n-r.Putters) * *flagRate * 60}
		best := -1.0
		for rank, i := range order {
			if l := per(perPut[k][i] + perGet[k][i]); l > best {
				best = l
				zk.BusiestPuts, zk.BusiestGets, zk.BusiestRank = per(perPut[k][i]), per(perGet[k][i]), rank
			}
		}
		r.Hottest = append(r.Hottest, zk)
	}
	ns := s.Net.Stats()
	r.QueueDrops = ns.QueueFull
	r.WallSeconds = sim.WallNow().Sub(wallStart).Seconds()
	return r, nil
}

func printZipf(r *zipfRun) {
	fmt.Printf("[%s, seed %d] Zipf workload, n = %d (β·⌈log2 n⌉ = %d): %d puts (%d failed), %d gets (%d failed or empty, %d answered locally)\n",
		r.Topology, r.Seed, r.N, r.Predict, r.Puts, r.PutFails, r.Gets, r.GetFails, r.GetsLocal)
	fmt.Printf("  requests a node received per minute, all keys: p50 %.0f, p90 %.0f, p99 %.0f, max %.0f\n",
		r.NodeLoad.P50, r.NodeLoad.P90, r.NodeLoad.P99, r.NodeLoad.Max)
	fmt.Printf("  one node, one key: most put RPCs/min %.0f (key of popularity rank %d), %d pairs over the bound; most get RPCs/min %.0f (rank %d), %d pairs over the bound\n",
		r.MaxPutPair, r.MaxPutKey, r.PairsOverBound, r.MaxGetPair, r.MaxGetKey, r.GetPairsOverBound)
	for _, k := range r.Hottest {
		fmt.Printf("  key of rank %d (%.1f%% of operations, %.0f gets/min issued): closest node %.0f put + %.0f get RPCs/min; busiest (distance rank %d) %.0f + %.0f\n",
			k.Rank, 100*k.Share, k.GetsPerMin, k.ClosestPuts, k.ClosestGets, k.BusiestRank, k.BusiestPuts, k.BusiestGets)
	}
	fmt.Printf("  %d datagrams dropped at full queues; %.0f s wall\n\n", r.QueueDrops, r.WallSeconds)
}

// sortedDesc returns v sorted largest first.
func sortedDesc(v []float64) []float64 {
	out := slices.Clone(v)
	slices.SortFunc(out, func(a, b float64) int { return cmp.Compare(b, a) })
	return out
}
