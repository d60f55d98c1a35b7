//go:build linux

package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var palette = []color.Color{
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// floorS keeps zero latencies on a log axis.
const floorS = 1e-4

// cdfLine is the CDF of values (seconds) as a line.
func cdfLine(values []float64, c color.Color, dashed bool) (*plotter.Line, float64, error) {
	v := slices.Clone(values)
	slices.Sort(v)
	pts := make(plotter.XYs, len(v))
	hi := floorS
	for i, x := range v {
		pts[i] = plotter.XY{X: max(x, floorS), Y: float64(i+1) / float64(len(v))}
		hi = max(hi, x)
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, 0, err
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	return l, hi, nil
}

func seconds(rs []request, keep func(request) bool) []float64 {
	var out []float64
	for _, r := range rs {
		if r.OK && keep(r) {
			out = append(out, r.LatencyMs/1000)
		}
	}
	return out
}

// plotEndToEnd draws Figure 5 on the real servers: the CDF of request
// latency per configuration (solid: clients beside a proxy; dashed:
// clients in a site without one), with the virtual-time p50 and p96 of
// the same configuration (clients beside a proxy) as crosses.
func plotEndToEnd(path, title string, runs []*e2eRun, v *endToEndVirtual) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "request latency: resolution + fetch (s, log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	hi := floorS * 10
	for ci, r := range runs {
		for ki, kind := range []string{kindBeside, kindNoProxy} {
			vals := seconds(r.Requests, func(q request) bool { return q.Kind == kind })
			if len(vals) == 0 {
				continue
			}
			l, h, err := cdfLine(vals, palette[ci], ki == 1)
			if err != nil {
				return err
			}
			hi = max(hi, h)
			p.Add(l)
			p.Legend.Add(fmt.Sprintf("%s, %s (p50 %.3f s)", r.Config.Name, kind, pct(sortedCopy(vals), 50)), l)
		}
		if v == nil {
			continue
		}
		for _, res := range v.Results {
			if res.Config != r.Config.Name || !strings.HasPrefix(res.Variant, "beside") {
				continue
			}
			pts := plotter.XYs{{X: max(res.AllP50, floorS), Y: 0.5}, {X: max(res.AllP96, floorS), Y: 0.96}}
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return err
			}
			sc.GlyphStyle.Color = palette[ci]
			sc.GlyphStyle.Shape = draw.CrossGlyph{}
			sc.GlyphStyle.Radius = vg.Points(5)
			p.Add(sc)
			p.Legend.Add(fmt.Sprintf("%s, virtual time (p50, p96)", r.Config.Name), sc)
		}
	}
	p.Legend.Top = false
	p.Legend.Left = false
	p.X.Min, p.X.Max = floorS*10, hi*1.2
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	return p.Save(10*vg.Inch, 6.5*vg.Inch, path)
}

// plotCrowd draws Figure 4: requests per minute by where their bytes came
// from, and the origin's fetches; and the client latency CDF.
func plotCrowd(dir, prefix string, c *crowdRun) error {
	p := plot.New()
	p.Title.Text = "Flash crowd on real servers across the emulated wide area (paper Fig. 4)"
	p.X.Label.Text = "minute"
	p.Y.Label.Text = "requests (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	sources := []string{"local", "collapsed", "peer-l2", "peer-l1", "peer-l0", "origin"}
	for si, src := range sources {
		var pts plotter.XYs
		for _, m := range c.Minutes {
			n := m.BySource[src]
			if src == "origin" {
				n = m.OriginFetches
			}
			pts = append(pts, plotter.XY{X: float64(m.Minute), Y: max(float64(n), 0.5)})
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, s.Color = palette[si%len(palette)], palette[si%len(palette)]
		p.Add(l, s)
		name := src
		if src == "origin" {
			name = "origin fetches (all proxies)"
		}
		p.Legend.Add(name, l, s)
	}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, prefix+"-flashcrowd.png")); err != nil {
		return err
	}
	q := plot.New()
	q.Title.Text = "Flash crowd: client latency (resolution + fetch)"
	q.X.Label.Text = "latency (s, log scale)"
	q.Y.Label.Text = "fraction of requests"
	q.X.Scale = plot.LogScale{}
	q.X.Tick.Marker = plot.LogTicks{Prec: -1}
	hi := floorS * 10
	for ki, kind := range kinds {
		vals := seconds(c.Requests, func(r request) bool { return r.Kind == kind })
		if len(vals) == 0 {
			continue
		}
		l, h, err := cdfLine(vals, palette[ki], false)
		if err != nil {
			return err
		}
		hi = max(hi, h)
		q.Add(l)
		q.Legend.Add(fmt.Sprintf("%s (p50 %.3f s)", kind, pct(sortedCopy(vals), 50)), l)
	}
	q.Legend.Top = false
	q.Legend.Left = false
	q.X.Min, q.X.Max = floorS*10, hi*1.2
	q.Y.Min, q.Y.Max = 0, 1
	q.Add(plotter.NewGrid())
	return q.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, prefix+"-flashcrowd-latency.png"))
}

func sortedCopy(v []float64) []float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s
}
