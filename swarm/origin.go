package swarm

import (
	"slices"
	"time"
)

// The origin rule (Slurpie's coordinated backoff, plus START claims):
//
//   - Time is cut into slices of OriginSlice. At the start of each slice we
//     draw: we hold the origin for the slice with probability min(1, k/n),
//     n = max(the tracker's swarm size less the peers seen leaving since,
//     connected peers + 1) (swarmN), scaled down by 8·OriginSlice/d when
//     our origin fetches take d > 8·OriginSlice (they outlive the slice
//     they start in) and n > k. So about k peers of the swarm hold the
//     origin at any moment, and the fetches of at most about 8k are in
//     flight, however large n is and however slow the origin; a lone
//     downloader (n = 1) always holds it. The first draw waits for the
//     tracker's answer (or TrackerWait), so a flash crowd does not all
//     start with n = 1, and after the tracker's first real answer origin
//     use waits while we are still learning what the neighbours have (a
//     dial in progress, a HaveSet not yet in), for at most TrackerWait.
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
//     Alone (the tracker says n = 1) the pipeline opens by one piece per
//     fetch back, up to loneWindow times. Each FetchOrigin comes right
//     after its AnnounceStart and offers the origin other eligible pieces
//     (Candidates: the origin sends the one it has sent least; the piece
//     itself when it is the only one, so the origin can still refuse a
//     piece it sent another peer just now), and the piece is Announced as
//     soon as it is in, so the rest of the swarm gets it from us.
//   - While the origin has told of a budget with room left and its
//     fetches are quick (spare), every peer holds every slice, and a
//     holder whose peers have every piece it lacks fetches one nobody is
//     asked for (reason "spare").
//   - A piece peers have that has not come for StallAfter may be fetched
//     too (reason "stalled"), one at a time, still only in a slice we hold.
//   - A 503 stops all origin use for its Retry-After. An error stops it
//     for OriginBackoff, doubled by each failure after the pause up to
//     OriginBackoffMax, with jitter, and one fetch at a time tries the
//     origin until one succeeds (originFailed); the piece itself waits
//     one slice. An "in swarm"
//     503 (the origin sent the piece and the candidates to other peers
//     just now) keeps only those pieces off the origin, for its wait,
//     unless one becomes preferred.

func (s *Scheduler) useOrigin() {
	if s.pastDeadline() {
		s.fetchOverdue()
		return
	}
	if s.have.Complete() || !s.trackerKnown() {
		return
	}
	s.distrust()
	if !s.now.Before(s.nextSlice) {
		s.drawSlice()
	}
	if !s.holding || s.now.Before(s.busyUntil) || s.now.Before(s.originRetryAt) || s.settling() {
		return
	}
	// Peers first (Slurpie): while they still have pieces for us, half the
	// pipeline; the whole of it only once they have nothing more to give us.
	limit := s.originPipeline()
	if len(s.originReqs) < limit && !s.cfg.OriginHolder && !s.starved() {
		limit = max(1, limit/2)
	}
	if s.originFails > 0 || s.now.Sub(s.originHeardAt) >= max(s.cfg.OriginBackoffMax, 2*s.originTime) {
		// One fetch tries an origin that fails, or that we have not
		// heard from for long (OriginBackoffMax, or twice its usual
		// fetch time if slower): it may have died meanwhile, and a
		// whole window sent to a dead origin is that many connections
		// at once.
		limit = 1
	}
	for len(s.originReqs) < limit {
		i, reason, cands := s.pickOrigin()
		if i < 0 {
			return
		}
		s.fetchOrigin(i, reason, cands)
	}
}

// maxOriginCandidates bounds FetchOrigin.Candidates: a random sample of the
// eligible pieces is enough for the origin to find one it has not sent
// while the crowd still lacks many, and at the end the eligible pieces are
// few and all offered.
const maxOriginCandidates = 32

// originPipeline is the most origin fetches in flight: OriginWindow bytes,
// at least OriginPipeline pieces, plus loneExtra for a downloader alone in
// its swarm (n = 1): to the origin it is one client like any other, and
// its window alone has to keep the origin's link busy (with 256 KiB a lone
// get on loopback got 0.59 of curl's throughput for 100 MiB, with 1 MiB
// 0.83).
func (s *Scheduler) originPipeline() int {
	if s.cfg.OriginHolder {
		return s.cfg.OriginPipeline
	}
	w := max(s.cfg.OriginPipeline, int(float64(s.cfg.OriginWindow)/s.avgLen))
	if s.alone() {
		w += min(s.loneExtra, (loneWindow-1)*w)
	}
	return w
}

// alone reports whether the tracker says the swarm is just us and we know
// nobody (not merely that the tracker has not answered).
func (s *Scheduler) alone() bool {
	return s.swarmSize >= 1 && s.swarmN() == 1
}

// loneWindow bounds the origin window of a downloader alone in its swarm,
// in multiples of the crowd's. It opens by one piece per fetch that comes
// back while we are alone (slow start), so the first peers of a flash
// crowd, alone for the moment they wait on a busy origin, do not queue
// more at it than the rest, whose manifests wait behind it.
const loneWindow = 4

// settling reports whether we are still learning what the neighbours the
// tracker gave us when we joined have: within TrackerWait of its first
// answer, a dial in progress or a connection whose HaveSet has not come.
// The origin waits, since they may have what we would fetch; bounded, so
// dead addresses cannot keep us off the origin. Later answers (refill,
// repair) do not hold the origin: by then we know the swarm, and they are
// often stale (a straggler whose peers all left was kept off the origin
// for seconds dialling addresses that refused).
func (s *Scheduler) settling() bool {
	if !s.joined || s.now.Sub(s.joinedAt) >= s.cfg.TrackerWait {
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

// swarmN is n in the k/n draw: the tracker's swarm size less the peers
// we saw leave since, but at least us and the neighbours that delivered a
// piece to us, at most maxPerHost of them per host (s.credible). When a
// crowd finishes and leaves, a straggler's n falls with it, and it takes
// its last pieces from the origin at once rather than at the odds of a
// crowd that is gone. (Having no neighbours is not enough: peers that
// cannot reach each other must still share the origin k at a time.) A
// neighbour counts only on evidence: anyone can open connections under
// many peer IDs, and counted, 64 of them that never sent a piece held a
// lone downloader to the origin 3 slices in 65.
func (s *Scheduler) swarmN() int {
	return max(s.swarmSize-s.departed, s.credible+1, 1)
}

// originFetchTime is how long our origin fetches take: the smoothed time of
// those that finished, drained (see drainedOriginTime), or the age of the
// oldest in flight if larger (before the first one finishes, that is all
// we know).
func (s *Scheduler) originFetchTime() time.Duration {
	d := s.drainedOriginTime()
	for _, i := range s.originReqs {
		d = max(d, s.now.Sub(s.pieces[i].fetchAt))
	}
	return d
}

// drainedOriginTime is the smoothed origin fetch time less the time since
// it was last measured, but not below the quickest fetch we have had. A
// fetch time is the origin's own latency (the quickest fetch bounds it)
// plus its backlog, and a backlog drains at the origin's rate: one that
// took 10 s to get through is at most 3 s long 7 s later. Kept whole, a
// peer that fetches rarely (most of a crowd, since the draw scales down
// with it) would hold on to the backlog of a burst long after it drained;
// in a flash crowd of 50 the early burst's 8-10 s kept the whole swarm's
// draws low for the rest of the run, and the origin's link ran at about
// two thirds of its rate from 20 s to the end. An origin that is merely
// slow (every fetch 20 s) does not drain.
func (s *Scheduler) drainedOriginTime() time.Duration {
	if s.originTime == 0 {
		return 0
	}
	return max(s.originMin, s.originTime-s.now.Sub(s.originTimeAt))
}

// spare reports whether the origin has budget and time to spare: it told
// us of a budget (OriginBudget) with more than spareReserve of the file
// left in its window, and it is not saturated: our origin fetches take
// no longer than spareSlack times the quickest we have had (a saturated
// origin queues them). Then every peer holds the origin's slices
// (drawSlice), and a holder whose peers have every piece it lacks fetches
// what it would otherwise wait for from them (ReasonSpare; the origin
// does not pace these, origin/pace.go): in a crowd on slow uplinks (ADSL)
// or with an origin faster than its uplinks together, the origin's spare
// link shortens everyone's download, within the egress the operator
// allowed. An origin that is the bottleneck (a flash crowd's) is
// saturated, so nothing changes there; nor does it where the origin says
// nothing of a budget.
func (s *Scheduler) spare() bool {
	if s.budgetUntil.IsZero() || !s.now.Before(s.budgetUntil) || s.originMin <= 0 {
		return false
	}
	if float64(s.budgetLeft) < spareReserve*float64(s.cfg.NumPieces)*s.avgLen {
		return false
	}
	return s.drainedOriginTime() <= spareSlack*s.originMin
}

// spareReserve is the budget, in copies of the file, that spare fetches
// leave for pieces no peer has: a whole copy, so that with the default
// budget (1.5 copies, meant for a crowd whose bottleneck is the origin)
// there is nothing to spare once a crowd has been sent half a copy (in
// flash50 runs, half a copy's reserve let spare fetches take the origin
// from 1.01 to 1.04-1.05 copies); spareSlack is how much longer than our
// quickest our origin fetches may take for the origin to count as not
// saturated.
const (
	spareReserve = 1
	spareSlack   = 2
)

// pickSpare chooses a piece for a spare fetch: the rarest among those we
// lack that nobody is asked for (ours, at the origin or at a peer), and
// no START claims, at random among equals; -1 if none.
func (s *Scheduler) pickSpare() int {
	best, ties := -1, 0
	for i := s.have.NextMissing(0); i >= 0; i = s.have.NextMissing(i + 1) {
		ps := &s.pieces[i]
		if ps.origin || ps.reqs > 0 || s.now.Before(ps.retry) || s.now.Before(ps.inSwarm) || s.claimed(i) {
			continue
		}
		switch {
		case best < 0 || ps.avail < s.pieces[best].avail:
			best, ties = i, 1
		case ps.avail == s.pieces[best].avail:
			ties++
			if s.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// meanCapacity is the trimmed mean upload capacity of us and the
// neighbours that count, or 0 when fewer than two are known: seeds do
// not count, nor suspect or idle neighbours, and at most maxPerHost of a
// host; the highest and lowest quarter are left out, so a few liars
// claiming a huge uplink do not move it. Reciprocation measures a
// neighbour's upload against it (capacityOf).
func (s *Scheduler) meanCapacity() float64 {
	caps := s.capBuf[:0]
	if s.capacity > 0 {
		caps = append(caps, s.capacity)
	}
	perHost := map[string]int{}
	for _, p := range s.order {
		if p.capacity <= 0 || p.has.Complete() || s.suspect(p) || s.idle(p) || perHost[p.host] >= maxPerHost {
			continue
		}
		perHost[p.host]++
		caps = append(caps, p.capacity)
	}
	s.capBuf = caps
	if len(caps) < 2 {
		return 0
	}
	slices.Sort(caps)
	cut := len(caps) / 4
	sum := 0.0
	for _, c := range caps[cut : len(caps)-cut] {
		sum += c
	}
	return sum / float64(len(caps)-2*cut)
}

// originHold is how many slices' holders may have fetches in flight at
// once before the draw is scaled down (see drawSlice).
const originHold = 8

// drawSlice draws whether we hold the origin for the next slice, with
// odds k/n whatever our uplink, or 1 while the origin has budget and time
// to spare. Weighting the odds by our upload capacity
// over our neighbours' (a 1 Mbit/s uplink passes an origin piece on
// twenty times slower than a 20 Mbit/s one) was tried and taken out:
// with peers leaving when done, the fast peers then took the file at the
// origin's pace and left the slow ones 17-30% short of it, to finish from
// each other's uplinks (mixed on the testbed: 99.9, 110.8 and 141.4 s
// with it, 55.5 and 65.6 s without; docs/benchmarks.md, "Who gets the
// origin's pieces").
func (s *Scheduler) drawSlice() {
	p := min(1, float64(s.cfg.OriginK)/float64(s.swarmN()))
	// Fetches outlive the slice in which they start: with fetches taking
	// d > OriginSlice, the holders of d/OriginSlice slices have theirs in
	// flight at once. Up to originHold that is welcome (it keeps a
	// saturated origin's link busy: scaling from OriginSlice on cut the
	// testbed's origin to two thirds of its link, and from 4 slices on
	// left it idle a third of the time for seconds in a crowd of 50,
	// whose peers each time their fetches rarely, so the scaled-down
	// draw outlived the queue); beyond, scale the draw
	// down, so that a slower origin does not get ever more fetches at
	// once, which would make it slower still. With n <= k everyone may
	// hold the origin all the time anyway.
	if d, hold := s.originFetchTime(), originHold*s.cfg.OriginSlice; p < 1 && d > hold {
		p *= float64(hold) / float64(d)
	}
	// An origin with budget and time to spare (spare) is held by
	// everyone: it is then one more peer with room on its link, and the
	// swarm's uplinks are the bottleneck. Its fetch times (spare's
	// saturation check) and the budget's reserve bound what that takes.
	if s.spare() {
		p = 1
	}
	s.holding = s.cfg.OriginHolder || s.rng.Float64() < p
	s.sliceOdds = p
	if s.cfg.OriginHolder {
		s.sliceOdds = 1
	}
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
// first asked it is suspect (see suspect): a second, or the time a piece
// takes at suspectRate if longer (4 s for 2 MiB pieces), so an honest peer
// busy with large pieces is not taken for a staller.
const (
	suspectAfter = time.Second
	suspectRate  = 512 << 10 // bytes/s
)

func (s *Scheduler) suspectDelay() time.Duration {
	return max(suspectAfter, time.Duration(s.avgLen/suspectRate*float64(time.Second)))
}

// suspect reports whether p's have-set, and our requests to it, should
// not keep us off the origin: it timed out since its last delivery, it has
// never delivered and its oldest request is suspectAfter old, or it has
// been found failing us (distrust). A peer that advertises every piece and
// never delivers would otherwise hold the whole swarm off the origin until
// it is dropped, and again after every redial; one that keeps us choked or
// refuses every request as busy, with many peer IDs, for good.
func (s *Scheduler) suspect(p *peer) bool {
	if p.probation || p.distrusted {
		return true
	}
	return p.downTotal == 0 && len(p.reqs) > 0 && s.now.Sub(p.reqs[0].sent) >= s.suspectDelay()
}

// distrust marks the neighbours failing us: when no piece has come in for
// suspectDelay, from anyone, those that offer pieces we lack and have not
// delivered one since their have-set came at least that long ago
// (keeping us choked, refusing as busy, or never asked) no longer keep us
// off the origin, until they deliver (onReceived). Only while starved: an
// honest neighbour that chokes us while others deliver keeps its say, as
// the pieces it holds are likely on their way to us (counting every
// neighbour that had not delivered within a second as suspect made the
// simulated crowds fetch up to 30% more from the origin).
func (s *Scheduler) distrust() {
	d := s.suspectDelay()
	if s.now.Sub(s.lastProgress) < d {
		return
	}
	for _, p := range s.order {
		if !p.distrusted && p.downTotal == 0 && p.offers > 0 && p.gotSet && s.now.Sub(p.setAt) >= d {
			p.distrusted = true
			s.failed(p)
		}
	}
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

// askedOfTrusted reports whether piece i is requested of a connected peer
// that is not suspect.
func (s *Scheduler) askedOfTrusted(i int) bool {
	for _, p := range s.order {
		if !s.suspect(p) && p.findReq(i) >= 0 {
			return true
		}
	}
	return false
}

// pickOrigin chooses the next piece to fetch from the origin and why, or
// -1, and the other eligible pieces the origin may send instead (a sample
// of at most maxOriginCandidates; none for a stalled or preferred piece,
// which only that piece will do). When the piece is the only eligible one
// it is its own candidate, except as said below.
func (s *Scheduler) pickOrigin() (int, string, []int) {
	if s.stalledInUse == 0 && len(s.order) > 0 {
		for i := s.have.NextMissing(0); i >= 0; i = s.have.NextMissing(i + 1) {
			ps := &s.pieces[i]
			if ps.avail > 0 && !ps.origin && !ps.firstReq.IsZero() &&
				s.now.Sub(ps.firstReq) >= s.cfg.StallAfter && !s.claimed(i) {
				return i, ReasonStalled, nil
			}
		}
	}
	// Preferred pieces first (lowest first), then lost fetches, then any
	// eligible piece at random: holders that do not see each other's START
	// claims rarely pick the same piece.
	best, bestTier, ties := -1, 0, 0
	eligible := 0
	cands := s.candBuf[:0]
	suspects := slices.ContainsFunc(s.order, s.suspect) // else avail says it all
	for i := s.have.NextMissing(0); i >= 0; i = s.have.NextMissing(i + 1) {
		ps := &s.pieces[i]
		if ps.origin || s.now.Before(ps.retry) || s.claimed(i) ||
			(ps.reqs > 0 && (!suspects || s.askedOfTrusted(i))) || (ps.avail > 0 && (!suspects || s.heldByTrusted(i))) {
			continue
		}
		// A piece the origin sent others just now waits for the swarm,
		// unless it is needed now (a preferred fetch offers no
		// candidates, so the origin does not refuse it).
		if s.now.Before(ps.inSwarm) && !s.preferred(i) {
			continue
		}
		// A uniform sample of the eligible pieces (reservoir), the
		// chosen one among them; it is taken out below.
		if eligible++; len(cands) < maxOriginCandidates+1 {
			cands = append(cands, i)
		} else if k := s.rng.IntN(eligible); k < len(cands) {
			cands[k] = i
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
	if best < 0 && s.spare() {
		if i := s.pickSpare(); i >= 0 {
			s.candBuf = cands
			return i, ReasonSpare, nil
		}
	}
	reason := ReasonNoPeerHasIt
	switch {
	case best >= 0 && s.pieces[best].avail > 0:
		reason = ReasonPeersFail
	case len(s.order) == 0 && s.dialing == 0:
		reason = ReasonNoPeers
	}
	s.candBuf = cands
	if best < 0 || bestTier < 0 || (s.small && (reason == ReasonNoPeers || s.pieces[best].leftToSwarm)) {
		// A small object's lone downloader offers nothing either: it
		// leaves as soon as it has the object, so what the origin sends
		// it is not on its way through any swarm; nor a piece the origin
		// left to a swarm that none of our neighbours has or claims a
		// slice later: it left with a pool that is gone (small.go).
		return best, reason, nil
	}
	out := make([]int, 0, len(cands))
	for _, c := range cands {
		if c != best && len(out) < maxOriginCandidates {
			out = append(out, c)
		}
	}
	if len(out) == 0 && reason != ReasonNoPeers && !s.pieces[best].failed {
		// The only eligible piece is offered as its own candidate, so
		// the origin knows the request for a swarm fetch and refuses it
		// if it sent the piece to another peer just now ("in swarm"):
		// at the end of a flash crowd the last pieces are the ones that
		// two peers that do not see each other both fetch. Not without
		// peers (no swarm to leave it to), nor on a retry after a fetch
		// of ours failed: the origin cannot tell our own send (a corrupt
		// body, one cut off by our idle timeout) from another peer's.
		out = append(out, best)
	}
	slices.Sort(out)
	return best, reason, out
}

func (s *Scheduler) fetchOrigin(i int, reason string, cands []int) {
	ps := &s.pieces[i]
	ps.origin, ps.stalled, ps.restart = true, reason == ReasonStalled, false
	ps.fetchAt = s.now
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
	s.emit(FetchOrigin{Piece: i, Reason: reason, Candidates: cands, Odds: s.sliceOdds})
}

func (s *Scheduler) onOriginResult(e OriginResult) {
	if !s.valid(e.Piece) {
		s.stats.Invalid++
		return
	}
	ps := &s.pieces[e.Piece]
	if ps.origin {
		ps.origin = false
		if e.OK {
			d := s.now.Sub(ps.fetchAt)
			// Smoothed while the last measure still holds; once it has
			// drained away, this one is all we know.
			if prior := s.drainedOriginTime(); prior <= s.originMin {
				s.originTime = d
			} else {
				s.originTime = prior + (d-prior)/4
			}
			s.originTimeAt = s.now
			if s.originMin == 0 || d < s.originMin {
				s.originMin = d
			}
		}
		s.originReqs = slices.DeleteFunc(s.originReqs, func(j int) bool { return j == e.Piece })
		if ps.stalled {
			ps.stalled = false
			s.stalledInUse--
		}
	}
	if e.OK || e.Busy > 0 || e.InSwarm > 0 {
		s.originFails, s.originHeardAt = 0, s.now // it answers
	}
	switch {
	case e.OK && s.alone():
		s.loneExtra++
	case !s.alone() || e.Busy > 0:
		s.loneExtra = 0 // company, or an origin that says slow down: start over
	}
	switch {
	case e.OK && e.Picked:
		// The origin sent another of the candidates: store it, and free
		// the piece asked (its START is withdrawn) for anyone to fetch.
		s.stats.OriginOK++
		s.stats.OriginPicked++
		if ps.reqs == 0 && !s.have.Has(e.Piece) {
			s.gen++
			s.lapsed = append(s.lapsed, e.Piece)
		}
		if !s.valid(e.Got) {
			s.stats.Invalid++
			return
		}
		s.addPiece(e.Got)
		return
	case e.OK:
		s.stats.OriginOK++
		s.addPiece(e.Piece)
		return
	case e.InSwarm > 0:
		// Left to the swarm: the peers the origin sent them to pass
		// them on. Retried if they have not come by then.
		s.stats.OriginInSwarm++
		until := s.now.Add(s.inSwarmWait(e.InSwarm))
		for _, j := range append([]int{e.Piece}, e.Candidates...) {
			if s.valid(j) && until.After(s.pieces[j].inSwarm) {
				s.pieces[j].inSwarm = until
				s.pieces[j].leftToSwarm = s.small
			}
		}
	case e.Busy > 0:
		s.stats.OriginBusy++
		if until := s.now.Add(e.Busy); until.After(s.busyUntil) {
			s.busyUntil = until
		}
	default:
		s.stats.OriginErrors++
		ps.retry = s.now.Add(s.cfg.OriginSlice)
		ps.failed = true
		s.originFailed(ps.fetchAt)
	}
	if ps.reqs == 0 && !s.have.Has(e.Piece) {
		ps.restart = true
		s.gen++
		s.lapsed = append(s.lapsed, e.Piece)
	}
}

// originFailed pauses all origin use after a failed fetch that started at
// since: the origin, not the piece, is what failed (a dead origin got
// about 1,160 connection attempts a second from one download when only
// the piece waited a slice, each failure freeing the window for the next
// piece). Fetches already in flight when an earlier failure came fail
// with it and do not count again; one that started after it does, and
// doubles the pause. The pause is drawn between half and all of its
// length, so that a crowd whose origin comes back does not return all at
// once; the k/n draw still spreads the holders over slices on top.
func (s *Scheduler) originFailed(since time.Time) {
	if s.originFails > 0 && since.Before(s.originFailAt) {
		return
	}
	s.originFails++
	s.originFailAt = s.now
	// OriginBackoff doubled per failure in a row, up to OriginBackoffMax,
	// shifted only where it cannot overflow.
	d := s.cfg.OriginBackoffMax
	if shift := min(s.originFails-1, 16); s.cfg.OriginBackoff <= d>>shift {
		d = s.cfg.OriginBackoff << shift
	}
	d = max(d, 1)
	d = d/2 + time.Duration(s.rng.Int64N(int64(d/2)+1))
	s.originRetryAt = s.now.Add(d)
	s.stats.OriginBackoffs++
}
