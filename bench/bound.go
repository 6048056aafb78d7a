package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

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

// DefaultBudget is stampede serve's --max-copies when a scenario's
// serve_args do not give one: origin.DefaultMaxCopies (a test holds them
// equal), 0 for none (off).
const DefaultBudget = 0

// BudgetOf is the egress budget of a scenario's origin, in copies of the
// file per window (serve --max-copies): the last --max-copies in its
// serve_args, else serve's default; +Inf for "off". A value serve would
// refuse is an error.
func BudgetOf(s *Scenario) (float64, error) {
	b := math.Inf(1)
	if DefaultBudget > 0 {
		b = DefaultBudget
	}
	for i, a := range s.ServeArgs {
		v, ok := strings.CutPrefix(a, "--max-copies=")
		if !ok && a == "--max-copies" {
			if i+1 >= len(s.ServeArgs) {
				return 0, fmt.Errorf("serve_args: --max-copies without a value")
			}
			v, ok = s.ServeArgs[i+1], true
		}
		if !ok {
			continue
		}
		if strings.EqualFold(v, "off") {
			b = math.Inf(1)
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 1 {
			return 0, fmt.Errorf("serve_args: --max-copies %q: want a number of copies, at least 1, or off", v)
		}
		b = f
	}
	return b, nil
}

// TKRB is T_KR when the origin sends at most b copies of the file (its
// egress budget, serve --max-copies), so the peers carry the other N-b:
//
//	T_KR(B) = max( T_KR , (N-B)*F/sum(u_i) )
//
// It is T_KR(R) with the budget for R: the bound stampede is held to,
// where T_KR(R) judges a run by the copies it took. The budget counts per
// window (serve --budget-window), so a crowd that outlasts one may get B
// again in the next; the bound takes one window. With no budget (+Inf), or
// b >= N, it is T_KR.
func (c Crowd) TKRB(b float64) float64 { return c.TKRR(b) }

// MeanBound is the least mean completion time of a crowd whose peers all
// start together and leave on completion, when the origin sends at most b
// copies of the file. For a uniform crowd (every peer's uplink u, downlink
// d):
//
//	mean >= max( F/u_s , F/d , (N-B)*F/sum(u_i) )
//
// Why: no peer is done before the origin has sent a whole copy (F/u_s:
// each byte of the file leaves the origin once at least, at u_s), nor
// before it received one (F/d). The peers must carry N-B copies between
// them; a peer uploads while it is there, at most u until it is done at
// t_i, so sum(u*t_i) = u*N*mean >= (N-B)*F. That is the bound.
//
// For a crowd of different peers the same three facts make a small linear
// program: minimise sum(t_i) with t_i >= L_i = max(F/u_s, F/d_i) and
// sum(u_i*t_i) >= (N-B)*F. The cheapest way to meet the upload is to keep
// the fastest uploader longer, so the bound is
//
//	mean >= ( sum(L_i) + max(0, (N-B)*F - sum(u_i*L_i)) / max(u_i) ) / N
//
// which is the formula above when the crowd is uniform. It is a bound, not
// a forecast: it lets the fastest peer stay for everyone, and it ignores
// that a peer uploads only what it holds. Peers that arrive over time (a
// Poisson crowd) are not covered. An uncapped uplink, or b >= N, leaves
// the first two terms.
func (c Crowd) MeanBound(b float64) float64 {
	n := len(c.Up)
	if n == 0 {
		return 0
	}
	f := float64(c.Size)
	origin := div(f, c.OriginUp)
	var sumL, carried, fastest float64
	for i := range n {
		l := max(origin, div(f, c.Down[i]))
		sumL += l
		carried += c.Up[i] * l
		fastest = max(fastest, c.Up[i])
	}
	if _, ok := sumCapped(c.Up); ok && float64(n) > b {
		if need := (float64(n)-b)*f - carried; need > 0 {
			sumL += need / fastest
		}
	}
	return sumL / float64(n)
}
