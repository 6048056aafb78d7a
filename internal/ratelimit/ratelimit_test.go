package ratelimit_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/ratelimit"
)

const (
	MiB  = 1 << 20
	rate = 4 * MiB // bytes per second
	// burst is what New gives rate: a tenth of a second of traffic (more
	// than the 16 KiB chunk). The bucket starts full.
	burst = rate / 10
)

// minDuration is the least time n bytes can take through a fresh limiter:
// the first burst passes at once, the rest at the rate.
func minDuration(n int) time.Duration {
	return time.Duration(float64(n-burst) / rate * float64(time.Second))
}

func TestNewUnlimited(t *testing.T) {
	for _, r := range []int64{0, -1, -1 << 40} {
		if l := ratelimit.New(r); l != nil {
			t.Errorf("New(%d) = %v, want nil (unlimited)", r, l)
		}
	}
	if ratelimit.New(1) == nil {
		t.Error("New(1) = nil, want a limiter")
	}
}

func TestNilPassesThrough(t *testing.T) {
	var l *ratelimit.Limiter
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a nil limiter never waits, so it never looks at ctx
	if err := l.WaitN(ctx, 1<<40); err != nil {
		t.Errorf("nil WaitN: %v", err)
	}

	// The very same writer and reader come back, so io.Copy still finds
	// *os.File's ReadFrom (sendfile, copy_file_range) and WriteTo.
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if w := l.Writer(ctx, f); w != io.Writer(f) {
		t.Errorf("nil Writer returned %T %p, want the *os.File %p itself", w, w, f)
	}
	if r := l.Reader(ctx, f); r != io.Reader(f) {
		t.Errorf("nil Reader returned %T %p, want the *os.File %p itself", r, r, f)
	}
	var buf bytes.Buffer
	if w := l.Writer(ctx, &buf); w != io.Writer(&buf) {
		t.Errorf("nil Writer returned %T, want the *bytes.Buffer itself", w)
	}
}

// timedWriter records when each byte count arrived, on the (bubble's) clock.
type timedWriter struct {
	start time.Time
	mu    sync.Mutex // guards the following
	n     int
	marks []mark
}

type mark struct {
	at time.Duration
	n  int // total so far
}

func (w *timedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += len(p)
	w.marks = append(w.marks, mark{time.Since(w.start), w.n})
	return len(p), nil
}

// checkShaped fails if more bytes arrived by some time than the bucket
// allows: burst, plus the rate for the time since the start.
func checkShaped(t *testing.T, w *timedWriter) {
	t.Helper()
	for _, m := range w.marks {
		if allowed := burst + int(m.at.Seconds()*rate) + 1; m.n > allowed {
			t.Fatalf("%d bytes through after %v; the bucket allows %d", m.n, m.at, allowed)
		}
	}
}

// The limiter runs on the bubble's fake clock, so times are exact: 1 MiB at
// 4 MiB/s with a 0.4 MiB burst takes 0.15s, not a nanosecond less and not
// much more.
func TestWriterRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ratelimit.New(rate)
		out := &timedWriter{start: time.Now()}
		n, err := io.Copy(l.Writer(t.Context(), out), bytes.NewReader(make([]byte, MiB)))
		if err != nil || n != MiB {
			t.Fatalf("copied %d, %v", n, err)
		}
		elapsed := time.Since(out.start)
		if want := minDuration(MiB); elapsed < want || elapsed > want+time.Millisecond {
			t.Errorf("1 MiB at 4 MiB/s took %v, want %v", elapsed, want)
		}
		checkShaped(t, out)
		for i, m := range out.marks {
			if i > 0 && m.n-out.marks[i-1].n > 16<<10 {
				t.Fatalf("one write of %d bytes; the writer should pass at most 16 KiB at a time", m.n-out.marks[i-1].n)
			}
		}
	})
}

func TestReaderRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ratelimit.New(rate)
		out := &timedWriter{start: time.Now()}
		r := l.Reader(t.Context(), bytes.NewReader(make([]byte, MiB)))
		n, err := io.CopyBuffer(out, r, make([]byte, 64<<10))
		if err != nil || n != MiB {
			t.Fatalf("copied %d, %v", n, err)
		}
		elapsed := time.Since(out.start)
		if want := minDuration(MiB); elapsed < want || elapsed > want+time.Millisecond {
			t.Errorf("1 MiB at 4 MiB/s took %v, want %v", elapsed, want)
		}
		checkShaped(t, out)
	})
}

// Streams sharing a limiter share its rate: four streams of 256 KiB take as
// long together as one of 1 MiB.
func TestStreamsShareTheRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ratelimit.New(rate)
		out := &timedWriter{start: time.Now()}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if _, err := l.Writer(t.Context(), out).Write(make([]byte, MiB/4)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(out.start)
		if want := minDuration(MiB); elapsed < want || elapsed > want+time.Millisecond {
			t.Errorf("4 x 256 KiB at 4 MiB/s took %v, want %v", elapsed, want)
		}
		checkShaped(t, out)
	})
}

// The same measurement on the real clock: the lower bound is what the
// limiter guarantees; the upper bound leaves room for a loaded machine (a
// late wake-up does not add up, since the bucket refills meanwhile).
func TestWriterRateRealClock(t *testing.T) {
	l := ratelimit.New(rate)
	start := time.Now()
	n, err := io.Copy(l.Writer(t.Context(), io.Discard), bytes.NewReader(make([]byte, MiB)))
	elapsed := time.Since(start)
	if err != nil || n != MiB {
		t.Fatalf("copied %d, %v", n, err)
	}
	if lo, hi := minDuration(MiB)-time.Millisecond, minDuration(MiB)+350*time.Millisecond; elapsed < lo || elapsed > hi {
		t.Errorf("1 MiB at 4 MiB/s took %v, want between %v and %v", elapsed, lo, hi)
	}
}

func TestWaitNCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ratelimit.New(MiB) // burst 0.1 MiB
		ctx, cancel := context.WithCancel(t.Context())
		if err := l.WaitN(ctx, MiB/10); err != nil { // empties the bucket
			t.Fatal(err)
		}
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- l.WaitN(ctx, MiB) }()
		synctest.Wait() // blocked on its timer
		select {
		case err := <-done:
			t.Fatalf("WaitN of a second's worth returned at once: %v", err)
		default:
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("WaitN after cancel: %v, want context.Canceled", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("WaitN returned %v after the cancel, want at once", d)
		}

		// Already cancelled: no wait at all.
		if err := l.WaitN(ctx, 1); !errors.Is(err, context.Canceled) {
			t.Errorf("WaitN with a cancelled context: %v, want context.Canceled", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("WaitN with a cancelled context waited %v", d)
		}
	})
}

// A cancelled Write reports exactly the bytes that reached the writer below.
func TestWriterCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ratelimit.New(MiB)
		ctx, cancel := context.WithCancel(t.Context())
		out := &timedWriter{start: time.Now()}
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() {
			n, err := l.Writer(ctx, out).Write(make([]byte, 10*MiB))
			done <- result{n, err}
		}()
		time.Sleep(500 * time.Millisecond) // fake time: lets half a second of traffic through
		cancel()
		r := <-done
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("Write after cancel: %v, want context.Canceled", r.err)
		}
		if r.n != out.n {
			t.Errorf("Write reported %d bytes, the writer below got %d", r.n, out.n)
		}
		if lo, hi := MiB/10+MiB/2-16<<10, MiB/10+MiB/2+16<<10; r.n < lo || r.n > hi {
			t.Errorf("%d bytes passed in half a second at 1 MiB/s (0.1 MiB burst), want about %d", r.n, MiB/10+MiB/2)
		}
	})
}

// A context deadline that comes before the bytes may pass is a deadline
// error, as for any blocking call: callers test errors.Is(err,
// context.DeadlineExceeded). x/time/rate instead returns an unwrapped
// "rate: Wait(n=...) would exceed context deadline" at once, and WaitN passes
// it on as it is.
func TestWaitNDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ratelimit.New(MiB)
		if err := l.WaitN(t.Context(), MiB/10); err != nil { // empties the bucket
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		if err := l.WaitN(ctx, MiB/10); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitN needing 100ms with 50ms left: %v, want context.DeadlineExceeded", err)
		}
	})
}
