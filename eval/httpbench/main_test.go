package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/coralcdn/coral/eval/internal/evaltest"
)

const wrkOutput = `Running 10s test @ http://127.0.90.2:8080/1k
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.73ms    3.79ms    1.02s    87.67%
    Req/Sec    10.18k     2.69k   14.62k    70.00%
  Latency Distribution
     50%  812.00us
     75%    5.12ms
     90%    8.20ms
     99%   18.42ms
  40603 requests in 4.01s, 50.88MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 5
Requests/sec:  10122.07
Transfer/sec:     12.68MB
`

func TestParseWrk(t *testing.T) {
	var r run
	if err := parseWrk(strings.NewReader(wrkOutput), &r); err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
	if r.Requests != 40603 || !near(r.RunTime, 4.01) || !near(r.RPS, 10122.07) || !near(r.BytesRead, 50.88*(1<<20)) || !near(r.TransferMiBs, 12.68) {
		t.Errorf("totals: %+v", r)
	}
	if !near(r.P50, 0.812) || !near(r.P75, 5.12) || !near(r.P90, 8.2) || !near(r.P99, 18.42) || !near(r.AvgLatMs, 3.73) || !near(r.MaxLatMs, 1020) {
		t.Errorf("latency: %+v", r)
	}
	if r.ErrRead != 2 || r.ErrTimeout != 1 || r.ErrConnect != 0 || r.Non2xx != 5 {
		t.Errorf("errors: %+v", r)
	}
	if err := parseWrk(strings.NewReader("Requests/sec: 5\n"), &r); err == nil {
		t.Error("truncated output parsed")
	}
}

func TestSizes(t *testing.T) {
	var l sizeList
	if err := l.Set("1k 100K 1000"); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint([]int(l)) != "[1024 102400 1000]" || l.String() != "1k 100k 1000" {
		t.Errorf("sizes %v %q", []int(l), l.String())
	}
	if sizeLabel(1024) != "1 KiB" || sizeLabel(1<<20) != "1 MiB" || sizeLabel(1000) != "1000 B" {
		t.Error("labels")
	}
	for _, bad := range []string{"", "0", "x", "-1k", "100000k"} {
		if err := l.Set(bad); err == nil {
			t.Errorf("size %q accepted", bad)
		}
	}
	if got := shellJoin([]string{"wrk", "-H", "Host: a.b", "http://x/1k"}); got != "wrk -H 'Host: a.b' http://x/1k" {
		t.Errorf("shellJoin: %s", got)
	}
}

// TestGetCounts checks that get counts a response's bytes exactly.
func TestGetCounts(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Cache-Status: HIT\r\n\r\n"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 512)
		n, _ := c.Read(buf)
		got <- string(buf[:n])
		c.Write([]byte(head + "hello"))
		time.Sleep(100 * time.Millisecond) // keep the connection open, as keep-alive does
	}()
	tg := &target{name: "nginx", host: "h.test", addr: netip.MustParseAddrPort(ln.Addr().String())}
	r, err := get(tg, "/1k")
	if err != nil {
		t.Fatal(err)
	}
	if req := <-got; req != "GET /1k HTTP/1.1\r\nHost: h.test\r\n\r\n" {
		t.Errorf("request %q", req)
	}
	if r.HeaderBytes != len(head) || r.BodyBytes != 5 || r.WireBytes != len(head)+5 || string(r.body) != "hello" || r.Header.Get("X-Cache-Status") != "HIT" {
		t.Errorf("response %+v", r)
	}
}

// TestGetTLS checks that get speaks TLS with the target's name as the SNI,
// verifies the certificate against the target's roots, sends wrk's Host
// (name:port) and counts the bytes inside TLS.
func TestGetTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Host", r.Host)
		w.Header().Set("X-SNI", r.TLS.ServerName)
		w.Write([]byte("hello"))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	addr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	// httptest's certificate is for example.com, among others.
	tg := &target{name: "file-tls", server: "file", host: "example.com", tls: true, roots: roots, addr: addr}
	r, err := get(tg, "/1k")
	if err != nil {
		t.Fatal(err)
	}
	wantHost := fmt.Sprintf("example.com:%d", addr.Port())
	if r.Header.Get("X-Host") != wantHost || r.Header.Get("X-SNI") != "example.com" || string(r.body) != "hello" {
		t.Errorf("response %+v", r)
	}
	if r.WireBytes != r.HeaderBytes+r.BodyBytes || !strings.HasPrefix(r.TLS, "TLS 1.3") {
		t.Errorf("counted %d+%d=%d bytes, TLS %q", r.HeaderBytes, r.BodyBytes, r.WireBytes, r.TLS)
	}
	if tg.url("/1k") != "https://"+wantHost+"/1k" {
		t.Errorf("url %s", tg.url("/1k"))
	}
	// A name the certificate does not cover fails: nothing skips the check.
	bad := *tg
	bad.host = "files.test"
	if _, err := get(&bad, "/1k"); err == nil {
		t.Error("certificate for the wrong name accepted")
	}
}

// TestTLSSetUp checks the configuration and wrk's command line of the TLS
// targets without running anything.
func TestTLSSetUp(t *testing.T) {
	p := defaultParams()
	p.Nginx = ""
	b, err := newBench(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	c, f := b.target("coral-tls"), b.target("file-tls")
	if c == nil || f == nil || c.host != "127-0-90-1-8080.nyud.test" || c.addr.String() != "127.0.90.2:8082" || f.addr.String() != "127.0.90.2:8083" {
		t.Fatalf("TLS targets %+v %+v", c, f)
	}
	for _, want := range []string{"auto_https disable_redirects", "skip_install_trust", "https://*.nyud.test:8082 {", "https://files.test:8083 {", "tls internal", "http://:8080 {", "http://:8081 {"} {
		if !strings.Contains(b.caddyfile, want) {
			t.Errorf("Caddyfile lacks %q:\n%s", want, b.origin.elideBodies(b.caddyfile))
		}
	}
	if strings.Contains(b.caddyfile, "auto_https off") {
		t.Errorf("Caddyfile turns automatic HTTPS off, which the internal issuer needs:\n%s", b.origin.elideBodies(b.caddyfile))
	}
	args := strings.Join(b.wrkArgs(c, 1024, time.Second), " ")
	if !strings.HasSuffix(args, "-s "+b.wrkScript+" https://127-0-90-1-8080.nyud.test:8082/1k") || strings.Contains(args, "Host:") {
		t.Errorf("wrk %s", args)
	}
	if got := strings.Join(b.wrkArgs(b.target("coral"), 1024, time.Second), " "); !strings.HasSuffix(got, "-H Host: 127.0.90.1.8080.nyud.test http://127.0.90.2:8080/1k") {
		t.Errorf("wrk over HTTP %s", got)
	}
	if root, err := caddyRootPath([]string{"XDG_DATA_HOME=/d"}); err != nil || root != "/d/caddy/pki/authorities/local/root.crt" {
		t.Errorf("root %q %v", root, err)
	}

	p.TLS = false
	b2, err := newBench(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.close()
	if len(b2.targets) != 4 || !strings.Contains(b2.caddyfile, "auto_https off") || strings.Contains(b2.caddyfile, "https://") {
		t.Errorf("-tls=false: %d targets, Caddyfile:\n%s", len(b2.targets), b2.origin.elideBodies(b2.caddyfile))
	}
}

// TestIndexMemorySmall runs the index measurement on a few objects.
func TestIndexMemorySmall(t *testing.T) {
	res, err := indexMemory(context.Background(), 2000)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 4 || res.Steps[3].Objects != 2000 || res.PerObject <= 0 {
		t.Errorf("%+v", res)
	}
	t.Logf("%.0f B/object (2000 objects), %.0f after reopening", res.PerObject, res.ReopenPerObject)
}

// TestExperimentShort runs the whole experiment briefly, when bin/caddy and
// wrk are there (and nginx, which is left out otherwise).
func TestExperimentShort(t *testing.T) {
	bin := evaltest.LabBinary(t, "caddy", "wrk")
	p := defaultParams()
	p.Caddy, p.OriginAddr, p.CaddyAddr, p.NginxAddr, p.Port = bin, "127.0.92.1", "127.0.92.2", "127.0.92.3", 8180
	if _, err := lookNginx("nginx"); err != nil {
		p.Nginx = ""
	}
	p.Rounds, p.Duration, p.Warmup, p.Quiet, p.Install = 1, time.Second, 0, 0, false
	p.IndexObjects, p.ProxyObjects, p.ProxySettle = 2000, 200, 0
	// A large object above coral_proxy's slice size, so that its hits are
	// of a sliced object, in 1 s runs.
	p.LargeSize, p.LargeStreams, p.LargeDuration = 9<<20, []int{1, 2}, time.Second
	p.Out = t.TempDir()
	rep, err := experiment(context.Background(), p, "test")
	if errors.Is(err, errBelowTarget) {
		t.Logf("below target in a 1 s run: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(p.Out, "httpbench.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back report
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	want := 7 // coral, file, respond, respond-head, coral-tls, file-tls, respond-tls
	if p.Nginx != "" {
		want++
	}
	if len(back.Throughput) != want*len(p.Sizes) || len(back.Summary) != len(p.Sizes) || back.Index == nil || back.Proxy == nil || !back.PassCheck || back.PassTLSRatio == nil || back.PassTLSRespond == nil {
		t.Fatalf("report incomplete: %s", raw)
	}
	for _, ss := range rep.Summary {
		for _, name := range []string{"coral", "coral-tls", "respond", "respond-tls", "respond-head"} {
			if c := ss.Targets[name]; c == nil || c.MedianRPS <= 0 || c.WireBytes < ss.Size {
				t.Errorf("%d: %s %+v", ss.Size, name, c)
			}
		}
		if len(ss.TLSRatios) != 1 || ss.PassTLS == nil {
			t.Errorf("%d: TLS ratios %v", ss.Size, ss.TLSRatios)
		}
		if len(ss.RespondRatios) != 1 || len(ss.TLSRespondRatios) != 1 || ss.PassTLSRespond == nil || ss.MedianRespondRatio <= 0 {
			t.Errorf("%d: coral/respond %v, over TLS %v", ss.Size, ss.RespondRatios, ss.TLSRespondRatios)
		}
		if len(ss.RespondHeadRatios) != 1 || ss.MedianRespondHeadRatio <= 0 || ss.MedianRespondHeadCPU <= 0 {
			t.Errorf("%d: coral/respond-head %v, CPU %v", ss.Size, ss.RespondHeadRatios, ss.RespondHeadCPURatios)
		}
		t.Logf("%s: coral/file %.3f, over TLS %.3f; coral/respond %.3f, over TLS %.3f (1 s runs)", sizeLabel(ss.Size), ss.MedianRatio, ss.MedianTLSRatio, ss.MedianRespondRatio, ss.MedianTLSRespondRatio)
	}
	// respond answered the origin's bytes, over HTTP and over TLS (with a
	// certificate for its own name), before and after the runs.
	respondOK := map[string]int{}
	for _, s := range back.Responses {
		if (s.Target == "respond" || s.Target == "respond-tls" && strings.Contains(s.TLS, respondName)) && s.Status == http.StatusOK && s.Same {
			respondOK[s.Target]++
		}
	}
	if respondOK["respond"] != 2*len(p.Sizes) || respondOK["respond-tls"] != 2*len(p.Sizes) {
		t.Errorf("respond's checks: %v, want %d each", respondOK, 2*len(p.Sizes))
	}
	if strings.Contains(back.Caddyfile, string(rep.Responses[0].body[:64])) {
		t.Errorf("the recorded Caddyfile carries an object's bytes")
	}
	// Over TLS, every check was a hit under the one-label name, with a
	// certificate from Caddy's local CA.
	tlsHits := 0
	for _, s := range back.Responses {
		if s.Target == "coral-tls" && s.Hit && s.Same && strings.Contains(s.TLS, "*.nyud.test") {
			tlsHits++
		}
	}
	if tlsHits != 2*len(p.Sizes) {
		t.Errorf("%d coral-tls hits before and after, want %d: %+v", tlsHits, 2*len(p.Sizes), back.Responses)
	}
	if back.Params.CoralTLSName != "127-0-92-1-8180.nyud.test" || !strings.Contains(back.WrkScript, "127.0.92.2") {
		t.Errorf("TLS set-up: name %q, script %q", back.Params.CoralTLSName, back.WrkScript)
	}
	if st, err := os.Stat(filepath.Join(p.Out, "httpbench.png")); err != nil || st.Size() == 0 {
		t.Errorf("httpbench.png: %v", err)
	}
	checkLargeSection(t, back.Large, p, []string{"coral", "file"})
}

// checkLargeSection checks a run's large-object section: every target's
// checks a hit of the object's bytes before and after, a run per stream
// count and target with bytes and no origin request, and coral/file per
// stream count.
func checkLargeSection(t *testing.T, lr *largeResult, p params, targets []string) {
	t.Helper()
	if p.Nginx != "" {
		targets = append(targets, "nginx")
	}
	if lr == nil || lr.Object.Size != p.LargeSize || lr.Object.Path != "/9m" || len(lr.Summary) != len(p.LargeStreams) {
		t.Fatalf("large-object section incomplete: %+v", lr)
	}
	checks := map[string]int{}
	for _, s := range lr.Responses {
		if s.Hit && s.Same && s.BodySHA256 == lr.Object.SHA256 && s.BodyBytes == int(p.LargeSize) {
			checks[s.Target]++
		}
	}
	for _, name := range targets {
		if checks[name] != 2 {
			t.Errorf("%s: %d good checks of the large object, want 2 (before and after): %+v", name, checks[name], lr.Responses)
		}
	}
	if len(lr.Runs) != len(targets)*len(p.LargeStreams)*p.Rounds {
		t.Errorf("%d large-object runs, want %d", len(lr.Runs), len(targets)*len(p.LargeStreams)*p.Rounds)
	}
	for _, r := range lr.Runs {
		if r.Bytes == 0 || r.MBps <= 0 || r.OriginRequests != 0 || len(r.Problems) > 0 || r.ServerCPU <= 0 {
			t.Errorf("large-object run %+v", r)
		}
	}
	for _, ls := range lr.Summary {
		if len(ls.CoralOverFile) != p.Rounds || ls.MedianCoralOverFile == nil {
			t.Errorf("%d streams: coral/file %v", ls.Streams, ls.CoralOverFile)
			continue
		}
		t.Logf("large object, %d streams: coral %.0f MB/s, file %.0f MB/s, coral/file %.3f (1 s runs)", ls.Streams, ls.Targets["coral"].MedianMBps, ls.Targets["file"].MedianMBps, *ls.MedianCoralOverFile)
	}
	if lr.CaddyPeakRSS <= 0 || lr.CaddyRSSBefore <= 0 {
		t.Errorf("Caddy's memory not read: %+v", lr)
	}
}

// TestExperimentBaseline runs the A/B (-baseline) with bin/caddy on both
// sides: a second Caddy on its own address, its coral_proxy target
// coral-old measured in the same round, and new/old per size.
func TestExperimentBaseline(t *testing.T) {
	bin := evaltest.LabBinary(t, "caddy", "wrk")
	p := defaultParams()
	p.Caddy, p.Baseline, p.Nginx, p.TLS = bin, bin, "", false
	p.OriginAddr, p.CaddyAddr, p.NginxAddr, p.BaselineAddr, p.Port = "127.0.93.1", "127.0.93.2", "127.0.93.3", "127.0.93.4", 8280
	// In two interleaved slices of 1 s, as -slices 2.
	p.Rounds, p.Duration, p.Slices, p.Warmup, p.Quiet, p.Install = 1, 2*time.Second, 2, 0, 0, false
	p.IndexObjects, p.ProxyObjects = 0, 0
	p.LargeSize, p.LargeStreams, p.LargeDuration = 9<<20, []int{2}, time.Second
	p.Out = t.TempDir()
	rep, err := experiment(context.Background(), p, "test")
	if errors.Is(err, errBelowTarget) {
		t.Logf("below target in a 1 s run: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if len(rep.Throughput) != 5*len(p.Sizes) || !rep.PassCheck || rep.PassBaseline == nil || rep.PassTLSRatio != nil || rep.PassTLSRespond != nil {
		t.Fatalf("report incomplete: %+v", rep)
	}
	for _, r := range rep.Throughput {
		if len(r.Slices) != 2 || r.Requests != r.Slices[0].Requests+r.Slices[1].Requests || !strings.Contains(r.Slices[0].Argv, " -d 1s ") {
			t.Errorf("%s %s: merged run of %d slices, %d requests, slices %+v", r.Target, sizeName(r.Size), len(r.Slices), r.Requests, r.Slices)
		}
	}
	if !strings.Contains(rep.BaselineCaddyfile, "127.0.93.4") || strings.Contains(rep.BaselineCaddyfile, "127.0.93.2") || strings.Contains(rep.BaselineCaddyfile, "respond") || rep.Params.Baseline != "127.0.93.4:8280" {
		t.Errorf("baseline set-up: %q at %q", rep.BaselineCaddyfile, rep.Params.Baseline)
	}
	for _, ss := range rep.Summary {
		old := ss.Targets["coral-old"]
		if old == nil || old.MedianRPS <= 0 || len(ss.BaselineRatios) != 1 || ss.MedianBaselineRatio <= 0 || len(ss.BaselineCPURatios) != 1 || ss.PassBaseline == nil {
			t.Errorf("%d: coral-old %+v, new/old %v, CPU old/new %v", ss.Size, old, ss.BaselineRatios, ss.BaselineCPURatios)
		}
		t.Logf("%s: new/old %.3f with the same binary (1 s runs)", sizeLabel(ss.Size), ss.MedianBaselineRatio)
	}
	oldHits := 0
	for _, s := range rep.Responses {
		if s.Target == "coral-old" && s.Hit && s.Same {
			oldHits++
		}
	}
	if oldHits != 2*len(p.Sizes) {
		t.Errorf("%d coral-old hits before and after, want %d", oldHits, 2*len(p.Sizes))
	}
	// The large object is measured on the baseline too: new/old per
	// stream count.
	checkLargeSection(t, rep.Large, p, []string{"coral", "file", "coral-old"})
	for _, ls := range rep.Large.Summary {
		if len(ls.NewOverOld) != 1 || ls.MedianNewOverOld == nil || ls.Targets["coral-old"] == nil || rep.Large.BaselinePeakRSS <= 0 {
			t.Errorf("%d streams: large new/old %v, coral-old %+v", ls.Streams, ls.NewOverOld, ls.Targets["coral-old"])
		}
	}
}

func TestParseCoralRequests(t *testing.T) {
	m := parseCoralRequests(`# HELP caddy_coral_requests_total Requests
caddy_coral_requests_total{cache_status="hit",source="local"} 1.5e+06
caddy_coral_requests_total{cache_status="miss",source="origin"} 2
caddy_coral_requests_total{source="peer-l1",cache_status="miss"} 3
caddy_coral_requests_total_other{cache_status="hit"} 9
`)
	if fmt.Sprint(m) != "map[hit:1.5e+06 miss:5]" {
		t.Errorf("%v", m)
	}
}

// TestOriginBodies checks that the objects are letters and digits (so that
// the respond sites can carry them), the same in every run, and not all
// alike.
func TestOriginBodies(t *testing.T) {
	a, b := newOrigin([]int{1024, 100 << 10}), newOrigin([]int{1024, 100 << 10})
	for path, body := range a.bodies {
		if !bytes.Equal(body, b.bodies[path]) {
			t.Errorf("%s differs between two origins", path)
		}
		seen := map[byte]bool{}
		for i, c := range body {
			if !isAlnum(c) {
				t.Fatalf("%s: byte %d is %q", path, i, c)
			}
			seen[c] = true
		}
		if len(seen) != len(bodyAlphabet) {
			t.Errorf("%s uses %d of the %d letters and digits", path, len(seen), len(bodyAlphabet))
		}
	}
	if len(a.bodies["/1k"]) != 1024 || bytes.Equal(a.bodies["/1k"], a.bodies["/100k"][:1024]) {
		t.Error("the objects' sizes, or the 1 KiB object is the start of the 100 KiB one")
	}
}

// TestCaddyfileToken checks the quoting of a respond body: a backtick token
// of letters and digits, and a refusal of anything the Caddyfile would not
// carry as it is.
func TestCaddyfileToken(t *testing.T) {
	if tok, err := caddyfileToken([]byte("aZ09")); err != nil || tok != "`aZ09`" {
		t.Errorf("token %q, %v", tok, err)
	}
	for _, bad := range []string{"", "a`b", "{http.request.host}", "a b", "a\nb", "a\"b", "ä", "{$HOME}"} {
		if tok, err := caddyfileToken([]byte(bad)); err == nil {
			t.Errorf("%q quoted as %q", bad, tok)
		}
	}
}

// TestRespondSetUp checks the respond sites without running anything: their
// ports and names, that Caddy's own Caddyfile parser reads back every body
// as the origin's bytes in both sites, and that the baseline Caddy and the
// recorded Caddyfile carry no body.
func TestRespondSetUp(t *testing.T) {
	p := defaultParams()
	p.Nginx, p.Baseline = "", "/nonexistent/caddy"
	p.OriginAddr, p.CaddyAddr, p.NginxAddr, p.BaselineAddr, p.Port = "127.0.150.1", "127.0.150.2", "127.0.150.3", "127.0.150.4", 8480
	b, err := newBench(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	r, rt := b.target("respond"), b.target("respond-tls")
	if r == nil || rt == nil || r.addr.String() != "127.0.150.2:8484" || rt.addr.String() != "127.0.150.2:8485" || rt.host != respondName || !rt.tls || r.server != "respond" || rt.server != "respond" {
		t.Fatalf("respond targets %+v %+v", r, rt)
	}
	if got := strings.Join(b.wrkArgs(rt, 1024, time.Second), " "); !strings.HasSuffix(got, "-s "+b.wrkScript+" https://respond.test:8485/1k") {
		t.Errorf("wrk over TLS %s", got)
	}
	blocks, err := caddyfile.Parse("Caddyfile", []byte(b.caddyfile))
	if err != nil {
		t.Fatalf("Caddy cannot parse the Caddyfile: %v\n%s", err, b.origin.elideBodies(b.caddyfile))
	}
	// Per site: path -> body of its respond directives.
	bodies := map[string]map[string]string{}
	for _, sb := range blocks {
		for _, k := range sb.Keys {
			for _, seg := range sb.Segments {
				if seg.Directive() != "respond" {
					continue
				}
				if len(seg) != 4 || seg[3].Text != "200" {
					t.Errorf("site %s: respond with %d tokens", k.Text, len(seg))
					continue
				}
				if bodies[k.Text] == nil {
					bodies[k.Text] = map[string]string{}
				}
				bodies[k.Text][seg[1].Text] = seg[2].Text
			}
		}
	}
	for _, site := range []string{"http://:8484", "https://respond.test:8485", "http://:8486"} {
		if len(bodies[site]) != len(p.Sizes) {
			t.Errorf("site %s: respond for %v", site, bodies[site])
		}
		for _, size := range p.Sizes {
			path := "/" + sizeName(size)
			if bodies[site][path] != string(b.origin.bodies[path]) {
				t.Errorf("site %s: the body for %s is not the origin's (%d bytes)", site, path, len(bodies[site][path]))
			}
		}
	}
	if len(bodies) != 3 {
		t.Errorf("respond in sites %v, want the three respond sites only", slices.Collect(maps.Keys(bodies)))
	}
	if rh := b.target("respond-head"); rh == nil || rh.addr.String() != "127.0.150.2:8486" || rh.server != "respond" || rh.tls {
		t.Errorf("respond-head target %+v", rh)
	}
	if strings.Contains(b.baseCaddyfile, "respond") {
		t.Errorf("the baseline's Caddyfile has a respond site:\n%s", b.baseCaddyfile)
	}
	rec := b.origin.elideBodies(b.caddyfile)
	for path, body := range b.origin.bodies {
		if strings.Contains(rec, string(body[:64])) || !strings.Contains(rec, fmt.Sprintf("`<%d letters and digits: the origin's %s, sha256 ", len(body), path)) {
			t.Errorf("recorded Caddyfile, %s:\n%s", path, rec)
		}
	}

	p.TLS = false
	b2, err := newBench(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.close()
	if b2.target("respond") == nil || b2.target("respond-tls") != nil || strings.Contains(b2.caddyfile, respondName) || strings.Count(b2.caddyfile, "import "+respondSnippet) != 2 {
		t.Errorf("-tls=false: targets %d, Caddyfile:\n%s", len(b2.targets), b2.origin.elideBodies(b2.caddyfile))
	}
	// The respond-head site's port, Port+6, must be free of the admin port.
	p.Port = adminPort - 6
	if b3, err := newBench(p); err == nil {
		b3.close()
		t.Errorf("-port %d accepted: respond would take the admin port", p.Port)
	}
}

// TestSummarizeRespond checks issue 25's ratios and acceptance from runs
// made up for it: per round coral over respond, over HTTP and over TLS,
// the medians, the pass flags, the printed acceptance lines and the JSON.
func TestSummarizeRespond(t *testing.T) {
	rps := map[string][]float64{ // per round
		"coral": {900, 800, 1000}, "file": {1000, 1000, 1000}, "respond": {1000, 1000, 1000},
		"coral-tls": {950, 950, 950}, "file-tls": {1000, 1000, 1000}, "respond-tls": {1000, 1000, 1000},
		"nginx": {2000, 2000, 4000},
	}
	var targets []*target
	for _, n := range targetOrder {
		if rps[n] != nil {
			targets = append(targets, &target{name: n, server: strings.TrimSuffix(n, "-tls")})
		}
	}
	rep := &report{Params: jsonPar{Sizes: []int{1024}, Rounds: 3, TLS: true}}
	for round := 1; round <= 3; round++ {
		for _, tg := range targets {
			rep.Throughput = append(rep.Throughput, &run{Phase: "throughput", Round: round, Target: tg.name, Size: 1024, RPS: rps[tg.name][round-1], Requests: 1, CPUPerRequest: 1e6 / rps[tg.name][round-1]})
		}
	}
	summarize(rep, targets)
	ss := rep.Summary[0]
	if fmt.Sprint(ss.RespondRatios) != "[0.9 0.8 1]" || ss.MedianRespondRatio != 0.9 || !ss.PassRespond || !rep.PassRespond {
		t.Errorf("coral/respond %v median %v pass %v %v", ss.RespondRatios, ss.MedianRespondRatio, ss.PassRespond, rep.PassRespond)
	}
	if fmt.Sprint(ss.RespondCPURatios) != "[0.9 0.8 1]" || ss.MedianRespondCPURatio != 0.9 {
		t.Errorf("CPU per request respond/coral %v median %v", ss.RespondCPURatios, ss.MedianRespondCPURatio)
	}
	if fmt.Sprint(ss.TLSRespondRatios) != "[0.95 0.95 0.95]" || ss.PassTLSRespond == nil || !*ss.PassTLSRespond || rep.PassTLSRespond == nil || !*rep.PassTLSRespond {
		t.Errorf("over TLS %v pass %v", ss.TLSRespondRatios, rep.PassTLSRespond)
	}
	if fmt.Sprint(ss.CoralNginxRatios) != "[0.45 0.4 0.25]" || ss.CoralOverNginx != 0.4 {
		t.Errorf("coral/nginx %v median %v", ss.CoralNginxRatios, ss.CoralOverNginx)
	}
	var out strings.Builder
	printReport(&out, rep)
	for _, want := range []string{
		"Acceptance of issue 25: coral_proxy/respond cache-hit req/s 1 KiB 0.900, target ≥ 0.9: PASS",
		"Acceptance of issue 25 over TLS: coral_proxy/respond cache-hit req/s 1 KiB 0.950, target ≥ 0.9: PASS",
		"coral/respond 0.900 0.800 1.000, median 0.900 (issue 25, target ≥ 0.9: PASS)",
		"coral/nginx 0.450 0.400 0.250, median 0.400",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"coral_over_respond_by_round":[0.9,0.8,1]`, `"median_coral_over_respond":0.9`, `"median_coral_tls_over_respond_tls":0.95`, `"pass_coral_ge_0_9_respond":true`, `"pass_tls_coral_ge_0_9_respond":true`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("JSON lacks %s", want)
		}
	}
	if err := plotBars(filepath.Join(t.TempDir(), "httpbench.png"), rep); err != nil {
		t.Errorf("plot: %v", err)
	}

	// One round under the floor over TLS fails only that acceptance.
	rps["coral-tls"] = []float64{950, 850, 850}
	rep.Summary, rep.Throughput = nil, nil
	for round := 1; round <= 3; round++ {
		for _, tg := range targets {
			rep.Throughput = append(rep.Throughput, &run{Phase: "throughput", Round: round, Target: tg.name, Size: 1024, RPS: rps[tg.name][round-1], Requests: 1, CPUPerRequest: 1e6 / rps[tg.name][round-1]})
		}
	}
	summarize(rep, targets)
	if !rep.PassRespond || *rep.PassTLSRespond {
		t.Errorf("coral-tls/respond-tls median %.3f: pass %v over TLS %v", rep.Summary[0].MedianTLSRespondRatio, rep.PassRespond, *rep.PassTLSRespond)
	}
}

// TestCoralRequestsSince checks that coral_proxy's counts are read again
// until they cover wrk's completed requests: a request wrk has completed
// is counted when coral_proxy's handler returns, a moment later. Before
// this, the counts were read once, and a run on a busy machine failed its
// check with one hit fewer than wrk's requests.
func TestCoralRequestsSince(t *testing.T) {
	addr := netip.MustParseAddr("127.0.150.5")
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, adminPort).String())
	if err != nil {
		t.Skipf("admin port on %v: %v", addr, err)
	}
	var calls atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The last of 15 hits shows from the third read on.
		hits := 114
		if calls.Add(1) >= 3 {
			hits = 115
		}
		fmt.Fprintf(w, "caddy_coral_requests_total{cache_status=\"hit\",source=\"local\"} %d\n", hits)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	b := &bench{}
	tg := &target{name: "coral", server: "coral", addr: netip.AddrPortFrom(addr, 8080)}
	m0 := map[string]float64{"hit": 100}
	got, err := b.coralRequestsSince(tg, m0, 15, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got["hit"] != 15 || calls.Load() != 3 {
		t.Errorf("counts %v after %d reads, want 15 hits after 3", got, calls.Load())
	}
	if what := runProblems(&run{Requests: 15, CoralRequests: got}, "coral", 32); len(what) != 0 {
		t.Errorf("problems %v", what)
	}
	// A count that stays short comes back as it is, and the check says so.
	calls.Store(-1000)
	got, err = b.coralRequestsSince(tg, m0, 15, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got["hit"] != 14 || len(runProblems(&run{Requests: 15, CoralRequests: got}, "coral", 32)) != 1 {
		t.Errorf("short count: %v", got)
	}
}

// A run cut into slices merges into ratios of sums: 1000 requests in 1 s,
// 1000 in 3 s and 2000 in 2 s are 4000 in 6 s, 666.7 req/s, where the
// mean of the slices' req/s would be 777.8.
func TestMergeSlices(t *testing.T) {
	one := &run{Target: "coral", Requests: 1000, RunTime: 1, RPS: 1000}
	if got := mergeSlices([]*run{one}); got != one {
		t.Fatalf("one slice: got a new run %+v, want the run itself", got)
	}
	parts := []*run{
		{Phase: "throughput", Round: 2, Target: "coral", Size: 1024, Requests: 1000, RunTime: 1, RPS: 1000, BytesRead: 1e6,
			AvgLatMs: 1, MaxLatMs: 9, P50: 1, P99: 5, ServerCPU: 0.02, Wall: 1.1, OtherCPU: 0.1, OriginRequests: 0,
			CoralRequests: map[string]float64{"hit": 1010}, ErrRead: 1},
		{Phase: "throughput", Round: 2, Target: "coral", Size: 1024, Requests: 1000, RunTime: 3, RPS: 333.3, BytesRead: 1e6,
			AvgLatMs: 3, MaxLatMs: 4, P50: 3, P99: 7, ServerCPU: 0.06, Wall: 3.1, OtherCPU: 0.2, OriginRequests: 2,
			CoralRequests: map[string]float64{"hit": 1020, "miss": 2}, Non2xx: 3},
		{Phase: "throughput", Round: 2, Target: "coral", Size: 1024, Requests: 2000, RunTime: 2, RPS: 1000, BytesRead: 2e6,
			AvgLatMs: 2, MaxLatMs: 6, P50: 2, P99: 6, ServerCPU: 0.04, Wall: 2.1, OtherCPU: 0.3},
	}
	m := mergeSlices(parts)
	if m.Requests != 4000 || m.RunTime != 6 || m.RPS != 4000.0/6 {
		t.Errorf("requests %d in %v s at %v req/s, want 4000 in 6 s at %v", m.Requests, m.RunTime, m.RPS, 4000.0/6)
	}
	if want := 1e6 * 0.12 / 4000; math.Abs(m.CPUPerRequest-want) > 1e-9 {
		t.Errorf("CPU per request %v µs, want %v (sum of CPU over sum of requests)", m.CPUPerRequest, want)
	}
	if want := (1*1000 + 3*1000 + 2*2000) / 4000.0; m.AvgLatMs != want || m.MaxLatMs != 9 || m.P50 != 2 || m.P99 != 6 {
		t.Errorf("latency mean %v max %v p50 %v p99 %v, want %v, 9, 2 (median), 6 (median)", m.AvgLatMs, m.MaxLatMs, m.P50, m.P99, want)
	}
	if m.CoralRequests["hit"] != 2030 || m.CoralRequests["miss"] != 2 || m.OriginRequests != 2 || m.ErrRead != 1 || m.Non2xx != 3 {
		t.Errorf("counts: coral %v, origin %d, read errors %d, non-2xx %d", m.CoralRequests, m.OriginRequests, m.ErrRead, m.Non2xx)
	}
	if math.Abs(m.OtherCPU-0.6) > 1e-9 || math.Abs(m.Wall-6.3) > 1e-9 || len(m.Slices) != 3 || m.Round != 2 || m.Target != "coral" || m.Size != 1024 {
		t.Errorf("merged run %+v", m)
	}
	// Each slice may leave -c requests cut off at its end, which
	// coral_proxy counts and wrk does not.
	three := &run{Requests: 100, CoralRequests: map[string]float64{"hit": 100 + 3*32}, Slices: make([]*run, 3)}
	if what := runProblems(three, "coral", 32); len(what) != 0 {
		t.Errorf("3 slices, 96 cut off: %v", what)
	}
	three.CoralRequests["hit"]++
	if what := runProblems(three, "coral", 32); len(what) != 1 {
		t.Errorf("3 slices, 97 more counted than completed: %v", what)
	}
}

func TestCheckSlices(t *testing.T) {
	for _, c := range []struct {
		d  time.Duration
		k  int
		ok bool
	}{
		{5 * time.Second, 1, true},
		{5 * time.Second, 5, true},
		{10 * time.Second, 5, true},
		{5 * time.Second, 2, false}, // 2.5 s
		{5 * time.Second, 10, false},
		{5 * time.Second, 0, false},
		{1500 * time.Millisecond, 1, true}, // one run, rounded by wrkArgs
		{3 * time.Second, 2, false},
	} {
		if err := checkSlices(c.d, c.k); (err == nil) != c.ok {
			t.Errorf("checkSlices(%v, %d) = %v, want ok %v", c.d, c.k, err, c.ok)
		}
	}
}

// respond-head must answer with coral's fields: the same names, values of
// the same length (Date and Age aside).
func TestHeadDiff(t *testing.T) {
	coral := http.Header{"Via": {"1.1 coral"}, "Age": {"12"}, "Date": {"Thu, 26 Nov 2026 19:00:00 GMT"}, "Cache-Status": {`coral; hit; detail="local"`}}
	same := http.Header{"Via": {"1.1 coral"}, "Age": {"0"}, "Date": {"Fri, 27 Nov 2026 01:02:03 GMT"}, "Cache-Status": {`coral; hit; detail="local"`}}
	if d := headDiff(coral, same); d != "" {
		t.Errorf("same fields: %s", d)
	}
	other := http.Header{"Via": {"1.1 caddy"}, "Age": {"0"}, "Cache-Status": {"x"}, "Server": {"Caddy"}}
	if d := headDiff(coral, other); d != `Cache-Status ["x"] against ["coral; hit; detail=\"local\""], no Date, also Server` {
		t.Errorf("different fields: %s", d)
	}
	ss := []*sample{
		{When: "before", Target: "coral", Size: 1024, Hit: true, Same: true, response: response{Header: coral}},
		{When: "before", Target: "respond-head", Size: 1024, Hit: true, Same: true, response: response{Header: other}},
		{When: "before", Target: "respond-head", Size: 2048, Hit: true, Same: true, response: response{Header: other}}, // no coral sample
	}
	if err := responseProblems(ss); err == nil || !strings.Contains(err.Error(), "respond-head 1k (before): not coral's head") || strings.Contains(err.Error(), "2k") {
		t.Errorf("responseProblems: %v", err)
	}
	ss[1].Header = same
	if err := responseProblems(ss); err != nil {
		t.Errorf("responseProblems with the same head: %v", err)
	}
}

// TestLargeObject writes the large object and serves it from the origin:
// the same bytes in every run, the whole object and a range of it
// answered from the file, with the small objects' header fields.
func TestLargeObject(t *testing.T) {
	dir := t.TempDir()
	o, err := writeLargeObject(dir, 3<<20)
	if err != nil {
		t.Fatal(err)
	}
	again, err := writeLargeObject(t.TempDir(), 3<<20)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "3m"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	if o.Path != "/3m" || len(raw) != 3<<20 || hex.EncodeToString(sum[:]) != o.SHA256 || again.SHA256 != o.SHA256 {
		t.Fatalf("object %+v, %d bytes, sha256 %x, again %s", o, len(raw), sum, again.SHA256)
	}
	org := &origin{bodies: map[string][]byte{}, large: o}
	srv := httptest.NewServer(org)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/3m")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(body, raw) || resp.Header.Get("Cache-Control") != "public, max-age=86400" ||
		resp.Header.Get("Last-Modified") != lastModified.Format(http.TimeFormat) {
		t.Fatalf("GET: %v %d, %d bytes, header %v", err, resp.StatusCode, len(body), resp.Header)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/3m", nil)
	req.Header.Set("Range", "bytes=1048576-1048585")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, raw[1<<20:1<<20+10]) {
		t.Errorf("range: %d %q", resp.StatusCode, body)
	}
	if n := org.requests.Load(); n != 2 {
		t.Errorf("origin counted %d requests, want 2", n)
	}
}

func TestLargeFlags(t *testing.T) {
	for in, want := range map[string]int64{"256m": 256 << 20, "256": 256 << 20, "0": 0, " 9M ": 9 << 20} {
		if got, err := parseLargeSize(in); err != nil || got != want {
			t.Errorf("parseLargeSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5m", "256k", "5000m", "m"} {
		if _, err := parseLargeSize(in); err == nil {
			t.Errorf("parseLargeSize(%q): no error", in)
		}
	}
	var s streamsFlag
	if err := s.Set("1 4"); err != nil || !slices.Equal(s, []int{1, 4}) || s.String() != "1 4" {
		t.Errorf("streams %v, %v", s, err)
	}
	for _, in := range []string{"", "0", "x", "65"} {
		if err := s.Set(in); err == nil {
			t.Errorf("-large-streams %q: no error", in)
		}
	}
}

// TestSummarizeLarge: medians per stream count and target, ratios of the
// same round only, and every run's problem reported.
func TestSummarizeLarge(t *testing.T) {
	rep := &report{Large: &largeResult{Object: largeObject{Path: "/9m", Size: 9 << 20}, Streams: []int{1, 4}, Rounds: 2}}
	add := func(round, streams int, target string, mbps float64) *largeRun {
		r := &largeRun{Round: round, Streams: streams, Target: target, MBps: mbps, Bytes: 1, CPUPerGB: mbps / 1000}
		rep.Large.Runs = append(rep.Large.Runs, r)
		return r
	}
	add(1, 1, "coral", 1000)
	add(1, 1, "file", 800)
	add(1, 1, "coral-old", 500)
	add(2, 1, "coral", 900)
	add(2, 1, "file", 1000)
	add(2, 1, "coral-old", 1000)
	add(1, 4, "coral", 600)
	add(2, 4, "file", 300).OriginRequests = 1 // no coral in round 2: no ratio
	summarizeLarge(rep)
	l1, l4 := rep.Large.Summary[0], rep.Large.Summary[1]
	if !slices.Equal(l1.CoralOverFile, []float64{1.25, 0.9}) || *l1.MedianCoralOverFile != 1.075 || !slices.Equal(l1.NewOverOld, []float64{2, 0.9}) ||
		l1.Targets["coral"].MedianMBps != 950 || l1.MedianNginxOverFile != nil {
		t.Errorf("one stream: %+v", l1)
	}
	if len(l4.CoralOverFile) != 0 || l4.MedianCoralOverFile != nil || l4.Targets["coral"].MedianMBps != 600 {
		t.Errorf("four streams: %+v", l4)
	}
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "the origin got 1 requests") {
		t.Errorf("problems %q", rep.Problems)
	}
}
