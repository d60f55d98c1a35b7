package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/sim"
)

// disturbedCores is how much CPU other processes may use during a run, in
// CPUs, before the round is repeated.
const disturbedCores = 0.25

// installScript installs wrk and nginx (run from the repository root).
const installScript = "eval/httpbench/install-deps.sh"

// findTools resolves the binaries, installing wrk and nginx when they are
// missing, allowed, and this runs as root.
func findTools(p *params) error {
	var err error
	if _, err := os.Stat(p.Caddy); err != nil {
		return fmt.Errorf("%v: build it with `make caddy` (builds/caddy/build.sh)", err)
	}
	if p.Caddy, err = filepath.Abs(p.Caddy); err != nil {
		return err
	}
	var missing []string
	if _, err := exec.LookPath(p.Wrk); err != nil {
		missing = append(missing, p.Wrk)
	}
	if p.Nginx != "" {
		if _, err := lookNginx(p.Nginx); err != nil {
			missing = append(missing, p.Nginx)
		}
	}
	if len(missing) > 0 {
		_, serr := os.Stat(installScript)
		if !p.Install || os.Geteuid() != 0 || serr != nil {
			return fmt.Errorf("%s not found: run `sudo bash %s` (apt-get install wrk nginx), or -nginx= to leave nginx out", strings.Join(missing, " and "), installScript)
		}
		fmt.Printf("%s missing: running %s\n", strings.Join(missing, " and "), installScript)
		cmd := exec.Command("bash", installScript)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", installScript, err)
		}
	}
	if p.Wrk, err = exec.LookPath(p.Wrk); err != nil {
		return err
	}
	if p.Nginx != "" {
		if p.Nginx, err = lookNginx(p.Nginx); err != nil {
			return err
		}
	}
	return nil
}

// lookNginx finds nginx also in /usr/sbin, which a user's PATH may lack.
func lookNginx(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil && !strings.Contains(name, "/") {
		if p2, err2 := exec.LookPath(filepath.Join("/usr/sbin", name)); err2 == nil {
			return p2, nil
		}
	}
	return path, err
}

func experiment(ctx context.Context, p params, command string) (rep *report, err error) {
	wallStart := time.Now()
	if p.Rounds < 1 || p.Duration < time.Second || p.Threads < 1 || p.Conns < p.Threads || len(p.Sizes) == 0 || p.IndexObjects < 0 || p.ProxyObjects < 0 || p.ProxySettle < 0 || p.Repeat < 0 {
		return nil, errors.New("need -rounds ≥ 1, -duration ≥ 1s, -t ≥ 1, -c ≥ -t, a size, -index-objects, -proxy-objects, -proxy-settle and -repeat ≥ 0")
	}
	if err := findTools(&p); err != nil {
		return nil, err
	}
	rep = &report{
		Command: command,
		Tools: tools{
			Load:  "wrk --latency, keep-alive connections, GET with only a Host header",
			Caddy: evalrun.FirstLine(exec.Command(p.Caddy, "version")),
			Wrk:   evalrun.FirstLine(exec.Command(p.Wrk, "-v")),
		},
		Host: host{CPUs: runtime.NumCPU(), Kernel: evalrun.Kernel(), LoadAvgBefore: evalrun.LoadAvg(), GoVersion: runtime.Version()},
		Params: jsonPar{Sizes: p.Sizes, Rounds: p.Rounds, Duration: p.Duration.String(), Warmup: p.Warmup.String(),
			Threads: p.Threads, Conns: p.Conns, Repeat: p.Repeat, IndexObjects: p.IndexObjects, ProxyObjects: p.ProxyObjects, ProxySettle: p.ProxySettle.String(), Quiet: p.Quiet.String()},
	}
	if p.Nginx != "" {
		rep.Tools.Nginx = evalrun.FirstLine(exec.Command(p.Nginx, "-v"))
		rep.Params.NginxWorkers = "auto"
		if p.NginxWorkers > 0 {
			rep.Params.NginxWorkers = fmt.Sprint(p.NginxWorkers)
		}
	}
	fmt.Printf("coral_proxy vs file_server (one %s, %s)", p.Caddy, rep.Tools.Caddy)
	if p.Nginx != "" {
		fmt.Printf(" and nginx proxy_cache (%s)", rep.Tools.Nginx)
	}
	fmt.Printf(" under %s; %d CPUs, load average %s\n", rep.Tools.Wrk, rep.Host.CPUs, rep.Host.LoadAvgBefore)
	fmt.Printf("Command: %s\n\n", command)

	b, err := newBench(p)
	if err != nil {
		return nil, err
	}
	defer b.close()
	rep.Caddyfile, rep.NginxConf = b.caddyfile, b.nginxConf
	rep.Params.Origin = b.origin.addr.String()
	rep.Params.Coral = b.target("coral").addr.String()
	rep.Params.CoralHost = b.target("coral").host
	rep.Params.File = b.target("file").addr.String()
	if t := b.target("nginx"); t != nil {
		rep.Params.Nginx = t.addr.String()
	}
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	fmt.Printf("Origin on %v (this process); Caddy (pid %d): coral_proxy on %v (Host %s), file_server on %v, DSHT node on %v:%d",
		b.origin.addr, b.caddy.Pid(), b.target("coral").addr, b.target("coral").host, b.target("file").addr, b.target("coral").addr.Addr(), dhtPort)
	if t := b.target("nginx"); t != nil {
		fmt.Printf("; nginx (pid %d) on %v", b.nginx.Pid(), t.addr)
	}
	fmt.Println()

	// Warm the caches: a first request fetches; one of the next, within 5
	// s, must hit (the client may have the whole body a moment before the
	// cache commits it), and every body must be the origin's.
	for _, size := range p.Sizes {
		for _, t := range b.targets {
			if t.name != "file" {
				if _, err := get(t, "/"+sizeName(size)); err != nil {
					return nil, fmt.Errorf("warming %s %s: %w", t.name, sizeName(size), err)
				}
			}
			var s *sample
			deadline := time.Now().Add(5 * time.Second)
			for {
				if s, err = b.check(t, size, "before"); err != nil {
					return nil, err
				}
				if s.Hit || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			rep.Responses = append(rep.Responses, s)
		}
	}
	printResponses(os.Stdout, rep.Responses)
	if err := responseProblems(rep.Responses); err != nil {
		return nil, err
	}

	if p.Warmup > 0 {
		fmt.Printf("Warm-up: %v per target and size (not counted):", p.Warmup)
		for _, size := range p.Sizes {
			for _, t := range b.targets {
				r, err := b.runWrk(ctx, "warmup", 0, t, size, p.Warmup, nil)
				if err != nil {
					return nil, err
				}
				rep.Warmup = append(rep.Warmup, r)
				fmt.Printf(" %s %s %.0f/s;", t.name, sizeName(size), r.RPS)
			}
		}
		fmt.Println()
	}

	fmt.Printf("Throughput: %d rounds of %v per target and size, wrk -t %d -c %d --latency\n", p.Rounds, p.Duration, p.Threads, p.Conns)
	for round := 1; round <= p.Rounds; round++ {
		sizes := slices.Clone(p.Sizes)
		if round%2 == 0 {
			slices.Reverse(sizes)
		}
		for _, size := range sizes {
			// A round's runs of one size are repeated, up to -repeat
			// times, when other processes took CPU during any of them.
			for attempt := 0; ; attempt++ {
				var runs []*run
				worst := 0.0
				for _, t := range rotate(b.targets, round-1) {
					r, err := b.runWrk(ctx, "throughput", round, t, size, p.Duration, nil)
					if err != nil {
						return nil, err
					}
					fmt.Printf("  round %d %-4s %-5s %8.0f req/s %7.1f MiB/s  p50 %6.3f ms  p99 %6.3f ms  server %5.1f µs CPU/req  origin requests %d  other CPU %.1f s\n",
						round, sizeName(size), t.name, r.RPS, r.TransferMiBs, r.P50, r.P99, r.CPUPerRequest, r.OriginRequests, r.OtherCPU)
					runs = append(runs, r)
					worst = max(worst, r.OtherCPU/r.Wall)
				}
				if worst <= disturbedCores || attempt >= p.Repeat {
					for _, r := range runs {
						r.Disturbed = worst > disturbedCores
					}
					rep.Throughput = append(rep.Throughput, runs...)
					break
				}
				fmt.Printf("  round %d %-4s disturbed: other processes used %.2f CPUs during a run; repeating it\n", round, sizeName(size), worst)
				for _, r := range runs {
					r.Phase = "disturbed"
				}
				rep.Disturbed = append(rep.Disturbed, runs...)
			}
		}
	}

	// Still hits, still the same bytes.
	for _, size := range p.Sizes {
		for _, t := range b.targets {
			s, err := b.check(t, size, "after")
			if err != nil {
				return nil, err
			}
			rep.Responses = append(rep.Responses, s)
		}
	}

	if p.Profile != "" {
		for _, size := range p.Sizes {
			for _, name := range []string{"coral", "file"} {
				path, err := b.profile(ctx, b.target(name), size)
				if err != nil {
					return nil, err
				}
				rep.Profiles = append(rep.Profiles, path)
			}
		}
	}

	var fetched time.Time
	if p.ProxyObjects > 0 {
		fmt.Printf("Proxy memory: fetching %d distinct %d-byte objects through coral_proxy ...\n", p.ProxyObjects, objBytes)
		rep.Proxy, err = b.proxyMemory(ctx, p.ProxyObjects)
		if err != nil {
			return nil, err
		}
		fetched = time.Now()
	}
	// The index measurement runs in this process while Caddy sits idle.
	if p.IndexObjects > 0 {
		fmt.Printf("Index memory: %d objects into a diskcache.Store in this process ...\n", p.IndexObjects)
		rep.Index, err = indexMemory(ctx, p.IndexObjects)
		if err != nil {
			return nil, err
		}
	}
	if rep.Proxy != nil && p.ProxySettle > 0 {
		wait := time.Until(fetched.Add(p.ProxySettle))
		fmt.Printf("Proxy memory: waiting %.0f s more for the DSHT node's per-key load records to expire ...\n", max(wait, 0).Seconds())
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		if err := b.alive(); err != nil {
			return nil, err
		}
		heap, rss, err := b.caddyHeap()
		if err != nil {
			return nil, err
		}
		px := rep.Proxy
		px.SettledAfter = time.Since(fetched).Seconds()
		px.HeapSettled, px.RSSSettled = heap, rss
		px.SettledPerObject = float64(heap-px.HeapBefore) / float64(px.Objects)
		if p.Profile != "" {
			if px.SettledHeapProfile, err = b.saveHeapProfile("settled"); err != nil {
				return nil, err
			}
		}
	}
	rep.Commands = b.commands
	rep.Host.LoadAvgAfter = evalrun.LoadAvg()
	b.close()

	summarize(rep, b.targets)
	printReport(os.Stdout, rep)

	rep.Wall = time.Since(wallStart).Seconds()
	fmt.Printf("\nWall time %.0f s\n", rep.Wall)
	if err := sim.WriteJSON(filepath.Join(p.Out, "httpbench.json"), rep); err != nil {
		return nil, err
	}
	if err := plotBars(filepath.Join(p.Out, "httpbench.png"), rep); err != nil {
		return nil, err
	}
	fmt.Printf("Wrote %s/httpbench.json and httpbench.png\n", p.Out)
	if !rep.PassCheck {
		return rep, fmt.Errorf("%w: %s", errChecks, strings.Join(rep.Problems, "; "))
	}
	if !rep.PassRatio {
		return rep, fmt.Errorf("%w: coral_proxy below %.1f× file_server", errBelowTarget, targetRatio)
	}
	return rep, nil
}

// rotate returns ts rotated left by k.
func rotate[T any](ts []T, k int) []T {
	k %= len(ts)
	return append(slices.Clone(ts[k:]), ts[:k]...)
}

// check requests t's object of the given size and checks the body and, for
// the caches, that it was a hit.
func (b *bench) check(t *target, size int, when string) (*sample, error) {
	path := "/" + sizeName(size)
	r, err := get(t, path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", t.name, path, err)
	}
	s := &sample{When: when, Target: t.name, Size: size, response: *r}
	s.Same = r.Status == http.StatusOK && bytes.Equal(r.body, b.origin.bodies[path])
	switch t.name {
	case "coral":
		s.Cache = r.Header.Get("Cache-Status")
		s.Hit = s.Cache == `coral; hit; detail="local"`
	case "nginx":
		s.Cache = r.Header.Get("X-Cache-Status")
		s.Hit = s.Cache == "HIT"
	default:
		s.Hit = true
	}
	return s, nil
}

// responseProblems lists responses that were not hits or not the origin's
// bytes.
func responseProblems(ss []*sample) error {
	var probs []string
	for _, s := range ss {
		if !s.Hit || !s.Same {
			probs = append(probs, fmt.Sprintf("%s %s (%s): status %d, %d bytes, origin's bytes %v, cache header %q",
				s.Target, sizeName(s.Size), s.When, s.Status, s.BodyBytes, s.Same, s.Cache))
		}
	}
	if len(probs) > 0 {
		return errors.New("responses: " + strings.Join(probs, "; "))
	}
	return nil
}

// summarize fills in the per-size results and the checks.
func summarize(rep *report, targets []*target) {
	sizes := rep.Params.Sizes
	for _, size := range sizes {
		ss := &sizeSumm{Size: size, Targets: map[string]*targetSumm{}}
		byRound := map[int]map[string]*run{}
		per := map[string][]*run{}
		for _, r := range rep.Throughput {
			if r.Size != size {
				continue
			}
			if byRound[r.Round] == nil {
				byRound[r.Round] = map[string]*run{}
			}
			byRound[r.Round][r.Target] = r
			per[r.Target] = append(per[r.Target], r)
		}
		for _, t := range targets {
			runs := per[t.name]
			ts := &targetSumm{}
			var mib, p50, p99, cpu []float64
			for _, r := range runs {
				ts.RPS = append(ts.RPS, r.RPS)
				mib, p50, p99, cpu = append(mib, r.TransferMiBs), append(p50, r.P50), append(p99, r.P99), append(cpu, r.CPUPerRequest)
			}
			ts.MedianRPS, ts.MedianMiBs, ts.MedianP50, ts.MedianP99, ts.MedianCPUPerR = evalrun.Median(ts.RPS), evalrun.Median(mib), evalrun.Median(p50), evalrun.Median(p99), evalrun.Median(cpu)
			for _, s := range rep.Responses {
				if s.Target == t.name && s.Size == size && s.When == "before" {
					ts.WireBytes, ts.HeaderBytes = s.WireBytes, s.HeaderBytes
				}
			}
			ss.Targets[t.name] = ts
		}
		var coralOverNginx []float64
		for round := 1; round <= rep.Params.Rounds; round++ {
			c, f, n := byRound[round]["coral"], byRound[round]["file"], byRound[round]["nginx"]
			if c != nil && f != nil && f.RPS > 0 {
				ss.Ratios = append(ss.Ratios, c.RPS/f.RPS)
			}
			if n != nil && f != nil && f.RPS > 0 {
				ss.NginxRatios = append(ss.NginxRatios, n.RPS/f.RPS)
			}
			if n != nil && c != nil && n.RPS > 0 {
				coralOverNginx = append(coralOverNginx, c.RPS/n.RPS)
			}
		}
		ss.MedianRatio = evalrun.Median(ss.Ratios)
		if len(ss.NginxRatios) > 0 {
			ss.MedianNginxRatio, ss.CoralOverNginx = evalrun.Median(ss.NginxRatios), evalrun.Median(coralOverNginx)
		}
		ss.Pass = ss.MedianRatio >= targetRatio
		rep.Summary = append(rep.Summary, ss)
	}
	rep.PassRatio = len(rep.Summary) > 0
	for _, ss := range rep.Summary {
		rep.PassRatio = rep.PassRatio && ss.Pass
	}

	// Every measured response a hit: the origin saw nothing, coral_proxy
	// counted only hits, wrk saw no error; and the responses before and
	// after were hits of the right bytes.
	for _, r := range slices.Concat(rep.Warmup, rep.Throughput, rep.Disturbed) {
		var what []string
		if r.OriginRequests != 0 {
			what = append(what, fmt.Sprintf("the origin got %d requests", r.OriginRequests))
		}
		if n := r.ErrConnect + r.ErrRead + r.ErrWrite + r.ErrTimeout; n != 0 {
			what = append(what, fmt.Sprintf("socket errors: connect %d, read %d, write %d, timeout %d", r.ErrConnect, r.ErrRead, r.ErrWrite, r.ErrTimeout))
		}
		if r.Target == "coral" {
			hits, other := 0.0, 0.0
			for k, v := range r.CoralRequests {
				if k == "hit" {
					hits += v
				} else {
					other += v
				}
			}
			if other != 0 || hits < float64(r.Requests) || hits > float64(r.Requests)+float64(rep.Params.Conns) {
				what = append(what, fmt.Sprintf("coral_proxy counted %v for %d requests", r.CoralRequests, r.Requests))
			}
		}
		if r.Non2xx != 0 {
			what = append(what, fmt.Sprintf("%d non-2xx responses", r.Non2xx))
		}
		if r.Disturbed {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("round %d of %s %s counted although other processes used over %.2f CPUs during it (-repeat %d exhausted)",
				r.Round, r.Target, sizeName(r.Size), disturbedCores, rep.Params.Repeat))
		}
		if len(what) > 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s run of %s %s (round %d): %s", r.Phase, r.Target, sizeName(r.Size), r.Round, strings.Join(what, ", ")))
		}
	}
	if err := responseProblems(rep.Responses); err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}
	if rep.Proxy != nil && (rep.Proxy.Misses != int64(rep.Proxy.Objects) || rep.Proxy.OriginFetches != int64(rep.Proxy.Objects)) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("proxy memory: %d objects, %d misses, %d origin fetches", rep.Proxy.Objects, rep.Proxy.Misses, rep.Proxy.OriginFetches))
	}
	rep.PassCheck = len(rep.Problems) == 0
}

func fmtFloats(v []float64, f string) string {
	var parts []string
	for _, x := range v {
		parts = append(parts, fmt.Sprintf(f, x))
	}
	return strings.Join(parts, " ")
}

// printResponses prints what each target answers, counted on the wire.
func printResponses(w io.Writer, ss []*sample) {
	fmt.Fprintf(w, "\nResponses (one GET as wrk sends it, counted on the wire):\n")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  when\ttarget\tobject\tstatus\theader B\tbody B\torigin's bytes\tcache")
	for _, s := range ss {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t%v\t%s\n", s.When, s.Target, sizeName(s.Size), s.Status, s.HeaderBytes, s.BodyBytes, s.Same, s.Cache)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// printReport prints the tables.
func printReport(w io.Writer, rep *report) {
	printResponses(w, rep.Responses)
	fmt.Fprintf(w, "Throughput (wrk -t %d -c %d --latency, %s per run; CPU from /proc; other = processes other than the servers, wrk and this one):\n",
		rep.Params.Threads, rep.Params.Conns, rep.Params.Duration)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tobject\ttarget\treq/s\tMiB/s\tB/resp\tp50 ms\tp75 ms\tp90 ms\tp99 ms\tmax ms\tserver µs CPU/req\twrk CPU s\tother CPU s\torigin reqs\tquiet wait s\t")
	for _, r := range rep.Throughput {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%.1f\t%.0f\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%.0f\t\n", r.Round, sizeName(r.Size), r.Target, r.RPS,
			r.TransferMiBs, r.BytesPerResponse, r.P50, r.P75, r.P90, r.P99, r.MaxLatMs, r.CPUPerRequest, r.WrkCPU, r.OtherCPU, r.OriginRequests, r.QuietWait)
	}
	tw.Flush()

	fmt.Fprintf(w, "\nMedians over %d rounds:\n", rep.Params.Rounds)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "object\ttarget\treq/s\tvs file\tMiB/s\tp50 ms\tp99 ms\tserver µs CPU/req\tresponse B\t")
	for _, ss := range rep.Summary {
		file := ss.Targets["file"]
		for _, name := range []string{"coral", "file", "nginx"} {
			ts := ss.Targets[name]
			if ts == nil {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.3f\t%.1f\t%.3f\t%.3f\t%.1f\t%d\t\n", sizeLabel(ss.Size), name, ts.MedianRPS, ts.MedianRPS/file.MedianRPS,
				ts.MedianMiBs, ts.MedianP50, ts.MedianP99, ts.MedianCPUPerR, ts.WireBytes)
		}
	}
	tw.Flush()
	for _, ss := range rep.Summary {
		fmt.Fprintf(w, "  %s: coral/file by round %s, median %.3f (target ≥ %.1f: %s)", sizeLabel(ss.Size), fmtFloats(ss.Ratios, "%.3f"), ss.MedianRatio, targetRatio, evalrun.PassFail(ss.Pass))
		if len(ss.NginxRatios) > 0 {
			fmt.Fprintf(w, "; nginx/file %s, median %.3f; coral/nginx median %.3f", fmtFloats(ss.NginxRatios, "%.3f"), ss.MedianNginxRatio, ss.CoralOverNginx)
		}
		fmt.Fprintln(w)
	}

	if ix := rep.Index; ix != nil {
		fmt.Fprintf(w, "\nCache index memory (diskcache.Store in this process, in %s, %d objects with %d-byte keys and %d-byte bodies, heap in use after GC; %.1f s to insert):\n",
			ix.Dir, ix.Objects, ix.KeyBytes, ix.BodyBytes, ix.InsertSeconds)
		for _, s := range ix.Steps {
			fmt.Fprintf(w, "  %7d objects: +%6.2f MiB, %5.0f B/object\n", s.Objects, float64(s.HeapBytes)/(1<<20), s.PerObject)
		}
		fmt.Fprintf(w, "  %.0f B/object with all in (%.0f B/object marginal from the first quarter on); %.0f B/object after reopening (index rebuilt from disk); empty store %d B\n",
			ix.PerObject, ix.Marginal, ix.ReopenPerObject, ix.EmptyStoreBytes)
		if h := ix.Hot; h != nil {
			fmt.Fprintf(w, "  hot set after reading every object twice: %d objects' metadata in memory (estimated %.1f MiB, limit %.0f MiB), heap +%.1f MiB (%.0f B/entry)\n",
				h.Entries, float64(h.Estimated)/(1<<20), float64(h.Limit)/(1<<20), float64(h.HeapBytes)/(1<<20), h.PerEntry)
		}
	}
	if px := rep.Proxy; px != nil {
		fmt.Fprintf(w, "\nWhole proxy (Caddy's heap in use after GC, via its admin endpoint, before and after caching %d distinct %d-byte objects through coral_proxy in %.1f s: %d misses, %d origin fetches):\n",
			px.Objects, px.BodyBytes, px.Seconds, px.Misses, px.OriginFetches)
		fmt.Fprintf(w, "  heap %.1f → %.1f MiB: %.0f B/object (cache index, DSHT references and anything else kept per object); RSS %.1f → %.1f MiB (%.0f B/object)\n",
			float64(px.HeapBefore)/(1<<20), float64(px.HeapAfter)/(1<<20), px.PerObject, float64(px.RSSBefore)/(1<<20), float64(px.RSSAfter)/(1<<20), px.RSSPerObject)
		if px.SettledAfter > 0 {
			fmt.Fprintf(w, "  %.0f s after the fetch (the DSHT node prunes its per-key load records 2 min after a key's last request): heap %.1f MiB, %.0f B/object; RSS %.1f MiB\n",
				px.SettledAfter, float64(px.HeapSettled)/(1<<20), px.SettledPerObject, float64(px.RSSSettled)/(1<<20))
		}
		if px.HeapProfile != "" {
			fmt.Fprintf(w, "  heap profiles (go tool pprof -sample_index=inuse_space -top FILE): %s %s\n", px.HeapProfile, px.SettledHeapProfile)
		}
	}

	fmt.Fprintf(w, "\nChecks (every measured response a hit: no origin request, only hits in caddy_coral_requests_total, no socket error or non-2xx in any wrk run; hits of the origin's bytes before and after): %s\n", evalrun.PassFail(rep.PassCheck))
	for _, pr := range rep.Problems {
		fmt.Fprintf(w, "  PROBLEM: %s\n", pr)
	}
	if len(rep.Disturbed) > 0 {
		fmt.Fprintf(w, "Repeated %d runs that other processes disturbed (kept in the JSON as disturbed_runs, not counted)\n", len(rep.Disturbed))
	}
	for _, wn := range rep.Warnings {
		fmt.Fprintf(w, "  WARNING: %s\n", wn)
	}
	var parts []string
	for _, ss := range rep.Summary {
		parts = append(parts, fmt.Sprintf("%s %.3f", sizeLabel(ss.Size), ss.MedianRatio))
	}
	fmt.Fprintf(w, "Acceptance: coral_proxy/file_server cache-hit req/s %s, target ≥ %.1f: %s\n", strings.Join(parts, ", "), targetRatio, evalrun.PassFail(rep.PassRatio))
	fmt.Fprintf(w, "Load average before %s, after %s (%d CPUs: the servers and wrk share them)\n", rep.Host.LoadAvgBefore, rep.Host.LoadAvgAfter, rep.Host.CPUs)
	fmt.Fprintf(w, "\nCommands:\n")
	for _, c := range rep.Commands {
		fmt.Fprintf(w, "  %s\n", c)
	}
	if len(rep.Profiles) > 0 {
		fmt.Fprintf(w, "CPU profiles (go tool pprof -top FILE): %s\n", strings.Join(rep.Profiles, " "))
	}
}

// profile takes a CPU profile of Caddy during one more unmeasured run
// against t.
func (b *bench) profile(ctx context.Context, t *target, size int) (string, error) {
	if err := os.MkdirAll(b.p.Profile, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(b.p.Profile, fmt.Sprintf("httpbench-%s-%s.pprof", t.name, sizeName(size)))
	secs := max(1, int(b.p.Duration.Seconds())-2)
	type result struct {
		body []byte
		err  error
	}
	done := make(chan result, 1)
	profiling := false
	profileFrom := func() {
		profiling = true
		go func() {
			// Let wrk's connections open first.
			time.Sleep(500 * time.Millisecond)
			c := http.Client{Timeout: time.Duration(secs+30) * time.Second}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%v:%d/debug/pprof/profile?seconds=%d", t.addr.Addr(), adminPort, secs), nil)
			if err != nil {
				done <- result{err: err}
				return
			}
			resp, err := c.Do(req)
			if err != nil {
				done <- result{err: err}
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
			done <- result{body, err}
		}()
	}
	r, err := b.runWrk(ctx, "profile", 0, t, size, b.p.Duration, profileFrom)
	if err != nil {
		if profiling {
			<-done
		}
		return "", err
	}
	res := <-done
	if res.err != nil {
		return "", fmt.Errorf("CPU profile: %w", res.err)
	}
	fmt.Printf("Profile run %-5s %-4s %8.0f req/s (profiled, not counted): %s\n", t.name, sizeName(size), r.RPS, path)
	return path, os.WriteFile(path, res.body, 0o644)
}
