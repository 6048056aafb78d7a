package cluster

import (
	"math"
	"testing"
	"time"
)

// paceRun drives a Pacer on its own clock: each sender sends at
// min(its grant, what it has to send), and asks every interval.
type paceRun struct {
	t    *testing.T
	p    *Pacer
	now  time.Time
	sent map[string]int64
	prio int64
}

func newPaceRun(t *testing.T, budget float64) *paceRun {
	return &paceRun{t: t, p: &Pacer{Budget: budget, Min: 1000}, now: time.Unix(1000, 0), sent: map[string]int64{}}
}

// step advances one interval: each sender named in has sends at
// min(grant, has[name]) bytes/s (-1: all it is granted), the priority
// traffic at prio bytes/s; then every sender in has asks.
func (r *paceRun) step(has map[string]float64, prio float64) map[string]float64 {
	r.t.Helper()
	dt := DefaultPaceInterval
	g := r.p.Grants()
	for n, h := range has {
		rate := g[n]
		if h >= 0 {
			rate = min(rate, h)
		}
		r.sent[n] += int64(rate * dt.Seconds())
	}
	r.prio += int64(prio * dt.Seconds())
	r.now = r.now.Add(dt)
	r.p.Tick(r.now, r.sent, r.prio)
	for n := range has {
		r.p.Ask(n, r.now)
	}
	g = r.p.Grants()
	sum := 0.0
	for _, v := range g {
		sum += v
	}
	if sum > r.p.Budget*(1+1e-9) {
		r.t.Fatalf("at %v the grants %v sum to %.0f, over the budget %.0f", r.now, g, sum, r.p.Budget)
	}
	return g
}

func near(a, b float64) bool { return math.Abs(a-b) <= 0.02*math.Max(math.Abs(a), math.Abs(b)) }

func TestPacerDivides(t *testing.T) {
	const budget = 4e6
	r := newPaceRun(t, budget)
	all := map[string]float64{"a": -1, "b": -1, "c": -1}
	var g map[string]float64
	for range 10 {
		g = r.step(all, 0)
	}
	for n, v := range g {
		if !near(v, budget/3) {
			t.Errorf("three senders that use all they get: %s granted %.0f, want a third of %.0f", n, v, float64(budget))
		}
	}

	// c finishes (stops asking): its share goes to a and b once it has
	// been idle for Idle.
	two := map[string]float64{"a": -1, "b": -1}
	for range int(DefaultPaceIdle/DefaultPaceInterval) + 2 {
		g = r.step(two, 0)
	}
	if _, ok := g["c"]; ok || !near(g["a"], budget/2) || !near(g["b"], budget/2) {
		t.Errorf("after c finished: %v, want a and b at half of %.0f each", g, float64(budget))
	}

	// b says it has finished: a gets the whole budget at once.
	r.p.Leave("b", r.now)
	if g = r.p.Grants(); !near(g["a"], budget) {
		t.Errorf("after b left: %v, want a at the budget", g)
	}

	// b comes back: the two halve the budget at once, the sum stays
	// within it.
	r.p.Ask("b", r.now)
	g = r.p.Grants()
	if !near(g["a"]+g["b"], budget) || g["a"]+g["b"] > budget || !near(g["b"], budget/2) {
		t.Errorf("b back: %v, want halves of %.0f", g, float64(budget))
	}
}

func TestPacerWorkConserving(t *testing.T) {
	const budget = 4e6
	r := newPaceRun(t, budget)
	// a has little to send (0.4 MB/s: its own links hold it back, or
	// the receiver wants few of its pieces); b and c take the rest.
	has := map[string]float64{"a": 0.4e6, "b": -1, "c": -1}
	var g map[string]float64
	for range 20 {
		g = r.step(has, 0)
	}
	if g["a"] > 0.4e6*paceHeadroom*1.01 || g["a"] < 0.4e6 {
		t.Errorf("a, which sends 0.4 MB/s, is granted %.0f", g["a"])
	}
	if want := (budget - g["a"]) / 2; !near(g["b"], want) || !near(g["c"], want) {
		t.Errorf("b and c granted %.0f and %.0f, want %.0f each (what a leaves)", g["b"], g["c"], want)
	}
	// None has much to send: what they leave is shared among them, so
	// whichever has more can take it at once.
	for range 20 {
		g = r.step(map[string]float64{"a": 0.4e6, "b": 0.5e6, "c": 0.6e6}, 0)
	}
	if sum := g["a"] + g["b"] + g["c"]; !near(sum, budget) || g["a"] < 0.4e6 || g["b"] < 0.5e6 || g["c"] < 0.6e6 {
		t.Errorf("three senders sending 0.4, 0.5 and 0.6 MB/s: grants %v, want at least that each, %.0f in all", g, float64(budget))
	}
	// a has more to send again: it grows back to a third.
	has = map[string]float64{"b": -1, "c": -1}
	has["a"] = -1
	for range 20 {
		g = r.step(has, 0)
	}
	for n, v := range g {
		if !near(v, budget/3) {
			t.Errorf("once a uses all it gets again: %s granted %.0f, want a third", n, v)
		}
	}
}

func TestPacerPriority(t *testing.T) {
	const budget = 4e6
	r := newPaceRun(t, budget)
	all := map[string]float64{"a": -1, "b": -1}
	var g map[string]float64
	for range 30 {
		g = r.step(all, 1e6)
	}
	if !near(g["a"], 1.5e6) || !near(g["b"], 1.5e6) {
		t.Errorf("with 1 MB/s of the origin's: %v, want 1.5 MB/s each", g)
	}
	// The origin takes it all: each sender keeps its floor.
	for range 60 {
		g = r.step(all, budget)
	}
	if g["a"] != r.p.Min || g["b"] != r.p.Min {
		t.Errorf("with the budget taken by the origin: %v, want the floor %.0f", g, r.p.Min)
	}
}
