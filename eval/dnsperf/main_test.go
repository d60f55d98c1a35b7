package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/eval/internal/evaltest"
	"github.com/miekg/dns"
)

const perfOutput = `DNS Performance Testing Tool
Version 2.10.0

[Status] Command line: dnsperf -s 127.0.80.1 -p 5300 -Q 5 -v
[Status] Sending queries (to 127.0.80.1:5300)
[Status] Started at: Sun Nov 22 02:33:26 2026
[Status] Stopping after 1.000000 seconds
> NOERROR a.files.test A 0.000464
> NOERROR b.files.test A 0.000243
> T b.files.test A
> NOERROR a.files.test A 0.001387
[Status] Testing complete (time limit)

Statistics:

  Queries sent:         4
  Queries completed:    3 (75.00%)
  Queries lost:         1 (25.00%)

  Response codes:       NOERROR 3 (100.00%)
  Average packet size:  request 30, response 96
  Run time (s):         1.000235
  Queries per second:   2.999294

  Average Latency (s):  0.000698 (min 0.000243, max 0.001387)
  Latency StdDev (s):   0.000094

`

func TestParsePerf(t *testing.T) {
	var r run
	if _, err := parsePerf(strings.NewReader(perfOutput), &r); err != nil {
		t.Fatal(err)
	}
	if r.Sent != 4 || r.Completed != 3 || r.Lost != 1 || r.Rcodes["NOERROR"] != 3 || r.ReqSize != 30 || r.RespSize != 96 {
		t.Errorf("counts: %+v", r)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(r.QPS, 2.999294) || !near(r.RunTime, 1.000235) || !near(r.AvgLatMs, 0.698) || !near(r.MaxLatMs, 1.387) {
		t.Errorf("rates: %+v", r)
	}
	if r.Timeouts != 1 || fmt.Sprint(r.latencies) != "[0.243 0.464 1.387]" {
		t.Errorf("verbose lines: %d timeouts, latencies %v", r.Timeouts, r.latencies)
	}
	if _, err := parsePerf(strings.NewReader("Queries sent: 1\n"), &r); err == nil {
		t.Error("truncated output parsed")
	}
}

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP x y
# TYPE coredns_coral_classifications_total counter
coredns_coral_classifications_total{source="cache"} 1.5e+06
coredns_coral_classifications_total{source="probe"} 1
coredns_coral_dht_messages_total{direction="out",kind="request",node="127.0.80.1:4000",type="ping"} 7
coredns_coral_dht_messages_total{direction="in",kind="request",node="127.0.80.1:4000",type="ping"} 2
coredns_dns_requests_total{server="dns://127.0.80.1:5300",zone="files.test.",x="a\"b\\"} 3
coredns_coral_sync_answers_total 0
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.sum("coredns_coral_classifications_total"); got != 1500001 {
		t.Errorf("classifications %v", got)
	}
	if got := m.sum("coredns_coral_dht_messages_total", "direction", "out", "kind", "request"); got != 7 {
		t.Errorf("out requests %v", got)
	}
	if got := m.by("coredns_coral_classifications_total", "source"); got["probe"] != 1 || got["cache"] != 1500000 {
		t.Errorf("by source %v", got)
	}
	if got := m.sum("coredns_dns_requests_total", "zone", "files.test.", "x", `a"b\`); got != 3 {
		t.Errorf("escaped label: %v", got)
	}
	if d := deltaBy(map[string]float64{"a": 1, "b": 2}, map[string]float64{"a": 1, "b": 5, "c": 1}); fmt.Sprint(d) != "map[b:3 c:1]" {
		t.Errorf("deltaBy %v", d)
	}
}

// TestStaticZoneSize checks that the generated zone parses and that its
// answers, uncompressed, are as long as coral's, for server addresses of
// several lengths; and that a server address too short to match is refused.
func TestStaticZoneSize(t *testing.T) {
	short := &bench{p: defaultParams(), server: netip.MustParseAddr("127.1.1.1")}
	if _, err := short.staticNSLabels(); err == nil {
		t.Error("127.1.1.1: coral's NS names are shorter than any static answer, yet labels were found")
	}
	for _, server := range []string{"127.0.80.1", "127.0.100.10", "127.100.200.200", "127.10.1.1"} {
		for _, explicit := range []bool{false, true} {
			p := defaultParams()
			p.Names, p.Explicit = 20, explicit
			b := &bench{p: p, server: netip.MustParseAddr(server)}
			labels, err := b.staticNSLabels()
			if err != nil {
				t.Fatalf("%s: %v", server, err)
			}
			want := b.coralModel(qname(coralZone, 7)).Len()
			zp := dns.NewZoneParser(strings.NewReader(b.staticZoneText(labels)), staticZone, "")
			m := new(dns.Msg)
			name := qname(staticZone, 7)
			m.SetQuestion(name, dns.TypeA)
			records := 0
			for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
				records++
				switch h := rr.Header(); {
				case h.Rrtype == dns.TypeA && (h.Name == name || h.Name == "*."+staticZone):
					rr.Header().Name = name
					m.Answer = append(m.Answer, rr)
				case h.Rrtype == dns.TypeNS:
					m.Ns = append(m.Ns, rr)
				}
			}
			if err := zp.Err(); err != nil {
				t.Fatalf("%s: zone: %v", server, err)
			}
			if len(m.Answer) != coralAnswers+coralNameservers || len(m.Ns) != coralNameservers {
				t.Fatalf("%s: answer %d A, %d NS", server, len(m.Answer), len(m.Ns))
			}
			if got := m.Len(); got != want {
				t.Errorf("%s explicit=%v: static answer %d bytes, coral's %d", server, explicit, got, want)
			}
		}
	}
}

// TestExperimentShort runs the whole experiment briefly, when bin/coredns
// and dnsperf are there.
func TestExperimentShort(t *testing.T) {
	bin := evaltest.LabBinary(t, "coredns", "dnsperf")
	p := defaultParams()
	p.CoreDNS, p.Server, p.Client, p.Port = bin, "127.0.82.1", "127.0.83.1", 5301
	p.Names, p.Rounds, p.Duration, p.Slices, p.Warmup, p.Idle, p.LatDur = 500, 1, 2*time.Second, 2, 0, time.Second, time.Second
	p.Rate, p.Rates = 2000, nil
	p.Quiet = 0 // plumbing, not figures: never wait for an idle machine (it cost CI up to 3 min)
	p.Out = t.TempDir()
	rep, err := experiment(context.Background(), p, "test")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(p.Out, "dnsperf.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back report
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Throughput) != 3 || back.Latency.Coral == nil || back.Latency.File == nil || back.Latency.Whoami == nil || back.Coral.Bytes != back.File.Bytes {
		t.Fatalf("report incomplete: %s", raw)
	}
	// -slices 2: every zone's run of the round is its two 1 s slices merged.
	for _, r := range back.Throughput {
		if back.Params.Slices != 2 || len(r.Slices) != 2 || r.Slices[0].Slice != 1 || r.Slices[1].Slice != 2 || r.Completed != r.Slices[0].Completed+r.Slices[1].Completed ||
			!strings.Contains(r.Slices[0].Argv, " -l 1 ") {
			t.Errorf("%s's merged run: %d slices, %d queries, slices %+v", r.Target, len(r.Slices), r.Completed, r.Slices)
		}
	}
	// whoami, the floor: measured, its answers of their own size in every
	// run, coral/whoami per round.
	if back.Whoami.Bytes == 0 || back.Whoami.Bytes >= back.Coral.Bytes || len(back.Summary.WhoamiRatios) != 1 || back.Summary.MedianWhoami <= 0 || !rep.HotPath.PassAnswers {
		t.Errorf("whoami: response %+v, throughput %+v, answers unchanged %v", back.Whoami, back.Summary, rep.HotPath.PassAnswers)
	}
	t.Logf("coral/file %.3f, coral/whoami %.3f (two 1 s slices)", back.Summary.MedianRatio, back.Summary.MedianWhoamiRatio)
	if !rep.HotPath.PassNoProbe || !rep.HotPath.PassNoSync || rep.HotPath.Classifications["cache"] == 0 {
		t.Errorf("hot path: %+v", rep.HotPath)
	}
	if st, err := os.Stat(filepath.Join(p.Out, "dnsperf.png")); err != nil || st.Size() == 0 {
		t.Errorf("dnsperf.png: %v", err)
	}
}

// TestWhoamiComplete checks the check of whoami's answer: the client's
// address and port in the additional section, nothing else.
func TestWhoamiComplete(t *testing.T) {
	client := netip.MustParseAddr("127.0.150.9")
	name := qname(whoamiZone, 3)
	good := func() *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.Response, m.Authoritative = true, true
		m.Extra = []dns.RR{
			&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET}, A: client.AsSlice()},
			&dns.SRV{Hdr: dns.RR_Header{Name: "_udp." + name, Rrtype: dns.TypeSRV, Class: dns.ClassINET}, Port: 40000, Target: "."},
		}
		return m
	}
	if err := whoamiComplete(good(), name, client); err != nil {
		t.Fatal(err)
	}
	for what, spoil := range map[string]func(*dns.Msg){
		"another client": func(m *dns.Msg) { m.Extra[0].(*dns.A).A = []byte{127, 0, 150, 10} },
		"no SRV":         func(m *dns.Msg) { m.Extra = m.Extra[:1] },
		"an answer":      func(m *dns.Msg) { m.Answer = []dns.RR{aRR(name, client, 60)} },
		"SERVFAIL":       func(m *dns.Msg) { m.Rcode = dns.RcodeServerFailure },
		"SRV over TCP":   func(m *dns.Msg) { m.Extra[1].Header().Name = "_tcp." + name },
		"another name":   func(m *dns.Msg) { m.Extra[0].Header().Name = qname(whoamiZone, 4) },
	} {
		m := good()
		spoil(m)
		if err := whoamiComplete(m, name, client); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
}

// TestWhoamiSetUp checks the whoami server block and target without running
// anything: on the next port, with the options of the other blocks; and
// that a -port whose next port would collide is refused.
func TestWhoamiSetUp(t *testing.T) {
	p := defaultParams()
	p.Server, p.Client, p.Port, p.Names = "127.0.150.1", "127.0.151.1", 5400, 10
	b, err := newBench(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if len(b.targets) != 3 || b.targets[2].name != "whoami" || b.targets[2].addr.String() != "127.0.150.1:5401" || b.targets[0].addr.String() != "127.0.150.1:5400" {
		t.Fatalf("targets %+v", b.targets)
	}
	i := strings.Index(b.corefile, "whoami.test:5401 {")
	if i < 0 {
		t.Fatalf("no whoami server block:\n%s", b.corefile)
	}
	block := b.corefile[i:]
	block = block[:strings.Index(block, "}")]
	for _, want := range []string{"bind 127.0.150.1", "whoami", "prometheus 127.0.150.1:9153", "errors"} {
		if !strings.Contains(block, want) {
			t.Errorf("whoami's block lacks %q:\n%s", want, block)
		}
	}
	if strings.Contains(block, "cache") || strings.Count(b.corefile, "whoami\n") != 1 {
		t.Errorf("whoami's block:\n%s", block)
	}
	args := strings.Join(b.dnsperfArgs(b.targets[2], time.Second, 0, false), " ")
	if !strings.Contains(args, "-s 127.0.150.1 -p 5401 ") || !strings.Contains(args, "-d "+b.targets[2].queryFile) {
		t.Errorf("dnsperf %s", args)
	}
	raw, err := os.ReadFile(b.targets[2].queryFile)
	if err != nil || !strings.HasPrefix(string(raw), "w00000.example.com.http.l2.l1.l0.whoami.test. A\n") {
		t.Errorf("whoami's queries %q %v", raw, err)
	}
	for _, port := range []int{dhtPort - 1, dhtPort, metricsPort - 1, pprofPort, 65535, 0} {
		p.Port = port
		if b2, err := newBench(p); err == nil {
			b2.close()
			t.Errorf("-port %d accepted", port)
		}
	}
}

// TestSummarizeWhoami checks issue 25's ratio from runs made up for it:
// per round coral's qps over whoami's, the median, the pass flag, and the
// printed acceptance line.
func TestSummarizeWhoami(t *testing.T) {
	qps := map[string][]float64{"coral": {900, 1000, 800}, "file": {1000, 1000, 1000}, "whoami": {1000, 1000, 1000}}
	rep := &report{Params: jsonPar{Rounds: 3, Rate: 100}, ExpectedBytes: 200, Whoami: responseShape{Bytes: 100}}
	for round := 1; round <= 3; round++ {
		for _, name := range []string{"coral", "file", "whoami"} {
			rep.Throughput = append(rep.Throughput, &run{Phase: "throughput", Round: round, Target: name, QPS: qps[name][round-1], CPUPerQuery: 1e6 / qps[name][round-1]})
		}
	}
	for _, name := range []string{"coral", "file", "whoami"} {
		rep.LatRuns = append(rep.LatRuns, &run{Phase: "latency", Target: name, Rate: 100, QPS: 100, latencies: []float64{0.1, 0.2}})
	}
	summarize(rep)
	s := rep.Summary
	if fmt.Sprint(s.WhoamiRatios) != "[0.9 1 0.8]" || s.MedianWhoamiRatio != 0.9 || !rep.PassWhoami || s.MedianWhoami != 1000 {
		t.Errorf("coral/whoami %v median %v pass %v", s.WhoamiRatios, s.MedianWhoamiRatio, rep.PassWhoami)
	}
	if fmt.Sprint(s.WhoamiCPURatios) != "[0.9 1 0.8]" || s.MedianWhoamiCPURatio != 0.9 {
		t.Errorf("CPU per query whoami/coral %v median %v", s.WhoamiCPURatios, s.MedianWhoamiCPURatio)
	}
	if rep.Latency.Whoami == nil || len(rep.Latency.Sweep) != 1 || rep.Latency.Sweep[0].Whoami == nil {
		t.Errorf("whoami's latency %+v", rep.Latency)
	}
	var out strings.Builder
	printReport(&out, rep)
	for _, want := range []string{
		"coral/whoami by round: 0.900 1.000 0.800; median 0.900 (issue 25, target ≥ 0.9: PASS)",
		"Acceptance of issue 25: coral/whoami unthrottled qps, median of 3 rounds, 0.900 ≥ 0.9: PASS",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// whoami's answers are checked against their own size, not coral's.
	for _, r := range slices.Concat(rep.Throughput, rep.LatRuns) {
		r.Completed, r.Rcodes, r.RespSize = 1, map[string]int64{"NOERROR": 1}, 200
		if r.Target == "whoami" {
			r.RespSize = 100
		}
	}
	checkHotPath(rep, nil, nil)
	if !rep.HotPath.PassAnswers {
		t.Errorf("answers: %v", rep.HotPath.Problems)
	}
	rep.Throughput[2].RespSize = 200 // a whoami answer of coral's size
	checkHotPath(rep, nil, nil)
	if rep.HotPath.PassAnswers {
		t.Error("a whoami answer of the wrong size passed")
	}
	if err := plotCDF(filepath.Join(t.TempDir(), "dnsperf.png"), rep); err != nil {
		t.Errorf("plot: %v", err)
	}

	qps["coral"] = []float64{850, 1000, 880}
	rep.Throughput = nil
	for round := 1; round <= 3; round++ {
		for _, name := range []string{"coral", "file", "whoami"} {
			rep.Throughput = append(rep.Throughput, &run{Phase: "throughput", Round: round, Target: name, QPS: qps[name][round-1]})
		}
	}
	summarize(rep)
	if rep.PassWhoami || !rep.PassRatio {
		t.Errorf("median coral/whoami %.3f: pass %v; coral/file %.3f pass %v", rep.Summary.MedianWhoamiRatio, rep.PassWhoami, rep.Summary.MedianRatio, rep.PassRatio)
	}
}

// TestSliceDuration checks -slices against -duration: whole seconds per
// slice, at least one; one slice takes -duration as it is.
func TestSliceDuration(t *testing.T) {
	for _, c := range []struct {
		duration time.Duration
		slices   int
		want     time.Duration // 0: refused
	}{
		{5 * time.Second, 5, time.Second},
		{10 * time.Second, 2, 5 * time.Second},
		{10 * time.Second, 1, 10 * time.Second},
		{1500 * time.Millisecond, 1, 1500 * time.Millisecond}, // as before -slices
		{5 * time.Second, 2, 0},                               // 2.5 s
		{3 * time.Second, 5, 0},                               // 600 ms
		{10 * time.Second, 0, 0},
		{10 * time.Second, -1, 0},
	} {
		p := defaultParams()
		p.Duration, p.Slices = c.duration, c.slices
		got, err := sliceDuration(p)
		if c.want == 0 && err == nil || c.want != 0 && (err != nil || got != c.want) {
			t.Errorf("-duration %v -slices %d: %v, %v; want %v", c.duration, c.slices, got, err, c.want)
		}
	}
}

// TestMergeSlices checks that a zone's slices merge into the run one
// dnsperf run of their total length would have reported: qps and CPU per
// query the ratios of sums, means weighted by queries.
func TestMergeSlices(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	slice := func(n int, completed int64, runTime, cpu, latMs float64) *run {
		return &run{Phase: "throughput", Round: 2, Slice: n, Target: "coral", Argv: "dnsperf -l 1", Sent: completed + 10, Completed: completed, Lost: 10,
			Rcodes: map[string]int64{"NOERROR": completed}, RespSize: 200, ReqSize: 60, RunTime: runTime, QPS: float64(completed) / runTime,
			AvgLatMs: latMs, MinLatMs: latMs / 2, MaxLatMs: latMs * 2, CorednsCPU: cpu, CPUPerQuery: 1e6 * cpu / float64(completed),
			DnsperfCPU: 0.5, OtherCPU: 0.1, Wall: runTime + 0.1, ServerRequests: float64(completed), ServerMeanUs: 10 * latMs, DHTOut: 1}
	}

	// Equal run times: 1000 and 3000 queries in 1 s each are 2000 qps.
	m := mergeSlices([]*run{slice(1, 1000, 1, 0.1, 1), slice(2, 3000, 1, 0.2, 2)})
	if !near(m.QPS, 2000) || !near(m.CPUPerQuery, 75) {
		t.Errorf("1000 and 3000 queries in 1 s each: %v qps, %v µs CPU per query; want 2000 and 0.3 s / 4000 = 75", m.QPS, m.CPUPerQuery)
	}
	// Unequal run times: 1000 queries in 1 s and 3000 in 2 s are 4000 in
	// 3 s, not the mean of 1000 and 1500 qps (1250).
	parts := []*run{slice(1, 1000, 1, 0.1, 1), slice(2, 3000, 2, 0.2, 2)}
	m = mergeSlices(parts)
	if !near(m.QPS, 4000.0/3) || !near(m.RunTime, 3) || !near(m.CPUPerQuery, 75) || !near(m.CorednsCPU, 0.3) {
		t.Errorf("1000 queries in 1 s and 3000 in 2 s: %v qps in %v s, %v µs CPU per query; want 1333.3 in 3 s, 75 µs", m.QPS, m.RunTime, m.CPUPerQuery)
	}
	if m.Completed != 4000 || m.Sent != 4020 || m.Lost != 20 || m.Rcodes["NOERROR"] != 4000 || !near(m.DnsperfCPU, 1) || !near(m.OtherCPU, 0.2) ||
		!near(m.Wall, 3.2) || m.ServerRequests != 4000 || m.DHTOut != 2 {
		t.Errorf("sums: %+v", m)
	}
	if !near(m.AvgLatMs, 1.75) || !near(m.ServerMeanUs, 17.5) || m.MinLatMs != 0.5 || m.MaxLatMs != 4 || m.RespSize != 200 || m.ReqSize != 60 {
		t.Errorf("means and extremes: mean %v ms (want (1000×1+3000×2)/4000 = 1.75), server %v µs, min %v, max %v, sizes %d/%d",
			m.AvgLatMs, m.ServerMeanUs, m.MinLatMs, m.MaxLatMs, m.ReqSize, m.RespSize)
	}
	if m.Phase != "throughput" || m.Round != 2 || m.Slice != 0 || m.Target != "coral" || m.Argv != "2 × dnsperf -l 1" || len(m.Slices) != 2 || m.Slices[1] != parts[1] {
		t.Errorf("identity: %+v", m)
	}

	// The standard deviation pooled as dnsperf computes it over all
	// responses (n−1), and the responses' latencies pooled: {1, 2, 3} and
	// {4, 6} are {1, 2, 3, 4, 6}, mean 3.2, variance 14.8/4.
	a, b := slice(1, 3, 1, 0, 2), slice(2, 2, 1, 0, 5)
	a.StdDevMs, a.latencies = 1, []float64{1, 2, 3}
	b.StdDevMs, b.latencies = math.Sqrt2, []float64{4, 6}
	m = mergeSlices([]*run{a, b})
	if !near(m.AvgLatMs, 3.2) || !near(m.StdDevMs, math.Sqrt(14.8/4)) || fmt.Sprint(m.latencies) != "[1 2 3 4 6]" {
		t.Errorf("pooled: mean %v, stddev %v, latencies %v", m.AvgLatMs, m.StdDevMs, m.latencies)
	}
}

// TestMergeOneSlice checks that without slices a run is left as it is, and
// its JSON gains no slice fields.
func TestMergeOneSlice(t *testing.T) {
	r := &run{Phase: "throughput", Round: 1, Target: "file", Completed: 1000, RunTime: 0.9, QPS: 1111, CPUPerQuery: 20}
	before := *r
	if m := mergeSlices([]*run{r}); m != r || !reflect.DeepEqual(*m, before) {
		t.Errorf("one slice: %+v, want %+v", m, before)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), `"slice`) {
		t.Errorf("JSON of an unsliced run: %s", raw)
	}
}

// TestSlicedAnswersChecked checks that the answer check looks at every
// slice, not at the merged run, whose response size is the slices' median.
func TestSlicedAnswersChecked(t *testing.T) {
	rep := &report{Params: jsonPar{Rounds: 1, Slices: 3}, ExpectedBytes: 200, Whoami: responseShape{Bytes: 100}}
	for _, name := range []string{"coral", "file", "whoami"} {
		size := 200
		if name == "whoami" {
			size = 100
		}
		var parts []*run
		for n := 1; n <= 3; n++ {
			parts = append(parts, &run{Phase: "throughput", Round: 1, Slice: n, Target: name, Completed: 10, RunTime: 1,
				Rcodes: map[string]int64{"NOERROR": 10}, RespSize: size})
		}
		rep.Throughput = append(rep.Throughput, mergeSlices(parts))
	}
	checkHotPath(rep, nil, nil)
	if !rep.HotPath.PassAnswers {
		t.Fatalf("answers: %v", rep.HotPath.Problems)
	}
	rep.Throughput[0].Slices[1].RespSize = 150 // coral lost a name server in slice 2
	rep.Throughput[0].Slices[1].After = "150 bytes, NOERROR, answer 2 A, authority 2 NS, additional 2 A, name servers a b"
	rep.Throughput[0].Slices[1].LiveNS = map[string]float64{"2": 2}
	rep.Throughput[0].Slices[1].DHTTimeouts = 3
	rep.Throughput[0] = mergeSlices(rep.Throughput[0].Slices)
	checkHotPath(rep, nil, nil)
	problems := strings.Join(rep.HotPath.Problems, "\n")
	if rep.Throughput[0].RespSize != 200 || rep.HotPath.PassAnswers || !strings.Contains(problems, "coral (round 1 slice 2") ||
		!strings.Contains(problems, "sample after the run: 150 bytes") || !strings.Contains(problems, "by level 2 2;") || !strings.Contains(problems, "3 DSHT RPCs unanswered") {
		t.Errorf("a short answer in one slice: merged size %d, pass %v, problems %v", rep.Throughput[0].RespSize, rep.HotPath.PassAnswers, rep.HotPath.Problems)
	}
}
