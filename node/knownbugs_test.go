package node_test

// Reproductions of bugs in the scheduler (package swarm), which these tests
// do not fix. They fail until swarm/ is fixed, so they run only with
// STAMPEDE_SWARM_BUGS=1:
//
//	STAMPEDE_SWARM_BUGS=1 go test -run 'TestSwarmBug' ./node
//
// The swarm scenarios (swarm_test.go, scenarios_test.go) work around the
// first one (see scenarioSwarm); with STAMPEDE_SWARM_BUGS=1 they run with
// the plain defaults and show its cost end to end.

import (
	"testing"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
)

func needSwarmBugs(t *testing.T) {
	if !swarmBugs {
		t.Skip("reproduces a known scheduler bug; run with STAMPEDE_SWARM_BUGS=1")
	}
}

// TestSwarmBugStartClaims, on the scheduler alone: A and B both ask seed S
// for piece 0 and so (QuietRequests false, the default) each sends START for
// it, which the other records as a claim. S leaves before answering. Now
// nobody has the piece and both hold the origin every slice (k = 3, n = 3),
// yet neither fetches it: each sees the other's claim, which nothing
// withdraws, for StartTimeout (10 s). In a crowd whose members leave on
// completion this happens to every piece fetched last, and the crowd
// advances in 10 s steps (end to end: TestSwarmLoopback with the defaults
// finished its 20 peers in 43 s and 83 s where 12 s was enough with
// QuietRequests; TestLastPieceFewPieces with SeedTime 0 left 4 of 20
// peers unfinished after 90 s, completions spaced 10.2 s apart).
func TestSwarmBugStartClaims(t *testing.T) {
	needSwarmBugs(t)
	t0 := time.Unix(1_000_000, 0)
	cfg := swarm.Config{NumPieces: 1, Seed: 1}
	type side struct {
		name  string
		s     *swarm.Scheduler
		start bool // sent START for piece 0
		fetch time.Time
	}
	sides := []*side{{name: "A", s: swarm.New(cfg, nil, t0)}, {name: "B", s: swarm.New(cfg, nil, t0)}}
	step := func(sd *side, ev swarm.Event, now time.Time) {
		for _, a := range sd.s.Step(ev, now) {
			switch a := a.(type) {
			case swarm.AnnounceStart:
				sd.start = true
			case swarm.FetchOrigin:
				if sd.fetch.IsZero() {
					sd.fetch = now
				}
				t.Logf("%s at +%v: fetch piece %d from the origin (%s)", sd.name, now.Sub(t0), a.Piece, a.Reason)
			}
		}
	}
	for _, sd := range sides {
		sd.s.Start(t0)
		step(sd, swarm.PeerUp{Peer: 1, Addr: "192.0.2.1:7000"}, t0) // S
		step(sd, swarm.HaveSet{Peer: 1, Set: pieceset.Full(1)}, t0)
		step(sd, swarm.PeerUp{Peer: 2, Addr: "192.0.2.2:7000"}, t0) // the other one
		step(sd, swarm.HaveSet{Peer: 2, Set: pieceset.New(1)}, t0)
		step(sd, swarm.TrackerPeers{SwarmSize: 3, Addrs: []string{"192.0.2.1:7000", "192.0.2.2:7000"}}, t0)
		step(sd, swarm.Unchoked{Peer: 1}, t0) // S unchokes: request piece 0, START
		if !sd.start {
			t.Fatalf("%s sent no START when it asked S for the piece", sd.name)
		}
	}
	for _, sd := range sides {
		step(sd, swarm.Started{Peer: 2, Piece: 0}, t0.Add(time.Millisecond)) // the other's START
		step(sd, swarm.PeerDown{Peer: 1, Reason: "goodbye: leaving"}, t0.Add(10*time.Millisecond))
	}
	for now := t0; now.Before(t0.Add(12 * time.Second)); now = now.Add(200 * time.Millisecond) {
		for _, sd := range sides {
			step(sd, swarm.Tick{}, now)
		}
	}
	for _, sd := range sides {
		if sd.fetch.IsZero() || sd.fetch.Sub(t0) > 3*time.Second {
			t.Errorf("%s: the piece nobody has any more was fetched from the origin %v after its source left (zero: never), though it held the origin every slice",
				sd.name, sd.fetch.Sub(t0))
		}
	}
}

// TestSwarmBugStalledSeed, end to end: a peer that advertises every piece,
// unchokes and never answers (silent: reads the requests; deaf: reads
// nothing) is handed to every peer first, as the tracker hands out seeds.
// The swarm waits for it: while it is connected every piece counts as
// available from a peer, so the origin rule (no-peer-has-it) skips them all;
// its requests time out only after RequestTimeout (10 s, since nobody has
// delivered yet to measure a typical time), it is dropped after Strikes (3)
// timeouts, and it is dialed again DialBackoff (5 s) later with a clean
// slate. Measured: without it the 10 peers are done in 1.2 to 2.2 s; with
// it, one of the 10 was done after 35 s and the others not within the
// test's 90 s (the staller saw 58 to 70 connections), or, with
// QuietRequests, the last was done after 67 s (silent) and 86 s (deaf).
// The runtime's share of the same situation (with a real seed present) is
// TestStalledPeerRuntime, which passes.
func TestSwarmBugStalledSeed(t *testing.T) {
	needSwarmBugs(t)
	const peers, size = 10, 4 * MiB
	link := memnet.HostConfig{Up: 4 * MiB, Down: 8 * MiB, Latency: 5 * time.Millisecond}
	run := func(t *testing.T, serve func(*fakeSession) error) (summary, *fakePeer) {
		ctx := testContext(t)
		nw := memNetwork{memnet.New()}
		o := startOrigin(t, originConfig{size: size, seed: 9, rate: 4 * MiB, net: nw})
		var f *fakePeer
		if serve != nil {
			ln, dial := nw.listen(t, memnet.HostConfig{Window: 16 * KiB})
			f = newFakePeer(t, o.m, ln, serve)
			f.announce(ctx, httpClient(dial), o.base+tracker.WellKnownPath)
		}
		results := runSwarm(ctx, t, o, nw, peers, func(int) peerConfig { return peerConfig{link: link} })
		checkAll(t, o, results)
		return summarize(results), f
	}
	base, _ := run(t, nil)
	t.Logf("without a staller: %v", base)
	for _, tc := range []struct {
		name  string
		serve func(*fakeSession) error
	}{{"silent", silent}, {"deaf", deaf}} {
		t.Run(tc.name, func(t *testing.T) {
			s, f := run(t, tc.serve)
			t.Logf("with a %s staller: %v; it had %d connections and read %d requests", tc.name, s, f.conns.Load(), f.requests.Load())
			if bound := base.maxTook*3/2 + 2*time.Second; s.maxTook > bound {
				t.Errorf("with a %s staller the last peer took %v, without %v: more than 1.5× + 2 s", tc.name, s.maxTook, base.maxTook)
			}
		})
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
