package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The experiments that run real processes: eval/dnsperf, eval/httpbench,
// eval/headerfields, eval/flashcrowd, eval/conformance, eval/chaos and
// eval/hostile. Their renderers are generic over what a file holds where
// the files say it themselves (every "*_by_round" ratio, every target), so
// a new target or ratio shows without a change here.

// roundRatios lists every "NAME_by_round" series of m with its
// "median_NAME", as table rows: name, rounds, median.
func roundRatios(m map[string]any) [][]string {
	var names []string
	for k := range m {
		if n, ok := strings.CutSuffix(k, "_by_round"); ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var rows [][]string
	for _, n := range names {
		var rounds []string
		if l, ok := m[n+"_by_round"].([]any); ok {
			for _, v := range l {
				if f, ok := v.(float64); ok {
					rounds = append(rounds, num(f, 3))
				}
			}
		}
		med := "–"
		if f, ok := m["median_"+n].(float64); ok {
			med = "**" + num(f, 3) + "**"
		} else if f, ok := m["median_ratio"].(float64); ok && n == "coral_over_file" {
			med = "**" + num(f, 3) + "**" // eval/dnsperf's name for it
		}
		rows = append(rows, []string{strings.ReplaceAll(n, "_", " "), strings.Join(rounds, " / "), med})
	}
	return rows
}

func fnum(m map[string]any, key string, d int) string {
	if f, ok := m[key].(float64); ok {
		return num(f, d)
	}
	return "–"
}

func flist(m map[string]any, key string, d int) string {
	l, ok := m[key].([]any)
	if !ok {
		return "–"
	}
	var out []string
	for _, v := range l {
		if f, ok := v.(float64); ok {
			out = append(out, num(f, d))
		}
	}
	return strings.Join(out, " / ")
}

func sizeName(b float64) string {
	if b >= 1024 && int(b)%1024 == 0 {
		return num(b/1024, 0) + " KiB"
	}
	return num(b, 0) + " B"
}

func init() {
	// httpbench.targets FILE: every target's figures, per object size.
	register("httpbench.targets", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "FILE"); err != nil {
			return "", err
		}
		var r struct {
			BySize []map[string]any `json:"by_size"`
		}
		if err := c.load(args[0], &r); err != nil {
			return "", err
		}
		var rows [][]string
		for _, bs := range r.BySize {
			size := sizeName(bs["object_bytes"].(float64))
			ts, _ := bs["targets"].(map[string]any)
			var names []string
			for n := range ts {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				t := ts[n].(map[string]any)
				rows = append(rows, []string{size, n, flist(t, "requests_per_s", 0), "**" + fnum(t, "median_requests_per_s", 0) + "**",
					fnum(t, "median_server_cpu_us_per_request", 1), fnum(t, "median_p50_ms", 2) + " / " + fnum(t, "median_p99_ms", 1), fnum(t, "response_header_bytes", 0)})
			}
		}
		return table([]string{"object", "target", "req/s per round", "median req/s", "server CPU µs per response (median)", "latency p50 / p99 ms (medians)", "header bytes"}, rows), nil
	})

	// httpbench.ratios FILE: every per-round ratio the file holds.
	register("httpbench.ratios", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "FILE"); err != nil {
			return "", err
		}
		var r struct {
			BySize []map[string]any `json:"by_size"`
		}
		if err := c.load(args[0], &r); err != nil {
			return "", err
		}
		var rows [][]string
		for _, bs := range r.BySize {
			for _, row := range roundRatios(bs) {
				rows = append(rows, append([]string{sizeName(bs["object_bytes"].(float64))}, row...))
			}
		}
		return table([]string{"object", "ratio (same rounds)", "per round", "median"}, rows), nil
	})

	// httpbench.large FILE: the large-object section, a hit of one large
	// object streamed by a few clients at once: every target's MB/s per
	// round and median, every per-round ratio, Caddy's memory.
	register("httpbench.large", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "FILE"); err != nil {
			return "", err
		}
		var r struct {
			Large *httpbenchLarge `json:"large_object"`
		}
		if err := c.load(args[0], &r); err != nil {
			return "", err
		}
		if r.Large == nil {
			return "`" + args[0] + "` holds no large-object section: it was written before eval/httpbench measured one; to be regenerated.\n", nil
		}
		return renderHTTPBenchLarge(r.Large), nil
	})

	// dnsperf.throughput FILE: queries per second and CPU per query per
	// zone, and every per-round ratio.
	register("dnsperf.throughput", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "FILE"); err != nil {
			return "", err
		}
		var r struct {
			Throughput map[string]any `json:"throughput"`
		}
		if err := c.load(args[0], &r); err != nil {
			return "", err
		}
		t := r.Throughput
		var rows [][]string
		for _, z := range []string{"coral", "file", "whoami"} {
			if _, ok := t[z+"_qps"]; !ok {
				continue
			}
			rows = append(rows, []string{z, flist(t, z+"_qps", 0), "**" + fnum(t, "median_"+z+"_qps", 0) + "**", fnum(t, "median_"+z+"_cpu_us_per_query", 1)})
		}
		out := table([]string{"zone", "queries/s per round", "median", "CoreDNS CPU µs per query (median)"}, rows)
		return out + "\n" + table([]string{"ratio (same rounds)", "per round", "median"}, roundRatios(t)), nil
	})

	// dnsperf.latency FILE: latency at each offered rate.
	register("dnsperf.latency", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "FILE"); err != nil {
			return "", err
		}
		var r struct {
			Latency struct {
				ByRate []map[string]any `json:"by_rate"`
			} `json:"latency"`
		}
		if err := c.load(args[0], &r); err != nil {
			return "", err
		}
		var rows [][]string
		for _, br := range r.Latency.ByRate {
			for _, z := range []string{"coral", "file", "whoami"} {
				m, ok := br[z].(map[string]any)
				if !ok {
					continue
				}
				rows = append(rows, []string{fnum(br, "target_qps", 0), z, fnum(m, "p50_ms", 2) + " / " + fnum(m, "p99_ms", 1), pctAny(m["loss_rate"])})
			}
		}
		return table([]string{"offered queries/s", "zone", "p50 / p99 ms", "lost"}, rows), nil
	})

	// headerfields.table: Caddy's static_response with more header fields.
	register("headerfields.table", func(c *results, args []string) (string, error) {
		var r struct {
			Sites []struct {
				Fields  int     `json:"fields"`
				RPS     float64 `json:"requests_per_second"`
				CPU     float64 `json:"caddy_cpu_us_per_request"`
				Against float64 `json:"rps_against_first"`
			} `json:"sites"`
		}
		if err := c.load("headerfields.json", &r); err != nil {
			return "", err
		}
		var rows [][]string
		for _, s := range r.Sites {
			rows = append(rows, []string{count(s.Fields), num(s.RPS, 0), num(s.CPU, 1), num(s.Against, 3)})
		}
		return table([]string{"header fields", "requests/s", "Caddy CPU µs per request", "requests against the first row"}, rows), nil
	})

	// conformance.table: cache-tests scores of every implementation.
	register("conformance.table", func(c *results, args []string) (string, error) {
		var r struct {
			SuiteCommit string `json:"suite_commit"`
			Impls       []struct {
				Label    string `json:"label"`
				Version  string `json:"version"`
				Skipped  string `json:"skipped"`
				Required struct{ Passed, Of int }
				Optimal  struct{ Passed, Of int }
				Checks   struct{ Passed, Of int }
			} `json:"implementations"`
		}
		if err := c.load("conformance/summary.json", &r); err != nil {
			return "", err
		}
		var rows [][]string
		for _, im := range r.Impls {
			if im.Skipped != "" {
				rows = append(rows, []string{im.Label, im.Version, "skipped: " + im.Skipped, "", ""})
				continue
			}
			rows = append(rows, []string{im.Label, strings.Fields(im.Version + " ")[0],
				fmt.Sprintf("%d of %d", im.Required.Passed, im.Required.Of), fmt.Sprintf("%d of %d", im.Optimal.Passed, im.Optimal.Of),
				fmt.Sprintf("%d of %d", im.Checks.Passed, im.Checks.Of)})
		}
		return table([]string{"cache-tests at " + shortCommit(r.SuiteCommit), "version", "required tests passed", "optimal tests passed", "checks passed"}, rows), nil
	})

	// conformance.value LABEL-WORD required|optimal|checks: "137 of 160"
	// for the implementation whose name is the first word.
	register("conformance.value", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 2, "coral|trafficserver|squid|nginx required|optimal|checks"); err != nil {
			return "", err
		}
		var r struct {
			Impls []struct {
				Name     string `json:"implementation"`
				Version  string `json:"version"`
				Required struct{ Passed, Of int }
				Optimal  struct{ Passed, Of int }
				Checks   struct{ Passed, Of int }
			} `json:"implementations"`
		}
		if err := c.load("conformance/summary.json", &r); err != nil {
			return "", err
		}
		for _, im := range r.Impls {
			if im.Name != args[0] {
				continue
			}
			switch args[1] {
			case "required":
				return fmt.Sprintf("%d of %d", im.Required.Passed, im.Required.Of), nil
			case "optimal":
				return fmt.Sprintf("%d of %d", im.Optimal.Passed, im.Optimal.Of), nil
			case "checks":
				return fmt.Sprintf("%d of %d", im.Checks.Passed, im.Checks.Of), nil
			case "version":
				return strings.Fields(im.Version + " ")[0], nil
			}
			return "", fmt.Errorf("want required, optimal, checks or version, not %q", args[1])
		}
		return "", fmt.Errorf("conformance/summary.json has no %q", args[0])
	})

	// chaos.phases: eval/chaos's table.
	register("chaos.phases", func(c *results, args []string) (string, error) {
		var r struct {
			Phases []map[string]any `json:"phases"`
			Total  map[string]any   `json:"total"`
		}
		if err := c.load("chaos/chaos.json", &r); err != nil {
			return "", err
		}
		var rows [][]string
		for _, p := range append(r.Phases, r.Total) {
			bound := fnum(p, "origin_fetches_bound", 0)
			if bound == "–" || bound == "0" {
				bound = ""
			} else {
				bound = " (" + bound + ")"
			}
			rows = append(rows, []string{fmt.Sprint(p["phase"]), fnum(p, "requests", 0), fnum(p, "failures", 0), fnum(p, "failures_beyond_ttl_window", 0),
				fnum(p, "violations", 0), fnum(p, "origin_fetches", 0), fnum(p, "origin_fetches_max_per_object", 0) + bound, fnum(p, "peer_fetch_failures", 0)})
		}
		return table([]string{"phase", "requests", "failures", "beyond the TTL window", "violations", "origin fetches", "most per object (bound)", "peer fetch failures"}, rows), nil
	})

	// hostile.table: eval/hostile's classes.
	register("hostile.table", func(c *results, args []string) (string, error) {
		var r struct {
			Results []struct {
				Class    string `json:"class"`
				Requests int    `json:"attack_requests"`
				Origin   int    `json:"origin_requests"`
				Idle     struct{ RSS, Disk float64 }
				Peak     struct{ RSS, Disk, Unlinked float64 }
				Canary   map[string]struct {
					Requests, Failures, Changed int
					P99                         float64
				}
				Violations []string `json:"violations"`
			} `json:"results"`
		}
		if err := c.load("hostile.json", &r); err != nil {
			return "", err
		}
		const mib = 1 << 20
		var rows [][]string
		for _, x := range r.Results {
			h, v := x.Canary["honest"], x.Canary["victim"]
			verdict := "ok"
			if len(x.Violations) > 0 {
				verdict = "**broken**: " + strings.Join(x.Violations, "; ")
			}
			rows = append(rows, []string{x.Class, count(x.Requests), count(x.Origin), num((x.Peak.RSS-x.Idle.RSS)/mib, 1) + " MiB",
				num(x.Peak.Disk/mib, 1) + " (" + num(x.Peak.Unlinked/mib, 1) + ") MiB",
				fmt.Sprintf("%d/%d, %s ms", h.Failures, h.Requests, num(h.P99/1e6, 0)), fmt.Sprintf("%d/%d", v.Changed, v.Requests), verdict})
		}
		return table([]string{"class", "requests", "origin fetches", "peak RSS over idle", "peak disk (unlinked)", "honest canary failures, p99", "victims changed", "verdict"}, rows), nil
	})

	// hostile.held CLASS: the most download slots one client held at once
	// in CLASS, and its share ("32 (its share: 32)").
	register("hostile.held", func(c *results, args []string) (string, error) {
		if len(args) != 1 {
			return "", fmt.Errorf("hostile.held takes a class")
		}
		var r struct {
			Results []struct {
				Class string `json:"class"`
				Held  *int   `json:"peak_held"`
				Bound int    `json:"held_bound"`
			} `json:"results"`
		}
		if err := c.load("hostile.json", &r); err != nil {
			return "", err
		}
		for _, x := range r.Results {
			if x.Class == args[0] && x.Held != nil {
				return fmt.Sprintf("%d (its share: %d)", *x.Held, x.Bound), nil
			}
		}
		return "", fmt.Errorf("hostile.json has no slots held for class %q", args[0])
	})
}

func pctAny(v any) string {
	if f, ok := v.(float64); ok {
		return pct(f, 2)
	}
	return "–"
}

// httpbenchLarge is what httpbench.large reads of eval/httpbench's
// large_object.
type httpbenchLarge struct {
	Object struct {
		Path  string  `json:"path"`
		Bytes float64 `json:"object_bytes"`
	} `json:"object"`
	Duration        string           `json:"run_duration"`
	ByStreams       []map[string]any `json:"by_streams"`
	CaddyRSSBefore  float64          `json:"caddy_rss_before"`
	CaddyPeakRSS    float64          `json:"caddy_peak_rss"`
	BaselinePeakRSS float64          `json:"baseline_caddy_peak_rss"`
}

func renderHTTPBenchLarge(l *httpbenchLarge) string {
	mib := func(b float64) string { return num(b/(1<<20), 1) + " MiB" }
	var b strings.Builder
	runs := l.Duration
	if d, err := time.ParseDuration(l.Duration); err == nil {
		runs = dur(d)
	}
	fmt.Fprintf(&b, "One object of %s (`%s`), runs of %s; Caddy's resident memory %s before the section, its peak %s",
		num(l.Object.Bytes/(1<<20), 0)+" MiB", l.Object.Path, runs, mib(l.CaddyRSSBefore), mib(l.CaddyPeakRSS))
	if l.BaselinePeakRSS > 0 {
		fmt.Fprintf(&b, " (the `-baseline` Caddy's peak %s)", mib(l.BaselinePeakRSS))
	}
	b.WriteString(".\n\n")
	var rows, ratios [][]string
	for _, bs := range l.ByStreams {
		streams := fnum(bs, "streams", 0)
		ts, _ := bs["targets"].(map[string]any)
		for _, n := range []string{"coral", "coral-old", "file", "nginx"} {
			t, ok := ts[n].(map[string]any)
			if !ok {
				continue
			}
			rows = append(rows, []string{streams, n, flist(t, "mb_per_s", 0), "**" + fnum(t, "median_mb_per_s", 0) + "**", fnum(t, "median_server_cpu_s_per_gb", 2)})
		}
		for _, row := range roundRatios(bs) {
			ratios = append(ratios, append([]string{streams}, row...))
		}
	}
	b.WriteString(table([]string{"streams", "target", "MB/s per round", "median MB/s", "server CPU s per GB (median)"}, rows))
	b.WriteString("\n")
	b.WriteString(table([]string{"streams", "ratio of MB/s (same rounds)", "per round", "median"}, ratios))
	return b.String()
}
