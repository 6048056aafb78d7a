package tracker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
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
	rec := h.serve("GET", query(testRoot, p, event, left, numWant), netip.AddrPortFrom(p.ip, 51234).String())
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
	return &res
}

func (h *harness) metrics() map[string]int64 {
	h.t.Helper()
	var b strings.Builder
	if err := h.tr.WriteMetrics(&b); err != nil {
		h.t.Fatal(err)
	}
	sample := regexp.MustCompile(`^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? \S+$`)
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
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			h.t.Fatalf("bad value in %q: %v", line, err)
		}
		out[series] = int64(f)
	}
	return out
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

// failingStore is a Store whose backend is down.
type failingStore struct{}

var errDown = errors.New("dial tcp 10.1.2.3:6379: connection refused")

func (failingStore) Announce(context.Context, AnnounceRequest, netip.AddrPort, time.Time) (Outcome, error) {
	return Outcome{}, errDown
}

func (failingStore) Peers(context.Context, manifest.Hash, int64, int, time.Time) (Outcome, error) {
	return Outcome{}, errDown
}

func (failingStore) Stats(context.Context, time.Time) (StoreStats, error) {
	return StoreStats{}, errDown
}

// TestStoreFailure: a store that fails gets announces a 503 tracker
// failure that does not say where the store is, and the tracker goes on.
func TestStoreFailure(t *testing.T) {
	h := newHarness(t, Config{Store: failingStore{}})
	rec := h.serve("GET", query(testRoot, peer(1), EventStarted, 100, 0), "192.0.2.1:1234")
	var body struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusServiceUnavailable ||
		!strings.Contains(body.Error, "tracker failure") || strings.Contains(body.Error, "10.1.2.3") || rec.Header().Get("Retry-After") == "" {
		t.Errorf("answer: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	if _, err := h.tr.Announce(AnnounceRequest{Root: testRoot, Size: 10, ID: peer(1).id}, peer(1).addr()); !errors.Is(err, ErrStore) || !errors.Is(err, errDown) {
		t.Errorf("Announce: %v", err)
	}
	if got := h.tr.Peers(testRoot, testSize, 10); got != nil {
		t.Errorf("Peers: %v", got)
	}
	if _, _, ok := h.tr.SwarmSize(testRoot, testSize); ok {
		t.Error("SwarmSize: ok")
	}
	var b strings.Builder
	if err := h.tr.WriteMetrics(&b); !errors.Is(err, ErrStore) {
		t.Errorf("WriteMetrics: %v", err)
	}
	if !strings.Contains(b.String(), "stampede_tracker_store_failures_total 5\n") || strings.Contains(b.String(), "stampede_tracker_swarms ") {
		t.Errorf("metrics:\n%s", b.String())
	}
}

// TestSwarmSize: SwarmSize and Stats say what an announce would, and count
// no one in.
func TestSwarmSize(t *testing.T) {
	h := newHarness(t, Config{})
	h.announce(peer(1), EventStarted, 100, 0)
	h.announce(peer(2), EventStarted, 0, 0)
	h.announce(peer(3), EventStarted, 100, 0)
	for range 3 {
		if n, seeds, ok := h.tr.SwarmSize(testRoot, testSize); n != 3 || seeds != 1 || !ok {
			t.Fatalf("SwarmSize: %d peers, %d seeds, %v; want 3, 1, true", n, seeds, ok)
		}
	}
	if n, _, ok := h.tr.SwarmSize(manifest.Hash{1}, testSize); n != 0 || ok {
		t.Errorf("SwarmSize of no swarm: %d, %v", n, ok)
	}
	st, err := h.tr.Stats(t.Context())
	if err != nil || st.Swarms != 1 || st.Peers != 3 || st.Estimated != 3 {
		t.Errorf("Stats: %+v, %v", st, err)
	}
	// Expired, the swarm is gone for both.
	h.clock.Advance(ExpiryIntervals*h.tr.Interval() + time.Second)
	if n, _, ok := h.tr.SwarmSize(testRoot, testSize); ok {
		t.Errorf("SwarmSize after expiry: %d", n)
	}
	if st, err := h.tr.Stats(t.Context()); err != nil || st.Swarms != 0 {
		t.Errorf("Stats after expiry: %+v, %v", st, err)
	}
}
