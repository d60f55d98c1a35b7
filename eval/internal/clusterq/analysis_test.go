package clusterq

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/eval/internal/topology"
)

// siteLabels labels every node with its site: site-mates together.
func siteLabels(placed []topology.Node) []string {
	labels := make([]string, len(placed))
	for i, nd := range placed {
		labels[i] = "site" + strconv.Itoa(nd.Site)
	}
	return labels
}

// farSites returns two distinct sites among placed's whose RTT is at
// least min.
func farSites(t *testing.T, m *topology.Matrix, placed []topology.Node, min time.Duration) (int, int) {
	t.Helper()
	for _, a := range placed {
		for _, b := range placed {
			if a.Site != b.Site && m.RTT(a.Site, b.Site) >= min {
				return a.Site, b.Site
			}
		}
	}
	t.Fatalf("no two sites %v apart", min)
	return 0, 0
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestMeasureSites(t *testing.T) {
	m := topology.Synthetic(20, 1)
	placed := m.Place(60, 3, 1)
	const th = 20 * time.Millisecond

	// Site-mates together: 20 clusters of 3, all fine (intra-site RTTs are
	// at most 5 ms).
	labels := siteLabels(placed)
	q := Measure(m, placed, 2, th, labels)
	if q.Level != 2 || q.Threshold != th || q.Nodes != 60 || q.Clusters != 20 || q.Singletons != 0 ||
		q.NonSingleton != 20 || q.MaxSize != 3 || !near(q.MeanSize, 3) {
		t.Fatalf("site clusters: %+v", q)
	}
	if len(q.Sizes) != 20 || slices.ContainsFunc(q.Sizes, func(s int) bool { return s != 3 }) {
		t.Fatalf("sizes %v", q.Sizes)
	}
	if q.PairRuleOK != 1 || q.MemberRuleOK != 1 || q.NodesInAcceptable != 1 || q.HaveNeighbour != 60 || q.NonSingletonOfThose != 1 {
		t.Fatalf("site clusters should all pass: %+v", q)
	}

	// Two far-apart sites in one cluster: 6 of its 15 pairs are near, so
	// it fails both rules, and none of its 6 nodes finds it acceptable.
	a, b := farSites(t, m, placed, 3*th)
	merged := slices.Clone(labels)
	for i, nd := range placed {
		if nd.Site == b {
			merged[i] = "site" + strconv.Itoa(a)
		}
	}
	q = Measure(m, placed, 2, th, merged)
	if q.Clusters != 19 || q.MaxSize != 6 || q.Sizes[0] != 6 || q.Sizes[1] != 3 || !near(q.MeanSize, 60.0/19) {
		t.Fatalf("merged: %+v", q)
	}
	if !near(q.PairRuleOK, 18.0/19) || !near(q.MemberRuleOK, 18.0/19) || !near(q.NodesInAcceptable, 54.0/60) {
		t.Fatalf("merged cluster should fail the rules: %+v", q)
	}
	// Under a threshold above every RTT the same cluster is fine.
	q = Measure(m, placed, 0, time.Hour, merged)
	if q.PairRuleOK != 1 || q.MemberRuleOK != 1 || q.NodesInAcceptable != 1 {
		t.Fatalf("merged, 1 h threshold: %+v", q)
	}

	// One node on its own: a singleton, still acceptable to itself, but
	// no longer a clustered node with a neighbour.
	solo := slices.Clone(labels)
	solo[0] = "alone"
	q = Measure(m, placed, 2, th, solo)
	if q.Clusters != 21 || q.Singletons != 1 || q.NonSingleton != 20 || q.Sizes[20] != 1 || !near(q.MeanSize, 60.0/21) ||
		q.NodesInAcceptable != 1 || q.HaveNeighbour != 60 || !near(q.NonSingletonOfThose, 59.0/60) {
		t.Fatalf("one singleton: %+v", q)
	}

	// Empty labels mean "no cluster": 60 singletons, no share to compute.
	q = Measure(m, placed, 2, th, make([]string, 60))
	if q.Clusters != 60 || q.Singletons != 60 || q.NonSingleton != 0 || q.MaxSize != 1 || q.PairRuleOK != 0 ||
		q.MemberRuleOK != 0 || q.NodesInAcceptable != 1 || q.NonSingletonOfThose != 0 {
		t.Fatalf("no clusters: %+v", q)
	}

	// "Under" is strict: at a zero threshold nobody has a neighbour.
	if q := Measure(m, placed, 2, 0, labels); q.HaveNeighbour != 0 || q.PairRuleOK != 0 || q.NodesInAcceptable != 0 {
		t.Fatalf("zero threshold: %+v", q)
	}
}

// TestMeasurePairVersusMember builds a cluster that passes the pair rule
// but not the member rule: ten site-mates plus one far node (45 of 55
// pairs near, but the far node has no near member).
func TestMeasurePairVersusMember(t *testing.T) {
	m := topology.Synthetic(20, 2)
	placed := m.Place(60, 10, 2)
	const th = 20 * time.Millisecond
	labels := siteLabels(placed)
	a, b := farSites(t, m, placed, 3*th)
	moved := slices.IndexFunc(placed, func(nd topology.Node) bool { return nd.Site == b })
	labels[moved] = "site" + strconv.Itoa(a)
	q := Measure(m, placed, 2, th, labels)
	if q.Clusters != 6 || q.MaxSize != 11 || q.Sizes[0] != 11 || q.Sizes[5] != 9 {
		t.Fatalf("%+v", q)
	}
	if q.PairRuleOK != 1 || !near(q.MemberRuleOK, 5.0/6) || !near(q.NodesInAcceptable, 59.0/60) {
		t.Fatalf("want pair rule kept, member rule broken by one node: %+v", q)
	}
}

func TestMeasureLengthMismatch(t *testing.T) {
	m := topology.Synthetic(5, 1)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	Measure(m, m.Place(6, 3, 1), 1, time.Second, make([]string, 5))
}

func TestGreedyClusters(t *testing.T) {
	m := topology.Synthetic(250, 1)
	placed := m.Place(750, 3, 1)
	for level, th := range map[int]time.Duration{1: 60 * time.Millisecond, 2: 20 * time.Millisecond} {
		labels := Greedy(m, placed, th)
		if len(labels) != len(placed) || slices.Contains(labels, "") {
			t.Fatalf("level %d: %d labels for %d nodes, or an empty one", level, len(labels), len(placed))
		}
		if again := Greedy(m, placed, th); !slices.Equal(labels, again) {
			t.Fatalf("level %d: two runs differ", level)
		}
		q := Measure(m, placed, level, th, labels)
		t.Logf("level %d (%v): %d clusters (%d singletons), mean size %.2f, largest %d; %d nodes with a neighbour, %.1f%% of them clustered",
			level, th, q.Clusters, q.Singletons, q.MeanSize, q.MaxSize, q.HaveNeighbour, 100*q.NonSingletonOfThose)
		if q.NonSingleton == 0 || q.PairRuleOK != 1 || q.MemberRuleOK != 1 || q.NodesInAcceptable != 1 {
			t.Fatalf("level %d: greedy clusters break the 80%% rule: %+v", level, q)
		}
		if q.MeanSize <= 1 {
			t.Fatalf("level %d: mean size %.2f", level, q.MeanSize)
		}
		// A node with a neighbour is only left alone when all its
		// neighbours were taken by clusters that could not admit it.
		if q.NonSingletonOfThose < 0.9 {
			t.Fatalf("level %d: only %.1f%% of the nodes with a neighbour are clustered", level, 100*q.NonSingletonOfThose)
		}
	}
}

func TestGreedyClustersExtremes(t *testing.T) {
	m := topology.Synthetic(30, 3)
	placed := m.Place(90, 3, 3)
	if q := Measure(m, placed, 0, time.Hour, Greedy(m, placed, time.Hour)); q.Clusters != 1 || q.MaxSize != 90 {
		t.Fatalf("1 h threshold: %+v", q)
	}
	if q := Measure(m, placed, 9, 0, Greedy(m, placed, 0)); q.Clusters != 90 || q.Singletons != 90 {
		t.Fatalf("zero threshold: %+v", q)
	}
	if labels := Greedy(m, nil, time.Second); len(labels) != 0 {
		t.Fatalf("no nodes: %v", labels)
	}
}

func TestPrintQuality(t *testing.T) {
	m := topology.Synthetic(40, 4)
	placed := m.Place(120, 3, 4)
	var online, greedy []Quality
	for level, th := range []time.Duration{1: 60 * time.Millisecond, 2: 20 * time.Millisecond} {
		if level == 0 {
			continue
		}
		online = append(online, Measure(m, placed, level, th, siteLabels(placed)))
		greedy = append(greedy, Measure(m, placed, level, th, Greedy(m, placed, th)))
	}
	var buf bytes.Buffer
	PrintQuality(&buf, online, greedy)
	out := buf.String()
	t.Log("\n" + out)
	for _, want := range []string{"Level 1 (RTT < 60ms), 120 nodes", "Level 2 (RTT < 20ms)", "online/greedy",
		"mean cluster size", "3.00", "pair rule", "member rule", "100.0 %"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	buf.Reset()
	PrintQuality(&buf, []Quality{Measure(m, placed, 2, 20*time.Millisecond, make([]string, len(placed)))}, nil)
	if out := buf.String(); strings.Contains(out, "greedy") || !strings.Contains(out, "n/a") {
		t.Errorf("online only, all singletons:\n%s", out)
	}
}

func TestPlotClusterMap(t *testing.T) {
	m := topology.Synthetic(100, 5)
	placed := m.Place(300, 3, 5)
	dir := t.TempDir()
	// Many clusters (12 lettered and more) plus singletons; then fewer
	// clusters than letters, mostly singletons.
	many := Greedy(m, placed, 20*time.Millisecond)
	few := make([]string, len(placed))
	for i := range many {
		if i%5 == 0 {
			many[i] = ""
		}
		if i%40 < 3 {
			few[i] = "c" + strconv.Itoa(i%7)
		}
	}
	for name, labels := range map[string][]string{"many": many, "few": few} {
		path := filepath.Join(dir, "sub", name+".png")
		if err := PlotMap(path, m, placed, labels, 2, 20*time.Millisecond); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 1000 || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("%s: not a PNG (%d bytes)", name, len(b))
		}
	}
	if err := PlotMap(filepath.Join(dir, "x.png"), m, placed, nil, 2, time.Second); err == nil {
		t.Fatal("no error for missing labels")
	}
}
