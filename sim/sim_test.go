package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/bench"
	"github.com/stampede-dev/stampede/internal/units"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

const mbit = 1e6 / 8

// crowd returns a flash crowd of n peers of up/down bytes/s, a file of
// size and an origin of originUp.
func crowd(n int, size, originUp, up, down int64) Config {
	cfg := Config{Size: size, OriginUp: originUp, Seed: 1}
	for range n {
		cfg.Peers = append(cfg.Peers, Peer{Class: "peer", Up: up, Down: down})
	}
	return cfg
}

// run runs cfg and fails the test unless every peer that arrived and was
// not killed finished with every piece.
func run(t *testing.T, cfg Config) (*Sim, *Result) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !r.Complete {
		t.Fatalf("%d of %d peers finished (%d killed), timed out %v", r.Finished, r.Arrived, r.Killed, r.TimedOut)
	}
	for _, n := range s.nodes {
		if n.complete && !n.have.Complete() {
			t.Errorf("%v completed with %d of %d pieces", n, n.have.Count(), s.pieces)
		}
	}
	return s, r
}

// TestFlashCrowd: bench's flash50 (50 peers, 32 MiB, 8/20 Mbit/s, an
// origin of 8 Mbit/s) finishes close to T_KR, its bound: the testbed's
// figure is about 1.16 × T_KR. Every peer has every piece, and the
// origin's bytes are the pieces its peers got from it.
func TestFlashCrowd(t *testing.T) {
	sc, err := bench.LoadScenario("flash50")
	if err != nil {
		t.Fatal(err)
	}
	cfg, notes, err := FromScenario(sc, Options{})
	if err != nil || len(notes) > 0 {
		t.Fatalf("%v %q", err, notes)
	}
	s, r := run(t, cfg)
	t.Logf("last %.2f s = %.3f × T_KR, mean %.3f × T_KR; origin %.3f copies, at most %d fetches in flight (mean %.2f); %.0f control frames per peer",
		r.Last, r.LastOverTKR, r.MeanOverTKR, r.OriginCopies, r.Origin.InFlightMax, r.Origin.InFlightMean, r.Control.PerPeer)
	if r.Finished != 50 || r.TKR < 33 || r.TKR > 34 {
		t.Fatalf("%d finished, T_KR %.2f s: not flash50", r.Finished, r.TKR)
	}
	if r.LastOverTKR > 1.5 {
		t.Errorf("last peer at %.2f × T_KR, want at most 1.5", r.LastOverTKR)
	}
	var fromOrigin, fromPeers int64
	for _, n := range s.nodes {
		fromOrigin += n.fromOrigin
		fromPeers += n.fromPeers
	}
	if fromOrigin != r.OriginBytes || r.OriginBytes != r.Origin.Sent*r.PieceSize {
		t.Errorf("origin sent %d bytes in %d pieces; its peers got %d from it", r.OriginBytes, r.Origin.Sent, fromOrigin)
	}
	if r.OriginCopies < 1 || r.OriginCopies > 1.5 {
		t.Errorf("origin sent %.3f copies, want between 1 (nobody else had the file) and 1.5", r.OriginCopies)
	}
	if fromPeers+fromOrigin < 50*cfg.Size || fromPeers > r.PeerBytes {
		t.Errorf("peers got %d bytes from peers and %d from the origin, the peers sent %d; the crowd needs %d",
			fromPeers, fromOrigin, r.PeerBytes, 50*cfg.Size)
	}
	if k := cfg.Swarm.OriginK; r.Origin.PeersMean > float64(3*max(k, 3)) {
		t.Errorf("%.1f peers fetching from the origin on average, want about k", r.Origin.PeersMean)
	}
}

// mixedCrowd is a small mixed crowd, all at once: 10 peers of 20/50
// Mbit/s and 10 of 1/10 Mbit/s, 8 MiB from an origin of 10 Mbit/s.
func mixedCrowd() *bench.Scenario {
	return &bench.Scenario{Name: "mixed", Size: 8 << 20, OriginUp: 10 * mbit, Seed: 1,
		Classes: []bench.Class{
			{Name: "fast", Count: 10, Up: 20 * mbit, Down: 50 * mbit},
			{Name: "slow", Count: 10, Up: 1 * mbit, Down: 10 * mbit},
		},
		Arrivals: bench.Arrivals{Kind: bench.ArriveAll}}
}

// TestMixedCrowd: a crowd of two classes, fast and slow, both finish, and
// the slow peers are not left behind: the fast ones leave when done, and
// the slow ones' mean is within half again of theirs.
func TestMixedCrowd(t *testing.T) {
	cfg, _, err := FromScenario(mixedCrowd(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, r := run(t, cfg)
	t.Logf("last %.2f s = %.3f × T_KR (%.2f s); origin %.3f copies", r.Last, r.LastOverTKR, r.TKR, r.OriginCopies)
	if len(r.Classes) != 2 {
		t.Fatalf("classes %+v", r.Classes)
	}
	fast, slow := r.Classes[0], r.Classes[1]
	if fast.Name != "fast" {
		fast, slow = slow, fast
	}
	t.Logf("fast: mean %.2f s, last %.2f s; slow: mean %.2f s, last %.2f s", fast.Mean, fast.Last, slow.Mean, slow.Last)
	if fast.Finished != 10 || slow.Finished != 10 || slow.Mean > 1.5*fast.Mean {
		t.Errorf("fast %+v, slow %+v: want all finished, the slow ones' mean within 1.5 times the fast ones'", fast, slow)
	}
	if r.LastOverTKR > 4 {
		t.Errorf("last peer at %.2f × T_KR, want at most 4", r.LastOverTKR)
	}
	// Where the uplinks went: every byte between peers counted once, from
	// its class to its class; and each class's share of the file held,
	// every 10 s, rising to the whole file.
	var flows int64
	for _, c := range r.Classes {
		for _, n := range c.UpTo {
			flows += n
		}
		if len(c.Have) == 0 || c.Have[len(c.Have)-1] != 1 || !slices.IsSorted(c.Have) || c.Have[0] <= 0 {
			t.Errorf("class %s held %v of the file every 10 s: want rising to 1", c.Name, c.Have)
		}
		if want := int(r.SimSeconds)/10 + 1; len(c.Have) != want {
			t.Errorf("class %s: %d samples in %.1f s", c.Name, len(c.Have), r.SimSeconds)
		}
	}
	if flows != r.PeerBytes || fast.UpTo["slow"] == 0 || slow.UpTo["fast"] == 0 {
		t.Errorf("flows between classes %v and %v sum to %d, the peers sent %d", fast.UpTo, slow.UpTo, flows, r.PeerBytes)
	}
}

// TestArrivalsAndDepartures: peers arriving one by one and lingering, then
// a Poisson crowd of which some are killed mid-transfer (bench's poisson
// scenario): the others all finish.
func TestArrivalsAndDepartures(t *testing.T) {
	cfg := crowd(12, 2<<20, 16*mbit, 8*mbit, 20*mbit)
	for i := range cfg.Peers {
		cfg.Peers[i].Arrive = time.Duration(i) * 300 * time.Millisecond
	}
	cfg.Linger = 2 * time.Second
	_, r := run(t, cfg)
	if r.Finished != 12 {
		t.Errorf("%d of 12 finished", r.Finished)
	}
	sc, err := bench.LoadScenario("poisson")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err = FromScenario(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Kills) != 1 || cfg.Linger != 3*time.Second || cfg.Peers[len(cfg.Peers)-1].Arrive == 0 {
		t.Fatalf("poisson: kills %v, linger %v: not the scenario", cfg.Kills, cfg.Linger)
	}
	_, r = run(t, cfg)
	t.Logf("poisson: %d finished, %d killed; mean %.2f s; origin %.2f copies", r.Finished, r.Killed, r.Mean, r.OriginCopies)
	if r.Killed != 3 || r.Finished != r.Arrived-3 {
		t.Errorf("%d killed, %d of %d finished", r.Killed, r.Finished, r.Arrived)
	}
}

// TestLatencyRespected: a lone peer's download of one piece waits for the
// tracker's answer and the origin's, a round trip each, and gets its piece
// a one-way path latency after the origin sends it.
func TestLatencyRespected(t *testing.T) {
	for _, lat := range []time.Duration{time.Millisecond, 250 * time.Millisecond} {
		cfg := crowd(1, 16<<10, 0, 0, 0)
		cfg.Latency = lat
		cfg.StepTime = -1
		_, r := run(t, cfg)
		// The tracker (3 s TrackerWait at most) and then the origin, each a
		// round trip of 4 host links' latency away; nothing else limits.
		rtt := 4 * lat
		if got := time.Duration(r.Last * float64(time.Second)); got < 2*rtt || got > 2*rtt+50*time.Millisecond {
			t.Errorf("latency %v: done at %v, want two round trips (%v) and little more", lat, got, 2*rtt)
		}
	}
}

// TestTrackerConsulted: the peers find each other through the tracker. The
// real tracker counts every peer's "started" and hands them to each other,
// so the origin sends about one copy; a tracker that hands out nobody
// leaves each peer alone with the origin.
func TestTrackerConsulted(t *testing.T) {
	cfg := crowd(10, 1<<20, 16*mbit, 8*mbit, 20*mbit)
	_, r := run(t, cfg)
	tr := r.Tracker
	t.Logf("real tracker: %+v; origin %.2f copies", tr, r.OriginCopies)
	if tr.ByEvent["started"] != 10 || tr.PeersMax != 10 || tr.EstimateMax != 10 {
		t.Errorf("the tracker saw %d peers start, held %d, estimated %d: want 10", tr.ByEvent["started"], tr.PeersMax, tr.EstimateMax)
	}
	if r.OriginCopies > 2 {
		t.Errorf("origin sent %.2f copies with a tracker", r.OriginCopies)
	}
	cfg.Tracker = &listStore{mute: true}
	_, r = run(t, cfg)
	t.Logf("tracker handing out nobody: origin %.2f copies", r.OriginCopies)
	if r.OriginCopies < 9 {
		t.Errorf("origin sent %.2f copies when the tracker hands out nobody, want about one per peer", r.OriginCopies)
	}
}

// TestDeterministic: two runs of one Config, with a tracker store that is
// deterministic, give the same result; so do two with the default store,
// seeded from the Config's seed.
func TestDeterministic(t *testing.T) {
	cfg := crowd(15, 4<<20, 8*mbit, 8*mbit, 20*mbit)
	cfg.Peers[3].Up, cfg.Peers[7].Down = 1*mbit, 4*mbit
	cfg.Kills = []Kill{{At: 2 * time.Second, Count: 2}}
	for _, list := range []bool{true, false} {
		var out [2][]byte
		for i := range out {
			cfg.Tracker = nil
			if list {
				cfg.Tracker = &listStore{}
			}
			_, r := run(t, cfg)
			r.Engine.WallSeconds = 0
			out[i], _ = json.Marshal(r)
		}
		if string(out[0]) != string(out[1]) {
			t.Errorf("list store %v: two runs differ:\n%s\n%s", list, out[0], out[1])
		}
	}
}

// TestRacks: peers behind shared rack links, the origin in a datacenter
// of its own, all finish; with slow rack links the racks' peers trade
// among themselves rather than across.
func TestRacks(t *testing.T) {
	cfg := crowd(16, 2<<20, 40*mbit, 100*mbit, 100*mbit)
	cfg.Groups = []Group{
		{Name: "dc", Latency: 10 * time.Millisecond},
		{Name: "rack1", Parent: "dc", Up: 20 * mbit, Down: 20 * mbit, Latency: time.Millisecond},
		{Name: "rack2", Parent: "dc", Up: 20 * mbit, Down: 20 * mbit, Latency: time.Millisecond},
		{Name: "origin", Latency: 20 * time.Millisecond},
	}
	cfg.OriginGroup = "origin"
	for i := range cfg.Peers {
		cfg.Peers[i].Group = fmt.Sprintf("rack%d", 1+i%2)
	}
	_, r := run(t, cfg)
	t.Logf("racks: last %.2f s; origin %.2f copies; %s between peers", r.Last, r.OriginCopies, units.Bytes(r.PeerBytes))
	// The whole file enters each rack through its 20 Mbit/s link.
	if min := float64(cfg.Size) / (20 * mbit); r.Last < min {
		t.Errorf("done in %.2f s, faster than the rack links allow (%.2f s)", r.Last, min)
	}
}

// TestScaleClasses: --peers keeps each class's share.
func TestScaleClasses(t *testing.T) {
	got := scaleClasses([]bench.Class{{Name: "a", Count: 20}, {Name: "b", Count: 20}, {Name: "c", Count: 1}}, 10000)
	counts := []int{got[0].Count, got[1].Count, got[2].Count}
	if !slices.Equal(counts, []int{4878, 4878, 244}) {
		t.Errorf("counts %v", counts)
	}
	if got := scaleClasses([]bench.Class{{Name: "a", Count: 3}, {Name: "b", Count: 1}}, 1); len(got) != 1 || got[0].Count != 1 {
		t.Errorf("one peer: %+v", got)
	}
}

// TestConfigErrors: a bad configuration is refused, naming what is wrong.
func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Size: 0, Peers: []Peer{{}}},
		{Size: 1},
		{Size: 1, Peers: []Peer{{Group: "rack"}}},
		{Size: 1, Peers: []Peer{{}}, Groups: []Group{{Name: "a", Parent: "b"}, {Name: "b"}}},
		{Size: 1, Peers: []Peer{{}}, Groups: []Group{{Name: "a"}, {Name: "a"}}},
		{Size: 1, Peers: []Peer{{Up: -1}}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// listStore is a tracker store for tests: every announce gets the peers
// announced before it, in the order they came (mute: none), so runs with
// it repeat exactly.
type listStore struct {
	peers []tracker.Peer
	mute  bool
}

func (l *listStore) Announce(_ context.Context, req tracker.AnnounceRequest, addr netip.AddrPort, _ time.Time) (tracker.Outcome, error) {
	k := slices.IndexFunc(l.peers, func(p tracker.Peer) bool { return p.ID == req.ID })
	switch {
	case req.Event == tracker.EventStopped:
		if k >= 0 {
			l.peers = slices.Delete(l.peers, k, k+1)
		}
		return tracker.Outcome{SwarmSize: len(l.peers), Peers: []tracker.Peer{}}, nil
	case k < 0:
		l.peers = append(l.peers, tracker.Peer{Addr: addr, ID: req.ID})
	}
	out := tracker.Outcome{SwarmSize: len(l.peers), Peers: []tracker.Peer{}}
	for _, p := range l.peers {
		if !l.mute && p.ID != req.ID && len(out.Peers) < req.NumWant {
			out.Peers = append(out.Peers, p)
		}
	}
	return out, nil
}

func (l *listStore) Peers(context.Context, manifest.Hash, int64, int, time.Time) (tracker.Outcome, error) {
	return tracker.Outcome{SwarmSize: len(l.peers)}, nil
}

func (l *listStore) Stats(context.Context, time.Time) (tracker.StoreStats, error) {
	return tracker.StoreStats{Swarms: 1, Peers: int64(len(l.peers))}, nil
}
