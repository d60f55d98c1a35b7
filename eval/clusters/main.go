// Command clusters measures Coral's self-organizing cluster hierarchy (the
// paper's Figure 7, NSDI'04 §4.3 and §6): nodes placed on the WonderProxy
// sites start as singletons at every level, cluster themselves in virtual
// time, and the result is judged against the RTT matrix and against an
// offline greedy clustering of the same matrix.
//
//	go run ./eval/clusters [-n 738] [-periods 6] [-stable 4h] [-out docs/eval]
//
// It prints a table per level, writes clusters.json and the maps
// clusters-level1.png and clusters-level2.png to -out.
package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/clusterq"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/sim"
	"github.com/coralcdn/coral/eval/internal/topology"
	"github.com/coralcdn/coral/eval/internal/vtime"
)

// params is one experiment's settings.
type params struct {
	N        int
	PerSite  int
	Seed     uint64
	Periods  int           // clustering periods in which the criteria must hold
	Stable   time.Duration // observation after the periods: cluster changes per node
	Interval time.Duration // Config.ClusterInterval
	Joiners  int           // nodes held back, then joined at sites with other nodes
	Out      string
	Plot     bool
	Topology string // topology.Named
}

// periodRow is the quality at the end of one clustering period.
type periodRow struct {
	Period  int                `json:"period"`
	Minutes float64            `json:"virtual_minutes"`
	Quality []clusterq.Quality `json:"quality"`
	Pass    []bool             `json:"criteria_met"` // per level above 0
}

type stability struct {
	Hours          float64   `json:"hours"`
	ChangesPerNode []int     `json:"max_changes_per_node"` // per level above 0: most changes by any one node
	PerNodeHour    []float64 `json:"changes_per_node_hour"`
	NodesOver2     []int     `json:"nodes_changing_more_than_twice"`
}

// joinerResult is the late joiners' outcome one period after joining.
type joinerResult struct {
	Joiners      int     `json:"joiners"`
	InSiteL2     int     `json:"in_site_mates_level2_cluster"`
	MedianJoinS  float64 `json:"median_seconds_to_join"`
	MaxJoinS     float64 `json:"max_seconds_to_join"`
	PeriodSecond float64 `json:"period_seconds"`
}

type report struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Topology   string              `json:"topology"`
	N          int                 `json:"n"`
	PerSite    int                 `json:"per_site"`
	IntervalNs int64               `json:"cluster_interval_ns"`
	Periods    []periodRow         `json:"periods"`
	Converged  []float64           `json:"converged_minutes"` // per level above 0; -1 if never
	Greedy     []clusterq.Quality  `json:"greedy"`
	Final      []clusterq.Quality  `json:"final"`
	Stability  stability           `json:"stability"`
	Joiners    joinerResult        `json:"late_joiners"`
	WallSec    float64             `json:"wall_seconds"`
	PeakRSS    uint64              `json:"peak_rss_bytes"`
}

func main() {
	p := params{Plot: true}
	flag.IntVar(&p.N, "n", 738, "nodes (246 WonderProxy sites × 3)")
	flag.IntVar(&p.PerSite, "persite", 3, "nodes per site")
	flag.Uint64Var(&p.Seed, "seed", 1, "random seed")
	flag.IntVar(&p.Periods, "periods", 6, "clustering periods in which the quality criteria must be met")
	flag.DurationVar(&p.Stable, "stable", 4*time.Hour, "virtual time to watch for cluster changes afterwards")
	flag.DurationVar(&p.Interval, "interval", coraldht.DefaultConfig().ClusterInterval, "clustering period")
	flag.IntVar(&p.Joiners, "joiners", 24, "nodes held back and joined at the end, each at a site with other nodes")
	flag.StringVar(&p.Out, "out", "docs/eval", "directory for clusters.json and the maps")
	flag.StringVar(&p.Topology, "topology", "auto", "RTT matrix: synthetic, wonderproxy ($CORAL_RTT_DATA) or auto")
	flag.Parse()
	vtime.Main(func() error {
		_, err := experiment(p, os.Stdout)
		return err
	})
}

func experiment(p params, w io.Writer) (*report, error) {
	start := sim.WallNow()
	m, err := topology.Named(p.Topology, p.Seed)
	if err != nil {
		return nil, err
	}
	prov := evalrun.StartProvenance("clusters", m.Source)
	fmt.Fprintln(w, prov)
	// The last node placed at each of the first Joiners sites is held
	// back: it joins at the end, next to nodes already clustered.
	late := func(i int) bool {
		return p.PerSite > 1 && i/p.PerSite < p.Joiners && i%p.PerSite == p.PerSite-1 && i < p.N
	}
	s, err := sim.Start(sim.Options{N: p.N, PerSite: p.PerSite, Seed: p.Seed, Matrix: m, Late: late, Tweak: func(i int, c *coraldht.Config) {
		c.ClusterInterval = p.Interval
		// Each simulated site owns a 10.a.b.0/24: a meaningful hint here.
		c.HintPrivate = true
	}})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var present []int // nodes that joined at the start
	for i := range s.Nodes {
		if !late(i) {
			present = append(present, i)
		}
	}
	placedPresent := pick(s.Placed, present)
	levels := s.Nodes[0].Levels()[1:]
	rep := &report{Provenance: prov, Topology: m.Source, N: len(present), PerSite: p.PerSite, IntervalNs: int64(p.Interval)}
	for _, lv := range levels {
		rep.Greedy = append(rep.Greedy, clusterq.Measure(m, placedPresent, lv.Level, lv.Threshold, clusterq.Greedy(m, placedPresent, lv.Threshold)))
		rep.Converged = append(rep.Converged, -1)
	}
	snapshot := func() []clusterq.Quality {
		var qs []clusterq.Quality
		for _, lv := range levels {
			qs = append(qs, clusterq.Measure(m, placedPresent, lv.Level, lv.Threshold, pick(labelsAt(s, lv.Level), present)))
		}
		return qs
	}
	fmt.Fprintf(w, "%d nodes on %s, %d per site (%d more join at the end), cluster interval %v\n\n", len(present), m.Source, p.PerSite, p.N-len(present), p.Interval)
	fmt.Fprintf(w, "%-7s %-6s %9s %9s %9s %10s %9s %9s  %s\n", "period", "level", "clusters", "single", "mean", "greedy/2", "pairs80", "notalone", "criteria")
	began := time.Now()
	for period := 1; period <= p.Periods; period++ {
		time.Sleep(p.Interval)
		row := periodRow{Period: period, Minutes: time.Since(began).Minutes(), Quality: snapshot()}
		for i, q := range row.Quality {
			ok := clusterq.Criteria(q, rep.Greedy[i])
			row.Pass = append(row.Pass, ok)
			if ok && rep.Converged[i] < 0 {
				rep.Converged[i] = row.Minutes
			}
			fmt.Fprintf(w, "%-7d %-6d %9d %9d %9.2f %10.2f %8.1f%% %8.1f%%  %v\n", period, q.Level, q.Clusters, q.Singletons,
				q.MeanSize, rep.Greedy[i].MeanSize/2, 100*q.PairRuleOK, 100*q.NonSingletonOfThose, ok)
		}
		rep.Periods = append(rep.Periods, row)
	}
	final := rep.Periods[len(rep.Periods)-1].Quality
	if p.Plot {
		for _, lv := range levels {
			path := filepath.Join(p.Out, fmt.Sprintf("clusters-level%d.png", lv.Level))
			if err := clusterq.PlotMap(path, m, placedPresent, pick(labelsAt(s, lv.Level), present), lv.Level, lv.Threshold); err != nil {
				return nil, err
			}
		}
	}
	fmt.Fprintln(w)
	clusterq.PrintQuality(w, final, rep.Greedy)

	// Stability: changes per node over the following hours.
	before := changesAt(s)
	history := watch(s, present, levels, p.Stable)
	after := changesAt(s)
	st := stability{Hours: p.Stable.Hours()}
	for li := range levels {
		most, over, total := 0, 0, 0
		for _, i := range present {
			d := after[i][li] - before[i][li]
			most = max(most, d)
			total += d
			if d > 2 {
				over++
			}
		}
		st.ChangesPerNode = append(st.ChangesPerNode, most)
		st.NodesOver2 = append(st.NodesOver2, over)
		st.PerNodeHour = append(st.PerNodeHour, float64(total)/float64(len(present))/p.Stable.Hours())
	}
	rep.Stability = st
	for li, lv := range levels {
		for _, i := range present {
			if after[i][li]-before[i][li] > 2 {
				fmt.Fprintf(w, "node %v (site %s) level %d: %s\n", s.Nodes[i].Addr(), m.Sites[s.Placed[i].Site].Name, lv.Level, history[i][li])
			}
		}
	}
	rep.Final = snapshot()
	fmt.Fprintf(w, "\nAfter %v more: ", p.Stable)
	for li, lv := range levels {
		fmt.Fprintf(w, "level %d: %.3f changes/node/hour, most by one node %d, nodes with > 2: %d; ", lv.Level,
			st.PerNodeHour[li], st.ChangesPerNode[li], st.NodesOver2[li])
	}
	fmt.Fprintln(w)
	for li, lv := range levels {
		fmt.Fprintf(w, "level %d converged (all criteria) after %.0f virtual minutes (-1: not within %d periods); final %d clusters, mean %.2f\n",
			lv.Level, rep.Converged[li], p.Periods, rep.Final[li].Clusters, rep.Final[li].MeanSize)
	}
	rep.Joiners = joinLate(s, late, p, w)

	rep.WallSec = sim.WallNow().Sub(start).Seconds()
	rep.PeakRSS = sim.PeakRSS()
	fmt.Fprintf(w, "wall %.0f s, peak RSS %d MiB\n", rep.WallSec, rep.PeakRSS>>20)
	prov.Finish()
	return rep, sim.WriteJSON(filepath.Join(p.Out, "clusters.json"), rep)
}

// labelsAt returns every node's cluster ID at level lvl, as hex.
func labelsAt(s *sim.Sim, lvl int) []string {
	out := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		out[i] = n.Levels()[lvl].Cluster.ID.String()
	}
	return out
}

// changesAt returns every node's cluster-change count per level above 0.
func changesAt(s *sim.Sim) [][]int {
	out := make([][]int, len(s.Nodes))
	for i, n := range s.Nodes {
		for _, lv := range n.Levels()[1:] {
			out[i] = append(out[i], lv.Changes)
		}
	}
	return out
}

// joinLate bootstraps the held-back nodes, each through a random node at
// another site, waits one clustering period and checks that each is in the
// level-2 (fastest level's) cluster of its site-mates.
func joinLate(s *sim.Sim, late func(int) bool, p params, w io.Writer) joinerResult {
	res := joinerResult{PeriodSecond: p.Interval.Seconds()}
	top := len(s.Nodes[0].Levels()) - 1
	var joiners []int
	for i := range s.Nodes {
		if late(i) {
			joiners = append(joiners, i)
		}
	}
	if len(joiners) == 0 || top < 1 {
		return res
	}
	rng := rand.New(rand.NewPCG(p.Seed, 99))
	joinedAt := make(map[int]time.Time)
	for _, i := range joiners {
		via := rng.IntN(len(s.Nodes))
		for late(via) || s.Placed[via].Site == s.Placed[i].Site {
			via = rng.IntN(len(s.Nodes))
		}
		joinedAt[i] = time.Now()
		if err := s.Join(i, via); err != nil {
			fmt.Fprintf(w, "joiner %d: %v\n", i, err)
		}
	}
	time.Sleep(p.Interval)
	var waits []float64
	for _, i := range joiners {
		res.Joiners++
		mine := s.Nodes[i].Levels()[top]
		found := false
		var mates []string
		for j := range s.Nodes {
			if j != i && s.Placed[j].Site == s.Placed[i].Site {
				id := s.Nodes[j].Levels()[top].Cluster.ID
				mates = append(mates, id.Short())
				if id == mine.Cluster.ID && !found {
					found = true
					res.InSiteL2++
					waits = append(waits, mine.LastChange.Sub(joinedAt[i]).Seconds())
				}
			}
		}
		if !found {
			st := s.Nodes[i].Stats()
			fmt.Fprintf(w, "joiner %v is in %v (changes %d, validations %d, hint lookups %d); its site-mates are in %v",
				s.Nodes[i].Addr(), mine.Cluster.ID.Short(), mine.Changes, st.ClusterValidations, st.HintLookups, mates)
			// How good the site-mates' cluster is for the joiner, by the
			// matrix: the share of its members under the threshold.
			for j := range s.Nodes {
				if j == i || s.Placed[j].Site != s.Placed[i].Site {
					continue
				}
				cid := s.Nodes[j].Levels()[top].Cluster.ID
				under, total := 0, 0
				for k := range s.Nodes {
					if k != i && s.Nodes[k].Levels()[top].Cluster.ID == cid {
						total++
						if s.Matrix.NodeRTT(s.Placed[i], s.Placed[k]) < mine.Threshold {
							under++
						}
					}
				}
				fmt.Fprintf(w, "; %d of the %d members of %v are under %v from it", under, total, cid.Short(), mine.Threshold)
				break
			}
			fmt.Fprintln(w)
		}
	}
	slices.Sort(waits)
	if len(waits) > 0 {
		res.MedianJoinS = waits[len(waits)/2]
		res.MaxJoinS = waits[len(waits)-1]
	}
	fmt.Fprintf(w, "late joiners: %d of %d in their site-mates' level-%d cluster one period (%v) after joining; median %.1f s, max %.1f s after bootstrap\n",
		res.InSiteL2, res.Joiners, top, p.Interval, res.MedianJoinS, res.MaxJoinS)
	return res
}

// pick returns xs[i] for each i in idx.
func pick[T any](xs []T, idx []int) []T {
	out := make([]T, len(idx))
	for k, i := range idx {
		out[k] = xs[i]
	}
	return out
}

// watch lets d pass in one-minute steps and returns, per node and level
// above 0, the clusters the node went through with their sizes at the time.
func watch(s *sim.Sim, present []int, levels []coraldht.LevelInfo, d time.Duration) [][]string {
	out := make([][]string, len(s.Nodes))
	last := make([][]string, len(s.Nodes))
	for _, i := range present {
		out[i] = make([]string, len(levels))
		last[i] = make([]string, len(levels))
	}
	began := time.Now()
	for step := time.Duration(0); step <= d; step += time.Minute {
		if step > 0 {
			time.Sleep(time.Minute)
		}
		for li, lv := range levels {
			labels := labelsAt(s, lv.Level)
			size := make(map[string]int)
			for _, i := range present {
				size[labels[i]]++
			}
			for _, i := range present {
				if labels[i] != last[i][li] {
					last[i][li] = labels[i]
					out[i][li] += fmt.Sprintf(" %.0fm→%s(%d)", time.Since(began).Minutes(), labels[i][:6], size[labels[i]])
				}
			}
		}
	}
	return out
}
