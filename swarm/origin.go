package swarm

import (
	"slices"
	"time"
)

// The origin rule (Slurpie's coordinated backoff, plus START claims):
//
//   - Time is cut into slices of OriginSlice. At the start of each slice we
//     draw: we hold the origin for the slice with probability min(1, k/n),
//     n = max(the tracker's swarm size, connected peers + 1). So about k
//     peers of the swarm hold it at any moment, however large n is; a lone
//     downloader (n = 1) always does. The first draw waits for the tracker's
//     answer (or TrackerWait), so a flash crowd does not all start with
//     n = 1, and after each tracker answer origin use waits while we are
//     still learning what the new neighbours have (a dial in progress, a
//     HaveSet not yet in), for at most TrackerWait.
//   - Holding a slice, we fetch only pieces no connected peer has, nobody
//     claims with START, and we are not fetching already. Peers come first
//     (Slurpie): while they still have pieces for us we keep half the
//     origin pipeline in flight, and all of it only once they have nothing
//     more to give us (every piece they have that we lack is on its way).
//     The pipeline is OriginWindow bytes (at least OriginPipeline pieces),
//     so that about k holders keep the origin's link busy whatever the
//     piece size. A holder busy with its peers thus still moves new pieces
//     into the swarm, but speculates half as much on pieces that may
//     already be in it out of our sight.
//     Each FetchOrigin comes right after its AnnounceStart, and the piece is
//     Announced as soon as it is in, so the rest of the swarm gets it from
//     us.
//   - A piece peers have that has not come for StallAfter may be fetched
//     too (reason "stalled"), one at a time, still only in a slice we hold.
//   - A 503 stops all origin use for its Retry-After; an error makes the
//     piece wait one slice before it may be fetched again.

func (s *Scheduler) useOrigin() {
	if s.have.Complete() || !s.trackerKnown() {
		return
	}
	if !s.now.Before(s.nextSlice) {
		s.drawSlice()
	}
	if !s.holding || s.now.Before(s.busyUntil) || s.settling() {
		return
	}
	// Peers first (Slurpie): while they still have pieces for us, half the
	// pipeline; the whole of it only once they have nothing more to give us.
	limit := s.originPipeline()
	if len(s.originReqs) < limit && !s.starved() {
		limit = max(1, limit/2)
	}
	for len(s.originReqs) < limit {
		i, reason := s.pickOrigin()
		if i < 0 {
			return
		}
		s.fetchOrigin(i, reason)
	}
}

// originPipeline is the most origin fetches in flight: OriginWindow bytes,
// at least OriginPipeline pieces.
func (s *Scheduler) originPipeline() int {
	return max(s.cfg.OriginPipeline, int(float64(s.cfg.OriginWindow)/s.avgLen))
}

// settling reports whether we are still learning what the neighbours the
// tracker just gave us have: within TrackerWait of its answer, a dial in
// progress or a connection whose HaveSet has not come. The origin waits,
// since they may have what we would fetch; bounded, so dead addresses
// cannot keep us off the origin.
func (s *Scheduler) settling() bool {
	if !s.trackerAnswered || s.now.Sub(s.trackerAt) >= s.cfg.TrackerWait {
		return false
	}
	if s.dialing > 0 {
		return true
	}
	for _, p := range s.order {
		if !p.gotSet {
			return true
		}
	}
	return false
}

// swarmN is n in the k/n draw.
func (s *Scheduler) swarmN() int {
	return max(s.swarmSize, len(s.order)+1, 1)
}

func (s *Scheduler) drawSlice() {
	p := min(1, float64(s.cfg.OriginK)/float64(s.swarmN()))
	s.holding = s.rng.Float64() < p
	s.sliceUsed = false
	s.stats.OriginSlicesDrawn++
	if s.holding {
		s.stats.OriginSlicesWon++
	}
	if s.nextSlice.IsZero() || s.now.Sub(s.nextSlice) >= s.cfg.OriginSlice {
		s.nextSlice = s.now.Add(s.cfg.OriginSlice)
	} else {
		s.nextSlice = s.nextSlice.Add(s.cfg.OriginSlice)
	}
}

// suspectAfter: a peer that has not delivered anything this long after we
// first asked it is suspect (see suspect).
const suspectAfter = time.Second

// suspect reports whether p's have-set should not keep us off the origin:
// it timed out since its last delivery, or it has never delivered and its
// oldest request is suspectAfter old. A peer that advertises every piece
// and never delivers would otherwise hold the whole swarm off the origin
// until it is dropped, and again after every redial.
func (s *Scheduler) suspect(p *peer) bool {
	if p.probation {
		return true
	}
	return p.downTotal == 0 && len(p.reqs) > 0 && s.now.Sub(p.reqs[0].sent) >= suspectAfter
}

// heldByTrusted reports whether a connected peer that is not suspect has
// piece i.
func (s *Scheduler) heldByTrusted(i int) bool {
	for _, p := range s.order {
		if p.has.Has(i) && !s.suspect(p) {
			return true
		}
	}
	return false
}

// pickOrigin chooses the next piece to fetch from the origin and why, or -1.
func (s *Scheduler) pickOrigin() (int, string) {
	if s.stalledInUse == 0 && len(s.order) > 0 {
		for i := s.have.NextMissing(0); i >= 0; i = s.have.NextMissing(i + 1) {
			ps := &s.pieces[i]
			if ps.avail > 0 && !ps.origin && !ps.firstReq.IsZero() &&
				s.now.Sub(ps.firstReq) >= s.cfg.StallAfter && !s.claimed(i) {
				return i, ReasonStalled
			}
		}
	}
	// Preferred pieces first (lowest first), then lost fetches, then any
	// eligible piece at random: holders that do not see each other's START
	// claims rarely pick the same piece.
	best, bestTier, ties := -1, 0, 0
	for i := s.have.NextMissing(0); i >= 0; i = s.have.NextMissing(i + 1) {
		ps := &s.pieces[i]
		if ps.reqs > 0 || ps.origin || s.now.Before(ps.retry) || s.claimed(i) || (ps.avail > 0 && s.heldByTrusted(i)) {
			continue
		}
		tier := 1
		switch {
		case s.preferred(i):
			tier = -1
			if best >= 0 && bestTier == -1 {
				continue // the lowest preferred piece wins
			}
		case ps.restart:
			tier = 0
		}
		switch {
		case best < 0 || tier < bestTier:
			best, bestTier, ties = i, tier, 1
		case tier == bestTier:
			ties++
			if s.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	reason := ReasonNoPeerHasIt
	switch {
	case best >= 0 && s.pieces[best].avail > 0:
		reason = ReasonPeersFail
	case len(s.order) == 0 && s.dialing == 0:
		reason = ReasonNoPeers
	}
	return best, reason
}

func (s *Scheduler) fetchOrigin(i int, reason string) {
	ps := &s.pieces[i]
	ps.origin, ps.stalled, ps.restart = true, reason == ReasonStalled, false
	if ps.firstReq.IsZero() {
		ps.firstReq = s.now
	}
	s.originReqs = append(s.originReqs, i)
	if ps.stalled {
		s.stalledInUse++
	}
	if !s.sliceUsed {
		s.sliceUsed = true
		s.stats.OriginSlicesUsed++
	}
	s.stats.OriginFetches[reason]++
	s.announceStart(i)
	s.emit(FetchOrigin{Piece: i, Reason: reason})
}

func (s *Scheduler) onOriginResult(e OriginResult) {
	if !s.valid(e.Piece) {
		s.stats.Invalid++
		return
	}
	ps := &s.pieces[e.Piece]
	if ps.origin {
		ps.origin = false
		s.originReqs = slices.DeleteFunc(s.originReqs, func(j int) bool { return j == e.Piece })
		if ps.stalled {
			ps.stalled = false
			s.stalledInUse--
		}
	}
	switch {
	case e.OK:
		s.stats.OriginOK++
		s.addPiece(e.Piece)
		return
	case e.Busy > 0:
		s.stats.OriginBusy++
		if until := s.now.Add(e.Busy); until.After(s.busyUntil) {
			s.busyUntil = until
		}
	default:
		s.stats.OriginErrors++
		ps.retry = s.now.Add(s.cfg.OriginSlice)
	}
	if ps.reqs == 0 && !s.have.Has(e.Piece) {
		ps.restart = true
		s.gen++
		s.lapsed = append(s.lapsed, e.Piece)
	}
}
