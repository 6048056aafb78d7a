package bench

import (
	"math"
	"slices"
)

// Point is one sample of a time series: seconds since the run started, and
// a value (bytes, a count or a rate).
type Point struct {
	T float64 `json:"t"`
	V float64 `json:"v"`
}

// Dist summarises a set of values.
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// distOf summarises xs (in any order); the zero Dist when xs is empty.
func distOf(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return Dist{N: len(s), Mean: sum / float64(len(s)), P50: quantile(s, 0.5), P90: quantile(s, 0.9),
		P99: quantile(s, 0.99), Min: s[0], Max: s[len(s)-1]}
}

// quantile of sorted s, interpolating linearly between the closest ranks
// (numpy's default): q=0 is the least value, q=1 the largest.
func quantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(s)-1)
	i := int(math.Floor(pos))
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	frac := pos - float64(i)
	return s[i] + frac*(s[i+1]-s[i])
}

// Range is the median, least and largest of one figure over repetitions.
type Range struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func rangeOf(xs []float64) Range {
	if len(xs) == 0 {
		return Range{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Range{Median: quantile(s, 0.5), Min: s[0], Max: s[len(s)-1]}
}

// rates turns a cumulative series into rates per second, each averaged over
// at least minDT seconds (progress counters are sampled unevenly, so shorter
// steps are merged). Negative steps (a counter that went backwards) give 0.
func rates(cum []Point, minDT float64) []Point {
	if len(cum) < 2 {
		return nil
	}
	out := []Point{{T: cum[0].T, V: 0}}
	last := cum[0]
	for _, p := range cum[1:] {
		dt := p.T - last.T
		if dt < 0.9*minDT { // samples come about every minDT, give or take
			continue
		}
		out = append(out, Point{T: p.T, V: max(0, (p.V-last.V)/dt)})
		last = p
	}
	return out
}
