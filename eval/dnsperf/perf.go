package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/miekg/dns"
)

// dnsperfArgs is the command line of one run: rate 0 is unthrottled; verbose
// has dnsperf report every response with its latency.
func (b *bench) dnsperfArgs(t *target, d time.Duration, rate int, verbose bool) []string {
	q := b.p.Queue
	if rate > 0 {
		q = b.p.LatQueue
	}
	args := []string{"-s", t.addr.Addr().String(), "-p", strconv.Itoa(int(t.addr.Port())), "-a", b.client.String(),
		"-d", t.queryFile, "-l", strconv.FormatFloat(d.Seconds(), 'f', -1, 64),
		"-c", strconv.Itoa(b.p.Clients), "-T", strconv.Itoa(b.p.Threads), "-q", strconv.Itoa(q), "-t", "2"}
	if rate > 0 {
		args = append(args, "-Q", strconv.Itoa(rate))
	}
	if verbose {
		args = append(args, "-v")
	}
	return args
}

// runPerf runs dnsperf once against t and records what CoreDNS did
// meanwhile: its CPU time, its own request metrics, coral's DSHT traffic.
// quiet has it wait (at most -quiet) for the machine to be quiet first.
func (b *bench) runPerf(ctx context.Context, phase string, round int, t *target, d time.Duration, rate int, verbose, quiet bool) (*run, error) {
	if err := b.alive(); err != nil {
		return nil, err
	}
	within := b.p.Quiet
	if !quiet {
		within = 0
	}
	waited, busy, err := evalrun.WaitQuiet(ctx, within, b.otherCPU)
	if err != nil {
		return nil, err
	}
	args := b.dnsperfArgs(t, d, rate, verbose)
	r := &run{QuietWait: waited.Seconds(), BusyBefore: busy, Phase: phase, Round: round, Target: t.name, Rate: rate, Argv: b.p.Dnsperf + " " + strings.Join(args, " ")}
	b.commands = append(b.commands, r.Argv)

	m0, err := b.scrape()
	if err != nil {
		return nil, err
	}
	c0, w0 := b.cpu(), time.Now()
	// dnsperf writes to a file, not a pipe: nothing in this process runs
	// during the measurement, and dnsperf never waits for a reader.
	outPath := filepath.Join(b.dir, "dnsperf.out")
	outFile, err := os.Create(outPath)
	if err != nil {
		return nil, err
	}
	defer os.Remove(outPath)
	cmd := exec.CommandContext(ctx, b.p.Dnsperf, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = outFile, &stderr
	werr := cmd.Run()
	outFile.Close()
	c1, w1 := b.cpu(), time.Now()
	m1, serr := b.scrape()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var summary string
	var perr error
	if f, err := os.Open(outPath); err != nil {
		perr = err
	} else {
		summary, perr = parsePerf(f, r)
		f.Close()
	}
	if werr != nil {
		return nil, fmt.Errorf("%s: %v\n%s%s", r.Argv, werr, summary, stderr.String())
	}
	if perr != nil {
		return nil, fmt.Errorf("%s: %v\n%s%s", r.Argv, perr, summary, stderr.String())
	}
	if serr != nil {
		return nil, serr
	}
	if r.Completed == 0 {
		return nil, fmt.Errorf("%s: no query completed\n%s%s", r.Argv, summary, stderr.String())
	}

	r.Wall = w1.Sub(w0).Seconds()
	r.CorednsCPU = c1.coredns - c0.coredns
	r.CPUPerQuery = 1e6 * r.CorednsCPU / float64(r.Completed)
	r.DnsperfCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	r.SelfCPU = c1.self - c0.self
	r.OtherCPU = max(0, (c1.busy-c0.busy)-r.CorednsCPU-r.DnsperfCPU-r.SelfCPU)
	r.RcvbufDrops = int64(c1.rcvbuf - c0.rcvbuf)

	zone := []string{"zone", t.zone}
	r.ServerRequests = m1.sum("coredns_dns_requests_total", zone...) - m0.sum("coredns_dns_requests_total", zone...)
	if n := m1.sum("coredns_dns_request_duration_seconds_count", zone...) - m0.sum("coredns_dns_request_duration_seconds_count", zone...); n > 0 {
		r.ServerMeanUs = 1e6 * (m1.sum("coredns_dns_request_duration_seconds_sum", zone...) - m0.sum("coredns_dns_request_duration_seconds_sum", zone...)) / n
	}
	out := []string{"direction", "out", "kind", "request"}
	r.DHTOut = m1.sum("coredns_coral_dht_messages_total", out...) - m0.sum("coredns_coral_dht_messages_total", out...)
	r.Classified = m1.sum("coredns_coral_classifications_total", "source", "cache") - m0.sum("coredns_coral_classifications_total", "source", "cache")
	if t == b.targets[0] {
		b.noteAfter(r, m0, m1)
	}
	return r, nil
}

// noteAfter records in coral's run r the sample answer right after it and
// what the coral node knew (run.After).
func (b *bench) noteAfter(r *run, m0, m1 metrics) {
	r.LiveNS = m1.by("coredns_coral_live_nameservers", "level")
	r.DHTTimeouts = m1.sum("coredns_coral_dht_timeouts_total") - m0.sum("coredns_coral_dht_timeouts_total")
	s, msg, err := b.shape(b.targets[0])
	if err != nil {
		r.After = "no sample: " + err.Error()
		return
	}
	var ns []string
	for _, rr := range msg.Ns {
		if n, ok := rr.(*dns.NS); ok {
			ns = append(ns, n.Ns)
		}
	}
	r.After = fmt.Sprintf("%d bytes, %s, name servers %s", s.Bytes, s.Shape, strings.Join(ns, " "))
}

var (
	reSent      = regexp.MustCompile(`Queries sent:\s+(\d+)`)
	reCompleted = regexp.MustCompile(`Queries completed:\s+(\d+)`)
	reLost      = regexp.MustCompile(`Queries lost:\s+(\d+)`)
	reRcodes    = regexp.MustCompile(`Response codes:\s+(.*)`)
	reRcode     = regexp.MustCompile(`([A-Z]+) (\d+) \(`)
	reSize      = regexp.MustCompile(`Average packet size:\s+request (\d+), response (\d+)`)
	reRunTime   = regexp.MustCompile(`Run time \(s\):\s+([\d.]+)`)
	reQPS       = regexp.MustCompile(`Queries per second:\s+([\d.]+)`)
	reLatency   = regexp.MustCompile(`Average Latency \(s\):\s+([\d.]+) \(min ([\d.]+), max ([\d.]+)\)`)
	reStdDev    = regexp.MustCompile(`Latency StdDev \(s\):\s+([\d.]+)`)
)

// parsePerf reads dnsperf's output into r: the per-response lines of -v
// ("> NOERROR name A 0.000123"; "T" for a timeout, "I" for an interrupted
// query) and the final statistics. It returns everything but the
// per-response lines, for error messages.
func parsePerf(out io.Reader, r *run) (string, error) {
	var summary strings.Builder
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "> "); ok {
			f := strings.Fields(rest)
			switch {
			case len(f) == 0:
			case f[0] == "T":
				r.Timeouts++
			case f[0] == "I":
				r.Interrupts++
			default:
				if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
					r.latencies = append(r.latencies, 1000*v)
				}
			}
			continue
		}
		summary.WriteString(line + "\n")
	}
	if err := sc.Err(); err != nil {
		return summary.String(), err
	}
	s := summary.String()
	num := func(re *regexp.Regexp, i int) (float64, bool) {
		m := re.FindStringSubmatch(s)
		if m == nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(m[i], 64)
		return v, err == nil
	}
	var missing []string
	need := func(re *regexp.Regexp, i int, name string) float64 {
		v, ok := num(re, i)
		if !ok {
			missing = append(missing, name)
		}
		return v
	}
	r.Sent = int64(need(reSent, 1, "queries sent"))
	r.Completed = int64(need(reCompleted, 1, "queries completed"))
	r.Lost = int64(need(reLost, 1, "queries lost"))
	r.RunTime = need(reRunTime, 1, "run time")
	r.QPS = need(reQPS, 1, "queries per second")
	if r.Completed > 0 {
		r.ReqSize = int(need(reSize, 1, "packet size"))
		r.RespSize = int(need(reSize, 2, "packet size"))
		r.AvgLatMs = 1000 * need(reLatency, 1, "latency")
		r.MinLatMs = 1000 * need(reLatency, 2, "latency")
		r.MaxLatMs = 1000 * need(reLatency, 3, "latency")
		r.StdDevMs = 1000 * need(reStdDev, 1, "latency stddev")
	}
	r.Rcodes = map[string]int64{}
	if m := reRcodes.FindStringSubmatch(s); m != nil {
		for _, c := range reRcode.FindAllStringSubmatch(m[1], -1) {
			n, _ := strconv.ParseInt(c[2], 10, 64)
			r.Rcodes[c[1]] += n
		}
	}
	if len(missing) > 0 {
		return s, fmt.Errorf("dnsperf output lacks %s", strings.Join(slices.Compact(missing), ", "))
	}
	slices.Sort(r.latencies)
	return s, nil
}

// otherCPU is the CPU time, in seconds, used so far by everything but
// CoreDNS and this process (evalrun.WaitQuiet).
func (b *bench) otherCPU() float64 {
	c := b.cpu()
	return c.busy - c.coredns - c.self
}
