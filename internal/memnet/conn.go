package memnet

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"
)

// maxChunk is the most one write puts in flight in one go: the unit of
// shaping and of latency bookkeeping, as a TCP segment train would be.
const maxChunk = 16 << 10

// stream is one direction of a connection: bytes written at one end, queued
// with the time they may be read, and read at the other end.
type stream struct {
	shape Shape

	mu sync.Mutex // guards the following
	// chunks are the bytes in flight, oldest first; at is non-decreasing.
	chunks    []chunk
	queued    int       // bytes in chunks
	rdeadline time.Time // the reading end's read deadline
	wdeadline time.Time // the writing end's write deadline
	rclosed   bool      // the reading end closed: writes fail, reads fail
	wclosed   bool      // the writing end closed: reads see EOF once drained, from eofAt
	eofAt     time.Time // when the close reaches the reading end (a FIN has latency too)
	// changed is closed (and replaced) on every change of the above, to
	// wake waiting readers and writers.
	changed chan struct{}
	// ctl is closed (and replaced) when the writing end's deadline changes
	// or either end closes: it cuts a wait for bandwidth short.
	ctl chan struct{}
}

type chunk struct {
	b  []byte
	at time.Time // readable from then on
}

func newStream(sh Shape) *stream {
	if sh.Window <= 0 {
		sh.Window = DefaultWindow
	}
	return &stream{shape: sh, changed: make(chan struct{}), ctl: make(chan struct{})}
}

func (s *stream) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *stream) ctlLocked() {
	close(s.ctl)
	s.ctl = make(chan struct{})
}

// wait blocks until ch is closed or, if wake is set, wake has come.
func wait(ch <-chan struct{}, wake time.Time) {
	if wake.IsZero() {
		<-ch
		return
	}
	t := time.NewTimer(time.Until(wake))
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

func (s *stream) read(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.rclosed {
			return 0, net.ErrClosed
		}
		now := time.Now()
		if len(s.chunks) > 0 && !s.chunks[0].at.After(now) {
			n := 0
			for n < len(b) && len(s.chunks) > 0 && !s.chunks[0].at.After(now) {
				c := &s.chunks[0]
				k := copy(b[n:], c.b)
				c.b = c.b[k:]
				n += k
				if len(c.b) == 0 {
					s.chunks[0] = chunk{}
					s.chunks = s.chunks[1:]
				}
			}
			s.queued -= n
			s.broadcastLocked()
			return n, nil
		}
		if len(s.chunks) == 0 && s.wclosed && !now.Before(s.eofAt) {
			return 0, io.EOF
		}
		if !s.rdeadline.IsZero() && !now.Before(s.rdeadline) {
			return 0, os.ErrDeadlineExceeded
		}
		var wake time.Time
		switch {
		case len(s.chunks) > 0:
			wake = s.chunks[0].at
		case s.wclosed:
			wake = s.eofAt
		}
		if !s.rdeadline.IsZero() && (wake.IsZero() || s.rdeadline.Before(wake)) {
			wake = s.rdeadline
		}
		ch := s.changed
		s.mu.Unlock()
		wait(ch, wake)
		s.mu.Lock()
	}
}

// writeErrLocked is why a write cannot go on now, if it cannot.
func (s *stream) writeErrLocked(now time.Time) error {
	switch {
	case s.wclosed:
		return net.ErrClosed
	case s.rclosed:
		return ErrReset
	case !s.wdeadline.IsZero() && !now.Before(s.wdeadline):
		return os.ErrDeadlineExceeded
	}
	return nil
}

func (s *stream) write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k := min(len(b)-n, maxChunk, s.shape.Window)
		if err := s.limit(k); err != nil {
			return n, err
		}
		s.mu.Lock()
		for {
			now := time.Now()
			if err := s.writeErrLocked(now); err != nil {
				s.mu.Unlock()
				return n, err
			}
			if s.queued == 0 || s.queued+k <= s.shape.Window {
				break
			}
			ch, wake := s.changed, s.wdeadline
			s.mu.Unlock()
			wait(ch, wake)
			s.mu.Lock()
		}
		s.chunks = append(s.chunks, chunk{b: append([]byte(nil), b[n:n+k]...), at: time.Now().Add(s.shape.Latency)})
		s.queued += k
		s.broadcastLocked()
		s.mu.Unlock()
		n += k
	}
	return n, nil
}

// limit waits until k bytes may pass every token bucket of the shape, or the
// write must fail (a close, a deadline).
func (s *stream) limit(k int) error {
	for _, l := range s.shape.Limits {
		if l == nil {
			continue
		}
		for {
			s.mu.Lock()
			if err := s.writeErrLocked(time.Now()); err != nil {
				s.mu.Unlock()
				return err
			}
			dl, ctl := s.wdeadline, s.ctl
			s.mu.Unlock()
			ctx, cancel := context.WithCancel(context.Background())
			var t *time.Timer
			if !dl.IsZero() {
				t = time.AfterFunc(time.Until(dl), cancel)
			}
			done := make(chan struct{})
			go func() {
				select {
				case <-ctl:
					cancel()
				case <-done:
				}
			}()
			err := l.WaitN(ctx, k)
			close(done)
			cancel()
			if t != nil {
				t.Stop()
			}
			if err == nil {
				break
			}
			// Cut short: the loop finds out why (or waits again if the
			// deadline only moved).
		}
	}
	return nil
}

// conn is one end of a connection. It implements net.Conn.
type conn struct {
	local, remote *net.TCPAddr
	in, out       *stream

	rmu, wmu sync.Mutex // serialize Reads and Writes, as net.TCPConn does
	once     sync.Once
}

func newConn(local, remote netip.AddrPort, in, out *stream) *conn {
	return &conn{local: tcpAddr(local), remote: tcpAddr(remote), in: in, out: out}
}

func (c *conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	n, err := c.in.read(b)
	if err != nil && err != io.EOF {
		err = &net.OpError{Op: "read", Net: "memnet", Source: c.local, Addr: c.remote, Err: err}
	}
	return n, err
}

func (c *conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n, err := c.out.write(b)
	if err != nil {
		err = &net.OpError{Op: "write", Net: "memnet", Source: c.local, Addr: c.remote, Err: err}
	}
	return n, err
}

// Close closes both directions at this end: the other end reads what was
// already sent, then EOF (no sooner than the latency after the Close), and
// its writes fail with ErrReset.
func (c *conn) Close() error {
	c.once.Do(func() {
		c.in.mu.Lock()
		c.in.rclosed = true
		c.in.chunks, c.in.queued = nil, 0
		c.in.broadcastLocked()
		c.in.ctlLocked()
		c.in.mu.Unlock()

		c.out.mu.Lock()
		c.out.wclosed = true
		c.out.eofAt = time.Now().Add(c.out.shape.Latency)
		c.out.broadcastLocked()
		c.out.ctlLocked()
		c.out.mu.Unlock()
	})
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.in.mu.Lock()
	c.in.rdeadline = t
	c.in.broadcastLocked()
	c.in.mu.Unlock()
	return nil
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.out.mu.Lock()
	c.out.wdeadline = t
	c.out.broadcastLocked()
	c.out.ctlLocked()
	c.out.mu.Unlock()
	return nil
}
