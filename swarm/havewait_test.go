package swarm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
)

// TestHaveCanWait: our HAVE of a piece may wait only for a peer that has
// it, has more pieces we lack, and is not complete.
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
		{4, pieceset.Full(4)}, // complete
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
		{4, 0, false},
		{9, 0, false},  // not connected
		{1, 17, false}, // out of range
	} {
		if got := s.HaveCanWait(c.id, c.piece); got != c.want {
			t.Errorf("HaveCanWait(peer %d, piece %d) = %v, want %v", c.id, c.piece, got, c.want)
		}
	}
}
