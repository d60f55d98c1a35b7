package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var (
	coralColor = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	plainColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	boundColor = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
)

// plotCurve draws Figure 8: put RPCs per minute per node, nodes sorted by
// distance to the key; the plain DHT on the same axes when it ran. The y
// axis is logarithmic (values + 1) so both fit.
func plotCurve(path string, rep *report) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Put RPCs per minute per node for a hot key (n = %d, steady state, mean of the keys)", rep.Coral.N)
	p.X.Label.Text = "nodes sorted by XOR distance of their ID to the key (closest first)"
	p.Y.Label.Text = "put RPCs received per minute + 1"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	add := func(r *run, c color.Color, name string) error {
		pts := make(plotter.XYs, len(r.Steady))
		for i, v := range r.Steady {
			pts[i] = plotter.XY{X: float64(i), Y: v + 1}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = c
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	if err := add(rep.Coral, coralColor, "Coral (b = 1, β = 12)"); err != nil {
		return err
	}
	if rep.Plain != nil {
		if err := add(rep.Plain, plainColor, "plain DHT (greedy, store at closest)"); err != nil {
			return err
		}
	}
	bound := plotter.NewFunction(func(float64) float64 { return float64(rep.Coral.Predict) + 1 })
	bound.Color = boundColor
	bound.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(bound)
	p.Legend.Add(fmt.Sprintf("beta * ceil(log2 n) = %d", rep.Coral.Predict), bound)
	p.Legend.Top = true
	p.X.Min, p.X.Max = 0, float64(rep.Coral.N)
	p.Y.Min = 1
	hi := float64(rep.Coral.Predict) * 2
	for _, r := range []*run{rep.Coral, rep.Plain} {
		if r != nil {
			hi = math.Max(hi, r.MaxSteady+1)
		}
	}
	p.Y.Max = hi * 1.5
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}

// plotSweep draws the closest node's load against network size.
func plotSweep(path string, runs []*run) error {
	p := plot.New()
	p.Title.Text = "Load on the closest and the busiest node for a hot key vs network size"
	p.X.Label.Text = "nodes (log scale)"
	p.Y.Label.Text = "put RPCs per minute"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	var got, pred plotter.XYs
	for _, r := range runs {
		got = append(got, plotter.XY{X: float64(r.N), Y: r.ClosestSteady})
		pred = append(pred, plotter.XY{X: float64(r.N), Y: float64(r.Predict)})
	}
	l, s, err := plotter.NewLinePoints(got)
	if err != nil {
		return err
	}
	l.Color, s.Color = coralColor, coralColor
	s.Shape = draw.CircleGlyph{}
	p.Add(l, s)
	p.Legend.Add("closest node, mean of the hot keys", l, s)
	var worst plotter.XYs
	for _, r := range runs {
		worst = append(worst, plotter.XY{X: float64(r.N), Y: r.ClosestWorst})
	}
	wl, ws, err := plotter.NewLinePoints(worst)
	if err != nil {
		return err
	}
	wl.Color, ws.Color = plainColor, plainColor
	wl.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	ws.Shape = draw.TriangleGlyph{}
	p.Add(wl, ws)
	p.Legend.Add("closest node, worst hot key", wl, ws)
	var busiest plotter.XYs
	for _, r := range runs {
		busiest = append(busiest, plotter.XY{X: float64(r.N), Y: r.MaxSteady})
	}
	bl, bs, err := plotter.NewLinePoints(busiest)
	if err != nil {
		return err
	}
	bl.Color, bs.Color = boundColor, boundColor
	bs.Shape = draw.SquareGlyph{}
	p.Add(bl, bs)
	p.Legend.Add("busiest node, any hot key", bl, bs)
	b, err := plotter.NewLine(pred)
	if err != nil {
		return err
	}
	b.Color = boundColor
	b.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(b)
	p.Legend.Add("beta * ceil(log2 n)", b)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Min = 0
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

// plotRepeats draws, for every topology and seed, the closest and the
// busiest node of each hot key beside the bound.
func plotRepeats(path string, reps []*repeat) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Put RPCs per minute on a hot key, n = %d: every topology, seed and key", reps[0].Run.N)
	p.X.Label.Text = "run (topology / seed)"
	p.Y.Label.Text = "put RPCs received per minute (steady)"
	var closest, busiest plotter.XYs
	labels := make([]plot.Tick, len(reps))
	for i, rp := range reps {
		x := float64(i + 1)
		for _, v := range rp.Run.ClosestByKey {
			closest = append(closest, plotter.XY{X: x - 0.1, Y: v})
		}
		for _, v := range rp.Run.BusiestByKey {
			busiest = append(busiest, plotter.XY{X: x + 0.1, Y: v})
		}
		name := rp.Topology
		if len(name) > 5 {
			name = name[:5]
		}
		labels[i] = plot.Tick{Value: x, Label: fmt.Sprintf("%s/%d", name, rp.Seed)}
	}
	cs, err := plotter.NewScatter(closest)
	if err != nil {
		return err
	}
	cs.Color, cs.Shape = coralColor, draw.CircleGlyph{}
	p.Add(cs)
	p.Legend.Add("closest node, each hot key", cs)
	bs, err := plotter.NewScatter(busiest)
	if err != nil {
		return err
	}
	bs.Color, bs.Shape = plainColor, draw.TriangleGlyph{}
	p.Add(bs)
	p.Legend.Add("busiest node, each hot key", bs)
	bound := plotter.NewFunction(func(float64) float64 { return float64(reps[0].Run.Predict) })
	bound.Color = boundColor
	bound.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(bound)
	p.Legend.Add(fmt.Sprintf("beta * ceil(log2 n) = %d", reps[0].Run.Predict), bound)
	p.Legend.Top = true
	p.X.Tick.Marker = plot.ConstantTicks(labels)
	p.X.Min, p.X.Max = 0.5, float64(len(reps))+0.5
	p.Y.Min = 0
	hi := float64(reps[0].Run.Predict) * 1.5
	for _, rp := range reps {
		hi = math.Max(hi, rp.Run.MaxSteady)
	}
	p.Y.Max = hi * 1.15
	return p.Save(9*vg.Inch, 4.5*vg.Inch, path)
}

// plotZipf draws, for each run of the Zipf workload, the requests each node
// received per minute, busiest first, with the per-key bound for scale.
func plotZipf(path string, rep *report) error {
	p := plot.New()
	p.Title.Text = "Requests per minute per node, all keys, Zipf workload (steady state)"
	p.X.Label.Text = "nodes, busiest first"
	p.Y.Label.Text = "gets, put probes and stores received per minute + 1"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	colors := []color.Color{coralColor, plainColor, boundColor, color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}}
	hi := 1.0
	for i, r := range rep.Zipf {
		pts := make(plotter.XYs, len(r.Loads))
		for j, v := range r.Loads {
			pts[j] = plotter.XY{X: float64(j), Y: v + 1}
			hi = math.Max(hi, v+1)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = colors[i%len(colors)]
		l.Dashes = [][]vg.Length{nil, {vg.Points(4), vg.Points(2)}}[i/len(colors)%2]
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s, seed %d", r.Topology, r.Seed), l)
	}
	if len(rep.Zipf) > 0 {
		b := rep.Zipf[0].Predict
		bound := plotter.NewFunction(func(float64) float64 { return float64(b) + 1 })
		bound.Color = boundColor
		bound.Dashes = []vg.Length{vg.Points(1), vg.Points(3)}
		p.Add(bound)
		p.Legend.Add(fmt.Sprintf("beta * ceil(log2 n) = %d (per key, for puts)", b), bound)
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 1, hi*2
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}
