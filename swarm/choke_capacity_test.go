package swarm

import (
	"fmt"
	"testing"

	"github.com/stampede-dev/stampede/pieceset"
)

// TestReciprocateShareOfUplink: regular slots go to the neighbours that
// give us the largest share of their uplink. Six fast neighbours (20
// Mbit/s) sent us 200 KB each, six slow ones (1 Mbit/s) 100 KB each,
// half as much but ten times their uplink's share: the slow ones get
// their slots. By bytes alone (tit-for-tat) the fast six and two slow
// ones would have the eight.
func TestReciprocateShareOfUplink(t *testing.T) {
	const pieces = 64
	have := pieceset.New(pieces)
	for i := range pieces / 2 {
		have.Add(i)
	}
	s := New(Config{NumPieces: pieces, Seed: 30}, have, t0)
	s.Start(t0)
	s.Step(Capacity{Up: 2.5e6}, t0)
	slow := map[PeerID]bool{}
	for i := range 12 {
		id := PeerID(i + 1)
		host := fmt.Sprintf("10.0.0.%d", i+1)
		s.Step(PeerUp{Peer: id, Addr: host + ":7000", Host: host}, t0)
		set := pieceset.New(pieces)
		set.Add(pieces/2 + i) // one piece we lack; it lacks ours
		s.Step(HaveSet{Peer: id, Set: set}, t0)
		up, sent := 2.5e6, int64(200e3)
		if i%2 == 1 {
			up, sent, slow[id] = 125e3, 100e3, true
		}
		s.Step(PeerCapacity{Peer: id, Up: up}, t0)
		s.peers[id].down.add(t0, sent)
	}
	now := t0.Add(s.cfg.ChokeInterval)
	s.nextOptimistic = now.Add(s.cfg.OptimisticInterval) // no rotation this round
	s.Step(Tick{}, now)
	regular := 0
	for _, p := range s.order {
		if !p.amChoking && !p.optimistic && !p.catchingUp && slow[p.id] {
			regular++
		}
	}
	if regular < 6 {
		t.Errorf("%d of the 6 slow neighbours, which gave a tenth of their uplink, have regular slots; want all 6", regular)
	}
}
