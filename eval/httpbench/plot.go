package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	// Over TLS, the same hue as over HTTP, lighter.
	targetColors = map[string]color.RGBA{
		"coral":       {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		"file":        {R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
		"coral-tls":   {R: 0x8f, G: 0xbf, B: 0xe6, A: 0xff},
		"file-tls":    {R: 0xc4, G: 0xc4, B: 0xc4, A: 0xff},
		"respond":     {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		"respond-tls": {R: 0xc5, G: 0xb0, B: 0xd5, A: 0xff},
		"nginx":       {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		"coral-old":   {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	}
	limitColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	targetName = map[string]string{"coral": "coral_proxy (hit)", "file": "file_server", "nginx": "nginx proxy_cache (hit)",
		"coral-tls": "coral_proxy over TLS (hit)", "file-tls": "file_server over TLS", "coral-old": "coral_proxy, -baseline build (hit)",
		"respond": "respond (Caddy's floor)", "respond-tls": "respond over TLS"}
)

// plotBars draws two panels: the median req/s per size and target with
// every round's value as a dot, and the same relative to file_server (over
// TLS, to file_server over TLS) with the 0.9 acceptance line; the second
// panel's title gives coral_proxy over respond, issue 25's acceptance.
func plotBars(path string, rep *report) error {
	var names []string
	for _, n := range targetOrder {
		if len(rep.Summary) > 0 && rep.Summary[0].Targets[n] != nil {
			names = append(names, n)
		}
	}
	var sizes []string
	for _, ss := range rep.Summary {
		sizes = append(sizes, sizeLabel(ss.Size))
	}
	abs, rel := plot.New(), plot.New()
	abs.Title.Text = fmt.Sprintf("Cache-hit throughput, wrk -t%d -c%d, %d × %s (median, dots: rounds)", rep.Params.Threads, rep.Params.Conns, rep.Params.Rounds, rep.Params.Duration)
	abs.Y.Label.Text = "requests per second"
	rel.Title.Text = "Relative to file_server (median of per-round ratios)"
	if rep.Params.TLS {
		rel.Title.Text = "Relative to file_server over the same protocol (median of per-round ratios)"
	}
	rel.Title.Text += "\n" + floorTitle(rep)
	rel.Y.Label.Text = "req/s ÷ file_server's req/s"
	// Narrower bars with the TLS pair, so that a size's group keeps about
	// the same width.
	width := vg.Points(26)
	switch {
	case len(names) > 6:
		width = vg.Points(13)
	case len(names) > 3:
		width = vg.Points(17)
	}
	maxRel, maxAbs := 1.0, 0.0
	for i, n := range names {
		var vals, ratios plotter.Values
		var dots plotter.XYs
		for j, ss := range rep.Summary {
			ts := ss.Targets[n]
			vals = append(vals, ts.MedianRPS)
			switch n {
			case "coral":
				ratios = append(ratios, ss.MedianRatio)
			case "coral-tls":
				ratios = append(ratios, ss.MedianTLSRatio)
			case "nginx":
				ratios = append(ratios, ss.MedianNginxRatio)
			case "coral-old", "respond", "respond-tls":
				// Of the medians: the A/B's ratio is coral's over
				// coral-old's, issue 25's coral's over respond's.
				ratios = append(ratios, ts.MedianRPS/ss.Targets[baseline(n)].MedianRPS)
			default:
				ratios = append(ratios, 1)
			}
			maxRel = max(maxRel, ratios[len(ratios)-1])
			for _, v := range ts.RPS {
				dots = append(dots, plotter.XY{X: float64(j), Y: v})
				maxAbs = max(maxAbs, v)
			}
		}
		off := width * vg.Length(float64(i)-float64(len(names)-1)/2)
		col := targetColors[n]
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.Color, bars.LineStyle.Width, bars.Offset = col, 0, off
		abs.Add(bars)
		abs.Legend.Add(targetName[n], bars)
		abs.Add(&offsetDots{xys: dots, off: off, style: draw.GlyphStyle{Shape: draw.CircleGlyph{}, Radius: vg.Points(2), Color: color.Black}})

		rb, err := plotter.NewBarChart(ratios, width)
		if err != nil {
			return err
		}
		rb.Color, rb.LineStyle.Width, rb.Offset = col, 0, off
		rel.Add(rb)
		labels, err := ratioLabels(ratios, off)
		if err != nil {
			return err
		}
		rel.Add(labels)
	}
	limit := plotter.NewFunction(func(float64) float64 { return targetRatio })
	limit.Color = limitColor
	limit.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	limit.Width = vg.Points(1.2)
	rel.Add(limit)
	rel.Legend.Add(fmt.Sprintf("acceptance: coral_proxy ≥ %.1f× file_server", targetRatio), limit)
	for _, p := range []*plot.Plot{abs, rel} {
		p.NominalX(sizes...)
		p.X.Label.Text = "object size"
		p.X.Min, p.X.Max = -0.6, float64(len(sizes))-0.4
		p.Y.Min = 0
		p.Legend.Top = true
		p.Legend.TextStyle.Font.Size = vg.Points(9)
		p.Add(plotter.NewGrid())
	}
	rel.Y.Max = maxRel * 1.15
	abs.Y.Max = maxAbs * 1.15
	for _, p := range []*plot.Plot{abs, rel} {
		p.Legend.Left = true
		p.Legend.XOffs = vg.Points(6)
	}

	img := vgimg.New(13*vg.Inch, 5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(18), PadY: vg.Points(6), PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6)}
	canvases := plot.Align([][]*plot.Plot{{abs, rel}}, tiles, dc)
	abs.Draw(canvases[0][0])
	rel.Draw(canvases[0][1])
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

// floorTitle is coral_proxy over respond per size (median of the per-round
// ratios), over HTTP and over TLS, against issue 25's target.
func floorTitle(rep *report) string {
	var http, tls []string
	for _, ss := range rep.Summary {
		http = append(http, fmt.Sprintf("%.2f", ss.MedianRespondRatio))
		if ss.PassTLSRespond != nil {
			tls = append(tls, fmt.Sprintf("%.2f", ss.MedianTLSRespondRatio))
		}
	}
	t := fmt.Sprintf("coral_proxy ÷ respond (target ≥ %.1f) by size: %s", respondRatio, strings.Join(http, ", "))
	if len(tls) > 0 {
		t += "; over TLS " + strings.Join(tls, ", ")
	}
	return t
}

// ratioLabels writes each ratio above its bar.
func ratioLabels(ratios plotter.Values, off vg.Length) (*plotter.Labels, error) {
	var xys plotter.XYs
	var text []string
	for j, r := range ratios {
		xys = append(xys, plotter.XY{X: float64(j), Y: r})
		text = append(text, fmt.Sprintf("%.2f", r))
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: text})
	if err != nil {
		return nil, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = draw.XCenter
		l.TextStyle[i].Font.Size = vg.Points(8)
	}
	l.Offset = vg.Point{X: off, Y: vg.Points(3)}
	return l, nil
}

// offsetDots draws points shifted sideways by a fixed length, onto their
// bar of a grouped bar chart.
type offsetDots struct {
	xys   plotter.XYs
	off   vg.Length
	style draw.GlyphStyle
}

func (d *offsetDots) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	for _, p := range d.xys {
		c.DrawGlyph(d.style, vg.Point{X: trX(p.X) + d.off, Y: trY(p.Y)})
	}
}

func (d *offsetDots) DataRange() (xmin, xmax, ymin, ymax float64) {
	return plotter.XYRange(d.xys)
}
