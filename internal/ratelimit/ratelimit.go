// Package ratelimit shapes byte streams with a token bucket shared by every
// stream that uses the same Limiter: the origin's --rate, the downloader's
// --limit-rate, and later the testbed's per-host caps.
package ratelimit

import (
	"context"
	"fmt"
	"io"

	"golang.org/x/time/rate"
)

// chunk is the most a single wait asks for: small enough that concurrent
// streams interleave fairly, large enough to keep syscalls few.
const chunk = 16 << 10

// Limiter caps the total byte rate of the streams wrapped with it. A nil
// *Limiter does not limit.
type Limiter struct {
	lim *rate.Limiter
}

// New returns a Limiter for bytesPerSec; 0 or less means unlimited (nil).
func New(bytesPerSec int64) *Limiter {
	if bytesPerSec <= 0 {
		return nil
	}
	// The burst is one chunk or a tenth of a second of traffic, whichever is
	// larger: a short burst keeps the shaping accurate on small time scales.
	burst := max(chunk, int(bytesPerSec/10))
	return &Limiter{lim: rate.NewLimiter(rate.Limit(bytesPerSec), burst)}
}

// WaitN blocks until n bytes may pass, in burst-sized steps.
func (l *Limiter) WaitN(ctx context.Context, n int) error {
	if l == nil {
		return nil
	}
	for n > 0 {
		k := min(n, l.lim.Burst())
		if err := l.lim.WaitN(ctx, k); err != nil {
			if ctx.Err() == nil {
				// x/time/rate refuses at once a wait that would outlast
				// the deadline; report it as the deadline it is.
				return fmt.Errorf("ratelimit: %w", context.DeadlineExceeded)
			}
			return err
		}
		n -= k
	}
	return nil
}

// Writer returns w shaped by l; w itself when l is nil, so an unlimited
// path keeps io.ReaderFrom fast paths such as sendfile.
func (l *Limiter) Writer(ctx context.Context, w io.Writer) io.Writer {
	if l == nil {
		return w
	}
	return &writer{ctx: ctx, l: l, w: w}
}

// Reader returns r shaped by l; r itself when l is nil.
func (l *Limiter) Reader(ctx context.Context, r io.Reader) io.Reader {
	if l == nil {
		return r
	}
	return &reader{ctx: ctx, l: l, r: r}
}

type writer struct {
	ctx context.Context
	l   *Limiter
	w   io.Writer
}

func (w *writer) Write(p []byte) (int, error) {
	var n int
	for len(p) > 0 {
		k := min(len(p), chunk)
		if err := w.l.WaitN(w.ctx, k); err != nil {
			return n, err
		}
		m, err := w.w.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

type reader struct {
	ctx context.Context
	l   *Limiter
	r   io.Reader
}

func (r *reader) Read(p []byte) (int, error) {
	if len(p) > chunk {
		p = p[:chunk]
	}
	n, err := r.r.Read(p)
	if n > 0 {
		if werr := r.l.WaitN(r.ctx, n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}
