package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The parts of the SVG the tests read.
type svgDoc struct {
	Texts  []svgText  `xml:"text"`
	Rects  []svgRect  `xml:"rect"`
	Groups []svgGroup `xml:"g"`
}

type svgText struct {
	Class string  `xml:"class,attr"`
	X     float64 `xml:"x,attr"`
	Y     float64 `xml:"y,attr"`
	Text  string  `xml:",chardata"`
}

type svgRect struct {
	Class  string  `xml:"class,attr"`
	X      float64 `xml:"x,attr"`
	Y      float64 `xml:"y,attr"`
	Width  float64 `xml:"width,attr"`
	Height float64 `xml:"height,attr"`
}

type svgGroup struct {
	Class     string `xml:"class,attr"`
	Title     string `xml:"title"`
	Polylines []struct {
		Stroke string `xml:"stroke,attr"`
		Points string `xml:"points,attr"`
	} `xml:"polyline"`
	Circles []struct{} `xml:"circle"`
	Lines   []struct {
		Stroke string `xml:"stroke,attr"`
		Dash   string `xml:"stroke-dasharray,attr"`
	} `xml:"line"`
	Texts []svgText `xml:"text"`
}

func (d svgDoc) groups(class string) []svgGroup {
	var out []svgGroup
	for _, g := range d.Groups {
		if g.Class == class {
			out = append(out, g)
		}
	}
	return out
}

// parse checks that svg is well-formed XML, token by token, and decodes it.
func parse(t *testing.T, svg []byte) svgDoc {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
	}
	var d svgDoc
	if err := xml.Unmarshal(svg, &d); err != nil {
		t.Fatalf("decoding: %v", err)
	}
	return d
}

func render(t *testing.T, c Chart) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

type vertex struct{ x, y float64 }

func vertices(t *testing.T, points string) []vertex {
	t.Helper()
	var out []vertex
	for _, f := range strings.Fields(points) {
		xs, ys, ok := strings.Cut(f, ",")
		x, errX := strconv.ParseFloat(xs, 64)
		y, errY := strconv.ParseFloat(ys, 64)
		if !ok || errX != nil || errY != nil {
			t.Fatalf("bad vertex %q", f)
		}
		out = append(out, vertex{x, y})
	}
	return out
}

// scale is how the ticks, as drawn, map a data value to a pixel: through the first and the last
// tick's label and position.
type scale struct{ v0, p0, v1, p1 float64 }

func (s scale) at(v float64) float64 { return s.p0 + (v-s.v0)/(s.v1-s.v0)*(s.p1-s.p0) }

func tickScale(t *testing.T, g svgGroup, pos func(svgText) float64) (scale, []float64) {
	t.Helper()
	var values []float64
	for _, txt := range g.Texts {
		v, err := strconv.ParseFloat(txt.Text, 64)
		if err != nil {
			t.Fatalf("tick label %q: %v", txt.Text, err)
		}
		values = append(values, v)
	}
	if len(values) < 2 {
		t.Fatalf("%s: %d tick labels, want at least 2", g.Class, len(values))
	}
	first, last := g.Texts[0], g.Texts[len(g.Texts)-1]
	return scale{values[0], pos(first), values[len(values)-1], pos(last)}, values
}

// onPolyline reports whether p lies on a segment of vs, within tol pixels.
func onPolyline(p vertex, vs []vertex, tol float64) bool {
	if len(vs) == 1 {
		return math.Hypot(p.x-vs[0].x, p.y-vs[0].y) <= tol
	}
	for i := 1; i < len(vs); i++ {
		a, b := vs[i-1], vs[i]
		dx, dy := b.x-a.x, b.y-a.y
		u := 0.0
		if l := dx*dx + dy*dy; l > 0 {
			u = max(0, min(1, ((p.x-a.x)*dx+(p.y-a.y)*dy)/l))
		}
		if math.Hypot(p.x-(a.x+u*dx), p.y-(a.y+u*dy)) <= tol {
			return true
		}
	}
	return false
}

func TestWriteSVG(t *testing.T) {
	cases := map[string]struct {
		chart Chart
		// wantLines are the series drawn, by name; wantDots those drawn as a dot too.
		wantLines, wantDots []string
		wantLegend          []string
		wantNoData          bool
	}{
		"two series of different lengths": {
			chart: Chart{Title: "A 4-node job", XLabel: "seconds since apply", YLabel: "count", Series: []Series{
				{Name: "nodes Ready", Points: []Point{{0, 0}, {1.2, 1}, {2.5, 3}, {3.1, 4}, {7.9, 4}}},
				{Name: "pods Running", Points: []Point{{0, 0}, {4, 2}, {9.5, 4}}},
			}},
			wantLines:  []string{"nodes Ready", "pods Running"},
			wantLegend: []string{"nodes Ready", "pods Running"},
		},
		"points out of order are drawn in X order": {
			chart:     Chart{Series: []Series{{Name: "s", Points: []Point{{3, 1}, {1, 5}, {2, 2}}}}},
			wantLines: []string{"s"}, wantLegend: []string{"s"},
		},
		"several values at one X are all drawn": {
			chart:     Chart{Series: []Series{{Name: "s", Points: []Point{{0, 0}, {1, 0}, {1, 5}, {1, 3}, {2, 3}}}}},
			wantLines: []string{"s"}, wantLegend: []string{"s"},
		},
		"a single point": {
			chart:     Chart{Series: []Series{{Name: "one", Points: []Point{{5, 7}}}}},
			wantLines: []string{"one"}, wantDots: []string{"one"}, wantLegend: []string{"one"},
		},
		"all Y zero": {
			chart:     Chart{Series: []Series{{Name: "flat", Points: []Point{{0, 0}, {10, 0}, {20, 0}}}}},
			wantLines: []string{"flat"}, wantLegend: []string{"flat"},
		},
		"negative values": {
			chart:     Chart{Series: []Series{{Name: "delta", Points: []Point{{-2, -30}, {0, 5}, {2, 12}}}}},
			wantLines: []string{"delta"}, wantLegend: []string{"delta"},
		},
		"an empty series beside one with points": {
			chart: Chart{Series: []Series{
				{Name: "empty"},
				{Name: "full", Points: []Point{{0, 1}, {1, 2}}},
			}},
			wantLines: []string{"full"}, wantLegend: []string{"empty (no data)", "full"},
		},
		"only empty series": {
			chart:      Chart{Title: "nothing yet", Series: []Series{{Name: "a"}, {Name: "b", Points: []Point{{math.NaN(), 1}}}}},
			wantLegend: []string{"a (no data)", "b (no data)"}, wantNoData: true,
		},
		"no series": {
			chart:      Chart{Title: "nothing"},
			wantNoData: true,
		},
		"non-finite points are left out": {
			chart:     Chart{Series: []Series{{Name: "s", Points: []Point{{0, 1}, {1, math.Inf(1)}, {math.NaN(), 3}, {2, 2}}}}},
			wantLines: []string{"s"}, wantLegend: []string{"s"},
		},
		"names are escaped": {
			chart: Chart{Title: `<script>&"quotes"'`, XLabel: "a<b", YLabel: "c&d", Series: []Series{
				{Name: `<b>bold</b> & "more"`, Points: []Point{{0, 1}, {1, 2}}},
				{Name: "bell\a and newline\n", Points: []Point{{0, 2}, {1, 1}}},
			}},
			wantLines:  []string{`<b>bold</b> & "more"`, "bell\uFFFD and newline\n"},
			wantLegend: []string{`<b>bold</b> & "more"`, "bell\uFFFD and newline\n"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			svg := render(t, tc.chart)
			d := parse(t, svg)
			if again := render(t, tc.chart); !bytes.Equal(svg, again) {
				t.Errorf("two renderings differ")
			}

			var area svgRect
			for _, r := range d.Rects {
				if r.Class == "plot-area" {
					area = r
				}
			}
			if area.Width <= 0 || area.Height <= 0 {
				t.Fatalf("no plot area in\n%s", svg)
			}
			xTicks, yTicks := d.groups("x-ticks"), d.groups("y-ticks")
			if len(xTicks) != 1 || len(yTicks) != 1 {
				t.Fatalf("%d x-tick and %d y-tick groups, want 1 each", len(xTicks), len(yTicks))
			}
			xs, xValues := tickScale(t, xTicks[0], func(txt svgText) float64 { return txt.X })
			ys, yValues := tickScale(t, yTicks[0], func(txt svgText) float64 { return txt.Y - 4 })
			if math.Abs(xs.p0-area.X) > 0.1 || math.Abs(xs.p1-(area.X+area.Width)) > 0.1 {
				t.Errorf("x ticks from %v to %v px, want the plot area's %v to %v", xs.p0, xs.p1, area.X, area.X+area.Width)
			}
			if math.Abs(ys.p0-(area.Y+area.Height)) > 0.1 || math.Abs(ys.p1-area.Y) > 0.1 {
				t.Errorf("y ticks from %v to %v px, want the plot area's %v to %v", ys.p0, ys.p1, area.Y+area.Height, area.Y)
			}
			if yValues[0] > 0 || yValues[len(yValues)-1] < 0 {
				t.Errorf("y ticks %v do not include 0", yValues)
			}
			for _, values := range [][]float64{xValues, yValues} {
				if step := values[1] - values[0]; !isNice(step) {
					t.Errorf("tick step %g of %v is not 1, 2 or 5 × 10^k", step, values)
				}
			}

			var drawn [][]Point // the points of the series with points, in order
			for _, s := range tc.chart.Series {
				if pts := clean(s.Points); len(pts) > 0 {
					drawn = append(drawn, pts)
				}
			}
			var lines, dots []string
			for i, g := range d.groups("series") {
				lines = append(lines, g.Title)
				if len(g.Circles) > 0 {
					dots = append(dots, g.Title)
				}
				if len(g.Polylines) != 1 {
					t.Fatalf("series %q: %d polylines, want 1", g.Title, len(g.Polylines))
				}
				if i >= len(drawn) {
					t.Fatalf("series %q drawn, but only %d series have points", g.Title, len(drawn))
				}
				vs := vertices(t, g.Polylines[0].Points)
				checkLine(t, g.Title, vs, drawn[i], area, xs, ys)
			}
			if diff := cmp.Diff(tc.wantLines, lines); diff != "" {
				t.Errorf("series drawn (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDots, dots); diff != "" {
				t.Errorf("series drawn as a dot (-want +got):\n%s", diff)
			}

			var legend, colours []string
			for _, g := range d.groups("legend") {
				for _, txt := range g.Texts {
					legend = append(legend, txt.Text)
				}
				for _, l := range g.Lines {
					colours = append(colours, l.Stroke+" "+l.Dash)
				}
			}
			if diff := cmp.Diff(tc.wantLegend, legend); diff != "" {
				t.Errorf("legend (-want +got):\n%s", diff)
			}
			seen := map[string]bool{}
			for _, c := range colours {
				if seen[c] {
					t.Errorf("legend colours %v repeat", colours)
				}
				seen[c] = true
			}

			var titles []string
			noData := false
			for _, txt := range d.Texts {
				switch txt.Class {
				case "title", "x-label", "y-label":
					titles = append(titles, txt.Text)
				case "no-data":
					noData = true
				}
			}
			var wantTitles []string
			for _, s := range []string{tc.chart.Title, tc.chart.XLabel, tc.chart.YLabel} {
				if s != "" {
					wantTitles = append(wantTitles, s)
				}
			}
			if diff := cmp.Diff(wantTitles, titles); diff != "" {
				t.Errorf("title and axis labels (-want +got):\n%s", diff)
			}
			if noData != tc.wantNoData {
				t.Errorf("\"no data\" shown: %v, want %v", noData, tc.wantNoData)
			}
		})
	}
}

// checkLine checks a series' polyline against its points: X never goes back, each segment is
// a step (horizontal or vertical), every vertex is in the plot area, the line starts at the first point and ends at the last, and passes through
// every point where the ticks place it.
func checkLine(t *testing.T, name string, vs []vertex, src []Point, area svgRect, xs, ys scale) {
	t.Helper()
	const tol = 0.15 // coordinates are written to a tenth of a pixel
	if len(vs) == 0 {
		t.Fatalf("series %q: empty polyline", name)
	}
	for i, v := range vs {
		if i > 0 && v.x < vs[i-1].x {
			t.Errorf("series %q: X goes back at vertex %d: %v", name, i, vs)
		}
		if i > 0 && v.x != vs[i-1].x && v.y != vs[i-1].y {
			t.Errorf("series %q: segment %v to %v is not a step", name, vs[i-1], v)
		}
		if v.x < area.X-tol || v.x > area.X+area.Width+tol || v.y < area.Y-tol || v.y > area.Y+area.Height+tol {
			t.Errorf("series %q: vertex %v outside the plot area %+v", name, v, area)
		}
	}
	at := func(p Point) vertex { return vertex{xs.at(p.X), ys.at(p.Y)} }
	first, last := at(src[0]), at(src[len(src)-1])
	if math.Hypot(vs[0].x-first.x, vs[0].y-first.y) > tol || math.Hypot(vs[len(vs)-1].x-last.x, vs[len(vs)-1].y-last.y) > tol {
		t.Errorf("series %q: line from %v to %v, want from %v to %v", name, vs[0], vs[len(vs)-1], first, last)
	}
	for _, p := range src {
		if !onPolyline(at(p), vs, tol) {
			t.Errorf("series %q: point %v (at %v px) is not on the line %v", name, p, at(p), vs)
		}
	}
}

// Each series keeps its colour, distinct from the others', dashed once the palette is used up.
func TestStrokesDistinct(t *testing.T) {
	seen := map[string]int{}
	for i := range len(palette) * len(dashes) {
		s := stroke(i, 2)
		if j, ok := seen[s]; ok {
			t.Fatalf("series %d and %d share the stroke %s", j, i, s)
		}
		seen[s] = i
	}
}

// A long series is drawn from a bounded number of points, in a small file, from its first point
// to its last.
func TestWriteSVGDownsamples(t *testing.T) {
	const n = 200_000
	pts := make([]Point, n)
	for i := range pts {
		// A climbing count with noise: the shape downsampling must keep.
		pts[i] = Point{float64(i) / 10, float64(i/1000) + float64(i%7)}
	}
	c := Chart{Title: "long", Series: []Series{{Name: "a", Points: pts}, {Name: "b", Points: pts[:n/2]}}}
	svg := render(t, c)
	if len(svg) > 300_000 {
		t.Errorf("%d bytes for two series of %d and %d points, want at most 300 kB", len(svg), n, n/2)
	}
	d := parse(t, svg)
	series := d.groups("series")
	if len(series) != 2 {
		t.Fatalf("%d series drawn, want 2", len(series))
	}
	xTicks, yTicks := d.groups("x-ticks")[0], d.groups("y-ticks")[0]
	xs, _ := tickScale(t, xTicks, func(txt svgText) float64 { return txt.X })
	ys, _ := tickScale(t, yTicks, func(txt svgText) float64 { return txt.Y - 4 })
	for i, g := range series {
		vs := vertices(t, g.Polylines[0].Points)
		if len(vs) > 2*maxPoints {
			t.Errorf("series %q: %d vertices, want at most %d", g.Title, len(vs), 2*maxPoints)
		}
		src := c.Series[i].Points
		first, last := src[0], src[len(src)-1]
		if math.Abs(vs[0].x-xs.at(first.X)) > 0.15 || math.Abs(vs[0].y-ys.at(first.Y)) > 0.15 {
			t.Errorf("series %q starts at %v, want the first point %v", g.Title, vs[0], first)
		}
		end := vs[len(vs)-1]
		if math.Abs(end.x-xs.at(last.X)) > 0.15 || math.Abs(end.y-ys.at(last.Y)) > 0.15 {
			t.Errorf("series %q ends at %v, want the last point %v", g.Title, end, last)
		}
	}
}

func TestDownsample(t *testing.T) {
	long := make([]Point, 10_001)
	for i := range long {
		long[i] = Point{float64(i), math.Sin(float64(i) / 50)}
	}
	long[4321].Y, long[7777].Y = 9, -9 // spikes
	cases := map[string]struct {
		pts   []Point
		limit int
	}{
		"short is kept":        {pts: long[:100], limit: 100},
		"long is bounded":      {pts: long, limit: 2000},
		"odd limit":            {pts: long, limit: 51},
		"few buckets":          {pts: long, limit: 4},
		"just above the limit": {pts: long[:2001], limit: 2000},
		"twice the limit":      {pts: long[:4000], limit: 2000},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := downsample(tc.pts, tc.limit)
			if len(tc.pts) <= tc.limit {
				if diff := cmp.Diff(tc.pts, got); diff != "" {
					t.Errorf("changed (-want +got):\n%s", diff)
				}
				return
			}
			if len(got) > tc.limit {
				t.Errorf("%d points, want at most %d", len(got), tc.limit)
			}
			if got[0] != tc.pts[0] || got[len(got)-1] != tc.pts[len(tc.pts)-1] {
				t.Errorf("from %v to %v, want from %v to %v", got[0], got[len(got)-1], tc.pts[0], tc.pts[len(tc.pts)-1])
			}
			for i := 1; i < len(got); i++ {
				if got[i].X <= got[i-1].X {
					t.Fatalf("not in order at %d: %v then %v", i, got[i-1], got[i])
				}
			}
			lo, hi := extremes(tc.pts)
			if gotLo, gotHi := extremes(got); gotLo != lo || gotHi != hi {
				t.Errorf("Y from %v to %v, want the extremes %v to %v kept", gotLo, gotHi, lo, hi)
			}
		})
	}
}

func extremes(pts []Point) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		lo, hi = min(lo, p.Y), max(hi, p.Y)
	}
	return lo, hi
}

func TestWriteFile(t *testing.T) {
	c := Chart{Title: "t", Series: []Series{{Name: "s", Points: []Point{{0, 0}, {1, 1}}}}}
	cases := map[string]struct {
		path    string
		wantErr string
	}{
		"svg":                     {path: "sub/plot.svg"},
		"upper-case extension":    {path: "plot.SVG"},
		"png is refused":          {path: "plot.png", wantErr: `plot.png: unsupported extension ".png", only .svg is supported`},
		"no extension is refused": {path: "plot", wantErr: `plot: unsupported extension "", only .svg is supported`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.path)
			err := WriteFile(path, c)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
					t.Errorf("error %v, want one naming %s and saying %q", err, path, tc.wantErr)
				}
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s exists after a refused write (%v)", path, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(data, render(t, c)) {
				t.Errorf("the file differs from WriteSVG's output")
			}
		})
	}
}

// A writer's error is returned.
func TestWriteSVGWriterError(t *testing.T) {
	boom := errors.New("boom")
	if err := (Chart{}).WriteSVG(failingWriter{boom}); !errors.Is(err, boom) {
		t.Errorf("error %v, want %v wrapped", err, boom)
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }
