package swarm

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
)

// lonelyScheduler returns a scheduler that knows no peers, with a tracker
// answer of swarm size n, and a file large enough not to run out of pieces;
// and the origin fetches it started on that answer.
func lonelyScheduler(n, pieces int, seed uint64) (*Scheduler, []int) {
	s := New(Config{NumPieces: pieces, Seed: seed}, nil, t0)
	s.Start(t0)
	return s, fetches(s.Step(TrackerPeers{SwarmSize: n}, t0))
}

func fetches(acts []Action) []int {
	var out []int
	for _, a := range acts {
		if f, ok := a.(FetchOrigin); ok {
			out = append(out, f.Piece)
		}
	}
	return out
}

// failAll answers the origin fetches pending, and those they lead to, with
// an error at once.
func failAll(s *Scheduler, pending []int, now time.Time) {
	for len(pending) > 0 {
		p := pending[0]
		pending = append(pending[1:], fetches(s.Step(OriginResult{Piece: p}, now))...)
	}
}

// runSlices ticks s at every slice boundary for slices slices, answering
// every origin fetch at the next boundary, and returns in how many slices
// it fetched from the origin.
func runSlices(s *Scheduler, pending []int, slices int) int {
	used := 0
	now := t0
	for range slices {
		now = now.Add(s.cfg.OriginSlice)
		var acts []Action
		for _, p := range pending {
			acts = append(acts, s.Step(OriginResult{Piece: p, OK: true}, now)...)
		}
		acts = append(acts, s.Step(Tick{}, now)...)
		if pending = fetches(acts); len(pending) > 0 {
			used++
		}
	}
	return used
}

// TestOriginShare: with n = 100 and k = 3, a peer with something to fetch
// uses the origin in about k/n of the slices (Slurpie's backoff).
func TestOriginShare(t *testing.T) {
	const slices = 10000
	for _, tc := range []struct {
		n    int
		seed uint64
	}{{100, 1}, {100, 2}, {30, 3}, {1000, 4}} {
		s, pending := lonelyScheduler(tc.n, 1<<13, tc.seed)
		// The first slice was drawn when the tracker answered: count from
		// the next one.
		used := runSlices(s, pending, slices)
		p := float64(s.cfg.OriginK) / float64(tc.n)
		got := float64(used) / slices
		sd := math.Sqrt(p * (1 - p) / slices)
		t.Logf("n=%d: used the origin in %d of %d slices (%.4f, want %.4f ± %.4f)", tc.n, used, slices, got, p, 4*sd)
		if math.Abs(got-p) > 4*sd {
			t.Errorf("n=%d: origin share %.4f, want %.4f ± %.4f", tc.n, got, p, 4*sd)
		}
		if st := s.Stats(); st.OriginSlicesUsed != used || st.OriginSlicesWon < used {
			t.Errorf("stats: used %d won %d, counted %d", st.OriginSlicesUsed, st.OriginSlicesWon, used)
		}
	}
}

// TestOriginHolders: across a population of n peers, about k hold the
// origin in any slice, whatever n is. The origin answers every fetch at
// once (with an error, so the pieces stay wanted): fetches that outlive
// their slice scale the draw down, which TestSimSlowOrigin covers.
func TestOriginHolders(t *testing.T) {
	const slices = 200
	for _, n := range []int{10, 100, 1000} {
		total, none := 0, 0
		peers := make([]*Scheduler, n)
		for i := range peers {
			var pending []int
			peers[i], pending = lonelyScheduler(n, 64, uint64(i+1)*7919)
			failAll(peers[i], pending, t0)
		}
		now := t0
		for range slices {
			now = now.Add(peers[0].cfg.OriginSlice)
			holders := 0
			for _, s := range peers {
				failAll(s, fetches(s.Step(Tick{}, now)), now)
				if s.holding {
					holders++
				}
			}
			total += holders
			if holders == 0 {
				none++
			}
		}
		mean := float64(total) / slices
		t.Logf("n=%d: %.2f peers hold the origin per slice on average; none in %d%% of slices", n, mean, 100*none/slices)
		if mean < 2.4 || mean > 3.6 {
			t.Errorf("n=%d: mean holders %.2f, want about 3", n, mean)
		}
	}
}

// TestOriginHolderChosen: a peer the application chose to fetch from the
// origin (OriginHolder) holds every slice in a crowd of 100, where the
// draw alone gives it about 3 in 100, and keeps OriginPipeline fetches in
// flight, not the window's worth of small pieces.
func TestOriginHolderChosen(t *testing.T) {
	s := New(Config{NumPieces: 1 << 12, PieceLen: func(int) int64 { return 16 << 10 }, Seed: 1, OriginHolder: true}, nil, t0)
	s.Start(t0)
	pending := fetches(s.Step(TrackerPeers{SwarmSize: 100}, t0))
	if used := runSlices(s, pending, 200); used != 200 {
		t.Errorf("a chosen holder used the origin in %d of 200 slices, want all", used)
	}
	if len(s.originReqs) != s.cfg.OriginPipeline {
		t.Errorf("%d origin fetches in flight, want OriginPipeline (%d); the window would allow %d",
			len(s.originReqs), s.cfg.OriginPipeline, int(float64(s.cfg.OriginWindow)/s.avgLen))
	}
}

// TestOriginLoneFullPipeline: alone (n = 1), every slice is ours and the
// pipeline is always full; it opens, one piece per fetch back, to
// loneWindow times the crowd's.
func TestOriginLoneFullPipeline(t *testing.T) {
	s, pending := lonelyScheduler(1, 1<<10, 1)
	if len(pending) != s.cfg.OriginPipeline {
		t.Errorf("%d origin fetches on the tracker's answer, want %d", len(pending), s.cfg.OriginPipeline)
	}
	want := s.cfg.OriginPipeline * loneWindow
	if used := runSlices(s, pending, 100); used != 100 {
		t.Errorf("alone, used the origin in %d of 100 slices", used)
	}
	if len(s.originReqs) != want {
		t.Errorf("%d origin fetches in flight, want %d", len(s.originReqs), want)
	}
}

// TestOriginInSwarm: an origin answer "in swarm" keeps the piece asked and
// the fetch's candidates off the origin for its wait, but not the other
// pieces; once the wait is over, a piece the swarm did not bring is
// fetched again.
func TestOriginInSwarm(t *testing.T) {
	s := New(Config{NumPieces: 8, Seed: 1}, nil, t0)
	s.Start(t0)
	now := t0
	seen := map[int]bool{}
	var pending []int
	var first FetchOrigin
	for _, a := range s.Step(TrackerPeers{SwarmSize: 1}, now) {
		if f, ok := a.(FetchOrigin); ok {
			if first.Candidates == nil {
				first = f
			} else {
				pending = append(pending, f.Piece)
			}
		}
	}
	if len(first.Candidates) < 2 {
		t.Fatalf("origin fetch on the tracker's answer offers %v", first.Candidates)
	}
	// run answers every fetch with its piece and ticks, slice by slice,
	// until end; it records the pieces fetched.
	run := func(end time.Time) {
		for now.Before(end) {
			var next []int
			for _, p := range pending {
				next = append(next, fetches(s.Step(OriginResult{Piece: p, OK: true}, now))...)
			}
			now = now.Add(s.cfg.OriginSlice)
			pending = append(next, fetches(s.Step(Tick{}, now))...)
			for _, p := range pending {
				seen[p] = true
			}
		}
	}
	// The origin says: the piece and two candidates (not fetched by us
	// meanwhile) went to others just now.
	held := []int{first.Piece}
	for _, c := range first.Candidates {
		if len(held) < 3 && !slices.Contains(pending, c) {
			held = append(held, c)
		}
	}
	const wait = 2 * time.Second
	for _, p := range fetches(s.Step(OriginResult{Piece: first.Piece, InSwarm: wait, Candidates: held[1:]}, now)) {
		seen[p] = true
		pending = append(pending, p)
	}
	run(t0.Add(wait - s.cfg.OriginSlice))
	for _, p := range held {
		if seen[p] {
			t.Errorf("piece %d fetched from the origin within the in-swarm wait", p)
		}
	}
	if len(seen) == 0 {
		t.Error("no other piece fetched during the wait")
	}
	if st := s.Stats(); st.OriginInSwarm != 1 {
		t.Errorf("Stats.OriginInSwarm = %d, want 1", st.OriginInSwarm)
	}
	// After the wait they may go again; the swarm did not bring them.
	run(now.Add(5 * time.Second))
	for _, p := range held {
		if !seen[p] {
			t.Errorf("piece %d never fetched again after the wait", p)
		}
	}
}

// TestOriginInSwarmPreferred: a piece the origin said was in the swarm is
// still fetched at once when it becomes preferred (a reader waits for it);
// that fetch offers no candidates, so the origin sends it.
func TestOriginInSwarmPreferred(t *testing.T) {
	s := New(Config{NumPieces: 64, Seed: 1}, nil, t0)
	s.Start(t0)
	now := t0
	var first *FetchOrigin
	var got *FetchOrigin
	// step applies ev and answers every origin fetch but the watched
	// piece's with the piece, so the pipeline has room.
	var step func(ev Event)
	step = func(ev Event) {
		for _, a := range s.Step(ev, now) {
			f, ok := a.(FetchOrigin)
			switch {
			case !ok:
			case first == nil && len(f.Candidates) > 0:
				first = &f
				step(OriginResult{Piece: f.Piece, InSwarm: time.Minute})
			case first != nil && f.Piece == first.Piece:
				got = &f
			default:
				step(OriginResult{Piece: f.Piece, OK: true})
			}
		}
	}
	step(TrackerPeers{SwarmSize: 1})
	if first == nil {
		t.Fatal("no origin fetch with candidates on the tracker's answer")
	}
	for range 4 {
		now = now.Add(s.cfg.OriginSlice)
		step(Tick{})
	}
	if got != nil {
		t.Fatalf("piece %d fetched again within the in-swarm wait before it was preferred", first.Piece)
	}
	step(Prefer{From: first.Piece, Count: 1})
	for range 8 {
		if got != nil {
			break
		}
		now = now.Add(s.cfg.OriginSlice)
		step(Tick{})
	}
	if got == nil {
		t.Fatalf("preferred piece %d not fetched within 2 s of an in-swarm answer with a minute's wait", first.Piece)
	}
	if len(got.Candidates) != 0 {
		t.Errorf("the preferred fetch offers candidates %v: the origin could refuse it", got.Candidates)
	}
}

// TestOriginBacklogDrains: a slow origin fetch scales the draw down, but the
// backlog it measured drains at the origin's rate, down to the quickest
// fetch (the origin's own latency), so the peer's draw comes back to k/n
// once that backlog is gone, though it fetches nothing more in between
// (its fetches fail and measure nothing).
func TestOriginBacklogDrains(t *testing.T) {
	s, pending := lonelyScheduler(1, 256, 5)
	if len(pending) < 2 {
		t.Fatalf("alone, %d origin fetches on the tracker's answer, want 2", len(pending))
	}
	quick := t0.Add(100 * time.Millisecond)
	failAll(s, fetches(s.Step(OriginResult{Piece: pending[0], OK: true}, quick)), quick)
	slow := t0.Add(10 * time.Second)
	failAll(s, fetches(s.Step(OriginResult{Piece: pending[1], OK: true}, slow)), slow)
	if d := s.originFetchTime(); d != 10*time.Second {
		t.Fatalf("origin fetch time %v after a 10 s fetch (the one before long drained), want 10s", d)
	}
	failAll(s, fetches(s.Step(TrackerPeers{SwarmSize: 100}, slow)), slow)
	if d := s.originFetchTime(); d != 10*time.Second {
		t.Errorf("origin fetch time %v just after, want 10s", d)
	}
	later := slow.Add(7 * time.Second)
	failAll(s, fetches(s.Step(Tick{}, later)), later)
	if d := s.originFetchTime(); d != 3*time.Second {
		t.Errorf("origin fetch time %v 7 s later, want 3s (drained)", d)
	}
	after := slow.Add(20 * time.Second)
	failAll(s, fetches(s.Step(Tick{}, after)), after)
	if d := s.originFetchTime(); d != 100*time.Millisecond {
		t.Errorf("origin fetch time %v 20 s later, want 100ms (the quickest fetch)", d)
	}
	// The backlog is gone: the draw is k/n again.
	const draws = 2000
	now := after
	won := s.Stats().OriginSlicesWon
	for range draws {
		now = now.Add(s.cfg.OriginSlice)
		failAll(s, fetches(s.Step(Tick{}, now)), now)
	}
	won = s.Stats().OriginSlicesWon - won
	p := float64(s.cfg.OriginK) / 100
	sd := math.Sqrt(p * (1 - p) / draws)
	got := float64(won) / draws
	t.Logf("won %d of %d draws after the backlog drained (%.4f, want %.4f ± %.4f)", won, draws, got, p, 4*sd)
	if math.Abs(got-p) > 4*sd {
		t.Errorf("draw share %.4f after the backlog drained, want %.4f ± %.4f (not scaled down by a stale fetch time)", got, p, 4*sd)
	}
}

// TestOriginOnlyPieceIsItsOwnCandidate: a fetch of the only eligible piece
// names it as its candidate while we have peers, so the origin can refuse
// a copy it sent another peer just now; not alone (no-peers), and not on
// the retry after a fetch of ours failed (the origin would take our own
// send for another peer's).
func TestOriginOnlyPieceIsItsOwnCandidate(t *testing.T) {
	only := func(acts []Action) FetchOrigin {
		t.Helper()
		var got []FetchOrigin
		for _, a := range acts {
			if f, ok := a.(FetchOrigin); ok {
				got = append(got, f)
			}
		}
		if len(got) != 1 {
			t.Fatalf("origin fetches %v, want one", got)
		}
		return got[0]
	}

	alone := New(Config{NumPieces: 1, Seed: 1}, nil, t0)
	alone.Start(t0)
	if f := only(alone.Step(TrackerPeers{SwarmSize: 1}, t0)); f.Reason != ReasonNoPeers || len(f.Candidates) > 0 {
		t.Errorf("alone: %+v, want reason %s and no candidates", f, ReasonNoPeers)
	}

	s := New(Config{NumPieces: 1, Seed: 1}, nil, t0)
	s.Start(t0)
	s.Step(PeerUp{Peer: 1, Addr: "192.0.2.1:1", Outbound: true}, t0)
	s.Step(HaveSet{Peer: 1, Set: pieceset.New(1)}, t0)
	f := only(s.Step(TrackerPeers{SwarmSize: 2, Addrs: []string{"192.0.2.1:1"}}, t0))
	if f.Reason != ReasonNoPeerHasIt || !slices.Equal(f.Candidates, []int{0}) {
		t.Fatalf("with a peer: %+v, want reason %s and candidates [0]", f, ReasonNoPeerHasIt)
	}
	s.Step(OriginResult{Piece: 0}, t0) // an error: retried after a slice
	now := t0
	var retry []Action
	for range 8 {
		now = now.Add(s.cfg.OriginSlice)
		if retry = s.Step(Tick{}, now); len(fetches(retry)) > 0 {
			break
		}
	}
	if f := only(retry); len(f.Candidates) > 0 {
		t.Errorf("retry after our fetch failed: %+v, want no candidates", f)
	}
}

// TestOriginBackoff: when every origin fetch fails at once (a dead origin
// refuses connections), a lone peer pauses all origin use, longer after
// each failure, and tries one fetch at a time: at most one a second from
// 10 s on. It used to wait only that piece a slice and fetch the next at
// once, a fetch per failure. The first success ends the pauses.
func TestOriginBackoff(t *testing.T) {
	s, pending := lonelyScheduler(1, 4096, 35)
	var perSecond [60]int
	now := t0
	for now.Sub(t0) < 60*time.Second {
		for len(pending) > 0 {
			perSecond[int(now.Sub(t0)/time.Second)]++
			p := pending[0]
			pending = append(pending[1:], fetches(s.Step(OriginResult{Piece: p}, now))...)
		}
		now = now.Add(10 * time.Millisecond)
		pending = fetches(s.Step(Tick{}, now))
	}
	total := 0
	for sec, n := range perSecond {
		total += n
		if sec >= 10 && n > 1 {
			t.Errorf("second %d: %d origin fetches against a dead origin, want at most 1", sec, n)
		}
	}
	t.Logf("origin fetches per second: %v (%d in all, %d pauses)", perSecond, total, s.Stats().OriginBackoffs)
	if total > 40 {
		t.Errorf("%d origin fetches in 60 s against a dead origin, want at most 40", total)
	}
	// The origin is back: the first success reopens the whole window.
	for now = now.Add(s.cfg.OriginBackoffMax); len(pending) == 0; now = now.Add(10 * time.Millisecond) {
		pending = fetches(s.Step(Tick{}, now))
	}
	if len(pending) != 1 {
		t.Fatalf("%d fetches try the failing origin at once, want 1", len(pending))
	}
	more := fetches(s.Step(OriginResult{Piece: pending[0], OK: true}, now))
	if want := s.originPipeline(); len(more) < want-1 {
		t.Errorf("after a success %d fetches went out, want the window again (%d)", len(more), want)
	}
}

// TestOriginProbeAfterSilence: a peer that has not heard from the origin
// for OriginBackoffMax (here kept off it by a 503 for 30 s) tries it with
// one fetch, not its whole window: the origin may have died meanwhile, and
// a window sent to a dead origin is that many connections at once (a
// crowd's peers that first came back to a dead origin 15 s after it died
// opened 16 each). The first answer reopens the window.
func TestOriginProbeAfterSilence(t *testing.T) {
	s, pending := lonelyScheduler(1, 4096, 35)
	if len(pending) < 2 {
		t.Fatalf("%d fetches at the start, want a window", len(pending))
	}
	now := t0.Add(100 * time.Millisecond)
	s.Step(OriginResult{Piece: pending[0], Busy: 30 * time.Second}, now)
	for _, p := range pending[1:] {
		s.Step(OriginResult{Piece: p, OK: true}, now)
	}
	var probe []int
	for now = now.Add(30 * time.Second); len(probe) == 0 && now.Before(t0.Add(time.Minute)); now = now.Add(10 * time.Millisecond) {
		probe = fetches(s.Step(Tick{}, now))
	}
	if len(probe) != 1 {
		t.Fatalf("%d fetches after 30 s without word from the origin, want 1", len(probe))
	}
	more := fetches(s.Step(OriginResult{Piece: probe[0], OK: true}, now))
	if want := s.originPipeline(); len(more) < want-1 {
		t.Errorf("after the probe came back %d fetches went out, want the window again (%d)", len(more), want)
	}
}

// TestOriginBackoffHuge: a backoff configured past what doubling can hold
// waits its maximum, rather than overflowing into a negative wait (and a
// panic in the jitter's draw).
func TestOriginBackoffHuge(t *testing.T) {
	cfg := Config{NumPieces: 8, Seed: 1, OriginBackoff: 1 << 50, OriginBackoffMax: 1 << 60}
	s := New(cfg, nil, time.Unix(1e9, 0))
	for range 20 {
		s.originFailed(s.now)
		if wait := s.originRetryAt.Sub(s.now); wait <= 0 || wait > cfg.OriginBackoffMax {
			t.Fatalf("after %d failures a wait of %v, want within (0, %v]", s.originFails, wait, cfg.OriginBackoffMax)
		}
		s.now = s.originRetryAt
	}
}

// TestOriginOddsIgnoreCapacity: the origin draw is k/n whatever the
// uplinks (drawSlice says why it is not weighted by them): a peer on a
// twentieth of its neighbours' uplink, one on a faster uplink than half of
// them, and one among liars claiming a huge uplink all win about k/n of
// the slices.
func TestOriginOddsIgnoreCapacity(t *testing.T) {
	const (
		slow, fast = 125e3, 2.5e6 // 1 and 20 Mbit/s
		n          = 40
		draws      = 4000
	)
	share := func(self float64, neighbours ...float64) float64 {
		s := New(Config{NumPieces: 64, Seed: 30}, nil, t0)
		s.Start(t0)
		now := t0
		s.Step(TrackerPeers{SwarmSize: n}, now)
		s.Step(Capacity{Up: self}, now)
		for i, c := range neighbours {
			id := PeerID(i + 1)
			host := fmt.Sprintf("10.0.0.%d", i+1)
			s.Step(PeerUp{Peer: id, Addr: host + ":7000", Host: host}, now)
			set := pieceset.New(64)
			set.Add(i)
			s.Step(HaveSet{Peer: id, Set: set}, now)
			s.Step(PeerCapacity{Peer: id, Up: c}, now)
			// It delivers its piece: a neighbour on evidence.
			for _, a := range s.Step(Unchoked{Peer: id}, now) {
				if r, ok := a.(Request); ok && r.Peer == id {
					s.Step(Received{Peer: id, Piece: r.Piece, Bytes: s.pieceLen(r.Piece)}, now)
				}
			}
		}
		won := s.Stats().OriginSlicesWon
		for range draws {
			now = now.Add(s.cfg.OriginSlice)
			failAll(s, fetches(s.Step(Tick{}, now)), now)
		}
		return float64(s.Stats().OriginSlicesWon-won) / draws
	}
	even := share(fast, fast, fast, fast, fast, fast, fast, fast, fast)
	slowAmongFast := share(slow, fast, fast, fast, fast, fast, fast, fast, fast)
	fastAmongMixed := share(fast, fast, fast, fast, fast, slow, slow, slow, slow)
	lied := share(fast, fast, fast, fast, fast, fast, fast, 1e12, 1e12)
	t.Logf("share of slices won: among equals %.4f, slow among fast %.4f, fast among half slow %.4f, among 2 liars %.4f",
		even, slowAmongFast, fastAmongMixed, lied)
	k := float64(DefaultOriginK) / n
	for _, c := range []struct {
		name  string
		share float64
	}{{"among equals", even}, {"slow among fast", slowAmongFast}, {"fast among half slow", fastAmongMixed}, {"among 2 liars", lied}} {
		if math.Abs(c.share-k) > 0.3*k {
			t.Errorf("%s the share is %.4f, want about k/n = %.4f", c.name, c.share, k)
		}
	}
}

// TestOriginSpare: a holder whose neighbour has every piece it lacks
// fetches from the origin only when the origin has budget and time to
// spare (ReasonSpare): it told of a budget with room left, and our origin
// fetches are as quick as our quickest. Not without a budget, not with
// less than a whole copy left, not from a saturated origin (fetches eight
// times as slow as the quickest), and never a piece asked of a peer.
func TestOriginSpare(t *testing.T) {
	const pieces = 64
	run := func(budget *OriginBudget, fetchTime time.Duration) (spare int, askedOfPeer bool) {
		s := New(Config{NumPieces: pieces, Seed: 30}, nil, t0)
		s.Start(t0)
		now := t0
		type answer struct {
			at    time.Time
			piece int
		}
		var due []answer
		asked := map[int]bool{}
		handle := func(acts []Action) {
			for _, a := range acts {
				switch a := a.(type) {
				case FetchOrigin:
					if a.Reason == ReasonSpare {
						spare++
						askedOfPeer = askedOfPeer || asked[a.Piece]
					}
					// The first fetch is quick; the rest take fetchTime.
					d := fetchTime
					if s.originMin == 0 && len(due) == 0 {
						d = 50 * time.Millisecond
					}
					due = append(due, answer{now.Add(d), a.Piece})
				case Request:
					asked[a.Piece] = true
				}
			}
		}
		// n = 2 <= k: every slice held. A neighbour with everything,
		// which never answers.
		handle(s.Step(TrackerPeers{SwarmSize: 2}, now))
		handle(s.Step(PeerUp{Peer: 1, Addr: "10.0.0.1:7000", Host: "10.0.0.1"}, now))
		handle(s.Step(HaveSet{Peer: 1, Set: pieceset.Full(pieces)}, now))
		handle(s.Step(Unchoked{Peer: 1}, now))
		if budget != nil {
			handle(s.Step(*budget, now))
		}
		for range 80 {
			now = now.Add(25 * time.Millisecond)
			for len(due) > 0 && !due[0].at.After(now) {
				d := due[0]
				due = due[1:]
				handle(s.Step(OriginResult{Piece: d.piece, OK: true}, now))
			}
			handle(s.Step(Tick{}, now))
		}
		return spare, askedOfPeer
	}
	size := int64(pieces) * DefaultPieceLen
	ample := &OriginBudget{Left: 5 * size, Reset: 5 * time.Minute}
	if n, bad := run(ample, 50*time.Millisecond); n == 0 || bad {
		t.Errorf("budget ample, origin quick: %d spare fetches (of a piece asked of a peer: %v), want some and none", n, bad)
	}
	if n, _ := run(nil, 50*time.Millisecond); n != 0 {
		t.Errorf("no budget told: %d spare fetches, want none", n)
	}
	if n, _ := run(&OriginBudget{Left: size * 3 / 4, Reset: 5 * time.Minute}, 50*time.Millisecond); n != 0 {
		t.Errorf("three quarters of a copy left: %d spare fetches, want none", n)
	}
	if n, _ := run(ample, 400*time.Millisecond); n > 1 {
		t.Errorf("origin saturated (fetches 8 times the quickest): %d spare fetches, want at most the one before it showed", n)
	}
}

// TestOriginSpareHoldsEverySlice: in a crowd of 1,000 the draw gives a
// peer k/n of the slices; while the origin has budget and time to spare
// (spare) every peer holds every slice, and once the budget's room is
// gone the draw is k/n again.
func TestOriginSpareHoldsEverySlice(t *testing.T) {
	const pieces = 64
	size := int64(pieces) * DefaultPieceLen
	run := func(budget *OriginBudget) (won, drawn int) {
		s := New(Config{NumPieces: pieces, Seed: 31}, nil, t0)
		s.Start(t0)
		now := t0
		fetched := -1
		handle := func(acts []Action) {
			for _, a := range acts {
				if f, ok := a.(FetchOrigin); ok && fetched < 0 {
					fetched = f.Piece
				}
			}
		}
		// Alone at first (n = 1), so the first fetch goes out and is
		// timed: spare needs the quickest fetch.
		handle(s.Step(TrackerPeers{SwarmSize: 1}, now))
		if budget != nil {
			handle(s.Step(*budget, now))
		}
		for fetched < 0 && now.Before(t0.Add(5*time.Second)) {
			now = now.Add(25 * time.Millisecond)
			handle(s.Step(Tick{}, now))
		}
		if fetched < 0 {
			t.Fatal("no origin fetch while alone")
		}
		now = now.Add(50 * time.Millisecond)
		s.Step(OriginResult{Piece: fetched, OK: true}, now)
		s.Step(TrackerPeers{SwarmSize: 1000}, now)
		before := s.stats
		// No answers from here on: a fetch in flight that does not come
		// back does not count against the origin (drainedOriginTime) for
		// these 2 s, so spare stays what the budget says.
		for range 80 {
			now = now.Add(25 * time.Millisecond)
			s.Step(Tick{}, now)
		}
		return s.stats.OriginSlicesWon - before.OriginSlicesWon, s.stats.OriginSlicesDrawn - before.OriginSlicesDrawn
	}
	if won, drawn := run(&OriginBudget{Left: 5 * size, Reset: 5 * time.Minute}); drawn < 4 || won != drawn {
		t.Errorf("budget with room, origin quick: held %d of %d slices, want all", won, drawn)
	}
	for _, c := range []struct {
		name   string
		budget *OriginBudget
	}{{"no budget told", nil}, {"half a copy left", &OriginBudget{Left: size / 2, Reset: 5 * time.Minute}}} {
		if won, drawn := run(c.budget); drawn < 4 || won > drawn/2 {
			t.Errorf("%s: held %d of %d slices, want about k/n = 0.3%%", c.name, won, drawn)
		}
	}
}
