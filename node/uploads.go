package node

import (
	"math"
	"time"

	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/wire"
)

// notSentLowat bounds the bytes a peer connection's kernel send buffer holds
// that TCP has not sent yet (sockopt.NotSentLowat): a HAVE, START or
// REQUEST, which the writer sends before piece data and between its 64 KiB
// DATA frames, waits behind at most this much unsent data plus one frame,
// not seconds of it, so the swarm does not coordinate on stale news
// (origin fetches of pieces already on their way, requests timing out).
const notSentLowat = 32 << 10

// The upload queue. Past what the node uploads in uploadQueueTime (at its
// measured rate, at least minUploadsQueued pieces), on all connections
// together, requests are refused as busy at once, so requesters ask
// another holder (one that just got the piece) instead of waiting seconds
// in a long queue here: in a crowd a new piece's first holder is asked by
// everyone at the same moment. On the testbed (8 Mbit/s up, 64 KiB
// pieces) the bound is 8 pieces; it took the last of 20 peers from 1.28
// to 1.23-1.25 × T_KR (three runs each).
// Requesters pause only briefly after a busy refusal (swarm's
// busyBackoff), so a sole holder's link does not idle.
const (
	uploadQueueTime  = 500 * time.Millisecond
	minUploadsQueued = 8
)

// The ramp's bound. While we hold fewer than rampPieces pieces and lack
// some, the first seconds of a crowd, everyone lacks the few we have and
// asks us for them at once. The queue's bound then counts the pieces
// waiting for an upload turn or being sent as well as those queued
// (uploading; a connection takes its piece out of its queue when it
// starts to wait for a turn, so a peer asked for a new piece by 25
// neighbours at once accepted them all, twelfth pass), and it is
// rampQueueTime of upload (at least rampMinQueued pieces): a requester
// refused goes to a neighbour that got the piece a moment after us, whose
// link would idle, instead of waiting a second here. In flash50 runs on
// the testbed the peers were about 0.2 s less behind at 3 and 4 s, and
// the last peer came at 38.54 s on average against 38.68 s (15 runs
// each, in turn). Past the ramp the longer bound is better: with the
// short one all along, in one run, holders idled while their refused
// requesters backed off and the last peer came 0.6 s later (thirteenth
// pass). 16 and 64 pieces did no better than 32 (4 and 5 runs;
// docs/benchmarks.md, eighteenth pass).
const (
	rampPieces    = 32
	rampQueueTime = 300 * time.Millisecond
	rampMinQueued = 4
)

// A peer that leaves at once (SeedTime 0) still hands over what it has
// to the neighbours that lack it and ask in time: it goes once no upload
// has been queued or under way for handOverQuiet, once no neighbour lacks
// any piece of ours, or handOverMax after completion, whichever comes
// first. Without it, the last piece of a flash crowd left with the peer
// that fetched it from the origin, and every other peer fetched it from
// the origin in turn (in one flash20 run, 19 times, over 6 s).
//
// A neighbour keeps one request at a time to a peer on a short path
// (swarm.Scheduler.depth) and may be busy with others between two, so
// with 300 ms peers of the staggered scenario left while still asked, and
// those arriving after them found nobody and went to the origin: 3.5-3.7 F
// of origin bytes against 2.4-2.6 F with a second (pairs of runs). A
// second once cost flash crowds of 50 1-1.5 s, when a straggler kept its
// finished neighbours wanted and lingering on two busy cores; since the
// catch-up slot (swarm/choke.go) keeps stragglers up, it no longer does
// (three pairs of runs, none slower). docs/benchmarks.md, sixth pass.
const (
	handOverQuiet = time.Second
	handOverMax   = 2 * time.Second
)

// handedOver reports whether a peer leaving at once may go (see
// handOverQuiet). The loop asks on every wake-up, at least every tick.
func (n *Node) handedOver(now time.Time) bool {
	if n.completedAt.IsZero() {
		n.completedAt, n.lastUpload = now, now
	}
	if n.uploadsQueued() > 0 || n.uploading.Load() > 0 {
		n.lastUpload = now
	}
	return now.Sub(n.completedAt) >= handOverMax || now.Sub(n.lastUpload) >= handOverQuiet || !n.sched.Wanted()
}

// handingOver reports whether the node is complete and leaves at once,
// after the hand-over (handedOver).
func (n *Node) handingOver() bool {
	return n.complete && n.cfg.SeedTime == 0 && !n.cfg.SeedForever
}

// probeHandOver writes a KEEPALIVE, on each tick of the hand-over, to
// every neighbour that still lacks a piece of ours by the have-sets and
// HAVEs it sent: those the hand-over waits for. One that left may still
// count among them when what it sent last never came: a TCP peer that
// closes its socket with data unread sends a reset in place of its FIN
// and discards what it had not sent yet (its GOODBYE, its last HAVEs),
// and a reset is not sent again if a full bottleneck queue drops it. Then
// nothing more arrives, and we would wait handOverQuiet for nobody. A
// write to a connection whose other end is gone (its host still up)
// draws a fresh reset, which ends it here. Our reading of last peers that
// waited about 1 s for a neighbour that had exited, not confirmed; the
// measurements are in docs/benchmarks.md, fifteenth pass.
func (n *Node) probeHandOver() {
	for id, p := range n.peers {
		if n.sched.Lacks(id) {
			p.probe()
		}
	}
}

// uploadsQueued counts the pieces waiting for upload on all connections.
func (n *Node) uploadsQueued() int {
	q := 0
	for _, p := range n.peers {
		q += len(p.uploads)
	}
	return q
}

// uploadRanks is how many ranks the upload turns order pieces by
// (turns.go): the pieces no neighbour of ours has, those one has, and the
// rest.
const uploadRanks = 3

// uploadRank is the rank of an upload of piece: the fewer neighbours have
// it, the sooner it goes (turns.go).
func (n *Node) uploadRank(piece int) int {
	return min(n.sched.Holders(piece), uploadRanks-1)
}

// uploadsFull reports whether a request is to be refused as busy now: the
// upload queue's bound, or in the first seconds the ramp's (above).
func (n *Node) uploadsFull() bool {
	if n.sched.HaveCount() < rampPieces && !n.sched.Complete() {
		return n.sharedQueued()+int(n.uploading.Load()) >= n.queueBound(rampQueueTime, rampMinQueued)
	}
	return n.sharedQueued() >= n.queueBound(uploadQueueTime, minUploadsQueued)
}

// sharedQueued is uploadsQueued less the connections with a budget of
// their own (OwnBudget): their queues wait on their budget, not on the
// uplink the bound shares.
func (n *Node) sharedQueued() int {
	q := 0
	for _, p := range n.peers {
		if !p.own {
			q += len(p.uploads)
		}
	}
	return q
}

// queueBound is how many pieces we upload in d at our measured rate, and
// at least floor.
func (n *Node) queueBound(d time.Duration, floor int) int {
	return max(floor, int(n.upRate*d.Seconds()/float64(n.m.PieceSize)))
}

// pieceBuf returns a buffer for a piece of n bytes being received or sent,
// from pieceBufs. A crowd's peer receives a piece every few milliseconds; a
// fresh 64 KiB allocation for each is zeroed, then garbage: in a perf
// profile of a flash crowd of 50, whose peers share two cores on the
// testbed, the kernel's page clearing alone was 2.8% of all CPU time. A
// buffer of its own for each connection's uploads was as bad at the start
// of a crowd (one per neighbour, 3 MiB a peer at 49 neighbours, each page
// faulted in on its first piece): page clearing was 7.9% of the CPU in the
// first seconds of a flash50 run, against 2.4% later.
func (n *Node) pieceBuf(size int) []byte {
	if b, ok := n.pieceBufs.Get().(*[]byte); ok && cap(*b) >= size {
		return (*b)[:size]
	}
	return make([]byte, size, n.m.PieceSize)
}

// putPieceBuf gives back a buffer from pieceBuf once nothing refers to it.
func (n *Node) putPieceBuf(b []byte) {
	b = b[:cap(b)]
	n.pieceBufs.Put(&b)
}

// readPiece returns piece i's bytes for an upload: the kept copy if it
// arrived lately (recentPieces), else read into buf from the store and
// verified. release must be called once the bytes are sent.
func (n *Node) readPiece(i int, buf []byte) (data []byte, release func(), err error) {
	if e, ok := n.recent.get(i); ok {
		return e.data, func() { n.recent.release(e) }, nil
	}
	data, err = n.cfg.Store.ReadPiece(i, buf)
	return data, func() {}, err
}

// pathRTTs appends a swarm.PathRTT for each connection whose round trip
// without queues (sockopt.MinRTT) changed since it was last read, reading
// each at most every pathRTTEvery (a connection without a reading yet, on
// every tick). Transports that cannot tell give none.
func (n *Node) pathRTTs(now time.Time, evs []swarm.Event) []swarm.Event {
	for id, p := range n.peers {
		if p.pathRTT > 0 && now.Sub(p.pathRTTAt) < pathRTTEvery {
			continue
		}
		p.pathRTTAt = now
		if rtt := minRTT(p.c); rtt > 0 && rtt != p.pathRTT {
			p.pathRTT = rtt
			evs = append(evs, swarm.PathRTT{Peer: id, RTT: rtt})
		}
	}
	return evs
}

// pathRTTEvery is how often a connection's path RTT is read again.
const pathRTTEvery = 2 * time.Second

// measureUpload updates upRate, the bytes per second uploaded (a moving
// average over about a second, of the ticks' samples).
func (n *Node) measureUpload(now time.Time) {
	up := n.bytesToPeers.Load()
	if !n.upAt.IsZero() {
		if dt := now.Sub(n.upAt).Seconds(); dt > 0 {
			n.upRate += (float64(up-n.upLast)/dt - n.upRate) / 4
			n.upRateBits.Store(math.Float64bits(n.upRate))
		}
	}
	n.upAt, n.upLast = now, up
}

// Our upload capacity, told to the scheduler (swarm.Capacity, which weights
// our origin draw by it against our neighbours') and to the neighbours
// (RATE). Read every capacityEvery: the bytes TCP delivered to peers in
// that time (those handed to the kernel less those still in the send
// queues, so that a burst into empty send buffers is not taken for a fast
// uplink), and the estimate is the most seen, decaying by capacityDecay a
// reading (halving in about 14 s), so that it follows an uplink shared
// with other work. It is what we sent when there was demand: a fast peer
// nobody asked yet has none, and counts as average until it does.
//
// The bytes are counted per connection (ackedSince), as the pacer's are,
// so that a connection closing with bytes unacknowledged does not read
// them as delivered: the most read, uploadPeak, sets how long an upload
// turn is held (slowAfter), and must not pass the link.
const (
	capacityEvery = time.Second
	capacityDecay = 0.95
	// capacityChange is how much the estimate moves before it is told
	// again.
	capacityChange = 0.25
	// minCapacity: below this (bytes/s) nothing was measured.
	minCapacity = 1 << 10
)

// measureCapacity updates n.capacity every capacityEvery and, when it has
// moved by capacityChange since last told, appends a swarm.Capacity to evs
// and sends RATE to every neighbour.
func (n *Node) measureCapacity(now time.Time, evs []swarm.Event) []swarm.Event {
	if !n.capAt.IsZero() && now.Sub(n.capAt) < capacityEvery {
		return evs
	}
	// One reading of each send buffer serves both estimates: this one and
	// the pacer's.
	var acked int64
	for _, p := range n.peers {
		acked += p.ackedSince(int64(max(unacked(p.c), 0)))
	}
	recv := n.bytesFromPeers.Load() + n.bytesFromOrigin.Load()
	n.cfg.Pacer.Delivered(now, acked, recv-n.pacerRecv)
	n.pacerRecv = recv
	if !n.capAt.IsZero() {
		rate := float64(acked) / now.Sub(n.capAt).Seconds()
		n.capacity = max(rate, n.capacity*capacityDecay)
		if rate > n.uploadPeak() {
			n.upPeakBits.Store(math.Float64bits(rate))
		}
	}
	n.capAt = now
	if n.capacity < minCapacity || math.Abs(n.capacity-n.capSent) < capacityChange*n.capSent {
		return evs
	}
	n.capSent = n.capacity
	n.log.Debug("upload capacity", "bytes_per_second", int64(n.capSent))
	for _, p := range n.peers {
		p.sendControl(&wire.Rate{Up: rateUp(n.capSent)})
	}
	return append(evs, swarm.Capacity{Up: n.capSent})
}

// ackedSince is how many of the DATA bytes written to p were
// acknowledged since it was last called, with unacked of them still in
// its send buffer: the pacer's reading (uplink). Per connection, so that
// the bytes a connection held when it closed, never delivered, are not
// counted.
func (p *peerConn) ackedSince(unacked int64) int64 {
	a := p.sent.Load() - unacked
	if a <= p.acked {
		return 0
	}
	d := a - p.acked
	p.acked = a
	return d
}

// rateUp is a capacity as RATE carries it.
func rateUp(c float64) uint32 { return uint32(min(c, math.MaxUint32)) }
