package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
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
	"github.com/coralcdn/coral/internal/lab/profdiff"
)

func experiment(ctx context.Context, p params, command string) (rep *report, err error) {
	wallStart := time.Now()
	if p.Rounds < 1 || p.Duration < time.Second || p.LatDur < time.Second || p.Rate < 1 || p.Clients < 1 || p.Threads < 1 || p.Queue < 1 || p.LatQueue < 1 {
		return nil, fmt.Errorf("need -rounds ≥ 1, -duration and -latduration ≥ 1s, -rate, -c, -T, -q, -latq ≥ 1")
	}
	slice, err := sliceDuration(p)
	if err != nil {
		return nil, err
	}
	if p.Idle <= 0 {
		p.Idle = p.Duration
	}
	if _, err := os.Stat(p.CoreDNS); err != nil {
		return nil, fmt.Errorf("%v: build it with `make coredns` (builds/coredns/build.sh)", err)
	}
	if p.CoreDNS, err = filepath.Abs(p.CoreDNS); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath(p.Dnsperf); err != nil {
		return nil, fmt.Errorf("%v: install Debian's dnsperf (apt-get install dnsperf)", err)
	}
	rep = &report{
		Provenance: evalrun.StartProvenance("dnsperf", evalrun.TopologyLoopback),
		Command:    command,
		Tools: tools{
			Throughput: throughputTool(p.Slices),
			Latency:    "dnsperf -Q <rate> -v (every response's latency, µs resolution, from its verbose output)",
			Metrics:    "CoreDNS's prometheus plugin, scraped before and after every run",
			CoreDNS:    evalrun.FirstLine(exec.Command(p.CoreDNS, "-version")),
			Dnsperf:    dnsperfVersion(p.Dnsperf),
		},
		Host: host{CPUs: runtime.NumCPU(), Kernel: evalrun.Kernel(), LoadAvgBefore: evalrun.LoadAvg(), GoVersion: runtime.Version()},
		Params: jsonPar{Server: fmt.Sprintf("%s:%d", p.Server, p.Port), Client: p.Client, Names: p.Names, Rounds: p.Rounds,
			Duration: p.Duration.String(), Slices: p.Slices, Warmup: p.Warmup.String(), Idle: p.Idle.String(), Clients: p.Clients,
			Threads: p.Threads, Queue: p.Queue, Rate: p.Rate, Rates: latencyRates(p), LatDur: p.LatDur.String(), LatQueue: p.LatQueue, Quiet: p.Quiet.String(),
			Explicit: p.Explicit, Proxies: 3, NameSrvrs: 2},
	}
	fmt.Printf("coral vs file and whoami under dnsperf: one %s (%s), %s, %d CPUs, load average %s\n",
		p.CoreDNS, rep.Tools.CoreDNS, rep.Tools.Dnsperf, rep.Host.CPUs, rep.Host.LoadAvgBefore)
	fmt.Printf("Command: %s\n\n", command)

	b, err := newBench(p)
	if err != nil {
		return nil, err
	}
	defer b.close()
	rep.Corefile = b.corefile
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	fmt.Printf("CoreDNS (pid %d) serves %s and %s on %v, %s on %v; DSHT nodes on %v–%v:%d (3 HTTP proxies, 2 name servers) join the coral node at %v:%d\n",
		b.coredns.Pid(), coralZone, staticZone, b.dnsAddr, whoamiZone, b.whoamiAddr(), addrPlus(b.server, 1), addrPlus(b.server, len(nodeServices)), dhtPort, b.server, dhtPort)
	m0, err := b.scrape()
	if err != nil {
		return nil, err
	}
	settleStart := time.Now()
	if err := b.settle(ctx); err != nil {
		return nil, err
	}
	fmt.Printf("Coral answers carry %d proxies and %d name servers with glue after %.1f s\n", coralAnswers, coralNameservers, time.Since(settleStart).Seconds())

	// Shapes and sizes: coral's and file's equal, or the comparison is
	// meaningless; whoami's its own, the same in every run.
	for _, t := range b.targets {
		s, r, err := b.shape(t)
		if err != nil {
			return nil, err
		}
		switch t.name {
		case "coral":
			if err := coralComplete(r); err != nil {
				return nil, err
			}
			rep.Coral = s
		case "file":
			rep.File = s
		case "whoami":
			if err := whoamiComplete(r, t.sample, b.client); err != nil {
				return nil, err
			}
			rep.Whoami = s
		}
	}
	rep.ExpectedBytes = b.expected
	fmt.Printf("Responses: coral %d bytes (%s); file %d bytes (%s); both built to be %d bytes uncompressed; whoami %d bytes (%s)\n",
		rep.Coral.Bytes, rep.Coral.Shape, rep.File.Bytes, rep.File.Shape, b.expected, rep.Whoami.Bytes, rep.Whoami.Shape)
	if rep.Coral.Bytes != rep.File.Bytes || rep.Coral.Bytes != b.expected || rep.Coral.Answer+rep.Coral.Authority+rep.Coral.Additional != rep.File.Answer+rep.File.Authority+rep.File.Additional {
		return nil, fmt.Errorf("the responses differ in size or record count:\n%s\n%s", rep.Coral.Text, rep.File.Text)
	}

	mWarm, err := b.scrape()
	if err != nil {
		return nil, err
	}
	hp := &rep.HotPath
	hp.WarmProbes = deltaBy(m0.by("coredns_coral_probes_total", "outcome"), mWarm.by("coredns_coral_probes_total", "outcome"))
	hp.WarmSources = deltaBy(m0.by("coredns_coral_classifications_total", "source"), mWarm.by("coredns_coral_classifications_total", "source"))
	fmt.Printf("Classification of %v/24 while settling: probes %s; sources %s\n", b.client, fmtMap(hp.WarmProbes), fmtMap(hp.WarmSources))
	if hp.WarmProbes["ok"] < 1 {
		return nil, fmt.Errorf("the client's /24 was not classified by a successful probe while settling (probes %s)", fmtMap(hp.WarmProbes))
	}

	if p.Warmup > 0 {
		for _, t := range b.targets {
			r, err := b.runPerf(ctx, "warmup", 0, t, p.Warmup, 0, false, true)
			if err != nil {
				return nil, err
			}
			rep.Warmup = append(rep.Warmup, r)
		}
		fmt.Printf("Warm-up: %v unthrottled per zone: coral %.0f qps, file %.0f qps, whoami %.0f qps (not counted)\n", p.Warmup, rep.Warmup[0].QPS, rep.Warmup[1].QPS, rep.Warmup[2].QPS)
	}

	// Idle: coral's background DSHT traffic with no load at all.
	fmt.Printf("Idle window: %v\n", p.Idle)
	mIdle0, err := b.scrape()
	if err != nil {
		return nil, err
	}
	idleStart := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(p.Idle):
	}
	mIdle1, err := b.scrape()
	if err != nil {
		return nil, err
	}
	hp.IdleSeconds = time.Since(idleStart).Seconds()
	out := []string{"direction", "out", "kind", "request"}
	hp.IdleDHT = mIdle1.sum("coredns_coral_dht_messages_total", out...) - mIdle0.sum("coredns_coral_dht_messages_total", out...)

	// The load: from here on no query may wait for a probe or the DSHT.
	mLoad0 := mIdle1
	loadStart := time.Now()
	if p.Slices > 1 {
		fmt.Printf("Throughput: %d rounds of %v per zone in %d interleaved slices of %v, dnsperf -c %d -T %d -q %d unthrottled\n",
			p.Rounds, p.Duration, p.Slices, slice, p.Clients, p.Threads, p.Queue)
	} else {
		fmt.Printf("Throughput: %d rounds of %v per zone, dnsperf -c %d -T %d -q %d unthrottled\n", p.Rounds, p.Duration, p.Clients, p.Threads, p.Queue)
	}
	sliceWidth := len(fmt.Sprint(p.Slices)) // of "slice 2/5" in the lines below: "%*d/%d"
	for round := 1; round <= p.Rounds; round++ {
		byTarget := map[*target][]*run{}
		for i, st := range evalrun.Interleave(b.targets, round, p.Slices) {
			// Without slices every run waits for a quiet machine, as
			// always; with slices only the round's first. The wait samples
			// at least a second, so before every slice it would add a
			// second per slice (doubling the phase with 1 s slices) and
			// pull the zones' slices apart in time, when their being close
			// together is the point: whatever the machine does during the
			// round then falls on every zone alike, and each slice's
			// other_processes_cpu_s still shows it.
			r, err := b.runPerf(ctx, "throughput", round, st.Target, slice, 0, false, p.Slices == 1 || i == 0)
			if err != nil {
				return nil, err
			}
			label := fmt.Sprintf("round %d", round)
			if p.Slices > 1 {
				r.Slice = st.Slice
				label = fmt.Sprintf("round %d slice %*d/%d", round, sliceWidth, st.Slice, p.Slices)
			}
			printThroughputRun(label, r)
			byTarget[st.Target] = append(byTarget[st.Target], r)
		}
		// The round's figures, in the round's order: with one slice, the
		// runs as they are (printed above).
		for _, t := range rotate(b.targets, round-1) {
			r := mergeSlices(byTarget[t])
			if len(r.Slices) > 0 {
				printThroughputRun(fmt.Sprintf("round %d %-*s", round, len("slice /")+2*sliceWidth, "merged"), r)
			}
			rep.Throughput = append(rep.Throughput, r)
		}
	}
	rates := latencyRates(p)
	fmt.Printf("Latency: dnsperf -Q <rate> -v -q %d, %v per zone, at %s qps\n", p.LatQueue, p.LatDur, fmtInts(rates))
	for i, qps := range rates {
		for _, t := range rotate(b.targets, i) {
			r, err := b.runPerf(ctx, "latency", 0, t, p.LatDur, qps, true, true)
			if err != nil {
				return nil, err
			}
			rep.LatRuns = append(rep.LatRuns, r)
			fmt.Printf("  %6d qps %-6s %8.0f achieved, %d responses timed, %d lost, p50 %.3f ms, p99 %.3f ms\n",
				qps, t.name, r.QPS, len(r.latencies), r.Lost, sim.Percentile(r.latencies, 50), sim.Percentile(r.latencies, 99))
		}
	}
	mLoad1, err := b.scrape()
	if err != nil {
		return nil, err
	}
	hp.Window = time.Since(loadStart).Seconds()

	if p.Profile != "" {
		sides := make(map[string]profdiff.Side)
		for _, t := range b.targets {
			path, qps, err := b.profile(ctx, t)
			if err != nil {
				return nil, err
			}
			rep.Profiles = append(rep.Profiles, path)
			sides[t.name] = profdiff.Side{Name: t.name, Path: path, Rate: qps}
		}
		// Where a coral answer's CPU goes beyond the floor's.
		c, err := profdiff.Compare(ctx, p.CoreDNS, "unthrottled", "query", sides["coral"], sides["whoami"], 30)
		if err != nil {
			return nil, err
		}
		rep.ProfileDiff = c
	}
	rep.Commands = b.commands
	rep.Host.LoadAvgAfter = evalrun.LoadAvg()

	summarize(rep)
	checkHotPath(rep, mLoad0, mLoad1)
	printReport(os.Stdout, rep)

	rep.Wall = time.Since(wallStart).Seconds()
	fmt.Printf("\nWall time %.0f s\n", rep.Wall)
	rep.Provenance.Finish()
	if err := sim.WriteJSON(filepath.Join(p.Out, p.Name+".json"), rep); err != nil {
		return nil, err
	}
	if err := plotCDF(filepath.Join(p.Out, p.Name+".png"), rep); err != nil {
		return nil, err
	}
	fmt.Printf("Wrote %s/%s.json and %[2]s.png\n", p.Out, p.Name)
	if !hp.PassNoProbe || !hp.PassNoSync || !hp.PassAnswers {
		return rep, fmt.Errorf("%w: %s", errHotPath, strings.Join(hp.Problems, "; "))
	}
	return rep, nil
}

// summarize fills in the throughput and latency results.
func summarize(rep *report) {
	s := &rep.Summary
	var coralCPU, fileCPU, whoamiCPU, coralSrv, fileSrv, whoamiSrv []float64
	byRound := map[int]map[string]*run{}
	for _, r := range rep.Throughput {
		if byRound[r.Round] == nil {
			byRound[r.Round] = map[string]*run{}
		}
		byRound[r.Round][r.Target] = r
		switch r.Target {
		case "coral":
			s.CoralQPS = append(s.CoralQPS, r.QPS)
			coralCPU, coralSrv = append(coralCPU, r.CPUPerQuery), append(coralSrv, r.ServerMeanUs)
		case "file":
			s.FileQPS = append(s.FileQPS, r.QPS)
			fileCPU, fileSrv = append(fileCPU, r.CPUPerQuery), append(fileSrv, r.ServerMeanUs)
		case "whoami":
			s.WhoamiQPS = append(s.WhoamiQPS, r.QPS)
			whoamiCPU, whoamiSrv = append(whoamiCPU, r.CPUPerQuery), append(whoamiSrv, r.ServerMeanUs)
		}
	}
	for round := 1; round <= len(byRound); round++ {
		c := byRound[round]["coral"]
		if f := byRound[round]["file"]; c != nil && f != nil && f.QPS > 0 {
			s.Ratios = append(s.Ratios, c.QPS/f.QPS)
		}
		if w := byRound[round]["whoami"]; c != nil && w != nil && w.QPS > 0 {
			s.WhoamiRatios = append(s.WhoamiRatios, c.QPS/w.QPS)
			if c.CPUPerQuery > 0 {
				s.WhoamiCPURatios = append(s.WhoamiCPURatios, w.CPUPerQuery/c.CPUPerQuery)
			}
		}
	}
	s.MedianCoral, s.MedianFile, s.MedianRatio = evalrun.Median(s.CoralQPS), evalrun.Median(s.FileQPS), evalrun.Median(s.Ratios)
	s.MedianWhoami, s.MedianWhoamiRatio = evalrun.Median(s.WhoamiQPS), evalrun.Median(s.WhoamiRatios)
	s.MedianWhoamiCPURatio = evalrun.Median(s.WhoamiCPURatios)
	s.CoralCPUPerQ, s.FileCPUPerQ, s.WhoamiCPUPerQ = evalrun.Median(coralCPU), evalrun.Median(fileCPU), evalrun.Median(whoamiCPU)
	s.CoralServerUs, s.FileServerUs, s.WhoamiServerUs = evalrun.Median(coralSrv), evalrun.Median(fileSrv), evalrun.Median(whoamiSrv)
	rep.PassRatio = s.MedianRatio >= targetRatio
	rep.PassWhoami = len(s.WhoamiRatios) > 0 && s.MedianWhoamiRatio >= whoamiRatio

	rep.Latency.Rate = rep.Params.Rate
	points := map[int]*latencyPoint{}
	for _, r := range rep.LatRuns {
		pt := points[r.Rate]
		if pt == nil {
			pt = &latencyPoint{Rate: r.Rate}
			points[r.Rate] = pt
		}
		l := latencyOf(r)
		switch r.Target {
		case "coral":
			pt.Coral = l
		case "file":
			pt.File = l
		case "whoami":
			pt.Whoami = l
		}
	}
	for _, qps := range slices.Sorted(maps.Keys(points)) {
		rep.Latency.Sweep = append(rep.Latency.Sweep, *points[qps])
	}
	if pt := points[rep.Params.Rate]; pt != nil {
		rep.Latency.Coral, rep.Latency.File, rep.Latency.Whoami = pt.Coral, pt.File, pt.Whoami
	}
	c := rep.Latency.Coral
	// The rate must have been reached (within 2 %) without loss for the p99
	// to count.
	rep.PassP99 = c != nil && rep.Latency.Rate >= targetRate && c.P99 < targetP99Ms &&
		c.AchievedQPS >= 0.98*float64(rep.Latency.Rate) && c.LossRate < 0.001
}

// sliceDuration is the length of one throughput slice, -duration/-slices:
// whole seconds, at least one. (dnsperf 2.10 takes fractional -l too; whole
// seconds keep the slices' lengths exact and their command lines as plain
// as the unsliced runs'.) With one slice -duration is taken as it is.
func sliceDuration(p params) (time.Duration, error) {
	if p.Slices < 1 {
		return 0, fmt.Errorf("-slices %d: want ≥ 1", p.Slices)
	}
	if p.Slices == 1 {
		return p.Duration, nil
	}
	d := p.Duration / time.Duration(p.Slices)
	if d < time.Second || d%time.Second != 0 || d*time.Duration(p.Slices) != p.Duration {
		return 0, fmt.Errorf("-duration %v in -slices %d is %v per slice: want a whole number of seconds, at least 1 s (e.g. -duration %v)",
			p.Duration, p.Slices, d, time.Duration(p.Slices)*max(time.Second, d.Truncate(time.Second)))
	}
	return d, nil
}

// throughputTool describes the throughput runs for the report.
func throughputTool(slices int) string {
	if slices > 1 {
		return fmt.Sprintf("dnsperf, unthrottled, each run as %d interleaved slices (queries per second: completed queries over run time, both summed over the slices)", slices)
	}
	return "dnsperf, unthrottled (queries per second from its summary)"
}

// printThroughputRun prints one line of the throughput phase as it runs.
func printThroughputRun(label string, r *run) {
	fmt.Printf("  %s %-6s %8.0f qps  (coredns %5.1f µs CPU/query, server mean %5.1f µs, other processes %.1f CPU-s)\n",
		label, r.Target, r.QPS, r.CPUPerQuery, r.ServerMeanUs, r.OtherCPU)
}

// mergeSlices is a zone's throughput run of a round made of its slices, in
// the order they ran, as one dnsperf run of their total length would have
// reported it: counts, run times, CPU seconds and metric deltas summed; qps
// and CPU per query the ratios of those sums (not means of the slices'
// ratios); means weighted by what they average over; every response's
// latency, where recorded (-v), pooled, so percentiles stay exact. One
// slice is returned as it is.
func mergeSlices(parts []*run) *run {
	if len(parts) == 1 {
		return parts[0]
	}
	first := parts[0]
	m := &run{Phase: first.Phase, Round: first.Round, Target: first.Target, Rate: first.Rate,
		Argv:       fmt.Sprintf("%d × %s", len(parts), first.Argv),
		BusyBefore: first.BusyBefore, // the only slice that can have waited
		Rcodes:     map[string]int64{}, MinLatMs: first.MinLatMs, MaxLatMs: first.MaxLatMs, Slices: parts}
	var latSum, srvSum float64
	var reqSizes, respSizes []float64
	for _, s := range parts {
		m.QuietWait += s.QuietWait
		m.Sent += s.Sent
		m.Completed += s.Completed
		m.Lost += s.Lost
		for rc, n := range s.Rcodes {
			m.Rcodes[rc] += n
		}
		m.RunTime += s.RunTime
		latSum += s.AvgLatMs * float64(s.Completed)
		m.MinLatMs, m.MaxLatMs = min(m.MinLatMs, s.MinLatMs), max(m.MaxLatMs, s.MaxLatMs)
		m.Timeouts += s.Timeouts
		m.Interrupts += s.Interrupts
		m.CorednsCPU += s.CorednsCPU
		m.DnsperfCPU += s.DnsperfCPU
		m.SelfCPU += s.SelfCPU
		m.OtherCPU += s.OtherCPU
		m.Wall += s.Wall
		m.RcvbufDrops += s.RcvbufDrops
		m.ServerRequests += s.ServerRequests
		// coredns_dns_requests_total and the duration histogram's count
		// count the same requests, so this weighs each slice's mean by its
		// count.
		srvSum += s.ServerMeanUs * s.ServerRequests
		m.DHTOut += s.DHTOut
		m.Classified += s.Classified
		m.latencies = append(m.latencies, s.latencies...)
		reqSizes, respSizes = append(reqSizes, float64(s.ReqSize)), append(respSizes, float64(s.RespSize))
	}
	if m.RunTime > 0 {
		m.QPS = float64(m.Completed) / m.RunTime
	}
	if m.Completed > 0 {
		m.AvgLatMs = latSum / float64(m.Completed)
		m.CPUPerQuery = 1e6 * m.CorednsCPU / float64(m.Completed)
	}
	if m.ServerRequests > 0 {
		m.ServerMeanUs = srvSum / m.ServerRequests
	}
	// dnsperf's sample standard deviation, pooled: each slice's sum of
	// squared deviations from the overall mean is (n−1)s² + n(mean−M)².
	if m.Completed > 1 {
		ss := 0.0
		for _, s := range parts {
			n, d := float64(s.Completed), s.AvgLatMs-m.AvgLatMs
			ss += max(n-1, 0)*s.StdDevMs*s.StdDevMs + n*d*d
		}
		m.StdDevMs = math.Sqrt(ss / float64(m.Completed-1))
	}
	// dnsperf prints its mean packet sizes in whole bytes (rounded down), so
	// no weighting of them is exact: the median over the slices. The answer
	// check (checkHotPath) looks at every slice's.
	m.ReqSize, m.RespSize = int(math.Round(evalrun.Median(reqSizes))), int(math.Round(evalrun.Median(respSizes)))
	slices.Sort(m.latencies)
	return m
}

// dnsperfRuns is every dnsperf run of rs: a merged run's slices in its
// place.
func dnsperfRuns(rs []*run) []*run {
	var out []*run
	for _, r := range rs {
		if len(r.Slices) > 0 {
			out = append(out, r.Slices...)
		} else {
			out = append(out, r)
		}
	}
	return out
}

// rotate returns ts rotated left by k: each round starts with another
// target, so that none always runs first or last.
func rotate[T any](ts []T, k int) []T {
	k %= len(ts)
	return append(slices.Clone(ts[k:]), ts[:k]...)
}

// latencyOf summarizes a paced run's per-response latencies.
func latencyOf(r *run) *latencyRun {
	l := &latencyRun{AchievedQPS: r.QPS, Sent: r.Sent, Responses: len(r.latencies), Lost: r.Lost,
		CPUPerQuery: r.CPUPerQuery, OtherCPU: r.OtherCPU, RcvbufDrops: r.RcvbufDrops, latencies: r.latencies}
	if r.Sent > 0 {
		l.LossRate = float64(r.Lost) / float64(r.Sent)
	}
	lat := r.latencies
	l.P50, l.P90, l.P99, l.P999 = sim.Percentile(lat, 50), sim.Percentile(lat, 90), sim.Percentile(lat, 99), sim.Percentile(lat, 99.9)
	if len(lat) > 0 {
		l.Max = lat[len(lat)-1]
		sum := 0.0
		for _, v := range lat {
			sum += v
		}
		l.Mean = sum / float64(len(lat))
	}
	for i := 0; i <= 100; i++ {
		l.Percentiles = append(l.Percentiles, sim.Percentile(lat, float64(i)))
	}
	return l
}

// latencyRates is the sweep, lowest first, with the acceptance rate.
func latencyRates(p params) []int {
	rates := append(slices.Clone(p.Rates), p.Rate)
	slices.Sort(rates)
	return slices.Compact(rates)
}

func fmtInts(v []int) string {
	var parts []string
	for _, x := range v {
		parts = append(parts, fmt.Sprint(x))
	}
	return strings.Join(parts, ", ")
}

// checkHotPath compares the metrics from before the first load run to after
// the last.
func checkHotPath(rep *report, before, after metrics) {
	hp := &rep.HotPath
	hp.CoralQueries = after.sum("coredns_coral_queries_total") - before.sum("coredns_coral_queries_total")
	hp.Classifications = deltaBy(before.by("coredns_coral_classifications_total", "source"), after.by("coredns_coral_classifications_total", "source"))
	hp.Probes = deltaBy(before.by("coredns_coral_probes_total", "outcome"), after.by("coredns_coral_probes_total", "outcome"))
	hp.SyncAnswers = after.sum("coredns_coral_sync_answers_total") - before.sum("coredns_coral_sync_answers_total")
	hp.Lookups = after.sum("coredns_coral_dht_lookups_total") - before.sum("coredns_coral_dht_lookups_total")
	out := []string{"direction", "out", "kind", "request"}
	hp.DHTOutByType = deltaBy(before.by("coredns_coral_dht_messages_total", "type", out...), after.by("coredns_coral_dht_messages_total", "type", out...))
	in := []string{"direction", "in", "kind", "request"}
	hp.DHTInByType = deltaBy(before.by("coredns_coral_dht_messages_total", "type", in...), after.by("coredns_coral_dht_messages_total", "type", in...))

	// Every response of every run must have been the sample's size and
	// NOERROR: a proxy or name server dropping out of coral's answers would
	// make them smaller, and the comparison meaningless. whoami's have a
	// size of their own.
	hp.PassAnswers = true
	for _, r := range dnsperfRuns(slices.Concat(rep.Throughput, rep.LatRuns)) {
		want := rep.ExpectedBytes
		if r.Target == "whoami" {
			want = rep.Whoami.Bytes
		}
		if r.RespSize != want || r.Rcodes["NOERROR"] != r.Completed {
			hp.PassAnswers = false
			which := fmt.Sprintf("round %d", r.Round)
			if r.Slice > 0 {
				which += fmt.Sprintf(" slice %d", r.Slice)
			}
			problem := fmt.Sprintf("%s run of %s (%s, rate %d): mean response %d bytes, want %d; response codes %v",
				r.Phase, r.Target, which, r.Rate, r.RespSize, want, r.Rcodes)
			if r.After != "" {
				problem += fmt.Sprintf(" (sample after the run: %s; live name servers by level %s; %.0f DSHT RPCs unanswered during the run)",
					r.After, fmtMap(r.LiveNS), r.DHTTimeouts)
			}
			hp.Problems = append(hp.Problems, problem)
		}
	}
	for _, r := range rep.Throughput {
		switch r.Target {
		case "coral":
			hp.CoralLoadSeconds += r.Wall
			hp.CoralLoadDHT += r.DHTOut
		case "file":
			hp.FileLoadSeconds += r.Wall
			hp.FileLoadDHT += r.DHTOut
		}
	}

	probes := 0.0
	for _, v := range hp.Probes {
		probes += v
	}
	notCache := 0.0
	for src, v := range hp.Classifications {
		if src != "cache" {
			notCache += v
		}
	}
	if probes != 0 {
		hp.Problems = append(hp.Problems, fmt.Sprintf("%.0f probes ran during the load (%s)", probes, fmtMap(hp.Probes)))
	}
	if notCache != 0 {
		hp.Problems = append(hp.Problems, fmt.Sprintf("%.0f classifications did not come from the cache (%s)", notCache, fmtMap(hp.Classifications)))
	}
	if hp.Classifications["cache"] != hp.CoralQueries {
		hp.Problems = append(hp.Problems, fmt.Sprintf("%.0f coral queries but %.0f classifications from the cache", hp.CoralQueries, hp.Classifications["cache"]))
	}
	hp.PassNoProbe = probes == 0 && notCache == 0 && hp.Classifications["cache"] == hp.CoralQueries
	if hp.SyncAnswers != 0 {
		hp.Problems = append(hp.Problems, fmt.Sprintf("%.0f answers waited on the DSHT synchronously", hp.SyncAnswers))
	}
	if hp.Lookups != 0 {
		hp.Problems = append(hp.Problems, fmt.Sprintf("the coral node ran %.0f DSHT lookups", hp.Lookups))
	}
	hp.PassNoSync = hp.SyncAnswers == 0 && hp.Lookups == 0
	// The sweep pings each quiet member at most once per check_interval; the
	// load must not add to that. Allow for where the sweeps fall in the
	// windows: one sweep's worth of pings (every member) per window, and
	// with slices every slice is a window of its own.
	base := max(rate(hp.IdleDHT, hp.IdleSeconds), rate(hp.FileLoadDHT, hp.FileLoadSeconds))
	slack := float64(len(nodeServices) * rep.Params.Rounds * max(1, rep.Params.Slices))
	hp.PassDHTRate = hp.CoralLoadDHT <= base*hp.CoralLoadSeconds+slack
	if !hp.PassDHTRate {
		hp.Problems = append(hp.Problems, fmt.Sprintf("the coral node sent %.0f DSHT requests in %.0f s of coral load, against %.2f/s otherwise",
			hp.CoralLoadDHT, hp.CoralLoadSeconds, base))
	}
	rep.PassHotPath = hp.PassNoProbe && hp.PassNoSync && hp.PassDHTRate && hp.PassAnswers
}

func rate(n, s float64) float64 {
	if s <= 0 {
		return 0
	}
	return n / s
}

func fmtMap(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// printReport prints the tables.
func printReport(w io.Writer, rep *report) {
	s := rep.Summary
	fmt.Fprintf(w, "\nResponses (UDP, no EDNS, as dnsperf asks; coral's and file's of the same size, whoami's its own):\n")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  zone\tbytes\tshape\tdnsperf's mean response size (throughput runs)")
	for _, x := range []struct {
		name string
		s    responseShape
	}{{"coral", rep.Coral}, {"file", rep.File}, {"whoami", rep.Whoami}} {
		var sizes []string
		for _, r := range rep.Throughput {
			if r.Target == x.name {
				sizes = append(sizes, fmt.Sprint(r.RespSize))
			}
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", x.s.Zone, x.s.Bytes, x.s.Shape, strings.Join(sizes, " "))
	}
	tw.Flush()

	per := rep.Params.Duration + " per run"
	if rep.Params.Slices > 1 {
		per += fmt.Sprintf(" in %d interleaved slices, merged", rep.Params.Slices)
	}
	fmt.Fprintf(w, "\nThroughput (dnsperf unthrottled, -c %d -T %d -q %d, %s; CPU from /proc; other = processes other than CoreDNS, dnsperf and this one):\n",
		rep.Params.Clients, rep.Params.Threads, rep.Params.Queue, per)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tzone\tqps\tcompleted\tlost\tmean lat ms\tcoredns µs CPU/q\tserver mean µs\tdnsperf CPU s\tother CPU s\tquiet wait s\t")
	for _, r := range rep.Throughput {
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%d\t%d\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t\n", r.Round, r.Target, r.QPS, r.Completed, r.Lost,
			r.AvgLatMs, r.CPUPerQuery, r.ServerMeanUs, r.DnsperfCPU, r.OtherCPU, r.QuietWait)
	}
	tw.Flush()
	fmt.Fprintf(w, "  coral/file by round: %s; median %.3f (target ≥ %.1f: %s)\n", fmtFloats(s.Ratios, "%.3f"), s.MedianRatio, targetRatio, evalrun.PassFail(rep.PassRatio))
	fmt.Fprintf(w, "  coral/whoami by round: %s; median %.3f (issue 25, target ≥ %.1f: %s); CoreDNS CPU per query whoami/coral by round %s, median %.3f\n",
		fmtFloats(s.WhoamiRatios, "%.3f"), s.MedianWhoamiRatio, whoamiRatio, evalrun.PassFail(rep.PassWhoami), fmtFloats(s.WhoamiCPURatios, "%.3f"), s.MedianWhoamiCPURatio)
	fmt.Fprintf(w, "  median qps: coral %.0f, file %.0f, whoami %.0f; median CoreDNS CPU per query: coral %.1f µs, file %.1f µs, whoami %.1f µs; server-side mean: coral %.1f µs, file %.1f µs, whoami %.1f µs\n",
		s.MedianCoral, s.MedianFile, s.MedianWhoami, s.CoralCPUPerQ, s.FileCPUPerQ, s.WhoamiCPUPerQ, s.CoralServerUs, s.FileServerUs, s.WhoamiServerUs)

	fmt.Fprintf(w, "\nLatency (dnsperf -Q <rate> -v -q %d, %s per zone and rate; every response timed by dnsperf, µs resolution):\n",
		rep.Params.LatQueue, rep.Params.LatDur)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rate\tzone\tachieved qps\tsent\tlost\tUDP rcvbuf drops\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\tcoredns µs CPU/q\tother CPU s\t")
	for _, pt := range rep.Latency.Sweep {
		for _, x := range []struct {
			name string
			l    *latencyRun
		}{{"coral", pt.Coral}, {"file", pt.File}, {"whoami", pt.Whoami}} {
			l := x.l
			if l == nil {
				continue
			}
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t\n", pt.Rate, x.name, l.AchievedQPS, l.Sent, l.Lost,
				l.RcvbufDrops, l.P50, l.P90, l.P99, l.P999, l.Max, l.CPUPerQuery, l.OtherCPU)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "  coral p99 %.3f ms at %.0f qps, loss %.4f%% (target < %.0f ms at %d qps: %s)\n",
		rep.Latency.Coral.P99, rep.Latency.Coral.AchievedQPS, 100*rep.Latency.Coral.LossRate, targetP99Ms, targetRate, evalrun.PassFail(rep.PassP99))

	hp := rep.HotPath
	fmt.Fprintf(w, "\nHot path (CoreDNS metrics, from the first load run to the last, %.0f s):\n", hp.Window)
	fmt.Fprintf(w, "  coral queries %.0f; classifications by source: %s\n", hp.CoralQueries, fmtMap(hp.Classifications))
	fmt.Fprintf(w, "  coredns_coral_probes_total: %s; coredns_coral_sync_answers_total: %.0f; DSHT lookups: %.0f\n",
		fmtMap(hp.Probes), hp.SyncAnswers, hp.Lookups)
	fmt.Fprintf(w, "  DSHT requests sent by the coral node: %s; received: %s\n", fmtMap(hp.DHTOutByType), fmtMap(hp.DHTInByType))
	fmt.Fprintf(w, "    during coral load %.0f in %.0f s (%.2f/s); during file load (coral idle) %.0f in %.0f s (%.2f/s); idle %.0f in %.0f s (%.2f/s)\n",
		hp.CoralLoadDHT, hp.CoralLoadSeconds, rate(hp.CoralLoadDHT, hp.CoralLoadSeconds),
		hp.FileLoadDHT, hp.FileLoadSeconds, rate(hp.FileLoadDHT, hp.FileLoadSeconds),
		hp.IdleDHT, hp.IdleSeconds, rate(hp.IdleDHT, hp.IdleSeconds))
	fmt.Fprintf(w, "  no probe: %s; no synchronous DSHT call: %s; DSHT traffic not above idle: %s; answers unchanged: %s\n",
		evalrun.PassFail(hp.PassNoProbe), evalrun.PassFail(hp.PassNoSync), evalrun.PassFail(hp.PassDHTRate), evalrun.PassFail(hp.PassAnswers))
	for _, pr := range hp.Problems {
		fmt.Fprintf(w, "  PROBLEM: %s\n", pr)
	}
	fmt.Fprintf(w, "\nAcceptance: qps ratio %.3f ≥ %.1f %s; coral p99 %.3f ms < %.0f ms at %d qps %s; hot path %s\n",
		s.MedianRatio, targetRatio, evalrun.PassFail(rep.PassRatio), rep.Latency.Coral.P99, targetP99Ms, rep.Latency.Rate, evalrun.PassFail(rep.PassP99), evalrun.PassFail(rep.PassHotPath))
	fmt.Fprintf(w, "Acceptance of issue 25: coral/whoami unthrottled qps, median of %d rounds, %.3f ≥ %.1f: %s\n",
		len(s.WhoamiRatios), s.MedianWhoamiRatio, whoamiRatio, evalrun.PassFail(rep.PassWhoami))
	fmt.Fprintf(w, "Load average before %s, after %s (%d CPUs: CoreDNS and dnsperf share them)\n", rep.Host.LoadAvgBefore, rep.Host.LoadAvgAfter, rep.Host.CPUs)
	fmt.Fprintf(w, "\nCommands:\n")
	for _, c := range rep.Commands {
		fmt.Fprintf(w, "  %s\n", c)
	}
	if len(rep.Profiles) > 0 {
		fmt.Fprintf(w, "CPU profiles: %s\n", strings.Join(rep.Profiles, " "))
	}
	if rep.ProfileDiff != nil {
		fmt.Fprintln(w)
		rep.ProfileDiff.Print(w)
	}
}

func fmtFloats(v []float64, f string) string {
	var parts []string
	for _, x := range v {
		parts = append(parts, fmt.Sprintf(f, x))
	}
	return strings.Join(parts, " ")
}

// profile takes a CPU profile of CoreDNS during one more unmeasured
// unthrottled run against t.
func (b *bench) profile(ctx context.Context, t *target) (string, float64, error) {
	if err := os.MkdirAll(b.p.Profile, 0o755); err != nil {
		return "", 0, err
	}
	path := filepath.Join(b.p.Profile, "dnsperf-"+t.name+".pprof")
	secs := max(1, int(b.p.Duration.Seconds())-2)
	// Wait for a quiet machine before the profile starts, not within it:
	// a profile that covered the wait would hold less CPU than its run's
	// queries took, and the differences per query would come out short.
	if _, _, err := evalrun.WaitQuiet(ctx, b.p.Quiet, b.otherCPU); err != nil {
		return "", 0, err
	}
	type result struct {
		body []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		c := http.Client{Timeout: time.Duration(secs+30) * time.Second}
		resp, err := c.Get(fmt.Sprintf("http://%v:%d/debug/pprof/profile?seconds=%d", b.server, pprofPort, secs))
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
	r, err := b.runPerf(ctx, "profile", 0, t, b.p.Duration, 0, false, false)
	res := <-done
	if err != nil {
		return "", 0, err
	}
	if res.err != nil {
		return "", 0, fmt.Errorf("CPU profile: %w", res.err)
	}
	fmt.Printf("Profile run %-5s %8.0f qps (profiled, not counted): %s\n", t.name, r.QPS, path)
	return path, r.QPS, os.WriteFile(path, res.body, 0o644)
}

func dnsperfVersion(bin string) string {
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	out2, _ := exec.Command(bin, "-H").CombinedOutput()
	for _, l := range strings.Split(string(out)+"\n"+string(out2), "\n") {
		if strings.HasPrefix(l, "Version ") {
			return "dnsperf " + strings.TrimPrefix(l, "Version ")
		}
	}
	return "dnsperf"
}
