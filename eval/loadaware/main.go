//go:build linux

// Command loadaware measures issue 41's two ways of sharing a fleet's
// bandwidth, with the real bin/caddy and bin/coredns on loopback (the lab
// of internal/lab/loadlab):
//
//   - crowd: a crowd at one site, before and after load-aware
//     redirection. Eight proxies, each with a bandwidth budget, in four
//     pinned sites of two regions (e1, e2 east; w1, w2 west); one DNS
//     server in site e1; clients classified at level 2 that resolve the
//     origin's Coralized name (honouring the answer TTL) and fetch from
//     what they are given, following a coral-no-serve redirect to the
//     origin as a browser does. The origin answers after -origin-delay (a
//     far, busy origin). Run once with load_threshold off (before: the
//     DNS server knows liveness and proximity only) and once with the
//     default 80 (after). It reports where requests were served over
//     time (the site, the rest of its region, the other region, or the
//     origin after a redirect), the origin's requests, client latency,
//     and how long each proxy was still named in answers after its load
//     reached the threshold;
//
//   - fair: two origins behind one proxy with a short budget, one hot
//     (ten 32 KiB requests a round) and one small (one 4 KiB request a
//     round), for -rounds rounds, once with bandwidth_share node (the
//     budget of before) and once with fair: bytes served and redirects per
//     origin, and the proxy's budget decisions.
//
//     go run ./eval/loadaware [-duration 60s] [-rounds 100] [-out docs/eval]
//
// It needs bin/caddy and bin/coredns (make caddy coredns) and the
// addresses 127.0.154.0/24 and 127.0.155.0/24. It prints tables and
// writes docs/eval/loadaware.json (with its provenance),
// loadaware-crowd.png and loadaware-fair.png.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/loadlab"
)

// Result is the file written.
type Result struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Crowd      CrowdParams         `json:"crowd_params"`
	Crowds     []Crowd             `json:"crowds"` // before (load_threshold off), after (80)
	Fair       FairParams          `json:"fair_params"`
	Fairs      []Fair              `json:"fairs"` // node, fair
}

func main() {
	var cp CrowdParams
	var fp FairParams
	flag.DurationVar(&cp.Duration, "duration", 60*time.Second, "how long each crowd runs")
	flag.IntVar(&cp.Clients, "clients", 4, "clients in the crowd")
	flag.DurationVar(&cp.Think, "think", 200*time.Millisecond, "each client's pause between requests")
	flag.DurationVar(&cp.OriginDelay, "origin-delay", 50*time.Millisecond, "the origin's time to answer")
	flag.StringVar(&cp.Budget, "budget", "4MiB", "each proxy's bandwidth budget (per hour)")
	flag.IntVar(&fp.Rounds, "rounds", 100, "rounds of the fair-share run")
	out := flag.String("out", evalrun.ResultsDir, "directory for loadaware.json and the figures (\"\": none)")
	flag.Parse()
	cp.defaults()
	fp.defaults()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cp, fp, *out); err != nil {
		fmt.Fprintln(os.Stderr, "loadaware:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cp CrowdParams, fp FairParams, out string) error {
	prov := evalrun.StartProvenance("loadaware", evalrun.TopologyLoopback)
	res := Result{Provenance: prov, Crowd: cp, Fair: fp}
	for _, share := range []string{"node", "fair"} {
		f, err := runFair(ctx, fp, share)
		if err != nil {
			return fmt.Errorf("fair shares, %s: %w", share, err)
		}
		res.Fairs = append(res.Fairs, f)
	}
	printFair(res)
	for _, threshold := range []string{"off", "80"} {
		c, err := runCrowd(ctx, cp, threshold)
		if err != nil {
			return fmt.Errorf("crowd, load_threshold %s: %w", threshold, err)
		}
		res.Crowds = append(res.Crowds, c)
	}
	printCrowds(res)
	prov.Finish()
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "loadaware.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := plotCrowds(filepath.Join(out, "loadaware-crowd.png"), res); err != nil {
		return err
	}
	return plotFair(filepath.Join(out, "loadaware-fair.png"), res)
}

// ---------------------------------------------------------------------
// The crowd.

// CrowdParams are the crowd's settings.
type CrowdParams struct {
	Duration    time.Duration `json:"duration_ns"`
	Clients     int           `json:"clients"`
	Think       time.Duration `json:"think_ns"`
	OriginDelay time.Duration `json:"origin_delay_ns"`
	Budget      string        `json:"budget_per_hour"`
	ObjectBytes int           `json:"object_bytes"`
	Objects     int           `json:"objects"`
	AnswerTTL   int           `json:"answer_ttl_s"`
	BinSeconds  int           `json:"bin_seconds"`
	Sites       []loadlab.Site
}

func (p *CrowdParams) defaults() {
	p.ObjectBytes, p.Objects, p.AnswerTTL, p.BinSeconds = 16<<10, 16, 5, 5
	p.Sites = []loadlab.Site{{Name: "e1", Region: "east", Proxies: 2}, {Name: "e2", Region: "east", Proxies: 2},
		{Name: "w1", Region: "west", Proxies: 2}, {Name: "w2", Region: "west", Proxies: 2}}
}

// Where a request was served, from the crowd's site's point of view.
const (
	servedSite   = "site"         // a proxy of the clients' site (e1)
	servedRegion = "region"       // a proxy of the rest of its region (e2)
	servedOther  = "other_region" // a proxy of the other region
	servedOrigin = "origin"       // the origin, after a coral-no-serve redirect
)

var placesServed = []string{servedSite, servedRegion, servedOther, servedOrigin}

// Crowd is one run of the crowd.
type Crowd struct {
	LoadThreshold string `json:"load_threshold"`
	Requests      int    `json:"requests"`
	Failures      int    `json:"failures"`
	// Served counts the requests by where they were served.
	Served map[string]int `json:"served"`
	// Bins are the requests per BinSeconds by where they were served.
	Bins []map[string]int `json:"bins"`
	// OriginByProxies and OriginByClients are the origin's requests: the
	// proxies' fetches and the redirected clients'.
	OriginByProxies int64 `json:"origin_by_proxies"`
	OriginByClients int64 `json:"origin_by_clients"`
	// Latency percentiles of every request, of those served by a proxy,
	// of those redirected, in milliseconds.
	Latency           Percentiles `json:"latency_ms"`
	LatencyProxies    Percentiles `json:"latency_proxies_ms"`
	LatencyRedirected Percentiles `json:"latency_redirected_ms"`
	// NamedAfterLoaded is, per proxy whose published load reached 80 %,
	// how long after that the DNS server still named it in an answer to
	// the crowd (seconds); absent for proxies never loaded.
	NamedAfterLoaded map[string]float64 `json:"named_after_loaded_s"`
	Load             string             `json:"load"`
}

// Percentiles of a sample.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

func percentiles(ms []float64) Percentiles {
	if len(ms) == 0 {
		return Percentiles{}
	}
	slices.Sort(ms)
	at := func(q float64) float64 { return ms[min(len(ms)-1, int(q*float64(len(ms))))] }
	return Percentiles{N: len(ms), P50: at(0.5), P90: at(0.9), P99: at(0.99)}
}

func runCrowd(ctx context.Context, p CrowdParams, threshold string) (Crowd, error) {
	c := Crowd{LoadThreshold: threshold, Served: map[string]int{}, NamedAfterLoaded: map[string]float64{}}
	dir, err := os.MkdirTemp("", "coral-loadaware-")
	if err != nil {
		return c, err
	}
	defer os.RemoveAll(dir)
	spec := loadlab.Spec{Dir: dir, Sites: p.Sites, Budget: p.Budget, LoadThreshold: threshold, AnswerTTL: p.AnswerTTL}
	fmt.Printf("crowd, load_threshold %s: starting %d proxies and the DNS server\n", threshold, 8)
	lab, err := loadlab.Start(ctx, spec)
	defer lab.Stop()
	if err != nil {
		return c, err
	}
	spec = lab.Spec
	origin, err := loadlab.StartOrigin(netip.AddrPortFrom(spec.IP(0, 2), loadlab.HTTPPort), p.ObjectBytes, p.OriginDelay)
	if err != nil {
		return c, err
	}
	defer origin.Close()
	place := map[netip.Addr]string{}
	for _, px := range lab.Proxies {
		switch {
		case px.Site == p.Sites[0].Name:
			place[px.Addr] = servedSite
		case px.Region == p.Sites[0].Region:
			place[px.Addr] = servedRegion
		default:
			place[px.Addr] = servedOther
		}
	}
	budget, err := parseSize(p.Budget)
	if err != nil {
		return c, err
	}

	var mu sync.Mutex
	start := time.Now()
	named := map[netip.Addr]time.Time{}  // last time an answer named the proxy
	loaded := map[netip.Addr]time.Time{} // when its load reached 80 %
	var all, proxied, redirected []float64
	record := func(at time.Time, f loadlab.Fetch, proxy netip.Addr, err error) {
		mu.Lock()
		defer mu.Unlock()
		c.Requests++
		if err != nil {
			c.Failures++
			return
		}
		where := place[proxy]
		ms := float64(f.Took.Microseconds()) / 1000
		all = append(all, ms)
		if f.Redirected {
			where = servedOrigin
			redirected = append(redirected, ms)
		} else {
			proxied = append(proxied, ms)
		}
		c.Served[where]++
		bin := int(at.Sub(start).Seconds()) / p.BinSeconds
		for len(c.Bins) <= bin {
			c.Bins = append(c.Bins, map[string]int{})
		}
		c.Bins[bin][where]++
	}
	runCtx, cancel := context.WithTimeout(ctx, p.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for i := range p.Clients {
		wg.Go(func() {
			from := spec.IP(1, 1+i)
			hc := loadlab.Client(from)
			rng := rand.New(rand.NewPCG(uint64(i), 41))
			var proxies []netip.Addr
			var expires time.Time
			for runCtx.Err() == nil {
				if time.Now().After(expires) {
					got, ttl, err := lab.Resolve(runCtx, from, origin.Host())
					if err != nil {
						record(time.Now(), loadlab.Fetch{}, netip.Addr{}, err)
						time.Sleep(p.Think)
						continue
					}
					now := time.Now()
					mu.Lock()
					for _, a := range got {
						named[a] = now
					}
					mu.Unlock()
					proxies, expires = got, now.Add(ttl)
				}
				proxy := proxies[rng.IntN(len(proxies))]
				at := time.Now()
				f, err := loadlab.Get(runCtx, hc, proxy, origin, fmt.Sprintf("/obj/%d", rng.IntN(p.Objects)))
				if runCtx.Err() != nil {
					return
				}
				record(at, f, proxy, err)
				select {
				case <-runCtx.Done():
				case <-time.After(p.Think):
				}
			}
		})
	}
	// Watch the proxies' budgets: when each reaches 80 %.
	wg.Go(func() {
		for runCtx.Err() == nil {
			for _, px := range lab.Proxies {
				v, err := px.Metric(runCtx, "caddy_coral_bytes_served_total")
				if err == nil && v >= 0.8*float64(budget) {
					mu.Lock()
					if _, ok := loaded[px.Addr]; !ok {
						loaded[px.Addr] = time.Now()
					}
					mu.Unlock()
				}
			}
			select {
			case <-runCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	wg.Wait()
	if err := lab.Exited(); err != nil {
		return c, err
	}
	c.OriginByProxies, c.OriginByClients = origin.Requests()
	c.Latency, c.LatencyProxies, c.LatencyRedirected = percentiles(all), percentiles(proxied), percentiles(redirected)
	for a, at := range loaded {
		if last, ok := named[a]; ok {
			c.NamedAfterLoaded[a.String()] = max(0, last.Sub(at).Seconds())
		}
	}
	c.Load = evalrun.LoadAvg()
	return c, nil
}

// parseSize reads the budget's size (KiB, MiB, GiB).
func parseSize(s string) (int64, error) {
	var n int64
	var unit string
	if _, err := fmt.Sscanf(s, "%d%s", &n, &unit); err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	switch unit {
	case "KiB":
		return n << 10, nil
	case "MiB":
		return n << 20, nil
	case "GiB":
		return n << 30, nil
	}
	return 0, fmt.Errorf("size %q: unit %q", s, unit)
}

func printCrowds(res Result) {
	p := res.Crowd
	fmt.Printf("\nA crowd at site e1: %d clients, a %d-byte object every %v each, for %v; 8 proxies with %s per hour each; answer TTL %d s\n",
		p.Clients, p.ObjectBytes, p.Think, p.Duration, p.Budget, p.AnswerTTL)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "load_threshold\trequests\tsite\tregion\tother region\tredirected\torigin (proxies)\torigin (clients)\tp50 ms\tp90 ms\tp99 ms\tfailures\t\n")
	for _, c := range res.Crowds {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%d\t\n", c.LoadThreshold, c.Requests,
			c.Served[servedSite], c.Served[servedRegion], c.Served[servedOther], c.Served[servedOrigin],
			c.OriginByProxies, c.OriginByClients, c.Latency.P50, c.Latency.P90, c.Latency.P99, c.Failures)
	}
	tw.Flush()
	for _, c := range res.Crowds {
		var names []string
		for a := range c.NamedAfterLoaded {
			names = append(names, a)
		}
		sort.Strings(names)
		fmt.Printf("load_threshold %s: named after its budget reached 80 %%:", c.LoadThreshold)
		for _, a := range names {
			fmt.Printf(" %s %.1fs", a, c.NamedAfterLoaded[a])
		}
		fmt.Printf(" (load %s)\n", c.Load)
	}
}

// ---------------------------------------------------------------------
// Fair shares.

// FairParams are the fair-share run's settings.
type FairParams struct {
	Rounds     int    `json:"rounds"`
	Budget     string `json:"budget_per_hour"`
	HotBytes   int    `json:"hot_bytes"`
	HotPer     int    `json:"hot_requests_per_round"`
	SmallBytes int    `json:"small_bytes"`
}

func (p *FairParams) defaults() {
	p.Budget, p.HotBytes, p.HotPer, p.SmallBytes = "1MiB", 32<<10, 10, 4<<10
}

// OriginShare is what one origin got.
type OriginShare struct {
	Requests    int   `json:"requests"`
	Served      int   `json:"served"`
	Redirected  int   `json:"redirected"`
	BytesServed int64 `json:"bytes_served"` // by the proxy
}

// Fair is one fair-share run.
type Fair struct {
	Share     string             `json:"bandwidth_share"`
	Hot       OriginShare        `json:"hot"`
	Small     OriginShare        `json:"small"`
	Decisions map[string]float64 `json:"decisions"` // caddy_coral_budget_decisions_total
}

func runFair(ctx context.Context, p FairParams, share string) (Fair, error) {
	f := Fair{Share: share, Decisions: map[string]float64{}}
	dir, err := os.MkdirTemp("", "coral-loadaware-fair-")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	spec := loadlab.Spec{Dir: dir, NoDNS: true, Sites: []loadlab.Site{{Name: "s", Region: "r", Proxies: 1}}, Budget: p.Budget, Share: share}
	lab, err := loadlab.Start(ctx, spec)
	defer lab.Stop()
	if err != nil {
		return f, err
	}
	spec = lab.Spec
	hot, err := loadlab.StartOrigin(netip.AddrPortFrom(spec.IP(0, 2), loadlab.HTTPPort), p.HotBytes, 0)
	if err != nil {
		return f, err
	}
	defer hot.Close()
	small, err := loadlab.StartOrigin(netip.AddrPortFrom(spec.IP(0, 3), loadlab.HTTPPort), p.SmallBytes, 0)
	if err != nil {
		return f, err
	}
	defer small.Close()
	proxy := lab.Proxies[0]
	hc := loadlab.Client(spec.IP(1, 1))
	get := func(o *loadlab.Origin, s *OriginShare, path string) error {
		fe, err := loadlab.Get(ctx, hc, proxy.Addr, o, path)
		if err != nil {
			return err
		}
		s.Requests++
		if fe.Redirected {
			s.Redirected++
		} else {
			s.Served++
			s.BytesServed += int64(fe.Bytes)
		}
		return nil
	}
	for r := range p.Rounds {
		for i := range p.HotPer {
			if err := get(hot, &f.Hot, fmt.Sprintf("/hot/%d", (r*p.HotPer+i)%64)); err != nil {
				return f, err
			}
		}
		if err := get(small, &f.Small, fmt.Sprintf("/small/%d", r%8)); err != nil {
			return f, err
		}
	}
	for _, d := range []string{"within_share", "over_share", "exhausted"} {
		v, err := proxy.Metric(ctx, "caddy_coral_budget_decisions_total", fmt.Sprintf(`decision="%s"`, d))
		if err != nil {
			return f, err
		}
		f.Decisions[d] = v
	}
	return f, lab.Exited()
}

func printFair(res Result) {
	p := res.Fair
	fmt.Printf("\nTwo origins behind one proxy with %s per hour: %d rounds of %d hot requests (%d bytes) and 1 small one (%d bytes)\n",
		p.Budget, p.Rounds, p.HotPer, p.HotBytes, p.SmallBytes)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "bandwidth_share\thot served\thot redirected\thot bytes\tsmall served\tsmall redirected\tsmall bytes\twithin_share\tover_share\texhausted\t\n")
	for _, f := range res.Fairs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t\n", f.Share, f.Hot.Served, f.Hot.Redirected, f.Hot.BytesServed,
			f.Small.Served, f.Small.Redirected, f.Small.BytesServed, f.Decisions["within_share"], f.Decisions["over_share"], f.Decisions["exhausted"])
	}
	tw.Flush()
}
