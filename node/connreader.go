package node

import (
	"net"
	"syscall"
	"time"

	"github.com/stampede-dev/stampede/internal/sockopt"
)

// maxLowat bounds the receive low-water mark a connection sets: a DATA
// frame's payload (64 KiB and its header) fits under it.
const maxLowat = 128 << 10

// connReader is what a connection's wire.Reader reads from. It renews the
// idle deadline on every read and, told how many bytes a DATA frame still
// needs (wire.Reader.NotifyNeed), has the socket wake the reader only once
// that many have come (SO_RCVLOWAT, where sockopt.RecvLowatSafe) instead
// of every segment or two: at a few Mbit/s a 64 KiB frame otherwise costs a
// wake-up, a read syscall and a trip through the Go scheduler per one or
// two segments, which is where much of a crowded machine's CPU goes. Since
// the deadline is renewed per wake-up, a frame must now come whole within
// the idle timeout (below about 550 bytes/s it would not). It is owned by
// the reader goroutine.
type connReader struct {
	c     net.Conn
	idle  time.Duration
	raw   syscall.RawConn // nil: the connection does not set a low-water mark
	need  int             // bytes the current frame still needs from c
	lowat int             // the socket's low-water mark as last set
}

func newConnReader(c net.Conn) *connReader {
	r := &connReader{c: c, idle: idleTimeout, lowat: 1}
	if sc, ok := c.(syscall.Conn); ok && sockopt.RecvLowatSafe {
		if raw, err := sc.SyscallConn(); err == nil {
			r.raw = raw
		}
	}
	return r
}

// expect is the wire.Reader's NotifyNeed hook.
func (r *connReader) expect(n int) { r.need = n }

func (r *connReader) Read(b []byte) (int, error) {
	r.c.SetReadDeadline(time.Now().Add(r.idle))
	// The mark never exceeds what is still needed: waiting for bytes the
	// peer has no reason to send would hang the connection.
	if want := max(1, min(r.need, maxLowat)); want != r.lowat && r.raw != nil {
		if err := sockopt.RecvLowat(r.raw, want); err != nil {
			// Do without; make sure no mark is left behind.
			sockopt.RecvLowat(r.raw, 1)
			r.raw = nil
		} else {
			r.lowat = want
		}
	}
	n, err := r.c.Read(b)
	r.need = max(0, r.need-n)
	return n, err
}
