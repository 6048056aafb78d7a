package wire_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/wire"
)

// A session as docs/protocol.md describes it, between a seed and a leecher:
// handshake, HAVESET both ways, UNCHOKE, RECOMMEND, START + pipelined
// REQUESTs answered by multi-frame DATA, HAVE, a CANCEL that comes too late,
// GOODBYE. Each side has a reader goroutine feeding its main loop, as the
// peer runtime will; over net.Pipe that is the only way not to deadlock.

const sessionPieceSize = 1 * MiB

func sessionFile() []byte {
	f := make([]byte, 3*sessionPieceSize+1000) // 4 pieces, the last short
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range f {
		f[i] = byte(rng.Uint32())
	}
	return f
}

// readLoop sends every message (DATA copied) to ch, then the final error.
func readLoop(r *wire.Reader, ch chan<- wire.Message, errc chan<- error) {
	for {
		m, err := r.Read()
		if err != nil {
			errc <- err
			return
		}
		ch <- cloneMessage(m)
	}
}

type sessionStats struct {
	requests, cancels, haves, starts int
	goodbye                          *wire.Goodbye
}

func runSeed(ctx context.Context, conn net.Conn, file []byte, g wire.Geometry) (sessionStats, error) {
	var st sessionStats
	h := wire.Handshake{Caps: wire.CapSeed, Size: uint64(len(file)), PeerID: wire.NewPeerID(), ListenPort: 7000}
	if _, err := wire.Exchange(ctx, conn, h); err != nil {
		return st, err
	}
	w := wire.NewWriter(conn, g)
	ch, errc := make(chan wire.Message, 64), make(chan error, 1)
	go readLoop(wire.NewReader(conn, g), ch, errc)
	if err := w.WriteMessage(&wire.HaveSet{Set: pieceset.Full(g.NumPieces())}); err != nil {
		return st, err
	}
	if err := w.Flush(); err != nil {
		return st, err
	}
	for {
		var m wire.Message
		select {
		case m = <-ch:
		case err := <-errc:
			return st, err
		}
		var err error
		switch m := m.(type) {
		case *wire.HaveSet:
			if m.Set.Count() != 0 {
				return st, errors.New("the leecher claims pieces")
			}
			err = errors.Join(
				w.WriteMessage(&wire.Unchoke{}),
				w.WriteMessage(&wire.Recommend{Peers: []wire.Recommendation{
					{Addr: netip.MustParseAddrPort("192.0.2.1:7000"), Age: 3 * time.Second},
				}}))
		case *wire.Request:
			st.requests++
			off := g.PieceSize()*int64(m.Piece) + int64(m.Offset)
			err = w.WriteData(m.Piece, m.Offset, file[off:off+int64(m.Length)])
		case *wire.Cancel:
			st.cancels++ // served already: nothing to withdraw
		case *wire.Have:
			st.haves++
		case *wire.Start:
			st.starts++
		case *wire.KeepAlive:
		case *wire.Goodbye:
			st.goodbye = m
			return st, nil
		default:
			return st, errors.New("the seed got an unexpected " + m.Type().String())
		}
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			return st, err
		}
	}
}

func runLeecher(ctx context.Context, conn net.Conn, size int, g wire.Geometry) ([]byte, *wire.Recommend, error) {
	h := wire.Handshake{Size: uint64(size), PeerID: wire.NewPeerID()}
	theirs, err := wire.Exchange(ctx, conn, h)
	if err != nil {
		return nil, nil, err
	}
	if !theirs.Caps.Has(wire.CapSeed) || theirs.ListenPort != 7000 {
		return nil, nil, errors.New("the seed's handshake is wrong")
	}
	w := wire.NewWriter(conn, g)
	ch, errc := make(chan wire.Message, 64), make(chan error, 1)
	go readLoop(wire.NewReader(conn, g), ch, errc)
	err = errors.Join(
		w.WriteMessage(&wire.KeepAlive{}),
		w.WriteMessage(&wire.HaveSet{Set: pieceset.New(g.NumPieces())}),
		w.Flush())
	if err != nil {
		return nil, nil, err
	}
	file := make([]byte, size)
	got := make([]int64, g.NumPieces()) // bytes received per piece, in order
	have := pieceset.New(g.NumPieces())
	var rec *wire.Recommend
	for !have.Complete() || rec == nil {
		var m wire.Message
		select {
		case m = <-ch:
		case err := <-errc:
			return nil, nil, err
		}
		switch m := m.(type) {
		case *wire.HaveSet:
			if !m.Set.Complete() {
				return nil, nil, errors.New("the seed is not complete")
			}
		case *wire.Unchoke:
			// Pipeline everything, then a duplicate we withdraw at once.
			for p := range g.NumPieces() {
				err = errors.Join(err,
					w.WriteMessage(&wire.Start{Piece: uint32(p)}),
					w.WriteMessage(&wire.Request{Piece: uint32(p), Length: uint32(g.PieceLen(p))}))
			}
			err = errors.Join(err,
				w.WriteMessage(&wire.Request{Piece: 0, Offset: 10, Length: 10}),
				w.WriteMessage(&wire.Cancel{Piece: 0, Offset: 10, Length: 10}),
				w.Flush())
		case *wire.Data:
			p := int(m.Piece)
			if have.Has(p) {
				continue // the cancelled duplicate, served before the CANCEL arrived
			}
			if int64(m.Offset) != got[p] {
				return nil, nil, errors.New("DATA out of order")
			}
			copy(file[g.PieceSize()*int64(p)+int64(m.Offset):], m.Bytes)
			got[p] += int64(len(m.Bytes))
			if got[p] == g.PieceLen(p) {
				have.Add(p)
				err = errors.Join(w.WriteMessage(&wire.Have{Piece: m.Piece}), w.Flush())
			}
		case *wire.Recommend:
			rec = m
		default:
			return nil, nil, errors.New("the leecher got an unexpected " + m.Type().String())
		}
		if err != nil {
			return nil, nil, err
		}
	}
	err = errors.Join(w.WriteMessage(&wire.Goodbye{Reason: wire.GoodbyeDone, Text: "thanks"}), w.Flush())
	return file, rec, err
}

func runSession(t *testing.T, seedConn, leechConn net.Conn) {
	file := sessionFile()
	g := mustGeometry(t, int64(len(file)), sessionPieceSize)
	type seedResult struct {
		st  sessionStats
		err error
	}
	done := make(chan seedResult, 1)
	go func() {
		st, err := runSeed(t.Context(), seedConn, file, g)
		done <- seedResult{st, err}
	}()
	got, rec, err := runLeecher(t.Context(), leechConn, len(file), g)
	if err != nil {
		t.Fatalf("leecher: %v", err)
	}
	res := <-done
	if res.err != nil {
		t.Fatalf("seed: %v", res.err)
	}
	if !bytes.Equal(got, file) {
		t.Fatal("the leecher's file differs from the seed's")
	}
	if want := []wire.Recommendation{{Addr: netip.MustParseAddrPort("192.0.2.1:7000"), Age: 3 * time.Second}}; len(rec.Peers) != 1 || rec.Peers[0] != want[0] {
		t.Fatalf("recommendations %v, want %v", rec.Peers, want)
	}
	st := res.st
	if st.requests != 5 || st.cancels != 1 || st.haves != 4 || st.starts != 4 ||
		st.goodbye == nil || st.goodbye.Reason != wire.GoodbyeDone {
		t.Fatalf("the seed saw %+v", st)
	}
	seedConn.Close()
	leechConn.Close()
}

func TestSessionOverPipe(t *testing.T) {
	a, b := net.Pipe()
	runSession(t, a, b)
}

func TestSessionOverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	var d net.Dialer
	leech, err := d.DialContext(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	seed, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	runSession(t, seed, leech)
}

// loopReader returns head, then replays b forever.
type loopReader struct {
	head, b []byte
	off     int
}

func (l *loopReader) Read(p []byte) (int, error) {
	if len(l.head) > 0 {
		n := copy(p, l.head)
		l.head = l.head[n:]
		return n, nil
	}
	n := copy(p, l.b[l.off:])
	l.off = (l.off + n) % len(l.b)
	return n, nil
}

// TestDataPathDoesNotAllocate: reading and writing DATA allocate nothing per
// frame once the buffers exist.
func TestDataPathDoesNotAllocate(t *testing.T) {
	g := testGeometry(t)
	payload := make([]byte, wire.MaxData)
	frame := mustFrame(t, &wire.Data{Piece: 1, Offset: 0, Bytes: payload})
	frame = append(frame, mustFrame(t, &wire.Data{Piece: 2, Offset: 100, Bytes: payload[:16*KiB]})...)
	r := wire.NewReader(&loopReader{head: haveSetFrame(t, g), b: frame}, g)
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if m, err := r.Read(); err != nil || m.Type() != wire.TypeData {
			t.Fatalf("Read = %v, %v", m, err)
		}
	}); n != 0 {
		t.Errorf("reading DATA: %v allocations per frame", n)
	}

	w := wire.NewWriter(io.Discard, g)
	if err := w.WriteMessage(&wire.HaveSet{Set: pieceset.Full(11)}); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := w.WriteData(3, 0, payload[:64*KiB]); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteData(3, 0, payload[:100]); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("writing DATA: %v allocations per frame", n)
	}
}

func BenchmarkReadData(b *testing.B) {
	g := testGeometry(b)
	frame := mustFrame(b, &wire.Data{Piece: 1, Offset: 0, Bytes: make([]byte, wire.MaxData)})
	r := wire.NewReader(&loopReader{head: haveSetFrame(b, g), b: frame}, g)
	r.Read()
	b.SetBytes(wire.MaxData)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Read(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTCP moves DATA over loopback TCP: writev on one side, the Reader
// on the other.
func BenchmarkTCP(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Skip(err)
	}
	defer ln.Close()
	g := testGeometry(b)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := wire.NewReader(c, g)
		for {
			if _, err := r.Read(); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	w := wire.NewWriter(c, g)
	w.WriteMessage(&wire.HaveSet{Set: pieceset.Full(11)})
	piece := make([]byte, MiB)
	b.SetBytes(MiB)
	b.ReportAllocs()
	for b.Loop() {
		if err := w.WriteData(0, 0, piece); err != nil {
			b.Fatal(err)
		}
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += n
	return n, err
}

// TestNotifyNeed: before a large payload the Reader says how many bytes it
// still needs from the stream: exactly up to the end of the frame, past
// what it has buffered. Small frames say nothing.
func TestNotifyNeed(t *testing.T) {
	g := testGeometry(t)
	var stream []byte
	var ends []int // where the large DATA frames end in the stream
	add := func(m wire.Message, large bool) {
		stream = append(stream, mustFrame(t, m)...)
		if large {
			ends = append(ends, len(stream))
		}
	}
	stream = append(stream, haveSetFrame(t, g)...)
	add(&wire.Have{Piece: 1}, false)
	add(&wire.Data{Piece: 1, Offset: 0, Bytes: make([]byte, 64*KiB)}, true)
	add(&wire.Data{Piece: 2, Offset: 0, Bytes: make([]byte, 100)}, false)
	add(&wire.Data{Piece: 2, Offset: 100, Bytes: make([]byte, 32*KiB)}, true)
	cr := &countingReader{r: bytes.NewReader(stream)}
	r := wire.NewReader(cr, g)
	var told []int // the stream offsets up to which the Reader said it needed bytes
	r.NotifyNeed(func(n int) { told = append(told, cr.n+n) })
	for {
		_, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(told, ends) {
		t.Errorf("NotifyNeed said the stream must deliver up to %v, the large frames end at %v", told, ends)
	}
}
