package node

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/uplink"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/wire"
)

// TestLatePieceKept: a piece whose request we cancelled (it timed out) but
// that the peer had already started arrives whole: it is stored if we
// still lack it, not thrown away, and dropped quietly if we have it.
func TestLatePieceKept(t *testing.T) {
	f := testConn(t, 1_000_000, 1)
	data, m, st, p := f.data, f.m, f.st, f.p
	piece := func(i int) []byte { return data[m.PieceOffset(i) : m.PieceOffset(i)+m.PieceLen(i)] }
	deliver := func(i int) swarm.Event {
		t.Helper()
		var ev swarm.Event
		b := piece(i)
		for off := 0; off < len(b); off += 16 << 10 {
			e, err := p.data(&wire.Data{Piece: uint32(i), Offset: uint32(off), Bytes: b[off:min(len(b), off+16<<10)]})
			if err != nil {
				t.Fatalf("piece %d at %d: %v", i, off, err)
			}
			if e != nil {
				ev = e
			}
		}
		return ev
	}

	// Asked, cancelled, then the whole piece: stored.
	p.request(0, m.PieceLen(0))
	p.cancel(0, m.PieceLen(0))
	if ev, ok := deliver(0).(swarm.Received); !ok || ev.Piece != 0 || !st.Has(0) {
		t.Fatalf("late piece 0: event %#v, stored %v", ev, st.Has(0))
	}
	// Asked, cancelled, got elsewhere, then late: dropped quietly, no
	// buffer taken for it.
	p.request(1, m.PieceLen(1))
	p.cancel(1, m.PieceLen(1))
	if err := st.WritePiece(1, piece(1)); err != nil {
		t.Fatal(err)
	}
	if ev := deliver(1); ev != nil {
		t.Fatalf("late piece 1 we have: event %#v", ev)
	}
	// Data nobody asked for is still an error.
	if _, err := p.data(&wire.Data{Piece: 2, Bytes: piece(2)[:100]}); err == nil {
		t.Fatal("unrequested data accepted")
	}
	// A request that never got an answer holds no buffer, and is
	// forgotten once the piece is had from elsewhere.
	p.request(3, m.PieceLen(3))
	p.cancel(3, m.PieceLen(3))
	if a := p.wanted[3]; a == nil || a.buf != nil {
		t.Fatalf("cancelled, unanswered request: %+v", a)
	}
	p.forget(3)
	if a := p.wanted[3]; a != nil {
		t.Fatalf("forgotten request still kept: %+v", a)
	}
	// At most maxLateKept cancelled requests are kept per connection.
	for i := 4; i < 4+2*maxLateKept && i < m.NumPieces(); i++ {
		p.request(i, m.PieceLen(i))
		p.cancel(i, m.PieceLen(i))
	}
	if k := p.lateKept(); k > maxLateKept {
		t.Fatalf("%d cancelled requests kept, want at most %d", k, maxLateKept)
	}
}

// TestChokeAnswersLate: a CHOKE voids our requests, but a request that
// crossed it may still be served once the peer unchokes us again, and a
// piece we asked for again then comes twice. The first copy is stored;
// the second is dropped quietly, not taken for unrequested DATA (which
// closes the connection).
func TestChokeAnswersLate(t *testing.T) {
	f := testConn(t, 1_000_000, 1)
	data, m, st, p := f.data, f.m, f.st, f.p
	deliver := func(i int) (swarm.Event, error) {
		b := data[m.PieceOffset(i) : m.PieceOffset(i)+m.PieceLen(i)]
		return p.data(&wire.Data{Piece: uint32(i), Bytes: b})
	}
	p.request(0, m.PieceLen(0))
	// CHOKE: the scheduler voids the request, sends no CANCEL, and asks
	// again after the UNCHOKE; the peer serves both.
	p.request(0, m.PieceLen(0))
	if ev, err := deliver(0); err != nil || !st.Has(0) {
		t.Fatalf("first copy: event %#v, error %v, stored %v", ev, err, st.Has(0))
	} else if r, ok := ev.(swarm.Received); !ok || r.Piece != 0 {
		t.Fatalf("first copy: event %#v, want Received for piece 0", ev)
	}
	if ev, err := deliver(0); err != nil || ev != nil {
		t.Fatalf("second copy: event %#v, error %v; want it dropped quietly", ev, err)
	}
	// A piece never asked for on this connection is still an error.
	if _, err := deliver(2); err == nil {
		t.Fatal("unrequested data accepted")
	}
}

// TestDataPastAsked: a peer that resends a piece we asked for once, each
// copy of which would be dropped quietly, is cut off once its DATA passes
// what our requests asked for in all: it cannot fill our downlink with
// copies. What we asked for, in any order and however split, is taken.
func TestDataPastAsked(t *testing.T) {
	f := testConn(t, 1_000_000, 1)
	data, m, st, p := f.data, f.m, f.st, f.p
	piece := func(i int) []byte { return data[m.PieceOffset(i) : m.PieceOffset(i)+m.PieceLen(i)] }
	p.request(0, m.PieceLen(0))
	p.request(1, m.PieceLen(1))
	b1 := piece(1)
	for off := 0; off < len(b1); off += 16 << 10 {
		if _, err := p.data(&wire.Data{Piece: 1, Offset: uint32(off), Bytes: b1[off:min(len(b1), off+16<<10)]}); err != nil {
			t.Fatalf("piece 1 at %d: %v", off, err)
		}
	}
	// A copy of piece 1 again: within what we asked for (piece 0 is
	// outstanding), so dropped quietly.
	if ev, err := p.data(&wire.Data{Piece: 1, Bytes: b1}); err != nil || ev != nil {
		t.Fatalf("second copy of piece 1: event %#v, error %v; want it dropped quietly", ev, err)
	}
	if !st.Has(1) {
		t.Fatal("piece 1 not stored")
	}
	// One byte more than asked for in all (the two pieces are the same
	// length), for a piece we asked for: an error, even though the piece
	// was ours to ask.
	if m.PieceLen(0) != m.PieceLen(1) {
		t.Fatalf("pieces of %d and %d bytes", m.PieceLen(0), m.PieceLen(1))
	}
	if _, err := p.data(&wire.Data{Piece: 1, Bytes: b1[:1]}); err == nil {
		t.Fatal("data past what was asked for accepted")
	}
}

// TestPacedUploadSmallFrames: on a paced uplink a piece goes as frames
// of about uplink.Pacer.Step's bytes, so that what waits in the uplink's
// queue behind each write (our requests, our downloads' ACKs) waits
// little; unpaced, as dataChunk frames.
func TestPacedUploadSmallFrames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := testConn(t, 1_000_000, 1)
		m, p := f.m, f.p
		g, err := wire.NewGeometry(m.Size, m.PieceSize)
		if err != nil {
			t.Fatal(err)
		}
		f.n.geom = g
		f.n.events = make(chan swarm.Event, 4) // the Uploaded of each upload
		if err := f.st.WritePiece(0, f.data[:m.PieceLen(0)]); err != nil {
			t.Fatal(err)
		}
		frames := func() []int {
			c1, c2 := net.Pipe()
			defer c2.Close()
			done := make(chan error, 1)
			go func() {
				defer c1.Close()
				w := wire.NewWriter(c1, g)
				err := w.WriteMessage(&wire.HaveSet{Set: pieceset.New(m.NumPieces())})
				if err == nil {
					_, err = p.upload(t.Context(), w, 0, make([]byte, m.PieceSize), func() (bool, error) { return false, nil }, nil)
				}
				done <- err
			}()
			var sizes []int
			r := wire.NewReader(c2, g)
			for got := int64(0); got < m.PieceLen(0); {
				msg, err := r.Read()
				if err != nil {
					t.Fatal(err)
				}
				if d, ok := msg.(*wire.Data); ok {
					sizes = append(sizes, len(d.Bytes))
					got += int64(len(d.Bytes))
				}
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			return sizes
		}
		if got := frames(); len(got) != int((m.PieceLen(0)+dataChunk-1)/dataChunk) {
			t.Fatalf("unpaced: frames of %v bytes, want %d KiB ones", got, dataChunk>>10)
		}
		pacer := uplink.New() // a 120 KB/s uplink read, downloading 480 KB/s
		now := time.Now()
		pacer.Delivered(now, 0, 0)
		for range uplink.StartupFlat + 1 {
			now = now.Add(uplink.Window)
			pacer.Backlogged(uplink.Window)
			pacer.Delivered(now, 240e3, 960e3)
		}
		f.n.cfg.Pacer = pacer
		step := pacer.Step(dataChunk)
		got := frames()
		for _, n := range got {
			if n > step {
				t.Fatalf("paced at a step of %d bytes: frames of %v bytes", step, got)
			}
		}
		if len(got) < int(m.PieceLen(0))/step {
			t.Fatalf("paced at a step of %d bytes: frames of %v bytes", step, got)
		}
	})
}

// TestPathRTTs: the loop reports a TCP connection's round trip without
// queues to the scheduler (swarm.PathRTT) once it has one, reads it again
// only every pathRTTEvery and reports it only when it changed; a
// connection that cannot tell (not TCP) gets none.
func TestPathRTTs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("TCP_INFO is read on Linux only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tcp, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	n := &Node{peers: map[swarm.PeerID]*peerConn{1: {c: tcp}, 2: {c: a}}}
	now := time.Now()
	evs := n.pathRTTs(now, nil)
	if len(evs) != 1 {
		t.Fatalf("first tick: %v, want one PathRTT, for peer 1", evs)
	}
	if e, ok := evs[0].(swarm.PathRTT); !ok || e.Peer != 1 || e.RTT <= 0 {
		t.Fatalf("first tick: %#v, want a PathRTT above 0 for peer 1", evs[0])
	}
	n.peers[1].pathRTT++ // as if the kernel's minimum had changed since
	if evs := n.pathRTTs(now.Add(pathRTTEvery/2), nil); len(evs) != 0 {
		t.Fatalf("read again before pathRTTEvery: %v", evs)
	}
	if evs := n.pathRTTs(now.Add(pathRTTEvery), nil); len(evs) != 1 {
		t.Fatalf("changed RTT after pathRTTEvery: %v, want it reported", evs)
	}
	if evs := n.pathRTTs(now.Add(2*pathRTTEvery), nil); len(evs) != 0 {
		t.Fatalf("unchanged RTT reported again: %v", evs)
	}
}

// connFixture is a file of random bytes, its manifest, a store for it in
// a temporary directory (part: its part file), a node on that store and a
// connection of that node whose control frames are read and dropped.
type connFixture struct {
	data []byte
	m    *manifest.Manifest
	st   *store.File
	part string
	n    *Node
	p    *peerConn
}

func testConn(t *testing.T, size int, seed byte) *connFixture {
	t.Helper()
	f := &connFixture{data: make([]byte, size)}
	rand.NewChaCha8([32]byte{seed}).Read(f.data)
	var err error
	if f.m, err = manifest.FromReader(bytes.NewReader(f.data), int64(size), "f"); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(t.TempDir(), "f")
	if f.st, err = store.Open(final, f.m, false, nil); err != nil {
		t.Fatal(err)
	}
	f.part = final + store.PartSuffix
	t.Cleanup(func() { f.st.Close() })
	f.n = &Node{cfg: Config{Store: f.st}, m: f.m}
	f.n.recent = newRecentPieces(f.m.PieceSize, recentBytes, f.n.putPieceBuf)
	c1, c2 := net.Pipe()
	t.Cleanup(func() { c1.Close(); c2.Close() })
	f.p = newPeerConn(f.n, 1, c1, wire.PeerID{}, "192.0.2.1:1")
	go func() { // the control frames request and cancel queue
		for range f.p.ctrl {
		}
	}()
	t.Cleanup(func() { close(f.p.ctrl) })
	return f
}

// TestTurns: with one upload turn, a second connection waits for it and
// sends its control frames meanwhile; it gets the turn once the first
// gives it back, and a turn whose holder makes no progress comes back by
// itself after turnStall. Giving a turn back twice, or after the stall
// gave it back, gives back nothing more. A CHOKE that comes while a
// connection waits ends its wait, unwritten, and the turn goes on to the
// next in line.
func TestTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &Node{turns: NewTurns(1)}
		conn := func(id swarm.PeerID) *peerConn {
			c1, c2 := net.Pipe()
			t.Cleanup(func() { c1.Close(); c2.Close() })
			return newPeerConn(n, id, c1, wire.PeerID{}, "192.0.2.1:1")
		}
		a, b, c := conn(1), conn(2), conn(3)
		ctx := t.Context()
		type result struct {
			t    *turn
			stop wire.Message
		}
		take := func(p *peerConn, control func(wire.Message) (bool, error)) <-chan result {
			got := make(chan result, 1)
			go func() {
				tn, stop, done, err := p.takeTurn(ctx, 0, control)
				if (done || err != nil) && ctx.Err() == nil {
					t.Errorf("takeTurn: done %v, err %v", done, err)
				}
				got <- result{tn, stop}
			}()
			return got
		}
		wait := func(got <-chan result, what string) result {
			t.Helper()
			select {
			case r := <-got:
				return r
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: no turn after 5 s", what)
				return result{}
			}
		}
		// none checks that got has nothing once every goroutine of the test
		// waits: a turn would have been given by then.
		none := func(got <-chan result, what string) {
			t.Helper()
			synctest.Wait()
			select {
			case <-got:
				t.Fatalf("%s got a turn while the only one is held", what)
			default:
			}
		}

		ta := wait(take(a, nil), "the first").t
		ta.pause() // no stall bound while the test looks
		written := make(chan wire.Message, 1)
		gotB := take(b, func(m wire.Message) (bool, error) { written <- m; return false, nil })
		b.ctrl <- &wire.Have{Piece: 3}
		select {
		case m := <-written:
			if h, ok := m.(*wire.Have); !ok || h.Piece != 3 {
				t.Fatalf("wrote %#v, want the HAVE of piece 3", m)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a control frame waited with the piece for the turn")
		}
		none(gotB, "the second")
		gotC := take(c, nil) // in line behind b
		none(gotC, "the third")
		// b is choked while it waits: it leaves the line, and c is next.
		b.ctrl <- &wire.Choke{}
		if r := wait(gotB, "the second, choked"); r.t != nil {
			t.Fatal("the choked connection got a turn")
		} else if _, ok := r.stop.(*wire.Choke); !ok {
			t.Fatalf("the wait ended with %#v, want the CHOKE", r.stop)
		}
		none(gotC, "the third")
		start := time.Now() // c's turn, and its stall bound, start after this
		ta.done()
		ta.done()
		tc := wait(gotC, "the third, after the first gave its turn back").t

		// tc makes no progress: its turn comes back by itself, turnStall
		// after it was given (the bubble's clock moves only when every
		// goroutine waits, so the stall bound is exact).
		td := wait(take(a, nil), "a fourth, while the holder is stalled").t
		if took := time.Since(start); took != turnStall {
			t.Errorf("the stalled turn came back after %v, want turnStall (%v)", took, turnStall)
		}
		td.pause()
		tc.done() // already given back by the stall: nothing more
		none(take(b, nil), "a fifth")
		td.done()
	})
}

// TestTurnsByRank: a turn that comes free goes to the waiting piece of the
// lowest rank, the first that came among equals; one that left the line
// is skipped; one that has waited rankAge counts as rank 0.
func TestTurnsByRank(t *testing.T) {
	ts := NewTurns(1)
	<-ts.enter(0) // the only turn, held
	ranks := []int{2, 0, 1, 0, 0}
	ws := make([]chan struct{}, len(ranks))
	for i, r := range ranks {
		ws[i] = ts.enter(r)
	}
	ts.leave(ws[3])
	given := func() int {
		t.Helper()
		got := -1
		for i, w := range ws {
			select {
			case <-w:
				if i == 3 {
					t.Fatal("the waiter that left was given a turn")
				}
				if got >= 0 {
					t.Fatalf("waiters %d and %d both have the one turn", got, i)
				}
				got = i
			default:
			}
		}
		if got < 0 {
			t.Fatal("a turn given back went to nobody")
		}
		ws[got] = make(chan struct{}) // open again: not counted twice
		return got
	}
	var order []int
	for range 4 {
		ts.give()
		order = append(order, given())
	}
	if want := []int{1, 4, 2, 0}; !slices.Equal(order, want) {
		t.Errorf("turns went to waiters %v, want %v (ranks %v)", order, want, ranks)
	}
	ts.give()
	if ts.free != 1 {
		t.Errorf("%d turns free once nobody waits, want 1", ts.free)
	}

	// A piece that has waited rankAge goes as rank 0: first come, first
	// served among those.
	<-ts.enter(0)
	old, rare := ts.enter(2), ts.enter(0)
	ts.giveAt(time.Now().Add(rankAge))
	select {
	case <-old:
	case <-rare:
		t.Error("a rare piece went before a common one that had waited rankAge")
	default:
		t.Error("a turn given back went to nobody")
	}
}

// TestUploadRank: a piece's upload rank is how many neighbours have it, up
// to uploadRanks-1.
func TestUploadRank(t *testing.T) {
	now := time.Now()
	const pieces = 4
	sched := swarm.New(swarm.Config{NumPieces: pieces, PieceLen: func(int) int64 { return 16 << 10 }}, pieceset.New(pieces), now)
	n := &Node{sched: sched}
	// Piece i is held by the neighbours 1..i.
	for id := swarm.PeerID(1); id < pieces; id++ {
		set := pieceset.New(pieces)
		for i := int(id); i < pieces; i++ {
			set.Add(i)
		}
		sched.Step(swarm.PeerUp{Peer: id, Addr: fmt.Sprintf("192.0.2.1:%d", id)}, now)
		sched.Step(swarm.HaveSet{Peer: id, Set: set}, now)
	}
	for i, want := range []int{0, 1, 2, 2} {
		if got := n.uploadRank(i); got != want {
			t.Errorf("piece %d (%d holders): rank %d, want %d", i, sched.Holders(i), got, want)
		}
	}
}
