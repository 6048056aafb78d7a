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
	s := halfHolder(30)
	slow := map[PeerID]bool{}
	for i := range 12 {
		id := PeerID(i + 1)
		host := fmt.Sprintf("10.0.0.%d", i+1)
		s.Step(PeerUp{Peer: id, Addr: host + ":7000", Host: host}, t0)
		set := pieceset.New(slotPieces)
		set.Add(slotPieces/2 + i) // one piece we lack; it lacks ours
		s.Step(HaveSet{Peer: id, Set: set}, t0)
		up, sent := 2.5e6, int64(200e3)
		if i%2 == 1 {
			up, sent, slow[id] = 125e3, 100e3, true
		}
		s.Step(PeerCapacity{Peer: id, Up: up}, t0)
		s.peers[id].down.add(t0, sent)
	}
	regular := 0
	for _, p := range regularRound(s) {
		if slow[p.id] {
			regular++
		}
	}
	if regular < 6 {
		t.Errorf("%d of the 6 slow neighbours, which gave a tenth of their uplink, have regular slots; want all 6", regular)
	}
}

// TestHalfTheSlotsByNeed: while we download in a crowd with a slow
// class, half the regular slots go by reciprocation and half to the slow
// neighbours lacking the most of what we have. Six fast neighbours sent
// us bytes and lack one piece each; six slow ones (1 Mbit/s against our
// 20) sent nothing and lack 5 to 30 of our pieces. The four that lack
// the most get regular slots beside the best four givers; by
// reciprocation alone the six givers and two of the others would have
// the eight.
func TestHalfTheSlotsByNeed(t *testing.T) {
	needy, givers := needRound(t, halfHolder(31), 125e3)
	if len(needy) != 4 || len(givers) != 4 {
		t.Fatalf("regular slots: %d givers and %d needy neighbours (lacking %v), want 4 and 4", len(givers), len(needy), needy)
	}
	for _, l := range needy {
		if l < 15 {
			t.Errorf("a neighbour lacking %d pieces has a regular slot, over one lacking more (needy ones: %v)", l, needy)
		}
	}
}

// TestEqualsByReciprocation: in a crowd of equal uplinks nobody is slow,
// and every regular slot goes by reciprocation: the six givers and two
// of the others, however much those lack.
func TestEqualsByReciprocation(t *testing.T) {
	needy, givers := needRound(t, halfHolder(31), 2.5e6)
	if len(givers) != 6 || len(needy) != 2 {
		t.Fatalf("regular slots: %d givers and %d needy neighbours (lacking %v), want 6 and 2", len(givers), len(needy), needy)
	}
}

// TestSlowPeerByNeed: a peer on a slow uplink among fast ones gives its
// need slots to whoever lacks most, as every neighbour's uplink is fast
// beside its own.
func TestSlowPeerByNeed(t *testing.T) {
	s := halfHolder(31)
	s.Step(Capacity{Up: 125e3}, t0)
	needy, givers := needRound(t, s, 2.5e6)
	if len(needy) != 4 || len(givers) != 4 {
		t.Fatalf("regular slots: %d givers and %d needy neighbours (lacking %v), want 4 and 4", len(givers), len(needy), needy)
	}
}

// needRound connects twelve neighbours to s: six fast givers (20 Mbit/s)
// that sent us bytes and lack one of our pieces, and six that sent
// nothing, lack 5 to 30 of our pieces, and tell an uplink of needyUp
// bytes/s. It runs a reciprocation round and returns how many pieces the
// regular slots' holders lack, the needy ones and the givers apart.
func needRound(t *testing.T, s *Scheduler, needyUp float64) (needy, givers []int) {
	t.Helper()
	lacks := map[PeerID]int{}
	for i := range 12 {
		id := PeerID(i + 1)
		host := fmt.Sprintf("10.0.0.%d", i+1)
		s.Step(PeerUp{Peer: id, Addr: host + ":7000", Host: host}, t0)
		set := pieceset.New(slotPieces)
		set.Add(slotPieces/2 + i) // one piece we lack
		lack, up := 1, 2.5e6
		if i%2 == 1 {
			lack, up = 5*(i/2+1), needyUp // 5, 10, ... 30
		}
		for j := range slotPieces/2 - lack {
			set.Add(j)
		}
		lacks[id] = lack
		s.Step(HaveSet{Peer: id, Set: set}, t0)
		s.Step(PeerCapacity{Peer: id, Up: up}, t0)
		if lack == 1 {
			s.peers[id].down.add(t0, 200e3)
		}
	}
	for _, p := range regularRound(s) {
		if lacks[p.id] > 1 {
			needy = append(needy, lacks[p.id])
		} else {
			givers = append(givers, lacks[p.id])
		}
	}
	return needy, givers
}

// slotPieces is the file of the reciprocation tests: we hold its first half.
const slotPieces = 64

// halfHolder is a downloading scheduler holding the first half of the
// file, with a 20 Mbit/s uplink.
func halfHolder(seed uint64) *Scheduler {
	have := pieceset.New(slotPieces)
	for i := range slotPieces / 2 {
		have.Add(i)
	}
	s := New(Config{NumPieces: slotPieces, Seed: seed}, have, t0)
	s.Start(t0)
	s.Step(Capacity{Up: 2.5e6}, t0)
	return s
}

// regularRound runs a reciprocation round without optimistic rotation
// and returns the neighbours holding regular slots.
func regularRound(s *Scheduler) []*peer {
	now := t0.Add(s.cfg.ChokeInterval)
	s.nextOptimistic = now.Add(s.cfg.OptimisticInterval)
	s.Step(Tick{}, now)
	var regular []*peer
	for _, p := range s.order {
		if !p.amChoking && !p.optimistic && !p.catchingUp {
			regular = append(regular, p)
		}
	}
	return regular
}
