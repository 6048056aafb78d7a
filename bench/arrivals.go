package bench

import (
	"math/rand/v2"
	"time"
)

// Offsets returns when each of n peers arrives, relative to the start of a
// run, in order. Pool arrivals use the Poisson times and are cut short at
// run time by a poolWatch. The same rng state gives the same schedule.
func (a Arrivals) Offsets(n int, rng *rand.Rand) []time.Duration {
	out := make([]time.Duration, n)
	var t float64 // seconds
	for i := range out {
		switch a.Kind {
		case ArriveEvery:
			out[i] = time.Duration(i) * a.Interval
			continue
		case ArrivePoisson, ArrivePool:
			if i > 0 { // the first peer opens the run
				t += rng.ExpFloat64() / a.Rate
			}
		}
		out[i] = time.Duration(t * float64(time.Second))
	}
	return out
}

// poolWatch decides when Flashback's stabilized pool has stopped growing.
// Fed the number of unfinished peers at regular samples, it reports stable
// once the largest pool of the last window is no larger than the largest of
// the window before it: a pool still growing sets a new maximum in every
// window, a stable one fluctuates around its size.
type poolWatch struct {
	window  time.Duration
	samples []poolSample
}

type poolSample struct {
	t    time.Duration
	size int
}

// Observe records the pool size at t (t increasing) and says whether the
// pool has stabilized.
func (p *poolWatch) Observe(t time.Duration, size int) bool {
	p.samples = append(p.samples, poolSample{t, size})
	if t < 2*p.window {
		return false
	}
	recent, before := -1, -1
	for _, s := range p.samples {
		switch {
		case s.t > t-p.window:
			recent = max(recent, s.size)
		case s.t > t-2*p.window:
			before = max(before, s.size)
		}
	}
	return before >= 0 && recent <= before
}
