package swarm

import (
	"slices"
	"time"
)

// rejectBackoff is how long a peer that refused for lack of resources
// (tab, unknown reason) gets no new request; busyBackoff, one whose upload
// queue was full: it still sends what it accepted, and the queue drains in
// well under a second, so a longer pause would idle a sole holder's link.
const (
	rejectBackoff = time.Second
	busyBackoff   = 100 * time.Millisecond
)

// maxAvoid is how many pieces a peer remembers having failed.
const maxAvoid = 16

// canAsk reports whether p can take a request now.
func (s *Scheduler) canAsk(p *peer) bool {
	return p.unchokedUs && p.offers > 0 && !s.now.Before(p.backoffUntil)
}

// fillRequests tops every peer's pipeline up to its depth, and an untested
// peer's as far as its host's probes allow (mayProbe). Peers on probation
// go last, so pieces taken back from a stalled peer go to the others
// first. A peer for which pick found nothing is not scanned again
// until a piece is freed (s.gen) or it announces more (pickFailed reset).
func (s *Scheduler) fillRequests() {
	if s.have.Complete() {
		return
	}
	endgame := -1
	for pass := range 2 {
		for _, p := range s.order {
			if p.probation != (pass == 1) || !s.canAsk(p) {
				continue
			}
			for len(p.reqs) < s.depth(p) && s.mayProbe(p) {
				i := -1
				if p.pickFailed != s.gen {
					if i = s.pick(p); i < 0 {
						p.pickFailed = s.gen
					}
				}
				if i < 0 {
					if endgame < 0 {
						endgame = 0
						if s.allInFlight() {
							endgame = 1
						}
					}
					if endgame == 1 {
						i = s.pickEndgame(p)
					}
				}
				if i < 0 {
					break
				}
				s.request(p, i)
			}
		}
	}
}

// pick chooses the next piece to ask p for among those it has, nobody is
// fetching, and we lack. In order of preference: pieces in the Prefer range,
// lowest first (a streaming reader waits for them); pieces that were in
// flight and were lost (finish what was started); pieces no other peer has
// claimed with START; claimed ones; pieces p itself failed to deliver
// lately. Within a tier the rarest among our peers, ties at random.
func (s *Scheduler) pick(p *peer) int {
	best, bestTier, bestAvail, ties := -1, 0, 0, 0
	for i := p.has.Next(0); i >= 0; i = p.has.Next(i + 1) {
		if s.have.Has(i) { // first: it reads no piece state
			continue
		}
		ps := &s.pieces[i]
		if ps.reqs > 0 || ps.origin {
			continue
		}
		tier := 1
		switch {
		case slices.Contains(p.avoid, i):
			tier = 3
		case s.preferred(i):
			if best < 0 || bestTier >= 0 {
				best, bestTier, ties = i, -1, 1 // the lowest preferred piece wins
			}
			continue
		case ps.restart:
			tier = 0
		case s.claimed(i):
			tier = 2
		}
		switch {
		case best < 0 || tier < bestTier || (tier == bestTier && ps.avail < bestAvail):
			best, bestTier, bestAvail, ties = i, tier, ps.avail, 1
		case tier == bestTier && ps.avail == bestAvail:
			ties++
			if s.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// starved reports whether no peer we may ask has a piece we lack that is
// not already on its way: Slurpie's condition that the peers have nothing
// more to give us. Like a full pipeline, a host's probes all out do not
// count: those peers will be asked next.
func (s *Scheduler) starved() bool {
	for _, p := range s.order {
		if !s.canAsk(p) {
			continue
		}
		for i := p.has.Next(0); i >= 0; i = p.has.Next(i + 1) {
			ps := &s.pieces[i]
			if ps.reqs == 0 && !ps.origin && !s.have.Has(i) {
				return false
			}
		}
	}
	return true
}

// allInFlight reports whether every missing piece is on its way (from a peer
// or the origin): the endgame.
func (s *Scheduler) allInFlight() bool {
	for i := s.have.NextMissing(0); i >= 0; i = s.have.NextMissing(i + 1) {
		if ps := &s.pieces[i]; ps.reqs == 0 && !ps.origin {
			return false
		}
	}
	return true
}

// pickEndgame chooses a piece already in flight elsewhere to ask p for too:
// the one with fewest requests (at most EndgameMax in all), ties at random.
func (s *Scheduler) pickEndgame(p *peer) int {
	best, bestN, ties := -1, 0, 0
	for i := p.has.Next(0); i >= 0; i = p.has.Next(i + 1) {
		if s.have.Has(i) || p.findReq(i) >= 0 || slices.Contains(p.avoid, i) {
			continue
		}
		ps := &s.pieces[i]
		n := ps.reqs
		if ps.origin {
			n++
		}
		if n >= s.cfg.EndgameMax {
			continue
		}
		switch {
		case best < 0 || n < bestN:
			best, bestN, ties = i, n, 1
		case n == bestN:
			ties++
			if s.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

func (s *Scheduler) request(p *peer, i int) {
	ahead := len(p.reqs)
	p.reqs = append(p.reqs, outReq{piece: i, sent: s.now, ahead: ahead})
	if h := s.hosts[p.host]; h != nil && p.untested() {
		h.probes++
	}
	ps := &s.pieces[i]
	ps.reqs++
	ps.restart = false
	if ps.firstReq.IsZero() {
		ps.firstReq = s.now
	}
	if !s.cfg.QuietRequests && ps.reqs == 1 && !ps.origin && s.mayClaim(p) && s.now.Sub(ps.started) >= s.cfg.StartTimeout/2 {
		s.announceStart(i)
	}
	s.stats.Requests++
	s.emit(Request{Peer: p.id, Piece: i})
}

func (s *Scheduler) announceStart(i int) {
	s.pieces[i].started = s.now
	s.emit(AnnounceStart{Piece: i})
}

// reannounce renews our START claims on pieces still in flight before the
// other peers' copies of them expire, and withdraws those on pieces asked
// only of peers that may not claim (see mayClaim, withdraw).
func (s *Scheduler) reannounce() {
	renew := func(i int) {
		if ps := &s.pieces[i]; s.now.Sub(ps.started) >= s.cfg.StartTimeout/2 {
			s.announceStart(i)
		}
	}
	for _, i := range s.originReqs {
		renew(i)
	}
	if s.cfg.QuietRequests {
		return
	}
	for _, p := range s.order {
		for _, r := range p.reqs {
			if !s.mayClaim(p) {
				s.lapsed = append(s.lapsed, r.piece)
			} else {
				renew(r.piece)
			}
		}
	}
}

// dropReq forgets p's k-th request; a piece left with nothing in flight is
// marked to be finished first.
func (s *Scheduler) dropReq(p *peer, k int) {
	i := p.reqs[k].piece
	p.reqs = slices.Delete(p.reqs, k, k+1)
	if h := s.hosts[p.host]; h != nil && p.untested() {
		h.probes--
	}
	ps := &s.pieces[i]
	ps.reqs--
	if ps.reqs == 0 && !ps.origin && !s.have.Has(i) {
		ps.restart = true
		s.gen++
		s.lapsed = append(s.lapsed, i)
	}
}

func (p *peer) avoidPiece(i int) {
	if len(p.avoid) == maxAvoid {
		p.avoid = p.avoid[1:]
	}
	p.avoid = append(p.avoid, i)
}

// timeoutsEvery is the most often checkTimeouts runs.
const timeoutsEvery = 50 * time.Millisecond

// checkTimeouts takes back every request of a peer that missed a deadline:
// a peer that is late on one is likely stalled, and its other requests
// should go elsewhere now rather than one deadline at a time. It is then on
// probation (depth 1) until it delivers, and is dropped after Strikes
// timeouts in a row.
//
// It runs every timeoutsEvery at most, not on every step: a crowd's peer
// steps hundreds of times a second (each burst of HAVEs is one), and the
// check, which weighs every request of every peer against the peers'
// median piece time, was 4% of all the CPU of a flash50 run on the
// testbed, whose two cores the run saturates. A deadline is missed by
// timeoutsEvery at most (a tenth of the default MinRequestTimeout).
func (s *Scheduler) checkTimeouts() {
	typical := time.Duration(-1)
	for _, p := range slices.Clone(s.order) {
		if len(p.reqs) == 0 {
			continue
		}
		if typical < 0 {
			typical = s.typicalPieceTime()
		}
		// A request's clock runs from when it was sent or, if later, from
		// the peer's last delivery to us, with the requests still before
		// it queued: a peer that keeps delivering is busy, not stalled,
		// whatever it serves others in between. Taking its requests back
		// would only have them sent twice (a piece it already started
		// arrives all the same).
		late := -1
		for k, r := range p.reqs {
			start, ahead := r.sent, r.ahead
			if p.lastRecv.After(start) {
				start, ahead = p.lastRecv, k
			}
			if s.now.Sub(start) >= s.timeout(p, ahead, typical) {
				late = k
				break
			}
		}
		if late < 0 {
			continue
		}
		s.stats.Timeouts++
		if p.untested() {
			// It never delivered: its host's next peers start
			// distrusted (they do not keep us off the origin), and
			// requests to them claim nothing (mayClaim).
			s.failed(p)
			s.hosts[p.host].stalled = true
		}
		p.avoidPiece(p.reqs[late].piece)
		for len(p.reqs) > 0 {
			s.emit(Cancel{Peer: p.id, Piece: p.reqs[0].piece, Timeout: true})
			s.stats.Cancels++
			s.dropReq(p, 0)
		}
		p.timeouts++
		p.probation = true
		p.rate /= 2
		if p.timeouts >= s.cfg.Strikes {
			s.disconnect(p, "stalled", false)
		}
	}
}

func (s *Scheduler) onReceived(e Received) {
	if !s.valid(e.Piece) {
		s.stats.Invalid++
		return
	}
	b := e.Bytes
	if b <= 0 {
		b = s.pieceLen(e.Piece)
	}
	s.stats.BytesDown += b
	if p := s.peers[e.Peer]; p != nil {
		if k := p.findReq(e.Piece); k >= 0 {
			p.sample(p.reqs[k], b, s.now)
			s.dropReq(p, k)
		} else {
			s.stats.Unrequested++
		}
		p.lastRecv = s.now
		p.timeouts, p.probation, p.distrusted, p.avoid = 0, false, false, nil
		if h := s.hosts[p.host]; h != nil {
			h.failing, h.stalled = false, false
			if p.untested() {
				s.setDelivered(h, h.delivered+1)
				h.probes -= len(p.reqs) // no longer probes
			}
		}
		p.downTotal += b
		p.down.add(s.now, b)
		s.traded(p.addr)
		if a := s.addrs[p.addr]; a != nil {
			a.failures, a.failedUs = 0, false // it delivers: forgive the past
		}
	}
	if s.have.Has(e.Piece) {
		s.stats.Duplicates++
		return
	}
	s.stats.Received++
	s.addPiece(e.Piece)
}

func (s *Scheduler) onRejected(e Rejected) {
	p := s.peers[e.Peer]
	if p == nil || !s.valid(e.Piece) {
		return
	}
	k := p.findReq(e.Piece)
	if k < 0 {
		return
	}
	s.stats.Rejects++
	s.dropReq(p, k)
	switch e.Reason {
	case RejectChoked:
		// It will send Choked too; stop asking until it unchokes us.
		s.voidAll(p)
		p.unchokedUs = false
	case RejectDontHave:
		if p.has.Remove(e.Piece) {
			s.lose(e.Piece)
			p.offers--
		}
		p.lies++
		if p.lies >= s.cfg.Strikes {
			s.disconnect(p, "dont-have", false)
		}
	case RejectBusy:
		p.avoidPiece(e.Piece)
		p.backoffUntil = later(p.backoffUntil, s.now.Add(busyBackoff))
	default:
		p.avoidPiece(e.Piece)
		p.backoffUntil = later(p.backoffUntil, s.now.Add(rejectBackoff))
	}
}

func (s *Scheduler) onChoked(e Choked) {
	if p := s.peers[e.Peer]; p != nil {
		p.unchokedUs = false
		s.voidAll(p)
	}
}

// voidAll forgets p's requests without cancelling them: a peer that chokes
// us has discarded them.
func (s *Scheduler) voidAll(p *peer) {
	for len(p.reqs) > 0 {
		s.dropReq(p, len(p.reqs)-1)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
