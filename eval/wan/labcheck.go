//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/netns"
	"github.com/coralcdn/coral/internal/lab/wan"
)

// rttSample is one site pair's RTT, measured against the matrix.
type rttSample struct {
	A        int     `json:"a"`
	B        int     `json:"b"`
	NameA    string  `json:"name_a"`
	NameB    string  `json:"name_b"`
	MatrixMs float64 `json:"matrix_ms"`
	MinMs    float64 `json:"min_ms"`
	MedianMs float64 `json:"median_ms"`
	// Within: the minimum within 10 % of the matrix or 2 ms, whichever is
	// larger (the lab's acceptance).
	Within bool `json:"within"`
}

// traceCheck is one trace between sites against the routers expected.
type traceCheck struct {
	From     int      `json:"from"`
	To       int      `json:"to"`
	Path     []string `json:"path"`     // every router, silent ones marked "(silent)"
	Expected []string `json:"expected"` // those that answer
	Got      []string `json:"got"`
	OK       bool     `json:"ok"`
}

// labCheck is one round of checks of the emulated wide area.
type labCheck struct {
	Phase    string       `json:"phase"`
	At       float64      `json:"at_seconds"` // since the lab was built
	Load     string       `json:"load"`
	Pairs    []rttSample  `json:"pairs"`
	Within   int          `json:"within"`
	MaxErrMs float64      `json:"max_error_ms"` // largest |min - matrix|
	Traces   []traceCheck `json:"traces,omitempty"`
	TracesOK int          `json:"traces_ok"`
	// Late counts the delayer's verdicts so far by lateness (bounds in
	// LateBoundsUs), over every router.
	Late         []uint64 `json:"delayer_late"`
	LateBoundsUs []int64  `json:"delayer_late_bounds_us"`
	MaxLateUs    int64    `json:"delayer_max_late_us"`
}

// samplePairs picks n site pairs among those with a probe host, a fixed
// function of the seed.
func samplePairs(sites []int, n int, seed uint64) [][2]int {
	var all [][2]int
	for i, a := range sites {
		for _, b := range sites[i+1:] {
			all = append(all, [2]int{a, b})
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x7061697273)) // "pairs"
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(n, len(all))]
}

// checkLab measures the RTT of each pair (probes between the sites' probe
// hosts) and, if traces, the trace of each pair, and reads the delayer's
// lateness.
func checkLab(ctx context.Context, l *wan.Lab, w *world, hosts map[int]*netns.Host, pairs [][2]int, probes int, traces bool, phase string, began time.Time) labCheck {
	c := labCheck{Phase: phase, At: time.Since(began).Seconds(), Load: evalrun.LoadAvg(), LateBoundsUs: wan.LateBoundsUs}
	for _, p := range pairs {
		a, b := p[0], p[1]
		s := rttSample{A: a, B: b, NameA: w.name(a), NameB: w.name(b), MatrixMs: ms(w.RTT(a, b))}
		rtts, err := wan.MeasureRTT(ctx, hosts[a], hosts[b], probes)
		if err == nil {
			s.MinMs, s.MedianMs = ms(rtts[0]), ms(rtts[len(rtts)/2])
			tol := max(0.1*s.MatrixMs, 2)
			s.Within = s.MinMs >= s.MatrixMs-tol && s.MinMs <= s.MatrixMs+tol
			c.MaxErrMs = max(c.MaxErrMs, abs(s.MinMs-s.MatrixMs))
		}
		if s.Within {
			c.Within++
		}
		c.Pairs = append(c.Pairs, s)
		if !traces {
			continue
		}
		t := traceCheck{From: a, To: b}
		for _, r := range l.Path(a, b) {
			name := r.Addr.String()
			if r.Silent {
				name += " (silent)"
			}
			t.Path = append(t.Path, name)
		}
		want := l.Heard(a, b)
		for _, r := range want {
			t.Expected = append(t.Expected, r.String())
		}
		got, err := wan.Trace(hosts[a], hosts[b].Addr, 12, 2*time.Second)
		for _, r := range got {
			t.Got = append(t.Got, r.String())
		}
		t.OK = err == nil && slices.Equal(got, want)
		if t.OK {
			c.TracesOK++
		}
		c.Traces = append(c.Traces, t)
	}
	if st, err := l.DelayStats(); err == nil {
		c.Late = make([]uint64, len(wan.LateBoundsUs)+1)
		for _, r := range st {
			for i, v := range r.Late {
				if i < len(c.Late) {
					c.Late[i] += v
				}
			}
			c.MaxLateUs = max(c.MaxLateUs, r.MaxUs)
		}
	}
	return c
}

func (c labCheck) print(out io.Writer) {
	fmt.Fprintf(out, "Lab check (%s, load %s): %d of %d site pairs within 10 %% or 2 ms of the matrix, largest error %.2f ms",
		c.Phase, c.Load, c.Within, len(c.Pairs), c.MaxErrMs)
	if len(c.Traces) > 0 {
		fmt.Fprintf(out, "; %d of %d traces list the expected routers", c.TracesOK, len(c.Traces))
	}
	fmt.Fprintln(out)
	for _, p := range c.Pairs {
		mark := ""
		if !p.Within {
			mark = "  <-- outside"
		}
		fmt.Fprintf(out, "  %-22s %-22s matrix %7.1f ms  measured min %7.1f  median %7.1f%s\n", p.NameA, p.NameB, p.MatrixMs, p.MinMs, p.MedianMs, mark)
	}
	for _, t := range c.Traces {
		if !t.OK {
			fmt.Fprintf(out, "  trace %d → %d: got %v, expected %v (path %v)\n", t.From, t.To, t.Got, t.Expected, t.Path)
		}
	}
	if len(c.Late) > 0 {
		fmt.Fprintf(out, "  delayer verdicts by lateness (≤ %v µs, beyond): %v; max %d µs\n", c.LateBoundsUs, c.Late, c.MaxLateUs)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
