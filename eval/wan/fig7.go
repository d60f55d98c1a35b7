//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/coralcdn/coral/eval/internal/clusterq"
	"github.com/coralcdn/coral/eval/internal/topology"
	"github.com/coralcdn/coral/internal/lab/wan/fleet"
)

// thresholds are the default levels' RTT bounds, levels 1 and 2.
var thresholds = []time.Duration{60 * time.Millisecond, 20 * time.Millisecond}

// clusterSnapshot is the clustering at one moment: every node's cluster
// per level (1, 2) and its quality.
type clusterSnapshot struct {
	At      float64            `json:"at_seconds"` // since the nodes started
	Labels  [][]string         `json:"labels"`     // [level-1][node]
	Quality []clusterq.Quality `json:"quality"`
	Pass    []bool             `json:"criteria_met"`
}

// clusterRun is Figure 7 for one network: snapshots while it formed, the
// offline baseline, and when each level settled.
type clusterRun struct {
	Nodes     []string           `json:"nodes"`      // node names ("n3.1")
	NodeSites []int              `json:"node_sites"` // lab site of each node
	Snapshots []clusterSnapshot  `json:"snapshots"`
	Greedy    []clusterq.Quality `json:"greedy"`
	// SettledS is, per level, when the last cluster change before the
	// end happened (seconds since start); CriteriaS the first snapshot at
	// which the level met the criteria (eval/clusters': 80 % rule, not
	// alone, mean size), -1 if none did.
	SettledS  []float64 `json:"settled_seconds"`
	CriteriaS []float64 `json:"criteria_seconds"`
	// FormedS is, per level, the last cluster change any node made (its
	// own clock: seconds since the nodes started), -1 if none changed:
	// when the clusters seen at the end had formed.
	FormedS []float64 `json:"formed_seconds"`
	// LiveProxies are, per name server (CoreDNS node), the proxies of its
	// clusters it saw live at levels 0, 1, 2 at the end (real run only:
	// CoreDNS does not report its cluster IDs).
	LiveProxies map[string][]float64 `json:"live_proxies_by_name_server,omitempty"`
}

// placedNodes is the nodes as clusterq wants them: at their matrix sites.
func placedNodes(w *world, sites []int) []topology.Node {
	var out []topology.Node
	for i, s := range sites {
		out = append(out, topology.Node{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 4000),
			Site: w.Sites[s], Key: uint64(i)*0x9e3779b97f4a7c15 + 1})
	}
	return out
}

func (r *clusterRun) judge(w *world, at time.Duration, labels [][]string) {
	placed := placedNodes(w, r.NodeSites)
	if r.Greedy == nil {
		for li, th := range thresholds {
			r.Greedy = append(r.Greedy, clusterq.Measure(w.M, placed, li+1, th, clusterq.Greedy(w.M, placed, th)))
		}
		r.CriteriaS = []float64{-1, -1}
	}
	snap := clusterSnapshot{At: at.Seconds(), Labels: labels}
	for li, th := range thresholds {
		q := clusterq.Measure(w.M, placed, li+1, th, labels[li])
		ok := clusterq.Criteria(q, r.Greedy[li])
		snap.Quality = append(snap.Quality, q)
		snap.Pass = append(snap.Pass, ok)
		if ok && r.CriteriaS[li] < 0 {
			r.CriteriaS[li] = at.Seconds()
		}
	}
	r.Snapshots = append(r.Snapshots, snap)
}

// settle fills SettledS from the snapshots: the last one whose labels
// differ from the one before.
func (r *clusterRun) settle() {
	r.SettledS = []float64{0, 0}
	for li := range thresholds {
		for i := 1; i < len(r.Snapshots); i++ {
			if !samePartition(r.Snapshots[i].Labels[li], r.Snapshots[i-1].Labels[li]) {
				r.SettledS[li] = r.Snapshots[i].At
			}
		}
	}
}

// samePartition reports whether two labelings group the nodes alike.
func samePartition(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	ab, ba := map[string]string{}, map[string]string{}
	for i := range a {
		if x, ok := ab[a[i]]; ok && x != b[i] {
			return false
		}
		if x, ok := ba[b[i]]; ok && x != a[i] {
			return false
		}
		ab[a[i]], ba[b[i]] = b[i], a[i]
	}
	return true
}

// watchClusters snapshots the real nodes' clusters every step until d
// has passed since start (the nodes' start).
func watchClusters(ctx context.Context, f *fleet.Fleet, w *world, start time.Time, d, step time.Duration) (*clusterRun, error) {
	r := &clusterRun{}
	for _, nd := range f.Nodes {
		r.Nodes = append(r.Nodes, nd.Name())
		r.NodeSites = append(r.NodeSites, nd.Site)
	}
	for {
		labels := [][]string{make([]string, len(f.Nodes)), make([]string, len(f.Nodes))}
		r.FormedS = []float64{-1, -1}
		for i, nd := range f.Nodes {
			st, err := nd.Status(ctx)
			if err != nil {
				return r, err
			}
			for _, lv := range st.Levels {
				if lv.Level >= 1 && lv.Level <= 2 {
					labels[lv.Level-1][i] = lv.Cluster
					if lv.LastChange != nil {
						r.FormedS[lv.Level-1] = max(r.FormedS[lv.Level-1], lv.LastChange.Sub(start).Seconds())
					}
				}
			}
		}
		r.judge(w, time.Since(start), labels)
		if time.Since(start) >= d || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(step):
		}
	}
	r.settle()
	r.LiveProxies = map[string][]float64{}
	for _, nd := range f.Nodes {
		var live []float64
		for lvl := range 3 {
			v, _ := nd.Metric(ctx, fleet.PortMetrics, "coredns_coral_live_proxies", "level", fmt.Sprint(lvl))
			live = append(live, v)
		}
		r.LiveProxies[nd.Name()] = live
	}
	return r, nil
}

func (r *clusterRun) last() clusterSnapshot { return r.Snapshots[len(r.Snapshots)-1] }

// printClusters prints the run's final clusters per level, by site name,
// and the quality table.
func printClusters(out io.Writer, w *world, name string, r *clusterRun) {
	fmt.Fprintf(out, "%s: %d nodes; last cluster change %.1f s (level 1) and %.1f s (level 2) after the start; criteria met at the snapshot of %.0f s / %.0f s (-1: never)\n",
		name, len(r.NodeSites), r.FormedS[0], r.FormedS[1], r.CriteriaS[0], r.CriteriaS[1])
	last := r.last()
	for li := range thresholds {
		groups := map[string][]string{}
		var order []string
		for i, l := range last.Labels[li] {
			if _, ok := groups[l]; !ok {
				order = append(order, l)
			}
			groups[l] = append(groups[l], w.name(r.NodeSites[i]))
		}
		fmt.Fprintf(out, "  level %d (%v):", li+1, thresholds[li])
		for _, l := range order {
			fmt.Fprintf(out, " {%s}", joinCompact(groups[l]))
		}
		fmt.Fprintln(out)
	}
	clusterq.PrintQuality(out, last.Quality, r.Greedy)
}

// joinCompact lists names, with a count for repeats ("a×2 b").
func joinCompact(names []string) string {
	out := ""
	for i := 0; i < len(names); {
		j := i
		for j < len(names) && names[j] == names[i] {
			j++
		}
		if out != "" {
			out += " "
		}
		out += names[i]
		if j-i > 1 {
			out += fmt.Sprintf("×%d", j-i)
		}
		i = j
	}
	return out
}

// plotClusters draws the real run's final clusters on maps.
func plotClusters(dir, prefix string, w *world, r *clusterRun) error {
	placed := placedNodes(w, r.NodeSites)
	for li, th := range thresholds {
		path := filepath.Join(dir, fmt.Sprintf("%s-clusters-level%d.png", prefix, li+1))
		if err := clusterq.PlotMap(path, w.M, placed, r.last().Labels[li], li+1, th); err != nil {
			return err
		}
	}
	return nil
}
