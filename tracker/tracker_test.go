package tracker

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
)

// fakeClock is the time the tests give the tracker.
type fakeClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

var testRoot = manifest.Hash{0xab, 0xcd, 1, 2, 3}

const testSize = 10 << 20

// testPeer is a peer of the tests: peer(i) has an id and an IP of its own.
type testPeer struct {
	id   PeerID
	ip   netip.Addr
	port uint16
}

func peer(i int) testPeer {
	var id PeerID
	binary.BigEndian.PutUint64(id[:], uint64(i))
	id[15] = 0x5a
	return testPeer{id: id, ip: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), port: 7000}
}

func (p testPeer) addr() netip.AddrPort { return netip.AddrPortFrom(p.ip, p.port) }

type harness struct {
	t     *testing.T
	tr    *Tracker
	clock *fakeClock
}

func newHarness(t *testing.T, cfg Config) *harness {
	clock := &fakeClock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	cfg.Now = clock.Now
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	return &harness{t: t, tr: New(cfg), clock: clock}
}

// serve sends an announce with the raw query from remote and returns the
// recorded response.
func (h *harness) serve(method, query, remote string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "/announce?"+query, nil)
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	h.tr.ServeHTTP(rec, req)
	return rec
}

func query(root manifest.Hash, p testPeer, event Event, left int64, numWant int) string {
	q := url.Values{}
	r := AnnounceRequest{Root: root, Size: testSize, ID: p.id, Port: p.port, Left: left, Event: event, NumWant: numWant}
	r.addTo(q)
	return q.Encode()
}

// announce announces p to the test swarm through ServeHTTP.
func (h *harness) announce(p testPeer, event Event, left int64, numWant int) *AnnounceResponse {
	h.t.Helper()
	return h.announceTo(testRoot, p, event, left, numWant)
}

func (h *harness) announceTo(root manifest.Hash, p testPeer, event Event, left int64, numWant int) *AnnounceResponse {
	h.t.Helper()
	rec := h.serve("GET", query(root, p, event, left, numWant), netip.AddrPortFrom(p.ip, 51234).String())
	if rec.Code != http.StatusOK {
		h.t.Fatalf("announce: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		h.t.Errorf("Content-Type %q", ct)
	}
	var res AnnounceResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		h.t.Fatalf("answer %s: %v", rec.Body, err)
	}
	for _, q := range res.Peers {
		if q.ID == p.id {
			h.t.Fatalf("%s was handed itself: %+v", p.id, res.Peers)
		}
		if q.Addr.Port() == 0 {
			h.t.Fatalf("handed out an unreachable peer: %+v", q)
		}
	}
	return &res
}

// tableLen returns the size of the test swarm's table.
func (h *harness) tableLen() int {
	return h.tr.store.(*MemoryStore).tableLen(testRoot, testSize)
}

func (h *harness) metrics() map[string]int64 {
	h.t.Helper()
	var b strings.Builder
	if err := h.tr.WriteMetrics(&b); err != nil {
		h.t.Fatal(err)
	}
	sample := regexp.MustCompile(`^[a-z_]+(\{[a-z_]+="[^"]*"\})? -?[0-9]+$`)
	out := make(map[string]int64)
	for line := range strings.Lines(b.String()) {
		line = strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(line, "# HELP ") || strings.HasPrefix(line, "# TYPE ") {
			continue
		}
		if !sample.MatchString(line) {
			h.t.Fatalf("bad exposition line %q", line)
		}
		series, v, _ := strings.Cut(line, " ")
		out[series], _ = strconv.ParseInt(v, 10, 64)
	}
	return out
}

func ids(peers []Peer) []PeerID {
	var out []PeerID
	for _, p := range peers {
		out = append(out, p.ID)
	}
	return out
}

// TestSwarmSizeEstimate runs crowds of 10 to 10,000 peers through a tracker
// whose table holds 256: the table never grows past it, and swarm_size
// stays within 30 % of the truth as they arrive, while they stay, and after
// half of them leave without a word. (It calls Announce rather than
// ServeHTTP: the JSON would take most of the time.)
func TestSwarmSizeEstimate(t *testing.T) {
	const interval = 15 * time.Second
	for _, n := range []int{10, 100, 1000, 10000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			h := newHarness(t, Config{Interval: interval, Logger: slog.New(slog.DiscardHandler)})
			worst := 0.0
			// Every peer announces once an interval, at its own phase.
			// truth(i) is the swarm's size at peer i's announce; lo and hi
			// bound the answer allowed.
			round := func(live int, event Event, truth func(i int) (lo, hi int), what string) {
				t.Helper()
				for i := range n {
					h.clock.Advance(interval / time.Duration(n))
					if i >= live {
						continue
					}
					p := peer(i)
					res, err := h.tr.Announce(AnnounceRequest{Root: testRoot, Size: testSize, ID: p.id, Port: p.port, Left: 1000, Event: event, NumWant: 1}, p.addr())
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
					if l := h.tableLen(); l > DefaultMaxPeersPerSwarm {
						t.Fatalf("%s, peer %d: table of %d peers, capacity %d", what, i, l, DefaultMaxPeersPerSwarm)
					}
				}
			}
			exactly := func(k int) func(int) (int, int) { return func(int) (int, int) { return k, k } }
			round(n, EventStarted, func(i int) (int, int) { return i + 1, i + 1 }, "arriving")
			for r := range 2 {
				round(n, EventNone, exactly(n), fmt.Sprintf("staying, round %d", r))
			}
			// Half go silent. They count until they expire from the table
			// (3 intervals), or, in a swarm larger than the table, until
			// they drop out of the estimator's window (2 intervals).
			for r := range 3 {
				round(n/2, EventNone, func(int) (int, int) { return n / 2, n }, fmt.Sprintf("half gone, round %d", r))
			}
			round(n/2, EventNone, exactly(n/2), "half gone for 3 intervals")
			t.Logf("n=%d: worst error %.1f%%", n, 100*worst)

			// All gone: a newcomer is alone.
			h.clock.Advance(3 * interval)
			if res := h.announce(peer(n), EventStarted, 1000, 0); res.SwarmSize != 1 || len(res.Peers) != 0 {
				t.Errorf("alone after everyone left: swarm_size %d, peers %d", res.SwarmSize, len(res.Peers))
			}
		})
	}
}

func TestCompletedFirstThenArrivalsThenRandom(t *testing.T) {
	h := newHarness(t, Config{})
	for i := range 20 {
		h.announce(peer(i), EventStarted, 1000, 0)
	}
	for i := 100; i < 103; i++ {
		h.announce(peer(i), EventStarted, 0, 0)
	}
	asker := peer(999)
	res := h.announce(asker, EventStarted, testSize, 10)
	if res.SwarmSize != 24 || res.Complete != 3 || res.Interval != DefaultInterval {
		t.Errorf("swarm_size %d, complete %d, interval %v; want 24, 3, %v", res.SwarmSize, res.Complete, res.Interval, DefaultInterval)
	}
	got := ids(res.Peers)
	if len(got) != 10 {
		t.Fatalf("%d peers, want 10", len(got))
	}
	seeds := []PeerID{peer(100).id, peer(101).id, peer(102).id}
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
	res = h.announce(asker, EventNone, testSize, 100)
	if len(res.Peers) != 23 {
		t.Fatalf("%d peers, want all 23 others", len(res.Peers))
	}
	seen := make(map[PeerID]bool)
	for _, id := range ids(res.Peers) {
		if seen[id] {
			t.Errorf("%s handed out twice", id)
		}
		seen[id] = true
	}
}

func sameSet(a, b []PeerID) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	cmp := func(x, y PeerID) int { return strings.Compare(x.String(), y.String()) }
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}

func TestSeedsTakenAtRandom(t *testing.T) {
	h := newHarness(t, Config{})
	for i := range 30 {
		h.announce(peer(i), EventStarted, 0, 0)
	}
	handed := make(map[PeerID]int)
	for i := range 30 {
		for _, p := range h.announce(peer(1000+i), EventStarted, 1000, 5).Peers {
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

func TestUnreachablePeersCountedNotHanded(t *testing.T) {
	h := newHarness(t, Config{})
	hidden := peer(1)
	hidden.port = 0
	h.announce(hidden, EventStarted, 0, 0)
	res := h.announce(peer(2), EventStarted, 1000, 0)
	if res.SwarmSize != 2 || res.Complete != 1 || len(res.Peers) != 0 {
		t.Errorf("swarm_size %d, complete %d, peers %v; want 2, 1, none", res.SwarmSize, res.Complete, res.Peers)
	}
	// The hidden peer still gets the others.
	h.clock.Advance(time.Second)
	if res := h.announce(hidden, EventNone, 0, 0); len(res.Peers) != 1 || res.Peers[0].ID != peer(2).id {
		t.Errorf("the unreachable peer got %v, want peer 2", res.Peers)
	}
}

func TestExpiryAfterThreeIntervals(t *testing.T) {
	const interval = 10 * time.Second
	h := newHarness(t, Config{Interval: interval})
	h.announce(peer(1), EventStarted, 1000, 0)
	h.clock.Advance(3*interval - time.Nanosecond)
	if res := h.announce(peer(2), EventStarted, 1000, 0); res.SwarmSize != 2 || len(res.Peers) != 1 {
		t.Errorf("just before 3 intervals: swarm_size %d, peers %v; want 2 and peer 1", res.SwarmSize, res.Peers)
	}
	h.clock.Advance(time.Nanosecond)
	if res := h.announce(peer(3), EventStarted, 1000, 0); res.SwarmSize != 2 || len(res.Peers) != 1 || res.Peers[0].ID != peer(2).id {
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
}

func TestStoppedRemovesAtOnce(t *testing.T) {
	h := newHarness(t, Config{})
	h.announce(peer(1), EventStarted, 1000, 0)
	h.announce(peer(2), EventStarted, 1000, 0)
	// Peer 3 learnt peer 1's id, but cannot take it out from elsewhere.
	impostor := peer(1)
	impostor.ip = peer(3).ip
	if res := h.announce(impostor, EventStopped, 1000, 0); res.SwarmSize != 2 {
		t.Errorf("stopped from another IP: swarm_size %d, want 2", res.SwarmSize)
	}
	res := h.announce(peer(1), EventStopped, 1000, 0)
	if res.SwarmSize != 1 || len(res.Peers) != 0 {
		t.Errorf("answer to stopped: swarm_size %d, peers %v; want 1, none", res.SwarmSize, res.Peers)
	}
	h.clock.Advance(time.Second)
	if res := h.announce(peer(2), EventNone, 1000, 0); res.SwarmSize != 1 || len(res.Peers) != 0 {
		t.Errorf("after peer 1 stopped: swarm_size %d, peers %v", res.SwarmSize, res.Peers)
	}
	if m := h.metrics(); m[`stampede_tracker_peers_removed_total{reason="stopped"}`] != 1 || m[`stampede_tracker_announces_total{event="stopped"}`] != 2 {
		t.Errorf("metrics %v", m)
	}
}

// TestLateAnnounceAfterStopped: a peer's "completed", sent just before it
// left, overtaken by its "stopped": it does not put the peer back (it
// would be handed out first, as a seed, to everyone for three intervals).
// A "started" from it does: it came back.
func TestLateAnnounceAfterStopped(t *testing.T) {
	h := newHarness(t, Config{})
	h.announce(peer(1), EventStarted, 1000, 0)
	h.announce(peer(2), EventStarted, 1000, 0)
	h.clock.Advance(2 * time.Second)
	h.announce(peer(1), EventStopped, 0, 0)
	h.clock.Advance(100 * time.Millisecond)
	h.announce(peer(1), EventCompleted, 0, 0)
	h.clock.Advance(2 * time.Second)
	if res := h.announce(peer(2), EventNone, 1000, 0); res.SwarmSize != 1 || len(res.Peers) != 0 {
		t.Errorf("a late completed put the stopped peer back: swarm_size %d, peers %v", res.SwarmSize, res.Peers)
	}
	if m := h.metrics(); m[`stampede_tracker_announces_late_total`] != 1 {
		t.Errorf("late announces counted %d, want 1", m[`stampede_tracker_announces_late_total`])
	}
	h.announce(peer(1), EventStarted, 1000, 0)
	h.clock.Advance(2 * time.Second)
	if res := h.announce(peer(2), EventNone, 1000, 0); res.SwarmSize != 2 || len(res.Peers) != 1 {
		t.Errorf("peer 1 rejoined: swarm_size %d, peers %v; want 2, one", res.SwarmSize, res.Peers)
	}
}

func TestRateLimitPerPeer(t *testing.T) {
	h := newHarness(t, Config{})
	a, b, c := peer(1), peer(2), peer(3)
	h.announce(b, EventStarted, 1000, 0)
	h.announce(c, EventStarted, 1000, 0)
	h.announce(a, EventStarted, 1000, 0)

	// Again within the second, claiming to be done and reachable elsewhere:
	// answered from the cache, nothing changes.
	h.clock.Advance(500 * time.Millisecond)
	moved := a
	moved.port = 9999
	res := h.announce(moved, EventNone, 0, 0)
	if !sameSet(ids(res.Peers), []PeerID{b.id, c.id}) || res.SwarmSize != 3 || res.Complete != 0 {
		t.Errorf("rate-limited answer: %+v", res)
	}
	// The cache is shared, and never hands anyone itself.
	res = h.announce(b, EventNone, 1000, 0)
	if !sameSet(ids(res.Peers), []PeerID{a.id, c.id}) || res.Peers[0].Addr.Port() != 7000 && res.Peers[1].Addr.Port() != 7000 {
		t.Errorf("rate-limited answer to b: %+v", res.Peers)
	}
	if m := h.metrics(); m["stampede_tracker_announces_rate_limited_total"] != 2 || m[`stampede_tracker_announces_total{event="periodic"}`] != 2 {
		t.Errorf("metrics %v", m)
	}

	// A completion is never held back.
	res = h.announce(a, EventCompleted, 0, 0)
	if res.Complete != 1 {
		t.Errorf("completed within the second: complete %d, want 1", res.Complete)
	}
	// A second later, the move counts.
	h.clock.Advance(time.Second)
	h.announce(moved, EventNone, 0, 0)
	h.clock.Advance(time.Second)
	for _, p := range h.announce(c, EventNone, 1000, 0).Peers {
		if p.ID == a.id && (p.Addr.Port() != 9999 || !p.Complete) {
			t.Errorf("a after it moved: %+v", p)
		}
	}
}

func TestBadAnnounces(t *testing.T) {
	h := newHarness(t, Config{})
	root, id := testRoot.String(), peer(1).id.String()
	good := "root=" + root + "&size=100&id=" + id + "&port=1&left=5"
	for _, q := range []string{
		"",
		"size=100&id=" + id + "&port=1&left=5",
		"root=" + root[:63] + "&size=100&id=" + id + "&port=1&left=5",
		"root=" + strings.Repeat("g", 64) + "&size=100&id=" + id + "&port=1&left=5",
		"root=" + root + "&size=-1&id=" + id + "&port=1&left=0",
		"root=" + root + "&size=" + strconv.FormatInt(manifest.MaxSize+1, 10) + "&id=" + id + "&port=1&left=0",
		"root=" + root + "&size=100&id=" + id + "&port=1&left=101",
		"root=" + root + "&size=100&id=" + id + "&port=1&left=-1",
		"root=" + root + "&size=100&id=" + id[:30] + "&port=1&left=5",
		"root=" + root + "&size=100&port=1&left=5",
		"root=" + root + "&size=100&id=" + id + "&port=65536&left=5",
		"root=" + root + "&size=100&id=" + id + "&left=5",
		"root=" + root + "&size=100&id=" + id + "&port=1",
		"root=" + root + "&size=1e2&id=" + id + "&port=1&left=5",
		good + "&event=bogus",
		good + "&event=completed",
		good + "&numwant=-1",
		good + "&numwant=ten",
		good + "&root=" + root,
		good + "&x=%zz",
	} {
		rec := h.serve("GET", q, "192.0.2.1:1234")
		var body struct {
			Error string `json:"error"`
		}
		err := json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != http.StatusBadRequest || err != nil || body.Error == "" || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%q: %d %q", q, rec.Code, rec.Body)
		}
	}
	if rec := h.serve("GET", good+"&unknown=1&numwant=1000&event=", "192.0.2.1:1234"); rec.Code != http.StatusOK {
		t.Errorf("good announce: %d %s", rec.Code, rec.Body)
	}
	if rec := h.serve("POST", good, "192.0.2.1:1234"); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET" {
		t.Errorf("POST: %d %s", rec.Code, rec.Body)
	}
	if m := h.metrics(); m["stampede_tracker_announces_rejected_total"] != 20 {
		t.Errorf("rejected %d, want 20", m["stampede_tracker_announces_rejected_total"])
	}
}

func TestAnnounceMethodChecksItsRequest(t *testing.T) {
	h := newHarness(t, Config{})
	p := peer(1)
	for _, r := range []AnnounceRequest{
		{Root: testRoot, Size: 10, ID: p.id, Left: 11},
		{Root: testRoot, Size: -1, ID: p.id},
		{Root: testRoot, Size: 10, ID: p.id, Event: "paused"},
		{Root: testRoot, Size: 10, ID: p.id, Left: 1, Event: EventCompleted},
	} {
		if res, err := h.tr.Announce(r, p.addr()); !errors.Is(err, errBadRequest) {
			t.Errorf("%+v: %+v, %v", r, res, err)
		}
	}
	if res, err := h.tr.Announce(AnnounceRequest{Root: testRoot, Size: 10, ID: p.id, NumWant: -5}, p.addr()); err != nil || res.SwarmSize != 1 {
		t.Errorf("good request: %+v, %v", res, err)
	}
}

func TestIPv6AndMappedAddresses(t *testing.T) {
	h := newHarness(t, Config{})
	h.serve("GET", query(testRoot, peer(1), EventStarted, 1000, 0), "[::ffff:192.0.2.9]:4000")
	h.serve("GET", query(testRoot, peer(2), EventStarted, 1000, 0), "[2001:db8::1]:4000")
	res := h.announce(peer(3), EventStarted, 1000, 0)
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

func TestSwarmsBounded(t *testing.T) {
	h := newHarness(t, Config{MaxSwarms: 3})
	for i := range 5 {
		h.announceTo(manifest.Hash{byte(i)}, peer(i), EventStarted, 1000, 0)
		h.clock.Advance(time.Second)
	}
	m := h.metrics()
	if m["stampede_tracker_swarms"] != 3 || m[`stampede_tracker_swarms_removed_total{reason="limit"}`] != 2 {
		t.Errorf("metrics %v", m)
	}
	// The oldest swarms went: a peer of swarm 0 finds itself alone.
	if res := h.announceTo(manifest.Hash{0}, peer(10), EventStarted, 1000, 0); res.SwarmSize != 1 {
		t.Errorf("swarm 0 still has %d peers", res.SwarmSize)
	}
	if res := h.announceTo(manifest.Hash{4}, peer(11), EventStarted, 1000, 0); res.SwarmSize != 2 {
		t.Errorf("swarm 4 has %d peers, want 2", res.SwarmSize)
	}
}

func TestMetricsCountAnnounces(t *testing.T) {
	h := newHarness(t, Config{})
	h.announce(peer(1), EventStarted, 1000, 0)
	h.announce(peer(2), EventStarted, 1000, 0)
	h.clock.Advance(time.Second)
	h.announce(peer(1), EventNone, 1000, 0)
	h.announce(peer(1), EventCompleted, 0, 0)
	for series, want := range map[string]int64{
		`stampede_tracker_announces_total{event="started"}`:   2,
		`stampede_tracker_announces_total{event="periodic"}`:  1,
		`stampede_tracker_announces_total{event="completed"}`: 1,
		`stampede_tracker_announces_total{event="stopped"}`:   0,
		`stampede_tracker_swarms`:                             1,
		`stampede_tracker_peers`:                              2,
		`stampede_tracker_peers_estimated`:                    2,
	} {
		if got := h.metrics()[series]; got != want {
			t.Errorf("%s = %d, want %d", series, got, want)
		}
	}
}

// TestConcurrentAnnounces lets the race detector watch announces to a few
// swarms at once.
func TestConcurrentAnnounces(t *testing.T) {
	h := newHarness(t, Config{MaxPeersPerSwarm: 32, MaxSwarms: 2})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				p := peer(g*1000 + i)
				root := manifest.Hash{byte(i % 3)}
				rec := h.serve("GET", query(root, p, EventStarted, 1000, 5), netip.AddrPortFrom(p.ip, 1).String())
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

func BenchmarkAnnounce(b *testing.B) {
	tr := New(Config{Logger: slog.New(slog.DiscardHandler)})
	i := 0
	for b.Loop() {
		p := peer(i % 5000)
		if _, err := tr.Announce(AnnounceRequest{Root: testRoot, Size: testSize, ID: p.id, Port: p.port, Left: 1}, p.addr()); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func TestPeersLooksWithoutJoining(t *testing.T) {
	now := time.Unix(1e9, 0)
	tr := New(Config{Now: func() time.Time { return now }})
	root := manifest.Hash{1}
	if got := tr.Peers(root, 100, 10); got != nil {
		t.Fatalf("unknown swarm: %v", got)
	}
	var b bytes.Buffer
	tr.WriteMetrics(&b)
	if !strings.Contains(b.String(), "stampede_tracker_swarms 0\n") {
		t.Fatalf("Peers created a swarm:\n%s", b.String())
	}
	for i, addr := range []string{"192.0.2.1:7000", "192.0.2.2:0", "192.0.2.3:7002"} {
		ap := netip.MustParseAddrPort(addr)
		req := AnnounceRequest{Root: root, Size: 100, Port: ap.Port(), Left: 100, Event: EventStarted}
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
	if got := tr.Peers(root, 101, 10); got != nil {
		t.Errorf("another size is another swarm: %v", got)
	}
	// Peers expire as for announces.
	now = now.Add(expiryIntervals * DefaultInterval)
	if got := tr.Peers(root, 100, 10); len(got) != 0 {
		t.Errorf("after expiry: %v", got)
	}
}
