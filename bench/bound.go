package bench

import "math"

// Bounds on the time to deliver one file to a crowd, in the fluid model of
// Kumar and Ross (2006), as ../shared/BENCHMARKS.md states them. All rates
// are in bytes per second and sizes in bytes; the results are in seconds. A
// rate of 0 or less means uncapped (that term of the bound vanishes).

// Crowd is what the bounds depend on: the file, the origin, the peers.
type Crowd struct {
	Size     int64   // F, bytes
	OriginUp float64 // u_s, bytes/s
	Up       []float64
	Down     []float64
}

// CrowdOf lists the peers of s with their caps.
func CrowdOf(s *Scenario) Crowd {
	c := Crowd{Size: s.Size, OriginUp: float64(s.OriginUp)}
	for _, cl := range s.Classes {
		for range cl.Count {
			c.Up = append(c.Up, float64(cl.Up))
			c.Down = append(c.Down, float64(cl.Down))
		}
	}
	return c
}

// TKR is the least time in which every peer can hold the file when all are
// present from the start:
//
//	T_KR = max( F/u_s , F/min(d_i) , N*F/(u_s + sum(u_i)) )
//
// The first term is the origin sending one copy, the second the slowest
// peer receiving one, the third the crowd's whole upload capacity carrying
// N copies. An uncapped peer upload makes the third term vanish.
func (c Crowd) TKR() float64 {
	origin, download, crowd := c.TKRTerms()
	return max(origin, download, crowd)
}

// TKRTerms are the three terms of T_KR, in its order: the origin sending
// one copy, the slowest peer receiving one, the N copies through every
// upload. A term is 0 when its rates are uncapped. A report shows them so
// a reader can see which limit binds.
func (c Crowd) TKRTerms() (origin, download, crowd float64) {
	f := float64(c.Size)
	n := float64(len(c.Up))
	origin, download = div(f, c.OriginUp), div(f, minCapped(c.Down))
	if sum, ok := sumCapped(c.Up); ok {
		crowd = div(n*f, c.OriginUp+sum)
	}
	return origin, download, crowd
}

// TKRR is T_KR when the origin sends at most r copies of the file in all
// (origin protection), so peers must carry the other N-r:
//
//	T_KR(R) = max( T_KR , (N-R)*F/sum(u_i) )
//
// r comes from a run: the origin's bytes over F. With r >= N, or uncapped
// peers, it is T_KR.
func (c Crowd) TKRR(r float64) float64 {
	t := c.TKR()
	n := float64(len(c.Up))
	if sum, ok := sumCapped(c.Up); ok && n > r {
		t = max(t, div((n-r)*float64(c.Size), sum))
	}
	return t
}

// HTTP is the least time plain client-server delivery takes, every peer
// fetching from the origin: max( N*F/u_s , F/min(d_i) ).
func (c Crowd) HTTP() float64 {
	f := float64(c.Size)
	return max(div(float64(len(c.Down))*f, c.OriginUp), div(f, minCapped(c.Down)))
}

// div is a/b with an uncapped (b <= 0) rate taking no time.
func div(a, b float64) float64 {
	if b <= 0 || math.IsInf(b, 1) {
		return 0
	}
	return a / b
}

// minCapped is the least capped rate, or 0 (uncapped) when none is capped.
func minCapped(rates []float64) float64 {
	m := 0.0
	for _, r := range rates {
		if r > 0 && (m == 0 || r < m) {
			m = r
		}
	}
	return m
}

// sumCapped is the sum of rates, and false if any is uncapped (the sum is
// then infinite).
func sumCapped(rates []float64) (float64, bool) {
	s := 0.0
	for _, r := range rates {
		if r <= 0 {
			return 0, false
		}
		s += r
	}
	return s, len(rates) > 0
}
