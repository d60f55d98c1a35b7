package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if testing.Short() {
		t.Skip("starts CoreDNS and dnsperf")
	}
	bin, err := filepath.Abs("../../bin/coredns")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skip("no bin/coredns (make coredns)")
	}
	if _, err := exec.LookPath("dnsperf"); err != nil {
		t.Skip("no dnsperf")
	}
	p := defaultParams()
	p.CoreDNS, p.Server, p.Client, p.Port = bin, "127.0.82.1", "127.0.83.1", 5301
	p.Names, p.Rounds, p.Duration, p.Warmup, p.Idle, p.LatDur = 500, 1, time.Second, 0, time.Second, time.Second
	p.Rate, p.Rates = 2000, nil
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
	if len(back.Throughput) != 2 || back.Latency.Coral == nil || back.Latency.File == nil || back.Coral.Bytes != back.File.Bytes {
		t.Fatalf("report incomplete: %s", raw)
	}
	if !rep.HotPath.PassNoProbe || !rep.HotPath.PassNoSync || rep.HotPath.Classifications["cache"] == 0 {
		t.Errorf("hot path: %+v", rep.HotPath)
	}
	if st, err := os.Stat(filepath.Join(p.Out, "dnsperf.png")); err != nil || st.Size() == 0 {
		t.Errorf("dnsperf.png: %v", err)
	}
}
