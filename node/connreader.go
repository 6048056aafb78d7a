package node

import (
	"net"
	"syscall"
	"time"
)

// maxLowat bounds the receive low-water mark a connection sets: a DATA
// frame's payload (64 KiB and its header) fits under it.
const maxLowat = 128 << 10

// connReader is what a connection's wire.Reader reads from. It renews the
// idle deadline on every read and, told how many bytes a DATA frame still
// needs (wire.Reader.NotifyNeed), has the socket wake the reader only once
// that many have come (SO_RCVLOWAT) instead of every few segments: at a
// few Mbit/s a 64 KiB frame otherwise costs a wake-up, a read syscall and
// a trip through the Go scheduler per one or two segments, which is where
// much of a crowded machine's CPU goes. It is owned by the reader
// goroutine.
type connReader struct {
	c     net.Conn
	raw   syscall.RawConn // nil: the connection cannot set a low-water mark
	need  int             // bytes the current frame still needs from c
	lowat int             // the socket's low-water mark as last set
}

func newConnReader(c net.Conn) *connReader {
	r := &connReader{c: c, lowat: 1}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			r.raw = raw
		}
	}
	return r
}

// expect is the wire.Reader's NotifyNeed hook.
func (r *connReader) expect(n int) { r.need = n }

func (r *connReader) Read(b []byte) (int, error) {
	r.c.SetReadDeadline(time.Now().Add(idleTimeout))
	// The mark never exceeds what is still needed: waiting for bytes the
	// peer has no reason to send would hang the connection.
	if want := max(1, min(r.need, maxLowat)); want != r.lowat && r.raw != nil {
		if err := setRecvLowat(r.raw, want); err != nil {
			r.raw = nil // unsupported here; reads work as without it
		} else {
			r.lowat = want
		}
	}
	n, err := r.c.Read(b)
	r.need = max(0, r.need-n)
	return n, err
}
