//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coralcdn/coral/internal/lab/wan"
	"github.com/coralcdn/coral/internal/lab/wan/fleet"
)

// originLog records when the origin served what.
type originLog struct {
	mu   sync.Mutex
	hits []originHit
}

type originHit struct {
	At   time.Time
	Path string
	From string
}

func (o *originLog) add(path, from string) {
	o.mu.Lock()
	o.hits = append(o.hits, originHit{time.Now(), path, from})
	o.mu.Unlock()
}

func (o *originLog) since(t time.Time) []originHit {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []originHit
	for _, h := range o.hits {
		if !h.At.Before(t) {
			out = append(out, h)
		}
	}
	return out
}

// proxyFetch is one download a proxy made, from its /coral/status.
type proxyFetch struct {
	Node       string  `json:"node"`
	URL        string  `json:"url"`
	Source     string  `json:"source"` // origin, peer-l<level>
	Status     int     `json:"status"`
	At         float64 `json:"t"` // seconds since the crowd began
	DurationMS float64 `json:"duration_ms"`
}

// recentFetches reads the downloads each proxy made since t (its last
// 64, enough for a crowd on 12 files).
func recentFetches(ctx context.Context, f *fleet.Fleet, t time.Time) ([]proxyFetch, error) {
	var out []proxyFetch
	for _, nd := range f.Nodes {
		var st struct {
			RecentFetches []struct {
				Time       time.Time `json:"time"`
				URL        string    `json:"url"`
				Source     string    `json:"source"`
				Status     int       `json:"status"`
				DurationMS float64   `json:"duration_ms"`
			} `json:"recent_fetches"`
		}
		if err := nd.AdminJSON(ctx, "/coral/status", &st); err != nil {
			return nil, err
		}
		for _, r := range st.RecentFetches {
			if !r.Time.Before(t) {
				out = append(out, proxyFetch{Node: nd.Name(), URL: r.URL, Source: r.Source, Status: r.Status,
					At: r.Time.Sub(t).Seconds(), DurationMS: r.DurationMS})
			}
		}
	}
	slices.SortFunc(out, func(a, b proxyFetch) int { return int(1000 * (a.At - b.At)) })
	return out, nil
}

// minuteRow is one minute of the crowd.
type minuteRow struct {
	Minute        int            `json:"minute"`
	Requests      int            `json:"requests"`
	Failed        int            `json:"failed"`
	BySource      map[string]int `json:"client_requests_by_source"`
	OriginFetches int            `json:"origin_fetches"`
	PeerFetches   map[string]int `json:"proxy_peer_fetches_by_level"`
	P50           float64        `json:"p50_ms"`
	P99           float64        `json:"p99_ms"`
}

// crowdRun is Figure 4 on the real servers.
type crowdRun struct {
	Workload workload       `json:"workload"`
	Minutes  []minuteRow    `json:"minutes"`
	PerFile  map[string]int `json:"origin_fetches_per_file"`
	// OriginFetches is every request the origin served, OncePerFile
	// whether each file was fetched from it exactly once.
	OriginFetches int                `json:"origin_fetches"`
	OncePerFile   bool               `json:"once_per_file"`
	Latency       latencySummary     `json:"latency"`
	Percentiles   map[string]float64 `json:"latency_percentiles_ms"`
	ProxyFetches  []proxyFetch       `json:"proxy_fetches"`
	// PeerByLevel counts the proxies' downloads from peers by the level
	// at which the DSHT named the peer; Model is what the test-and-set
	// tree predicts with the clusters that formed (per file: in each
	// level-2 cluster of proxies that fetched it, all but one fetch at
	// level 2; one per level-2 cluster, less one per level-1 cluster, at
	// level 1; one per level-1 cluster less one at level 0; one from the
	// origin).
	PeerByLevel map[string]int `json:"peer_fetches_by_level"`
	Model       map[string]int `json:"model_fetches_by_level"`
	// Clusters are the proxies' clusters at levels 1 and 2 (by node, in
	// the order of ProxyFetches' node names n<site>.<i>) the model used.
	Clusters [][]string `json:"clusters,omitempty"`
	// CDF: as e2eRun's.
	CDF      map[string][]float64 `json:"latency_cdf_ms"`
	Requests []request            `json:"requests,omitempty"`
}

// runFigure4 starts every client at once (within Jitter) on cold caches
// and lets them load pages for Duration.
func runFigure4(ctx context.Context, f *fleet.Fleet, l *wan.Lab, ol *originLog, wl workload, labels [][]string,
	out io.Writer, during func()) (*crowdRun, error) {
	began := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if during != nil && sleep(ctx, wl.Duration/2) {
			during()
		}
	}()
	rs := runWorkload(ctx, f, l, wl)
	<-done
	if err := f.Check(); err != nil {
		return nil, err
	}
	c := &crowdRun{Workload: wl, Requests: rs, PerFile: map[string]int{}, PeerByLevel: map[string]int{}}
	hits := ol.since(began)
	for _, h := range hits {
		c.PerFile[h.Path]++
	}
	c.OriginFetches = len(hits)
	c.OncePerFile = len(c.PerFile) == wl.Files
	for _, n := range c.PerFile {
		c.OncePerFile = c.OncePerFile && n == 1
	}
	pf, err := recentFetches(ctx, f, began)
	if err != nil {
		return nil, err
	}
	c.ProxyFetches = pf
	minutes := int((wl.Duration + time.Minute - 1) / time.Minute)
	for m := range minutes {
		row := minuteRow{Minute: m + 1, BySource: map[string]int{}, PeerFetches: map[string]int{}}
		var lat []float64
		for _, r := range rs {
			if int(r.At/60) != m {
				continue
			}
			row.Requests++
			if !r.OK {
				row.Failed++
				continue
			}
			row.BySource[r.Source]++
			lat = append(lat, r.LatencyMs)
		}
		slices.Sort(lat)
		row.P50, row.P99 = pct(lat, 50), pct(lat, 99)
		for _, h := range hits {
			if int(h.At.Sub(began)/time.Minute) == m {
				row.OriginFetches++
			}
		}
		for _, p := range pf {
			if int(p.At/60) == m && strings.HasPrefix(p.Source, "peer-") {
				row.PeerFetches[p.Source]++
			}
		}
		c.Minutes = append(c.Minutes, row)
	}
	for _, p := range pf {
		if strings.HasPrefix(p.Source, "peer-") {
			c.PeerByLevel[p.Source]++
		}
	}
	c.Latency = summarize("all", rs)
	c.CDF = cdfs(rs)
	all := latencies(rs, func(request) bool { return true })
	c.Percentiles = map[string]float64{}
	for _, p := range []float64{10, 50, 90, 96, 99} {
		c.Percentiles[fmt.Sprintf("p%g", p)] = pct(all, p)
	}
	var names []string
	for _, nd := range f.Nodes {
		names = append(names, nd.Name())
	}
	c.Model, c.Clusters = treeModel(names, pf, labels), labels
	printCrowd(out, c)
	return c, nil
}

// treeModel predicts the downloads by level per file from the proxies
// that downloaded it and the clusters they were in (labels[level-1] by
// node index). A put+get runs level by level, fastest first: in each
// level-2 cluster all proxies but one find another's reference there; the
// one left goes on to level 1, where, among those, all but one per
// level-1 cluster find one; the ones left go on to level 0, where all but
// one do, and that one fetches from the origin. Clusters need not nest
// (a node's level-1 cluster may split its level-2 cluster's members):
// each level-2 cluster's proxy going on is taken to be its first.
func treeModel(nodes []string, pf []proxyFetch, labels [][]string) map[string]int {
	index := map[string]int{}
	for i, name := range nodes {
		index[name] = i
	}
	byFile := map[string][]int{}
	for _, p := range pf {
		if i := index[p.Node]; !slices.Contains(byFile[p.URL], i) {
			byFile[p.URL] = append(byFile[p.URL], i)
		}
	}
	m := map[string]int{}
	for _, fetchers := range byFile {
		nodes := fetchers
		slices.Sort(nodes)
		var l2first []int // the first proxy of each level-2 cluster
		seen2 := map[string]bool{}
		for _, i := range nodes {
			if !seen2[labels[1][i]] {
				seen2[labels[1][i]] = true
				l2first = append(l2first, i)
			}
		}
		seen1 := map[string]bool{}
		for _, i := range l2first {
			seen1[labels[0][i]] = true
		}
		m["peer-l2"] += len(nodes) - len(l2first)
		m["peer-l1"] += len(l2first) - len(seen1)
		m["peer-l0"] += len(seen1) - 1
		m["origin"]++
	}
	return m
}

func printCrowd(out io.Writer, c *crowdRun) {
	fmt.Fprintf(out, "Figure 4 (flash crowd): %d requests, %d failed; origin fetches %d (per file %v): once per file %v\n",
		c.Latency.Requests, c.Latency.Failed, c.OriginFetches, c.PerFile, c.OncePerFile)
	fmt.Fprintf(out, "  %-7s %8s %7s %8s %9s %40s %8s %8s\n", "minute", "requests", "failed", "origin", "", "client requests by source", "p50 ms", "p99 ms")
	for _, r := range c.Minutes {
		b, _ := json.Marshal(r.BySource)
		pb, _ := json.Marshal(r.PeerFetches)
		fmt.Fprintf(out, "  %-7d %8d %7d %8d %9s %40s %8.1f %8.0f\n", r.Minute, r.Requests, r.Failed, r.OriginFetches, pb, b, r.P50, r.P99)
	}
	fmt.Fprintf(out, "  proxies' downloads from peers by level: %v; the tree of the clusters that formed predicts %v\n", c.PeerByLevel, c.Model)
	fmt.Fprintf(out, "  client latency percentiles (ms): %v\n", c.Percentiles)
}
