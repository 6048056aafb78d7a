package swarm

import (
	"fmt"
	"testing"

	"github.com/stampede-dev/stampede/pieceset"
)

// TestHalfTheSlotsByNeed: while we download, half the regular slots go by
// reciprocation and half to the neighbours lacking the most of what we
// have. Six neighbours sent us bytes and lack one piece each; six sent
// nothing and lack 5 to 30 of our pieces. The four that lack the most get
// regular slots beside the best four givers; by reciprocation alone the
// six givers and two of the others would have the eight.
func TestHalfTheSlotsByNeed(t *testing.T) {
	const pieces = 64
	have := pieceset.New(pieces)
	for i := range pieces / 2 {
		have.Add(i)
	}
	s := New(Config{NumPieces: pieces, Seed: 31}, have, t0)
	s.Start(t0)
	s.Step(Capacity{Up: 2.5e6}, t0)
	lacks := map[PeerID]int{}
	for i := range 12 {
		id := PeerID(i + 1)
		host := fmt.Sprintf("10.0.0.%d", i+1)
		s.Step(PeerUp{Peer: id, Addr: host + ":7000", Host: host}, t0)
		set := pieceset.New(pieces)
		set.Add(pieces/2 + i) // one piece we lack
		lack := 1
		if i%2 == 1 {
			lack = 5 * (i/2 + 1) // 5, 10, ... 30
		}
		for j := range pieces/2 - lack {
			set.Add(j)
		}
		lacks[id] = lack
		s.Step(HaveSet{Peer: id, Set: set}, t0)
		s.Step(PeerCapacity{Peer: id, Up: 2.5e6}, t0)
		if lack == 1 {
			s.peers[id].down.add(t0, 200e3)
		}
	}
	now := t0.Add(s.cfg.ChokeInterval)
	s.nextOptimistic = now.Add(s.cfg.OptimisticInterval) // no rotation this round
	s.Step(Tick{}, now)
	var needy, givers []int
	for _, p := range s.order {
		if p.amChoking || p.optimistic || p.catchingUp {
			continue
		}
		if lacks[p.id] > 1 {
			needy = append(needy, lacks[p.id])
		} else {
			givers = append(givers, lacks[p.id])
		}
	}
	if len(needy) != 4 || len(givers) != 4 {
		t.Fatalf("regular slots: %d givers and %d needy neighbours (lacking %v), want 4 and 4", len(givers), len(needy), needy)
	}
	for _, l := range needy {
		if l < 15 {
			t.Errorf("a neighbour lacking %d pieces has a regular slot, over one lacking more (needy ones: %v)", l, needy)
		}
	}
}
