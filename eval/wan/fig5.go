//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/coralcdn/coral/internal/lab/wan"
	"github.com/coralcdn/coral/internal/lab/wan/fleet"
)

// e2eConfig is one of the paper's three configurations as the real
// servers run it. The plugin has no "no target" mode: multi-level without
// traceroute still ranks proxies in the resolver's /24 first, and
// single-level is every node alone at level 1 (`levels 1us`: nobody is
// within a microsecond, so every resolver is level 0 and every proxy
// looks at level 0 after its own empty level 1).
type e2eConfig struct {
	Name   string       `json:"name"`
	Config fleet.Config `json:"config"`
}

var e2eConfigs = []e2eConfig{
	{"single-level", fleet.Config{Levels: "1us", NoProximity: true}},
	{"multi-level", fleet.Config{NoProximity: true}},
	{"multi-level, traceroute", fleet.Config{}},
}

// latencySummary is one class of requests.
type latencySummary struct {
	Class    string  `json:"class"`
	Requests int     `json:"requests"`
	Failed   int     `json:"failed"`
	P50      float64 `json:"p50_s"`
	P96      float64 `json:"p96_s"`
	DNSP50   float64 `json:"dns_p50_ms"`
	DNSP96   float64 `json:"dns_p96_ms"`
	FetchP50 float64 `json:"fetch_p50_ms"`
	// SameSite is the share of ok requests served by a proxy at the
	// client's site; ProxyRTTP50 the median lab RTT to the proxy.
	SameSite float64 `json:"proxy_at_client_site_share"`
	// SiteInAnswer is the share of ok requests whose answer named a
	// proxy at the client's site (first or not).
	SiteInAnswer float64        `json:"site_in_answer_share"`
	ProxyRTTP50  float64        `json:"client_proxy_rtt_p50_ms"`
	ProxyRTTP96  float64        `json:"client_proxy_rtt_p96_ms"`
	Sources      map[string]int `json:"served_from"`
	Errors       map[string]int `json:"errors,omitempty"`
}

func summarize(class string, rs []request) latencySummary {
	s := latencySummary{Class: class, Sources: map[string]int{}, Errors: map[string]int{}}
	var lat, dns, fetch, rtt []float64
	same, inAnswer := 0, 0
	for _, r := range rs {
		s.Requests++
		if !r.OK {
			s.Failed++
			e := r.Err
			if len(e) > 60 {
				e = e[:60]
			}
			s.Errors[e]++
			continue
		}
		lat = append(lat, r.LatencyMs/1000)
		dns = append(dns, r.DNSMs)
		fetch = append(fetch, r.FetchMs)
		rtt = append(rtt, r.ProxyRTTMs)
		s.Sources[r.Source]++
		if r.ProxySite == r.Site {
			same++
		}
		if r.SiteInAnswer {
			inAnswer++
		}
	}
	for _, v := range [][]float64{lat, dns, fetch, rtt} {
		slices.Sort(v)
	}
	s.P50, s.P96 = pct(lat, 50), pct(lat, 96)
	s.DNSP50, s.DNSP96, s.FetchP50 = pct(dns, 50), pct(dns, 96), pct(fetch, 50)
	s.ProxyRTTP50, s.ProxyRTTP96 = pct(rtt, 50), pct(rtt, 96)
	if len(lat) > 0 {
		s.SameSite = float64(same) / float64(len(lat))
		s.SiteInAnswer = float64(inAnswer) / float64(len(lat))
	}
	return s
}

// e2eRun is Figure 5 for one configuration on the real servers.
type e2eRun struct {
	Config  e2eConfig        `json:"config"`
	Summary []latencySummary `json:"summary"` // all, then each client kind
	// CDF holds, per class of client, the latency percentiles p1 … p99
	// and the maximum, in ms.
	CDF map[string][]float64 `json:"latency_cdf_ms"`
	// Requests are every request, for the figures; not written to the
	// result file (its CDF and summaries are).
	Requests []request `json:"requests,omitempty"`
	// Tail breaks the slowest 4 % of all ok requests down by where the
	// proxy was and where the bytes came from.
	Tail map[string]int `json:"slowest_4pct_by_proxy_and_source"`
}

var kinds = []string{kindBeside, kindLAN, kindNoProxy}

// cdfs are the latency percentiles p1 … p99 and the maximum (ms) of the
// ok requests of each kind of client, and of all.
func cdfs(rs []request) map[string][]float64 {
	out := map[string][]float64{}
	for _, k := range append([]string{"all"}, kinds...) {
		lat := latencies(rs, func(r request) bool { return k == "all" || r.Kind == k })
		if len(lat) == 0 {
			continue
		}
		var c []float64
		for p := 1; p <= 99; p++ {
			c = append(c, pct(lat, float64(p)))
		}
		out[k] = append(c, lat[len(lat)-1])
	}
	return out
}

func newE2ERun(cfg e2eConfig, rs []request) *e2eRun {
	r := &e2eRun{Config: cfg, Requests: rs, Tail: map[string]int{}, CDF: cdfs(rs)}
	r.Summary = append(r.Summary, summarize("all", rs))
	for _, k := range kinds {
		var sub []request
		for _, q := range rs {
			if q.Kind == k {
				sub = append(sub, q)
			}
		}
		if len(sub) > 0 {
			r.Summary = append(r.Summary, summarize(k, sub))
		}
	}
	all := latencies(rs, func(request) bool { return true })
	cut := pct(all, 96)
	for _, q := range rs {
		if q.OK && q.LatencyMs >= cut {
			where := "proxy elsewhere"
			if q.ProxySite == q.Site {
				where = "proxy at client's site"
			}
			r.Tail[where+", "+q.Source]++
		}
	}
	return r
}

// runFigure5 runs the workload once per configuration, each on a fresh
// deployment (caches and state emptied, resolvers flushed) after warmup.
func runFigure5(ctx context.Context, f *fleet.Fleet, l *wan.Lab, wl workload, warmup time.Duration, out io.Writer,
	during func(name string)) ([]*e2eRun, error) {
	var runs []*e2eRun
	for _, cfg := range e2eConfigs {
		start := time.Now()
		if err := f.Redeploy(ctx, cfg.Config); err != nil {
			return runs, fmt.Errorf("%s: %w", cfg.Name, err)
		}
		fmt.Fprintf(out, "Figure 5, %s: deployed in %v; warming up %v, then %v of clients\n", cfg.Name,
			time.Since(start).Round(time.Second), warmup, wl.Duration)
		if !sleep(ctx, warmup) {
			return runs, ctx.Err()
		}
		done := make(chan struct{})
		if during != nil {
			go func() {
				defer close(done)
				if sleep(ctx, wl.Duration/2) {
					during(cfg.Name)
				}
			}()
		} else {
			close(done)
		}
		rs := runWorkload(ctx, f, l, wl)
		<-done
		if err := f.Check(); err != nil {
			return runs, err
		}
		r := newE2ERun(cfg, rs)
		runs = append(runs, r)
		printE2E(out, r)
	}
	return runs, nil
}

func printE2E(out io.Writer, r *e2eRun) {
	fmt.Fprintf(out, "  %-26s %8s %6s %8s %8s %9s %9s %9s %9s %9s  %s\n", r.Config.Name, "requests", "failed", "p50 s", "p96 s",
		"DNS p50", "DNS p96", "same site", "in answer", "RTT p50", "served from")
	for _, s := range r.Summary {
		fmt.Fprintf(out, "  %-26s %8d %6d %8.3f %8.3f %7.1fms %7.0fms %8.0f%% %8.0f%% %7.1fms  %v\n", s.Class, s.Requests, s.Failed,
			s.P50, s.P96, s.DNSP50, s.DNSP96, 100*s.SameSite, 100*s.SiteInAnswer, s.ProxyRTTP50, s.Sources)
	}
	fmt.Fprintf(out, "  slowest 4 %%: %v\n", r.Tail)
}

// endToEndVirtual is the part of eval/endtoend's endtoend.json compared.
type endToEndVirtual struct {
	Topology string `json:"topology"`
	N        int    `json:"n"`
	PerSite  int    `json:"nodes_per_site"`
	Results  []struct {
		Config      string         `json:"config"`
		Variant     string         `json:"variant"`
		Requests    int            `json:"requests"`
		Failed      int            `json:"failed"`
		Sources     map[string]int `json:"served_from"`
		AllP50      float64        `json:"all_p50_s"`
		AllP96      float64        `json:"all_p96_s"`
		DNSP50      float64        `json:"dns_p50_s"`
		ProxyRTTP50 float64        `json:"client_proxy_rtt_p50_s"`
		SameSite    float64        `json:"proxy_at_client_site_share"`
		// SiteInAnswer is the share of ok requests whose answer named a
		// proxy at the client's site (first or not).
		SiteInAnswer float64 `json:"site_in_answer_share"`
	} `json:"results"`
	Wall float64 `json:"wall_seconds"`
	// Command is how this command ran it.
	Command string `json:"command"`
}

// runEndToEndVirtual runs eval/endtoend on the world's node sites with
// the workload's timing.
func runEndToEndVirtual(w *world, dir string, perSite int, wl workload, warmup time.Duration) (*endToEndVirtual, error) {
	data := filepath.Join(dir, "matrix")
	if err := w.writeMatrix(data, w.NodeSites); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "endtoend")
	args := []string{"-n", fmt.Sprint(len(w.NodeSites) * perSite), "-persite", fmt.Sprint(perSite),
		"-duration", wl.Duration.String(), "-jitter", wl.Jitter.String(), "-think", wl.Think.String(),
		"-warmup", warmup.String(), "-seed", fmt.Sprint(wl.Seed), "-out", out}
	cmd := goRun("./eval/endtoend", args...)
	cmd.Env = append(os.Environ(), "CORAL_RTT_DATA="+data)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("eval/endtoend: %v: %s", err, b)
	}
	raw, err := os.ReadFile(filepath.Join(out, "endtoend.json"))
	if err != nil {
		return nil, err
	}
	var v endToEndVirtual
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	v.Command = fmt.Sprintf("CORAL_RTT_DATA=<the world's node sites> go run ./eval/endtoend %v", args)
	return &v, nil
}
