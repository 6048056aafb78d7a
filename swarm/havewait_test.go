package swarm

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
)

// TestHaveCanWait: our HAVE of a piece may wait for a peer that has it and
// has more pieces we lack (the peers here are all unchoked: slots are
// free), as the scheduler sees it after the step that stored the piece
// (the node sends the HAVE after the step).
func TestHaveCanWait(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	have := pieceset.New(4)
	have.Add(0)
	have.Add(1)
	s := New(Config{NumPieces: 4, Seed: 1}, have, t0)
	s.Start(t0)
	set := func(pieces ...int) *pieceset.Set {
		ps := pieceset.New(4)
		for _, i := range pieces {
			ps.Add(i)
		}
		return ps
	}
	peers := []struct {
		id  PeerID
		has *pieceset.Set
	}{
		{1, set(0, 2)},        // has 0, and 2 which we lack
		{2, set(0, 1)},        // has 0, nothing we lack
		{3, set(2, 3)},        // lacks 0
		{4, pieceset.Full(4)}, // a seed
	}
	for _, p := range peers {
		s.Step(PeerUp{Peer: p.id, Addr: fmt.Sprintf("192.0.2.%d:7000", p.id)}, t0)
		s.Step(HaveSet{Peer: p.id, Set: p.has}, t0)
	}
	for _, c := range []struct {
		id    PeerID
		piece int
		want  bool
	}{
		{1, 0, true},
		{2, 0, false}, // the HAVE after which it has nothing more for us
		{3, 0, false},
		{4, 0, true},
		{9, 0, false},  // not connected
		{1, 17, false}, // out of range
	} {
		if got := s.HaveCanWait(c.id, c.piece); got != c.want {
			t.Errorf("HaveCanWait(peer %d, piece %d) = %v, want %v", c.id, c.piece, got, c.want)
		}
	}
	// Piece 2 comes from peer 1, which then has nothing more for us: that
	// HAVE goes at once. The seed still has piece 3 for us.
	acts := s.Step(Received{Peer: 1, Piece: 2}, t0)
	if !slices.ContainsFunc(acts, func(a Action) bool { return a == Action(Announce{Piece: 2}) }) {
		t.Fatalf("storing piece 2 announced nothing: %v", acts)
	}
	if s.HaveCanWait(1, 2) {
		t.Error("the HAVE of the last piece peer 1 had for us may wait")
	}
	if !s.HaveCanWait(4, 2) {
		t.Error("the HAVE of piece 2 to the seed, which has piece 3 for us, may not wait")
	}
	// Piece 3, the last: every HAVE goes at once.
	s.Step(Received{Peer: 4, Piece: 3}, t0)
	if s.HaveCanWait(4, 3) {
		t.Error("the HAVE that completes us may wait")
	}
}

// TestWanted: a peer leaving at once still has something to hand over
// while a neighbour lacks a piece of ours, by the have-sets and HAVEs it
// sent; a neighbour whose have-set has not come counts as lacking all.
func TestWanted(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	s := New(Config{NumPieces: 2, Seed: 1}, pieceset.Full(2), t0)
	s.Start(t0)
	s.Step(PeerUp{Peer: 1, Addr: "192.0.2.1:7000"}, t0)
	if !s.Wanted() {
		t.Error("not wanted by a peer whose have-set has not come")
	}
	one := pieceset.New(2)
	one.Add(0)
	s.Step(HaveSet{Peer: 1, Set: one}, t0)
	if !s.Wanted() {
		t.Error("not wanted by a peer lacking piece 1")
	}
	s.Step(Have{Peer: 1, Piece: 1}, t0)
	if s.Wanted() {
		t.Error("wanted by a peer that has everything")
	}
}

// TestHaveCanWaitChoked: our HAVE may also wait for a peer we choke that
// has more for us, since it cannot fetch the piece from us until we
// unchoke it; not for the peer we unchoke.
func TestHaveCanWaitChoked(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	have := pieceset.New(4)
	have.Add(0)
	s := New(Config{NumPieces: 4, Seed: 1, UploadSlots: 1, OptimisticSlots: -1}, have, t0)
	s.Start(t0)
	theirs := pieceset.New(4)
	theirs.Add(2) // lacks 0, has 2 for us
	var acts []Action
	for id := PeerID(1); id <= 2; id++ {
		acts = append(acts, s.Step(PeerUp{Peer: id, Addr: fmt.Sprintf("192.0.2.%d:7000", id)}, t0)...)
		acts = append(acts, s.Step(HaveSet{Peer: id, Set: theirs}, t0)...)
	}
	unchoked := map[PeerID]bool{}
	for _, a := range acts {
		if u, ok := a.(Unchoke); ok {
			unchoked[u.Peer] = true
		}
	}
	if len(unchoked) != 1 {
		t.Fatalf("unchoked %v with one upload slot, want one peer", unchoked)
	}
	s.Step(Received{Peer: 1, Piece: 1}, t0) // we lacked piece 1 and they lack it
	for id := PeerID(1); id <= 2; id++ {
		if got, want := s.HaveCanWait(id, 1), !unchoked[id]; got != want {
			t.Errorf("HaveCanWait(peer %d, unchoked %v) = %v, want %v", id, unchoked[id], got, want)
		}
	}
}

// TestStartTo: our START of a piece goes at once while we fetch it from
// the origin, may wait while we fetch it from a peer in a swarm of 10k or
// more, and does not go to a peer that has the piece.
func TestStartTo(t *testing.T) {
	s, pending := lonelyScheduler(1, 8, 1)
	if len(pending) == 0 {
		t.Fatal("no origin fetch")
	}
	fromOrigin := pending[0]
	fromPeer := (fromOrigin + 1) % 8
	for slices.Contains(pending, fromPeer) {
		fromPeer = (fromPeer + 1) % 8
	}
	holder := pieceset.New(8)
	holder.Add(fromOrigin)
	holder.Add(fromPeer)
	s.Step(PeerUp{Peer: 1, Addr: "192.0.2.1:7000"}, t0)
	s.Step(HaveSet{Peer: 1, Set: holder}, t0)
	s.Step(PeerUp{Peer: 2, Addr: "192.0.2.2:7000"}, t0)
	s.Step(HaveSet{Peer: 2, Set: pieceset.New(8)}, t0)
	acts := s.Step(Unchoked{Peer: 1}, t0)
	if !slices.Contains(acts, Action(Request{Peer: 1, Piece: fromPeer})) {
		t.Fatalf("piece %d not requested from its holder: %v", fromPeer, acts)
	}
	if send, wait := s.StartTo(2, fromPeer); !send || wait {
		t.Errorf("swarm of 3: StartTo(peer 2, piece %d) = %v, %v; want true, false", fromPeer, send, wait)
	}
	s.Step(TrackerPeers{SwarmSize: startWaitN * s.cfg.OriginK}, t0)
	for _, c := range []struct {
		id         PeerID
		piece      int
		send, wait bool
	}{
		{2, fromOrigin, true, false},
		{2, fromPeer, true, true},
		{1, fromOrigin, false, false}, // it has both
		{1, fromPeer, false, false},
		{9, fromPeer, true, false}, // not connected: as before
	} {
		if send, wait := s.StartTo(c.id, c.piece); send != c.send || wait != c.wait {
			t.Errorf("StartTo(peer %d, piece %d) = %v, %v; want %v, %v", c.id, c.piece, send, wait, c.send, c.wait)
		}
	}
	// The renewal of a START, StartTimeout/2 on, goes at once.
	s.Step(Tick{}, t0.Add(s.cfg.StartTimeout/2))
	if send, wait := s.StartTo(2, fromPeer); !send || wait {
		t.Errorf("renewal: StartTo(peer 2, piece %d) = %v, %v; want true, false", fromPeer, send, wait)
	}
}
