package swarm

import (
	"testing"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
)

// TestStopWithdrawsClaims: A and B both ask seed S for piece 0 and so
// (QuietRequests false, the default) each sends START for it, which the
// other records as a claim. S leaves before answering. Now nobody has the
// piece and both hold the origin every slice (k = 3, n = 3). Without STOP
// neither fetched it: each saw the other's claim, which nothing withdrew,
// for StartTimeout (10 s), and a crowd whose members leave on completion
// advanced in 10 s steps (measured before STOP existed: the node suite's
// 20-peer loopback swarm took 43 s and 83 s where 12 s was enough with
// QuietRequests). With STOP relayed between them, the piece is fetched from
// the origin within a slice or two.
func TestStopWithdrawsClaims(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	cfg := Config{NumPieces: 1, Seed: 1}
	type side struct {
		name        string
		s           *Scheduler
		start, stop bool // sent START / STOP for piece 0
		fetch       time.Time
		inbox       []Event // from the other side, delivered on the next step
	}
	a := &side{name: "A", s: New(cfg, nil, t0)}
	b := &side{name: "B", s: New(cfg, nil, t0)}
	other := map[*side]*side{a: b, b: a}
	step := func(sd *side, ev Event, now time.Time) {
		for _, act := range sd.s.Step(ev, now) {
			switch act := act.(type) {
			case AnnounceStart:
				sd.start = true
				other[sd].inbox = append(other[sd].inbox, Started{Peer: 2, Piece: act.Piece})
			case AnnounceStop:
				sd.stop = true
				other[sd].inbox = append(other[sd].inbox, Stopped{Peer: 2, Piece: act.Piece})
			case FetchOrigin:
				if sd.fetch.IsZero() {
					sd.fetch = now
				}
				t.Logf("%s at +%v: fetch piece %d from the origin (%s)", sd.name, now.Sub(t0), act.Piece, act.Reason)
			}
		}
	}
	deliver := func(sd *side, now time.Time) {
		in := sd.inbox
		sd.inbox = nil
		for _, ev := range in {
			step(sd, ev, now)
		}
	}
	for _, sd := range []*side{a, b} {
		sd.s.Start(t0)
		step(sd, PeerUp{Peer: 1, Addr: "192.0.2.1:7000"}, t0) // S
		step(sd, HaveSet{Peer: 1, Set: pieceset.Full(1)}, t0)
		step(sd, PeerUp{Peer: 2, Addr: "192.0.2.2:7000"}, t0) // the other one
		step(sd, HaveSet{Peer: 2, Set: pieceset.New(1)}, t0)
		step(sd, TrackerPeers{SwarmSize: 3, Addrs: []string{"192.0.2.1:7000", "192.0.2.2:7000"}}, t0)
		step(sd, Unchoked{Peer: 1}, t0) // S unchokes: request piece 0, START
		if !sd.start {
			t.Fatalf("%s sent no START when it asked S for the piece", sd.name)
		}
	}
	t1 := t0.Add(time.Millisecond)
	deliver(a, t1) // each records the other's START
	deliver(b, t1)
	t2 := t0.Add(10 * time.Millisecond)
	step(a, PeerDown{Peer: 1, Reason: "goodbye: leaving"}, t2)
	step(b, PeerDown{Peer: 1, Reason: "goodbye: leaving"}, t2)
	for _, sd := range []*side{a, b} {
		if !sd.stop {
			t.Errorf("%s sent no STOP when the peer it asked for the piece left", sd.name)
		}
	}
	for now := t0.Add(200 * time.Millisecond); now.Before(t0.Add(12 * time.Second)); now = now.Add(200 * time.Millisecond) {
		for _, sd := range []*side{a, b} {
			deliver(sd, now)
			step(sd, Tick{}, now)
		}
	}
	for _, sd := range []*side{a, b} {
		if sd.fetch.IsZero() || sd.fetch.Sub(t0) > 3*time.Second {
			t.Errorf("%s: the piece nobody has any more was fetched from the origin %v after its source left (zero: never), though it held the origin every slice",
				sd.name, sd.fetch.Sub(t0))
		}
	}
}
