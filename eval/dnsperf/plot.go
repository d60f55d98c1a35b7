package main

import (
	"fmt"
	"image/color"
	"slices"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var (
	coralColor = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	fileColor  = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
	// whoami, the floor: the colour httpbench gives Caddy's respond.
	whoamiColor = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
	limitColor  = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

// cdfPoints thins a sorted sample to at most about 3000 points for drawing,
// keeping every point of the top 0.5 % so the tail is exact.
func cdfPoints(lats []float64) plotter.XYs {
	n := len(lats)
	tail := n - max(n/200, 1000)
	step := max(1, n/2000)
	var pts plotter.XYs
	for i, v := range lats {
		if i >= tail || i%step == 0 || i == n-1 {
			pts = append(pts, plotter.XY{X: max(v, 0.001), Y: float64(i+1) / float64(n)})
		}
	}
	return pts
}

type curve struct {
	l    *latencyRun
	col  color.RGBA
	name string
	dash bool
	main bool // at the acceptance rate
	rate int
}

// plotCDF draws the latency CDFs of the zones at the latency runs' rate,
// with the 5 ms target.
func plotCDF(path string, rep *report) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("CoreDNS answer latency at %d qps (dnsperf -Q %d -v, %s per zone, one bin/coredns)\n"+
		"coral (classification cached) vs file (static zone, same %d-byte answers)\nand whoami (the floor, %d-byte answers); fainter lines: lower rates",
		rep.Latency.Rate, rep.Latency.Rate, rep.Params.LatDur, rep.Coral.Bytes, rep.Whoami.Bytes)
	p.X.Label.Text = "response latency seen by dnsperf (ms, log scale)"
	p.Y.Label.Text = "fraction of responses"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	lo, hi := targetP99Ms, targetP99Ms
	// The acceptance rate in full colour, the rest of the sweep fainter.
	var curves []curve
	for i, pt := range rep.Latency.Sweep {
		main := pt.Rate == rep.Latency.Rate
		// Lower rates fainter: mixed with more white.
		fade := 0.0
		if !main {
			fade = 0.75 - 0.35*float64(i)/float64(len(rep.Latency.Sweep))
		}
		curves = append(curves, curve{pt.Coral, faded(coralColor, fade), "coral", false, main, pt.Rate},
			curve{pt.File, faded(fileColor, fade), "file", true, main, pt.Rate},
			curve{pt.Whoami, faded(whoamiColor, fade), "whoami", true, main, pt.Rate})
	}
	slices.SortStableFunc(curves, func(a, b curve) int { // the main ones on top, first in the legend
		if a.main != b.main {
			if a.main {
				return 1
			}
			return -1
		}
		return 0
	})
	var mainLegend, otherLegend []func()
	for _, x := range curves {
		if x.l == nil || len(x.l.latencies) == 0 {
			continue
		}
		pts := cdfPoints(x.l.latencies)
		for _, pt := range pts {
			lo, hi = min(lo, pt.X), max(hi, pt.X)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = x.col
		l.Width = vg.Points(1.8)
		if !x.main {
			l.Width = vg.Points(1.2)
		}
		if x.dash {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		label := fmt.Sprintf("%s %d qps: p50 %s, p99 %s ms", x.name, x.rate, evalrun.Ms(x.l.P50), evalrun.Ms(x.l.P99))
		if x.main {
			mainLegend = append(mainLegend, func() { p.Legend.Add(label, l) })
		} else {
			otherLegend = append(otherLegend, func() { p.Legend.Add(label, l) })
		}
	}
	for _, f := range slices.Concat(mainLegend, otherLegend) {
		f()
	}
	limit, err := plotter.NewLine(plotter.XYs{{X: targetP99Ms, Y: 0}, {X: targetP99Ms, Y: 1}})
	if err != nil {
		return err
	}
	limit.Color = limitColor
	limit.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(limit)
	p.Legend.Add(fmt.Sprintf("target: p99 < %.0f ms", targetP99Ms), limit)
	// 0.99 line, to read the p99 off.
	p99, err := plotter.NewLine(plotter.XYs{{X: lo / 60, Y: 0.99}, {X: hi * 1.5, Y: 0.99}})
	if err != nil {
		return err
	}
	p99.Color = color.Gray{Y: 0xa0}
	p99.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
	p.Add(p99)
	// Top left, in room made by starting the axis well below the fastest
	// response.
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(4)
	p.Legend.YOffs = vg.Points(-4)
	p.Legend.Padding = vg.Points(2)
	p.Legend.ThumbnailWidth = vg.Points(25)
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.X.Min, p.X.Max = lo/60, hi*1.5
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}

// faded mixes c with white: f = 0 is c, 1 is white.
func faded(c color.RGBA, f float64) color.RGBA {
	mix := func(v uint8) uint8 { return uint8(float64(v) + (255-float64(v))*f) }
	return color.RGBA{R: mix(c.R), G: mix(c.G), B: mix(c.B), A: 0xff}
}
