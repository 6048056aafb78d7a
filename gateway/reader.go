package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
)

// reader is an io.ReadSeeker over a section of a cached file (the whole
// file, or a member of a bundle) for http.ServeContent: a read waits for
// the piece it needs and returns only verified bytes. Through bodyWriter,
// ServeContent's copy of the body goes from the file to the socket with
// sendfile(2), one run of verified pieces at a time.
//
// ServeContent reads it from one goroutine at a time, but for a multipart
// answer that goroutine is its own and may outlive ServeContent when the
// client goes away: the descriptor and the error are guarded.
type reader struct {
	o          *object
	ctx        context.Context
	base, size int64  // the section: bytes [base, base+size) of the file
	pos        int64  // relative to base
	buf        []byte // a piece, for verifying pieces from an earlier run

	mu     sync.Mutex // guards the following
	f      *os.File
	closed bool
	// err is the first error of a read: the response must be aborted,
	// never ended as if complete.
	err error
}

func newReader(ctx context.Context, o *object, base, size int64) *reader {
	return &reader{o: o, ctx: ctx, base: base, size: size}
}

// close ends the reader; it is called once ServeContent returned.
func (r *reader) close() {
	r.mu.Lock()
	r.closed = true
	if r.f != nil {
		r.f.Close()
	}
	r.mu.Unlock()
	r.o.leave(r) // after closed is set: positionLocked adds no closed reader
}

func (r *reader) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// failure returns the first error of a read, if any.
func (r *reader) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *reader) pieceBuf(n int64) []byte {
	if int64(len(r.buf)) < n {
		r.buf = make([]byte, n)
	}
	return r.buf
}

func (r *reader) file() (*os.File, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("gateway: reader closed")
	}
	if r.f == nil {
		f, err := r.o.openFile()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errLocal, err)
		}
		r.f = f
	}
	return r.f, nil
}

func (r *reader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.size
	default:
		return 0, errors.New("gateway: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("gateway: seek before the start")
	}
	r.pos = offset
	return offset, nil
}

// ready waits for the bytes at the current position and returns how many
// may be read from there without waiting, at most n.
func (r *reader) ready(n int64) (int64, error) {
	abs := r.base + r.pos
	end, err := r.o.await(r.ctx, r, abs)
	if err != nil {
		return 0, r.fail(err)
	}
	return min(end-abs, n, r.size-r.pos), nil
}

func (r *reader) fail(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
	return err
}

func (r *reader) Read(p []byte) (int, error) {
	if r.pos >= r.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := r.ready(int64(len(p)))
	if err != nil {
		return 0, err
	}
	f, err := r.file()
	if err != nil {
		return 0, r.fail(err)
	}
	k, err := f.ReadAt(p[:n], r.base+r.pos)
	r.pos += int64(k)
	if err != nil && k < int(n) {
		return k, r.fail(fmt.Errorf("%w: read: %v", errLocal, err))
	}
	return k, nil
}

// sendTo copies n bytes from the current position to w with w.ReadFrom
// over the file (sendfile on a TCP connection), one run of verified
// pieces at a time.
func (r *reader) sendTo(w io.ReaderFrom, n int64) (int64, error) {
	var sent int64
	for sent < n {
		if r.pos >= r.size {
			return sent, r.fail(io.ErrUnexpectedEOF)
		}
		span, err := r.ready(n - sent)
		if err != nil {
			return sent, err
		}
		f, err := r.file()
		if err != nil {
			return sent, r.fail(err)
		}
		if _, err := f.Seek(r.base+r.pos, io.SeekStart); err != nil {
			return sent, r.fail(fmt.Errorf("%w: %v", errLocal, err))
		}
		k, err := w.ReadFrom(io.LimitReader(f, span))
		sent += k
		r.pos += k
		if err != nil {
			return sent, r.fail(err)
		}
		if k < span {
			return sent, r.fail(fmt.Errorf("%w: the cache file ended early", errLocal))
		}
	}
	return sent, nil
}

// bodyWriter lets ServeContent's body copy (io.CopyN from a reader) take
// the sendfile path of reader.sendTo.
type bodyWriter struct {
	http.ResponseWriter
	rd *reader
}

func (b bodyWriter) ReadFrom(src io.Reader) (int64, error) {
	if lr, ok := src.(*io.LimitedReader); ok && lr.R == io.Reader(b.rd) {
		if rf, ok := b.ResponseWriter.(io.ReaderFrom); ok {
			n, err := b.rd.sendTo(rf, lr.N)
			lr.N -= n
			return n, err
		}
	}
	return io.Copy(writerOnly{b.ResponseWriter}, src)
}

func (b bodyWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// writerOnly hides a writer's ReadFrom, to copy through a buffer.
type writerOnly struct{ io.Writer }

// sizeOnly is a ReadSeeker that knows its size and is never read: it lets
// ServeContent answer HEAD, 304, 412 and 416 without the file.
type sizeOnly int64

func (s sizeOnly) Seek(offset int64, whence int) (int64, error) {
	if whence == io.SeekEnd {
		return int64(s) + offset, nil
	}
	return offset, nil
}

func (sizeOnly) Read([]byte) (int, error) {
	return 0, errors.New("gateway: a header-only answer tried to read the body")
}
