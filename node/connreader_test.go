//go:build linux

package node

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/internal/sockopt"
	"github.com/stampede-dev/stampede/internal/tcptest"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/wire"
)

// TestConnReaderWakesOncePerFrame sends a 64 KiB frame's payload in 1 KiB
// writes a millisecond apart, as a slow link would deliver it: told the
// frame needs 64 KiB, the reader gets it in a few reads, not one per write.
func TestConnReaderWakesOncePerFrame(t *testing.T) {
	if !sockopt.RecvLowatSafe {
		t.Skip("SO_RCVLOWAT is not used on this system")
	}
	const size, step = 64 << 10, 1 << 10
	for _, tc := range []struct {
		name     string
		expect   bool
		maxReads int
	}{
		{"told", true, 4},
		{"not told", false, size / step},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, c := tcptest.Pair(t)
			go func() {
				b := make([]byte, step)
				for range size / step {
					if _, err := w.Write(b); err != nil {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
			r := newConnReader(c)
			if tc.expect {
				r.expect(size)
			}
			buf := make([]byte, size)
			reads, got := 0, 0
			for got < size {
				n, err := r.Read(buf[got:])
				if err != nil {
					t.Fatalf("read after %d bytes: %v", got, err)
				}
				got += n
				reads++
			}
			t.Logf("%d reads", reads)
			if tc.expect && reads > tc.maxReads {
				t.Errorf("%d reads for a 64 KiB frame, want at most %d", reads, tc.maxReads)
			}
			if !tc.expect && reads < 8 {
				// A loaded machine merged the writes: this control run
				// shows nothing, which is no fault of the code.
				t.Skipf("only %d reads without the hint: the writes were merged", reads)
			}
		})
	}
}

// queued reports the bytes waiting in c's receive queue (SIOCINQ).
func queued(t *testing.T, c net.Conn) int {
	t.Helper()
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var qerr error
	raw.Control(func(fd uintptr) { n, qerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	if qerr != nil {
		t.Fatal(qerr)
	}
	return n
}

// TestConnReaderNeverWaitsPastTheFrame: the low-water mark follows the
// bytes still needed down. A frame's first 30 KiB are queued before the
// reader is told it needs 40 KiB; it reads them, and must then wait for
// only the 10 KiB left, which come after a pause and are followed by
// silence. A mark left at 40 KiB would never wake it.
func TestConnReaderNeverWaitsPastTheFrame(t *testing.T) {
	if !sockopt.RecvLowatSafe {
		t.Skip("SO_RCVLOWAT is not used on this system")
	}
	w, c := tcptest.Pair(t)
	if _, err := w.Write(make([]byte, 30<<10)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); queued(t, c) < 30<<10; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d bytes queued", queued(t, c))
		}
	}
	r := newConnReader(c)
	r.idle = 3 * time.Second // a hang fails the test quickly
	r.expect(40 << 10)
	buf := make([]byte, 64<<10)
	n, err := r.Read(buf)
	if err != nil || n != 30<<10 {
		t.Fatalf("first read: %d bytes, %v; want the 30 KiB queued", n, err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		w.Write(make([]byte, 10<<10)) // the rest, then silence
	}()
	got := 0
	for got < 10<<10 {
		n, err := r.Read(buf)
		if err != nil {
			t.Fatalf("reading the frame's last %d bytes after %d: %v", 10<<10, got, err)
		}
		got += n
	}
	// Between frames the mark is back at 1: a lone small frame wakes us.
	go w.Write([]byte{1, 2, 3})
	n, err = io.ReadAtLeast(r, buf, 3)
	if err != nil || n != 3 {
		t.Fatalf("small frame after the large one: %d bytes, %v", n, err)
	}
}

// TestConnReaderFrames runs the reading path of a connection over loopback
// TCP: frames of every size, DATA trickling in 1 KiB writes, through a
// download limiter (reads of 16 KiB at most) into a wire.Reader, and a last
// small frame followed by silence, which must be read at once.
func TestConnReaderFrames(t *testing.T) {
	const pieceSize = 256 << 10
	g, err := wire.NewGeometry(4*pieceSize, pieceSize)
	if err != nil {
		t.Fatal(err)
	}
	w, c := tcptest.Pair(t)
	msgs := []wire.Message{
		&wire.HaveSet{Set: pieceset.New(4)},
		&wire.Have{Piece: 1},
		&wire.Data{Piece: 0, Offset: 0, Bytes: make([]byte, 64<<10)},
		&wire.Request{Piece: 2, Length: pieceSize},
		&wire.Data{Piece: 0, Offset: 64 << 10, Bytes: make([]byte, 20<<10)},
		&wire.Data{Piece: 0, Offset: 84 << 10, Bytes: make([]byte, 100)},
		&wire.Have{Piece: 3}, // last, then silence
	}
	var stream []byte
	for _, m := range msgs {
		if stream, err = wire.AppendFrame(stream, m); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		for b := stream; len(b) > 0; {
			k := min(len(b), 1<<10)
			if _, err := w.Write(b[:k]); err != nil {
				return
			}
			b = b[k:]
			time.Sleep(200 * time.Microsecond)
		}
	}()
	cr := newConnReader(c)
	cr.idle = 3 * time.Second // a hang fails the test quickly
	r := wire.NewReader(ratelimit.New(1<<30).Reader(t.Context(), cr), g)
	r.NotifyNeed(cr.expect)
	for i, want := range msgs {
		m, err := r.Read()
		if err != nil {
			t.Fatalf("frame %d (%T): %v", i, want, err)
		}
		if m.Type() != want.Type() {
			t.Fatalf("frame %d: %v, want %v", i, m.Type(), want.Type())
		}
		if d, ok := m.(*wire.Data); ok && len(d.Bytes) != len(want.(*wire.Data).Bytes) {
			t.Fatalf("frame %d: DATA of %d bytes, want %d", i, len(d.Bytes), len(want.(*wire.Data).Bytes))
		}
	}
}
