// Package storetest holds the behaviour every tracker.Store must have, as
// one conformance suite (Run) that each implementation's tests call with a
// constructor, and the benchmarks (BenchmarkStore, BenchmarkHTTP) that
// measure announces per second and their p99 latency for any of them.
// package tracker runs it on the MemoryStore, package redisstore on an
// in-process Redis and on a real redis-server.
//
// The suite drives a tracker.Tracker over the store with a fake clock,
// through its HTTP handler and its public methods only, so that it checks
// what peers see: the picks and their order, the counts and estimates,
// expiry, "stopped" and late announces, the rate limit, the bounds on
// peers and swarms, and two trackers sharing one store.
package storetest

import (
	"encoding/binary"
	"encoding/json"
	"log/slog"
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
	"github.com/stampede-dev/stampede/tracker"
)

// NewStore returns a new, empty store for limits. The store must be
// cleaned up by the constructor (t.Cleanup) when the test ends.
type NewStore func(t *testing.T, limits tracker.Limits) tracker.Store

// Options tunes Run for a store.
type Options struct {
	// Crowds are the swarm sizes the estimate is checked at. Default
	// 10, 100 and 1000; a fast store adds 10,000.
	Crowds []int
	// NoFloods leaves out the attacks over HTTP (RandomRootFlood,
	// SybilFlood, SwarmHoardFlood: 250,000 requests, some 30,000 of them
	// reaching the store), for a store too slow for them (an in-process
	// Redis).
	NoFloods bool
}

// Run runs the conformance suite against the stores newStore makes.
func Run(t *testing.T, newStore NewStore, opts Options) {
	if len(opts.Crowds) == 0 {
		opts.Crowds = []int{10, 100, 1000}
	}
	for _, tc := range []struct {
		name string
		run  func(*testing.T, NewStore)
	}{
		{"CompletedFirstThenArrivalsThenRandom", testCompletedFirst},
		{"SeedsTakenAtRandom", testSeedsTakenAtRandom},
		{"UnreachablePeersCountedNotHanded", testUnreachable},
		{"ExpiryAfterThreeIntervals", testExpiry},
		{"StoppedRemovesAtOnce", testStopped},
		{"LateAnnounceAfterStopped", testLateAfterStopped},
		{"RateLimitPerPeer", testRateLimit},
		{"IPv6AndMappedAddresses", testIPv6},
		{"SwarmsBounded", testSwarmsBounded},
		{"PeersPerAddressBounded", testPeersPerAddress},
		{"SwarmsFullKeepLiveSwarms", testSwarmsFull},
		{"SwarmsSharedAmongSources", testSwarmsShared},
		{"RandomRootFlood", testRandomRootFlood},
		{"SybilFlood", testSybilFlood},
		{"SwarmHoardFlood", testSwarmHoardFlood},
		{"TableBounded", testTableBounded},
		{"MetricsCountAnnounces", testMetricsCount},
		{"PeersLooksWithoutJoining", testPeersLooks},
		{"TwoTrackersShareTheStore", testShared},
		{"RandomAnnounces", testRandomAnnounces},
		{"ConcurrentAnnounces", testConcurrent},
	} {
		if opts.NoFloods && strings.HasSuffix(tc.name, "Flood") {
			continue
		}
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore) })
	}
	t.Run("SwarmSizeEstimate", func(t *testing.T) { testSwarmSizeEstimate(t, newStore, opts.Crowds) })
}

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

var testRoot = manifest.Hash{0xab, 0xcd, 1, 2, 3}

const testSize = 10 << 20

// testPeer is a peer of the tests: peer(i) has an id and an IP of its own.
type testPeer struct {
	id   tracker.PeerID
	ip   netip.Addr
	port uint16
}

func peer(i int) testPeer {
	var id tracker.PeerID
	binary.BigEndian.PutUint64(id[:], uint64(i))
	id[15] = 0x5a
	return testPeer{id: id, ip: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), port: 7000}
}

func (p testPeer) addr() netip.AddrPort { return netip.AddrPortFrom(p.ip, p.port) }

type harness struct {
	t      *testing.T
	tr     *tracker.Tracker
	store  tracker.Store
	clock  *fakeClock
	limits tracker.Limits
}

func newHarness(t *testing.T, newStore NewStore, cfg tracker.Config) *harness {
	clock := &fakeClock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	cfg.Now = clock.Now
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	cfg.StoreTimeout = 10 * time.Second // a race-detected in-process Redis is slow
	limits := cfg.Limits()
	cfg.Store = newStore(t, limits)
	return &harness{t: t, tr: tracker.New(cfg), store: cfg.Store, clock: clock, limits: limits}
}

// another returns a second tracker on the same store and clock.
func (h *harness) another() *tracker.Tracker {
	return tracker.New(tracker.Config{Interval: h.limits.Interval, MaxPeersPerSwarm: h.limits.MaxPeersPerSwarm,
		MaxSwarms: h.limits.MaxSwarms, Store: h.store, Now: h.clock.Now, StoreTimeout: 10 * time.Second})
}

func query(root manifest.Hash, p testPeer, event tracker.Event, left int64, numWant int) string {
	q := url.Values{}
	q.Set("root", root.String())
	q.Set("size", strconv.Itoa(testSize))
	q.Set("id", p.id.String())
	q.Set("port", strconv.Itoa(int(p.port)))
	q.Set("left", strconv.FormatInt(left, 10))
	if event != tracker.EventNone {
		q.Set("event", string(event))
	}
	if numWant != 0 {
		q.Set("numwant", strconv.Itoa(numWant))
	}
	return q.Encode()
}

// serve sends an announce with the raw query from remote to tr.
func serve(tr *tracker.Tracker, query, remote string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/announce?"+query, nil)
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	tr.ServeHTTP(rec, req)
	return rec
}

// announce announces p to the test swarm through ServeHTTP.
func (h *harness) announce(p testPeer, event tracker.Event, left int64, numWant int) *tracker.AnnounceResponse {
	h.t.Helper()
	return h.announceVia(h.tr, testRoot, p, event, left, numWant)
}

func (h *harness) announceTo(root manifest.Hash, p testPeer, event tracker.Event, left int64, numWant int) *tracker.AnnounceResponse {
	h.t.Helper()
	return h.announceVia(h.tr, root, p, event, left, numWant)
}

func (h *harness) announceVia(tr *tracker.Tracker, root manifest.Hash, p testPeer, event tracker.Event, left int64, numWant int) *tracker.AnnounceResponse {
	h.t.Helper()
	rec := serve(tr, query(root, p, event, left, numWant), netip.AddrPortFrom(p.ip, 51234).String())
	if rec.Code != http.StatusOK {
		h.t.Fatalf("announce: %d %s", rec.Code, rec.Body)
	}
	var res tracker.AnnounceResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		h.t.Fatalf("answer %s: %v", rec.Body, err)
	}
	checkPeers(h.t, p.id, numWant, &res)
	return &res
}

// checkPeers checks what every answer must be: no more peers than asked
// for, never the asker, never an unreachable peer, no peer twice.
func checkPeers(t *testing.T, asker tracker.PeerID, numWant int, res *tracker.AnnounceResponse) {
	t.Helper()
	if numWant == 0 {
		numWant = tracker.DefaultNumWant
	}
	if len(res.Peers) > min(numWant, tracker.MaxNumWant) {
		t.Fatalf("%d peers for numwant %d", len(res.Peers), numWant)
	}
	seen := make(map[tracker.PeerID]bool)
	for _, q := range res.Peers {
		if q.ID == asker || q.Addr.Port() == 0 || seen[q.ID] {
			t.Fatalf("%s was handed %+v", asker, res.Peers)
		}
		seen[q.ID] = true
	}
	if res.Complete > res.SwarmSize || res.SwarmSize < 0 {
		t.Fatalf("swarm_size %d, complete %d", res.SwarmSize, res.Complete)
	}
}

var sample = regexp.MustCompile(`^[a-z_]+(\{[a-z_]+="[^"]*"\})? -?[0-9]+$`)

func metrics(t *testing.T, tr *tracker.Tracker) map[string]int64 {
	t.Helper()
	var b strings.Builder
	if err := tr.WriteMetrics(&b); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64)
	for line := range strings.Lines(b.String()) {
		line = strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(line, "# HELP ") || strings.HasPrefix(line, "# TYPE ") {
			continue
		}
		if !sample.MatchString(line) {
			t.Fatalf("bad exposition line %q", line)
		}
		series, v, _ := strings.Cut(line, " ")
		out[series], _ = strconv.ParseInt(v, 10, 64)
	}
	return out
}

func (h *harness) metrics() map[string]int64 {
	h.t.Helper()
	return metrics(h.t, h.tr)
}

func ids(peers []tracker.Peer) []tracker.PeerID {
	var out []tracker.PeerID
	for _, p := range peers {
		out = append(out, p.ID)
	}
	return out
}

func sameSet(a, b []tracker.PeerID) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	cmp := func(x, y tracker.PeerID) int { return strings.Compare(x.String(), y.String()) }
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}
