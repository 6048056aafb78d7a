package swarm

import (
	"cmp"
	"slices"
)

// Reciprocation. Every ChokeInterval a round picks whom to serve among the
// peers interested in us (they lack a piece we have):
//
//   - while downloading, the UploadSlots peers that sent us the largest
//     share of their uplink over the last RateWindow (tit-for-tat, by
//     share: see capacityOf), half of them instead by need where the crowd
//     has a slow class (needFirst); once complete, the ones we sent most
//     to (the fastest downloaders);
//   - plus OptimisticSlots more, rotated every OptimisticInterval, taken
//     from those unchoked longest ago (never first), so newcomers and slow
//     peers get their turn; but with two or more, the first goes, every
//     round, to a peer with fewer pieces than the median interested peer
//     (catchUp), so that one that fell behind catches up;
//   - when there are no more interested peers than slots, all of them.
//
// Between rounds, a slot that frees up (an unchoked peer lost interest or
// left) goes at once to the interested peer waiting longest, so spare upload
// capacity is never idle. Under StrictTFT (while downloading) every
// interested peer is unchoked and the tab decides each request instead.

// interested reports whether p lacks a piece we have. Until its HaveSet
// arrives we do not know (for at most TrackerWait, in case the runtime
// sends none for an empty peer).
func (s *Scheduler) interested(p *peer) bool {
	return p.wants > 0 && (p.gotSet || s.now.Sub(p.upAt) >= s.cfg.TrackerWait)
}

func (s *Scheduler) slots() int { return s.cfg.UploadSlots + s.cfg.OptimisticSlots }

func (s *Scheduler) strict() bool { return s.cfg.StrictTFT && !s.have.Complete() }

// openAll reports whether every interested peer is unchoked: under
// strict tit-for-tat (the tab decides each request instead), and for a
// small object (small.go), whose whole download is a burst or two: a
// neighbour kept waiting for a slot's rotation would wait longer than
// the download takes, and the upload turns still bound what goes out at
// once.
func (s *Scheduler) openAll() bool { return s.strict() || s.small }

func (s *Scheduler) reciprocate() {
	if s.now.Before(s.nextChoke) {
		s.fillSlots()
		return
	}
	s.nextChoke = s.now.Add(s.cfg.ChokeInterval)
	var cands []*peer
	for _, p := range s.order {
		if s.interested(p) {
			cands = append(cands, p)
		}
	}
	chosen := make(map[PeerID]bool, len(cands))
	var catching *peer // has the catch-up slot this round
	optimistic := make(map[PeerID]bool)
	if s.openAll() || len(cands) <= s.slots() {
		for _, p := range cands {
			chosen[p.id] = true
		}
	} else {
		// Shuffle first so equal rates (often all zero at the start) are
		// broken at random, then rank.
		s.rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		seeding := s.have.Complete()
		mean := s.meanCapacity()
		score := func(p *peer) float64 {
			if seeding {
				return float64(p.up.sum(s.now))
			}
			return float64(p.down.sum(s.now)) / s.capacityOf(p, mean)
		}
		slices.SortStableFunc(cands, func(a, b *peer) int { return cmp.Compare(score(b), score(a)) })
		if !seeding {
			s.needFirst(cands[s.cfg.UploadSlots-s.cfg.UploadSlots/2:], mean)
		}
		for _, p := range cands[:s.cfg.UploadSlots] {
			chosen[p.id] = true
		}
		rest := slices.Clone(cands[s.cfg.UploadSlots:])
		opt := s.cfg.OptimisticSlots
		if opt >= 2 { // one slot at least keeps rotating
			if k := s.catchUp(cands, rest); k >= 0 {
				catching = rest[k]
				chosen[catching.id] = true
				rest = slices.Delete(rest, k, k+1)
				opt--
			}
		}
		if rotate := !s.now.Before(s.nextOptimistic); rotate {
			s.nextOptimistic = s.now.Add(s.cfg.OptimisticInterval)
		} else {
			for _, p := range rest {
				if p.optimistic && len(optimistic) < opt {
					optimistic[p.id] = true
				}
			}
		}
		slices.SortStableFunc(rest, s.longestWaiting)
		for _, p := range rest {
			if len(optimistic) < opt {
				optimistic[p.id] = true
			}
		}
		for id := range optimistic {
			chosen[id] = true
		}
	}
	for _, p := range s.order {
		p.optimistic = optimistic[p.id]
		p.catchingUp = p == catching
		switch {
		case chosen[p.id] && p.amChoking:
			s.unchoke(p)
		case chosen[p.id]:
			p.lastUnchoked = s.now
		case !p.amChoking:
			p.amChoking = true
			s.emit(Choke{Peer: p.id})
		}
	}
}

// needFirst orders the candidates past the first half of the regular
// slots by need, where the crowd has a slow class: the neighbours on a
// slow uplink (slowUplink: under half the mean of the neighbours' told
// capacities, mean) lacking the most of what we have first, or every
// neighbour by need when our own uplink is slow, or not known yet.
//
// So while we download in a mixed crowd, half the regular slots go by
// reciprocation and half to the slow neighbours furthest behind us.
// Reciprocation alone, by share of uplink, let the fast peers of a mixed
// crowd trade mostly among themselves: they finished and left with the
// slow ones at half the file, whose last pieces then came over 1 Mbit/s
// uplinks. A slow peer gives its need slots to whoever lacks most, mostly
// the other slow peers, which its uplink serves about as fast as any.
//
// In a crowd of equals nobody is slow and the order is reciprocation's:
// need there sends half the uplinks to the peers furthest behind, whose
// own uplinks then hold little the others lack, and delays the crowd's
// last peer by about 5 %. docs/benchmarks.md, "Mixed crowds" and "Need
// where the crowd has a slow class", has the matrices.
func (s *Scheduler) needFirst(cands []*peer, mean float64) {
	weSlow := slowUplink(s.capacity, mean)
	needy := func(p *peer) bool { return weSlow || slowUplink(p.capacity, mean) }
	slices.SortStableFunc(cands, func(a, b *peer) int {
		switch na, nb := needy(a), needy(b); {
		case na && nb:
			return cmp.Compare(b.wants, a.wants)
		case na:
			return -1
		case nb:
			return 1
		}
		return 0
	})
}

// slowUplink reports whether an uplink of c bytes/s (0: not told) is slow
// beside mean, the neighbours' trimmed mean (0: fewer than two known):
// under half of it. An uplink not known yet counts as slow, and so does
// every uplink before mean is known, so that need orders the slots from
// the first round, before any capacity has been measured.
func slowUplink(c, mean float64) bool {
	return mean <= 0 || c <= 0 || c < mean/2
}

// capacityOf is what p's upload is measured against in reciprocation: its
// capacity as it told us (RATE), at least a sixteenth of mean (the
// neighbours' trimmed mean, see meanCapacity), or mean when it told none;
// 1 when nobody's is known, and the rates count as they are. A regular
// slot goes to the neighbours that give us the largest share of their
// uplink, not the most bytes: in a crowd of 20 and 1 Mbit/s uplinks plain
// tit-for-tat kept the fast peers trading among themselves, and the slow
// ones, which can give no more than 1 Mbit/s however willing, got half the
// file by the time the fast ones had all of it and left. With equal
// uplinks the order is tit-for-tat's.
func (s *Scheduler) capacityOf(p *peer, mean float64) float64 {
	switch {
	case mean <= 0:
		return 1
	case p.capacity <= 0:
		return mean
	}
	return max(p.capacity, mean/16)
}

// catchUp returns the index in rest (the candidates the regular slots left
// out) of the peer the first optimistic slot goes to this round, or -1: a
// peer with fewer pieces than the median candidate (the upper median for
// an even count), the one that had the slot last round if it still does,
// else the poorest, longest waiting among equals. A peer counts as having
// at least the pieces we sent it, so one that hides its HAVEs cannot look
// poorer than it is to keep the slot. Without it, tit-for-tat let a peer
// that fell behind stay behind: it had less to upload, so it was unchoked
// less, so it fell further back. In flash50 runs on the testbed the last
// peer came up to 9 s after the mean, with the least upload of all and
// half the file 10 s later than the others; it then fetched tens of
// pieces from the origin once its neighbours had left. docs/benchmarks.md
// (sixth pass) has the pairs of runs. Reciprocation needs
// OptimisticSlots >= 2 for it, so that one slot still rotates.
func (s *Scheduler) catchUp(cands, rest []*peer) int {
	counts := make([]int, len(cands))
	for i, p := range cands {
		counts[i] = s.piecesOf(p)
	}
	slices.Sort(counts)
	median := counts[len(counts)/2]
	k, kc := -1, median
	for i, p := range rest {
		c := s.piecesOf(p)
		switch {
		case c >= median:
		case p.catchingUp:
			return i
		case c < kc || c == kc && s.longestWaiting(p, rest[k]) < 0:
			k, kc = i, c
		}
	}
	return k
}

// longestWaiting orders peers by when we last unchoked them, never first.
func (s *Scheduler) longestWaiting(a, b *peer) int {
	if c := a.lastUnchoked.Compare(b.lastUnchoked); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

func (s *Scheduler) unchoke(p *peer) {
	p.amChoking = false
	p.lastUnchoked = s.now
	s.emit(Unchoke{Peer: p.id})
}

// spareSlot reports whether one more interested peer may be unchoked.
func (s *Scheduler) spareSlot() bool {
	return s.openAll() || s.unchokedInterested() < s.slots()
}

func (s *Scheduler) unchokedInterested() int {
	n := 0
	for _, p := range s.order {
		if !p.amChoking && s.interested(p) {
			n++
		}
	}
	return n
}

// fillSlots gives free upload slots to interested choked peers, longest
// waiting first.
func (s *Scheduler) fillSlots() {
	free := s.slots() - s.unchokedInterested()
	if s.openAll() {
		free = len(s.order)
	}
	if free <= 0 {
		return
	}
	var waiting []*peer
	for _, p := range s.order {
		if p.amChoking && s.interested(p) {
			waiting = append(waiting, p)
		}
	}
	slices.SortStableFunc(waiting, s.longestWaiting)
	for _, p := range waiting[:min(free, len(waiting))] {
		s.unchoke(p)
	}
}

func (s *Scheduler) onPeerRequest(e PeerRequest) {
	p := s.peers[e.Peer]
	if p == nil {
		return
	}
	refuse := func(reason string) {
		s.stats.Refused++
		s.emit(Reject{Peer: p.id, Piece: e.Piece, Reason: reason})
	}
	if !s.valid(e.Piece) || !s.have.Has(e.Piece) {
		refuse(RejectDontHave)
		return
	}
	if s.strict() {
		// Flashback's strict tit-for-tat: what we committed to send it
		// minus what it sent us must stay below the tab.
		if p.served-p.downTotal >= s.cfg.TFTTab {
			refuse(RejectTab)
			return
		}
	} else if p.amChoking {
		if !s.spareSlot() {
			refuse(RejectChoked)
			return
		}
		s.unchoke(p)
	}
	p.served += s.pieceLen(e.Piece)
	s.stats.Served++
	s.emit(Serve{Peer: p.id, Piece: e.Piece})
}

func (s *Scheduler) onUploaded(e Uploaded) {
	p := s.peers[e.Peer]
	b := e.Bytes
	if b <= 0 && s.valid(e.Piece) {
		b = s.pieceLen(e.Piece)
	}
	s.stats.BytesUp += b
	if p == nil {
		return
	}
	p.upTotal += b
	p.up.add(s.now, b)
	s.traded(p.addr)
}
