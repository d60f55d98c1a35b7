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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// wrkArgs is the command line of one run.
func (b *bench) wrkArgs(t *target, size int, d time.Duration) []string {
	args := []string{"-t", strconv.Itoa(b.p.Threads), "-c", strconv.Itoa(b.p.Conns),
		"-d", fmt.Sprintf("%ds", max(1, int(d.Round(time.Second).Seconds()))), "--timeout", "5s", "--latency"}
	switch {
	case t.tls:
		// The name is the URL's host (SNI, Host); the script connects to
		// Caddy's address (wrkResolveScript).
		args = append(args, "-s", b.wrkScript)
	case t.host != "":
		args = append(args, "-H", "Host: "+t.host)
	}
	return append(args, t.url("/"+sizeName(size)))
}

// shellJoin quotes what a shell would need quoted.
func shellJoin(argv []string) string {
	var parts []string
	for _, a := range argv {
		if a == "" || strings.ContainsAny(a, " \"'\\$;&|<>*?()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// runWrk runs wrk once against t's object of the given size and records
// what the servers did meanwhile: their CPU time, the origin's requests.
// With quiet it first waits (at most -quiet) for other processes to go
// quiet. started, if not nil, is called just before wrk starts.
func (b *bench) runWrk(ctx context.Context, phase string, round int, t *target, size int, d time.Duration, quiet bool, started func()) (*run, error) {
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
	argv := append([]string{b.p.Wrk}, b.wrkArgs(t, size, d)...)
	r := &run{Phase: phase, Round: round, Target: t.name, Size: size, Argv: shellJoin(argv), QuietWait: waited.Seconds(), BusyBefore: busy}
	b.commands = append(b.commands, r.Argv)

	// wrk writes to a file, not a pipe: nothing in this process runs during
	// the measurement, and wrk never waits for a reader.
	outPath := filepath.Join(b.dir, "wrk.out")
	outFile, err := os.Create(outPath)
	if err != nil {
		return nil, err
	}
	defer os.Remove(outPath)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = outFile, &stderr
	var m0 map[string]float64
	if t.server == "coral" {
		if m0, err = b.coralRequests(t); err != nil {
			return nil, err
		}
	}
	if started != nil {
		started()
	}
	o0 := b.origin.requests.Load()
	c0, w0 := b.cpu(), time.Now()
	werr := cmd.Run()
	c1, w1 := b.cpu(), time.Now()
	o1 := b.origin.requests.Load()
	outFile.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	raw, err := os.ReadFile(outPath)
	if err != nil {
		return nil, err
	}
	if werr != nil {
		return nil, fmt.Errorf("%s: %v\n%s%s", r.Argv, werr, raw, stderr.String())
	}
	if err := parseWrk(bytes.NewReader(raw), r); err != nil {
		return nil, fmt.Errorf("%s: %v\n%s%s", r.Argv, err, raw, stderr.String())
	}
	if r.Requests == 0 {
		return nil, fmt.Errorf("%s: no request completed\n%s%s", r.Argv, raw, stderr.String())
	}
	if m0 != nil {
		if r.CoralRequests, err = b.coralRequestsSince(t, m0, r.Requests, time.Second); err != nil {
			return nil, err
		}
	}
	if err := b.alive(); err != nil {
		return nil, err
	}
	r.Wall = w1.Sub(w0).Seconds()
	r.OriginRequests = o1 - o0
	r.ServerCPU = b.serverCPU(t, c0, c1)
	r.CPUPerRequest = 1e6 * r.ServerCPU / float64(r.Requests)
	r.WrkCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	r.SelfCPU = c1.self - c0.self
	idle := c1.servers() - c0.servers() - r.ServerCPU // the servers not under load
	r.IdleServerCPU = idle
	r.OtherCPU = max(0, (c1.busy-c0.busy)-r.ServerCPU-idle-r.WrkCPU-r.SelfCPU)
	if r.Requests > 0 {
		r.BytesPerResponse = r.BytesRead / float64(r.Requests)
	}
	return r, nil
}

// coralRequestsSince is coral_proxy's count of requests by cache status
// since m0. coral_proxy counts a request when its handler returns, which
// can be a moment after wrk has read the whole response (on a busy machine
// one of the last requests was once missing): the counts are read again,
// every 50 ms for at most wait, until they add up to completed or more. A
// count that stays short is returned as it is, for the checks to report.
func (b *bench) coralRequestsSince(t *target, m0 map[string]float64, completed int64, wait time.Duration) (map[string]float64, error) {
	deadline := time.Now().Add(wait)
	for {
		m1, err := b.coralRequests(t)
		if err != nil {
			return nil, err
		}
		counts, total := map[string]float64{}, 0.0
		for k, v := range m1 {
			if d := v - m0[k]; d != 0 {
				counts[k] = d
				total += d
			}
		}
		if total >= float64(completed) || !time.Now().Before(deadline) {
			return counts, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var (
	reRequests = regexp.MustCompile(`(\d+) requests in ([\d.]+)(us|ms|s|m|h), ([\d.]+)([KMGTP]?B) read`)
	reRPS      = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	reTransfer = regexp.MustCompile(`Transfer/sec:\s+([\d.]+)([KMGTP]?B)`)
	reLatStats = regexp.MustCompile(`^\s+Latency\s+([\d.]+)(us|ms|s|m|h)\s+([\d.]+)(us|ms|s|m|h)\s+([\d.]+)(us|ms|s|m|h)`)
	rePercent  = regexp.MustCompile(`^\s+([\d.]+)%\s+([\d.]+)(us|ms|s|m|h)\s*$`)
	reSocket   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	reNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// parseWrk reads wrk's --latency output into r.
func parseWrk(out io.Reader, r *run) error {
	var all strings.Builder
	inDist := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		all.WriteString(line + "\n")
		if strings.Contains(line, "Latency Distribution") {
			inDist = true
			continue
		}
		if inDist {
			if m := rePercent.FindStringSubmatch(line); m != nil {
				p, _ := strconv.ParseFloat(m[1], 64)
				v := toMs(m[2], m[3])
				switch p {
				case 50:
					r.P50 = v
				case 75:
					r.P75 = v
				case 90:
					r.P90 = v
				case 99:
					r.P99 = v
				}
				continue
			}
			inDist = false
		}
		if m := reLatStats.FindStringSubmatch(line); m != nil {
			r.AvgLatMs, r.StdevLatMs, r.MaxLatMs = toMs(m[1], m[2]), toMs(m[3], m[4]), toMs(m[5], m[6])
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	s := all.String()
	var missing []string
	if m := reRequests.FindStringSubmatch(s); m != nil {
		r.Requests, _ = strconv.ParseInt(m[1], 10, 64)
		r.RunTime = toMs(m[2], m[3]) / 1000
		r.BytesRead = toBytes(m[4], m[5])
	} else {
		missing = append(missing, "request count")
	}
	if m := reRPS.FindStringSubmatch(s); m != nil {
		r.RPS, _ = strconv.ParseFloat(m[1], 64)
	} else {
		missing = append(missing, "Requests/sec")
	}
	if m := reTransfer.FindStringSubmatch(s); m != nil {
		r.TransferMiBs = toBytes(m[1], m[2]) / (1 << 20)
	} else {
		missing = append(missing, "Transfer/sec")
	}
	if r.P50 == 0 || r.P99 == 0 {
		missing = append(missing, "latency distribution (--latency)")
	}
	if m := reSocket.FindStringSubmatch(s); m != nil {
		for i, dst := range []*int64{&r.ErrConnect, &r.ErrRead, &r.ErrWrite, &r.ErrTimeout} {
			*dst, _ = strconv.ParseInt(m[i+1], 10, 64)
		}
	}
	if m := reNon2xx.FindStringSubmatch(s); m != nil {
		r.Non2xx, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if len(missing) > 0 {
		return fmt.Errorf("wrk output lacks %s", strings.Join(missing, ", "))
	}
	return nil
}

// toMs converts a wrk time (format_time_us) to milliseconds.
func toMs(v, unit string) float64 {
	x, _ := strconv.ParseFloat(v, 64)
	switch unit {
	case "us":
		return x / 1000
	case "ms":
		return x
	case "s":
		return x * 1000
	case "m":
		return x * 60e3
	case "h":
		return x * 3600e3
	}
	return x
}

// toBytes converts a wrk size (format_binary: two decimals, 1024-based).
func toBytes(v, unit string) float64 {
	x, _ := strconv.ParseFloat(v, 64)
	if i := strings.IndexByte("KMGTP", unit[0]); len(unit) == 2 && i >= 0 {
		for range i + 1 {
			x *= 1024
		}
	}
	return x
}
