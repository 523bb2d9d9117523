package plot

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNiceAxis(t *testing.T) {
	cases := map[string]struct {
		lo, hi    float64
		target    int
		wantTicks []float64
		wantLabel []string
	}{
		"counts up to 1152": {lo: 0, hi: 1152, target: 6,
			wantTicks: []float64{0, 200, 400, 600, 800, 1000, 1200},
			wantLabel: []string{"0", "200", "400", "600", "800", "1000", "1200"}},
		"tenths stay exact": {lo: 0, hi: 0.3, target: 3,
			wantTicks: []float64{0, 0.1, 0.2, 0.3},
			wantLabel: []string{"0.0", "0.1", "0.2", "0.3"}},
		"all zero": {lo: 0, hi: 0, target: 5,
			wantTicks: []float64{0, 0.2, 0.4, 0.6, 0.8, 1},
			wantLabel: []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
		"negative to positive": {lo: -3, hi: 7, target: 5,
			wantTicks: []float64{-4, -2, 0, 2, 4, 6, 8},
			wantLabel: []string{"-4", "-2", "0", "2", "4", "6", "8"}},
		"a single value": {lo: 5, hi: 5, target: 8,
			wantTicks: []float64{4.4, 4.6, 4.8, 5, 5.2, 5.4, 5.6},
			wantLabel: []string{"4.4", "4.6", "4.8", "5.0", "5.2", "5.4", "5.6"}},
		"seconds of a long run": {lo: 0, hi: 905.3, target: 8,
			wantTicks: []float64{0, 200, 400, 600, 800, 1000},
			wantLabel: []string{"0", "200", "400", "600", "800", "1000"}},
		"ends on ticks already": {lo: 10, hi: 50, target: 4,
			wantTicks: []float64{10, 20, 30, 40, 50},
			wantLabel: []string{"10", "20", "30", "40", "50"}},
		"large values in exponent form": {lo: 0, hi: 3e12, target: 3,
			wantTicks: []float64{0, 1e12, 2e12, 3e12},
			wantLabel: []string{"0", "1e+12", "2e+12", "3e+12"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a := niceAxis(tc.lo, tc.hi, tc.target)
			if diff := cmp.Diff(tc.wantTicks, a.ticks); diff != "" {
				t.Errorf("ticks (-want +got):\n%s", diff)
			}
			var labels []string
			for _, v := range a.ticks {
				labels = append(labels, a.label(v))
			}
			if diff := cmp.Diff(tc.wantLabel, labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if a.lo != a.ticks[0] || a.hi != a.ticks[len(a.ticks)-1] {
				t.Errorf("range [%v, %v], want the first and last tick", a.lo, a.hi)
			}
		})
	}
}

// Whatever the range, the ticks cover it, are evenly spaced by 1, 2 or 5 × 10^k, and are
// about as many as asked.
func TestNiceAxisCoversAnyRange(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		scale := math.Pow(10, float64(r.IntN(24)-12))
		lo := (r.Float64()*2 - 1) * scale
		hi := lo + r.Float64()*scale
		target := 2 + r.IntN(8)
		a := niceAxis(lo, hi, target)
		step := a.ticks[1] - a.ticks[0]
		if !isNice(step) {
			t.Fatalf("[%g, %g]: step %g is not 1, 2 or 5 × 10^k (ticks %v)", lo, hi, step, a.ticks)
		}
		tol := step * 1e-6
		if a.lo > lo+tol || a.hi < hi-tol {
			t.Fatalf("[%g, %g]: ticks %v do not cover it", lo, hi, a.ticks)
		}
		for i := 1; i < len(a.ticks); i++ {
			if d := a.ticks[i] - a.ticks[i-1]; math.Abs(d-step) > step*1e-6 {
				t.Fatalf("[%g, %g]: uneven ticks %v", lo, hi, a.ticks)
			}
			if k := a.ticks[i] / step; math.Abs(k-math.Round(k)) > 1e-6 {
				t.Fatalf("[%g, %g]: tick %g is not a multiple of the step %g", lo, hi, a.ticks[i], step)
			}
		}
		if len(a.ticks) < 2 || len(a.ticks) > 2*target+3 {
			t.Fatalf("[%g, %g]: %d ticks for a target of %d: %v", lo, hi, len(a.ticks), target, a.ticks)
		}
	}
}

// isNice reports whether v is 1, 2 or 5 × 10^k.
func isNice(v float64) bool {
	if v <= 0 {
		return false
	}
	m := v / math.Pow(10, math.Floor(math.Log10(v)))
	for _, want := range []float64{1, 2, 5, 10} {
		if math.Abs(m-want) < 1e-6 {
			return true
		}
	}
	return false
}

func TestNiceStep(t *testing.T) {
	cases := map[string]struct {
		raw      float64
		wantMant float64
		wantExp  int
	}{
		"exactly one":        {raw: 1, wantMant: 1, wantExp: 0},
		"just above 1":       {raw: 1.01, wantMant: 2, wantExp: 0},
		"up to 5":            {raw: 3.3, wantMant: 5, wantExp: 0},
		"above 5":            {raw: 5.5, wantMant: 1, wantExp: 1},
		"small":              {raw: 0.0021, wantMant: 5, wantExp: -3},
		"large":              {raw: 192, wantMant: 2, wantExp: 2},
		"zero is not a step": {raw: 0, wantMant: 1, wantExp: 0},
		"NaN":                {raw: math.NaN(), wantMant: 1, wantExp: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			mant, exp := niceStep(tc.raw)
			if mant != tc.wantMant || exp != tc.wantExp {
				t.Errorf("niceStep(%g) = %g×10^%d, want %g×10^%d", tc.raw, mant, exp, tc.wantMant, tc.wantExp)
			}
		})
	}
}
