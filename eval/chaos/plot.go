//go:build linux

package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotTimeline draws, per second, the client failures, the origin's
// fetches and the proxies' failed peer fetches, with a vertical line at
// each phase's event and the requests per second below.
func plotTimeline(path string, rep *report) error {
	top, bottom := plot.New(), plot.New()
	top.Title.Text = fmt.Sprintf("Chaos under load: %d nodes, %d objects — failures and origin fetches per second (DNS TTL %d s)",
		rep.Params.Nodes, rep.Objects, rep.TTL)
	bottom.Title.Text = "Client requests per second"
	series := func(get func(timeBin) float64) plotter.XYs {
		xys := plotter.XYs{}
		for _, b := range rep.Timeline {
			xys = append(xys, plotter.XY{X: float64(b.Second) + 0.5, Y: get(b)})
		}
		return xys
	}
	lines := []struct {
		label string
		c     color.RGBA
		get   func(timeBin) float64
		p     *plot.Plot
	}{
		{"client failures", color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, func(b timeBin) float64 { return float64(b.Failures) }, top},
		{"origin fetches", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, func(b timeBin) float64 { return float64(b.OriginFetches) }, top},
		{"failed peer fetches (proxies' metrics)", color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, func(b timeBin) float64 { return b.PeerFailed }, top},
		{"requests", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, func(b timeBin) float64 { return float64(b.Requests) }, bottom},
	}
	ymax := map[*plot.Plot]float64{top: 1, bottom: 1}
	for _, ln := range lines {
		xys := series(ln.get)
		for _, xy := range xys {
			ymax[ln.p] = max(ymax[ln.p], xy.Y)
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color, l.Width = ln.c, vg.Points(1.4)
		ln.p.Add(l)
		ln.p.Legend.Add(ln.label, l)
	}
	for _, p := range []*plot.Plot{top, bottom} {
		for _, ph := range rep.Phases {
			if ph.Skipped || ph.Phase == "warmup" {
				continue
			}
			m, err := plotter.NewLine(plotter.XYs{{X: ph.Start, Y: 0}, {X: ph.Start, Y: ymax[p] * 1.05}})
			if err != nil {
				return err
			}
			m.Color, m.Dashes = color.RGBA{A: 0xff}, []vg.Length{vg.Points(3), vg.Points(3)}
			p.Add(m)
			if p == top {
				lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: []plotter.XY{{X: ph.Start, Y: ymax[p] * 1.05}}, Labels: []string{" " + ph.Phase}})
				if err != nil {
					return err
				}
				p.Add(lbl)
			}
		}
		p.X.Label.Text = "seconds since the load started"
		p.X.Min, p.Y.Min = 0, 0
		p.Y.Max = ymax[p] * 1.4
		p.Legend.Top = true
		p.Legend.TextStyle.Font.Size = vg.Points(9)
		p.Title.TextStyle.Font.Size = vg.Points(11)
		p.Add(plotter.NewGrid())
	}
	img := vgimg.New(11*vg.Inch, 7*vg.Inch)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Points(6), PadY: vg.Points(14), PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10)}
	c := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, draw.New(img))
	top.Draw(c[0][0])
	bottom.Draw(c[1][0])
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
