//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/coralcdn/coral/eval/internal/sim"
)

// comparison is one figure read on the real servers and in virtual time.
// A difference counts (Over25) when it is beyond 25 % and beyond the
// metric's floor: 5 ms for latencies and DNS times (a LAN round trip is
// not worth explaining), 5 s for the clusters' timing (the real side is
// sampled by each node's clock, the virtual one by the snapshot).
type comparison struct {
	Figure  string  `json:"figure"`
	Metric  string  `json:"metric"`
	Real    float64 `json:"real"`
	Virtual float64 `json:"virtual"`
	// DiffPct is (real − virtual) / virtual; Over25 flags |DiffPct| > 25.
	DiffPct float64 `json:"diff_pct"`
	Over25  bool    `json:"over_25pct"`
	// Model says what the virtual side is.
	Model string `json:"model"`
}

func row(fig, metric string, real, virtual float64, model string) comparison {
	c := comparison{Figure: fig, Metric: metric, Real: real, Virtual: virtual, Model: model}
	if virtual != 0 {
		c.DiffPct = 100 * (real - virtual) / virtual
	} else if real != 0 {
		c.DiffPct = 100
	}
	floor := 0.0
	switch {
	case strings.HasSuffix(metric, " ms"):
		floor = 5
	case strings.HasSuffix(metric, " s"):
		floor = 0.005
	case strings.Contains(metric, "seconds"):
		floor = 5
	}
	c.Over25 = (c.DiffPct > 25 || c.DiffPct < -25) && abs(real-virtual) > floor
	return c
}

// compare lines the real runs up against their virtual-time counterparts.
func compare(rep *wanReport) []comparison {
	var out []comparison
	if r, v := rep.Figure7.Real, rep.Figure7.Virtual; r != nil && v != nil {
		const model = "eval/internal/sim nodes on the same node sites (RTTs of the matrix)"
		rl, vl := r.last(), v.last()
		for li := range thresholds {
			lv := fmt.Sprintf("level %d", li+1)
			out = append(out,
				row("7", lv+" clusters", float64(rl.Quality[li].Clusters), float64(vl.Quality[li].Clusters), model),
				row("7", lv+" mean size", rl.Quality[li].MeanSize, vl.Quality[li].MeanSize, model),
				row("7", lv+" clusters meeting the 80 % rule", rl.Quality[li].PairRuleOK, vl.Quality[li].PairRuleOK, model),
				row("7", lv+" nodes with a neighbour not alone", rl.Quality[li].NonSingletonOfThose, vl.Quality[li].NonSingletonOfThose, model),
				row("7", lv+" seconds to the last cluster change", r.FormedS[li], v.FormedS[li], model))
		}
	}
	if v := rep.Figure5.Virtual; v != nil {
		const model = "eval/endtoend on the same node sites and workload"
		for _, run := range rep.Figure5.Real {
			for _, pair := range [][2]string{{kindBeside, "beside a proxy"}, {kindLAN, "no shared prefix"}} {
				var real *latencySummary
				for i := range run.Summary {
					if run.Summary[i].Class == pair[0] {
						real = &run.Summary[i]
					}
				}
				for _, res := range v.Results {
					if res.Config != run.Config.Name || res.Variant != pair[1] || real == nil {
						continue
					}
					name := run.Config.Name + ", " + pair[0]
					out = append(out,
						row("5", name+": p50 s", real.P50, res.AllP50, model),
						row("5", name+": p96 s", real.P96, res.AllP96, model),
						row("5", name+": DNS p50 ms", real.DNSP50, 1000*res.DNSP50, model),
						row("5", name+": share served at the client's site", real.SameSite, res.SameSite, model),
						row("5", name+": share whose answer names a proxy at the client's site", real.SiteInAnswer, res.SameSite, model))
				}
			}
		}
	}
	for _, v := range []struct {
		c    *crowdRun
		name string
	}{{rep.Figure4, ""}, {rep.Figure4PeerTimeout, ", longer peer_timeout"}} {
		c := v.c
		if c == nil {
			continue
		}
		const model = "the put+get tree of the clusters that formed (one origin fetch per file)"
		out = append(out, row("4", "origin fetches"+v.name, float64(c.OriginFetches), float64(c.Workload.Files), model))
		if c.Model == nil {
			continue
		}
		for _, k := range []string{"peer-l2", "peer-l1", "peer-l0"} {
			out = append(out, row("4", "peer fetches "+k+v.name, float64(c.PeerByLevel[k]), float64(c.Model[k]), model))
		}
	}
	return out
}

func printComparison(out io.Writer, cs []comparison) {
	fmt.Fprintln(out, "\nSimulation against reality (real, virtual, difference; * beyond 25 %):")
	for _, c := range cs {
		mark := ""
		if c.Over25 {
			mark = " *"
		}
		fmt.Fprintf(out, "  Fig. %s  %-62s %10.3f %10.3f %+8.0f %%%s\n", c.Figure, c.Metric, c.Real, c.Virtual, c.DiffPct, mark)
	}
}

// recompare derives Figure 4's models and the comparison of a result
// file again from the raw data it holds (the proxies' downloads, the
// clusters), with this code, and notes so in its provenance.
func recompare(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rep wanReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		return err
	}
	r := rep.Figure7.Real
	if r == nil || len(r.Snapshots) == 0 {
		return fmt.Errorf("%s: no clusters", path)
	}
	for _, c := range []*crowdRun{rep.Figure4, rep.Figure4PeerTimeout} {
		if c == nil {
			continue
		}
		switch {
		case c.Clusters != nil:
			c.Model = treeModel(r.Nodes, c.ProxyFetches, c.Clusters)
		case c == rep.Figure4:
			c.Model, c.Clusters = treeModel(r.Nodes, c.ProxyFetches, r.last().Labels), r.last().Labels
		default:
			c.Model = nil // its clusters were not recorded: no model
		}
		if len(c.Requests) > 0 {
			c.CDF = cdfs(c.Requests)
		}
	}
	for _, e := range rep.Figure5.Real {
		if len(e.Requests) > 0 {
			e.CDF = cdfs(e.Requests)
		}
	}
	rep.dropRequests()
	rep.Comparison = compare(&rep)
	printComparison(os.Stdout, rep.Comparison)
	commit := "unknown"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	const recomputed = "models and comparison recomputed from this file's raw data at "
	notes := []string{}
	for _, n := range strings.Split(rep.Provenance.Note, "; ") {
		if n != "" && !strings.HasPrefix(n, recomputed) {
			notes = append(notes, n)
		}
	}
	notes = append(notes, recomputed+commit+" (go run ./eval/wan -mode recompare)")
	rep.Provenance.Note = strings.Join(notes, "; ")
	return sim.WriteJSON(path, &rep)
}

// dropRequests leaves the requests out of the result file.
func (rep *wanReport) dropRequests() {
	for _, c := range []*crowdRun{rep.Figure4, rep.Figure4PeerTimeout} {
		if c != nil {
			c.Requests = nil
		}
	}
	for _, e := range rep.Figure5.Real {
		e.Requests = nil
	}
}

// meanRSS is the mean resident set size of the processes, in MiB.
func meanRSS(pids []int) float64 {
	var sum float64
	n := 0
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					kb, _ := strconv.ParseFloat(f[0], 64)
					sum += kb / 1024
					n++
				}
			}
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
