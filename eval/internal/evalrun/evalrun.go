// Package evalrun holds what the experiments share: every one records
// its provenance (Provenance: command line, commit, clean tree, dates,
// load, topology) in its result file. Those that run real servers
// (eval/dnsperf, eval/httpbench, eval/headerfields, eval/flashcrowd, …)
// also share waiting for a server to come up, the CPU time of processes
// from /proc, and small formatting helpers for their tables.
package evalrun

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CommandLine spells out how this run was invoked, every flag of the
// default flag set included, as "go run ./eval/PROG -name=value ...". The
// testing package's flags, which a virtual-time run's test binary has,
// are left out.
func CommandLine(prog string) string {
	var b strings.Builder
	b.WriteString("go run ./eval/" + prog)
	flag.VisitAll(func(f *flag.Flag) {
		if isTestFlag(f) {
			return
		}
		fmt.Fprintf(&b, " -%s=%s", f.Name, FlagValue(f.Value.String()))
	})
	return b.String()
}

// FlagValue is a flag's value as CommandLine writes it: quoted (Go
// syntax) when it is empty or holds a space, a quote, a backslash or a $.
func FlagValue(v string) string {
	if v == "" || strings.ContainsAny(v, " \"'\\$") {
		return strconv.Quote(v)
	}
	return v
}

// ParseCommandLine reads back a command CommandLine wrote for prog: the
// flags' values by name, unquoted. It fails on a command of another
// program or one that does not parse.
func ParseCommandLine(cmd, prog string) (map[string]string, error) {
	rest, ok := strings.CutPrefix(cmd, "go run ./eval/"+prog)
	if !ok || (rest != "" && rest[0] != ' ') {
		return nil, fmt.Errorf("`%s` is not a run of eval/%s", cmd, prog)
	}
	flags := map[string]string{}
	for rest = strings.TrimLeft(rest, " "); rest != ""; rest = strings.TrimLeft(rest, " ") {
		name, after, ok := strings.Cut(strings.TrimPrefix(rest, "-"), "=")
		if !ok || rest[0] != '-' || name == "" || strings.Contains(name, " ") {
			return nil, fmt.Errorf("the command does not parse at %q", rest)
		}
		var v string
		if strings.HasPrefix(after, `"`) {
			q, err := strconv.QuotedPrefix(after)
			if err != nil {
				return nil, fmt.Errorf("the command does not parse at %q: %v", rest, err)
			}
			v, _ = strconv.Unquote(q)
			rest = after[len(q):]
		} else {
			v, rest, _ = strings.Cut(after, " ")
		}
		flags[name] = v
	}
	return flags, nil
}

// FirstLine runs cmd and returns the first non-empty line of its output,
// whatever its exit status (wrk -v exits 1), or "unknown".
func FirstLine(cmd *exec.Cmd) string {
	out, _ := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return "unknown"
}

// LoadAvg is the 1, 5 and 15 minute load averages, or "".
func LoadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:min(3, len(f))], " ")
}

// Kernel is the kernel release, or "".
func Kernel() string {
	raw, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

// Seconds converts a rusage time.
func Seconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}

// WaitFor polls cond every 200 ms until it holds, within the bound. alive
// (may be nil) is asked after each failed poll; its error (the server
// died, with its log) ends the wait at once.
func WaitFor(ctx context.Context, what string, within time.Duration, alive func() error, cond func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if alive != nil {
			if aerr := alive(); aerr != nil {
				return aerr
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: not within %v: %v", what, within, err)
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Median of v (NaN when empty); v is not changed.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Slot is one run of a round measured in interleaved slices: slice
// Slice (1..K) of Target.
type Slot[T any] struct {
	Slice  int
	Target T
}

// Interleave is the order of a round's runs when each target's run is cut
// into k slices: slice 1 of every target, in ts's order rotated left by
// round-1 (round counts from 1, so that each round starts with another
// target, as uncut rounds do), then slice 2 rotated by one more, and so on,
// so that no target always runs first or last. The targets then meet a
// machine whose speed drifts over tens of seconds alike, where a target
// measured for the whole run in one go meets its own stretch of it. With
// k = 1 it is the uncut round: each target once, rotated by round-1.
func Interleave[T any](ts []T, round, k int) []Slot[T] {
	var out []Slot[T]
	for s := 1; s <= k && len(ts) > 0; s++ {
		r := (round - 1 + s - 1) % len(ts)
		for _, t := range slices.Concat(ts[r:], ts[:r]) {
			out = append(out, Slot[T]{Slice: s, Target: t})
		}
	}
	return out
}

// QuietCores is how much CPU the rest of the machine may use, in CPUs, for
// it to count as quiet (WaitQuiet).
const QuietCores = 0.15

// WaitQuiet waits, at most within, until the rest of the machine uses under
// QuietCores of CPU over a second: on a shared machine a neighbour's build
// would otherwise land in one run and not another. others is the CPU time,
// in seconds, that the rest of the machine (everything but the servers
// measured and this process) has used so far. It returns how long it waited
// and the CPUs the rest used in the last second it sampled; within ≤ 0 does
// not wait.
func WaitQuiet(ctx context.Context, within time.Duration, others func() float64) (time.Duration, float64, error) {
	if within <= 0 {
		return 0, 0, ctx.Err()
	}
	start := time.Now()
	for {
		o0, t0 := others(), time.Now()
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(time.Second):
		}
		busy := (others() - o0) / time.Since(t0).Seconds()
		if busy < QuietCores || time.Since(start) >= within {
			return time.Since(start), max(busy, 0), nil
		}
	}
}

// PassFail prints an acceptance check.
func PassFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// Ms prints a latency in milliseconds with about three significant digits.
func Ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// userHZ is the unit of the times in /proc (USER_HZ, 100 on Linux).
const userHZ = 100

// SelfCPU is the user and system CPU seconds this process has used.
func SelfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return Seconds(ru.Utime) + Seconds(ru.Stime)
}

// ParseStat reads a /proc/PID/stat line: the process's group and its user
// and system CPU seconds, all threads. The fields are counted after the
// command name, which is in parentheses and may hold spaces: pgrp is field
// 5 of the whole line, utime 14 and stime 15.
func ParseStat(raw []byte) (pgrp int, cpu float64, ok bool) {
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) <= 12 {
		return 0, 0, false
	}
	pgrp, _ = strconv.Atoi(f[2])
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return pgrp, (u + st) / userHZ, true
}

// ProcessCPU is a process's user and system CPU seconds, all threads, or
// 0 when it cannot be read.
func ProcessCPU(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, cpu, _ := ParseStat(raw)
	return cpu
}

// MachineBusy is the CPU seconds the whole machine has spent busy since
// boot (everything in /proc/stat's cpu line but idle and iowait), or 0.
// Differences over an interval show what else runs beside an experiment.
func MachineBusy() float64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	busy := 0.0
	// user nice system idle iowait irq softirq steal
	for i, v := range f[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		busy += x / userHZ
	}
	return busy
}
