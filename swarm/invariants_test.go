package swarm

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
)

// checker feeds events to a scheduler and checks, after every step, that its
// bookkeeping is consistent and its actions keep the rules.
type checker struct {
	t        testing.TB
	s        *Scheduler
	now      time.Time
	complete int
	banned   map[string]bool
	log      []string // every action, for the determinism check
}

func newChecker(t testing.TB, cfg Config, have *pieceset.Set) *checker {
	c := &checker{t: t, now: t0, banned: map[string]bool{}}
	c.s = New(cfg, have, t0)
	c.check(c.s.Start(t0))
	return c
}

func (c *checker) step(ev Event, d time.Duration) {
	c.now = c.now.Add(d)
	c.check(c.s.Step(ev, c.now))
}

func (c *checker) check(acts []Action) {
	t, s := c.t, c.s
	t.Helper()
	for _, a := range acts {
		c.log = append(c.log, fmt.Sprintf("%v %#v", c.now.Sub(t0), a))
		switch a := a.(type) {
		case Complete:
			c.complete++
			if c.complete > 1 || !s.have.Complete() {
				t.Fatalf("Complete #%d with %d/%d pieces", c.complete, s.have.Count(), s.have.Len())
			}
		case FetchOrigin:
			if s.have.Has(a.Piece) {
				t.Fatalf("FetchOrigin %d: we have it", a.Piece)
			}
			if a.Reason == ReasonDeadline {
				// Past a small object's deadline the origin is used
				// whoever has or claims the piece, in or out of a slice.
				if !s.small || s.now.Sub(s.startAt) < s.cfg.SmallDeadline || len(a.Candidates) > 0 {
					t.Fatalf("FetchOrigin %d (deadline) of a small object %v, %v after the start, candidates %v",
						a.Piece, s.small, s.now.Sub(s.startAt), a.Candidates)
				}
				continue
			}
			if a.Reason != ReasonStalled && a.Reason != ReasonPeersFail && s.pieces[a.Piece].avail > 0 {
				t.Fatalf("FetchOrigin %d (%s): %d connected peers have it", a.Piece, a.Reason, s.pieces[a.Piece].avail)
			}
			if a.Reason == ReasonPeersFail && s.heldByTrusted(a.Piece) {
				t.Fatalf("FetchOrigin %d (%s): a peer that is not failing us has it", a.Piece, a.Reason)
			}
			if s.claimed(a.Piece) {
				t.Fatalf("FetchOrigin %d: claimed by another peer", a.Piece)
			}
			if !s.holding {
				t.Fatalf("FetchOrigin %d outside a slice we hold", a.Piece)
			}
		case Connect:
			if c.banned[a.Addr] {
				t.Fatalf("Connect to banned %s", a.Addr)
			}
		case Disconnect:
			if a.Ban {
				if p := s.addrs; p != nil {
					for addr, info := range p {
						if info.banned {
							c.banned[addr] = true
						}
					}
				}
			}
		case Request:
			if s.peers[a.Peer] == nil {
				t.Fatalf("Request to unknown peer %d", a.Peer)
			}
		}
	}
	// Bookkeeping.
	if len(s.order) != len(s.peers) {
		t.Fatalf("order has %d peers, map %d", len(s.order), len(s.peers))
	}
	// The pipeline shrinks when a lone downloader learns of others; the
	// fetches it has in flight then run out.
	if most := max(s.cfg.OriginPipeline, int(float64(s.cfg.OriginWindow)/s.avgLen)) * loneWindow; len(s.originReqs) > most {
		t.Fatalf("%d origin fetches in flight, pipeline at most %d", len(s.originReqs), most)
	}
	if s.Holders(-1) != 0 || s.Holders(len(s.pieces)) != 0 {
		t.Fatalf("Holders out of range: %d, %d", s.Holders(-1), s.Holders(len(s.pieces)))
	}
	for i := range s.pieces {
		ps := &s.pieces[i]
		avail, reqs := 0, 0
		for _, p := range s.order {
			if p.has.Has(i) {
				avail++
			}
			if p.findReq(i) >= 0 {
				reqs++
			}
		}
		if avail != ps.avail || avail != s.Holders(i) || reqs != ps.reqs {
			t.Fatalf("piece %d: avail %d, Holders %d (counted %d), reqs %d (counted %d)", i, ps.avail, s.Holders(i), avail, ps.reqs, reqs)
		}
		if ps.origin != slices.Contains(s.originReqs, i) {
			t.Fatalf("piece %d: origin flag %v, in flight list %v", i, ps.origin, s.originReqs)
		}
		if s.have.Has(i) && reqs > 0 {
			t.Fatalf("piece %d: we have it and still request it", i)
		}
	}
	probes, delivered, conns := map[string]int{}, map[string]int{}, map[string]int{}
	for _, p := range s.order {
		conns[p.host]++
		if p.untested() {
			probes[p.host] += len(p.reqs)
		} else {
			delivered[p.host]++
		}
	}
	credible := 0
	for host, h := range s.hosts {
		if h.conns != conns[host] || h.probes != probes[host] || h.delivered != delivered[host] {
			t.Fatalf("host %s: conns %d (counted %d), probes %d (counted %d), delivered %d (counted %d)",
				host, h.conns, conns[host], h.probes, probes[host], h.delivered, delivered[host])
		}
		if h.probes > hostProbes {
			t.Fatalf("host %s: %d probes in flight, at most %d", host, h.probes, hostProbes)
		}
		credible += min(h.delivered, maxPerHost)
	}
	if credible != s.credible {
		t.Fatalf("credible %d, counted %d", s.credible, credible)
	}
	for _, p := range s.order {
		seen := map[int]bool{}
		for _, r := range p.reqs {
			if seen[r.piece] {
				t.Fatalf("peer %d: piece %d requested twice", p.id, r.piece)
			}
			seen[r.piece] = true
		}
		if len(p.reqs) > s.cfg.MaxDepth {
			t.Fatalf("peer %d: %d requests, max depth %d", p.id, len(p.reqs), s.cfg.MaxDepth)
		}
		offers, wants := 0, 0
		for i := range s.pieces {
			if p.has.Has(i) && !s.have.Has(i) {
				offers++
			}
			if !p.has.Has(i) && s.have.Has(i) {
				wants++
			}
		}
		if offers != p.offers || wants != p.wants {
			t.Fatalf("peer %d: offers %d (counted %d), wants %d (counted %d)", p.id, p.offers, offers, p.wants, wants)
		}
		if s.Lacks(p.id) != (wants > 0) {
			t.Fatalf("peer %d: Lacks %v, but it lacks %d of our pieces", p.id, s.Lacks(p.id), wants)
		}
	}
}

// randomEvents drives a scheduler with n random events: peers come and go,
// announce, deliver (what was asked, and sometimes what was not), reject,
// corrupt; the origin answers; time passes.
func randomEvents(t testing.TB, seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 1))
	pieces := rng.IntN(40)
	cfg := Config{NumPieces: pieces, Seed: seed, MinPeers: 2, MaxPeers: 5, StrictTFT: rng.IntN(4) == 0}
	have := pieceset.New(pieces)
	for i := range pieces {
		if rng.IntN(3) == 0 {
			have.Add(i)
		}
	}
	c := newChecker(t, cfg, have)
	next := PeerID(1)
	addr := func() string { return fmt.Sprintf("10.0.0.%d:1", rng.IntN(12)) }
	piece := func() int {
		if pieces == 0 {
			return 0
		}
		return rng.IntN(pieces)
	}
	anyPeer := func() PeerID { return PeerID(1 + rng.IntN(int(next))) }
	var fetching []int
	for range n {
		d := time.Duration(rng.IntN(400)) * time.Millisecond
		var ev Event
		switch k := rng.IntN(20); {
		case k < 3:
			ev = Tick{}
		case k == 3:
			ev = PeerUp{Peer: next, Addr: addr(), Outbound: rng.IntN(2) == 0}
			next++
		case k == 4:
			ev = PeerDown{Peer: anyPeer()}
		case k == 5:
			set := pieceset.New(pieces)
			for i := range pieces {
				if rng.IntN(2) == 0 {
					set.Add(i)
				}
			}
			ev = HaveSet{Peer: anyPeer(), Set: set}
		case k == 6:
			ev = Have{Peer: anyPeer(), Piece: piece()}
		case k == 7:
			ev = Started{Peer: anyPeer(), Piece: piece()}
		case k == 8:
			ev = Unchoked{Peer: anyPeer()}
		case k == 9 && rng.IntN(4) == 0:
			ev = Choked{Peer: anyPeer()}
		case k <= 11:
			// Deliver an outstanding request, or now and then anything.
			p := c.s.peers[anyPeer()]
			if p != nil && len(p.reqs) > 0 && rng.IntN(5) > 0 {
				ev = Received{Peer: p.id, Piece: p.reqs[rng.IntN(len(p.reqs))].piece}
			} else {
				ev = Received{Peer: anyPeer(), Piece: piece()}
			}
		case k == 12 && rng.IntN(6) == 0:
			ev = Corrupt{Peer: anyPeer(), Piece: piece()}
		case k == 13:
			reasons := []string{RejectChoked, RejectDontHave, RejectBusy, RejectTab, ""}
			ev = Rejected{Peer: anyPeer(), Piece: piece(), Reason: reasons[rng.IntN(len(reasons))]}
		case k == 14:
			fetching = append(fetching, c.s.originReqs...)
			if len(fetching) > 0 {
				k := rng.IntN(len(fetching))
				r := OriginResult{Piece: fetching[k], OK: rng.IntN(4) > 0}
				if !r.OK && rng.IntN(2) == 0 {
					r.Busy = time.Second
				}
				fetching = slices.Delete(fetching, k, k+1)
				ev = r
			} else {
				ev = Tick{}
			}
		case k == 15:
			ev = PeerRequest{Peer: anyPeer(), Piece: piece()}
		case k == 16:
			ev = Uploaded{Peer: anyPeer(), Piece: piece()}
		case k == 17:
			ev = TrackerPeers{Addrs: []string{addr(), addr()}, SwarmSize: 1 + rng.IntN(60)}
		case k == 18:
			ev = Recommended{Peer: anyPeer(), Addrs: []string{addr()}}
		case k == 19 && rng.IntN(2) == 0:
			ev = PathRTT{Peer: anyPeer(), RTT: time.Duration(rng.IntN(300)) * time.Millisecond}
		default:
			ev = DialFailed{Addr: addr()}
		}
		c.step(ev, d)
	}
	return c.log
}

func TestRandomEvents(t *testing.T) {
	for seed := range uint64(300) {
		randomEvents(t, seed, 400)
	}
}

// TestDeterministic: the same seed and events give the same actions.
func TestDeterministic(t *testing.T) {
	for seed := range uint64(20) {
		a, b := randomEvents(t, seed, 300), randomEvents(t, seed, 300)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two runs differ", seed)
		}
	}
}

func FuzzSchedulerEvents(f *testing.F) {
	for _, s := range []uint64{0, 1, 42, 1 << 40} {
		f.Add(s, uint16(300))
	}
	f.Fuzz(func(t *testing.T, seed uint64, n uint16) {
		randomEvents(t, seed, int(n%2000))
	})
}
