package storetest

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

// testSwarmSizeEstimate runs crowds through a tracker whose table holds
// 256: the table never grows past it, and swarm_size stays within 30 % of
// the truth as they arrive, while they stay, and after half of them leave
// without a word. (It calls Announce rather than ServeHTTP: the JSON would
// take most of the time.)
func testSwarmSizeEstimate(t *testing.T, newStore NewStore, crowds []int) {
	const interval = 15 * time.Second
	for _, n := range crowds {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			h := newHarness(t, newStore, tracker.Config{Interval: interval, Logger: slog.New(slog.DiscardHandler)})
			worst := 0.0
			// Every peer announces once an interval, at its own phase.
			// truth(i) is the swarm's size at peer i's announce; lo and hi
			// bound the answer allowed.
			round := func(live int, event tracker.Event, truth func(i int) (lo, hi int), what string) {
				t.Helper()
				for i := range n {
					h.clock.Advance(interval / time.Duration(n))
					if i >= live {
						continue
					}
					p := peer(i)
					res, err := h.tr.Announce(tracker.AnnounceRequest{Root: testRoot, Size: testSize, ID: p.id, Port: p.port, Left: 1000, Event: event, NumWant: 1}, p.addr())
					if err != nil {
						t.Fatal(err)
					}
					lo, hi := truth(i)
					if lo == hi {
						worst = max(worst, math.Abs(float64(res.SwarmSize-lo))/float64(lo))
					}
					if float64(res.SwarmSize) < 0.7*float64(lo) || float64(res.SwarmSize) > 1.3*float64(hi) {
						t.Fatalf("%s, peer %d: swarm_size %d, truth in [%d, %d]", what, i, res.SwarmSize, lo, hi)
					}
					if len(res.Peers) > 0 && res.Peers[0].ID == p.id {
						t.Fatalf("%s, peer %d: handed itself", what, i)
					}
				}
				if l := h.metrics()["stampede_tracker_peers"]; l > tracker.DefaultMaxPeersPerSwarm {
					t.Fatalf("%s: table of %d peers, capacity %d", what, l, tracker.DefaultMaxPeersPerSwarm)
				}
			}
			exactly := func(k int) func(int) (int, int) { return func(int) (int, int) { return k, k } }
			round(n, tracker.EventStarted, func(i int) (int, int) { return i + 1, i + 1 }, "arriving")
			for r := range 2 {
				round(n, tracker.EventNone, exactly(n), fmt.Sprintf("staying, round %d", r))
			}
			// Half go silent. They count until they expire from the table
			// (3 intervals), or, in a swarm larger than the table, until
			// they drop out of the estimator's window (2 intervals).
			for r := range 3 {
				round(n/2, tracker.EventNone, func(int) (int, int) { return n / 2, n }, fmt.Sprintf("half gone, round %d", r))
			}
			round(n/2, tracker.EventNone, exactly(n/2), "half gone for 3 intervals")
			t.Logf("n=%d: worst error %.1f%%", n, 100*worst)

			// All gone: a newcomer is alone.
			h.clock.Advance(3 * interval)
			if res := h.announce(peer(n), tracker.EventStarted, 1000, 0); res.SwarmSize != 1 || len(res.Peers) != 0 {
				t.Errorf("alone after everyone left: swarm_size %d, peers %d", res.SwarmSize, len(res.Peers))
			}
		})
	}
}

func testCompletedFirst(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{})
	for i := range 20 {
		h.announce(peer(i), tracker.EventStarted, 1000, 0)
	}
	for i := 100; i < 103; i++ {
		h.announce(peer(i), tracker.EventStarted, 0, 0)
	}
	asker := peer(999)
	res := h.announce(asker, tracker.EventStarted, testSize, 10)
	if res.SwarmSize != 24 || res.Complete != 3 || res.Interval != tracker.DefaultInterval {
		t.Errorf("swarm_size %d, complete %d, interval %v; want 24, 3, %v", res.SwarmSize, res.Complete, res.Interval, tracker.DefaultInterval)
	}
	got := ids(res.Peers)
	if len(got) != 10 {
		t.Fatalf("%d peers, want 10", len(got))
	}
	seeds := []tracker.PeerID{peer(100).id, peer(101).id, peer(102).id}
	if !sameSet(got[:3], seeds) {
		t.Errorf("first three %v, want the seeds %v", got[:3], seeds)
	}
	for i, p := range res.Peers {
		if p.Complete != (i < 3) {
			t.Errorf("peer %d complete=%v", i, p.Complete)
		}
	}
	// Then the latest arrivals, newest first.
	for k, id := range got[3:] {
		if want := peer(19 - k).id; id != want {
			t.Errorf("peer %d is %s, want the arrival %s", 3+k, id, want)
		}
	}
	if res.Peers[3].Addr != peer(19).addr() {
		t.Errorf("addr %v, want %v", res.Peers[3].Addr, peer(19).addr())
	}

	// Asking for everyone: each other peer once, never the asker.
	h.clock.Advance(time.Second)
	res = h.announce(asker, tracker.EventNone, testSize, 100)
	if len(res.Peers) != 23 {
		t.Fatalf("%d peers, want all 23 others", len(res.Peers))
	}
}

func testSeedsTakenAtRandom(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{})
	for i := range 30 {
		h.announce(peer(i), tracker.EventStarted, 0, 0)
	}
	handed := make(map[tracker.PeerID]int)
	for i := range 30 {
		for _, p := range h.announce(peer(1000+i), tracker.EventStarted, 1000, 5).Peers {
			if !p.Complete {
				t.Fatalf("a leecher %s before the seeds", p.ID)
			}
			handed[p.ID]++
		}
	}
	if len(handed) < 20 {
		t.Errorf("150 picks among 30 seeds reached only %d of them", len(handed))
	}
}

func testUnreachable(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{})
	hidden := peer(1)
	hidden.port = 0
	h.announce(hidden, tracker.EventStarted, 0, 0)
	res := h.announce(peer(2), tracker.EventStarted, 1000, 0)
	if res.SwarmSize != 2 || res.Complete != 1 || len(res.Peers) != 0 {
		t.Errorf("swarm_size %d, complete %d, peers %v; want 2, 1, none", res.SwarmSize, res.Complete, res.Peers)
	}
	// The hidden peer still gets the others.
	h.clock.Advance(time.Second)
	if res := h.announce(hidden, tracker.EventNone, 0, 0); len(res.Peers) != 1 || res.Peers[0].ID != peer(2).id {
		t.Errorf("the unreachable peer got %v, want peer 2", res.Peers)
	}
	// A peer that becomes reachable is handed out; one that stops being
	// so is not.
	h.clock.Advance(time.Second)
	hidden.port = 7001
	h.announce(hidden, tracker.EventNone, 0, 0)
	h.clock.Advance(time.Second)
	if res := h.announce(peer(2), tracker.EventNone, 1000, 0); len(res.Peers) != 1 || res.Peers[0].Addr.Port() != 7001 || !res.Peers[0].Complete {
		t.Errorf("after it became reachable: %v", res.Peers)
	}
	h.clock.Advance(time.Second)
	hidden.port = 0
	h.announce(hidden, tracker.EventNone, 0, 0)
	h.clock.Advance(time.Second)
	if res := h.announce(peer(2), tracker.EventNone, 1000, 0); len(res.Peers) != 0 || res.Complete != 1 {
		t.Errorf("after it became unreachable again: %v, complete %d", res.Peers, res.Complete)
	}
}

func testExpiry(t *testing.T, newStore NewStore) {
	const interval = 10 * time.Second
	h := newHarness(t, newStore, tracker.Config{Interval: interval})
	h.announce(peer(1), tracker.EventStarted, 1000, 0)
	h.clock.Advance(3*interval - time.Nanosecond)
	if res := h.announce(peer(2), tracker.EventStarted, 1000, 0); res.SwarmSize != 2 || len(res.Peers) != 1 {
		t.Errorf("just before 3 intervals: swarm_size %d, peers %v; want 2 and peer 1", res.SwarmSize, res.Peers)
	}
	h.clock.Advance(time.Nanosecond)
	if res := h.announce(peer(3), tracker.EventStarted, 1000, 0); res.SwarmSize != 2 || len(res.Peers) != 1 || res.Peers[0].ID != peer(2).id {
		t.Errorf("at 3 intervals: swarm_size %d, peers %v; want 2 and peer 2 only", res.SwarmSize, res.Peers)
	}
	if m := h.metrics(); m[`stampede_tracker_peers_removed_total{reason="expired"}`] != 1 || m["stampede_tracker_peers"] != 2 {
		t.Errorf("metrics %v", m)
	}
	// The swarm itself goes once idle for 3 intervals.
	h.clock.Advance(3 * interval)
	if m := h.metrics(); m["stampede_tracker_swarms"] != 0 || m[`stampede_tracker_swarms_removed_total{reason="idle"}`] != 1 || m["stampede_tracker_peers"] != 0 {
		t.Errorf("after 3 idle intervals: metrics %v", m)
	}
	// And comes back empty.
	if res := h.announce(peer(4), tracker.EventStarted, 1000, 0); res.SwarmSize != 1 || len(res.Peers) != 0 {
		t.Errorf("a new swarm: swarm_size %d, peers %v", res.SwarmSize, res.Peers)
	}
}

func testStopped(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{})
	h.announce(peer(1), tracker.EventStarted, 1000, 0)
	h.announce(peer(2), tracker.EventStarted, 1000, 0)
	// Peer 3 learnt peer 1's id, but cannot take it out from elsewhere.
	impostor := peer(1)
	impostor.ip = peer(3).ip
	if res := h.announce(impostor, tracker.EventStopped, 1000, 0); res.SwarmSize != 2 {
		t.Errorf("stopped from another IP: swarm_size %d, want 2", res.SwarmSize)
	}
	res := h.announce(peer(1), tracker.EventStopped, 1000, 0)
	if res.SwarmSize != 1 || len(res.Peers) != 0 {
		t.Errorf("answer to stopped: swarm_size %d, peers %v; want 1, none", res.SwarmSize, res.Peers)
	}
	h.clock.Advance(time.Second)
	if res := h.announce(peer(2), tracker.EventNone, 1000, 0); res.SwarmSize != 1 || len(res.Peers) != 0 {
		t.Errorf("after peer 1 stopped: swarm_size %d, peers %v", res.SwarmSize, res.Peers)
	}
	if m := h.metrics(); m[`stampede_tracker_peers_removed_total{reason="stopped"}`] != 1 || m[`stampede_tracker_announces_total{event="stopped"}`] != 2 {
		t.Errorf("metrics %v", m)
	}
}

// testLateAfterStopped: a peer's "completed", sent just before it left,
// overtaken by its "stopped": it does not put the peer back (it would be
// handed out first, as a seed, to everyone for three intervals). A
// "started" from it does: it came back.
func testLateAfterStopped(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{})
	h.announce(peer(1), tracker.EventStarted, 1000, 0)
	h.announce(peer(2), tracker.EventStarted, 1000, 0)
	h.clock.Advance(2 * time.Second)
	h.announce(peer(1), tracker.EventStopped, 0, 0)
	h.clock.Advance(100 * time.Millisecond)
	h.announce(peer(1), tracker.EventCompleted, 0, 0)
	h.clock.Advance(2 * time.Second)
	if res := h.announce(peer(2), tracker.EventNone, 1000, 0); res.SwarmSize != 1 || len(res.Peers) != 0 {
		t.Errorf("a late completed put the stopped peer back: swarm_size %d, peers %v", res.SwarmSize, res.Peers)
	}
	if m := h.metrics(); m[`stampede_tracker_announces_late_total`] != 1 {
		t.Errorf("late announces counted %d, want 1", m[`stampede_tracker_announces_late_total`])
	}
	h.announce(peer(1), tracker.EventStarted, 1000, 0)
	h.clock.Advance(2 * time.Second)
	if res := h.announce(peer(2), tracker.EventNone, 1000, 0); res.SwarmSize != 2 || len(res.Peers) != 1 {
		t.Errorf("peer 1 rejoined: swarm_size %d, peers %v; want 2, one", res.SwarmSize, res.Peers)
	}
}

func testRateLimit(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{})
	a, b, c := peer(1), peer(2), peer(3)
	h.announce(b, tracker.EventStarted, 1000, 0)
	h.announce(c, tracker.EventStarted, 1000, 0)
	h.announce(a, tracker.EventStarted, 1000, 0)

	// Again within the second, claiming to be done and reachable elsewhere:
	// answered from the cache, nothing changes.
	h.clock.Advance(500 * time.Millisecond)
	moved := a
	moved.port = 9999
	res := h.announce(moved, tracker.EventNone, 0, 0)
	if !sameSet(ids(res.Peers), []tracker.PeerID{b.id, c.id}) || res.SwarmSize != 3 || res.Complete != 0 {
		t.Errorf("rate-limited answer: %+v", res)
	}
	// The cache is shared, and never hands anyone itself.
	res = h.announce(b, tracker.EventNone, 1000, 0)
	if !sameSet(ids(res.Peers), []tracker.PeerID{a.id, c.id}) || res.Peers[0].Addr.Port() != 7000 && res.Peers[1].Addr.Port() != 7000 {
		t.Errorf("rate-limited answer to b: %+v", res.Peers)
	}
	if m := h.metrics(); m["stampede_tracker_announces_rate_limited_total"] != 2 || m[`stampede_tracker_announces_total{event="periodic"}`] != 2 {
		t.Errorf("metrics %v", m)
	}

	// A completion is never held back.
	res = h.announce(a, tracker.EventCompleted, 0, 0)
	if res.Complete != 1 {
		t.Errorf("completed within the second: complete %d, want 1", res.Complete)
	}
	// A second later, the move counts.
	h.clock.Advance(time.Second)
	h.announce(moved, tracker.EventNone, 0, 0)
	h.clock.Advance(time.Second)
	for _, p := range h.announce(c, tracker.EventNone, 1000, 0).Peers {
		if p.ID == a.id && (p.Addr.Port() != 9999 || !p.Complete) {
			t.Errorf("a after it moved: %+v", p)
		}
	}
}

func testIPv6(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{})
	serve(h.tr, query(testRoot, peer(1), tracker.EventStarted, 1000, 0), "[::ffff:192.0.2.9]:4000")
	serve(h.tr, query(testRoot, peer(2), tracker.EventStarted, 1000, 0), "[2001:db8::1]:4000")
	res := h.announce(peer(3), tracker.EventStarted, 1000, 0)
	want := map[string]bool{"192.0.2.9:7000": true, "[2001:db8::1]:7000": true}
	for _, p := range res.Peers {
		if !want[p.Addr.String()] {
			t.Errorf("unexpected addr %s", p.Addr)
		}
	}
	if len(res.Peers) != 2 {
		t.Errorf("peers %v", res.Peers)
	}
}

func testSwarmsBounded(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{MaxSwarms: 3})
	for i := range 5 {
		h.announceTo(manifest.Hash{byte(i)}, peer(i), tracker.EventStarted, 1000, 0)
		h.clock.Advance(time.Second)
	}
	m := h.metrics()
	if m["stampede_tracker_swarms"] != 3 || m[`stampede_tracker_swarms_removed_total{reason="limit"}`] != 2 {
		t.Errorf("metrics %v", m)
	}
	// The oldest swarms went: a peer of swarm 0 finds itself alone.
	if res := h.announceTo(manifest.Hash{0}, peer(10), tracker.EventStarted, 1000, 0); res.SwarmSize != 1 {
		t.Errorf("swarm 0 still has %d peers", res.SwarmSize)
	}
	if res := h.announceTo(manifest.Hash{4}, peer(11), tracker.EventStarted, 1000, 0); res.SwarmSize != 2 {
		t.Errorf("swarm 4 has %d peers, want 2", res.SwarmSize)
	}
	// An attacker announcing to many swarms keeps the store at its bound.
	for i := range 50 {
		h.announceTo(manifest.Hash{0xee, byte(i)}, peer(100+i), tracker.EventStarted, 1000, 0)
	}
	if m := h.metrics(); m["stampede_tracker_swarms"] != 3 {
		t.Errorf("after 50 more swarms: %d swarms, want 3", m["stampede_tracker_swarms"])
	}

	// A new swarm is never the one pushed out, even when all were last
	// announced to at the same instant.
	h = newHarness(t, newStore, tracker.Config{MaxSwarms: 1})
	for i := range 3 {
		h.announceTo(manifest.Hash{0xff - byte(i)}, peer(i), tracker.EventStarted, 1000, 0)
		again := peer(10 + i)
		again.ip = peer(i).ip // one source: the swarm stays lone
		if res := h.announceTo(manifest.Hash{0xff - byte(i)}, again, tracker.EventStarted, 1000, 0); res.SwarmSize != 2 {
			t.Errorf("swarm %d, the newest: swarm_size %d, want 2", i, res.SwarmSize)
		}
	}
}

// testTableBounded: a newcomer to a full table pushes out the peer seen
// longest ago, and the table never grows past its capacity.
func testTableBounded(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{MaxPeersPerSwarm: 4})
	for i := range 6 {
		h.announce(peer(i), tracker.EventStarted, 1000, 0)
		h.clock.Advance(time.Millisecond)
	}
	m := h.metrics()
	if m["stampede_tracker_peers"] != 4 || m[`stampede_tracker_peers_removed_total{reason="table_full"}`] != 2 {
		t.Errorf("metrics %v", m)
	}
	h.clock.Advance(time.Second)
	res := h.announce(peer(5), tracker.EventNone, 1000, 50)
	if !sameSet(ids(res.Peers), []tracker.PeerID{peer(2).id, peer(3).id, peer(4).id}) {
		t.Errorf("peers %v, want 2, 3 and 4: the first two were pushed out", ids(res.Peers))
	}
	if res.SwarmSize != 6 {
		t.Errorf("swarm_size %d, want 6 (the estimate counts beyond the table)", res.SwarmSize)
	}
}

func testMetricsCount(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{})
	h.announce(peer(1), tracker.EventStarted, 1000, 0)
	h.announce(peer(2), tracker.EventStarted, 1000, 0)
	h.clock.Advance(time.Second)
	h.announce(peer(1), tracker.EventNone, 1000, 0)
	h.announce(peer(1), tracker.EventCompleted, 0, 0)
	m := h.metrics()
	for series, want := range map[string]int64{
		`stampede_tracker_announces_total{event="started"}`:   2,
		`stampede_tracker_announces_total{event="periodic"}`:  1,
		`stampede_tracker_announces_total{event="completed"}`: 1,
		`stampede_tracker_announces_total{event="stopped"}`:   0,
		`stampede_tracker_store_failures_total`:               0,
		`stampede_tracker_swarms`:                             1,
		`stampede_tracker_peers`:                              2,
		`stampede_tracker_peers_estimated`:                    2,
	} {
		if got := m[series]; got != want {
			t.Errorf("%s = %d, want %d", series, got, want)
		}
	}
}

func testPeersLooks(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{})
	tr := h.tr
	root := manifest.Hash{1}
	if got := tr.Peers(root, 100, 10); got != nil {
		t.Fatalf("unknown swarm: %v", got)
	}
	if m := h.metrics(); m["stampede_tracker_swarms"] != 0 {
		t.Fatalf("Peers created a swarm: %v", m)
	}
	for i, addr := range []string{"192.0.2.1:7000", "192.0.2.2:0", "192.0.2.3:7002"} {
		ap := netip.MustParseAddrPort(addr)
		req := tracker.AnnounceRequest{Root: root, Size: 100, Port: ap.Port(), Left: 100, Event: tracker.EventStarted}
		req.ID[0] = byte(i + 1)
		if _, err := tr.Announce(req, ap); err != nil {
			t.Fatal(err)
		}
	}
	got := tr.Peers(root, 100, 10)
	var addrs []string
	for _, p := range got {
		addrs = append(addrs, p.Addr.String())
	}
	slices.Sort(addrs)
	if !slices.Equal(addrs, []string{"192.0.2.1:7000", "192.0.2.3:7002"}) {
		t.Errorf("peers %v, want the two that accept connections", addrs)
	}
	if got := tr.Peers(root, 100, 1); len(got) != 1 {
		t.Errorf("want 1: %v", got)
	}
	if got := tr.Peers(root, 101, 10); got != nil {
		t.Errorf("another size is another swarm: %v", got)
	}
	// Peers does not keep a swarm alive: it goes when idle.
	h.clock.Advance(2 * tracker.DefaultInterval)
	tr.Peers(root, 100, 10)
	h.clock.Advance(tracker.DefaultInterval)
	if m := h.metrics(); m["stampede_tracker_swarms"] != 0 {
		t.Errorf("a swarm only looked at was kept: %v", m)
	}
}

// testShared: two trackers on one store are one tracker to the peers.
func testShared(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{})
	other := h.another()
	h.announceVia(h.tr, testRoot, peer(1), tracker.EventStarted, 0, 0)
	res := h.announceVia(other, testRoot, peer(2), tracker.EventStarted, 1000, 0)
	if res.SwarmSize != 2 || res.Complete != 1 || len(res.Peers) != 1 || res.Peers[0].ID != peer(1).id {
		t.Errorf("the other tracker's answer: %+v", res)
	}
	h.clock.Advance(time.Second)
	res = h.announceVia(h.tr, testRoot, peer(1), tracker.EventNone, 0, 0)
	if len(res.Peers) != 1 || res.Peers[0].ID != peer(2).id {
		t.Errorf("the first tracker's answer: %+v", res)
	}
	if got := other.Peers(testRoot, testSize, 10); len(got) != 2 {
		t.Errorf("the other tracker's Peers: %v", got)
	}
}

// testRandomAnnounces drives one swarm with random announces of a
// population larger than its table and checks every answer.
func testRandomAnnounces(t *testing.T, newStore NewStore) {
	const interval = 10 * time.Second
	const capacity = 16
	h := newHarness(t, newStore, tracker.Config{Interval: interval, MaxPeersPerSwarm: capacity, Logger: slog.New(slog.DiscardHandler)})
	rng := rand.New(rand.NewPCG(3, 4))
	events := []tracker.Event{tracker.EventNone, tracker.EventNone, tracker.EventNone, tracker.EventStarted, tracker.EventCompleted, tracker.EventStopped}
	for step := range 2000 {
		h.clock.Advance(time.Duration(rng.IntN(int(300 * time.Millisecond))))
		p := peer(rng.IntN(40))
		p.port = uint16(rng.IntN(3))
		req := tracker.AnnounceRequest{Root: testRoot, Size: testSize, ID: p.id, Port: p.port, Left: int64(rng.IntN(2)),
			Event: events[rng.IntN(len(events))], NumWant: 1 + rng.IntN(tracker.MaxNumWant)}
		if req.Event == tracker.EventCompleted {
			req.Left = 0
		}
		res, err := h.tr.Announce(req, p.addr())
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		checkPeers(t, p.id, req.NumWant, res)
		if req.Event == tracker.EventStopped && len(res.Peers) != 0 {
			t.Fatalf("step %d: peers for stopped: %v", step, res.Peers)
		}
		if step%100 == 0 {
			if m := h.metrics(); m["stampede_tracker_peers"] > capacity || m["stampede_tracker_peers"] > m["stampede_tracker_peers_estimated"] {
				t.Fatalf("step %d: metrics %v", step, m)
			}
		}
		if rng.IntN(500) == 0 {
			h.clock.Advance(tracker.ExpiryIntervals * interval)
		}
	}
}

// testConcurrent lets the race detector watch announces to a few swarms at
// once, and checks the bounds hold under them.
func testConcurrent(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{MaxPeersPerSwarm: 32, MaxSwarms: 2})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 150 {
				p := peer(g*1000 + i)
				root := manifest.Hash{byte(i % 3)}
				rec := serve(h.tr, query(root, p, tracker.EventStarted, 1000, 5), netip.AddrPortFrom(p.ip, 1).String())
				if rec.Code != http.StatusOK {
					t.Errorf("announce: %d %s", rec.Code, rec.Body)
					return
				}
				if i%50 == 0 {
					h.tr.WriteMetrics(&strings.Builder{})
				}
			}
		})
	}
	wg.Wait()
	if m := h.metrics(); m["stampede_tracker_swarms"] > 2 || m["stampede_tracker_peers"] > 64 {
		t.Errorf("bounds exceeded: %v", m)
	}
}

// announceFrom announces p to root through Announce (the HTTP layer
// would rate limit a flood from one address), and checks the answer.
func (h *harness) announceFrom(root manifest.Hash, p testPeer, event tracker.Event, left int64) *tracker.AnnounceResponse {
	h.t.Helper()
	res, err := h.tr.Announce(tracker.AnnounceRequest{Root: root, Size: testSize, ID: p.id, Port: p.port, Left: left, Event: event}, p.addr())
	if err != nil {
		h.t.Fatal(err)
	}
	checkPeers(h.t, p.id, 0, res)
	return res
}

// randomPeer is a peer with a random id at ip and port.
func randomPeer(rng *rand.Rand, ip string, port uint16) testPeer {
	p := testPeer{ip: netip.MustParseAddr(ip), port: port}
	for i := range p.id {
		p.id[i] = byte(rng.Uint32())
	}
	return p
}

// testPeersPerAddress: ids from one source (an IPv4 address, an IPv6
// /64) count up to MaxPeersPerAddress, in the table and in swarm_size,
// and push no one out; loopback is exempt.
func testPeersPerAddress(t *testing.T, newStore NewStore) {
	rng := rand.New(rand.NewPCG(7, 8))
	h := newHarness(t, newStore, tracker.Config{MaxPeersPerAddress: 4})
	honest := []testPeer{peer(1), peer(2), peer(3)}
	for _, p := range honest {
		h.announce(p, tracker.EventStarted, 1000, 0)
	}
	// A Sybil: 200 random ids behind one address, reachable or not.
	for i := range 200 {
		h.announceFrom(testRoot, randomPeer(rng, "198.51.100.7", uint16(i%2)*7000), tracker.EventStarted, 1000)
	}
	res := h.announceFrom(testRoot, randomPeer(rng, "198.51.100.7", 0), tracker.EventNone, 1000)
	if res.SwarmSize != 3+4 {
		t.Errorf("swarm_size %d after 200 ids from one address, want 3 + 4", res.SwarmSize)
	}
	m := h.metrics()
	if m["stampede_tracker_peers"] != 7 || m["stampede_tracker_announces_address_full_total"] != 197 {
		t.Errorf("metrics %v", m)
	}
	// The honest peers are still handed out.
	h.clock.Advance(time.Second)
	got := ids(h.announce(peer(1), tracker.EventNone, 1000, 50).Peers)
	for _, p := range honest[1:] {
		if !slices.Contains(got, p.id) {
			t.Errorf("peer %s not handed out among %v", p.id, got)
		}
	}
	// An IPv6 /64 is one source; another /64 another.
	for i := range 10 {
		h.announceFrom(testRoot, randomPeer(rng, fmt.Sprintf("2001:db8:1:2::%x", i+1), 7000), tracker.EventStarted, 1000)
	}
	h.announceFrom(testRoot, randomPeer(rng, "2001:db8:1:3::1", 7000), tracker.EventStarted, 1000)
	// 127.0.0.1 is exempt: the host's own peers all count. The rest of
	// loopback is any source.
	for range 10 {
		h.announceFrom(testRoot, randomPeer(rng, "127.0.0.1", 7000), tracker.EventStarted, 1000)
		h.announceFrom(testRoot, randomPeer(rng, "127.0.0.2", 7000), tracker.EventStarted, 1000)
	}
	if res := h.announceFrom(testRoot, peer(4), tracker.EventStarted, 1000); res.SwarmSize != 3+4+4+1+10+4+1 {
		t.Errorf("swarm_size %d, want 3 + 4 (the Sybil) + 4 + 1 (two /64s) + 10 (127.0.0.1) + 4 (127.0.0.2) + 1", res.SwarmSize)
	}

	// A swarm larger than its table: the estimator counts a source as
	// at most 4 too.
	const interval = 10 * time.Second
	h = newHarness(t, newStore, tracker.Config{Interval: interval, MaxPeersPerSwarm: 16, MaxPeersPerAddress: 4,
		Logger: slog.New(slog.DiscardHandler)})
	for round := range 3 {
		for i := range 40 {
			h.clock.Advance(interval / 2000)
			h.announceFrom(testRoot, peer(i), tracker.EventNone, 1000)
			for range 24 {
				h.announceFrom(testRoot, randomPeer(rng, "198.51.100.7", 0), tracker.EventStarted, 1000)
			}
		}
		h.clock.Advance(interval - 40*interval/2000)
		if res := h.announceFrom(testRoot, peer(0), tracker.EventNone, 1000); res.SwarmSize < 40 || res.SwarmSize > 48 {
			t.Errorf("round %d: swarm_size %d with 40 peers and 960 ids from one address, want 40 to 48", round, res.SwarmSize)
		}
	}
}

// testSwarmsFull: past MaxSwarms, new swarms push out lone swarms (peers
// of one source at most), never one whose peers come from two sources
// or more; with none lone, the new swarm is not kept.
func testSwarmsFull(t *testing.T, newStore NewStore) {
	rng := rand.New(rand.NewPCG(9, 10))
	h := newHarness(t, newStore, tracker.Config{MaxSwarms: 8})
	live := []manifest.Hash{{0x11}, {0x22}}
	for k, root := range live {
		h.announceTo(root, peer(10*k+1), tracker.EventStarted, 0, 0)
		h.announceTo(root, peer(10*k+2), tracker.EventStarted, 1000, 0)
	}
	// A flood of random roots from one address, the live swarms
	// announcing between.
	for i := range 2000 {
		var root manifest.Hash
		for j := range root {
			root[j] = byte(rng.Uint32())
		}
		h.announceFrom(root, randomPeer(rng, "198.51.100.7", 7000), tracker.EventStarted, 1000)
		if i%500 == 499 {
			h.clock.Advance(time.Second)
			for k, root := range live {
				res := h.announceTo(root, peer(10*k+2), tracker.EventNone, 1000, 0)
				if res.SwarmSize != 2 || len(res.Peers) != 1 || res.Peers[0].ID != peer(10*k+1).id {
					t.Fatalf("flood %d: live swarm %d answered %+v", i, k, res)
				}
			}
		}
	}
	if m := h.metrics(); m["stampede_tracker_swarms"] != 8 || m[`stampede_tracker_swarms_removed_total{reason="limit"}`] != 2000-6 {
		t.Errorf("metrics %v", m)
	}

	// Every swarm live: a new one is not kept, and is told it is alone.
	h = newHarness(t, newStore, tracker.Config{MaxSwarms: 2})
	for k, root := range live {
		h.announceTo(root, peer(10*k+1), tracker.EventStarted, 0, 0)
		h.announceTo(root, peer(10*k+2), tracker.EventStarted, 1000, 0)
	}
	for i := range 3 {
		if res := h.announceTo(manifest.Hash{0x33}, peer(100+i), tracker.EventStarted, 1000, 0); res.SwarmSize != 1 || len(res.Peers) != 0 {
			t.Errorf("new swarm past the limit: %+v, want alone", res)
		}
	}
	if m := h.metrics(); m["stampede_tracker_swarms"] != 2 || m["stampede_tracker_announces_swarms_full_total"] != 3 ||
		m[`stampede_tracker_swarms_removed_total{reason="limit"}`] != 0 {
		t.Errorf("metrics %v", m)
	}
	// A swarm whose peers of another source left is lone again, and
	// the one to go.
	h.clock.Advance(time.Second)
	h.announceTo(live[0], peer(2), tracker.EventStopped, 1000, 0)
	h.announceTo(manifest.Hash{0x33}, peer(100), tracker.EventStarted, 1000, 0)
	if res := h.announceTo(manifest.Hash{0x33}, peer(101), tracker.EventStarted, 1000, 0); res.SwarmSize != 2 {
		t.Errorf("new swarm after one went lone: swarm_size %d, want 2", res.SwarmSize)
	}
	if res := h.announceTo(live[1], peer(12), tracker.EventNone, 1000, 0); res.SwarmSize != 2 {
		t.Errorf("live swarm after a lone one went: swarm_size %d, want 2", res.SwarmSize)
	}
	if res := h.announceTo(live[0], peer(3), tracker.EventStarted, 1000, 0); res.SwarmSize != 1 {
		t.Errorf("the lone swarm: swarm_size %d, want 1 (pushed out)", res.SwarmSize)
	}
}

// peerAt is peer(i) announcing from ip.
func peerAt(ip string, i int) testPeer {
	p := peer(i)
	p.ip = netip.MustParseAddr(ip)
	return p
}

// testSwarmsShared: past MaxSwarms, a new swarm, made by a source that
// made n of the swarms kept, pushes out a swarm of the source that made
// the most, when that one made more than n+1 (its lone swarm idle longest,
// else its swarm idle longest); else a lone swarm of a source that made
// more than n, or of its own; else it is not kept. So a few addresses
// cannot hold every slot, a swarm whose source made only it is never
// pushed out (but lone, by a newcomer that made none), and no source
// pushes out its own live swarms.
func testSwarmsShared(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{MaxSwarms: 8})
	const a, b = "198.51.100.1", "198.51.100.2"
	ids := 1000
	from := func(ip string) testPeer { ids++; return peerAt(ip, ids) }
	kept := func(root manifest.Hash) bool {
		_, _, ok := h.tr.SwarmSize(root, testSize)
		return ok
	}
	// join announces the peers to root, one second after the last step.
	join := func(root manifest.Hash, ps ...testPeer) *tracker.AnnounceResponse {
		h.clock.Advance(time.Second)
		var res *tracker.AnnounceResponse
		for _, p := range ps {
			res = h.announceTo(root, p, tracker.EventStarted, 1000, 0)
		}
		return res
	}
	check := func(step string, want map[string]manifest.Hash, gone map[string]manifest.Hash) {
		t.Helper()
		for name, root := range want {
			if !kept(root) {
				t.Errorf("%s: swarm %s was pushed out or not kept", step, name)
			}
		}
		for name, root := range gone {
			if kept(root) {
				t.Errorf("%s: swarm %s is still kept", step, name)
			}
		}
	}

	// A makes 5 swarms, B 3, each joined by the other: none is lone.
	var as, bs []manifest.Hash
	inA := make(map[manifest.Hash]testPeer) // A's peer in each of B's
	inB := make(map[manifest.Hash]testPeer) // B's peer in each of A's
	for i, maker := range []string{a, a, a, b, b, a, a, b} {
		root := manifest.Hash{0xa0, byte(i)}
		pa, pb := from(a), from(b)
		if maker == a {
			join(root, pa, pb)
			as = append(as, root)
		} else {
			join(root, pb, pa)
			bs = append(bs, root)
		}
		inA[root], inB[root] = pa, pb
	}
	x1, x3, x5 := manifest.Hash{0x11}, manifest.Hash{0x13}, manifest.Hash{0x15}
	y, z, w, v := manifest.Hash{0x21}, manifest.Hash{0x22}, manifest.Hash{0x23}, manifest.Hash{0x24}

	// An honest source: A made the most (5 > 0+1), and its swarm idle
	// longest goes.
	join(x1, peer(1))
	check("an honest newcomer", map[string]manifest.Hash{"x1": x1}, map[string]manifest.Hash{"A's first": as[0]})
	if res := join(x1, peer(2)); res.SwarmSize != 2 || !containsID(res.Peers, peer(1).id) {
		t.Errorf("x1's second peer: %+v, want its first", res)
	}
	// A (4) and B (3) cannot: nobody made more than one more than they.
	for _, src := range []string{a, b} {
		if res := join(y, from(src)); res.SwarmSize != 1 || len(res.Peers) != 0 {
			t.Errorf("a new swarm of %s: %+v, want it not kept", src, res)
		}
	}
	check("the hoarders' new swarm", nil, map[string]manifest.Hash{"y": y})
	// Another honest source, alone in its swarm (lone): A's next goes.
	join(x3, peer(3))
	check("a second honest newcomer", map[string]manifest.Hash{"x3": x3, "x1": x1}, map[string]manifest.Hash{"A's second": as[1]})
	// A and B have made 3 each now: x3 is lone, but its source made
	// fewer than they have.
	for _, src := range []string{a, b} {
		join(z, from(src))
	}
	check("the hoarders against a lone honest swarm", map[string]manifest.Hash{"x3": x3}, map[string]manifest.Hash{"z": z})
	// A and B tie at 3: the swarm idle longest of either goes (A's third,
	// made before B's first).
	join(x5, peer(5))
	check("a third honest newcomer", map[string]manifest.Hash{"x1": x1, "x3": x3, "x5": x5, "B's first": bs[0]},
		map[string]manifest.Hash{"A's third": as[2]})

	// B's first swarm turns lone (A's peer leaves): A, which made 2,
	// pushes it out, B having made 3; not the lone honest ones.
	h.clock.Advance(time.Second)
	h.announceTo(bs[0], inA[bs[0]], tracker.EventStopped, 1000, 0)
	join(w, from(a))
	check("a lone swarm of a source that made more", map[string]manifest.Hash{"w": w, "x3": x3, "x5": x5},
		map[string]manifest.Hash{"B's first": bs[0]})
	// B has made 2, A 3: B pushes out none of A's, which made but one more
	// than B would with its new one, nor its own live swarms...
	join(w, from(b))
	join(v, from(b))
	check("B's new swarm", map[string]manifest.Hash{"B's second": bs[1], "B's third": bs[2]}, map[string]manifest.Hash{"v": v})
	// ... but its own lone swarm, once one of its swarms is.
	h.clock.Advance(time.Second)
	h.announceTo(bs[1], inA[bs[1]], tracker.EventStopped, 1000, 0)
	join(v, from(b))
	check("B's new swarm once its own is lone", map[string]manifest.Hash{"v": v, "B's third": bs[2], "x1": x1, "x3": x3, "x5": x5},
		map[string]manifest.Hash{"B's second": bs[1]})
	m := h.metrics()
	if m["stampede_tracker_swarms"] != 8 || m[`stampede_tracker_swarms_removed_total{reason="limit"}`] != 5 ||
		m["stampede_tracker_announces_swarms_full_total"] != 5 {
		t.Errorf("swarms %d (want 8), pushed out %d (want 5), not kept %d (want 5)", m["stampede_tracker_swarms"],
			m[`stampede_tracker_swarms_removed_total{reason="limit"}`], m["stampede_tracker_announces_swarms_full_total"])
	}

	// The host's own addresses, exempt from the bounds on a source, are one
	// source here: its swarms go first when it made the most.
	h = newHarness(t, newStore, tracker.Config{MaxSwarms: 2})
	host := []manifest.Hash{{0xb0}, {0xb1}}
	for _, root := range host {
		join(root, peerAt("127.0.0.1", ids+1), peerAt("::1", ids+2))
		ids += 2
	}
	join(x1, peer(1))
	check("an honest newcomer against the host's", map[string]manifest.Hash{"x1": x1, "the host's second": host[1]},
		map[string]manifest.Hash{"the host's first": host[0]})
}
