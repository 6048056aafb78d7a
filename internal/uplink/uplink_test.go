package uplink

import (
	"context"
	"math"
	"testing"
	"time"
)

// link runs e against an uplink of capacity bytes/s with a demand of
// demand bytes/s for n windows, downloading at twice Asymmetry times the
// link: each window delivers the least of the
// pace, the demand and the link; the uploads wait for the pace when it is
// the least of the three, and pieces wait for a turn when the demand is
// more than what goes. It returns the paces of the windows.
func link(e *Estimator, now *time.Time, capacity, demand float64, n int) []float64 {
	return linkDown(e, now, capacity, demand, 2*Asymmetry, n)
}

// linkDown is link with the host downloading at down times the link's
// capacity.
func linkDown(e *Estimator, now *time.Time, capacity, demand, down float64, n int) []float64 {
	var paces []float64
	for range n {
		pace := e.Pace()
		paces = append(paces, pace)
		sent := min(demand, capacity)
		if pace > 0 {
			sent = min(sent, pace)
		}
		e.Delivered(int64(sent * Window.Seconds()))
		e.Received(int64(down * capacity * Window.Seconds()))
		if pace > 0 && demand > pace && capacity > pace {
			e.Waited(Window / 2)
		}
		if demand > sent {
			e.Backlogged(Window / 2)
		}
		*now = now.Add(Window)
		e.Tick(*now)
	}
	return paces
}

// pacedOn returns an Estimator that has read a link of capacity bytes/s,
// and its clock.
func pacedOn(capacity float64) (*Estimator, time.Time) {
	e := new(Estimator)
	now := time.Unix(0, 0)
	e.Tick(now)
	link(e, &now, capacity, 10*capacity, StartupFlat+1)
	return e, now
}

func near(a, b float64) bool { return math.Abs(a-b) <= 0.01*b }

func TestUnpacedUntilRead(t *testing.T) {
	e := new(Estimator)
	now := time.Unix(0, 0)
	e.Tick(now)
	const capacity = 1 << 20
	// The requests, not the uplink, hold the uploads back: no reading,
	// however long.
	link(e, &now, capacity, capacity/2, 10)
	if p := e.Pace(); p != 0 {
		t.Fatalf("pace %v after windows below the link: want 0 (unpaced)", p)
	}
	// The uplink holds them back: read after StartupFlat windows.
	paces := link(e, &now, capacity, 4*capacity, StartupFlat+1)
	for i, p := range paces {
		if p != 0 {
			t.Fatalf("window %d of the backlog: pace %v, want 0 until read", i, p)
		}
	}
	if p := e.Pace(); !near(p, Fraction*capacity) {
		t.Fatalf("pace %v once read: want %v", p, Fraction*capacity)
	}
	// Too little to read is no reading.
	var small Estimator
	small.Tick(now)
	link(&small, &now, MinCapacity/2, MinCapacity, 10)
	if p := small.Pace(); p != 0 {
		t.Fatalf("pace %v on a link below MinCapacity: want 0", p)
	}
}

// TestHeldWhilePaced: a link whose uploads the pace holds back reads only
// the pace; the capacity must not decay with it, nor rise, but for the
// probes.
func TestHeldWhilePaced(t *testing.T) {
	const capacity = 125_000 // 1 Mbit/s
	e, now := pacedOn(capacity)
	paces := link(e, &now, capacity, 10*capacity, 40)
	probes := 0
	for i, p := range paces {
		switch {
		case near(p, ProbeGain*capacity):
			probes++
		case !near(p, Fraction*capacity):
			t.Fatalf("window %d: pace %v, want %v (or a probe's %v)", i, p, Fraction*capacity, ProbeGain*capacity)
		}
	}
	// One every ProbeEvery held windows, each followed by the window
	// that judges it.
	if want := 40 / (ProbeEvery + 2); probes < want-1 || probes > want+1 {
		t.Errorf("%d probes in 40 windows, want about %d", probes, want)
	}
	if c := e.Capacity(); !near(c, capacity) {
		t.Errorf("capacity %v, want %v", c, float64(capacity))
	}
}

// TestProbesFindFasterLink: a link that got faster is found by a probe,
// and read again unpaced.
func TestProbesFindFasterLink(t *testing.T) {
	const capacity = 1_000_000
	e, now := pacedOn(capacity)
	if !near(e.Capacity(), capacity) {
		t.Fatalf("capacity %v, want %v", e.Capacity(), float64(capacity))
	}
	link(e, &now, 4*capacity, 10*capacity, 2*ProbeEvery+2*StartupFlat)
	if c := e.Capacity(); c < 3.8*capacity || c > 4*capacity {
		t.Errorf("capacity %v after the link went to %v, want about that", c, 4.0*capacity)
	}
}

// TestDecaysWhenIdle: when the pace holds nothing back, the capacity
// follows the reading down, by Decay a window at most.
func TestDecaysWhenIdle(t *testing.T) {
	const capacity = 1_000_000
	e, now := pacedOn(capacity)
	link(e, &now, capacity, 0.1*capacity, 3)
	if c, want := e.Capacity(), capacity*Decay*Decay*Decay; !near(c, want) {
		t.Errorf("capacity %v after 3 idle windows, want %v", c, want)
	}
	// A link that got slower: the pace sends more than it takes, the
	// uploads wait for TCP rather than the pace, and the capacity comes
	// down until the pace is under the link.
	link(e, &now, 0.5*capacity, 10*capacity, 30)
	if p := e.Pace(); p > 0.5*capacity {
		t.Errorf("pace %v after 30 windows on a link of %v", p, 0.5*capacity)
	}
}

// TestOnlyWhileDownloading: a host that downloads at less than Asymmetry
// times its uplink goes unpaced, and is paced again once it does.
func TestOnlyWhileDownloading(t *testing.T) {
	const capacity = 1_000_000
	e, now := pacedOn(capacity)
	if p := e.Pace(); !near(p, Fraction*capacity) {
		t.Fatalf("pace %v downloading at %v times the uplink, want %v", p, 2*Asymmetry, Fraction*capacity)
	}
	linkDown(e, &now, capacity, 10*capacity, Asymmetry/2, 1)
	if p := e.Pace(); p != 0 {
		t.Fatalf("pace %v downloading at %v times the uplink, want 0 (unpaced)", p, Asymmetry/2)
	}
	if c := e.Capacity(); !near(c, capacity) {
		t.Fatalf("capacity %v while unpaced, want the reading kept, %v", c, float64(capacity))
	}
	linkDown(e, &now, capacity, 10*capacity, Asymmetry, 1)
	if p := e.Pace(); !near(p, Fraction*capacity) {
		t.Fatalf("pace %v downloading at %v times the uplink again, want %v", p, Asymmetry, Fraction*capacity)
	}
}

func TestPacerNil(t *testing.T) {
	var p *Pacer
	p.Delivered(time.Now(), 1<<20, 1<<20)
	if err := p.WaitN(context.Background(), 1<<20); err != nil {
		t.Fatal(err)
	}
	if c, pace := p.Rates(); c != 0 || pace != 0 {
		t.Fatalf("nil pacer: rates %v, %v", c, pace)
	}
}

// TestPacerPaces: once a capacity is read, WaitN holds the bytes to the
// pace.
func TestPacerPaces(t *testing.T) {
	p := New()
	now := time.Now()
	p.Delivered(now, 0, 0)
	for range StartupFlat + 1 { // 1 MiB/s, backlogged, downloading 4 MiB/s
		now = now.Add(Window)
		p.Backlogged(Window)
		p.Delivered(now, int64(Window.Seconds()*(1<<20)), int64(Window.Seconds()*(4<<20)))
	}
	_, pace := p.Rates()
	if !near(pace, Fraction*(1<<20)) {
		t.Fatalf("pace %v, want %v", pace, Fraction*(1<<20))
	}
	ctx := context.Background()
	if err := p.WaitN(ctx, int(pace/50)); err != nil { // the burst
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.WaitN(ctx, int(pace/10)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Errorf("a tenth of a second's bytes went in %v: not paced", d)
	}
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.WaitN(ctx, 1<<20); err == nil {
		t.Error("WaitN with a cancelled context: no error")
	}
}

// TestStepFollowsPace: unpaced, an upload writes as much as it likes at
// once; paced, about stepTime's worth at the pace, at least minStep.
func TestStepFollowsPace(t *testing.T) {
	var none *Pacer
	if got := none.Step(64 << 10); got != 64<<10 {
		t.Errorf("nil pacer: step %d, want 64 KiB", got)
	}
	pacedAt := func(capacity float64) *Pacer {
		p := New()
		now := time.Now()
		p.Delivered(now, 0, 0)
		if got := p.Step(64 << 10); got != 64<<10 {
			t.Errorf("unpaced: step %d, want 64 KiB", got)
		}
		for range StartupFlat + 1 { // backlogged, downloading 4 times the link
			now = now.Add(Window)
			p.Backlogged(Window)
			p.Delivered(now, int64(Window.Seconds()*capacity), int64(Window.Seconds()*4*capacity))
		}
		return p
	}
	for _, c := range []struct {
		capacity float64
		want     int
	}{
		{120e3, int(Fraction * 120e3 * stepTime.Seconds())}, // a 1 Mbit/s uplink: 4.8 KB
		{60e3, minStep},
		{10e6, 64 << 10},
	} {
		if got := pacedAt(c.capacity).Step(64 << 10); got != c.want {
			t.Errorf("paced on %v B/s: step %d, want %d", c.capacity, got, c.want)
		}
	}
}

// TestProbeBurstsDoNotRatchet: a probe that reads a little over the
// link (the bucket's burst, a bunch of acknowledgements: 8 % here) finds
// no faster link, and the capacity stays the link's, so that the pace
// stays under the link's edge.
func TestProbeBurstsDoNotRatchet(t *testing.T) {
	const capacity = 125_000
	e, now := pacedOn(capacity)
	for range 60 {
		pace := e.Pace()
		sent := min(pace, capacity)
		if pace > Fraction*capacity*1.01 { // a probe
			sent = 1.08 * capacity
		}
		e.Delivered(int64(sent * Window.Seconds()))
		e.Received(int64(2 * Asymmetry * capacity * Window.Seconds()))
		e.Waited(Window / 2)
		e.Backlogged(Window / 2)
		now = now.Add(Window)
		e.Tick(now)
	}
	if c := e.Capacity(); c > 1.01*capacity {
		t.Errorf("capacity %v after 60 windows of probes reading 8 %% over a link of %v", c, float64(capacity))
	}
}

// TestStartBurstNotRead: one window of the unpaced start that reads over
// the link (a token bucket's burst, acknowledgements in a bunch: 25 %
// here) is not taken for its capacity; the windows at the link's rate
// after it are.
func TestStartBurstNotRead(t *testing.T) {
	const capacity = 120_000
	e := new(Estimator)
	now := time.Unix(0, 0)
	e.Tick(now)
	for i, read := range []float64{0.5, 1, 1.25, 1, 1} {
		if p := e.Pace(); p != 0 {
			t.Fatalf("window %d: pace %v before the start read the link", i, p)
		}
		e.Delivered(int64(read * capacity * Window.Seconds()))
		e.Received(int64(2 * Asymmetry * capacity * Window.Seconds()))
		e.Backlogged(Window / 2)
		now = now.Add(Window)
		e.Tick(now)
	}
	if c := e.Capacity(); !near(c, capacity) {
		t.Errorf("capacity %v after a burst window of 1.25 × the link, want the link's %v", c, float64(capacity))
	}
	if p := e.Pace(); !near(p, Fraction*capacity) {
		t.Errorf("pace %v, want %v", p, Fraction*capacity)
	}
}
