package node_test

// Reproductions of bugs in the scheduler (package swarm), which these tests
// do not fix. They fail until swarm/ is fixed, so they run only with
// STAMPEDE_SWARM_BUGS=1:
//
//	STAMPEDE_SWARM_BUGS=1 go test -run 'TestSwarmBug' ./node
//

import (
	"testing"

)

func needSwarmBugs(t *testing.T) {
	if !swarmBugs {
		t.Skip("reproduces a known scheduler bug; run with STAMPEDE_SWARM_BUGS=1")
	}
}

// TestSwarmBugLastPieceLeaveAtOnce: with SeedTime 0 (the default of
// "stampede get") a peer leaves the moment its last piece is in. When a
// crowd that started together lacks the same last piece, whoever fetches it
// from the origin completes and leaves with it, so every peer fetches it
// from the origin in turn, one slice after another (measured: the last
// piece fetched 13 to 19 times by 20 peers, 4 to 5.75 fetches per piece on
// average, the last peers done after 6 to 20 s where the rest took 0.3 s).
// Slurpie's answer to the last-block problem assumes the holders stay a
// little: with SeedTime 1 s the same crowd fetches each piece 2 to 3 times
// on average, at most 4 to 7 (TestLastPieceFewPieces).
func TestSwarmBugLastPieceLeaveAtOnce(t *testing.T) {
	needSwarmBugs(t)
	const peers = 20
	if worst := lastPiece(t, 0); worst > peers/2 {
		t.Errorf("one piece came from the origin %d times for %d peers: nearly every peer fetched the last piece itself", worst, peers)
	}
}
