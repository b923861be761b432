package report

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Point is one measurement on a curve.
type Point struct{ X, Y float64 }

// Series is one scenario's line.
type Series struct {
	Name   string
	Points []Point
}

// palette keeps a scenario's colour the same in every chart.
var palette = map[string]color.RGBA{
	"plain":  {0x33, 0x33, 0x33, 0xff},
	"pbfs-0": {0x1f, 0x77, 0xb4, 0xff},
	"pbfs-1": {0x2c, 0xa0, 0x2c, 0xff},
	"pbfs-2": {0xd6, 0x27, 0x28, 0xff},
}

var extra = []color.RGBA{{0x94, 0x67, 0xbd, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0x17, 0xbe, 0xcf, 0xff}}

// Curves draws one line per series (points sorted by X) into a PNG at
// path: the latency-against-throughput charts every benchmark draws.
func Curves(path, title, xLabel, yLabel string, series []Series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	for i, s := range series {
		if len(s.Points) == 0 {
			continue
		}
		pts := slices.Clone(s.Points)
		slices.SortFunc(pts, func(a, b Point) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
		xy := make(plotter.XYs, len(pts))
		for j, pt := range pts {
			xy[j].X, xy[j].Y = pt.X, pt.Y
		}
		line, dots, err := plotter.NewLinePoints(xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", s.Name, err)
		}
		c, ok := palette[s.Name]
		if !ok {
			c = extra[i%len(extra)]
		}
		line.Color, dots.Color = c, c
		line.Width = vg.Points(1.5)
		p.Add(line, dots)
		p.Legend.Add(s.Name, line, dots)
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// LatencyCharts draws p50 and p99 latency against throughput as
// dir/<stem>-p50.png and -p99.png, with series(q) giving each scenario's
// points for quantile q (latency in ms), and returns the Markdown
// section that shows them.
func LatencyCharts(dir, stem, title, xLabel string, series func(q float64) []Series) (string, error) {
	md := "\n## Charts\n\n"
	for _, q := range []struct {
		name string
		p    float64
	}{{"p50", 0.5}, {"p99", 0.99}} {
		file := stem + "-" + q.name + ".png"
		if err := Curves(filepath.Join(dir, file), title+": "+q.name+" latency against throughput", xLabel, q.name+" latency, ms", series(q.p)); err != nil {
			return "", err
		}
		md += fmt.Sprintf("![%s latency against throughput](%s)\n\n", q.name, file)
	}
	return md, nil
}
