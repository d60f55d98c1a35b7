package clusterq

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/coralcdn/coral/eval/internal/topology"
)

// lettered is how many of the largest clusters get a letter glyph and a
// legend entry of their own.
const lettered = 12

// letterColors are the colours of the lettered clusters, largest first:
// the Tableau 10 palette plus two dark tones, distinct enough side by side.
var letterColors = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
	{0xe3, 0x77, 0xc2, 0xff}, {0x17, 0xbe, 0xcf, 0xff}, {0xbc, 0xbd, 0x22, 0xff},
	{0x00, 0x3f, 0x5c, 0xff}, {0x7a, 0x00, 0x3c, 0xff}, {0x3b, 0x6e, 0x00, 0xff},
}

var singletonColor = color.RGBA{0xa0, 0xa0, 0xa0, 0xff}

// otherColor gives the remaining non-singleton clusters (rank ≥ lettered)
// colours spread around the hue circle by the golden angle, so that
// neighbouring ranks differ; they are told apart by colour only.
func otherColor(rank int) color.RGBA {
	h := math.Mod(float64(rank)*0.618033988749895, 1) * 6
	s, v := 0.65, 0.80
	if rank%2 == 1 {
		v = 0.60
	}
	c := v * s
	x := c * (1 - math.Abs(math.Mod(h, 2)-1))
	var r, g, b float64
	switch int(h) {
	case 0:
		r, g = c, x
	case 1:
		r, g = x, c
	case 2:
		g, b = c, x
	case 3:
		g, b = x, c
	case 4:
		r, b = x, c
	default:
		r, b = c, x
	}
	mn := v - c
	to := func(f float64) uint8 { return uint8(math.Round(255 * (f + mn))) }
	return color.RGBA{to(r), to(g), to(b), 0xff}
}

// letterGlyph draws a capital letter centred on the point, in the glyph's
// colour, about as tall as the glyph's diameter. Used as a scatter shape it
// also gives the legend thumbnail.
type letterGlyph struct{ letter string }

func (g letterGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	fnt := plot.DefaultFont
	fnt.Variant = "Sans"
	c.FillText(text.Style{
		Color:   sty.Color,
		Font:    font.From(fnt, 2.6*sty.Radius),
		XAlign:  draw.XCenter,
		YAlign:  draw.YCenter,
		Handler: plot.DefaultTextHandler,
	}, pt, g.letter)
}

// nodeCoords returns each node's plotting position (longitude, latitude):
// its site's coordinates, with the nodes of one site spread evenly on a
// small circle around it so that co-located nodes stay visible. The offset
// depends only on the node's rank among its site-mates in placed order.
func nodeCoords(m *topology.Matrix, placed []topology.Node) plotter.XYs {
	const radius = 0.9 // degrees
	perSite := make(map[int]int)
	for _, nd := range placed {
		perSite[nd.Site]++
	}
	rank := make(map[int]int)
	xy := make(plotter.XYs, len(placed))
	for i, nd := range placed {
		s := m.Sites[nd.Site]
		xy[i] = plotter.XY{X: s.Lon, Y: s.Lat}
		if k := perSite[nd.Site]; k > 1 {
			// A per-site phase keeps neighbouring sites' patterns from
			// lining up.
			a := 2*math.Pi*float64(rank[nd.Site])/float64(k) + float64(nd.Site%7)
			xy[i].X += radius * math.Cos(a)
			xy[i].Y += radius * math.Sin(a)
		}
		rank[nd.Site]++
	}
	return xy
}

// PlotMap draws the paper's Figure 7 for one level: the nodes on a
// longitude/latitude plane (equirectangular, no coastlines), coloured by
// cluster. The 12 largest clusters are drawn as letters A–L with a legend
// entry each giving their size; the other non-singleton clusters as
// coloured dots; singletons as small grey dots. labels[i] is placed[i]'s
// cluster label, as for measure. The PNG goes to path, whose directory is
// created if needed.
func PlotMap(path string, m *topology.Matrix, placed []topology.Node, labels []string, level int, threshold time.Duration) error {
	if len(labels) != len(placed) {
		return fmt.Errorf("clusters: plotClusterMap: %d labels for %d nodes", len(labels), len(placed))
	}
	xy := nodeCoords(m, placed)
	_, members := groups(labels)
	// Largest first; ties by first appearance (the cluster index), so the
	// letters are deterministic.
	order := make([]int, len(members))
	for c := range order {
		order[c] = c
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(len(members[b]), len(members[a])) })

	p := plot.New()
	singletons, nonSingle := 0, 0
	var single plotter.XYs
	for _, c := range order {
		if len(members[c]) == 1 {
			singletons++
			single = append(single, xy[members[c][0]])
		} else {
			nonSingle++
		}
	}
	p.Title.Text = fmt.Sprintf("Coral level-%d clusters (RTT < %v), %s: %d nodes in %d clusters, %d of them singletons",
		level, threshold, m.Source, len(placed), len(members), singletons)
	p.X.Label.Text = "longitude (degrees)"
	p.Y.Label.Text = "latitude (degrees)"
	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{0xe0}
	grid.Horizontal.Color = color.Gray{0xe0}
	p.Add(grid)

	if len(single) > 0 {
		sc, err := plotter.NewScatter(single)
		if err != nil {
			return err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: singletonColor, Radius: vg.Points(1.3), Shape: draw.CircleGlyph{}}
		p.Add(sc)
	}
	// Non-singleton clusters, smallest drawn first so the big ones stay on
	// top.
	type layer struct {
		sc   *plotter.Scatter
		name string
	}
	var letters []layer
	var others *plotter.Scatter
	for r := nonSingle - 1; r >= 0; r-- {
		c := order[r]
		pts := make(plotter.XYs, len(members[c]))
		for i, nd := range members[c] {
			pts[i] = xy[nd]
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		if r < lettered {
			letter := string(rune('A' + r))
			sc.GlyphStyle = draw.GlyphStyle{Color: letterColors[r], Radius: vg.Points(3.2), Shape: letterGlyph{letter}}
			letters = append(letters, layer{sc, fmt.Sprintf("%s: %d nodes", letter, len(members[c]))})
		} else {
			sc.GlyphStyle = draw.GlyphStyle{Color: otherColor(r), Radius: vg.Points(2.2), Shape: draw.CircleGlyph{}}
			others = sc
		}
		p.Add(sc)
	}
	slices.Reverse(letters) // legend: A first
	for _, l := range letters {
		p.Legend.Add(l.name, l.sc)
	}
	if others != nil {
		smallest := len(members[order[nonSingle-1]])
		largest := len(members[order[lettered]])
		p.Legend.Add(fmt.Sprintf("%d other clusters of %d-%d nodes", nonSingle-lettered, smallest, largest), others)
	}
	if len(single) > 0 {
		grey, err := plotter.NewScatter(plotter.XYs{{}})
		if err != nil {
			return err
		}
		grey.GlyphStyle = draw.GlyphStyle{Color: singletonColor, Radius: vg.Points(1.3), Shape: draw.CircleGlyph{}}
		p.Legend.Add(fmt.Sprintf("%d singletons", singletons), grey)
	}
	// Bottom left is the South Pacific: no sites to hide.
	p.Legend.Top, p.Legend.Left = false, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(4), vg.Points(4)

	// A fixed world frame, widened if a node falls outside it.
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = -180, 180, -60, 80
	for _, pt := range xy {
		p.X.Min, p.X.Max = math.Min(p.X.Min, pt.X-2), math.Max(p.X.Max, pt.X+2)
		p.Y.Min, p.Y.Max = math.Min(p.Y.Min, pt.Y-2), math.Max(p.Y.Max, pt.Y+2)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return p.Save(12*vg.Inch, 6.5*vg.Inch, path)
}
