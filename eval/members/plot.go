package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotResults draws one panel per measure against the fraction of
// attackers, before (dashed) and after (solid): honest gets of the keys
// put before (eclipse, storeflood), honest stores accepted (storeflood),
// honest share of honest tables (eclipse) and bytes reflected per byte
// sent (reflection).
func plotResults(path string, rep *report) error {
	panels := []struct {
		title, attack string
		value         func(*result) float64
		ymax          float64
	}{
		{"eclipse: honest gets (available keys)", "eclipse", func(r *result) float64 { return r.Available }, 1},
		{"eclipse: honest share of honest tables", "eclipse", func(r *result) float64 { return r.HonestShare }, 1},
		{"storeflood: honest stores accepted", "storeflood", func(r *result) float64 { return r.Stored }, 1},
		{"reflection: bytes reflected per byte sent", "reflection", func(r *result) float64 { return r.Amplification }, 0},
	}
	blue, red := color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff}
	plots := make([][]*plot.Plot, 2)
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "attacking members (%)"
		for _, mode := range []string{"before", "after"} {
			var pts plotter.XYs
			for _, r := range rep.Results {
				if r.Attack == pn.attack && r.Mode == mode {
					pts = append(pts, plotter.XY{X: 100 * r.Fraction, Y: pn.value(r)})
				}
			}
			if len(pts) == 0 {
				continue
			}
			l, s, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			l.Color, s.Color = blue, blue
			if mode == "before" {
				l.Color, s.Color = red, red
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			l.Width = vg.Points(1.5)
			p.Add(l, s)
			p.Legend.Add(fmt.Sprintf("%s (%s)", mode, map[string]string{"before": "TrustMembers", "after": "defaults"}[mode]), l, s)
		}
		p.Y.Min = 0
		if pn.ymax > 0 {
			p.Y.Max = pn.ymax * 1.02
		}
		p.Legend.Top, p.Legend.Left = false, true
		p.Add(plotter.NewGrid())
		plots[i/2] = append(plots[i/2], p)
	}
	img := vgimg.New(12*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	t := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, t, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
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
