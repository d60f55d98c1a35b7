package evalrun

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		in := append([]float64(nil), tc.in...)
		if got := Median(in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Errorf("Median sorted its argument: %v", in)
			}
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) is not NaN")
	}
}

func TestMs(t *testing.T) {
	for v, want := range map[float64]string{0.1234: "0.123", 1.234: "1.23", 12.34: "12.3", 123.4: "123"} {
		if got := Ms(v); got != want {
			t.Errorf("Ms(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestFirstLine(t *testing.T) {
	if got := FirstLine(exec.Command("sh", "-c", "echo; echo '  two  '; echo three; exit 1")); got != "two" {
		t.Errorf("FirstLine = %q", got)
	}
	if got := FirstLine(exec.Command("/nonexistent/binary")); got != "unknown" {
		t.Errorf("FirstLine of a missing binary = %q", got)
	}
}

func TestWaitFor(t *testing.T) {
	n := 0
	err := WaitFor(context.Background(), "third poll", 5*time.Second, nil, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Errorf("WaitFor: %v after %d polls", err, n)
	}
	died := errors.New("server exited")
	if err := WaitFor(context.Background(), "x", 5*time.Second, func() error { return died }, func() error { return errors.New("no") }); err != died {
		t.Errorf("a dead server: %v", err)
	}
	if err := WaitFor(context.Background(), "never", 0, nil, func() error { return errors.New("no") }); err == nil {
		t.Error("no error past the bound")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WaitFor(ctx, "never", time.Minute, nil, func() error { return errors.New("no") }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestCPUCounters(t *testing.T) {
	b0, s0 := MachineBusy(), SelfCPU()
	// Spin until this process has used 50 ms of CPU (or 5 s have passed).
	for start := time.Now(); SelfCPU()-s0 < 0.05 && time.Since(start) < 5*time.Second; {
	}
	if b1, s1 := MachineBusy(), SelfCPU(); !(b1 > b0 && s1 > s0) {
		t.Errorf("after spinning: machine busy %v → %v s, self %v → %v s; want both to grow", b0, b1, s0, s1)
	}
}

func TestInterleave(t *testing.T) {
	names := func(ss []Slot[string]) string {
		var b strings.Builder
		for _, s := range ss {
			fmt.Fprintf(&b, "%s%d ", s.Target, s.Slice)
		}
		return strings.TrimSpace(b.String())
	}
	zones := []string{"a", "b", "c"}
	for _, c := range []struct {
		round, k int
		want     string
	}{
		{1, 1, "a1 b1 c1"},
		{2, 1, "b1 c1 a1"},
		{4, 1, "a1 b1 c1"},
		{1, 3, "a1 b1 c1 b2 c2 a2 c3 a3 b3"},
		{2, 3, "b1 c1 a1 c2 a2 b2 a3 b3 c3"},
		{1, 0, ""},
	} {
		if got := names(Interleave(zones, c.round, c.k)); got != c.want {
			t.Errorf("round %d, %d slices: %s, want %s", c.round, c.k, got, c.want)
		}
	}
	if got := Interleave([]string(nil), 1, 3); len(got) != 0 {
		t.Errorf("no targets: %v", got)
	}
}

// WaitQuiet samples a second at a time (virtual time here) until the rest
// of the machine is under QuietCores, or within has passed.
func TestWaitQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		if waited, busy, err := WaitQuiet(ctx, 0, func() float64 { panic("sampled without a wait") }); waited != 0 || busy != 0 || err != nil {
			t.Errorf("within 0: waited %v, busy %v, %v", waited, busy, err)
		}
		idle := func() float64 { return 7 }
		if waited, busy, err := WaitQuiet(ctx, time.Minute, idle); waited != time.Second || busy != 0 || err != nil {
			t.Errorf("quiet machine: waited %v, busy %v, %v; want one second's sample", waited, busy, err)
		}
		start := time.Now()
		oneCPU := func() float64 { return time.Since(start).Seconds() } // another process using a whole CPU
		if waited, busy, err := WaitQuiet(ctx, 5*time.Second, oneCPU); waited != 5*time.Second || math.Abs(busy-1) > 1e-9 || err != nil {
			t.Errorf("busy machine: waited %v, busy %v, %v; want 5 s at 1 CPU", waited, busy, err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, _, err := WaitQuiet(cctx, time.Minute, idle); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled: %v", err)
		}
	})
}

// TestParseStat reads a process's group and CPU from a /proc/PID/stat
// line whose command name holds spaces and a parenthesis, and refuses one
// cut short.
func TestParseStat(t *testing.T) {
	line := "4242 (caddy (x) run) S 1 4240 4240 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 12 0 1000 0 0\n"
	pgrp, cpu, ok := ParseStat([]byte(line))
	if !ok || pgrp != 4240 || math.Abs(cpu-3.8) > 1e-9 {
		t.Errorf("ParseStat = %d, %v, %v; want 4240, 3.8 s, true", pgrp, cpu, ok)
	}
	if _, _, ok := ParseStat([]byte("4242 (caddy) S 1 4240")); ok {
		t.Error("a short line parsed")
	}
	if cpu := ProcessCPU(os.Getpid()); cpu < 0 {
		t.Errorf("ProcessCPU(self) = %v", cpu)
	}
}
