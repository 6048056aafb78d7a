package node_test

// Misbehaving peers, built from the wire package directly.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/wire"
)

// fakeSession is one connection of a fake peer, after the handshake.
type fakeSession struct {
	f *fakePeer
	c net.Conn
	r *wire.Reader
	w *wire.Writer
}

// fakePeer accepts connections, completes the handshake as a seed and hands
// each connection to serve.
type fakePeer struct {
	t     *testing.T
	m     *manifest.Manifest
	geom  wire.Geometry
	ln    net.Listener
	id    wire.PeerID
	serve func(s *fakeSession) error
	// leecher: the handshake does not claim the whole file (a seed's does).
	leecher bool
	// layer: the handshake says it answers GETLAYER (CapLayer).
	layer bool

	conns    atomic.Int64  // handshakes completed
	caps     atomic.Uint32 // the other side's handshake capabilities (the last)
	getLayer atomic.Int64  // GETLAYERs read (layerLiar)
	layers   atomic.Int64  // LAYERs read (layerGreedy)
	requests atomic.Int64  // REQUESTs read
	cancels  atomic.Int64  // CANCELs read (next)
	closed   atomic.Int64  // sessions that ended with the other side closing or saying goodbye

	mu       sync.Mutex // guards goodbyes
	goodbyes []string
	// byeReason is the reason of the last GOODBYE the other side sent.
	byeReason atomic.Int32
	// ended receives how each session ended: the GOODBYE text the other
	// side sent, or the error.
	ended chan string

	quit chan struct{} // closed at the end of the test
	wg   sync.WaitGroup
}

func newFakePeer(t *testing.T, m *manifest.Manifest, ln net.Listener, serve func(s *fakeSession) error) *fakePeer {
	g, err := wire.NewGeometry(m.Size, m.PieceSize)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePeer{t: t, m: m, geom: g, ln: ln, id: wire.NewPeerID(), serve: serve, quit: make(chan struct{}), ended: make(chan string, 64)}
	f.wg.Go(f.acceptLoop)
	t.Cleanup(func() {
		close(f.quit)
		ln.Close()
		f.wg.Wait()
	})
	return f
}

func (f *fakePeer) acceptLoop() {
	var conns []net.Conn
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		f.wg.Go(func() {
			defer c.Close()
			f.session(c)
		})
	}
}

func (f *fakePeer) session(c net.Conn) {
	port := 0
	if ta, ok := f.ln.Addr().(*net.TCPAddr); ok {
		port = ta.Port
	}
	mine := wire.Handshake{Caps: wire.CapSeed, Root: f.m.Root, Size: uint64(f.m.Size), PeerID: f.id, ListenPort: uint16(port)}
	if f.leecher {
		mine.Caps = 0
	}
	if f.layer {
		mine.Caps |= wire.CapLayer
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	theirs, err := wire.Exchange(ctx, c, mine)
	cancel()
	if err != nil {
		return
	}
	f.caps.Store(uint32(theirs.Caps))
	f.conns.Add(1)
	s := &fakeSession{f: f, c: c, r: wire.NewReader(c, f.geom), w: wire.NewWriter(c, f.geom)}
	err = f.serve(s)
	var bye *goodbyeError
	how := fmt.Sprint(err)
	if errors.As(err, &bye) {
		f.mu.Lock()
		f.goodbyes = append(f.goodbyes, bye.text)
		f.mu.Unlock()
		f.byeReason.Store(int32(bye.reason))
		how = bye.text
	}
	if err != nil && !errors.Is(err, errStop) {
		f.closed.Add(1)
	}
	select {
	case f.ended <- how:
	default:
	}
}

// errStop ends a fake peer's session at the end of the test.
var errStop = errors.New("stop")

type goodbyeError struct {
	reason wire.GoodbyeReason
	text   string
}

func (e *goodbyeError) Error() string { return "goodbye: " + e.text }

// startFake runs a fake peer on a host of its own, with a tracker for m
// that it has announced to (m.Trackers names it). set, if not nil, sets
// its switches before anyone can connect.
func startFake(t *testing.T, ctx context.Context, nw *memnet.Network, m *manifest.Manifest, serve func(*fakeSession) error, set func(*fakePeer)) *fakePeer {
	trURL := serveTracker(t, nw)
	m.Trackers = []string{trURL}
	fh := nw.Host(memnet.HostConfig{})
	fln, err := fh.Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	f := newFakePeer(t, m, fln, serve)
	if set != nil {
		set(f)
	}
	f.announce(ctx, httpClient(fh.Dial), trURL)
	return f
}

// announce tells the tracker at url that the fake peer is a seed.
func (f *fakePeer) announce(ctx context.Context, client *http.Client, url string) {
	f.t.Helper()
	defer client.CloseIdleConnections()
	port := f.ln.Addr().(*net.TCPAddr).Port
	_, err := tracker.Announce(ctx, client, url, tracker.AnnounceRequest{
		Root: f.m.Root, Size: f.m.Size, ID: tracker.PeerID(f.id), Port: uint16(port),
		Left: 0, Event: tracker.EventStarted, NumWant: 1,
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// send writes m and flushes.
func (s *fakeSession) send(m wire.Message) error { return writeAll(s.w, m) }

// writeAll writes msgs in order and flushes.
func writeAll(w *wire.Writer, msgs ...wire.Message) error {
	for _, m := range msgs {
		if err := w.WriteMessage(m); err != nil {
			return err
		}
	}
	return w.Flush()
}

// start sends the full have-set and, if unchoke, UNCHOKE.
func (s *fakeSession) start(unchoke bool) error {
	if err := s.w.WriteMessage(&wire.HaveSet{Set: pieceset.Full(s.f.m.NumPieces())}); err != nil {
		return err
	}
	if unchoke {
		if err := s.w.WriteMessage(&wire.Unchoke{}); err != nil {
			return err
		}
	}
	return s.w.Flush()
}

// startEmpty sends an empty have-set: the fake peer has no piece.
func (s *fakeSession) startEmpty() error {
	return s.send(&wire.HaveSet{Set: pieceset.New(s.f.m.NumPieces())})
}

// await reads frames until one of type T, skipping the others; the end of
// the connection is an error.
func await[T wire.Message](s *fakeSession) (T, error) { return readUntil[T](s.r) }

// readUntil is await on any reader.
func readUntil[T wire.Message](r *wire.Reader) (T, error) {
	for {
		msg, err := r.Read()
		if err != nil {
			var none T
			return none, err
		}
		if m, ok := msg.(T); ok {
			return m, nil
		}
	}
}

// next reads frames until a REQUEST, counting it; a GOODBYE or the end of
// the connection is an error.
func (s *fakeSession) next() (*wire.Request, error) {
	for {
		msg, err := s.r.Read()
		if err != nil {
			return nil, err
		}
		switch msg := msg.(type) {
		case *wire.Request:
			s.f.requests.Add(1)
			return msg, nil
		case *wire.Cancel:
			s.f.cancels.Add(1)
		case *wire.Goodbye:
			return nil, &goodbyeError{reason: msg.Reason, text: msg.Text}
		}
	}
}

// layerLiar has no piece and answers every GETLAYER with hashes that are
// not the piece layer; a GOODBYE ends its session (goodbyeError).
func layerLiar(s *fakeSession) error {
	if err := s.startEmpty(); err != nil {
		return err
	}
	for {
		msg, err := s.r.Read()
		if err != nil {
			return err
		}
		if bye, ok := msg.(*wire.Goodbye); ok {
			return &goodbyeError{reason: bye.Reason, text: bye.Text}
		}
		req, ok := msg.(*wire.GetLayer)
		if !ok {
			continue
		}
		s.f.getLayer.Add(1)
		junk := &wire.Layer{First: req.First, Hashes: make([][wire.HashLen]byte, req.Count)}
		for i := range junk.Hashes {
			junk.Hashes[i][0] = byte(i + 1)
		}
		if err := s.send(junk); err != nil {
			return err
		}
	}
}

// layerGreedy is a seed that asks for the piece layer twice and counts the
// answers until the other side ends the connection.
func layerGreedy(s *fakeSession) error {
	if err := s.start(false); err != nil {
		return err
	}
	n := uint32(s.f.m.NumPieces())
	for range 2 {
		if err := s.w.WriteMessage(&wire.GetLayer{First: 0, Count: n}); err != nil {
			return err
		}
	}
	if err := s.w.Flush(); err != nil {
		return err
	}
	for {
		msg, err := s.r.Read()
		if err != nil {
			return err
		}
		if _, ok := msg.(*wire.Layer); ok {
			s.f.layers.Add(1)
		}
	}
}

// liar answers every request with bytes that are not the piece.
func liar(s *fakeSession) error {
	if err := s.start(true); err != nil {
		return err
	}
	for {
		req, err := s.next()
		if err != nil {
			return err
		}
		junk := make([]byte, req.Length)
		for i := range junk {
			junk[i] = byte(i*31 + int(req.Piece))
		}
		if err := s.w.WriteData(req.Piece, req.Offset, junk); err != nil {
			return err
		}
		if err := s.w.Flush(); err != nil {
			return err
		}
	}
}

// silent reads and counts requests, and never answers one.
func silent(s *fakeSession) error {
	if err := s.start(true); err != nil {
		return err
	}
	for {
		if _, err := s.next(); err != nil {
			return err
		}
	}
}

// deaf sends its have-set and UNCHOKE, then neither reads nor writes: the
// connection's buffers fill up on the other side's writes.
func deaf(s *fakeSession) error {
	if err := s.start(true); err != nil {
		return err
	}
	// Read nothing until the end of the test.
	<-s.f.quit
	return errStop
}

// dontHave advertises every piece and rejects every request as not had.
func dontHave(s *fakeSession) error {
	if err := s.start(true); err != nil {
		return err
	}
	for {
		req, err := s.next()
		if err != nil {
			return err
		}
		if err := s.send(&wire.Reject{Piece: req.Piece, Offset: req.Offset, Length: req.Length, Reason: wire.RejectDontHave}); err != nil {
			return err
		}
	}
}

// deafTalker sends its have-set and UNCHOKE, then a KEEPALIVE now and then
// (so that the other side never times it out as idle) and reads nothing. It
// ends when a write fails: the other side closed the connection.
func deafTalker(s *fakeSession) error {
	if err := s.start(true); err != nil {
		return err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.f.quit:
			return errStop
		case <-tick.C:
		}
		if err := s.w.WriteMessage(&wire.KeepAlive{}); err != nil {
			return err
		}
		if err := s.w.Flush(); err != nil {
			return err
		}
	}
}

// storeOrigin is an origin that stores the piece asked, from data, in st.
func storeOrigin(m *manifest.Manifest, st *store.File, data []byte) node.OriginFetcher {
	return func(ctx context.Context, fo swarm.FetchOrigin) (int, time.Duration, error) {
		off := m.PieceOffset(fo.Piece)
		return fo.Piece, 0, st.WritePiece(fo.Piece, data[off:off+m.PieceLen(fo.Piece)])
	}
}
