//go:build linux

package main

import (
	"bytes"
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var placeColors = map[string]color.RGBA{
	servedSite:   {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	servedRegion: {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	servedOther:  {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	servedOrigin: {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

var placeLabels = map[string]string{
	servedSite:   "proxies of the crowd's site",
	servedRegion: "proxies of the rest of its region",
	servedOther:  "proxies of the other region",
	servedOrigin: "origin, after a coral-no-serve redirect",
}

// plotCrowds draws, for each run of the crowd (one panel each), the
// requests per second by where they were served.
func plotCrowds(path string, res Result) error {
	w := float64(res.Crowd.BinSeconds)
	var panels []*plot.Plot
	for _, c := range res.Crowds {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("A crowd at one site, load_threshold %s: requests per second by where they were served", c.LoadThreshold)
		p.X.Label.Text = "seconds since the crowd began"
		p.Y.Label.Text = "requests per second"
		p.Legend.Top = true
		for _, where := range placesServed {
			var xys plotter.XYs
			for i, b := range c.Bins {
				xys = append(xys, plotter.XY{X: (float64(i) + 0.5) * w, Y: float64(b[where]) / w})
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			l.Color, l.Width = placeColors[where], vg.Points(1.6)
			pts.Color, pts.Radius, pts.Shape = placeColors[where], vg.Points(2), draw.CircleGlyph{}
			p.Add(l, pts)
			p.Legend.Add(placeLabels[where], l, pts)
		}
		panels = append(panels, p)
	}
	return savePanels(path, panels)
}

// plotFair draws, side by side for the per-node budget and fair shares,
// the bytes the proxy served for each origin and the requests it
// redirected.
func plotFair(path string, res Result) error {
	bytesPlot, redirPlot := plot.New(), plot.New()
	bytesPlot.Title.Text = fmt.Sprintf("Two origins, one hot, behind one proxy with %s per hour: KiB served per origin", res.Fair.Budget)
	redirPlot.Title.Text = "Requests redirected to the origin (coral-no-serve), per origin"
	var names []string
	for _, f := range res.Fairs {
		names = append(names, "bandwidth_share "+f.Share)
	}
	width := vg.Points(24)
	for i, origin := range []string{"hot", "small"} {
		var kib, redir plotter.Values
		for _, f := range res.Fairs {
			s := f.Hot
			if origin == "small" {
				s = f.Small
			}
			kib = append(kib, float64(s.BytesServed)/1024)
			redir = append(redir, float64(s.Redirected))
		}
		for _, pl := range []struct {
			p *plot.Plot
			v plotter.Values
		}{{bytesPlot, kib}, {redirPlot, redir}} {
			bars, err := plotter.NewBarChart(pl.v, width)
			if err != nil {
				return err
			}
			bars.Color = []color.RGBA{placeColors[servedOrigin], placeColors[servedSite]}[i]
			bars.Offset = width * vg.Length(2*i-1) / 2
			pl.p.Add(bars)
			pl.p.Legend.Add(origin+" origin", bars)
		}
	}
	for _, p := range []*plot.Plot{bytesPlot, redirPlot} {
		p.NominalX(names...)
		p.Legend.Top = true
	}
	bytesPlot.Y.Label.Text = "KiB served by the proxy"
	redirPlot.Y.Label.Text = "requests redirected"
	return savePanels(path, []*plot.Plot{bytesPlot, redirPlot})
}

// savePanels writes the panels one above the other as a PNG.
func savePanels(path string, panels []*plot.Plot) error {
	const w, hEach = 22 * vg.Centimeter, 9 * vg.Centimeter
	img := vgimg.New(w, hEach*vg.Length(len(panels)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Points(14), PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10)}
	canvases := plot.Align(panelsColumn(panels), tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[i][0])
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func panelsColumn(panels []*plot.Plot) [][]*plot.Plot {
	out := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		out[i] = []*plot.Plot{p}
	}
	return out
}
