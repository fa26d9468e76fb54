package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// outageMark is a breaker transition, drawn as a dashed line on the
// proxy's panel.
type outageMark struct {
	at    time.Duration // since the run's start
	label string
}

// latency bounds of the log-scale y axis, in milliseconds.
const yMinMs, yMaxMs = 0.05, 5000

// drawOutage draws the outage-cost run as an SVG: for direct access and for
// nora-breaker side by side, each request's client latency (log scale)
// against when it was sent, requests that waited out the client's timeout
// apart from those answered at once, the proxy's breaker transitions
// marked, and on the direct panel the moment the proxied run was done.
func drawOutage(path string, direct, proxied *trace, marks []outageMark, timeout time.Duration) error {
	left, err := outagePanel(fmt.Sprintf("direct: %d requests, done after %.1f s",
		len(direct.points), direct.span().Seconds()), direct, timeout)
	if err != nil {
		return err
	}
	right, err := outagePanel(fmt.Sprintf("through nora-breaker: done after %.2f s", proxied.span().Seconds()),
		proxied, timeout)
	if err != nil {
		return err
	}
	for i, m := range marks {
		if err := markAt(right, m.at.Seconds(), m.label, i); err != nil {
			return err
		}
	}
	if err := markAt(left, proxied.span().Seconds(), "the same requests through nora-breaker were all done here", 0); err != nil {
		return err
	}
	const w, h = 11 * vg.Inch, 4 * vg.Inch
	img := vgsvg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 6, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	// Both panels have the same y axis, so plain tiles line their data
	// areas up (plot.Align pads the top for reasons of its own).
	left.Draw(tiles.At(dc, 0, 0))
	right.Draw(tiles.At(dc, 1, 0))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := img.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// outagePanel is one side: a scatter of latency against send time, split
// into requests that waited (at least 90 % of the client timeout, or no
// answer) and requests answered sooner.
func outagePanel(title string, t *trace, timeout time.Duration) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "request sent at (s)"
	// A short label: gonum pads the top by a rotated label's length.
	p.Y.Label.Text = "latency (ms, log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = yMinMs, yMaxMs
	p.X.Min = 0
	// Bottom left, above the fastest answers: the part of the panel that
	// stays empty in an outage run.
	p.Legend.Top = false
	p.Legend.Left = true
	p.Legend.XOffs, p.Legend.YOffs = vg.Millimeter*4, vg.Millimeter*22
	colTimeout := color.RGBA{R: 0xcf, G: 0x22, B: 0x2e, A: 0xff}
	colFast := color.RGBA{R: 0x09, G: 0x69, B: 0xda, A: 0xff}
	var waited, fast plotter.XYs
	for _, pt := range t.points {
		ms := min(max(float64(pt.latency)/float64(time.Millisecond), yMinMs), yMaxMs)
		xy := plotter.XY{X: pt.at.Seconds(), Y: ms}
		if pt.status == 0 || pt.latency >= timeout*9/10 {
			waited = append(waited, xy)
		} else {
			fast = append(fast, xy)
		}
	}
	p.X.Max = max(t.span().Seconds()*1.05, 0.1)
	for _, s := range []struct {
		xys   plotter.XYs
		col   color.Color
		label string
	}{
		{waited, colTimeout, fmt.Sprintf("waited out a timeout (%d)", len(waited))},
		{fast, colFast, fmt.Sprintf("answered at once (%d)", len(fast))},
	} {
		if len(s.xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(s.xys)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle.Color = s.col
		sc.GlyphStyle.Radius = vg.Points(1.6)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		p.Add(sc)
		p.Legend.Add(s.label, sc)
	}
	return p, nil
}

// markAt draws a labelled dashed vertical line at x seconds. The label
// sits near the top, on the side of the line with more room. Several marks
// close together stack their labels downwards (row).
func markAt(p *plot.Plot, x float64, label string, row int) error {
	ln, err := plotter.NewLine(plotter.XYs{{X: x, Y: yMinMs}, {X: x, Y: yMaxMs}})
	if err != nil {
		return err
	}
	colMark := color.RGBA{R: 0x57, G: 0x60, B: 0x6a, A: 0xff}
	ln.LineStyle.Color = colMark
	ln.LineStyle.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
	if x > p.X.Max {
		p.X.Max = x * 1.05
	}
	y := yMaxMs / 2.2 / math.Pow(2.2, float64(row))
	lb, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: x, Y: y}}, Labels: []string{label}})
	if err != nil {
		return err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].Color = colMark
		lb.TextStyle[i].Font.Size = vg.Points(8)
		lb.TextStyle[i].XAlign = text.XLeft
		lb.Offset.X = vg.Points(3)
		if x > (p.X.Min+p.X.Max)*0.55 {
			lb.TextStyle[i].XAlign = text.XRight
			lb.Offset.X = -vg.Points(3)
		}
	}
	p.Add(ln, lb)
	return nil
}
