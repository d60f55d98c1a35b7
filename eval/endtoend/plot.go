package main

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var configColors = []color.Color{
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

// latencyFloor keeps zero latencies on the log axis.
const latencyFloor = 1e-4

// plotCDFs draws the paper's two graphs: all clients, and the region's.
// Solid lines are clients beside a proxy, dashed ones clients that share
// no prefix with any proxy.
func plotCDFs(dir, name string, rep *report) error {
	for _, g := range []struct {
		file, who string
		pick      func(*runResult) []float64
	}{
		{name + ".png", "all clients", func(r *runResult) []float64 { return r.all }},
		{name + "-region.png", "clients in " + rep.Region, func(r *runResult) []float64 { return r.region }},
	} {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("End-to-end request latency (paper Fig. 5), %s: %d nodes on %s\nsolid: clients beside a proxy; dashed: clients sharing no prefix with any proxy",
			g.who, rep.N, rep.Topology)
		p.X.Label.Text = "request latency (virtual s, log scale)"
		p.Y.Label.Text = "fraction of requests"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		hi := latencyFloor * 10
		for vi, v := range variants {
			for ci, c := range configs {
				r := find(rep, c, v)
				if r == nil {
					continue
				}
				lats := g.pick(r)
				if len(lats) == 0 {
					continue
				}
				pts := make(plotter.XYs, len(lats))
				for j, x := range lats {
					pts[j] = plotter.XY{X: max(x, latencyFloor), Y: float64(j+1) / float64(len(lats))}
					hi = max(hi, x)
				}
				l, err := plotter.NewLine(pts)
				if err != nil {
					return err
				}
				l.Color = configColors[ci]
				l.Width = vg.Points(1.5)
				if vi == 1 {
					l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				}
				p.Add(l)
				p.Legend.Add(fmt.Sprintf("%s, %s (p50 %.3f s)", c, v, median(lats)), l)
			}
		}
		p.Legend.Top = false
		p.Legend.Left = false
		p.X.Min, p.X.Max = latencyFloor, hi*1.2
		p.Y.Min, p.Y.Max = 0, 1
		p.Add(plotter.NewGrid())
		if err := p.Save(9*vg.Inch, 6*vg.Inch, filepath.Join(dir, g.file)); err != nil {
			return err
		}
	}
	return nil
}

func median(sorted []float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[len(sorted)/2]
}
