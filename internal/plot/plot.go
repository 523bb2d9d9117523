// Package plot draws line charts as SVG with the standard library only: the figures the
// simulator and the benchmark measure over time, for a browser or a pull request.
package plot

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"cdplane/internal/atomicfile"
)

// Point is one measurement.
type Point struct{ X, Y float64 }

// Series is one line of a chart. Its points are drawn in the order of X as a step line: a value
// holds until the next point's X (counts over time). Points with a coordinate that is NaN,
// infinite or beyond ±1e300 are left out.
type Series struct {
	Name   string
	Points []Point
}

// Chart is a line chart: a title, axis labels and the series. The Y axis always includes 0.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
}

// Extension is the file extension WriteFile writes.
const Extension = ".svg"

// maxPoints is how many points of a series a chart keeps at most: far more than the plot's
// width in pixels, and a file of a few hundred kilobytes at most per series.
const maxPoints = 2000

// palette: Okabe and Ito's colours for colour-blind readers, without the yellow that is hard to
// see on white, darkest first. Series beyond it repeat the colours with a dash pattern.
var (
	palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000", "#E69F00", "#56B4E9"}
	dashes  = []string{"", "8 4", "2 3", "8 3 2 3"}
)

// Layout, in pixels.
const (
	width       = 800
	plotHeight  = 320
	marginRight = 24
	lineHeight  = 18
	charWidth   = 7 // an estimate for the 12px sans-serif labels
)

// CheckPath reports whether WriteFile can write path: its extension must be Extension.
func CheckPath(path string) error {
	if ext := filepath.Ext(path); !strings.EqualFold(ext, Extension) {
		return fmt.Errorf("cannot write the plot to %s: unsupported extension %q, only %s is supported", path, ext, Extension)
	}
	return nil
}

// WriteFile writes c as SVG to path (which must end in .svg), replacing the file atomically and
// creating its directory if missing.
func WriteFile(path string, c Chart) error {
	if err := CheckPath(path); err != nil {
		return err
	}
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		return err
	}
	return atomicfile.Write(path, b.Bytes(), 0o644)
}

// WriteSVG writes c as a standalone SVG document. The same chart gives the same bytes.
func (c Chart) WriteSVG(w io.Writer) error {
	var b bytes.Buffer
	c.render(&b)
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("writing the chart %q: %w", c.Title, err)
	}
	return nil
}

// layout maps data to pixels: the plot area and the two axes.
type layout struct {
	left, top, right, bottom float64
	x, y                     axis
}

func (l layout) px(x float64) float64 {
	return l.left + (x-l.x.lo)/(l.x.hi-l.x.lo)*(l.right-l.left)
}

func (l layout) py(y float64) float64 {
	return l.bottom - (y-l.y.lo)/(l.y.hi-l.y.lo)*(l.bottom-l.top)
}

func (c Chart) render(b *bytes.Buffer) {
	series := make([][]Point, len(c.Series))
	for i, s := range c.Series {
		series[i] = downsample(clean(s.Points), maxPoints)
	}
	l := c.layout(series)
	legendTop := l.bottom + 52
	height := legendTop + float64(len(series))*lineHeight + 8

	fmt.Fprintf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
	fmt.Fprintf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%s\" viewBox=\"0 0 %d %s\" font-family=\"sans-serif\" font-size=\"12\">\n", width, num(height), width, num(height))
	fmt.Fprintf(b, "<rect class=\"background\" width=\"%d\" height=\"%s\" fill=\"white\"/>\n", width, num(height))
	if c.Title != "" {
		fmt.Fprintf(b, "<text class=\"title\" x=\"%s\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">%s</text>\n", num(width/2), esc(c.Title))
	}
	fmt.Fprintf(b, "<rect class=\"plot-area\" x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\" fill=\"none\" stroke=\"#333333\"/>\n",
		num(l.left), num(l.top), num(l.right-l.left), num(l.bottom-l.top))
	l.renderTicks(b)
	if c.XLabel != "" {
		fmt.Fprintf(b, "<text class=\"x-label\" x=\"%s\" y=\"%s\" text-anchor=\"middle\">%s</text>\n", num((l.left+l.right)/2), num(l.bottom+38), esc(c.XLabel))
	}
	if c.YLabel != "" {
		x, y := num(16), num((l.top+l.bottom)/2)
		fmt.Fprintf(b, "<text class=\"y-label\" x=\"%s\" y=\"%s\" text-anchor=\"middle\" transform=\"rotate(-90 %s %s)\">%s</text>\n", x, y, x, y, esc(c.YLabel))
	}
	empty := true
	for i, pts := range series {
		if len(pts) > 0 {
			empty = false
			l.renderSeries(b, c.Series[i].Name, i, pts)
		}
	}
	if empty {
		fmt.Fprintf(b, "<text class=\"no-data\" x=\"%s\" y=\"%s\" text-anchor=\"middle\" fill=\"#666666\">no data</text>\n", num((l.left+l.right)/2), num((l.top+l.bottom)/2))
	}
	for i, s := range c.Series {
		y := legendTop + float64(i)*lineHeight
		name := s.Name
		if len(series[i]) == 0 {
			name += " (no data)"
		}
		fmt.Fprintf(b, "<g class=\"legend\"><line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\"%s/><text x=\"%s\" y=\"%s\">%s</text></g>\n",
			num(l.left), num(y-4), num(l.left+28), num(y-4), stroke(i, 3), num(l.left+36), num(y), esc(name))
	}
	fmt.Fprintf(b, "</svg>\n")
}

// layout places the plot area: room on the left for the longest Y tick label, on top for the
// title.
func (c Chart) layout(series [][]Point) layout {
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), 0.0, 0.0
	for _, pts := range series {
		for _, p := range pts {
			xlo, xhi = min(xlo, p.X), max(xhi, p.X)
			ylo, yhi = min(ylo, p.Y), max(yhi, p.Y)
		}
	}
	if xlo > xhi { // no points
		xlo, xhi = 0, 1
	}
	l := layout{x: niceAxis(xlo, xhi, 8), y: niceAxis(ylo, yhi, 6), top: 20}
	if c.Title != "" {
		l.top = 44
	}
	longest := 0
	for _, t := range l.y.ticks {
		longest = max(longest, len(l.y.label(t)))
	}
	l.left = float64(max(64, 36+charWidth*longest))
	l.right = width - marginRight
	l.bottom = l.top + plotHeight
	return l
}

// renderTicks draws the grid, the tick marks and their labels.
func (l layout) renderTicks(b *bytes.Buffer) {
	b.WriteString("<g class=\"x-ticks\">\n")
	for _, t := range l.x.ticks {
		x := num(l.px(t))
		fmt.Fprintf(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#e0e0e0\"/>", x, num(l.top), x, num(l.bottom))
		fmt.Fprintf(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#333333\"/>", x, num(l.bottom), x, num(l.bottom+5))
		fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\" text-anchor=\"middle\">%s</text>\n", x, num(l.bottom+18), esc(l.x.label(t)))
	}
	b.WriteString("</g>\n<g class=\"y-ticks\">\n")
	for _, t := range l.y.ticks {
		y := num(l.py(t))
		fmt.Fprintf(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#e0e0e0\"/>", num(l.left), y, num(l.right), y)
		fmt.Fprintf(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#333333\"/>", num(l.left-5), y, num(l.left), y)
		fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\">%s</text>\n", num(l.left-8), num(l.py(t)+4), esc(l.y.label(t)))
	}
	b.WriteString("</g>\n")
}

// renderSeries draws one series as a step line, and a dot when it has a single point.
func (l layout) renderSeries(b *bytes.Buffer, name string, i int, pts []Point) {
	fmt.Fprintf(b, "<g class=\"series\"><title>%s</title>\n<polyline fill=\"none\"%s points=\"", esc(name), stroke(i, 2))
	for k, v := range stepVertices(l, pts) {
		if k > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(v)
	}
	b.WriteString("\"/>\n")
	if len(pts) == 1 {
		fmt.Fprintf(b, "<circle cx=\"%s\" cy=\"%s\" r=\"3\" fill=\"%s\"/>\n", num(l.px(pts[0].X)), num(l.py(pts[0].Y)), palette[i%len(palette)])
	}
	b.WriteString("</g>\n")
}

// stepVertices are the "x,y" pixel vertices of the step line through pts (sorted by X): each
// point, preceded by the corner where the previous value meets its X. A vertex in the middle of
// a straight run (horizontal, or vertical between its ends) is left out.
func stepVertices(l layout, pts []Point) []string {
	type xy struct{ x, y float64 }
	between := func(a, b, c float64) bool { return min(a, c) <= b && b <= max(a, c) }
	var vs []xy
	add := func(x, y float64) {
		v := xy{round(l.px(x)), round(l.py(y))}
		n := len(vs)
		switch {
		case n > 0 && vs[n-1] == v:
		case n > 1 && vs[n-2].y == vs[n-1].y && vs[n-1].y == v.y,
			n > 1 && vs[n-2].x == vs[n-1].x && vs[n-1].x == v.x && between(vs[n-2].y, vs[n-1].y, v.y):
			vs[n-1] = v
		default:
			vs = append(vs, v)
		}
	}
	for k, p := range pts {
		if k > 0 {
			add(p.X, pts[k-1].Y)
		}
		add(p.X, p.Y)
	}
	out := make([]string, len(vs))
	for k, v := range vs {
		out[k] = num(v.x) + "," + num(v.y)
	}
	return out
}

// stroke is series i's stroke attributes.
func stroke(i, width int) string {
	s := fmt.Sprintf(" stroke=\"%s\" stroke-width=\"%d\"", palette[i%len(palette)], width)
	if d := dashes[(i/len(palette))%len(dashes)]; d != "" {
		s += fmt.Sprintf(" stroke-dasharray=\"%s\"", d)
	}
	return s
}

// maxAbs bounds the coordinates drawn: a range between two larger ones overflows float64.
const maxAbs = 1e300

// clean is pts without coordinates that are NaN or beyond ±maxAbs, sorted by X (equal X keep
// their order).
func clean(pts []Point) []Point {
	out := make([]Point, 0, len(pts))
	for _, p := range pts {
		if math.Abs(p.X) <= maxAbs && math.Abs(p.Y) <= maxAbs { // false for NaN
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b Point) int { return cmp.Compare(a.X, b.X) })
	return out
}

// downsample is pts (sorted by X) when it has at most limit points (limit >= 4), else at most
// limit of them keeping the shape: the first and the last, and of the points between, split in
// (limit-2)/2 buckets of consecutive points, the lowest and the highest of each bucket, in order.
func downsample(pts []Point, limit int) []Point {
	if len(pts) <= limit {
		return pts
	}
	inner := pts[1 : len(pts)-1]
	buckets := (limit - 2) / 2
	out := make([]Point, 0, limit)
	out = append(out, pts[0])
	for k := range buckets {
		lo, hi := k*len(inner)/buckets, (k+1)*len(inner)/buckets
		if lo == hi {
			continue
		}
		iMin, iMax := lo, lo
		for i := lo + 1; i < hi; i++ {
			if inner[i].Y < inner[iMin].Y {
				iMin = i
			}
			if inner[i].Y > inner[iMax].Y {
				iMax = i
			}
		}
		out = append(out, inner[min(iMin, iMax)])
		if iMin != iMax {
			out = append(out, inner[max(iMin, iMax)])
		}
	}
	return append(out, pts[len(pts)-1])
}

// num formats a pixel coordinate to a tenth of a pixel.
func num(v float64) string {
	return strconv.FormatFloat(round(v), 'f', -1, 64)
}

// round rounds a pixel coordinate to a tenth of a pixel.
func round(v float64) float64 {
	v = math.Round(v*10) / 10
	if v == 0 {
		return 0 // not -0
	}
	return v
}

// esc escapes s as XML character data or attribute value; characters XML cannot hold become
// U+FFFD.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}
