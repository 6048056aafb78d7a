package sim

import (
	"math"
	"testing"
	"time"
)

// checkRate fails unless f's rate is within 0.5% of want.
func checkRate(t *testing.T, name string, f *flow, want float64) {
	t.Helper()
	if math.Abs(f.rate-want) > 0.005*want {
		t.Errorf("%s: rate %.4g, want %.4g", name, f.rate, want)
	}
}

// TestMaxMinFair: flows get the max-min fair allocation on a topology
// worked out by hand, and the others take up what an ending flow leaves.
//
//	A (up 10) ──┐            ┌── C (down 20)
//	            ├── core ────┤
//	B (up 10) ──┘            └── D (down 4)
//
// Flows A→C, B→C, B→D. D's link holds B→D to 4; B's uplink leaves B→C 6;
// C's link (20) is not full (10 + 6), so A→C has all of A's uplink: 10.
// When B→D ends, B→C takes B's whole uplink: 10.
func TestMaxMinFair(t *testing.T) {
	var n network
	a, b := newSite(nil, 10, 0, 0), newSite(nil, 10, 0, 0)
	c, d := newSite(nil, 0, 20, 0), newSite(nil, 0, 4, 0)
	done := func(*flow) {}
	ac := n.start(a, c, 1000, 0, done)
	bc := n.start(b, c, 1000, 0, done)
	bd := n.start(b, d, 1000, 0, done)
	checkRate(t, "A→C", ac, 10)
	checkRate(t, "B→C", bc, 6)
	checkRate(t, "B→D", bd, 4)
	n.stop(bd, time.Second)
	checkRate(t, "A→C after B→D", ac, 10)
	checkRate(t, "B→C after B→D", bc, 10)
	// B→C sent 6 bytes in its first second, the rest at 10/s.
	if want := time.Second + time.Duration(994.0/10*float64(time.Second)); absDur(bc.end-want) > time.Millisecond {
		t.Errorf("B→C ends at %v, want %v", bc.end, want)
	}
	if f := n.next(); f != ac {
		t.Errorf("the first flow to end is not A→C")
	}
}

// TestMaxMinShared: a rack's uplink is shared by the flows leaving the
// rack, not by those between two of its hosts.
//
//	rack (up 10): H1, H2, H3 (up 100, down 50 each)   X (down 100), Y (down 3)
//
// Flows H1→X, H2→X, H3→Y leave the rack: H3→Y is held to 3 by Y, the
// others share the 7 left: 3.5 each. H1→H2 stays inside and is held only
// by H2's downlink: 50.
func TestMaxMinShared(t *testing.T) {
	var n network
	rack := newSite(nil, 10, 0, 0)
	h1, h2, h3 := newSite(rack, 100, 50, 0), newSite(rack, 100, 50, 0), newSite(rack, 100, 50, 0)
	x, y := newSite(nil, 0, 100, 0), newSite(nil, 0, 3, 0)
	done := func(*flow) {}
	h1x := n.start(h1, x, 1e6, 0, done)
	h2x := n.start(h2, x, 1e6, 0, done)
	h3y := n.start(h3, y, 1e6, 0, done)
	h1h2 := n.start(h1, h2, 1e6, 0, done)
	checkRate(t, "H1→X", h1x, 3.5)
	checkRate(t, "H2→X", h2x, 3.5)
	checkRate(t, "H3→Y", h3y, 3)
	checkRate(t, "H1→H2", h1h2, 50)
	n.stop(h3y, 0)
	checkRate(t, "H1→X after H3→Y", h1x, 5)
	checkRate(t, "H2→X after H3→Y", h2x, 5)
	if n.cut != 0 {
		t.Errorf("%d solver passes cut short", n.cut)
	}
}

// TestLatency: a path's latency is the sum of the links it crosses, and
// two hosts of one group do not cross the group's link.
func TestLatency(t *testing.T) {
	dc := newSite(nil, 0, 0, 10*time.Millisecond)
	rack1, rack2 := newSite(dc, 0, 0, 2*time.Millisecond), newSite(dc, 0, 0, 3*time.Millisecond)
	h1, h2 := newSite(rack1, 0, 0, time.Millisecond), newSite(rack1, 0, 0, time.Millisecond)
	h3 := newSite(rack2, 0, 0, time.Millisecond)
	far := newSite(nil, 0, 0, 20*time.Millisecond)
	for _, tc := range []struct {
		a, b *Site
		want time.Duration
	}{
		{h1, h2, 2 * time.Millisecond},
		{h1, h3, 7 * time.Millisecond},
		{h3, far, 34 * time.Millisecond},
		{far, h1, 33 * time.Millisecond},
	} {
		if got := latency(tc.a, tc.b); got != tc.want {
			t.Errorf("latency %v, want %v", got, tc.want)
		}
		if _, got := path(tc.a, tc.b); got != tc.want {
			t.Errorf("path latency %v, want %v", got, tc.want)
		}
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// TestQueued: a saturated link delays what crosses it by its buffer at
// its rate, or by what its flows have still to send if that is less; an
// idle one, or one whose flows are held elsewhere, does not.
func TestQueued(t *testing.T) {
	var n network
	a, b := newSite(nil, 1000, 0, 0), newSite(nil, 0, 4000, 0)
	c := newSite(nil, 0, 100, 0)
	if d := queued(a, b, 500, 0); d != 0 {
		t.Errorf("idle path: queue %v", d)
	}
	f := n.start(a, c, 1e6, 0, func(*flow) {})
	// A's uplink carries a flow held to 100 by C: not saturated.
	if d := queued(a, b, 500, 0); d != 0 {
		t.Errorf("unsaturated uplink: queue %v", d)
	}
	n.stop(f, 0)
	f = n.start(a, b, 1e6, 0, func(*flow) {})
	// Now A's uplink (1000/s) is the bottleneck: 500 bytes wait 0.5 s.
	if d := queued(a, b, 500, 0); d != 500*time.Millisecond {
		t.Errorf("saturated uplink: queue %v, want 500ms", d)
	}
	n.stop(f, 0)
	// A flow of 300 bytes saturates the uplink too, but can queue no
	// more than it has still to send: 300, then 200 a tenth of a second
	// later.
	n.start(a, b, 300, 0, func(*flow) {})
	for _, c := range []struct{ now, want time.Duration }{
		{0, 300 * time.Millisecond},
		{100 * time.Millisecond, 200 * time.Millisecond},
	} {
		if d := queued(a, b, 500, c.now); absDur(d-c.want) > time.Millisecond {
			t.Errorf("a 300-byte flow, at %v: queue %v, want %v", c.now, d, c.want)
		}
	}
}
