package clusterq

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/eval/internal/topology"
)

// Coral's acceptance rule: a cluster is acceptable to a node when at least
// acceptNum/acceptDen (80 %) of the other members are strictly under the
// level's RTT threshold. Kept as a fraction so that the comparisons are
// exact integer ones.
const (
	acceptNum = 4
	acceptDen = 5
)

// atLeast80 reports whether part is at least 80 % of whole (true when whole
// is 0: nothing to satisfy).
func atLeast80(part, whole int) bool { return acceptDen*part >= acceptNum*whole }

// Quality describes the clusters of one level, given as one label per node,
// against the RTT matrix: how many there are, how big, and how well they
// obey Coral's 80 % rule. "Under the threshold" means strictly below it.
//
// Shares whose denominator is empty (no non-singleton cluster, no node with
// a neighbour, no node) are 0; NonSingleton and HaveNeighbour give the
// denominators.
type Quality struct {
	Level     int           `json:"level"`
	Threshold time.Duration `json:"threshold_ns"`
	Nodes     int           `json:"nodes"`
	// Clusters counts distinct labels (each empty label counted apart).
	Clusters int `json:"clusters"`
	// Singletons counts clusters of one node.
	Singletons int `json:"singletons"`
	// NonSingleton counts clusters of two or more nodes: the denominator
	// of PairRuleOK and MemberRuleOK.
	NonSingleton int `json:"non_singleton_clusters"`
	// MeanSize is Nodes / Clusters.
	MeanSize float64 `json:"mean_size"`
	MaxSize  int     `json:"max_size"`
	// Sizes lists the cluster sizes, largest first.
	Sizes []int `json:"sizes"`
	// PairRuleOK is the share of non-singleton clusters in which at least
	// 80 % of the unordered member pairs are under the threshold.
	PairRuleOK float64 `json:"pair_rule_ok"`
	// MemberRuleOK is the share of non-singleton clusters in which every
	// member has at least 80 % of the other members under the threshold:
	// the cluster is acceptable to all its members. It implies the pair
	// rule.
	MemberRuleOK float64 `json:"member_rule_ok"`
	// NodesInAcceptable is the share of nodes whose own cluster is
	// acceptable to them (at least 80 % of the other members under the
	// threshold); a node alone in its cluster counts as acceptable.
	NodesInAcceptable float64 `json:"nodes_in_acceptable"`
	// HaveNeighbour counts nodes with at least one other node (in any
	// cluster) under the threshold: the nodes that could be clustered.
	HaveNeighbour int `json:"nodes_with_neighbour"`
	// NonSingletonOfThose is the share of the HaveNeighbour nodes that are
	// in a non-singleton cluster.
	NonSingletonOfThose float64 `json:"non_singleton_of_those"`
}

// groups turns labels into clusters: clusterOf[i] is node i's cluster index
// and members[c] lists cluster c's nodes in ascending order. Clusters are
// numbered in order of first appearance, so the result does not depend on
// map iteration. An empty label means "no cluster" and makes the node a
// singleton of its own.
func groups(labels []string) (clusterOf []int, members [][]int) {
	clusterOf = make([]int, len(labels))
	index := make(map[string]int)
	for i, l := range labels {
		c, ok := index[l]
		if !ok || l == "" {
			c = len(members)
			members = append(members, nil)
			if l != "" {
				index[l] = c
			}
		}
		clusterOf[i] = c
		members[c] = append(members[c], i)
	}
	return clusterOf, members
}

// nearTable returns the n×n table (row-major, n = len(placed)) of which
// node pairs are strictly under the threshold; the diagonal is false. It
// is computed once per (placement, threshold) so that the analysis costs
// n²/2 RTT look-ups and afterwards only memory reads.
func nearTable(m *topology.Matrix, placed []topology.Node, threshold time.Duration) []bool {
	n := len(placed)
	near := make([]bool, n*n)
	for i := range n {
		for j := i + 1; j < n; j++ {
			if m.NodeRTT(placed[i], placed[j]) < threshold {
				near[i*n+j] = true
				near[j*n+i] = true
			}
		}
	}
	return near
}

// Measure computes the Quality of one level's clustering: labels[i] is the
// cluster label of placed[i] (see groups for empty labels). It panics if
// the two slices differ in length.
func Measure(m *topology.Matrix, placed []topology.Node, level int, threshold time.Duration, labels []string) Quality {
	if len(labels) != len(placed) {
		panic(fmt.Sprintf("clusters: measure: %d labels for %d nodes", len(labels), len(placed)))
	}
	n := len(placed)
	q := Quality{Level: level, Threshold: threshold, Nodes: n}
	near := nearTable(m, placed, threshold)
	clusterOf, members := groups(labels)

	var pairOK, memberOK, acceptable int
	for _, mem := range members {
		k := len(mem)
		q.Sizes = append(q.Sizes, k)
		if k == 1 {
			q.Singletons++
			acceptable++
			continue
		}
		q.NonSingleton++
		nearPairs, allAccept := 0, true
		for _, a := range mem {
			row := near[a*n : (a+1)*n]
			others := 0
			for _, b := range mem {
				if row[b] {
					others++
				}
			}
			nearPairs += others // counts each near pair twice
			if atLeast80(others, k-1) {
				acceptable++
			} else {
				allAccept = false
			}
		}
		if atLeast80(nearPairs/2, k*(k-1)/2) {
			pairOK++
		}
		if allAccept {
			memberOK++
		}
	}
	slices.SortFunc(q.Sizes, func(a, b int) int { return cmp.Compare(b, a) })
	q.Clusters = len(members)
	if q.Clusters > 0 {
		q.MeanSize = float64(n) / float64(q.Clusters)
		q.MaxSize = q.Sizes[0]
	}
	if q.NonSingleton > 0 {
		q.PairRuleOK = float64(pairOK) / float64(q.NonSingleton)
		q.MemberRuleOK = float64(memberOK) / float64(q.NonSingleton)
	}
	if n > 0 {
		q.NodesInAcceptable = float64(acceptable) / float64(n)
	}

	clustered := 0
	for i := range n {
		if !slices.Contains(near[i*n:(i+1)*n], true) {
			continue
		}
		q.HaveNeighbour++
		if len(members[clusterOf[i]]) > 1 {
			clustered++
		}
	}
	if q.HaveNeighbour > 0 {
		q.NonSingletonOfThose = float64(clustered) / float64(q.HaveNeighbour)
	}
	return q
}

// Criteria are the acceptance tests of one level's quality against the
// greedy baseline: (a) ≥ 95 % of clusters satisfy the 80 % rule, (b) ≥ 90 %
// of the nodes with a neighbour under the threshold are not alone, (c) mean
// size at least half the greedy one.
func Criteria(q, greedy Quality) bool {
	return q.PairRuleOK >= 0.95 && q.NonSingletonOfThose >= 0.90 && q.MeanSize >= greedy.MeanSize/2
}

// Greedy is the offline baseline the nodes' own clustering is
// compared with: a central planner that knows every RTT.
//
// It repeatedly takes as seed the unassigned node with the most unassigned
// nodes under the threshold (the lowest index on ties), and grows the
// seed's cluster from those unassigned neighbours, nearest the seed first
// (ties by index), in a single pass. A candidate joins only if it is under
// the threshold to at least 80 % of the current members and every current
// member would still have at least 80 % of the others under the threshold
// after it joins. So every cluster is acceptable to all its members (the
// member rule, which implies the pair rule) by construction. Nodes with no
// unassigned neighbour end up alone.
//
// The labels are "g0", "g1", … in the order the clusters were formed. The
// result is a pure function of the arguments; it takes O(n²) memory
// (one bool per node pair) and about O(n² + Σ candidates²) time, well under
// a second for a few thousand nodes.
func Greedy(m *topology.Matrix, placed []topology.Node, threshold time.Duration) []string {
	n := len(placed)
	near := nearTable(m, placed, threshold)
	labels := make([]string, n)
	// free[i]: number of unassigned nodes under the threshold from i.
	free := make([]int, n)
	for i := range n {
		for _, b := range near[i*n : (i+1)*n] {
			if b {
				free[i]++
			}
		}
	}
	assigned := make([]bool, n)
	// count[j]: for a candidate, how many current members are near it; for
	// a member, how many other members are near it.
	count := make([]int, n)
	member := make([]bool, n)
	type cand struct {
		node int
		rtt  time.Duration
	}
	var cands []cand
	var members []int
	next := 0 // next cluster number
	for left := n; left > 0; {
		seed := -1
		for i := range n {
			if !assigned[i] && (seed < 0 || free[i] > free[seed]) {
				seed = i
			}
		}
		if free[seed] == 0 {
			// No unassigned node has an unassigned neighbour: the rest
			// are singletons.
			for i := range n {
				if !assigned[i] {
					assigned[i] = true
					labels[i] = "g" + strconv.Itoa(next)
					next++
				}
			}
			break
		}

		cands = cands[:0]
		row := near[seed*n : (seed+1)*n]
		for j := range n {
			if !assigned[j] && row[j] {
				cands = append(cands, cand{j, m.NodeRTT(placed[seed], placed[j])})
				count[j] = 1 // near the seed
			}
		}
		slices.SortFunc(cands, func(a, b cand) int {
			return cmp.Or(cmp.Compare(a.rtt, b.rtt), cmp.Compare(a.node, b.node))
		})
		members = append(members[:0], seed)
		member[seed], count[seed] = true, 0
		for _, c := range cands {
			size := len(members) // each member's "others" once c has joined
			if !atLeast80(count[c.node], size) {
				continue
			}
			crow := near[c.node*n : (c.node+1)*n]
			ok := true
			for _, mb := range members {
				after := count[mb]
				if crow[mb] {
					after++
				}
				if !atLeast80(after, size) {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			for _, mb := range members {
				if crow[mb] {
					count[mb]++
				}
			}
			members = append(members, c.node)
			member[c.node] = true
			for _, d := range cands {
				if !member[d.node] && crow[d.node] {
					count[d.node]++
				}
			}
		}

		label := "g" + strconv.Itoa(next)
		next++
		for _, mb := range members {
			assigned[mb] = true
			labels[mb] = label
		}
		for _, mb := range members {
			member[mb] = false
			for j, b := range near[mb*n : (mb+1)*n] {
				if b && !assigned[j] {
					free[j]--
				}
			}
		}
		left -= len(members)
	}
	return labels
}

// PrintQuality prints one aligned table per level of online (the nodes'
// own clustering), with the greedy baseline of the same level beside it
// when greedy has one. Shares with an empty denominator print as "n/a".
func PrintQuality(w io.Writer, online, greedy []Quality) {
	for _, on := range online {
		var gr *Quality
		for i := range greedy {
			if greedy[i].Level == on.Level {
				gr = &greedy[i]
				break
			}
		}
		fmt.Fprintf(w, "Level %d (RTT < %v), %d nodes\n", on.Level, on.Threshold, on.Nodes)
		if gr == nil {
			fmt.Fprintf(w, "  %-42s %10s\n", "", "online")
		} else {
			fmt.Fprintf(w, "  %-42s %10s %10s %14s\n", "", "online", "greedy", "online/greedy")
		}
		row := func(what string, f func(q Quality) string, ratio func(q Quality) float64) {
			if gr == nil {
				fmt.Fprintf(w, "  %-42s %10s\n", what, f(on))
				return
			}
			r := ""
			if ratio != nil {
				if d := ratio(*gr); d != 0 {
					r = fmt.Sprintf("%.2f", ratio(on)/d)
				}
			}
			fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %-42s %10s %10s %14s", what, f(on), f(*gr), r), " "))
		}
		pct := func(share func(q Quality) float64, denom func(q Quality) int) func(Quality) string {
			return func(q Quality) string {
				if denom(q) == 0 {
					return "n/a"
				}
				return fmt.Sprintf("%.1f %%", 100*share(q))
			}
		}
		num := func(v func(q Quality) int) func(Quality) string {
			return func(q Quality) string { return strconv.Itoa(v(q)) }
		}
		flt := func(v func(q Quality) int) func(Quality) float64 {
			return func(q Quality) float64 { return float64(v(q)) }
		}
		nodes := func(q Quality) int { return q.Nodes }
		nonSingle := func(q Quality) int { return q.NonSingleton }
		clusters := func(q Quality) int { return q.Clusters }
		maxSize := func(q Quality) int { return q.MaxSize }

		row("nodes in clusters acceptable to them", pct(func(q Quality) float64 { return q.NodesInAcceptable }, nodes), nil)
		row("clusters", num(clusters), flt(clusters))
		row("  of which singletons", num(func(q Quality) int { return q.Singletons }), nil)
		row("mean cluster size", func(q Quality) string { return fmt.Sprintf("%.2f", q.MeanSize) },
			func(q Quality) float64 { return q.MeanSize })
		row("largest cluster", num(maxSize), flt(maxSize))
		row("non-singleton clusters passing pair rule", pct(func(q Quality) float64 { return q.PairRuleOK }, nonSingle), nil)
		row("non-singleton clusters passing member rule", pct(func(q Quality) float64 { return q.MemberRuleOK }, nonSingle), nil)
		row(fmt.Sprintf("nodes with a neighbour < %v", on.Threshold), num(func(q Quality) int { return q.HaveNeighbour }), nil)
		row("  of those in a non-singleton cluster", pct(func(q Quality) float64 { return q.NonSingletonOfThose },
			func(q Quality) int { return q.HaveNeighbour }), nil)
		fmt.Fprintln(w)
	}
}
