package main

import (
	"fmt"
	"strings"
)

// The flash crowd: eval/flashcrowd's files (the paper's set-up, quick,
// without the burst, with formed clusters, on an error URL).

type fcReport struct {
	Params struct {
		Proxies    int    `json:"proxies"`
		L1         int    `json:"level1_clusters"`
		L2         int    `json:"level2_clusters"`
		Levels     string `json:"levels"`
		Files      int    `json:"files"`
		FileBytes  int    `json:"file_bytes"`
		PageFiles  int    `json:"page_files"`
		LineKbit   int    `json:"line_kbit"`
		Clients    int    `json:"clients"`
		Duration   string `json:"duration"`
		Spread     string `json:"start_spread"`
		Think      string `json:"think"`
		Pinned     *bool  `json:"pinned"`
		ErrorCrowd bool   `json:"error_crowd"`
		Burst      *bool  `json:"start_burst"`
	} `json:"params"`
	Ready *struct {
		Seconds  float64 `json:"seconds"`
		Ready    bool    `json:"ready"`
		Formed   bool    `json:"formed"`
		Clusters []int   `json:"clusters_per_level"`
	} `json:"readiness"`
	Burst *struct {
		Requests int     `json:"requests"`
		Spread   float64 `json:"send_spread_ms"`
	} `json:"start_burst"`
	Totals struct {
		Requests  int            `json:"requests"`
		Failed    int            `json:"failed"`
		BySource  map[string]int `json:"by_source"`
		ReqPerSec float64        `json:"requests_per_second"`
		Kbit      float64        `json:"served_kbit_per_second"`
	} `json:"totals"`
	Minutes []struct {
		Requests int            `json:"requests"`
		BySource map[string]int `json:"by_source"`
		Failed   int            `json:"failed"`
		Origin   int            `json:"origin_fetches"`
		P50      float64        `json:"p50_ms"`
		P99      float64        `json:"p99_ms"`
	} `json:"minutes"`
	Origin struct {
		Fetches      int   `json:"fetches"`
		PerFile      []int `json:"per_file"`
		ErrorFetches int   `json:"error_url_fetches"`
	} `json:"origin"`
	Latency map[string]struct {
		Count                   int
		P50, P90, P96, P99, Max float64
	} `json:"latency_ms"`
	Pass     bool     `json:"pass"`
	Problems []string `json:"problems"`
}

func (r *fcReport) pinned() bool { return r.Params.Pinned == nil || *r.Params.Pinned }

func (c *results) flashcrowd(file string) (*fcReport, error) {
	var r fcReport
	return &r, c.load(file, &r)
}

func (r *fcReport) variant() string {
	var parts []string
	if r.pinned() {
		parts = append(parts, fmt.Sprintf("clusters pinned (%d regions, %d metros)", r.Params.L1, r.Params.L2))
	} else {
		parts = append(parts, "clusters formed by the nodes")
	}
	if r.Burst == nil {
		parts = append(parts, "no start burst")
	}
	if r.Params.ErrorCrowd {
		parts = append(parts, "crowd on a bare 404")
	}
	return strings.Join(parts, ", ")
}

func init() {
	// flashcrowd.minutes FILE: requests per minute by source.
	register("flashcrowd.minutes", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "FILE"); err != nil {
			return "", err
		}
		r, err := c.flashcrowd(args[0])
		if err != nil {
			return "", err
		}
		var rows [][]string
		for i, m := range r.Minutes {
			rows = append(rows, []string{fmt.Sprint(i + 1), count(m.Requests), count(m.BySource["local"]), count(m.BySource["collapsed"]),
				count(m.BySource["peer-l2"]), count(m.BySource["peer-l1"]), count(m.BySource["peer-l0"]), count(m.BySource["origin"]),
				count(m.BySource["other"]), count(m.Failed), "**" + count(m.Origin) + "**", ms(m.P50) + " / " + ms(m.P99)})
		}
		return table([]string{"minute", "requests", "local", "collapsed", "peer L2", "peer L1", "peer L0", "origin", "other", "failed", "origin fetches", "p50 / p99 ms"}, rows), nil
	})

	// flashcrowd.runs FILE...: one line per run: what it was and what the
	// origin saw.
	register("flashcrowd.runs", func(c *results, args []string) (string, error) {
		if len(args) == 0 {
			return "", fmt.Errorf("want one or more files")
		}
		var rows [][]string
		for _, f := range args {
			r, err := c.flashcrowd(f)
			if err != nil {
				return "", err
			}
			origin := fmt.Sprintf("%s for %s files", count(r.Origin.Fetches), count(r.Params.Files))
			if r.Params.ErrorCrowd {
				origin = fmt.Sprintf("%s for the error URL", count(r.Origin.ErrorFetches))
			}
			formed := "–"
			if r.Ready != nil && len(r.Ready.Clusters) == 3 {
				formed = fmt.Sprintf("%d / %d / %d", r.Ready.Clusters[0], r.Ready.Clusters[1], r.Ready.Clusters[2])
				if !r.Ready.Ready {
					formed += " (not settled)"
				}
			}
			local := float64(r.Totals.BySource["local"]) / float64(max(1, r.Totals.Requests-r.Totals.Failed))
			verdict := "pass"
			if !r.Pass {
				verdict = "**fail**: " + strings.Join(r.Problems, "; ")
			}
			rows = append(rows, []string{"`" + f + "`", r.variant(), durString(r.Params.Duration), count(r.Totals.Requests), count(r.Totals.Failed),
				"**" + origin + "**", pct(local, 1), formed, verdict})
		}
		return table([]string{"file", "set-up", "load", "requests", "failed", "origin fetches", "local hits", "clusters at levels 0 / 1 / 2 when the load began", "acceptance"}, rows), nil
	})

	// flashcrowd.latency FILE: client latency by source.
	register("flashcrowd.latency", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "FILE"); err != nil {
			return "", err
		}
		r, err := c.flashcrowd(args[0])
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, s := range []string{"all", "local", "collapsed", "peer-l2", "peer-l1", "peer-l0", "origin", "other"} {
			l, ok := r.Latency[s]
			if !ok || l.Count == 0 {
				continue
			}
			rows = append(rows, []string{s, count(l.Count), ms(l.P50), ms(l.P90), ms(l.P96), ms(l.P99), ms(l.Max)})
		}
		return table([]string{"client latency (ms), request to last byte", "requests", "p50", "p90", "p96", "p99", "max"}, rows), nil
	})

	// flashcrowd.value FILE FIELD: one figure.
	register("flashcrowd.value", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 2, "FILE FIELD"); err != nil {
			return "", err
		}
		r, err := c.flashcrowd(args[0])
		if err != nil {
			return "", err
		}
		p := r.Params
		switch args[1] {
		case "origin":
			return count(r.Origin.Fetches), nil
		case "error-fetches":
			return count(r.Origin.ErrorFetches), nil
		case "requests":
			return count(r.Totals.Requests), nil
		case "failed":
			return count(r.Totals.Failed), nil
		case "files":
			return count(p.Files), nil
		case "levels":
			return strings.ReplaceAll(strings.ReplaceAll(p.Levels, "ms", " ms"), "  ", " and "), nil
		case "proxies":
			return count(p.Proxies), nil
		case "rate":
			return num(r.Totals.ReqPerSec, 1) + " requests/s, " + num(r.Totals.Kbit/1000, 1) + " Mbit/s", nil
		case "burst":
			if r.Burst == nil {
				return "", fmt.Errorf("%s has no start burst", args[0])
			}
			return fmt.Sprintf("%d requests sent within %s ms", r.Burst.Requests, num(r.Burst.Spread, 1)), nil
		case "local":
			return pct(float64(r.Totals.BySource["local"])/float64(max(1, r.Totals.Requests-r.Totals.Failed)), 1), nil
		case "peers-minute1":
			if len(r.Minutes) == 0 {
				return "", fmt.Errorf("no minutes")
			}
			m := r.Minutes[0].BySource
			return fmt.Sprintf("%d / %d / %d", m["peer-l2"], m["peer-l1"], m["peer-l0"]), nil
		case "setup":
			return fmt.Sprintf("%d proxies, an origin serving %d files of %s bytes (%d per page) through one %d kbit/s line, %d clients over %s with a think time of %s",
				p.Proxies, p.Files, count(p.FileBytes), p.PageFiles, p.LineKbit, p.Clients, durString(p.Duration), durString(p.Think)), nil
		}
		return "", fmt.Errorf("field %q unknown", args[1])
	})
}
