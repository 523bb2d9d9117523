package plot

import (
	"math"
	"strconv"
)

// axis is one axis's range, widened to whole ticks, and its ticks.
type axis struct {
	lo, hi float64
	ticks  []float64
	// decimals is how many decimals a tick label needs to tell the ticks apart.
	decimals int
}

// maxTicks bounds the ticks of an axis whatever the range (a range near the limits of float64
// precision cannot make a loop of millions).
const maxTicks = 50

// niceAxis covers [lo, hi] (lo <= hi, both finite) with about target ticks spaced 1, 2 or 5 ×
// 10^k, starting and ending on a tick. An empty range is widened first: around its value, or to
// [0, 1] at zero.
func niceAxis(lo, hi float64, target int) axis {
	if lo == hi {
		d := math.Abs(lo) / 10
		if d == 0 {
			d = 1
		}
		if lo == 0 {
			hi = 1
		} else {
			lo, hi = lo-d, hi+d
		}
	}
	mant, exp := niceStep((hi - lo) / float64(max(target, 1)))
	// A tick is k·mant·10^exp; dividing by 10^-exp rather than multiplying by 10^exp keeps
	// 0.3 exact where 3·0.1 is not.
	at := func(k float64) float64 {
		v := k * mant
		if exp < 0 {
			v /= math.Pow(10, float64(-exp))
		} else {
			v *= math.Pow(10, float64(exp))
		}
		if v == 0 {
			return 0 // not -0
		}
		return v
	}
	step := at(1)
	first := math.Floor(lo/step + 1e-9)
	last := math.Ceil(hi/step - 1e-9)
	a := axis{decimals: max(0, -exp)}
	for k := first; k <= last && len(a.ticks) < maxTicks; k++ {
		a.ticks = append(a.ticks, at(k))
	}
	if tol := step * 1e-6; len(a.ticks) < 2 || a.ticks[0] > lo+tol || a.ticks[len(a.ticks)-1] < hi-tol {
		// Precision lost (a range narrow next to its magnitude): the range's ends are the ticks.
		a.ticks = []float64{lo, hi}
		a.decimals = 6
	}
	a.lo, a.hi = a.ticks[0], a.ticks[len(a.ticks)-1]
	return a
}

// niceStep is the smallest m·10^e at least raw, m being 1, 2 or 5, as (m, e).
func niceStep(raw float64) (mant float64, exp int) {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1, 0
	}
	exp = int(math.Floor(math.Log10(raw)))
	f := raw / math.Pow(10, float64(exp))
	switch {
	case f <= 1+1e-9:
		return 1, exp
	case f <= 2+1e-9:
		return 2, exp
	case f <= 5+1e-9:
		return 5, exp
	default:
		return 1, exp + 1
	}
}

// label formats a tick of a: with a's decimals, or in exponent form when that is long.
func (a axis) label(v float64) string {
	s := strconv.FormatFloat(v, 'f', a.decimals, 64)
	if len(s) > 10 {
		s = strconv.FormatFloat(v, 'g', 4, 64)
	}
	return s
}
