package swarm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
)

// sybilRun downloads a file of pieces pieces from one honest neighbour,
// which delivers every request 50 ms after it is sent, while liars peers
// from one other address advertise every piece, unchoke us and never
// deliver; each liar dropped is back 100 ms later under a new ID. The
// origin answers in 200 ms. It returns how long the download took, the
// most requests ever in flight to the liars at once, and the origin
// fetches.
func sybilRun(t *testing.T, pieces, liars int) (took time.Duration, mostLiarReqs, origin int) {
	t.Helper()
	s := New(Config{NumPieces: pieces, Seed: 35}, nil, t0)
	now := t0
	type due struct {
		at   time.Time
		ev   Event
		liar bool
	}
	var queue []due
	isLiar := map[PeerID]bool{}
	inFlight := map[PeerID]int{}
	next := PeerID(1)
	join := func(liar bool) []Action {
		id := next
		next++
		host := "10.0.0.1"
		if liar {
			host = "10.0.0.66"
			isLiar[id] = true
		}
		addr := fmt.Sprintf("%s:%d", host, 7000+id)
		acts := s.Step(PeerUp{Peer: id, Addr: addr, Host: host, Outbound: !liar}, now)
		acts = append(acts, s.Step(HaveSet{Peer: id, Set: pieceset.Full(pieces)}, now)...)
		return append(acts, s.Step(Unchoked{Peer: id}, now)...)
	}
	handle := func(acts []Action) {
		for _, a := range acts {
			switch a := a.(type) {
			case Request:
				inFlight[a.Peer]++
				if !isLiar[a.Peer] {
					queue = append(queue, due{at: now.Add(50 * time.Millisecond), ev: Received{Peer: a.Peer, Piece: a.Piece}})
				}
			case Cancel:
				inFlight[a.Peer]--
			case Disconnect:
				delete(inFlight, a.Peer)
				if isLiar[a.Peer] {
					queue = append(queue, due{at: now.Add(100 * time.Millisecond), liar: true})
				}
			case FetchOrigin:
				origin++
				queue = append(queue, due{at: now.Add(200 * time.Millisecond), ev: OriginResult{Piece: a.Piece, OK: true}})
			}
		}
	}
	handle(s.Start(now))
	handle(s.Step(TrackerPeers{SwarmSize: 2 + liars}, now))
	handle(join(false))
	for range liars {
		handle(join(true))
	}
	for !s.have.Complete() {
		if now.Sub(t0) > 10*time.Minute {
			t.Fatalf("%d/%d pieces after 10 minutes", s.have.Count(), pieces)
		}
		now = now.Add(10 * time.Millisecond)
		var later []due
		ready := queue
		queue = nil
		for _, d := range ready {
			switch {
			case d.at.After(now):
				later = append(later, d)
			case d.liar:
				handle(join(true))
			default:
				if r, ok := d.ev.(Received); ok {
					if _, up := inFlight[r.Peer]; !up {
						continue
					}
					inFlight[r.Peer]--
				}
				handle(s.Step(d.ev, now))
			}
		}
		queue = append(queue, later...)
		handle(s.Step(Tick{}, now))
		n := 0
		for id, k := range inFlight {
			if isLiar[id] {
				n += k
			}
		}
		mostLiarReqs = max(mostLiarReqs, n)
	}
	return now.Sub(t0), mostLiarReqs, origin
}

// TestSybilProbes: 64 peer IDs from one address that advertise every
// piece, unchoke us and never deliver (each back under a new ID when
// dropped) share hostProbes requests, and do not slow a download from an
// honest neighbour by more than 30%. Each of them used to be asked at full
// depth, and the pieces asked of them waited out their deadlines: in a
// crowd of 4 on memnet (node's TestFakeWirePeers), 4.6× as long.
func TestSybilProbes(t *testing.T) {
	const pieces = 256
	base, _, _ := sybilRun(t, pieces, 0)
	took, most, origin := sybilRun(t, pieces, 64)
	t.Logf("alone with an honest neighbour: %v; with 64 liars: %v, at most %d requests to them at once, %d origin fetches", base, took, most, origin)
	if most > hostProbes {
		t.Errorf("%d requests in flight to one address's peers that never delivered, want at most %d", most, hostProbes)
	}
	if took.Seconds() > 1.3*base.Seconds() {
		t.Errorf("with 64 liars from one address the download took %v, without %v: more than 1.3×", took, base)
	}
}

// TestSybilClaimsNothing: the last piece, which no honest neighbour has,
// asked of one fake peer ID after another from an address whose peers
// never deliver. Each of a crowd's peers used to claim it (START) as it
// asked the next one, and the claims kept the whole crowd off the origin
// for it: on memnet (node's TestFakeWirePeers) the last peer of a crowd
// of 4 took up to 3.8× as long. Once one of the address's peers has let
// a request time out, asking its others claims nothing, and the claim
// already made is withdrawn (STOP).
func TestSybilClaimsNothing(t *testing.T) {
	const pieces = 8
	have := pieceset.New(pieces)
	for i := range pieces - 1 {
		have.Add(i)
	}
	s := New(Config{NumPieces: pieces, Seed: 35}, have, t0)
	now := t0
	next := PeerID(1)
	claimed, timedOut := false, false
	handle := func(acts []Action) {
		for _, a := range acts {
			switch a := a.(type) {
			case AnnounceStart:
				claimed = a.Piece == pieces-1 || claimed
			case AnnounceStop:
				claimed = claimed && a.Piece != pieces-1
			case Cancel:
				timedOut = timedOut || a.Timeout
			case FetchOrigin:
				t.Fatalf("at %v: fetched piece %d from the origin, claimed by a neighbour", now.Sub(t0), a.Piece)
			}
		}
	}
	join := func(host string, set *pieceset.Set) PeerID {
		id := next
		next++
		handle(s.Step(PeerUp{Peer: id, Addr: fmt.Sprintf("%s:%d", host, 7000+id), Host: host}, now))
		handle(s.Step(HaveSet{Peer: id, Set: set}, now))
		handle(s.Step(Unchoked{Peer: id}, now))
		return id
	}
	handle(s.Start(now))
	// An honest neighbour lacking the piece too, whose own claim on it
	// (it asks the same fakes) keeps us off the origin.
	honest := join("10.0.0.1", have)
	handle(s.Step(Started{Peer: honest, Piece: pieces - 1}, now))
	handle(s.Step(TrackerPeers{SwarmSize: 3}, now))
	liar := join("10.0.0.66", pieceset.Full(pieces))
	for ; now.Sub(t0) < time.Minute; now = now.Add(50 * time.Millisecond) {
		if now.Sub(t0)%(5*time.Second) == 0 {
			handle(s.Step(Started{Peer: honest, Piece: pieces - 1}, now))
		}
		if _, up := s.peers[liar]; !up {
			liar = join("10.0.0.66", pieceset.Full(pieces))
		}
		handle(s.Step(Tick{}, now))
		if timedOut && claimed {
			t.Fatalf("at %v: a claim on the last piece, asked only of peers of an address that let requests time out", now.Sub(t0))
		}
	}
	if !timedOut {
		t.Fatal("no request to the fakes timed out")
	}
}

// TestSybilCrowdsOutNobody: one address holds every slot with empty
// peers, each redialled under a new ID as soon as it is dropped, and then
// honest peers from other addresses dial in, with nothing to trade yet
// either. Each honest peer must keep its slot: the peers of the address
// over its share go first. The youngest connection used to go first, so
// the honest newcomer was dropped at once and a crowd of 4 on memnet
// (node's TestFakeWirePeers) did not meet: 2.9× as long, 2.9 origin
// copies.
func TestSybilCrowdsOutNobody(t *testing.T) {
	const pieces = 64
	s := New(Config{NumPieces: pieces, Seed: 35}, nil, t0)
	now := t0
	next := PeerID(1)
	dropped := map[PeerID]bool{}
	handle := func(acts []Action) {
		for _, a := range acts {
			if d, ok := a.(Disconnect); ok {
				dropped[d.Peer] = true
			}
		}
	}
	join := func(host string) PeerID {
		id := next
		next++
		handle(s.Step(PeerUp{Peer: id, Addr: fmt.Sprintf("%s:%d", host, 7000+id), Host: host}, now))
		handle(s.Step(HaveSet{Peer: id, Set: pieceset.New(pieces)}, now))
		return id
	}
	handle(s.Start(now))
	fakes := map[PeerID]bool{}
	for range s.cfg.MaxPeers {
		fakes[join("10.0.0.66")] = true
	}
	var honest []PeerID
	for i := range 3 {
		now = now.Add(time.Second)
		honest = append(honest, join(fmt.Sprintf("10.0.1.%d", i+1)))
		// The attacker is back at once under a new ID for each it lost.
		for id := range fakes {
			if dropped[id] {
				delete(fakes, id)
				fakes[join("10.0.0.66")] = true
			}
		}
		handle(s.Step(Tick{}, now))
	}
	for _, id := range honest {
		if dropped[id] {
			t.Errorf("honest peer %d was dropped for the peers of one address holding %d slots", id, len(fakes))
		}
	}
	if len(s.order) > s.cfg.MaxPeers {
		t.Errorf("%d peers, want at most MaxPeers = %d", len(s.order), s.cfg.MaxPeers)
	}
}
