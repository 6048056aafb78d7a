package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/wire"
)

// Queue bounds and timers of one connection.
const (
	// ctrlQueue bounds the control messages waiting to be written. A peer
	// that does not read fast enough to drain it is dropped (policy:
	// disconnect, counted in Stats.QueueDrops): it is stalled, and waiting for
	// it would stall the loop.
	ctrlQueue = 512
	// uploadQueue bounds the pieces waiting to be sent to one peer; past it
	// requests are rejected as busy.
	uploadQueue = 16
)

// peerConn is one connection's runtime: a reader goroutine turning frames
// into swarm events, and a writer goroutine sending control messages first
// and piece data second.
type peerConn struct {
	n        *Node
	id       swarm.PeerID
	c        net.Conn
	peerID   wire.PeerID
	addr     string    // reachable address, "" if none
	outbound bool      // we dialed it
	caps     wire.Caps // its handshake's
	own      bool      // its uploads take no turn and are never refused busy (OwnBudget)
	// layerAsked: we asked it for the piece layer and wait for its answer;
	// layerBuf is the answer so far (the reader goroutine's); layerTried:
	// we asked it once (the loop's). See layer.go.
	layerAsked atomic.Bool
	layerBuf   []manifest.Hash
	layerTried bool
	// layerServed counts the hashes it asked us for (the reader's).
	layerServed int

	ctrl    chan wire.Message
	uploads chan upload
	// lazy are the HAVE and START frames held back for a while, in order
	// (see lazyHaveDelay); owned by the loop goroutine.
	lazy []lazyFrame
	// pathRTT is the path's round trip last reported to the scheduler, read
	// at pathRTTAt (Node.pathRTTs); owned by the loop goroutine.
	pathRTT   time.Duration
	pathRTTAt time.Time
	// sent counts the DATA bytes written to the connection; acked, the
	// most of them read as acknowledged (ackedSince, for the
	// pacer; the loop's).
	sent  atomic.Int64
	acked int64
	done  chan struct{}
	once  sync.Once

	mu        sync.Mutex // guards the following
	wanted    map[int]*assembly
	cancelled map[int]bool // pieces we cancelled: DATA out of order for them is dropped quietly
	asked     map[int]bool // pieces we asked for: DATA without an assembly is dropped quietly
	dropUp    map[int]bool // uploads the peer cancelled
	// askedBytes is what our REQUESTs asked for in all, gotBytes the DATA
	// the peer sent. Each REQUEST gets at most one answer
	// (docs/protocol.md, section 5), so DATA past what we asked for is
	// unrequested, whatever piece it names. Without the bound a peer
	// could resend a piece we once asked for over and over, every copy
	// dropped quietly (data), and fill our downlink with it.
	askedBytes, gotBytes int64
}

// assembly is a requested piece being filled by DATA frames.
// assembly collects the DATA of one piece we asked for. buf is allocated by
// the first DATA, so a request that never gets an answer costs no buffer.
// A cancelled request keeps its assembly: the peer may have started the
// piece before our CANCEL reached it, and a whole piece that arrives late is
// still stored if we lack it, rather than its upload wasted.
type assembly struct {
	length    int
	buf       []byte
	got       int
	cancelled bool
}

// goodbyeError ends a connection whose peer said GOODBYE.
type goodbyeError struct {
	reason wire.GoodbyeReason
	text   string
}

func (e *goodbyeError) Error() string { return "goodbye: " + e.text }

// closeNow is queued to make the writer flush and close.
type closeNow struct{ wire.KeepAlive }

func newPeerConn(n *Node, id swarm.PeerID, c net.Conn, peerID wire.PeerID, addr string) *peerConn {
	return &peerConn{
		n: n, id: id, c: c, peerID: peerID, addr: addr, own: ownBudget(c),
		ctrl:      make(chan wire.Message, ctrlQueue),
		uploads:   make(chan upload, uploadQueue),
		done:      make(chan struct{}),
		wanted:    map[int]*assembly{},
		cancelled: map[int]bool{},
		asked:     map[int]bool{},
		dropUp:    map[int]bool{},
	}
}

// start runs the connection's goroutines. The reader posts PeerDown when
// the connection ends, whoever ended it.
func (p *peerConn) start(ctx context.Context) {
	p.n.wg.Go(func() {
		err := p.readLoop(ctx)
		p.close()
		// A peer that is stopping leaves the swarm, not just us.
		ge, ok := errors.AsType[*goodbyeError](err)
		left := ok && ge.reason == wire.GoodbyeShutdown
		p.n.post(ctx, swarm.PeerDown{Peer: p.id, Reason: err.Error(), Left: left})
	})
	p.n.wg.Go(func() {
		if err := p.writeLoop(ctx); err != nil {
			p.n.log.Debug("peer write", "peer", p.addr, "err", err)
		}
		p.close()
	})
}

func (p *peerConn) close() {
	p.once.Do(func() {
		close(p.done)
		p.c.Close()
	})
}

// closeAfterFlush lets queued control messages (a GOODBYE) go out first,
// for at most closeGrace: a peer that does not read must not keep the
// connection (its goroutines, its buffers) open by blocking our writer.
func (p *peerConn) closeAfterFlush() {
	p.c.SetWriteDeadline(time.Now().Add(closeGrace))
	select {
	case p.ctrl <- &closeNow{}:
	default:
		p.close()
	}
}

// sendControl queues a control message; a full queue drops the peer.
func (p *peerConn) sendControl(m wire.Message) {
	select {
	case p.ctrl <- m:
	case <-p.done:
	default:
		p.n.queueDrops.Add(1)
		p.n.log.Info("peer not reading its messages; dropping it", "peer", p.addr)
		p.close()
	}
}

// probe queues a KEEPALIVE (Node.probeHandOver), unless something waits to
// be written already: any write will do.
func (p *peerConn) probe() {
	if len(p.ctrl) > 0 {
		return
	}
	select {
	case p.ctrl <- &wire.KeepAlive{}:
	default:
	}
}

// lazyFrame is a HAVE or START held back (peerConn.lazy).
type lazyFrame struct {
	t     wire.Type
	piece uint32
}

// hold holds back a HAVE or START of piece; called by the loop.
func (p *peerConn) hold(t wire.Type, piece int) {
	if p.lazy = append(p.lazy, lazyFrame{t: t, piece: uint32(piece)}); len(p.lazy) >= maxLazy {
		p.sendLazy() // a flood of them must not fill the control queue
	}
}

// unhold drops a held frame; it reports whether there was one.
func (p *peerConn) unhold(t wire.Type, piece int) bool {
	k := slices.Index(p.lazy, lazyFrame{t: t, piece: uint32(piece)})
	if k >= 0 {
		p.lazy = slices.Delete(p.lazy, k, k+1)
	}
	return k >= 0
}

// sendLazy queues the frames held back; called by the loop before any
// other HAVE, START or STOP to the peer, and before an UNCHOKE.
func (p *peerConn) sendLazy() {
	for _, f := range p.lazy {
		switch f.t {
		case wire.TypeHave:
			p.sendControl(&wire.Have{Piece: f.piece})
		case wire.TypeStart:
			p.sendControl(&wire.Start{Piece: f.piece})
		}
	}
	p.lazy = p.lazy[:0]
}

func (p *peerConn) request(piece int, length int64) {
	p.mu.Lock()
	if a := p.wanted[piece]; a == nil {
		p.wanted[piece] = &assembly{length: int(length)}
	} else {
		a.cancelled = false
	}
	p.asked[piece] = true
	p.askedBytes += length
	p.mu.Unlock()
	p.sendControl(&wire.Request{Piece: uint32(piece), Length: uint32(length)})
}

func (p *peerConn) cancel(piece int, length int64) {
	p.mu.Lock()
	if a := p.wanted[piece]; a != nil {
		a.cancelled = true
		if p.lateKept() > maxLateKept {
			delete(p.wanted, piece) // its late DATA is dropped quietly
		}
	}
	p.cancelled[piece] = true
	p.mu.Unlock()
	p.sendControl(&wire.Cancel{Piece: uint32(piece), Length: uint32(length)})
}

// maxLateKept bounds the cancelled requests whose assemblies a connection
// keeps for late DATA: a peer may stop a cancelled piece at any frame
// boundary (docs/protocol.md, CANCEL), leaving a partial buffer.
const maxLateKept = 4

// lateKept counts the connection's cancelled assemblies; p.mu held.
func (p *peerConn) lateKept() int {
	n := 0
	for _, a := range p.wanted {
		if a.cancelled {
			n++
		}
	}
	return n
}

// forget drops the assembly of a cancelled request for piece, which we
// have now from elsewhere; its late DATA, if any, is dropped quietly.
func (p *peerConn) forget(piece int) {
	p.mu.Lock()
	if a := p.wanted[piece]; a != nil && a.cancelled {
		delete(p.wanted, piece)
	}
	p.mu.Unlock()
}

// upload is a piece queued for upload, with its rank (Node.uploadRank).
type upload struct{ piece, rank int }

// serve queues piece for upload and reports true, or rejects it as busy.
func (p *peerConn) serve(piece, rank int) bool {
	p.mu.Lock()
	delete(p.dropUp, piece)
	p.mu.Unlock()
	select {
	case p.uploads <- upload{piece, rank}:
		return true
	default:
		p.refuseBusy(piece)
		return false
	}
}

func (p *peerConn) refuseBusy(piece int) {
	p.sendControl(&wire.Reject{Piece: uint32(piece), Length: uint32(p.n.m.PieceLen(piece)), Reason: wire.RejectBusy})
}

// rejectQueued answers the uploads queued and not started with
// REJECT(choked), after a CHOKE (docs/protocol.md, section 7): the peer
// voids its requests when it sees the CHOKE and asks elsewhere, so serving
// them would send those pieces twice. An upload under way is finished; one
// waiting for its turn is answered REJECT(choked) too (sendPiece).
func (p *peerConn) rejectQueued() {
	for {
		select {
		case u := <-p.uploads:
			p.sendControl(&wire.Reject{Piece: uint32(u.piece), Length: uint32(p.n.m.PieceLen(u.piece)), Reason: wire.RejectChoked})
		default:
			return
		}
	}
}

func (p *peerConn) readLoop(ctx context.Context) error {
	m := p.n.m
	cr := newConnReader(p.c)
	r := wire.NewReader(p.n.cfg.DownloadLimit.Reader(ctx, cr), p.n.geom)
	r.NotifyNeed(cr.expect)
	for {
		msg, err := r.Read()
		if err != nil {
			return err
		}
		var ev swarm.Event
		switch msg := msg.(type) {
		case *wire.KeepAlive:
		case *wire.HaveSet:
			ev = swarm.HaveSet{Peer: p.id, Set: msg.Set}
		case *wire.Have:
			ev = swarm.Have{Peer: p.id, Piece: int(msg.Piece)}
		case *wire.Start:
			ev = swarm.Started{Peer: p.id, Piece: int(msg.Piece)}
		case *wire.Stop:
			ev = swarm.Stopped{Peer: p.id, Piece: int(msg.Piece)}
		case *wire.Rate:
			ev = swarm.PeerCapacity{Peer: p.id, Up: float64(msg.Up)}
		case *wire.Choke:
			ev = swarm.Choked{Peer: p.id}
		case *wire.Unchoke:
			ev = swarm.Unchoked{Peer: p.id}
		case *wire.Request:
			if msg.Offset != 0 || int64(msg.Length) != m.PieceLen(int(msg.Piece)) {
				// This version serves whole pieces only.
				p.sendControl(&wire.Reject{Piece: msg.Piece, Offset: msg.Offset, Length: msg.Length, Reason: wire.RejectOther})
				continue
			}
			ev = swarm.PeerRequest{Peer: p.id, Piece: int(msg.Piece)}
		case *wire.Cancel:
			p.mu.Lock()
			p.dropUp[int(msg.Piece)] = true
			p.mu.Unlock()
		case *wire.Reject:
			p.mu.Lock()
			a := p.wanted[int(msg.Piece)]
			delete(p.wanted, int(msg.Piece))
			p.mu.Unlock()
			if a != nil && !a.cancelled {
				ev = swarm.Rejected{Peer: p.id, Piece: int(msg.Piece), Reason: rejectedWhy(msg.Reason)}
			}
		case *wire.Data:
			ev, err = p.data(msg)
			if err != nil {
				return err
			}
		case *wire.Recommend:
			addrs := make([]string, 0, len(msg.Peers))
			for _, r := range msg.Peers {
				addrs = append(addrs, r.Addr.String())
			}
			ev = swarm.Recommended{Peer: p.id, Addrs: addrs}
		case *wire.Goodbye:
			return &goodbyeError{reason: msg.Reason, text: msg.Text}
		case *wire.GetLayer:
			if err := p.onGetLayer(msg); err != nil {
				return err
			}
		case *wire.Layer:
			if err := p.onLayer(ctx, msg); err != nil {
				return err
			}
		}
		if ev != nil {
			p.n.post(ctx, ev)
		}
	}
}

// rejectedWhy names a REJECT's reason for the scheduler, which treats each
// differently: "choked" waits for UNCHOKE, "dont-have" counts against a peer
// that advertised the piece, anything else backs off for a moment.
func rejectedWhy(r wire.RejectReason) string {
	switch r {
	case wire.RejectChoked:
		return swarm.RejectChoked
	case wire.RejectDontHave:
		return swarm.RejectDontHave
	case wire.RejectBusy:
		return swarm.RejectBusy
	}
	return ""
}

// data files a DATA frame into its piece; a piece complete is verified and
// stored here, on the connection's goroutine, so hashing never blocks the
// loop. DATA nobody asked for is a protocol violation.
func (p *peerConn) data(d *wire.Data) (swarm.Event, error) {
	piece := int(d.Piece)
	p.mu.Lock()
	if p.gotBytes += int64(len(d.Bytes)); p.gotBytes > p.askedBytes {
		got, asked := p.gotBytes, p.askedBytes
		p.mu.Unlock()
		return nil, fmt.Errorf("unrequested data for piece %d: %d bytes of data against %d asked for", piece, got, asked)
	}
	a := p.wanted[piece]
	asked, cancelled := p.asked[piece], p.cancelled[piece]
	if a == nil {
		p.mu.Unlock()
		// A piece we asked for may come after its assembly is gone:
		// the rest of an answer to a request we cancelled, or a second
		// answer to a piece we asked for twice. A CHOKE voids our
		// requests without a CANCEL, and once the peer unchokes us the
		// scheduler may ask it for the same pieces again; but a request
		// that crossed the CHOKE is served if it arrives after that
		// UNCHOKE (docs/protocol.md, section 7), and the piece comes
		// twice. Taken for unrequested DATA, which closes the
		// connection, the second copy ended 7 connections in a run of
		// issue 30's mixed20 on the testbed, and 52-69 in a build that
		// kept more of its slow peers' connections open
		// (docs/benchmarks.md, tenth pass).
		if asked {
			return nil, nil
		}
		return nil, fmt.Errorf("unrequested data for piece %d", piece)
	}
	// Once we cancelled a request for the piece, the rest of its answer may
	// still come, even after we asked for the piece again: it is dropped.
	if int(d.Offset) != a.got || a.got+len(d.Bytes) > a.length {
		p.mu.Unlock()
		if cancelled {
			return nil, nil
		}
		return nil, fmt.Errorf("piece %d: data at offset %d, expected %d", piece, d.Offset, a.got)
	}
	if a.buf == nil {
		if a.cancelled && p.n.cfg.Store.Has(piece) {
			// Late, and we have it: no buffer for it.
			delete(p.wanted, piece)
			p.mu.Unlock()
			return nil, nil
		}
		a.buf = p.n.pieceBuf(a.length)
	}
	a.got += copy(a.buf[a.got:], d.Bytes)
	full := a.got == a.length
	if full {
		delete(p.wanted, piece)
	}
	p.mu.Unlock()
	p.n.bytesFromPeers.Add(int64(len(d.Bytes)))
	if !full {
		return nil, nil
	}
	// The assembly is gone from wanted: nothing else holds its buffer, and
	// the store copies what it writes. A piece verified and stored is kept
	// for its uploads (recentPieces), which own the buffer from then on.
	if a.cancelled && p.n.cfg.Store.Has(piece) {
		// Late, and we got it elsewhere meanwhile.
		p.n.putPieceBuf(a.buf)
		return swarm.Received{Peer: p.id, Piece: piece, Bytes: int64(a.length)}, nil
	}
	if err := p.n.cfg.Store.WritePiece(piece, a.buf); err != nil {
		p.n.putPieceBuf(a.buf)
		if errors.Is(err, manifest.ErrCorruptPiece) {
			return swarm.Corrupt{Peer: p.id, Piece: piece}, nil
		}
		return nil, fmt.Errorf("store piece %d: %w", piece, err)
	}
	p.n.recent.add(piece, a.buf)
	return swarm.Received{Peer: p.id, Piece: piece, Bytes: int64(a.length)}, nil
}

// closeGrace bounds the flush of what is queued for a peer we are leaving.
const closeGrace = 2 * time.Second

// keepAliveAfter is how long the writer stays silent before a KEEPALIVE;
// idleTimeout is how long the reader waits for anything.
const (
	keepAliveAfter = 30 * time.Second
	idleTimeout    = 120 * time.Second
)

func (p *peerConn) writeLoop(ctx context.Context) error {
	w := wire.NewWriter(p.c, p.n.geom)
	// Our have-set first, then whatever the loop queues.
	if err := w.WriteMessage(&wire.HaveSet{Set: p.n.have()}); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	idle := time.NewTimer(keepAliveAfter)
	defer idle.Stop()
	// control writes m; it reports done when m asks the writer to stop.
	control := func(m wire.Message) (done bool, err error) {
		if _, ok := m.(*closeNow); ok {
			return true, w.Flush()
		}
		if err := w.WriteMessage(m); err != nil {
			return false, err
		}
		if len(p.ctrl) == 0 {
			return false, w.Flush()
		}
		return false, nil
	}
	for {
		// Control messages go before piece data.
		select {
		case m := <-p.ctrl:
			if done, err := control(m); done || err != nil {
				return err
			}
			continue
		default:
		}
		select {
		case <-p.done:
			return nil
		case <-ctx.Done():
			return nil
		case m := <-p.ctrl:
			if done, err := control(m); done || err != nil {
				return err
			}
		case u := <-p.uploads:
			p.n.uploading.Add(1)
			done, err := p.sendPiece(ctx, w, u, control)
			p.n.uploading.Add(-1)
			if done || err != nil {
				return err
			}
		case <-idle.C:
			if err := w.WriteMessage(&wire.KeepAlive{}); err != nil {
				return err
			}
			if err := w.Flush(); err != nil {
				return err
			}
		}
		idle.Reset(keepAliveAfter)
	}
}

// sendPiece sends the piece of u, taking an upload turn for it at its rank
// (turns.go); control writes a control frame (done: the writer is to stop).
//
// Control frames that come while the piece is being sent go between its
// DATA frames, except CHOKE, GOODBYE and the close, with everything queued
// after them: they wait for the end of the piece. A requester that sees
// CHOKE voids its requests and asks elsewhere (section 7 of
// docs/protocol.md), so a CHOKE in the middle of a piece would have it
// fetch the piece twice. One that comes while we wait for the turn, before
// the piece has started, ends the wait instead: the piece is not sent, and
// after a CHOKE it is answered REJECT(choked) like the requests queued
// behind it (rejectQueued).
func (p *peerConn) sendPiece(ctx context.Context, w *wire.Writer, u upload, control func(wire.Message) (bool, error)) (bool, error) {
	piece := u.piece
	p.mu.Lock()
	dropped := p.dropUp[piece] // cancelled: upload skips it, no turn needed
	p.mu.Unlock()
	var t *turn
	if !dropped {
		var stop wire.Message
		var done bool
		var err error
		t, stop, done, err = p.takeTurn(ctx, u.rank, control)
		if done || err != nil {
			return done, err
		}
		if stop != nil {
			if done, err := control(stop); done || err != nil {
				return done, err
			}
			if _, ok := stop.(*wire.Choke); !ok {
				return false, nil
			}
			return control(&wire.Reject{Piece: uint32(piece), Length: uint32(p.n.m.PieceLen(piece)), Reason: wire.RejectChoked})
		}
	}
	defer t.done()
	var held []wire.Message
	out := false // the piece is written: nothing is held any more
	drain := func() (bool, error) {
		for {
			select {
			case m := <-p.ctrl:
				if !out && (len(held) > 0 || holdsForPiece(m)) {
					held = append(held, m)
					continue
				}
				if done, err := control(m); done || err != nil {
					return done, err
				}
			default:
				return false, nil
			}
		}
	}
	buf := p.n.pieceBuf(int(p.n.m.PieceSize))
	done, err := p.upload(ctx, w, piece, buf, drain, t)
	p.n.putPieceBuf(buf) // the writes are done with it: none is kept
	if done || err != nil {
		return done, err
	}
	for _, m := range held {
		if done, err := control(m); done || err != nil {
			return done, err
		}
	}
	if len(held) > 0 {
		if err := w.Flush(); err != nil {
			return false, err
		}
	}
	// The piece is out: control frames go at once while the turn waits
	// for its acknowledgements.
	out = true
	return t.drained(ctx, drain)
}

// holdsForPiece reports whether control message m must wait for the end of
// the piece being sent (see writeLoop).
func holdsForPiece(m wire.Message) bool {
	switch m.(type) {
	case *wire.Choke, *wire.Goodbye, *closeNow:
		return true
	}
	return false
}

// dataChunk is the most bytes of one DATA frame we send (less on a paced
// uplink: uplink.Pacer.Step): a piece larger than this goes as several
// frames, with waiting control frames in between.
const dataChunk = 64 << 10

// upload sends one piece as DATA frames, shaped by the upload limit; between
// frames drain sends waiting control frames (done: the connection is to
// close). The piece comes from memory if it arrived lately, else from the
// store, which verifies it as it reads it, so a piece damaged on our disk
// is never passed on (Node.readPiece).
func (p *peerConn) upload(ctx context.Context, w *wire.Writer, piece int, buf []byte, drain func() (done bool, err error), t *turn) (bool, error) {
	p.mu.Lock()
	skip := p.dropUp[piece]
	delete(p.dropUp, piece)
	p.mu.Unlock()
	if skip {
		return false, nil
	}
	t.pause() // reading the store is not a stall
	data, release, err := p.n.readPiece(piece, buf)
	defer release()
	t.progress()
	if err != nil {
		p.n.log.Warn("cannot serve a piece", "piece", piece, "err", err)
		p.sendControl(&wire.Reject{Piece: uint32(piece), Length: uint32(p.n.m.PieceLen(piece)), Reason: wire.RejectDontHave})
		return false, nil
	}
	p.testbedCorrupt(data) // a no-op outside the testbed (testbed.go)
	for off := 0; off < len(data); {
		// A paced uplink writes less at once (uplink.Pacer.Step).
		chunk := data[off:min(len(data), off+p.n.cfg.Pacer.Step(dataChunk))]
		t.pause() // waiting for the upload limit or the pace is not a stall
		if err := p.n.cfg.UploadLimit.WaitN(ctx, len(chunk)); err != nil {
			return false, err
		}
		if err := p.n.cfg.Pacer.WaitN(ctx, len(chunk)); err != nil {
			return false, err
		}
		t.progress()
		if off > 0 {
			if done, err := drain(); done || err != nil {
				return done, err
			}
		}
		wrote := time.Now()
		if err := w.WriteData(uint32(piece), uint32(off), chunk); err != nil {
			return false, err
		}
		p.n.backlogged(wrote)
		t.progress()
		p.n.bytesToPeers.Add(int64(len(chunk)))
		p.sent.Add(int64(len(chunk)))
		off += len(chunk)
	}
	wrote := time.Now()
	if err := w.Flush(); err != nil {
		return false, err
	}
	p.n.backlogged(wrote)
	p.n.post(ctx, swarm.Uploaded{Peer: p.id, Piece: piece, Bytes: int64(len(data))})
	return false, nil
}

// recommendation turns addresses into a RECOMMEND message, skipping any that
// are not ip:port.
func recommendation(addrs []string) *wire.Recommend {
	r := &wire.Recommend{}
	for _, a := range addrs {
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			continue
		}
		r.Peers = append(r.Peers, wire.Recommendation{Addr: ap})
	}
	return r
}
