package sim

import (
	"slices"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/swarm"
)

// A connection between two peers is a pair of ends, one at each. An end
// is node.peerConn: its writer (control frames, then the upload queue one
// piece at a time through the node's upload turns) and its reader (frames
// turned into events, the requests outstanding).

// msgKind is a frame's type (docs/protocol.md); piece data is a flow.
type msgKind uint8

const (
	mHaveSet msgKind = iota
	mHave
	mStart
	mStop
	mChoke
	mUnchoke
	mRequest
	mCancel
	mReject
	mRecommend
	mGoodbye
	mRate
	numMsgKinds
)

var msgNames = [numMsgKinds]string{"haveset", "have", "start", "stop", "choke", "unchoke",
	"request", "cancel", "reject", "recommend", "goodbye", "rate"}

// msg is one control frame.
type msg struct {
	kind  msgKind
	arg   uint8 // mReject: the reason; mGoodbye: how
	piece int32
	x     any // mHaveSet: *pieceset.Set; mRecommend: []string; mRate: uint32
}

// Reject reasons on the wire (wire.RejectReason, as node maps them).
const (
	rejectOther uint8 = iota
	rejectChoked
	rejectDontHave
	rejectBusy
)

func rejectCode(reason string) uint8 {
	switch reason {
	case swarm.RejectChoked:
		return rejectChoked
	case swarm.RejectDontHave, "don't have", "not-have":
		return rejectDontHave
	case swarm.RejectBusy:
		return rejectBusy
	}
	return rejectOther
}

func rejectedWhy(code uint8) string {
	switch code {
	case rejectChoked:
		return swarm.RejectChoked
	case rejectDontHave:
		return swarm.RejectDontHave
	case rejectBusy:
		return swarm.RejectBusy
	}
	return ""
}

// How a connection ends.
const (
	byeOther    uint8 = iota // GOODBYE, any reason but shutdown
	byeShutdown              // GOODBYE shutdown: the peer leaves the swarm
	byeReset                 // no GOODBYE: the process was killed
)

// Writer states of an end.
const (
	wsIdle  = iota
	wsTurn  // the head waits for an upload turn
	wsSend  // the head's piece is being sent
	wsDrain // sent; the turn waits for the acknowledgements
)

// end is one side of a connection.
type end struct {
	n    *node
	peer *end
	id   swarm.PeerID
	lat  time.Duration // one way to the peer
	rtt  bool          // PathRTT reported
	// lastIn is when what this end sent last reaches the peer: TCP keeps
	// a connection's bytes in order, whatever the queues do.
	lastIn time.Duration
	// closed: this side has closed, or heard that the other did. dead:
	// the other side has closed and this one will hear of it shortly:
	// nothing more is sent on it.
	closed, dead bool
	gen          int // bumped when the writer is reset: stale events are ignored
	// own: uploads on this connection take no upload turn and are never
	// refused as busy: a budget of their own shapes them (a push's
	// connections across the rack's uplink).
	own bool

	// The writer.
	queue     []upload
	head      upload
	ws        int
	flow      *flow
	waitSince time.Duration
	sendSeq   int      // counts the pieces sent: a slow turn's event names one
	turnBack  bool     // the head's turn went back early (node's slowAfter)
	dropUp    []int32  // uploads the peer cancelled
	held      []msg    // frames held until the piece being sent is out
	lazy      []msg    // HAVE and START held back (node's lazy HAVEs)
	lazyStart int      // STARTs among them
	startHeld []uint64 // their pieces, a bit each (nil until one is held)
	out       []msg    // frames written while handling the current event
	inbound   [][]msg  // batches of frames on their way to this end, in order

	// The reader: requests outstanding, and the pieces we ever cancelled
	// (their late data is dropped quietly).
	wanted    []want
	cancelled map[int32]bool
}

type upload struct{ piece, rank int }

type want struct {
	piece     int32
	cancelled bool
}

// send queues a control frame, as peerConn.sendControl: while a piece is
// being sent, CHOKE and GOODBYE wait for its end, with everything after
// them (peerConn.sendPiece); the rest goes between its data.
func (e *end) send(m msg) {
	if e.closed {
		return
	}
	if e.ws == wsSend && (len(e.held) > 0 || m.kind == mChoke || m.kind == mGoodbye) {
		e.held = append(e.held, m)
		return
	}
	e.write(m)
}

// write puts m on the wire.
func (e *end) write(m msg) {
	s := e.n.s
	if len(e.out) == 0 {
		s.dirty = append(s.dirty, e)
		if k := len(s.bufs); k > 0 && e.out == nil {
			e.out, s.bufs = s.bufs[k-1], s.bufs[:k-1]
		}
	}
	e.out = append(e.out, m)
	if m.kind != mGoodbye || m.arg != byeReset {
		s.stats.frames[m.kind]++
	}
}

// flush sends what was written: it arrives a path latency later.
func (e *end) flush() {
	if len(e.out) == 0 {
		return
	}
	e.peer.inbound = append(e.peer.inbound, e.out)
	e.out = nil
	e.n.s.at(e.arrival(), event{kind: evDeliver, e: e.peer})
}

// arrival is when what this end sends now reaches the peer.
func (e *end) arrival() time.Duration {
	s := e.n.s
	e.lastIn = max(s.now+e.lat+queued(e.n.site, e.peer.n.site, float64(s.cfg.Queue), s.now), e.lastIn)
	return e.lastIn
}

// announce is Node.announce: a HAVE, START or STOP of piece sent, held
// back with the lazy HAVEs (wait), or dropped (!send).
func (e *end) announce(kind msgKind, piece int, send, wait bool) {
	if kind == mHave {
		e.unholdStart(piece)
	}
	switch {
	case kind == mStop && e.unholdStart(piece):
	case !send:
	case wait:
		if kind == mStart {
			e.lazyStart++
			if e.startHeld == nil {
				e.startHeld = make([]uint64, (e.n.s.pieces+63)/64)
			}
			e.startHeld[piece/64] |= 1 << (piece % 64)
		}
		if e.lazy = append(e.lazy, msg{kind: kind, piece: int32(piece)}); len(e.lazy) >= maxLazy {
			e.sendLazy()
		}
	default:
		e.sendLazy()
		e.send(msg{kind: kind, piece: int32(piece)})
	}
}

// unholdStart drops a held START of piece; it reports whether there was
// one.
func (e *end) unholdStart(piece int) bool {
	if e.lazyStart == 0 || e.startHeld[piece/64]&(1<<(piece%64)) == 0 {
		return false
	}
	e.startHeld[piece/64] &^= 1 << (piece % 64)
	k := slices.IndexFunc(e.lazy, func(m msg) bool { return m.kind == mStart && m.piece == int32(piece) })
	if k >= 0 {
		e.lazy = slices.Delete(e.lazy, k, k+1)
		e.lazyStart--
	}
	return k >= 0
}

func (e *end) sendLazy() {
	for _, m := range e.lazy {
		e.send(m)
	}
	e.lazy = e.lazy[:0]
	if e.lazyStart > 0 {
		e.lazyStart = 0
		clear(e.startHeld)
	}
}

// request is peerConn.request.
func (e *end) request(piece int) {
	if k := e.findWant(piece); k >= 0 {
		e.wanted[k].cancelled = false
	} else {
		e.wanted = append(e.wanted, want{piece: int32(piece)})
	}
	e.send(msg{kind: mRequest, piece: int32(piece)})
}

// cancel is peerConn.cancel: the request's late data is still taken, for
// the last maxLateKept cancelled requests.
func (e *end) cancel(piece int) {
	if k := e.findWant(piece); k >= 0 {
		e.wanted[k].cancelled = true
		late := 0
		for _, w := range e.wanted {
			if w.cancelled {
				late++
			}
		}
		if late > maxLateKept {
			e.wanted = slices.Delete(e.wanted, k, k+1)
		}
	}
	if e.cancelled == nil {
		e.cancelled = map[int32]bool{}
	}
	e.cancelled[int32(piece)] = true
	e.send(msg{kind: mCancel, piece: int32(piece)})
}

func (e *end) findWant(piece int) int {
	return slices.IndexFunc(e.wanted, func(w want) bool { return w.piece == int32(piece) })
}

// forget drops the cancelled request of piece (peerConn.forget).
func (e *end) forget(piece int) {
	if k := e.findWant(piece); k >= 0 && e.wanted[k].cancelled {
		e.wanted = slices.Delete(e.wanted, k, k+1)
	}
}

// deliver hands the next batch of frames from the peer to this end's
// reader.
func (e *end) deliver() {
	n := e.n
	msgs := e.inbound[0]
	k := copy(e.inbound, e.inbound[1:])
	e.inbound[k] = nil
	e.inbound = e.inbound[:k]
	defer func() {
		clear(msgs)
		n.s.bufs = append(n.s.bufs, msgs[:0])
	}()
	for _, m := range msgs {
		if e.closed || n.state != running {
			return
		}
		p := int(m.piece)
		switch m.kind {
		case mHaveSet:
			n.post(swarm.HaveSet{Peer: e.id, Set: m.x.(*pieceset.Set)})
		case mHave:
			n.post(swarm.Have{Peer: e.id, Piece: p})
		case mStart:
			n.post(swarm.Started{Peer: e.id, Piece: p})
		case mStop:
			n.post(swarm.Stopped{Peer: e.id, Piece: p})
		case mChoke:
			n.post(swarm.Choked{Peer: e.id})
		case mUnchoke:
			n.post(swarm.Unchoked{Peer: e.id})
		case mRequest:
			n.post(swarm.PeerRequest{Peer: e.id, Piece: p})
		case mCancel:
			if !slices.Contains(e.dropUp, m.piece) {
				e.dropUp = append(e.dropUp, m.piece)
			}
		case mReject:
			if k := e.findWant(p); k >= 0 {
				w := e.wanted[k]
				e.wanted = slices.Delete(e.wanted, k, k+1)
				if !w.cancelled {
					n.post(swarm.Rejected{Peer: e.id, Piece: p, Reason: rejectedWhy(m.arg)})
				}
			}
		case mRecommend:
			n.post(swarm.Recommended{Peer: e.id, Addrs: m.x.([]string)})
		case mRate:
			n.post(swarm.PeerCapacity{Peer: e.id, Up: float64(m.x.(uint32))})
		case mGoodbye:
			e.close()
			reason := "goodbye"
			if m.arg == byeReset {
				reason = "connection reset"
			}
			n.post(swarm.PeerDown{Peer: e.id, Reason: reason, Left: m.arg == byeShutdown})
		}
	}
}

// pieceIn: the last byte of a piece sent by the peer has arrived.
func (e *end) pieceIn(piece int) {
	n := e.n
	if e.closed || n.state != running {
		return
	}
	k := e.findWant(piece)
	if k < 0 {
		// Cancelled and forgotten: dropped quietly. (Unrequested data
		// would be a protocol error; the simulated peers send none.)
		e.n.s.stats.lateDropped++
		return
	}
	e.wanted = slices.Delete(e.wanted, k, k+1)
	size := n.s.pieceLen(piece)
	n.fromPeers += size
	if n.have.Has(piece) {
		n.s.stats.duplicates++
	}
	n.have.Add(piece)
	n.progressAt = n.s.now
	n.post(swarm.Received{Peer: e.id, Piece: piece, Bytes: size})
}

// hangUp closes the connection from this side: a GOODBYE (how), or for a
// killed peer a reset, reaches the other side a path latency later. The
// pieces in flight either way are lost at once.
func (e *end) hangUp(how uint8, _ string) {
	if e.closed {
		return
	}
	e.write(msg{kind: mGoodbye, arg: how})
	e.close()
	if !e.peer.closed {
		e.peer.dead = true
		e.peer.shutWriter()
	}
}

// close ends this side.
func (e *end) close() {
	if e.closed {
		return
	}
	e.closed = true
	e.shutWriter()
	e.lazy, e.held, e.lazyStart, e.startHeld = nil, nil, 0, nil
	e.n.remove(e)
}

// shutWriter stops the writer: the piece being sent is cut short, its
// turn given back, the queue dropped.
func (e *end) shutWriter() {
	n := e.n
	e.gen++
	if e.flow != nil {
		n.s.net.stop(e.flow, n.s.now)
		e.flow = nil
	}
	switch e.ws {
	case wsTurn:
		if k := slices.Index(n.waiters, e); k >= 0 {
			n.waiters = slices.Delete(n.waiters, k, k+1)
		}
	case wsSend, wsDrain:
		if !e.turnBack {
			n.giveTurn()
		}
	}
	if e.ws != wsIdle {
		n.uploading--
	}
	e.ws = wsIdle
	n.queued -= len(e.queue)
	if e.own {
		n.ownQueued -= len(e.queue)
	}
	e.queue = nil
}

// serve queues piece for upload (peerConn.serve); false when the
// connection's queue is full.
func (e *end) serve(piece int) bool {
	if k := slices.Index(e.dropUp, int32(piece)); k >= 0 {
		e.dropUp = slices.Delete(e.dropUp, k, k+1)
	}
	if len(e.queue) >= uploadQueue {
		return false
	}
	e.queue = append(e.queue, upload{piece: piece, rank: e.n.uploadRank(piece)})
	e.n.queued++
	if e.own {
		e.n.ownQueued++
	}
	e.pump()
	return true
}

// dropped reports whether the peer cancelled piece, forgetting it.
func (e *end) dropped(piece int) bool {
	k := slices.Index(e.dropUp, int32(piece))
	if k >= 0 {
		e.dropUp = slices.Delete(e.dropUp, k, k+1)
	}
	return k >= 0
}

// pump takes the next piece of the queue when the writer is free: it
// waits for a turn, unless it was cancelled (skipped without one).
func (e *end) pump() {
	n := e.n
	for e.ws == wsIdle && !e.closed && !e.dead && len(e.queue) > 0 {
		u := e.queue[0]
		e.queue = e.queue[1:]
		n.queued--
		if e.own {
			n.ownQueued--
		}
		if e.dropped(u.piece) {
			continue
		}
		e.head = u
		n.uploading++
		e.waitSince = n.s.now
		if e.own {
			e.startSend()
			e.turnBack = true // no turn to give back
		} else if n.turnsFree > 0 && len(n.waiters) == 0 {
			n.turnsFree--
			e.startSend()
		} else {
			e.ws = wsTurn
			n.waiters = append(n.waiters, e)
		}
	}
}

// rankAt is the head's rank at now: 0 once it has waited rankAge.
func (e *end) rankAt(now time.Duration) int {
	if now-e.waitSince >= rankAge {
		return 0
	}
	return e.head.rank
}

// startSend sends the head with the turn it was given, unless the peer
// cancelled it meanwhile.
func (e *end) startSend() {
	n := e.n
	if e.dropped(e.head.piece) {
		e.ws = wsIdle
		n.uploading--
		if !e.own {
			n.giveTurn()
		}
		e.pump()
		return
	}
	e.ws = wsSend
	e.sendSeq++
	e.turnBack = false
	var budgets []*link
	if ps := n.s.push; ps != nil {
		budgets = ps.links(n, e.peer.n)
	}
	if n.paceLink != nil {
		budgets = append(budgets, n.paceLink)
	}
	e.flow = n.s.net.start(n.site, e.peer.n.site, n.s.pieceLen(e.head.piece), n.s.now, e.sent, budgets...)
	if d := slowAfter(uploadTurns, n.s.pieceLen(0), n.capPeak); d > 0 {
		n.s.after(d, event{kind: evTurnSlow, e: e, i: e.sendSeq})
	}
}

// turnSlow: the head's turn goes back while it is still sent or drained,
// as node's does past slowAfter, if another piece waits for one (else it
// looks again after as long: node's slowBack); the piece goes on without
// it.
func (e *end) turnSlow(seq int) {
	if seq != e.sendSeq || e.turnBack || (e.ws != wsSend && e.ws != wsDrain) {
		return
	}
	if len(e.n.waiters) == 0 {
		e.n.s.after(slowAfter(uploadTurns, e.n.s.pieceLen(0), e.n.capPeak), event{kind: evTurnSlow, e: e, i: seq})
		return
	}
	e.turnBack = true
	e.n.giveTurn()
}

// slowAfter is node.slowAfter.
func slowAfter(turns int, pieceSize int64, peak float64) time.Duration {
	if peak <= 0 {
		return 0
	}
	share := float64(turns) * float64(pieceSize) / peak
	return max(time.Duration(turnSlow*share*float64(time.Second)), turnSlowMin)
}

// sent: the head's last byte has left. The piece arrives a latency later;
// the frames held behind it follow it; the turn goes back once all but
// turnLowat of it is acknowledged, a round trip after that part was sent.
func (e *end) sent(f *flow) {
	n, s := e.n, e.n.s
	e.flow = nil
	n.upBytes += float64(f.size)
	s.stats.peerBytes += f.size
	s.flowTo(n.class, e.peer.n.class, f.size)
	n.post(swarm.Uploaded{Peer: e.id, Piece: e.head.piece, Bytes: f.size})
	s.at(e.arrival(), event{kind: evPieceIn, e: e.peer, i: e.head.piece})
	e.ws = wsDrain
	held := e.held
	e.held = nil
	for _, m := range held {
		e.write(m)
	}
	drain := 2*e.lat + queued(n.site, e.peer.n.site, float64(s.cfg.Queue), s.now)
	if f.rate > 0 {
		drain -= time.Duration(float64(turnLowat) / f.rate * float64(time.Second))
	}
	s.after(max(drain, 0), event{kind: evTurnFree, e: e, i: e.gen})
}

// turnFree: the head's turn goes back; the next piece may go.
func (e *end) turnFree(gen int) {
	if gen != e.gen || e.ws != wsDrain {
		return
	}
	e.ws = wsIdle
	e.n.uploading--
	if !e.turnBack {
		e.n.giveTurn()
	}
	e.pump()
}

// choke is the Choke action: CHOKE, and the uploads queued and not
// started answered REJECT(choked) (peerConn.rejectQueued); the head
// waiting for its turn too (sendPiece).
func (e *end) choke() {
	n := e.n
	e.send(msg{kind: mChoke})
	if e.ws == wsTurn {
		if k := slices.Index(n.waiters, e); k >= 0 {
			n.waiters = slices.Delete(n.waiters, k, k+1)
		}
		e.ws = wsIdle
		n.uploading--
		e.send(msg{kind: mReject, piece: int32(e.head.piece), arg: rejectChoked})
	}
	for _, u := range e.queue {
		e.send(msg{kind: mReject, piece: int32(u.piece), arg: rejectChoked})
	}
	n.queued -= len(e.queue)
	if e.own {
		n.ownQueued -= len(e.queue)
	}
	e.queue = e.queue[:0]
}
