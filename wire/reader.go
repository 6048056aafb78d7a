package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// readBufferSize is the Reader's bufio size: many small frames per read
// syscall, while DATA payloads (larger) are read straight into place.
const readBufferSize = 16 << 10

// Reader reads the frames that follow the handshake, checking each against
// the swarm's geometry and the frame order. It is not safe for concurrent
// use: one goroutine (the connection's reader loop) owns it.
type Reader struct {
	br   *bufio.Reader
	g    Geometry
	buf  []byte // payload of the current frame; grows to the largest seen
	data Data   // the DATA message handed out, reused

	// need, if set, hears how many bytes a large payload still needs
	// from the stream (see NotifyNeed).
	need func(n int)

	gotHaveSet bool
	skipped    int64
	err        error
}

// needHint is the smallest rest of a payload worth a NotifyNeed call: a
// small frame arrives in one or two segments anyway.
const needHint = 8 << 10

// NotifyNeed has the Reader call f before it reads the rest of a frame
// payload of needHint bytes or more (DATA frames, a large HAVESET) from its
// stream, with the number of bytes the frame still needs beyond what the
// Reader has buffered. A stream that
// can wait for that many bytes before waking its reader (a TCP socket's
// SO_RCVLOWAT) then costs one wake-up per frame instead of one per few
// segments. f must count the bytes the stream delivers and never wait for
// more than are still needed: the Reader does not call f again when the
// frame is complete.
func (r *Reader) NotifyNeed(f func(n int)) { r.need = f }

// NewReader returns a Reader of frames from r (positioned right after the
// handshake) in a swarm of geometry g. It reads through a bufio.Reader, so it
// may read past the frame it returns: after NewReader, read r only through
// the Reader.
func NewReader(r io.Reader, g Geometry) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, readBufferSize), g: g}
}

// Skipped is the number of frames of unknown type skipped so far.
func (r *Reader) Skipped() int64 { return r.skipped }

// Read reads the next frame and returns its message: one of the pointer
// types of this package (*Have, *Data, ...). Frames of unknown type are
// skipped. A *Data and its Bytes belong to the Reader and stay valid until
// the next call; every other message is the caller's.
//
// At the end of the stream between frames Next returns io.EOF; a stream that
// ends inside a frame is io.ErrUnexpectedEOF. A frame that breaks the
// protocol returns an error wrapping ErrMalformed. Errors are sticky: after
// one, Read returns it again, since the stream is no longer in step.
func (r *Reader) Read() (Message, error) {
	if r.err != nil {
		return nil, r.err
	}
	m, err := r.next()
	if err != nil {
		r.err = err
		return nil, err
	}
	return m, nil
}

func (r *Reader) next() (Message, error) {
	for {
		hdr, err := r.br.Peek(4)
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(hdr) == 0 {
					return nil, io.EOF
				}
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("wire: reading a frame length: %w", err)
		}
		l := binary.BigEndian.Uint32(hdr)
		if l == 0 || l > MaxFrame {
			return nil, malformed("frame length %d outside [1, %d]", l, MaxFrame)
		}
		r.br.Discard(4) // cannot fail: peeked
		tb, err := r.br.ReadByte()
		if err != nil {
			return nil, truncated(err)
		}
		t, n := Type(tb), int(l-1)
		if !t.known() {
			if _, err := r.br.Discard(n); err != nil {
				return nil, truncated(err)
			}
			r.skipped++
			continue
		}
		if err := checkPayloadLen(t, n); err != nil {
			return nil, err
		}
		switch {
		case !r.gotHaveSet && t != TypeHaveSet && t != TypeKeepAlive && t != TypeGoodbye:
			return nil, malformed("%v before HAVESET", t)
		case r.gotHaveSet && t == TypeHaveSet:
			return nil, malformed("a second HAVESET")
		}
		if t == TypeData {
			return r.readData(n)
		}
		p, err := r.readPayload(n)
		if err != nil {
			return nil, err
		}
		m, err := decodePayload(t, p, &r.g)
		if err != nil {
			return nil, err
		}
		if t == TypeHaveSet {
			r.gotHaveSet = true
		}
		return m, nil
	}
}

// readPayload reads n bytes into the Reader's buffer.
func (r *Reader) readPayload(n int) ([]byte, error) {
	if cap(r.buf) < n {
		// Grow in powers of two so a connection settles on one buffer.
		c := 256
		for c < n {
			c *= 2
		}
		r.buf = make([]byte, min(c, MaxFrame))
	}
	p := r.buf[:n]
	if rest := n - r.br.Buffered(); r.need != nil && rest >= needHint {
		r.need(rest)
	}
	if _, err := io.ReadFull(r.br, p); err != nil {
		return nil, truncated(err)
	}
	return p, nil
}

// readData reads a DATA payload of n bytes into the reused message.
func (r *Reader) readData(n int) (Message, error) {
	p, err := r.readPayload(n)
	if err != nil {
		return nil, err
	}
	r.data = Data{
		Piece:  binary.BigEndian.Uint32(p),
		Offset: binary.BigEndian.Uint32(p[4:]),
		Bytes:  p[8:],
	}
	if err := r.data.check(&r.g); err != nil {
		r.data = Data{}
		return nil, err
	}
	return &r.data, nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("wire: reading a frame: %w", err)
}
