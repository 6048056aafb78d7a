package cdn

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestMembersLeaveAndReturn(t *testing.T) {
	ns := nodes(4)
	self, dead := ns[0], ns[2]
	m := NewMembers(MembersConfig{DownBeats: 2, DownAfter: 3 * time.Second}, self, ns, t0)
	if got := m.Ring().Nodes(); !slices.Equal(got, ns) {
		t.Fatalf("start: ring %v, want all %v", got, ns)
	}
	now := t0
	beat := func(okDead bool) {
		now = now.Add(time.Second)
		for _, n := range ns[1:] {
			m.Beat(n, n != dead || okDead, time.Millisecond, 0, now)
		}
		m.Tick(now)
	}
	beat(true) // seen once: hysteresis applies from now on
	beat(false)
	if !m.Up(dead) {
		t.Fatal("one failed beat took the node off the ring")
	}
	beat(false)
	if m.Up(dead) || m.Ring().Has(dead) {
		t.Fatal("two failed beats left the node on the ring")
	}
	// Hysteresis: back only after three good beats in a row.
	beat(true)
	beat(true)
	if m.Up(dead) {
		t.Fatal("back after two good beats")
	}
	beat(false)
	beat(true)
	beat(true)
	if m.Up(dead) {
		t.Fatal("a failed beat did not restart the count")
	}
	beat(true)
	if !m.Up(dead) || !m.Ring().Has(dead) {
		t.Fatal("not back after three good beats")
	}
}

func TestMembersSilenceTakesOff(t *testing.T) {
	ns := nodes(3)
	m := NewMembers(MembersConfig{DownBeats: 2, DownAfter: 3 * time.Second}, ns[0], ns, t0)
	// Beats that hang never report; the clock alone takes the node off.
	m.Beat(ns[1], true, time.Millisecond, 0, t0)
	if m.Tick(t0.Add(2 * time.Second)) {
		t.Fatal("off the ring before DownAfter")
	}
	if !m.Tick(t0.Add(3*time.Second)) || m.Up(ns[1]) || m.Up(ns[2]) {
		t.Fatal("silent nodes still on the ring after DownAfter")
	}
}

func TestMembersPickByRTT(t *testing.T) {
	ns := nodes(5)
	m := NewMembers(MembersConfig{MaxPeers: 2, DownBeats: 2}, ns[0], ns, t0)
	rtts := map[string]time.Duration{ns[1]: 40 * time.Millisecond, ns[2]: 5 * time.Millisecond, ns[3]: 10 * time.Millisecond, ns[4]: 80 * time.Millisecond}
	for _, n := range ns[1:] {
		m.Beat(n, true, rtts[n], 0, t0)
	}
	want := []string{ns[0], ns[2], ns[3]}
	if got := m.Ring().Nodes(); !slices.Equal(got, want) {
		t.Fatalf("ring %v, want self and the two nearest %v", got, want)
	}
	// ns[1] gets a bit faster than ns[3]: not enough to displace it.
	for range 20 {
		m.Beat(ns[1], true, 9*time.Millisecond, 0, t0)
	}
	if got := m.Ring().Nodes(); !slices.Equal(got, want) {
		t.Fatalf("a slightly faster node displaced a picked peer: %v", got)
	}
	// Much faster: it does.
	for range 40 {
		m.Beat(ns[1], true, time.Millisecond, 0, t0)
	}
	if got := m.Ring().Nodes(); !slices.Contains(got, ns[1]) || slices.Contains(got, ns[3]) {
		t.Fatalf("ring %v: want the fastest %s in place of %s", got, ns[1], ns[3])
	}
	// A picked peer that fails leaves; the next nearest takes its place.
	m.Beat(ns[2], false, 0, 0, t0)
	m.Beat(ns[2], false, 0, 0, t0)
	if got := m.Ring().Nodes(); slices.Contains(got, ns[2]) || !slices.Contains(got, ns[3]) {
		t.Fatalf("ring %v after %s failed: want %s back", got, ns[2], ns[3])
	}
}

func TestWindowAIMD(t *testing.T) {
	w := newWindow(2, 1, 16)
	for range 100 {
		w.success()
	}
	if w.size() < 10 {
		t.Fatalf("window %d after 100 on-time chunks, want it opened", w.size())
	}
	before := w.size()
	w.loss()
	if w.size() > before/2+1 {
		t.Fatalf("window %d after a loss from %d, want halved", w.size(), before)
	}
	for range 20 {
		w.loss()
	}
	if w.size() != 1 {
		t.Fatalf("window %d after many losses, want the floor 1", w.size())
	}
	for range 1000 {
		w.success()
	}
	if w.size() != 16 {
		t.Fatalf("window %d, want the ceiling 16", w.size())
	}
	d := deadline{lo: time.Second, hi: 10 * time.Second}
	if d.get() != 10*time.Second {
		t.Fatalf("deadline before any sample %v, want the ceiling", d.get())
	}
	d.sample(100 * time.Millisecond)
	if d.get() != time.Second {
		t.Fatalf("deadline %v for fast chunks, want the floor", d.get())
	}
	for range 50 {
		d.sample(time.Second)
	}
	if got := d.get(); got < 3*time.Second || got > 4*time.Second {
		t.Fatalf("deadline %v for 1 s chunks, want about 4 s", got)
	}
}

func TestMembersLateStarterJoinsAtOnce(t *testing.T) {
	ns := nodes(3)
	m := NewMembers(MembersConfig{DownBeats: 2, DownAfter: 3 * time.Second}, ns[0], ns, t0)
	m.Beat(ns[1], true, time.Millisecond, 0, t0)
	// ns[2] is not listening yet: refused twice, off the ring.
	m.Beat(ns[2], false, 0, 0, t0)
	m.Beat(ns[2], false, 0, 0, t0)
	if m.Up(ns[2]) {
		t.Fatal("a node that never answered stayed on the ring")
	}
	if !m.Beat(ns[2], true, time.Millisecond, 0, t0.Add(time.Second)) || !m.Up(ns[2]) {
		t.Fatal("a late starter's first answer did not bring it in")
	}
	// Once seen, it needs three again.
	m.Beat(ns[2], false, 0, 0, t0)
	m.Beat(ns[2], false, 0, 0, t0)
	m.Beat(ns[2], true, time.Millisecond, 0, t0)
	if m.Up(ns[2]) {
		t.Fatal("a node that failed came back at its first good beat")
	}
}
