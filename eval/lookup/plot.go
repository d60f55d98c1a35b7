package main

import (
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotCDF draws the get latency distributions: static network, and after
// the kill for each replica setting.
func plotCDF(path string, rep *report) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Get latency, %d nodes on %s", rep.N, rep.Topology)
	p.X.Label.Text = "get latency (virtual seconds)"
	p.Y.Label.Text = "fraction of gets"
	colors := []color.Color{
		color.RGBA{0x1f, 0x77, 0xb4, 0xff},
		color.RGBA{0xd6, 0x27, 0x28, 0xff},
		color.RGBA{0xff, 0x7f, 0x0e, 0xff},
		color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	}
	curves := []struct {
		name string
		lats []float64
	}{{"static network", rep.Static.latencies}}
	for _, c := range rep.Churn {
		all := append(append([]float64(nil), c.PutOnce.latencies...), c.PutByFour.latencies...)
		curves = append(curves, struct {
			name string
			lats []float64
		}{fmt.Sprintf("after killing %d nodes, %d replica(s)", c.Killed, c.Replicas), sortedCopy(all)})
	}
	for i, c := range curves {
		pts := make(plotter.XYs, len(c.lats))
		for j, v := range c.lats {
			pts[j] = plotter.XY{X: v, Y: float64(j+1) / float64(len(c.lats))}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = colors[i%len(colors)]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(c.name, l)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Y.Min, p.Y.Max = 0, 1
	p.X.Min = 0
	p.Add(plotter.NewGrid())
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

func sortedCopy(v []float64) []float64 {
	out := slices.Clone(v)
	slices.Sort(out)
	return out
}
