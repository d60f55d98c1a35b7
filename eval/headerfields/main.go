// Command headerfields measures what a response's header fields cost Caddy
// by themselves, with no handler work at all: one bin/caddy answers the
// same 1 KiB body from Caddy's own static_response handler, with its
// headers map set so that the response's map holds n fields (-fields,
// default 3 8 9 10), one site per n, under wrk.
//
//	go run ./eval/headerfields [-rounds 12] [-duration 2s] [-fields "3 8 9 10"] [-out docs/eval]
//
// The fields are those of a coral_proxy hit of eval/httpbench's origin,
// the first n of them: Server (which Caddy sets on every response),
// Content-Type, Content-Length, Cache-Control, Last-Modified, Date,
// Cache-Status, Age, Via, Accept-Ranges. 3 is what Caddy's bare respond
// sends, 8 the most that Go keeps in a map's small layout, 10 a hit's.
// Each round runs every site once for -duration with wrk -t1 -c32, the
// order rotated from round to round so that the sites share the machine's
// drift; a site's figures are its rounds' requests over their time, and
// Caddy's CPU per request from /proc over the same runs. Every site's head
// is checked for its n fields before the load. It prints a table and
// writes headerfields.json; module/caddy/README.md ("The cost of a hit's
// header fields") explains the result, with BenchmarkNetHTTPHeaderFields
// for net/http alone.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// hitFields are a coral_proxy hit's header fields, in the order the sites
// take them; Server is Caddy's own.
var hitFields = [][2]string{
	{"Server", "Caddy"},
	{"Content-Type", "application/octet-stream"},
	{"Content-Length", "1024"},
	{"Cache-Control", "public, max-age=86400"},
	{"Last-Modified", "Thu, 26 Nov 2026 20:00:00 GMT"},
	{"Date", "Thu, 26 Nov 2026 21:00:00 GMT"},
	{"Cache-Status", `coral; hit; detail="local"`},
	{"Age", "0"},
	{"Via", "1.1 coral"},
	{"Accept-Ranges", "bytes"},
}

// bodySize is the body every site sends.
const bodySize = 1024

type params struct {
	Caddy    string
	Wrk      string
	Addr     string
	Port     int // the first site's; site i gets Port+i
	Fields   []int
	Rounds   int
	Duration time.Duration
	Out      string
}

func defaultParams() params {
	return params{Caddy: "bin/caddy", Wrk: "wrk", Addr: "127.0.97.1", Port: 9300, Fields: []int{3, 8, 9, 10}, Rounds: 12, Duration: 2 * time.Second, Out: "docs/eval"}
}

// site is one n's figures.
type site struct {
	Fields        int     `json:"fields"`
	Port          int     `json:"port"`
	Requests      int64   `json:"requests"`
	Seconds       float64 `json:"seconds"`
	RPS           float64 `json:"requests_per_second"`
	CPUPerRequest float64 `json:"caddy_cpu_us_per_request"`
	AgainstFirst  float64 `json:"rps_against_first"`
	cpu           float64
}

type report struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Command    string              `json:"command"`
	Caddy      string              `json:"caddy"`
	Rounds     int                 `json:"rounds"`
	Duration   string              `json:"duration_per_run"`
	LoadAvg    string              `json:"load_average_before"`
	Sites      []*site             `json:"sites"`
}

func main() {
	p := defaultParams()
	fields := strings.Trim(fmt.Sprint(p.Fields), "[]")
	flag.StringVar(&p.Caddy, "caddy", p.Caddy, "Caddy binary (make caddy)")
	flag.StringVar(&p.Wrk, "wrk", p.Wrk, "wrk binary")
	flag.StringVar(&p.Addr, "addr", p.Addr, "loopback address the sites listen on")
	flag.IntVar(&p.Port, "port", p.Port, "the first site's port; site i gets -port+i")
	flag.StringVar(&fields, "fields", fields, "fields in each site's response map, space-separated, each 1–10")
	flag.IntVar(&p.Rounds, "rounds", p.Rounds, "rounds: every site once per round")
	flag.DurationVar(&p.Duration, "duration", p.Duration, "wrk's run per site and round (whole seconds)")
	flag.StringVar(&p.Out, "out", p.Out, "directory for headerfields.json")
	flag.Parse()
	var err error
	if p.Fields, err = parseFields(fields); err != nil {
		fmt.Fprintln(os.Stderr, "headerfields: -fields:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := experiment(ctx, p, evalrun.CommandLine("headerfields"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "headerfields:", err)
		os.Exit(1)
	}
	printReport(rep)
}

func parseFields(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > len(hitFields) {
			return nil, fmt.Errorf("%q: want a number of fields from 1 to %d", f, len(hitFields))
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no field counts")
	}
	return out, nil
}

// config is Caddy's JSON configuration: one server per site, each with
// one static_response route.
func config(p params) ([]byte, error) {
	body := strings.Repeat("x", bodySize)
	servers := map[string]any{}
	for i, n := range p.Fields {
		headers := map[string][]string{}
		for _, f := range hitFields[1:n] { // Server is Caddy's
			headers[f[0]] = []string{f[1]}
		}
		servers[fmt.Sprintf("fields%d", i)] = map[string]any{
			"listen":          []string{netip.AddrPortFrom(netip.MustParseAddr(p.Addr), uint16(p.Port+i)).String()},
			"automatic_https": map[string]any{"disable": true},
			"protocols":       []string{"h1"},
			"routes": []any{map[string]any{"handle": []any{map[string]any{
				"handler": "static_response", "status_code": 200, "headers": headers, "body": body,
			}}}},
		}
	}
	return json.MarshalIndent(map[string]any{
		"admin":   map[string]any{"disabled": true},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps":    map[string]any{"http": map[string]any{"servers": servers}},
	}, "", "  ")
}

func experiment(ctx context.Context, p params, command string) (*report, error) {
	if p.Duration < time.Second || p.Duration%time.Second != 0 {
		return nil, fmt.Errorf("-duration %v: want whole seconds", p.Duration)
	}
	if p.Rounds < 1 {
		return nil, fmt.Errorf("-rounds %d: want at least 1", p.Rounds)
	}
	// Caddy runs in a directory of its own: a relative path is this one's.
	caddyBin, err := exec.LookPath(p.Caddy)
	if err != nil {
		return nil, fmt.Errorf("-caddy: %w (make caddy)", err)
	}
	if caddyBin, err = filepath.Abs(caddyBin); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "coral-headerfields-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg, err := config(p)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "caddy.json")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return nil, err
	}
	rep := &report{Provenance: evalrun.StartProvenance("headerfields", evalrun.TopologyLoopback), Command: command, Caddy: evalrun.FirstLine(exec.Command(caddyBin, "version")), Rounds: p.Rounds, Duration: p.Duration.String(), LoadAvg: evalrun.LoadAvg()}
	caddy, err := proc.Start([]string{caddyBin, "run", "--config", cfgPath}, proc.Options{Name: "caddy", Dir: dir, Log: filepath.Join(dir, "caddy.log")})
	if err != nil {
		return nil, err
	}
	defer caddy.Stop(5 * time.Second)
	for i, n := range p.Fields {
		s := &site{Fields: n, Port: p.Port + i}
		rep.Sites = append(rep.Sites, s)
		url := s.url(p)
		if err := evalrun.WaitFor(ctx, "Caddy on "+url, 20*time.Second, caddy.Exited, func() error { return checkHead(url, n) }); err != nil {
			return nil, err
		}
	}
	for round := range p.Rounds {
		for j := range rep.Sites {
			s := rep.Sites[(j+round)%len(rep.Sites)]
			c0 := evalrun.ProcessCPU(caddy.Pid())
			reqs, secs, err := runWrk(ctx, p, s.url(p))
			if err != nil {
				return nil, err
			}
			s.cpu += evalrun.ProcessCPU(caddy.Pid()) - c0
			s.Requests += reqs
			s.Seconds += secs
		}
		if err := caddy.Exited(); err != nil {
			return nil, err
		}
	}
	for _, s := range rep.Sites {
		if s.Requests == 0 || s.Seconds == 0 {
			return nil, fmt.Errorf("%d fields: no requests", s.Fields)
		}
		s.RPS = float64(s.Requests) / s.Seconds
		s.CPUPerRequest = s.cpu / float64(s.Requests) * 1e6
		s.AgainstFirst = s.RPS / rep.Sites[0].RPS
	}
	rep.Provenance.Finish()
	if p.Out != "" {
		if err := os.MkdirAll(p.Out, 0o755); err != nil {
			return nil, err
		}
		out, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(p.Out, "headerfields.json"), append(out, '\n'), 0o644); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func (s *site) url(p params) string {
	return "http://" + netip.AddrPortFrom(netip.MustParseAddr(p.Addr), uint16(s.Port)).String() + "/1k"
}

// checkHead fetches url once and checks that the response has the body and
// n header fields, and Date besides when n leaves it to net/http.
func checkHead(url string, n int) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	want := n
	if n <= 5 {
		want++ // net/http's own Date
	}
	if n < 3 {
		want++ // net/http's Content-Length
	}
	if n < 2 {
		want++ // Caddy's Content-Type
	}
	if len(resp.Header) != want || resp.ContentLength != bodySize {
		return fmt.Errorf("%s: %d header fields and Content-Length %d, want %d and %d: %v", url, len(resp.Header), resp.ContentLength, want, bodySize, resp.Header)
	}
	return nil
}

var reRequests = regexp.MustCompile(`(\d+) requests in ([\d.]+)(us|ms|s|m), `)

// runWrk runs wrk against url for -duration and returns its requests and
// the seconds it ran them in.
func runWrk(ctx context.Context, p params, url string) (int64, float64, error) {
	secs := int(p.Duration / time.Second)
	out, err := exec.CommandContext(ctx, p.Wrk, "-t1", "-c32", fmt.Sprintf("-d%ds", secs), url).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("wrk %s: %v: %s", url, err, out)
	}
	if strings.Contains(string(out), "Non-2xx") || strings.Contains(string(out), "Socket errors") {
		return 0, 0, fmt.Errorf("wrk %s: errors:\n%s", url, out)
	}
	return parseWrk(string(out))
}

func parseWrk(out string) (int64, float64, error) {
	m := reRequests.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("no request count in wrk's output:\n%s", out)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	v, _ := strconv.ParseFloat(m[2], 64)
	unit := map[string]float64{"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60}[m[3]]
	return n, v * unit, nil
}

func printReport(rep *report) {
	fmt.Printf("Header fields in Caddy's static_response: %s; %d rounds of %s per site, wrk -t1 -c32, sites interleaved\n", rep.Caddy, rep.Rounds, rep.Duration)
	fmt.Printf("Command: %s\n\n", rep.Command)
	fmt.Printf("  %6s  %10s  %16s  %14s\n", "fields", "req/s", "Caddy µs CPU/req", "req/s vs first")
	for _, s := range rep.Sites {
		fmt.Printf("  %6d  %10.0f  %16.1f  %14.3f\n", s.Fields, s.RPS, s.CPUPerRequest, s.AgainstFirst)
	}
}
