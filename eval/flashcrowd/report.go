package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/sim"
)

// sources are the table's columns, in order: served by the proxy's own
// cache, by a download already running at the proxy (collapsed), by a peer
// found at level 2, 1 or 0 of the DSHT, by the origin, or otherwise (not
// stored, stale, unknown). Failed requests are counted apart.
var sources = []string{"local", "collapsed", "peer-l2", "peer-l1", "peer-l0", "origin", "other"}

// report is everything a run found; it is also the JSON.
type report struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Command    string              `json:"command"`
	Date       string              `json:"date"`
	Caddy      string              `json:"caddy"`
	Host       hostInfo            `json:"host"`
	Params     jsonParams          `json:"params"`
	Hierarchy  string              `json:"hierarchy"`
	Proxies    []proxyPlace        `json:"proxies"`
	Ready      *readiness          `json:"readiness"`
	Burst      *burstResult        `json:"start_burst"`

	Totals  totals      `json:"totals"`
	Minutes []minuteRow `json:"minutes"`
	// Bins is the same finer, for the figure: BinSeconds wide, counts
	// per bin (not per minute).
	BinSeconds float64     `json:"bin_seconds"`
	Bins       []minuteRow `json:"bins"`

	Origin  originSummary         `json:"origin"`
	Latency map[string]*latencies `json:"latency_ms"`  // "all" and by source
	CDF     [][2]float64          `json:"latency_cdf"` // [ms, fraction], thinned

	ProxyEnd []proxyEnd `json:"proxies_at_end"`
	// NonLocal lists every client request not served from the proxy's
	// cache (misses, collapsed, failures); BurstRequests are the start
	// burst's requests, all of them.
	NonLocal      []*record `json:"non_local_requests"`
	BurstRequests []*record `json:"start_burst_requests"`

	Paper    paperFigures `json:"paper"`
	Problems []string     `json:"problems"`
	Warnings []string     `json:"warnings"`
	Pass     bool         `json:"pass"`
	Wall     float64      `json:"wall_seconds"`

	lats map[string][]float64 // sorted, by source and "all"
}

type hostInfo struct {
	CPUs          int    `json:"cpus"`
	Kernel        string `json:"kernel"`
	GoVersion     string `json:"go"`
	LoadAvgBefore string `json:"loadavg_before"`
	LoadAvgAfter  string `json:"loadavg_after"`
}

type jsonParams struct {
	Proxies   int    `json:"proxies"`
	L1        int    `json:"level1_clusters"`
	L2        int    `json:"level2_clusters"`
	Levels    string `json:"levels"`
	Origin    string `json:"origin"`
	Host      string `json:"host"`
	Files     int    `json:"files"`
	FileBytes int    `json:"file_bytes"`
	PageFiles int    `json:"page_files"`
	LineKbit  int    `json:"line_kbit"`
	Clients   int    `json:"clients"`
	Duration  string `json:"duration"`
	Spread    string `json:"start_spread"`
	Think     string `json:"think"`
	Timeout   string `json:"timeout"`
	Seed      uint64 `json:"seed"`
	// Pinned is false when the nodes formed their clusters; ErrorCrowd
	// when the burst and the crowd asked for the error URL; Burst whether
	// the start burst ran.
	Pinned     bool `json:"pinned"`
	ErrorCrowd bool `json:"error_crowd"`
	Burst      bool `json:"start_burst"`
}

type proxyPlace struct {
	Proxy int    `json:"proxy"`
	Addr  string `json:"addr"`
	L1    string `json:"level1"`
	L2    string `json:"level2"`
}

type totals struct {
	Requests    int            `json:"requests"`
	Failed      int            `json:"failed"`
	BySource    map[string]int `json:"by_source"`
	Collapsed   map[string]int `json:"collapsed_by_download_source"`
	ReqPerSec   float64        `json:"requests_per_second"` // clients' requests over the duration
	ServedKbit  float64        `json:"served_kbit_per_second"`
	BurstFailed int            `json:"start_burst_failed"`
}

// minuteRow counts the requests sent in one minute (or bin).
type minuteRow struct {
	Start         float64        `json:"start_s"`
	Requests      int            `json:"requests"`
	BySource      map[string]int `json:"by_source"`
	Failed        int            `json:"failed"`
	OriginFetches int            `json:"origin_fetches"` // requests the origin received
	P50           float64        `json:"p50_ms"`
	P99           float64        `json:"p99_ms"`
}

type originSummary struct {
	Fetches int   `json:"fetches"`
	PerFile []int `json:"per_file"`
	// ErrorFetches is the requests for the error URL (-error-crowd).
	ErrorFetches int `json:"error_url_fetches"`
	// Log is every request the origin received, with the client request
	// behind it.
	Log []explainedFetch `json:"log"`
}

type explainedFetch struct {
	originFetch
	Proxy       int    `json:"proxy"` // of the client request behind it; -1 unknown
	Client      int    `json:"client"`
	CacheStatus string `json:"cache_status,omitempty"`
}

type latencies struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P96   float64 `json:"p96"` // the paper reports the 96th percentile
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

type proxyEnd struct {
	Proxy   int   `json:"proxy"`
	Objects int   `json:"objects"`
	Hits    int64 `json:"hits"`
	Misses  int64 `json:"misses"`
	Commits int64 `json:"commits"`
	Aborts  int64 `json:"aborts"`
	// Fetches counts the proxy's downloads by source (origin,
	// peer-l<level>), from /coral/status's recent fetches.
	Fetches map[string]int `json:"fetches"`
	DHT     map[string]any `json:"dht"`
	Err     string         `json:"error,omitempty"`
}

// paperFigures are the published numbers (NSDI'04 §6, Figures 4 and 5).
type paperFigures struct {
	Setup         string  `json:"setup"`
	OriginMinute1 int     `json:"origin_fetches_minute1"`
	OriginUnique  int     `json:"unique_files"`
	OriginLater   int     `json:"origin_fetches_after_minute1"`
	ReqPerSec     float64 `json:"requests_per_second"`
	Kbit          float64 `json:"aggregate_kbit_per_second"`
	// Client latency in seconds, all nodes: p50 and p96.
	SingleP50, SingleP96 float64
	MultiP50, MultiP96   float64
	TraceP50, TraceP96   float64
}

var paper = paperFigures{
	Setup:         "166 PlanetLab proxies, levels 60/20 ms, origin Apache behind 384 kbit/s DSL, 12 files of 41 KB in 4 pages, 166 clients from 0-180 s for 30 min",
	OriginMinute1: 15, OriginUnique: 12, OriginLater: 0,
	ReqPerSec: 99.6, Kbit: 32800,
	SingleP50: 0.79, SingleP96: 9.54,
	MultiP50: 0.31, MultiP96: 4.17,
	TraceP50: 0.19, TraceP96: 2.50,
}

// summarize fills in the tables from the records and the origin's log.
func summarize(rep *report, p params, recs []*record, fetches []originFetch, perFile []int, errFetches int) {
	slices.SortFunc(recs, func(a, b *record) int {
		if a.At != b.At {
			return cmpFloat(a.At, b.At)
		}
		return strings.Compare(a.ID, b.ID)
	})
	byID := map[string]*record{}
	rep.Totals = totals{BySource: map[string]int{}, Collapsed: map[string]int{}}
	rep.lats = map[string][]float64{}
	maxAt := p.Duration.Seconds()
	for _, r := range recs {
		byID[r.ID] = r
		maxAt = max(maxAt, r.At)
		rep.Totals.Requests++
		if r.Client < 0 {
			rep.BurstRequests = append(rep.BurstRequests, r)
		}
		if !r.OK {
			rep.Totals.Failed++
			if r.Client < 0 {
				rep.Totals.BurstFailed++
			}
			if r.Client >= 0 {
				rep.NonLocal = append(rep.NonLocal, r)
			}
			continue
		}
		rep.Totals.BySource[r.Source]++
		if r.Source == "collapsed" {
			rep.Totals.Collapsed[r.Via]++
		}
		if r.Source != "local" && r.Client >= 0 {
			rep.NonLocal = append(rep.NonLocal, r)
		}
		rep.lats["all"] = append(rep.lats["all"], r.LatencyMS)
		rep.lats[r.Source] = append(rep.lats[r.Source], r.LatencyMS)
	}
	served := 0
	for _, r := range recs {
		if r.OK && r.Client >= 0 {
			served++
		}
	}
	rep.Totals.ReqPerSec = float64(served) / p.Duration.Seconds()
	rep.Totals.ServedKbit = rep.Totals.ReqPerSec * float64(p.FileBytes) * 8 / 1000

	rep.Minutes = bin(recs, fetches, 60, maxAt)
	rep.BinSeconds = binWidth(p.Duration)
	rep.Bins = bin(recs, fetches, rep.BinSeconds, maxAt)

	rep.Latency = map[string]*latencies{}
	for k, v := range rep.lats {
		slices.Sort(v)
		rep.Latency[k] = summarizeLat(v)
	}
	rep.CDF = cdf(rep.lats["all"], 400)

	rep.Origin = originSummary{Fetches: len(fetches), PerFile: perFile, ErrorFetches: errFetches}
	for _, f := range fetches {
		e := explainedFetch{originFetch: f, Proxy: -1, Client: -1}
		if r := byID[f.Request]; r != nil {
			e.Proxy, e.Client, e.CacheStatus = r.Proxy, r.Client, r.CacheStatus
		}
		rep.Origin.Log = append(rep.Origin.Log, e)
	}
}

// binWidth is the figure's bin: about 24 bins over the run, whole seconds,
// at least 5 s.
func binWidth(d time.Duration) float64 {
	return max(5, math.Round(d.Seconds()/24))
}

// bin counts the requests and origin fetches by when they were sent, in
// bins of width seconds covering [0, until].
func bin(recs []*record, fetches []originFetch, width, until float64) []minuteRow {
	n := max(1, int(math.Ceil(until/width)))
	rows := make([]minuteRow, n)
	lats := make([][]float64, n)
	idx := func(t float64) int { return min(max(int(t/width), 0), n-1) }
	for i := range rows {
		rows[i] = minuteRow{Start: float64(i) * width, BySource: map[string]int{}}
	}
	for _, r := range recs {
		k := idx(r.At)
		rows[k].Requests++
		if !r.OK {
			rows[k].Failed++
			continue
		}
		rows[k].BySource[r.Source]++
		lats[k] = append(lats[k], r.LatencyMS)
	}
	for _, f := range fetches {
		rows[idx(f.At)].OriginFetches++
	}
	for i := range rows {
		slices.Sort(lats[i])
		rows[i].P50, rows[i].P99 = sim.Percentile(lats[i], 50), sim.Percentile(lats[i], 99)
	}
	return rows
}

func summarizeLat(sorted []float64) *latencies {
	l := &latencies{Count: len(sorted)}
	if len(sorted) == 0 {
		return l
	}
	sum := 0.0
	for _, v := range sorted {
		sum += v
	}
	l.Mean = sum / float64(len(sorted))
	l.P50, l.P90, l.P96, l.P99 = sim.Percentile(sorted, 50), sim.Percentile(sorted, 90), sim.Percentile(sorted, 96), sim.Percentile(sorted, 99)
	l.Max = sorted[len(sorted)-1]
	return l
}

// cdf thins a sorted sample to about n points, keeping the last (the
// maximum) and every point of the top 1 %.
func cdf(sorted []float64, n int) [][2]float64 {
	total := len(sorted)
	if total == 0 {
		return nil
	}
	step := max(1, total/n)
	tail := total - max(total/100, 1)
	var out [][2]float64
	for i, v := range sorted {
		if i%step == 0 || i >= tail {
			out = append(out, [2]float64{v, float64(i+1) / float64(total)})
		}
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// check decides the acceptance: one origin fetch per file, every request
// answered with the right bytes.
func check(rep *report, p params) {
	rep.Problems, rep.Warnings = []string{}, []string{}
	if p.ErrorCrowd {
		// A measurement, not a verdict: how many of the error URL's
		// requests reached the origin. No file is asked for.
		if n := rep.Origin.Fetches - rep.Origin.ErrorFetches; n != 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("the origin got %d requests for files no client asked for", n))
		}
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%d of %d requests for %s reached the origin", rep.Origin.ErrorFetches, rep.Totals.Requests, errorPath))
	} else {
		if rep.Origin.Fetches != p.Files {
			rep.Problems = append(rep.Problems, fmt.Sprintf("the origin got %d requests for %d files (want exactly one per file)", rep.Origin.Fetches, p.Files))
		}
		for i, n := range rep.Origin.PerFile {
			if n != 1 {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s fetched from the origin %d times", filePath(i), n))
			}
		}
	}
	if rep.Totals.Failed > 0 {
		var ex []string
		for _, r := range slices.Concat(rep.BurstRequests, rep.NonLocal) {
			if !r.OK && len(ex) < 5 {
				ex = append(ex, fmt.Sprintf("%s (proxy %d, %s, t=%.1fs): %s", r.ID, r.Proxy, filePath(r.File), r.At, r.Err))
			}
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d of %d requests failed or had wrong bytes (%d of them in the start burst); e.g. %s",
			rep.Totals.Failed, rep.Totals.Requests, rep.Totals.BurstFailed, strings.Join(ex, "; ")))
	}
	if n := rep.Totals.BySource["other"]; n > 0 && !p.ErrorCrowd {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%d responses were neither hits, collapsed, peer nor origin fetches (see cache_status in the JSON)", n))
	}
	if rep.Burst != nil && rep.Burst.SpreadMS > 10 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("the start burst's %d requests were sent over %.1f ms, more than 10 ms", rep.Burst.Requests, rep.Burst.SpreadMS))
	}
	if rep.Ready != nil && !rep.Ready.Ready {
		rep.Warnings = append(rep.Warnings, "the DSHT had not settled when the load started (see readiness in the JSON)")
	}
	for _, e := range rep.ProxyEnd {
		if e.Err != "" {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("proxy %d's status at the end: %s", e.Proxy, e.Err))
		}
	}
	rep.Pass = len(rep.Problems) == 0
}

// printReport prints the tables.
func printReport(w io.Writer, rep *report, p params) {
	burst := "no start burst"
	if n := len(rep.BurstRequests); n > 0 {
		burst = fmt.Sprintf("minute 1 includes the start burst's %d", n)
	}
	fmt.Fprintf(w, "\nRequests per minute by where the bytes came from (by when the request was sent; %s):\n", burst)
	printRows(w, rep.Minutes, "minute", func(i int, r minuteRow) string { return fmt.Sprint(i + 1) })
	fmt.Fprintf(w, "  local: the proxy's own cache; collapsed: joined a download already running at that proxy (by the download's source: %s);\n  peer-lN: fetched from a peer found at DSHT level N (2: same metro, 1: same region, 0: anywhere); origin: fetched from the origin.\n",
		fmtMap(rep.Totals.Collapsed))

	fmt.Fprintf(w, "\nTotals: %d requests (%d clients' at %.1f req/s, %.0f kbit/s served; the origin's line is %d kbit/s), %d failed.\n",
		rep.Totals.Requests, rep.Totals.Requests-len(rep.BurstRequests), rep.Totals.ReqPerSec, rep.Totals.ServedKbit, p.LineKbit, rep.Totals.Failed)
	var parts []string
	for _, s := range sources {
		if n := rep.Totals.BySource[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d (%.1f%%)", s, n, 100*float64(n)/float64(max(1, rep.Totals.Requests-rep.Totals.Failed))))
		}
	}
	fmt.Fprintf(w, "  by source: %s\n", strings.Join(parts, ", "))

	if p.ErrorCrowd {
		fmt.Fprintf(w, "\nOrigin requests for the error URL %s: %d for %d client requests\n", errorPath, rep.Origin.ErrorFetches, rep.Totals.Requests)
	}
	fmt.Fprintf(w, "\nOrigin fetches per file (want 1 each): ")
	for i, n := range rep.Origin.PerFile {
		fmt.Fprintf(w, "%s:%d ", filePath(i)[1:], n)
	}
	fmt.Fprintf(w, "— total %d\n", rep.Origin.Fetches)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  t (s)\tpath\tbytes\tsecs\tclient request\tclient\tvia proxy\tCache-Status\t")
	for _, f := range rep.Origin.Log {
		client := "burst"
		if f.Client >= 0 {
			client = fmt.Sprint(f.Client)
		}
		if f.Proxy < 0 {
			client = "?"
		}
		fmt.Fprintf(tw, "  %.3f\t%s\t%d\t%.1f\t%s\t%s\t%d\t%s\t\n", f.At, f.Path, f.Bytes, f.Seconds, f.Request, client, f.Proxy, f.CacheStatus)
	}
	tw.Flush()

	fmt.Fprintf(w, "\nClient latency, request sent to last byte (ms; the paper's figures include a DNS lookup, ours do not):\n")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "source\trequests\tp50\tp90\tp96\tp99\tmax\tmean\t")
	for _, s := range append([]string{"all"}, sources...) {
		l := rep.Latency[s]
		if l == nil || l.Count == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s, l.Count, evalrun.Ms(l.P50), evalrun.Ms(l.P90), evalrun.Ms(l.P96), evalrun.Ms(l.P99), evalrun.Ms(l.Max), evalrun.Ms(l.Mean))
	}
	tw.Flush()
	fmt.Fprintf(w, "  CDF (fraction of requests done within): %s\n", cdfLine(rep.lats["all"]))

	fmt.Fprintf(w, "\nProxies at the end (cache objects, hits/misses, downloads by source from /coral/status):\n")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  proxy\tclusters\tobjects\thits\tmisses\tdownloads\t")
	for i, e := range rep.ProxyEnd {
		pl := rep.Proxies[i]
		fmt.Fprintf(tw, "  %d\t%s/%s\t%d\t%d\t%d\t%s\t\n", e.Proxy, pl.L1, pl.L2, e.Objects, e.Hits, e.Misses, fmtMap(e.Fetches))
	}
	tw.Flush()

	if !p.ErrorCrowd {
		printPaper(w, rep)
	}

	fmt.Fprintf(w, "\nChecks:\n")
	for _, pr := range rep.Problems {
		fmt.Fprintf(w, "  PROBLEM: %s\n", pr)
	}
	for _, wn := range rep.Warnings {
		fmt.Fprintf(w, "  WARNING: %s\n", wn)
	}
	if p.ErrorCrowd {
		fmt.Fprintf(w, "Acceptance: every answer the origin's %s (%d of %d requests failed, want 0): %s; %d of them reached the origin (measured, not judged)\n",
			errorPath, rep.Totals.Failed, rep.Totals.Requests, evalrun.PassFail(rep.Pass), rep.Origin.ErrorFetches)
	} else {
		fmt.Fprintf(w, "Acceptance: %d origin fetches for %d files (want exactly one each), %d of %d requests failed (want 0): %s\n",
			rep.Origin.Fetches, p.Files, rep.Totals.Failed, rep.Totals.Requests, evalrun.PassFail(rep.Pass))
	}
	fmt.Fprintf(w, "Load average before %s, after %s (%d CPUs shared by %d Caddy processes, the origin and the clients)\n",
		rep.Host.LoadAvgBefore, rep.Host.LoadAvgAfter, rep.Host.CPUs, p.Proxies)
}

// printRows prints a per-minute (or per-bin) table.
func printRows(w io.Writer, rows []minuteRow, unit string, label func(int, minuteRow) string) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\trequests\t%s\tfailed\torigin fetches\tp50 ms\tp99 ms\t\n", unit, strings.Join(sources, "\t"))
	for i, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t", label(i, r), r.Requests)
		for _, s := range sources {
			fmt.Fprintf(tw, "%d\t", r.BySource[s])
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t\n", r.Failed, r.OriginFetches, evalrun.Ms(r.P50), evalrun.Ms(r.P99))
	}
	tw.Flush()
}

func printPaper(w io.Writer, rep *report) {
	all := rep.Latency["all"]
	if all == nil {
		all = &latencies{}
	}
	m1 := 0
	later := 0
	for i, r := range rep.Minutes {
		if i == 0 {
			m1 = r.OriginFetches
		} else {
			later += r.OriginFetches
		}
	}
	fmt.Fprintf(w, "\nPaper (NSDI'04 §6.1–6.2; %s) vs this run:\n", paper.Setup)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  \tpaper\tthis run\t")
	fmt.Fprintf(tw, "  origin fetches, minute 1\t%d (%d files + %d redundant)\t%d\t\n", paper.OriginMinute1, paper.OriginUnique, paper.OriginMinute1-paper.OriginUnique, m1)
	fmt.Fprintf(tw, "  origin fetches, later\t%d\t%d\t\n", paper.OriginLater, later)
	fmt.Fprintf(tw, "  client load\t%.1f req/s, ~%.0f kbit/s\t%.1f req/s, %.0f kbit/s\t\n", paper.ReqPerSec, paper.Kbit, rep.Totals.ReqPerSec, rep.Totals.ServedKbit)
	fmt.Fprintf(tw, "  latency p50 / p96\tmulti-level %.2f / %.2f s (with traceroute %.2f / %.2f; single level %.2f / %.2f)\t%.3f / %.3f s\t\n",
		paper.MultiP50, paper.MultiP96, paper.TraceP50, paper.TraceP96, paper.SingleP50, paper.SingleP96, all.P50/1000, all.P96/1000)
	tw.Flush()
}

// cdfLine reads the CDF at a few latencies.
func cdfLine(sorted []float64) string {
	var parts []string
	for _, x := range []float64{1, 3, 10, 30, 100, 300, 1000, 3000, 10000, 30000} {
		k, _ := slices.BinarySearch(sorted, x+1e-9)
		parts = append(parts, fmt.Sprintf("%s ms %.3f", evalrun.Ms(x), float64(k)/float64(max(1, len(sorted)))))
	}
	return strings.Join(parts, ", ")
}

func fmtMap(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
