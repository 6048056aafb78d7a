package wire

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
)

const (
	// flushThreshold: buffered control frames past this are written at once.
	flushThreshold = 32 << 10
	// copyDataBelow: DATA payloads shorter than this are copied into the
	// buffer (cheaper than a writev of their own).
	copyDataBelow = 2 << 10
	// dataHeaderLen is DATA's length, type, piece and offset.
	dataHeaderLen = 4 + 1 + 4 + 4
)

// Writer writes the frames that follow the handshake. It buffers control
// frames until Flush (or until enough are buffered), and writes DATA payloads
// without copying them: the buffered frames and DATA's header go out with the
// payload in one writev when w is a *net.TCPConn (net.Buffers), in two writes
// otherwise.
//
// It checks every message against the swarm's geometry and the frame order
// (HAVESET first and once), so a local bug fails here instead of as a
// protocol error at the peer. After a write error every call returns that
// error: the stream is no longer in step.
//
// It is not safe for concurrent use: one goroutine (the connection's writer
// loop) owns it, writing what its send queue holds and flushing when the
// queue is empty.
type Writer struct {
	w   io.Writer
	g   Geometry
	buf []byte
	iov [2][]byte   // backing array of bufs, so a writev does not allocate
	vec net.Buffers // consumed by each WriteTo

	sentHaveSet bool
	err         error
}

// NewWriter returns a Writer of frames to w (positioned right after the
// handshake) in a swarm of geometry g.
func NewWriter(w io.Writer, g Geometry) *Writer {
	return &Writer{w: w, g: g}
}

// Buffered is the number of bytes written to the Writer but not yet to w.
func (w *Writer) Buffered() int { return len(w.buf) }

// WriteMessage writes m: a DATA as WriteData does, anything else into the
// buffer.
func (w *Writer) WriteMessage(m Message) error {
	if w.err != nil {
		return w.err
	}
	if d, ok := m.(*Data); ok {
		if len(d.Bytes) > MaxData {
			return fmt.Errorf("wire: DATA of %d bytes, at most %d (WriteData splits)", len(d.Bytes), MaxData)
		}
		return w.WriteData(d.Piece, d.Offset, d.Bytes)
	}
	if err := w.order(m.Type()); err != nil {
		return err
	}
	if err := m.check(&w.g); err != nil {
		return fmt.Errorf("wire: refusing to send: %w", err)
	}
	b, err := AppendFrame(w.buf, m)
	if err != nil {
		return err
	}
	w.buf = b
	if m.Type() == TypeHaveSet {
		w.sentHaveSet = true
	}
	if len(w.buf) >= flushThreshold {
		return w.Flush()
	}
	return nil
}

// order checks that a frame of type t may be sent now.
func (w *Writer) order(t Type) error {
	switch {
	case !w.sentHaveSet && t != TypeHaveSet && t != TypeKeepAlive && t != TypeGoodbye:
		return fmt.Errorf("wire: refusing to send %v before HAVESET", t)
	case w.sentHaveSet && t == TypeHaveSet:
		return fmt.Errorf("wire: refusing to send a second HAVESET")
	}
	return nil
}

// WriteData sends p, the bytes of piece from offset, as DATA frames of at
// most MaxData bytes at increasing offsets, together with everything
// buffered before. It does not keep p; it copies only payloads shorter than
// 2 KiB, which it may leave buffered until Flush.
func (w *Writer) WriteData(piece, offset uint32, p []byte) error {
	if w.err != nil {
		return w.err
	}
	if err := w.order(TypeData); err != nil {
		return err
	}
	if err := w.g.checkRange(TypeData, piece, offset, int64(len(p))); err != nil {
		return fmt.Errorf("wire: refusing to send: %w", err)
	}
	for len(p) > 0 {
		chunk := p[:min(len(p), MaxData)]
		w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(dataHeaderLen-4+len(chunk)))
		w.buf = append(w.buf, byte(TypeData))
		w.buf = binary.BigEndian.AppendUint32(w.buf, piece)
		w.buf = binary.BigEndian.AppendUint32(w.buf, offset)
		if len(chunk) < copyDataBelow {
			w.buf = append(w.buf, chunk...)
			if len(w.buf) >= flushThreshold {
				if err := w.Flush(); err != nil {
					return err
				}
			}
		} else if err := w.writev(chunk); err != nil {
			return err
		}
		p, offset = p[len(chunk):], offset+uint32(len(chunk))
	}
	return nil
}

// writev writes the buffer, then payload, and empties the buffer.
func (w *Writer) writev(payload []byte) error {
	w.iov = [2][]byte{w.buf, payload}
	w.vec = w.iov[:]
	_, err := w.vec.WriteTo(w.w)
	w.iov = [2][]byte{} // keep no reference to payload
	w.vec = nil
	w.reset()
	if err != nil {
		w.err = fmt.Errorf("wire: write: %w", err)
	}
	return w.err
}

// Flush writes everything buffered.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.w.Write(w.buf)
	w.reset()
	if err != nil {
		w.err = fmt.Errorf("wire: write: %w", err)
	}
	return w.err
}

// reset empties the buffer, dropping it if a HAVESET made it large.
func (w *Writer) reset() {
	if cap(w.buf) > 4*flushThreshold {
		w.buf = nil
		return
	}
	w.buf = w.buf[:0]
}
