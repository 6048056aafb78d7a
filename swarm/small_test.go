package swarm

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
)

// smallConfig is a 64 KiB object of four 16 KiB pieces.
func smallConfig() Config {
	return Config{NumPieces: 4, PieceLen: func(int) int64 { return 16 << 10 }, Seed: 1}
}

// largeConfig is a file of four 1 MiB pieces: not a small object.
func largeConfig() Config {
	c := smallConfig()
	c.PieceLen = func(int) int64 { return 1 << 20 }
	return c
}

func requestsTo(acts []Action, id PeerID) []int {
	var out []int
	for _, a := range acts {
		if r, ok := a.(Request); ok && r.Peer == id {
			out = append(out, r.Piece)
		}
	}
	return out
}

func originFetches(acts []Action) []FetchOrigin {
	var out []FetchOrigin
	for _, a := range acts {
		if f, ok := a.(FetchOrigin); ok {
			out = append(out, f)
		}
	}
	return out
}

// joinSeed starts s, has the tracker name one peer that has every piece,
// connects it and has it unchoke us; it returns every action so far.
func joinSeed(s *Scheduler, t0 time.Time, swarmSize int) []Action {
	var acts []Action
	acts = append(acts, s.Start(t0)...)
	acts = append(acts, s.Step(TrackerPeers{Addrs: []string{"192.0.2.1:7000"}, SwarmSize: swarmSize}, t0)...)
	acts = append(acts, s.Step(PeerUp{Peer: 1, Addr: "192.0.2.1:7000", Outbound: true}, t0)...)
	acts = append(acts, s.Step(HaveSet{Peer: 1, Set: pieceset.Full(s.cfg.NumPieces)}, t0)...)
	acts = append(acts, s.Step(Unchoked{Peer: 1}, t0)...)
	return acts
}

// TestSmallBurst: a neighbour that has the whole of a small object is asked
// for all of it at once, untested as it is; a larger file, or a small one
// with the small rules off, starts with two requests.
func TestSmallBurst(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		name string
		cfg  func() Config
		want int
	}{
		{"small", smallConfig, 4},
		{"small, rules off", func() Config { c := smallConfig(); c.SmallDeadline = -1; return c }, 2},
		{"large pieces", largeConfig, 2},
		{"more pieces than a burst", func() Config { c := smallConfig(); c.NumPieces = 17; return c }, 2},
	} {
		s := New(c.cfg(), nil, t0)
		if got := requestsTo(joinSeed(s, t0, 2), 1); len(got) != c.want {
			t.Errorf("%s (small %v): requests %v, want %d at once", c.name, s.Small(), got, c.want)
		}
	}
}

// TestSmallDeadline: a small object still missing pieces SmallDeadline
// after Start fetches from the origin at once, without candidates, every
// one asked of no neighbour, though another peer claims them; not before,
// and not the pieces asked of a neighbour, which their requests' deadlines
// look after.
func TestSmallDeadline(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	s := New(smallConfig(), nil, t0)
	s.Start(t0)
	s.Step(TrackerPeers{Addrs: []string{"192.0.2.1:7000", "192.0.2.2:7000"}, SwarmSize: 3}, t0)
	// Peer 1 has pieces 0 and 1 and is asked for both; peer 2 claims 2
	// and 3 with START and has nothing.
	s.Step(PeerUp{Peer: 1, Addr: "192.0.2.1:7000", Outbound: true}, t0)
	s.Step(PeerUp{Peer: 2, Addr: "192.0.2.2:7000", Outbound: true}, t0)
	s.Step(Started{Peer: 2, Piece: 2}, t0)
	s.Step(Started{Peer: 2, Piece: 3}, t0)
	s.Step(HaveSet{Peer: 2, Set: pieceset.New(4)}, t0)
	half := pieceset.New(4)
	half.Add(0)
	half.Add(1)
	s.Step(HaveSet{Peer: 1, Set: half}, t0)
	if got := requestsTo(s.Step(Unchoked{Peer: 1}, t0), 1); len(got) != 2 {
		t.Fatalf("asked peer 1 for %v, want pieces 0 and 1 at once", got)
	}
	deadline := t0.Add(DefaultSmallDeadline)
	for now := t0; now.Before(deadline); now = now.Add(100 * time.Millisecond) {
		if f := originFetches(s.Step(Tick{}, now)); len(f) > 0 {
			t.Fatalf("%v after the start, before the deadline: origin fetches %+v", now.Sub(t0), f)
		}
	}
	var got []int
	for _, f := range originFetches(s.Step(Tick{}, deadline)) {
		if f.Reason != ReasonDeadline || len(f.Candidates) > 0 {
			t.Errorf("fetch %+v, want reason %q and no candidates", f, ReasonDeadline)
		}
		got = append(got, f.Piece)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("at the deadline: origin fetches %v, want [2 3]", got)
	}
}

// TestSmallDeadlineClaims: a neighbour that claims every piece with
// START and delivers none keeps the origin off a file for StartTimeout;
// a small object goes to the origin at its deadline all the same, and
// with the small rules off it does not.
func TestSmallDeadlineClaims(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		name     string
		deadline time.Duration
		want     int
	}{
		{"small", 0, 4},
		{"small rules off", -1, 0},
	} {
		cfg := smallConfig()
		cfg.SmallDeadline = c.deadline
		s := New(cfg, nil, t0)
		s.Start(t0)
		s.Step(TrackerPeers{Addrs: []string{"192.0.2.1:7000"}, SwarmSize: 2}, t0)
		s.Step(PeerUp{Peer: 1, Addr: "192.0.2.1:7000", Outbound: true}, t0)
		// Its claims come before its have-set, which releases the origin
		// (settling).
		for i := range 4 {
			s.Step(Started{Peer: 1, Piece: i}, t0)
		}
		var got []FetchOrigin
		if f := originFetches(s.Step(HaveSet{Peer: 1, Set: pieceset.New(4)}, t0)); len(f) > 0 {
			t.Fatalf("%s: origin fetches of claimed pieces: %+v", c.name, f)
		}
		for now := t0; now.Before(t0.Add(3 * time.Second)); now = now.Add(100 * time.Millisecond) {
			f := originFetches(s.Step(Tick{}, now))
			if len(f) > 0 && now.Sub(t0) < DefaultSmallDeadline {
				t.Fatalf("%s: %v after the start: origin fetches %+v", c.name, now.Sub(t0), f)
			}
			got = append(got, f...)
		}
		if len(got) != c.want {
			t.Errorf("%s: origin fetches %+v, want %d", c.name, got, c.want)
		}
		for _, f := range got {
			if f.Reason != ReasonDeadline || len(f.Candidates) > 0 {
				t.Errorf("%s: fetch %+v, want reason %q and no candidates", c.name, f, ReasonDeadline)
			}
		}
	}
}

// TestSmallInSwarm: the origin's "in swarm" answer keeps a small object's
// pieces off the origin not at all: they are fetched again at once, in
// the step of the answer, without candidates, which the origin does not refuse (the pool it sent
// them to has most likely left). A large file waits the whole answer.
func TestSmallInSwarm(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		name  string
		cfg   Config
		again bool
	}{
		{"small", smallConfig(), true},
		{"large", largeConfig(), false},
	} {
		cfg := c.cfg
		cfg.OriginK = 100 // every slice held: the draw plays no part
		s := New(cfg, nil, t0)
		s.Start(t0)
		// The tracker names one neighbour, which has nothing yet.
		s.Step(TrackerPeers{Addrs: []string{"192.0.2.1:7000"}, SwarmSize: 5}, t0)
		s.Step(PeerUp{Peer: 1, Addr: "192.0.2.1:7000", Outbound: true}, t0)
		f := originFetches(s.Step(HaveSet{Peer: 1, Set: pieceset.New(4)}, t0))
		if len(f) == 0 || len(f[0].Candidates) == 0 {
			t.Fatalf("%s: first fetches %+v, want some with candidates", c.name, f)
		}
		now := t0.Add(20 * time.Millisecond)
		var again []FetchOrigin
		for _, x := range f {
			again = append(again, originFetches(s.Step(OriginResult{Piece: x.Piece, InSwarm: 3 * time.Second, Candidates: x.Candidates}, now))...)
		}
		if !c.again {
			for ; now.Before(t0.Add(2 * time.Second)); now = now.Add(50 * time.Millisecond) {
				again = append(again, originFetches(s.Step(Tick{}, now))...)
			}
		}
		switch {
		case !c.again && len(again) > 0:
			t.Errorf("%s: fetched again within 2 s of an in-swarm answer of 3 s: %+v", c.name, again)
		case c.again:
			var got []int
			for _, x := range again {
				if len(x.Candidates) > 0 {
					t.Errorf("%s: fetch again %+v offers candidates: the origin would refuse it again", c.name, x)
				}
				got = append(got, x.Piece)
			}
			slices.Sort(got)
			if want := []int{0, 1, 2, 3}; !slices.Equal(got, want) {
				t.Errorf("%s: fetched again %v after the in-swarm answers, want %v once each", c.name, got, want)
			}
		}
	}
}

// TestSmallNoPeersNoCandidates: a lone downloader of a small object
// offers the origin no candidates, so that the origin does not count what
// it sends it as on its way through a swarm (the lone peer leaves with
// it); a lone downloader of a large file still offers them.
func TestSmallNoPeersNoCandidates(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		name  string
		cfg   Config
		cands bool
	}{
		{"small", smallConfig(), false},
		{"large", largeConfig(), true},
	} {
		s := New(c.cfg, nil, t0)
		s.Start(t0)
		f := originFetches(s.Step(TrackerPeers{SwarmSize: 1}, t0))
		if len(f) == 0 {
			t.Fatalf("%s: a lone downloader fetched nothing", c.name)
		}
		offered := slices.ContainsFunc(f, func(x FetchOrigin) bool { return len(x.Candidates) > 0 })
		if offered != c.cands || f[0].Reason != ReasonNoPeers {
			t.Errorf("%s: fetches %+v: candidates offered %v, want %v", c.name, f, offered, c.cands)
		}
	}
}

// TestSmallUnchokesAll: a small object's holder unchokes every interested
// neighbour, beyond the upload slots.
func TestSmallUnchokesAll(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"small", smallConfig(), 20},
		{"large", largeConfig(), 10},
	} {
		s := New(c.cfg, pieceset.Full(4), t0)
		s.Start(t0)
		unchoked := 0
		for i := range 20 {
			id := PeerID(i + 1)
			acts := s.Step(PeerUp{Peer: id, Addr: fmt.Sprintf("192.0.2.%d:7000", i+1)}, t0)
			acts = append(acts, s.Step(HaveSet{Peer: id, Set: pieceset.New(4)}, t0)...)
			for _, a := range acts {
				if _, ok := a.(Unchoke); ok {
					unchoked++
				}
			}
		}
		if unchoked != c.want {
			t.Errorf("%s: %d of 20 interested neighbours unchoked, want %d", c.name, unchoked, c.want)
		}
	}
}

// TestSmallRecommendedAfterTrackerPeersLeft: the only peer the tracker
// named recommends the peers it traded with and leaves; the arrival dials
// the recommended peers, most recent first, without asking the tracker
// again, and gets the object from one of them in one burst.
func TestSmallRecommendedAfterTrackerPeersLeft(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	s := New(smallConfig(), nil, t0)
	s.Start(t0)
	s.Step(TrackerPeers{Addrs: []string{"192.0.2.1:7000"}, SwarmSize: 2}, t0)
	s.Step(PeerUp{Peer: 1, Addr: "192.0.2.1:7000", Outbound: true}, t0)
	s.Step(HaveSet{Peer: 1, Set: pieceset.New(4)}, t0)
	now := t0.Add(10 * time.Millisecond)
	acts := s.Step(Recommended{Peer: 1, Addrs: []string{"192.0.2.3:7000", "192.0.2.2:7000"}}, now)
	acts = append(acts, s.Step(PeerDown{Peer: 1, Left: true}, now)...)
	var dialed []string
	for _, a := range acts {
		switch a := a.(type) {
		case Connect:
			dialed = append(dialed, a.Addr)
		case AskTracker:
			t.Errorf("asked the tracker (%s) with recommended peers to dial", a.Why)
		}
	}
	if !slices.Equal(dialed, []string{"192.0.2.3:7000", "192.0.2.2:7000"}) {
		t.Fatalf("dialed %v, want the recommended peers, most recent first", dialed)
	}
	now = now.Add(20 * time.Millisecond)
	s.Step(PeerUp{Peer: 3, Addr: "192.0.2.3:7000", Outbound: true}, now)
	s.Step(HaveSet{Peer: 3, Set: pieceset.Full(4)}, now)
	if got := requestsTo(s.Step(Unchoked{Peer: 3}, now), 3); len(got) != 4 {
		t.Fatalf("asked the recommended peer for %v, want the whole object at once", got)
	}
}
