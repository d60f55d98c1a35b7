package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var (
	singleColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	multiColor  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
)

// plotCDF draws Figure 6: the CDF of get latency for both networks. The x
// axis is logarithmic because the two differ by a factor, not an offset;
// gets answered in no time are drawn at latencyFloorMs.
func plotCDF(path string, rep *report) error {
	p := plot.New()
	work := fmt.Sprintf("paper workload, each key put by %.0f%% of the nodes", 100*rep.PutFraction)
	if rep.Workload == workZipf {
		work = fmt.Sprintf("Zipf workload (s = %g), each key put by %d nodes", rep.ZipfS, rep.Putters)
	}
	p.Title.Text = fmt.Sprintf("Get latency (paper Fig. 6), %d nodes on %s: %d keys, %s, %d gets per network\n"+
		"gets answered from the getter's own store take no time and are drawn at %g ms",
		rep.N, rep.Topology, rep.Keys, work, rep.Single.Gets, latencyFloorMs)
	// A long axis label would shrink the data area (gonum pads for it).
	p.X.Label.Text = "get latency (virtual ms, log scale)"
	p.Y.Label.Text = "fraction of gets"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	hi := latencyFloorMs * 10
	for _, c := range []struct {
		r    *netResult
		col  color.Color
		name string
	}{
		{rep.Single, singleColor, "single level"},
		{rep.Multi, multiColor, "3 levels (60 ms, 20 ms clusters)"},
	} {
		lats := c.r.latencies
		pts := make(plotter.XYs, len(lats))
		for j, v := range lats {
			pts[j] = plotter.XY{X: max(v, latencyFloorMs), Y: float64(j+1) / float64(len(lats))}
			hi = max(hi, v)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = c.col
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (p50 %.0f ms, p80 %.0f ms)", c.name, c.r.LatP50, c.r.LatP80), l)
	}
	// Bottom right lies below both curves.
	p.Legend.Top = false
	p.Legend.Left = false
	p.X.Min, p.X.Max = latencyFloorMs, hi*1.2
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
