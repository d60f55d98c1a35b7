package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/sim"
	"github.com/coralcdn/coral/internal/lab/profdiff"
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
	if p.Baseline != "" {
		if _, err := os.Stat(p.Baseline); err != nil {
			return fmt.Errorf("-baseline: %v", err)
		}
		if p.Baseline, err = filepath.Abs(p.Baseline); err != nil {
			return err
		}
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
	if p.LargeSize > 0 && (len(p.LargeStreams) == 0 || p.LargeDuration < time.Second) {
		return nil, errors.New("the large-object section needs -large-streams and -large-duration ≥ 1s (or -large-size 0)")
	}
	if p.Rounds < 1 || p.Duration < time.Second || p.Threads < 1 || p.Conns < p.Threads || len(p.Sizes) == 0 || p.IndexObjects < 0 || p.ProxyObjects < 0 || p.ProxySettle < 0 || p.Repeat < 0 {
		return nil, errors.New("need -rounds ≥ 1, -duration ≥ 1s, -t ≥ 1, -c ≥ -t, a size, -index-objects, -proxy-objects, -proxy-settle and -repeat ≥ 0")
	}
	if err := checkSlices(p.Duration, p.Slices); err != nil {
		return nil, err
	}
	if err := findTools(&p); err != nil {
		return nil, err
	}
	rep = newReport(p, command)
	b, err := newBench(p)
	if err != nil {
		return nil, err
	}
	defer b.close()
	b.describe(rep)
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	b.printSetUp()
	if err := b.warmCaches(rep); err != nil {
		return nil, err
	}
	if err := b.warmupRuns(ctx, rep); err != nil {
		return nil, err
	}
	if err := b.throughput(ctx, rep); err != nil {
		return nil, err
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
	if err := b.large(ctx, rep); err != nil {
		return nil, err
	}
	if p.Profile != "" {
		for _, size := range p.Sizes {
			sides := make(map[string]profdiff.Side)
			for _, name := range []string{"coral", "file", "respond", "respond-head", "coral-old"} {
				if b.target(name) == nil {
					continue
				}
				path, rps, err := b.profile(ctx, b.target(name), size)
				if err != nil {
					return nil, err
				}
				rep.Profiles = append(rep.Profiles, path)
				sides[name] = profdiff.Side{Name: name, Path: path, Rate: rps}
			}
			// Where a hit's CPU goes beyond the floor's.
			c, err := profdiff.Compare(ctx, p.Caddy, sizeName(size), "request", sides["coral"], sides["respond"], 30)
			if err != nil {
				return nil, err
			}
			rep.ProfileDiffs = append(rep.ProfileDiffs, c)
			// And beyond the floor of the same response: the handler's
			// own work.
			c, err = profdiff.Compare(ctx, p.Caddy, sizeName(size), "request", sides["coral"], sides["respond-head"], 30)
			if err != nil {
				return nil, err
			}
			rep.ProfileDiffs = append(rep.ProfileDiffs, c)
		}
	}
	if err := b.memory(ctx, rep); err != nil {
		return nil, err
	}
	rep.Commands = b.commands
	rep.Host.LoadAvgAfter = evalrun.LoadAvg()
	b.close()

	summarize(rep, b.targets)
	printReport(os.Stdout, rep)

	rep.Wall = time.Since(wallStart).Seconds()
	fmt.Printf("\nWall time %.0f s\n", rep.Wall)
	rep.Provenance.Finish()
	if err := sim.WriteJSON(filepath.Join(p.Out, p.Name+".json"), rep); err != nil {
		return nil, fmt.Errorf("writing the results: %w", err)
	}
	if err := plotBars(filepath.Join(p.Out, p.Name+".png"), rep); err != nil {
		return nil, fmt.Errorf("plotting the results: %w", err)
	}
	fmt.Printf("Wrote %s/%s.json and %[2]s.png\n", p.Out, p.Name)
	if !rep.PassCheck {
		return rep, fmt.Errorf("%w: %s", errChecks, strings.Join(rep.Problems, "; "))
	}
	if !rep.PassRatio || (rep.PassTLSRatio != nil && !*rep.PassTLSRatio) {
		return rep, fmt.Errorf("%w: coral_proxy below %.1f× file_server", errBelowTarget, targetRatio)
	}
	if !rep.PassRespond || (rep.PassTLSRespond != nil && !*rep.PassTLSRespond) {
		return rep, fmt.Errorf("%w: coral_proxy below %.1f× respond", errBelowTarget, respondRatio)
	}
	if rep.PassBaseline != nil && !*rep.PassBaseline {
		return rep, fmt.Errorf("%w: coral_proxy's hits below %.1f× the baseline build's", errBelowTarget, baselineRatio)
	}
	return rep, nil
}

// newReport starts the results with the tools, the machine and the
// parameters, and prints what is measured.
func newReport(p params, command string) *report {
	rep := &report{
		Provenance: evalrun.StartProvenance("httpbench", evalrun.TopologyLoopback),
		Command:    command,
		Tools: tools{
			Load:  "wrk --latency, keep-alive connections, GET with only a Host header (over TLS: SNI and Host from the URL's name, no ALPN, HTTP/1.1)",
			Caddy: evalrun.FirstLine(exec.Command(p.Caddy, "version")),
			Wrk:   evalrun.FirstLine(exec.Command(p.Wrk, "-v")),
		},
		Host: host{CPUs: runtime.NumCPU(), Kernel: evalrun.Kernel(), LoadAvgBefore: evalrun.LoadAvg(), GoVersion: runtime.Version()},
		Params: jsonPar{Sizes: p.Sizes, Rounds: p.Rounds, Duration: p.Duration.String(), Slices: max(1, p.Slices), Warmup: p.Warmup.String(), TLS: p.TLS,
			Threads: p.Threads, Conns: p.Conns, Repeat: p.Repeat, IndexObjects: p.IndexObjects, ProxyObjects: p.ProxyObjects, ProxySettle: p.ProxySettle.String(), Quiet: p.Quiet.String()},
	}
	if p.Baseline != "" {
		rep.Tools.Baseline = p.Baseline + ": " + evalrun.FirstLine(exec.Command(p.Baseline, "version"))
	}
	if p.Nginx != "" {
		rep.Tools.Nginx = evalrun.FirstLine(exec.Command(p.Nginx, "-v"))
		rep.Params.NginxWorkers = "auto"
		if p.NginxWorkers > 0 {
			rep.Params.NginxWorkers = fmt.Sprint(p.NginxWorkers)
		}
	}
	fmt.Printf("coral_proxy vs file_server and respond (one %s, %s", p.Caddy, rep.Tools.Caddy)
	if p.TLS {
		fmt.Printf("; over HTTP and over TLS")
	}
	fmt.Printf(")")
	if p.Nginx != "" {
		fmt.Printf(" and nginx proxy_cache (%s, over HTTP)", rep.Tools.Nginx)
	}
	if p.Baseline != "" {
		fmt.Printf("; A/B of coral_proxy's hits against %s", rep.Tools.Baseline)
	}
	fmt.Printf(" under %s; %d CPUs, load average %s\n", rep.Tools.Wrk, rep.Host.CPUs, rep.Host.LoadAvgBefore)
	fmt.Printf("Command: %s\n\n", command)
	return rep
}

// describe records the set-up in the results.
func (b *bench) describe(rep *report) {
	rep.Caddyfile, rep.NginxConf, rep.BaselineCaddyfile = b.origin.elideBodies(b.caddyfile), b.nginxConf, b.baseCaddyfile
	rep.Params.Origin = b.origin.addr.String()
	rep.Params.Coral = b.target("coral").addr.String()
	rep.Params.CoralHost = b.target("coral").host
	rep.Params.File = b.target("file").addr.String()
	rep.Params.Respond = b.target("respond").addr.String()
	if t := b.target("nginx"); t != nil {
		rep.Params.Nginx = t.addr.String()
	}
	if t := b.target("coral-old"); t != nil {
		rep.Params.Baseline = t.addr.String()
	}
	if c, f := b.target("coral-tls"), b.target("file-tls"); c != nil && f != nil {
		rep.Params.CoralTLS, rep.Params.CoralTLSName = c.addr.String(), c.host
		rep.Params.FileTLS, rep.Params.FileTLSName = f.addr.String(), f.host
		if r := b.target("respond-tls"); r != nil {
			rep.Params.RespondTLS, rep.Params.RespondTLSName = r.addr.String(), r.host
		}
		if raw, err := os.ReadFile(b.wrkScript); err == nil {
			rep.WrkScript = string(raw)
		}
	}
}

// printSetUp prints where everything runs.
func (b *bench) printSetUp() {
	coral := b.target("coral")
	fmt.Printf("Origin on %v (this process); Caddy (pid %d): coral_proxy on %v (Host %s), file_server on %v, respond on %v, DSHT node on %v:%d",
		b.origin.addr, b.caddy.Pid(), coral.addr, coral.host, b.target("file").addr, b.target("respond").addr, coral.addr.Addr(), dhtPort)
	if c, f, r := b.target("coral-tls"), b.target("file-tls"), b.target("respond-tls"); c != nil && f != nil && r != nil {
		fmt.Printf("; over TLS coral_proxy %s, file_server %s and respond %s, all on %v (Caddy's local CA; wrk -s %s)",
			c.url("/"), f.url("/"), r.url("/"), c.addr.Addr(), b.wrkScript)
	}
	if t := b.target("nginx"); t != nil {
		fmt.Printf("; nginx (pid %d) on %v", b.nginx.Pid(), t.addr)
	}
	if t := b.target("coral-old"); t != nil {
		fmt.Printf("; the baseline Caddy (pid %d): coral_proxy on %v", b.base.Pid(), t.addr)
	}
	fmt.Println()
}

// warmCaches fills the caches: a first request fetches; one of the next,
// within 5 s, must hit (the client may have the whole body a moment before
// the cache commits it), and every body must be the origin's.
func (b *bench) warmCaches(rep *report) error {
	for _, size := range b.p.Sizes {
		for _, t := range b.targets {
			if t.server == "coral" || t.server == "nginx" {
				if _, err := get(t, "/"+sizeName(size)); err != nil {
					return fmt.Errorf("warming %s %s: %w", t.name, sizeName(size), err)
				}
			}
			var s *sample
			var err error
			deadline := time.Now().Add(5 * time.Second)
			for {
				if s, err = b.check(t, size, "before"); err != nil {
					return err
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
	return responseProblems(rep.Responses)
}

// warmupRuns is a short unmeasured wrk run per target and size.
func (b *bench) warmupRuns(ctx context.Context, rep *report) error {
	if b.p.Warmup <= 0 {
		return nil
	}
	fmt.Printf("Warm-up: %v per target and size (not counted):", b.p.Warmup)
	for _, size := range b.p.Sizes {
		for _, t := range b.targets {
			r, err := b.runWrk(ctx, "warmup", 0, t, size, b.p.Warmup, true, nil)
			if err != nil {
				return err
			}
			rep.Warmup = append(rep.Warmup, r)
			fmt.Printf(" %s %s %.0f/s;", t.name, sizeName(size), r.RPS)
		}
	}
	fmt.Println()
	return nil
}

// throughput runs the measured rounds: in each, for each size, one run per
// target, the targets' order rotated from round to round and the sizes'
// alternated. A round's runs of one size are repeated, up to -repeat
// times, when other processes took CPU during any of them.
func (b *bench) throughput(ctx context.Context, rep *report) error {
	p := b.p
	fmt.Printf("Throughput: %d rounds of %v per target and size, wrk -t %d -c %d --latency\n", p.Rounds, p.Duration, p.Threads, p.Conns)
	if p.Slices > 1 {
		fmt.Printf("  each run in %d slices of %v, the targets' slices interleaved; a round's req/s is its slices' requests over their time\n", p.Slices, p.Duration/time.Duration(p.Slices))
	}
	for round := 1; round <= p.Rounds; round++ {
		sizes := slices.Clone(p.Sizes)
		if round%2 == 0 {
			slices.Reverse(sizes)
		}
		for _, size := range sizes {
			for attempt := 0; ; attempt++ {
				runs, worst, err := b.throughputStep(ctx, round, size)
				if err != nil {
					return err
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
	return nil
}

// throughputStep is one round's runs of one size: one per target, in the
// round's rotated order, each of -duration; with -slices K, each run is K
// slices of -duration/K and the targets' slices are interleaved
// (evalrun.Interleave), so that a drift of the machine's speed over the
// step reaches every target alike. It returns each target's run (its
// slices merged: mergeSlices) in the round's order, and the most CPUs
// other processes used during any of them.
func (b *bench) throughputStep(ctx context.Context, round, size int) ([]*run, float64, error) {
	k := max(1, b.p.Slices)
	parts := make(map[*target][]*run, len(b.targets))
	worst := 0.0
	for i, slot := range evalrun.Interleave(b.targets, round, k) {
		t := slot.Target
		// Uncut, every run waits for a quiet machine, as it always did;
		// cut, only the step's first: the wait samples a second at least,
		// and slices a second apart would again meet the machine at
		// different speeds. A slice disturbed anyway shows in its
		// other_processes_cpu_s and repeats the step.
		r, err := b.runWrk(ctx, "throughput", round, t, size, b.p.Duration/time.Duration(k), k == 1 || i == 0, nil)
		if err != nil {
			return nil, 0, err
		}
		if k > 1 {
			fmt.Printf("    round %d %-4s %-11s slice %d/%d %8.0f req/s  server %5.1f µs CPU/req\n", round, sizeName(size), t.name, slot.Slice, k, r.RPS, r.CPUPerRequest)
		}
		parts[t] = append(parts[t], r)
		worst = max(worst, r.OtherCPU/r.Wall)
	}
	var runs []*run
	for _, slot := range evalrun.Interleave(b.targets, round, 1) {
		r := mergeSlices(parts[slot.Target])
		fmt.Printf("  round %d %-4s %-11s %8.0f req/s %7.1f MiB/s  p50 %6.3f ms  p99 %6.3f ms  server %5.1f µs CPU/req  origin requests %d  other CPU %.1f s\n",
			round, sizeName(size), slot.Target.name, r.RPS, r.TransferMiBs, r.P50, r.P99, r.CPUPerRequest, r.OriginRequests, r.OtherCPU)
		runs = append(runs, r)
	}
	return runs, worst, nil
}

// mergeSlices is one run made of the slices of a target's run (one slice:
// that run itself). Counts, times and CPU seconds are summed, so its req/s
// is the slices' requests over their run time and its CPU per request
// the slices' CPU over their requests (ratios of sums, not means of
// ratios); the mean latency is weighted by requests and the maximum is
// the slices' largest. wrk's percentiles and standard deviation cannot
// be merged without its histograms: the merged run has the median of the
// slices' (the slices themselves are kept, in Slices).
func mergeSlices(parts []*run) *run {
	if len(parts) == 1 {
		return parts[0]
	}
	first := parts[0]
	m := &run{Phase: first.Phase, Round: first.Round, Target: first.Target, Size: first.Size, Argv: first.Argv, Slices: parts}
	var p50, p75, p90, p99, stdev []float64
	latSum := 0.0
	for _, r := range parts {
		m.QuietWait += r.QuietWait
		m.BusyBefore = max(m.BusyBefore, r.BusyBefore)
		m.Requests += r.Requests
		m.RunTime += r.RunTime
		m.BytesRead += r.BytesRead
		latSum += r.AvgLatMs * float64(r.Requests)
		m.MaxLatMs = max(m.MaxLatMs, r.MaxLatMs)
		p50, p75, p90, p99 = append(p50, r.P50), append(p75, r.P75), append(p90, r.P90), append(p99, r.P99)
		stdev = append(stdev, r.StdevLatMs)
		m.ErrConnect += r.ErrConnect
		m.ErrRead += r.ErrRead
		m.ErrWrite += r.ErrWrite
		m.ErrTimeout += r.ErrTimeout
		m.Non2xx += r.Non2xx
		m.OriginRequests += r.OriginRequests
		if r.CoralRequests != nil {
			if m.CoralRequests == nil {
				m.CoralRequests = map[string]float64{}
			}
			for k, v := range r.CoralRequests {
				m.CoralRequests[k] += v
			}
		}
		m.ServerCPU += r.ServerCPU
		m.IdleServerCPU += r.IdleServerCPU
		m.WrkCPU += r.WrkCPU
		m.SelfCPU += r.SelfCPU
		m.OtherCPU += r.OtherCPU
		m.Wall += r.Wall
	}
	if m.RunTime > 0 {
		m.RPS = float64(m.Requests) / m.RunTime
		m.TransferMiBs = m.BytesRead / m.RunTime / (1 << 20)
	}
	if m.Requests > 0 {
		m.AvgLatMs = latSum / float64(m.Requests)
		m.BytesPerResponse = m.BytesRead / float64(m.Requests)
		m.CPUPerRequest = 1e6 * m.ServerCPU / float64(m.Requests)
	}
	m.P50, m.P75, m.P90, m.P99 = evalrun.Median(p50), evalrun.Median(p75), evalrun.Median(p90), evalrun.Median(p99)
	m.StdevLatMs = evalrun.Median(stdev)
	return m
}

// checkSlices refuses a -slices that does not cut -duration into whole
// seconds of at least one (wrk's -d has a resolution of a second; an
// uncut run is rounded, as it always was).
func checkSlices(d time.Duration, k int) error {
	if k < 1 {
		return fmt.Errorf("-slices %d: need at least 1", k)
	}
	if s := d / time.Duration(k); k > 1 && (s < time.Second || s%time.Second != 0) {
		return fmt.Errorf("-slices %d: -duration %v must cut into whole seconds (wrk -d), at least 1 s each", k, d)
	}
	return nil
}

// memory measures the proxy's memory per cached object and the index's,
// then the proxy's again once the DSHT node's per-key load records have
// expired.
func (b *bench) memory(ctx context.Context, rep *report) error {
	p := b.p
	var fetched time.Time
	var err error
	if p.ProxyObjects > 0 {
		fmt.Printf("Proxy memory: fetching %d distinct %d-byte objects through coral_proxy ...\n", p.ProxyObjects, objBytes)
		if rep.Proxy, err = b.proxyMemory(ctx, p.ProxyObjects); err != nil {
			return err
		}
		fetched = time.Now()
	}
	// The index measurement runs in this process while Caddy sits idle.
	if p.IndexObjects > 0 {
		fmt.Printf("Index memory: %d objects into a diskcache.Store in this process ...\n", p.IndexObjects)
		if rep.Index, err = indexMemory(ctx, p.IndexObjects); err != nil {
			return err
		}
	}
	if rep.Proxy == nil || p.ProxySettle <= 0 {
		return nil
	}
	wait := time.Until(fetched.Add(p.ProxySettle))
	fmt.Printf("Proxy memory: waiting %.0f s more for the DSHT node's per-key load records to expire ...\n", max(wait, 0).Seconds())
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
	}
	if err := b.alive(); err != nil {
		return err
	}
	heap, rss, err := b.caddyHeap()
	if err != nil {
		return err
	}
	px := rep.Proxy
	px.SettledAfter = time.Since(fetched).Seconds()
	px.HeapSettled, px.RSSSettled = heap, rss
	px.SettledPerObject = float64(heap-px.HeapBefore) / float64(px.Objects)
	if p.Profile != "" {
		if px.SettledHeapProfile, err = b.saveHeapProfile("settled"); err != nil {
			return err
		}
	}
	return nil
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
	s.Cache, s.Hit = cacheHit(t, r.Header)
	return s, nil
}

// cacheHit is a response's cache status field, for the caches, and
// whether it says the response was a hit (for the other servers, always).
func cacheHit(t *target, h http.Header) (string, bool) {
	switch t.server {
	case "coral":
		v := h.Get("Cache-Status")
		return v, v == `coral; hit; detail="local"`
	case "nginx":
		v := h.Get("X-Cache-Status")
		return v, v == "HIT"
	}
	return "", true
}

// responseProblems lists responses that were not hits or not the origin's
// bytes, and respond-head responses whose header fields are not those of
// coral's hit of the same object (the same names, and values of the same
// length but for Date and Age, whose values differ by when).
func responseProblems(ss []*sample) error {
	var probs []string
	coral := map[string]http.Header{}
	for _, s := range ss {
		if !s.Hit || !s.Same {
			probs = append(probs, fmt.Sprintf("%s %s (%s): status %d, %d bytes, origin's bytes %v, cache header %q",
				s.Target, sizeName(s.Size), s.When, s.Status, s.BodyBytes, s.Same, s.Cache))
		}
		if s.Target == "coral" {
			coral[s.When+sizeName(s.Size)] = s.Header
		}
	}
	for _, s := range ss {
		if c := coral[s.When+sizeName(s.Size)]; s.Target == "respond-head" && c != nil {
			if diff := headDiff(c, s.Header); diff != "" {
				probs = append(probs, fmt.Sprintf("respond-head %s (%s): not coral's head: %s", sizeName(s.Size), s.When, diff))
			}
		}
	}
	if len(probs) > 0 {
		return errors.New("responses: " + strings.Join(probs, "; "))
	}
	return nil
}

// headDiff says how head b's fields differ from head a's: a field one has
// and the other has not, or a value of another length (Date and Age
// aside, whose values depend on when). "" when they have the same.
func headDiff(a, b http.Header) string {
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		switch {
		case b[k] == nil:
			diff = append(diff, "no "+k)
		case k != "Date" && k != "Age" && len(strings.Join(a[k], ", ")) != len(strings.Join(b[k], ", ")):
			diff = append(diff, fmt.Sprintf("%s %q against %q", k, b[k], a[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if a[k] == nil {
			diff = append(diff, "also "+k)
		}
	}
	return strings.Join(diff, ", ")
}

// summarize fills in the per-size results and the checks.
func summarize(rep *report, targets []*target) {
	for _, size := range rep.Params.Sizes {
		rep.Summary = append(rep.Summary, summarizeSize(rep, targets, size))
	}
	rep.PassRatio = len(rep.Summary) > 0
	rep.PassRespond = len(rep.Summary) > 0
	passTLS := len(rep.Summary) > 0
	passTLSRespond := len(rep.Summary) > 0
	passBase := len(rep.Summary) > 0
	for _, ss := range rep.Summary {
		rep.PassRatio = rep.PassRatio && ss.Pass
		rep.PassRespond = rep.PassRespond && ss.PassRespond
		passTLS = passTLS && ss.PassTLS != nil && *ss.PassTLS
		passTLSRespond = passTLSRespond && ss.PassTLSRespond != nil && *ss.PassTLSRespond
		passBase = passBase && ss.PassBaseline != nil && *ss.PassBaseline
	}
	if rep.Params.TLS {
		rep.PassTLSRatio = &passTLS
		rep.PassTLSRespond = &passTLSRespond
	}
	if rep.Params.Baseline != "" {
		rep.PassBaseline = &passBase
	}

	servers := map[string]string{}
	for _, t := range targets {
		servers[t.name] = t.server
	}
	for _, r := range slices.Concat(rep.Warmup, rep.Throughput, rep.Disturbed) {
		if what := runProblems(r, servers[r.Target], rep.Params.Conns); len(what) > 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s run of %s %s (round %d): %s", r.Phase, r.Target, sizeName(r.Size), r.Round, strings.Join(what, ", ")))
		}
		if r.Disturbed {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("round %d of %s %s counted although other processes used over %.2f CPUs during it (-repeat %d exhausted)",
				r.Round, r.Target, sizeName(r.Size), disturbedCores, rep.Params.Repeat))
		}
	}
	if err := responseProblems(rep.Responses); err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}
	summarizeLarge(rep)
	if rep.Proxy != nil && (rep.Proxy.Misses != int64(rep.Proxy.Objects) || rep.Proxy.OriginFetches != int64(rep.Proxy.Objects)) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("proxy memory: %d objects, %d misses, %d origin fetches", rep.Proxy.Objects, rep.Proxy.Misses, rep.Proxy.OriginFetches))
	}
	rep.PassCheck = len(rep.Problems) == 0
}

// summarizeSize is one size's medians over rounds and its ratios: each
// round's coral/file and coral/respond, over HTTP and over TLS, and
// nginx's.
func summarizeSize(rep *report, targets []*target, size int) *sizeSumm {
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
		ts := &targetSumm{}
		var mib, p50, p99, cpu []float64
		for _, r := range per[t.name] {
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
	// ratio appends a's req/s over b's in one round, when both ran.
	ratio := func(to *[]float64, runs map[string]*run, a, b string) {
		if ra, rb := runs[a], runs[b]; ra != nil && rb != nil && rb.RPS > 0 {
			*to = append(*to, ra.RPS/rb.RPS)
		}
	}
	for round := 1; round <= rep.Params.Rounds; round++ {
		runs := byRound[round]
		ratio(&ss.Ratios, runs, "coral", "file")
		ratio(&ss.RespondRatios, runs, "coral", "respond")
		ratio(&ss.NginxRatios, runs, "nginx", "file")
		ratio(&ss.CoralNginxRatios, runs, "coral", "nginx")
		ratio(&ss.TLSRatios, runs, "coral-tls", "file-tls")
		ratio(&ss.TLSRespondRatios, runs, "coral-tls", "respond-tls")
		if c, r := runs["coral"], runs["respond"]; c != nil && r != nil && c.CPUPerRequest > 0 {
			ss.RespondCPURatios = append(ss.RespondCPURatios, r.CPUPerRequest/c.CPUPerRequest)
		}
		ratio(&ss.RespondHeadRatios, runs, "coral", "respond-head")
		if c, r := runs["coral"], runs["respond-head"]; c != nil && r != nil && c.CPUPerRequest > 0 {
			ss.RespondHeadCPURatios = append(ss.RespondHeadCPURatios, r.CPUPerRequest/c.CPUPerRequest)
		}
		ratio(&ss.BaselineRatios, runs, "coral", "coral-old")
		if n, o := runs["coral"], runs["coral-old"]; n != nil && o != nil && n.CPUPerRequest > 0 {
			ss.BaselineCPURatios = append(ss.BaselineCPURatios, o.CPUPerRequest/n.CPUPerRequest)
		}
	}
	ss.MedianRatio = evalrun.Median(ss.Ratios)
	ss.Pass = ss.MedianRatio >= targetRatio
	ss.MedianRespondRatio = evalrun.Median(ss.RespondRatios)
	ss.PassRespond = len(ss.RespondRatios) > 0 && ss.MedianRespondRatio >= respondRatio
	ss.MedianRespondCPURatio = evalrun.Median(ss.RespondCPURatios)
	if len(ss.RespondHeadRatios) > 0 {
		ss.MedianRespondHeadRatio = evalrun.Median(ss.RespondHeadRatios)
	}
	if len(ss.RespondHeadCPURatios) > 0 {
		ss.MedianRespondHeadCPU = evalrun.Median(ss.RespondHeadCPURatios)
	}
	if len(ss.NginxRatios) > 0 {
		ss.MedianNginxRatio, ss.CoralOverNginx = evalrun.Median(ss.NginxRatios), evalrun.Median(ss.CoralNginxRatios)
	}
	if rep.Params.Baseline != "" {
		ss.MedianBaselineRatio = evalrun.Median(ss.BaselineRatios)
		ss.MedianBaselineCPURatio = evalrun.Median(ss.BaselineCPURatios)
		pass := len(ss.BaselineRatios) > 0 && ss.MedianBaselineRatio >= baselineRatio
		ss.PassBaseline = &pass
	}
	if rep.Params.TLS {
		ss.MedianTLSRatio = evalrun.Median(ss.TLSRatios)
		pass := len(ss.TLSRatios) > 0 && ss.MedianTLSRatio >= targetRatio
		ss.PassTLS = &pass
		ss.MedianTLSRespondRatio = evalrun.Median(ss.TLSRespondRatios)
		passRespond := len(ss.TLSRespondRatios) > 0 && ss.MedianTLSRespondRatio >= respondRatio
		ss.PassTLSRespond = &passRespond
	}
	return ss
}

// runProblems lists what shows that not every response of a wrk run was a
// hit: the origin saw requests, coral_proxy counted other than hits, wrk
// saw errors or non-2xx responses. server is the target's (coral, file,
// respond, nginx); conns is wrk's -c, the most requests cut off at the end
// of a run (or of each of its slices).
func runProblems(r *run, server string, conns int) []string {
	var what []string
	if r.OriginRequests != 0 {
		what = append(what, fmt.Sprintf("the origin got %d requests", r.OriginRequests))
	}
	if n := r.ErrConnect + r.ErrRead + r.ErrWrite + r.ErrTimeout; n != 0 {
		what = append(what, fmt.Sprintf("socket errors: connect %d, read %d, write %d, timeout %d", r.ErrConnect, r.ErrRead, r.ErrWrite, r.ErrTimeout))
	}
	if server == "coral" {
		hits, other := 0.0, 0.0
		for k, v := range r.CoralRequests {
			if k == "hit" {
				hits += v
			} else {
				other += v
			}
		}
		// Each wrk run (each slice) can leave conns requests cut off.
		cutOff := float64(conns * max(1, len(r.Slices)))
		if other != 0 || hits < float64(r.Requests) || hits > float64(r.Requests)+cutOff {
			what = append(what, fmt.Sprintf("coral_proxy counted %v for %d requests", r.CoralRequests, r.Requests))
		}
	}
	if r.Non2xx != 0 {
		what = append(what, fmt.Sprintf("%d non-2xx responses", r.Non2xx))
	}
	return what
}

// profile takes a CPU profile of Caddy during one more unmeasured run
// against t.
func (b *bench) profile(ctx context.Context, t *target, size int) (string, float64, error) {
	if err := os.MkdirAll(b.p.Profile, 0o755); err != nil {
		return "", 0, err
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
	r, err := b.runWrk(ctx, "profile", 0, t, size, b.p.Duration, true, profileFrom)
	if err != nil {
		if profiling {
			<-done
		}
		return "", 0, err
	}
	res := <-done
	if res.err != nil {
		return "", 0, fmt.Errorf("CPU profile: %w", res.err)
	}
	fmt.Printf("Profile run %-9s %-4s %8.0f req/s (profiled, not counted): %s\n", t.name, sizeName(size), r.RPS, path)
	return path, r.RPS, os.WriteFile(path, res.body, 0o644)
}
