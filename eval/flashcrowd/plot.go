package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var sourceColors = map[string]color.RGBA{
	"all":       {A: 0xff},
	"local":     {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"collapsed": {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	"peer-l2":   {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"peer-l1":   {R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
	"peer-l0":   {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"origin":    {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"other":     {R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	"failed":    {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

var sourceLabels = map[string]string{
	"all":       "all requests",
	"local":     "local cache",
	"collapsed": "collapsed (joined a download at the proxy)",
	"peer-l2":   "peer, level 2 (metro)",
	"peer-l1":   "peer, level 1 (region)",
	"peer-l0":   "peer, level 0 (global)",
	"origin":    "origin",
	"other":     "other",
	"failed":    "failed",
}

// plotLoad draws the requests per minute by source over time, in bins:
// on top what the proxies' own caches did not serve, with the requests
// the origin received (the paper's Figure 4); below, every request.
func plotLoad(path string, rep *report) error {
	w := rep.BinSeconds
	perMin := 60 / w
	top, all := plot.New(), plot.New()
	top.Title.Text = fmt.Sprintf("Flash crowd: %d proxies, %d clients, origin behind %d kbit/s — requests not served by the proxy's own cache (cf. Figure 4)",
		rep.Params.Proxies, rep.Params.Clients, rep.Params.LineKbit)
	all.Title.Text = "All requests by source"
	if len(rep.BurstRequests) > 0 {
		all.Title.Text += fmt.Sprintf(" (the start burst's %d requests at t = 0 are in the first bin)", len(rep.BurstRequests))
	}
	series := func(get func(minuteRow) int) plotter.XYs {
		var xys plotter.XYs
		for _, r := range rep.Bins {
			xys = append(xys, plotter.XY{X: (r.Start + w/2) / 60, Y: float64(get(r)) * perMin})
		}
		return xys
	}
	add := func(p *plot.Plot, name string, xys plotter.XYs, dashed bool) error {
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		c := sourceColors[name]
		l.Color, l.Width = c, vg.Points(1.6)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		pts.Color, pts.Radius, pts.Shape = c, vg.Points(2), draw.CircleGlyph{}
		p.Add(l, pts)
		label := sourceLabels[name]
		if name == "origin" && p == top {
			label = "origin server: requests received"
		}
		p.Legend.Add(label, l, pts)
		return nil
	}
	originSeries := series(func(r minuteRow) int { return r.OriginFetches })
	if err := add(top, "origin", originSeries, false); err != nil {
		return err
	}
	for _, s := range []string{"peer-l0", "peer-l1", "peer-l2", "collapsed"} {
		if err := add(top, s, series(func(r minuteRow) int { return r.BySource[s] }), false); err != nil {
			return err
		}
	}
	for _, s := range []string{"local", "collapsed", "peer-l2", "peer-l1", "peer-l0", "origin", "other"} {
		if rep.Totals.BySource[s] == 0 {
			continue
		}
		if err := add(all, s, series(func(r minuteRow) int { return r.BySource[s] }), false); err != nil {
			return err
		}
	}
	if rep.Totals.Failed > 0 {
		if err := add(all, "failed", series(func(r minuteRow) int { return r.Failed }), true); err != nil {
			return err
		}
	}
	for _, p := range []*plot.Plot{top, all} {
		p.X.Label.Text = fmt.Sprintf("time since the start burst (minutes; bins of %.0f s)", w)
		if len(rep.BurstRequests) == 0 {
			p.X.Label.Text = fmt.Sprintf("time since the crowd's start (minutes; bins of %.0f s)", w)
		}
		p.Y.Label.Text = "requests per minute"
		p.X.Min, p.Y.Min = 0, 0
		p.Y.Tick.Marker = wholeTicks{}
		p.Legend.Top = true
		p.Legend.TextStyle.Font.Size = vg.Points(9)
		p.Add(plotter.NewGrid())
	}
	top.Title.TextStyle.Font.Size = vg.Points(11)
	all.Title.TextStyle.Font.Size = vg.Points(11)

	img := vgimg.New(11*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Points(6), PadY: vg.Points(14), PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10)}
	canvases := plot.Align([][]*plot.Plot{{top}, {all}}, tiles, dc)
	top.Draw(canvases[0][0])
	all.Draw(canvases[1][0])
	return savePNG(path, img)
}

// plotLatency draws the latency CDFs, log x, of all requests and by source
// (the paper's Figure 5 shows all requests, with DNS).
func plotLatency(path string, rep *report) error {
	p := plot.New()
	a := rep.Latency["all"]
	if a == nil {
		a = &latencies{}
	}
	p.Title.Text = fmt.Sprintf("Client latency, request to last byte of a %d-byte file (%d requests; p50 %s ms, p96 %s ms, p99 %s ms)",
		rep.Params.FileBytes, a.Count, evalrun.Ms(a.P50), evalrun.Ms(a.P96), evalrun.Ms(a.P99))
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	lo, hi := 1.0, 10.0
	for _, s := range append([]string{"all"}, sources...) {
		v := rep.lats[s]
		if len(v) == 0 {
			continue
		}
		var xys plotter.XYs
		for _, pt := range cdf(v, 1500) {
			x := max(pt[0], 0.01)
			lo, hi = min(lo, x), max(hi, x)
			xys = append(xys, plotter.XY{X: x, Y: pt[1]})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = sourceColors[s]
		l.Width = vg.Points(1.4)
		if s == "all" {
			l.Width = vg.Points(2.4)
		}
		p.Add(l)
		lt := rep.Latency[s]
		p.Legend.Add(fmt.Sprintf("%s (%d): p50 %s, p99 %s ms", sourceLabels[s], lt.Count, evalrun.Ms(lt.P50), evalrun.Ms(lt.P99)), l)
	}
	p.X.Min, p.X.Max = lo/1.5, hi*1.5
	p.Y.Min, p.Y.Max = 0, 1
	// In the empty middle: the fast curves rise on the left, the slow
	// ones on the right.
	p.Legend.Top = false
	p.Legend.Left = true
	p.Legend.XOffs = 2.2 * vg.Inch
	p.Legend.YOffs = 1.3 * vg.Inch
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Add(plotter.NewGrid())
	img := vgimg.New(10*vg.Inch, 5.5*vg.Inch)
	p.Draw(draw.New(img))
	return savePNG(path, img)
}

func savePNG(path string, img *vgimg.Canvas) error {
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

// wholeTicks are gonum's default ticks labelled without decimals.
type wholeTicks struct{}

func (wholeTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = fmt.Sprintf("%.0f", ts[i].Value)
		}
	}
	return ts
}
