package fetch

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestWindowStart(t *testing.T) {
	tests := []struct{ start, max, want int }{
		{2, 16, 2},
		{1, 16, 1},
		{0, 16, 1},
		{-3, 16, 1},
		{20, 16, 16},
		{5, 0, 1},
	}
	for _, tt := range tests {
		if got := newWindow(tt.start, tt.max, time.Second).size(); got != tt.want {
			t.Errorf("newWindow(%d, %d).size() = %d, want %d", tt.start, tt.max, got, tt.want)
		}
	}
}

// fasterEachTime feeds n samples, each faster than every one before and so
// faster than the average.
func fasterEachTime(w *window, n int) {
	for range n {
		w.completed(time.Second - time.Duration(w.samples)*time.Millisecond)
	}
}

func TestWindowGrowth(t *testing.T) {
	w := newWindow(1, 1000, time.Second)
	// By hand: +1 while w <= e, then w += 1/ln(w).
	want := []float64{1, 2, 3, 3.910239, 4.643593, 5.294851, 5.894827, 6.458501, 6.994580, 7.508683, 8.004700}
	for k, v := range want {
		if math.Abs(w.w-v) > 1e-5 {
			t.Fatalf("after %d fast pieces w = %.6f, want %.6f", k, w.w, v)
		}
		fasterEachTime(w, 1)
	}
	// The rise flattens: from 8, each fast piece adds less than half a slot.
	prev := w.w
	for range 100 {
		fasterEachTime(w, 1)
		if inc := w.w - prev; inc <= 0 || inc >= 0.5 {
			t.Fatalf("w went from %.4f to %.4f on a fast piece", prev, w.w)
		}
		prev = w.w
	}
}

func TestWindowNeverAboveMax(t *testing.T) {
	w := newWindow(1, 4, time.Second)
	fasterEachTime(w, 200)
	if w.w != 4 || w.size() != 4 {
		t.Errorf("after 200 fast pieces w = %v, size %d; want exactly the max, 4", w.w, w.size())
	}
	w.missed()
	fasterEachTime(w, 1)
	if w.w > 4 {
		t.Errorf("w = %v above the max after a miss and a fast piece", w.w)
	}
}

func TestWindowSlowPieceDoesNotGrow(t *testing.T) {
	w := newWindow(3, 16, time.Second)
	w.completed(100 * time.Millisecond) // first sample: fast by definition
	before := w.w
	for _, d := range []time.Duration{100 * time.Millisecond, 150 * time.Millisecond, 110 * time.Millisecond, time.Second} {
		if d < w.avg {
			t.Fatalf("test bug: %v is faster than the average %v", d, w.avg)
		}
		w.completed(d) // as slow as the average (the first) or slower
		if w.w != before {
			t.Fatalf("a %v piece (average %v) moved w from %v to %v", d, w.avg, before, w.w)
		}
	}
	// The average is now well above 100ms, so 100ms is fast again.
	w.completed(100 * time.Millisecond)
	if w.w <= before {
		t.Errorf("a piece faster than the average %v did not grow w (%v)", w.avg, w.w)
	}
}

func TestWindowMissed(t *testing.T) {
	w := newWindow(1, 16, time.Second)
	fasterEachTime(w, 4) // 1, 2, 3, 3.91, 4.64
	before := w.w
	w.missed()
	if got := before - w.w; math.Abs(got-1) > 1e-12 {
		t.Errorf("missed took %v off w, want exactly 1", got)
	}
	// A second miss takes 4.64 down to 2.64, below e: a fast piece adds a
	// whole slot again.
	w.missed()
	before = w.w
	fasterEachTime(w, 1)
	if got := w.w - before; before > math.E || math.Abs(got-1) > 1e-12 {
		t.Errorf("a fast piece at w = %.4f added %v, want exactly 1", before, got)
	}
	for range 10 {
		w.missed()
	}
	if w.w != 1 || w.size() != 1 {
		t.Errorf("after many misses w = %v, size %d; want 1", w.w, w.size())
	}
}

func TestWindowDeadlineBeforeSamples(t *testing.T) {
	tests := []struct {
		initial time.Duration
		attempt int
		want    time.Duration
	}{
		{10 * time.Second, 0, 10 * time.Second},
		{10 * time.Second, 1, 20 * time.Second},
		{10 * time.Second, 3, 80 * time.Second},
		{10 * time.Second, 5, 5 * time.Minute},              // ceiling
		{100 * time.Millisecond, 0, 250 * time.Millisecond}, // floor
		{100 * time.Millisecond, 2, 400 * time.Millisecond},
		{10 * time.Minute, 0, 5 * time.Minute},
	}
	for _, tt := range tests {
		w := newWindow(2, 16, tt.initial)
		if got := w.deadline(tt.attempt); got != tt.want {
			t.Errorf("initial %v: deadline(%d) = %v, want %v", tt.initial, tt.attempt, got, tt.want)
		}
	}
}

func TestWindowDeadlineConverges(t *testing.T) {
	const d = 2 * time.Second
	w := newWindow(2, 16, time.Minute)
	w.completed(d)
	// First sample: the deviation starts at half of it.
	if got, want := w.deadline(0), d+4*(d/2); got != want {
		t.Fatalf("deadline after one %v sample = %v, want %v", d, got, want)
	}
	prev := w.deadline(0)
	for k := 2; k <= 60; k++ {
		w.completed(d)
		// The deviation decays by 3/4 a sample: dev_k = d/2 (3/4)^(k-1).
		dev := float64(d/2) * math.Pow(0.75, float64(k-1))
		want := d + time.Duration(4*dev)
		got := w.deadline(0)
		if diff := got - want; diff < -time.Microsecond || diff > time.Microsecond {
			t.Fatalf("after %d samples of %v: deadline %v, want about %v", k, d, got, want)
		}
		if got > prev || got < d {
			t.Fatalf("after %d samples of %v: deadline %v (before: %v), want it falling toward %v", k, d, got, prev, d)
		}
		prev = got
	}
	if prev-d > d/100 {
		t.Errorf("after 60 samples of %v the deadline is still %v", d, prev)
	}
}

func TestWindowDeadlineDoublesPerAttempt(t *testing.T) {
	w := newWindow(2, 16, time.Minute)
	w.completed(130 * time.Millisecond) // deadline 390ms
	base := w.deadline(0)
	if base != 390*time.Millisecond {
		t.Fatalf("deadline(0) = %v, want 390ms", base)
	}
	for a := 1; a <= 9; a++ {
		if got, want := w.deadline(a), base<<a; got != want {
			t.Errorf("deadline(%d) = %v, want %v", a, got, want)
		}
	}
	// 390ms << 10 is above the ceiling.
	for _, a := range []int{10, 11, 30, 1000} {
		if got := w.deadline(a); got != 5*time.Minute {
			t.Errorf("deadline(%d) = %v, want the 5m ceiling", a, got)
		}
	}

	// The doubling stops after ten retries.
	w = newWindow(2, 16, 260*time.Millisecond)
	if got, want := w.deadline(10), 260*time.Millisecond<<10; got != want {
		t.Errorf("deadline(10) = %v, want %v", got, want)
	}
	if got, want := w.deadline(50), w.deadline(10); got != want {
		t.Errorf("deadline(50) = %v, want deadline(10) = %v", got, want)
	}
}

func TestWindowDeadlineClamped(t *testing.T) {
	w := newWindow(2, 16, time.Second)
	w.completed(time.Millisecond)
	if got := w.deadline(0); got != 250*time.Millisecond {
		t.Errorf("deadline after 1ms pieces = %v, want the 250ms floor", got)
	}
	w = newWindow(2, 16, time.Second)
	w.completed(time.Hour)
	if got := w.deadline(0); got != 5*time.Minute {
		t.Errorf("deadline after 1h pieces = %v, want the 5m ceiling", got)
	}
}

// A deadline is clamped to the ceiling however long the base is: a very long
// InitialDeadline (to mean "never give up on a piece") must not wrap around
// when doubled. Today `d <<= min(attempt, 10)` overflows int64 for any d
// above 2^63 >> attempt (about 106 days at attempt 10, 146 years at attempt
// 1), and the negative result is clamped to the 250ms floor.
func TestWindowDeadlineNoOverflow(t *testing.T) {
	for _, initial := range []time.Duration{200 * 24 * time.Hour, 1 << 62, math.MaxInt64} {
		w := newWindow(2, 16, initial)
		for a := range 12 {
			if got := w.deadline(a); got != 5*time.Minute {
				t.Errorf("initial %v: deadline(%d) = %v, want the 5m ceiling", initial, a, got)
				break
			}
		}
	}
}

// windowScript drives one window through a scenario. Each line is an event,
// then the window size and the first-attempt deadline expected after it.
// The expected values come from a separate implementation of the rules (a
// few lines of Python, not this code): growth +1 while w <= e and 1/ln(w)
// above, RFC 6298 gains of 1/8 and 1/4 with Go's truncating division,
// deadline avg+4*dev within [250ms, 5m].
const windowScript = `
# start=2 max=6 initial=10s  size  deadline
start                          2     10s
done 100ms                     3     300ms          # the first sample is fast by definition
done 80ms                      3     267.5ms        # 3 > e: +1/ln 3, w = 3.91
done 70ms                      4     250ms          # w = 4.64; deadline floored
done 500ms                     4     666.992187ms   # slow: no growth, deadline rises
done 97ms                      5     578.274414ms   # faster than the average: w = 5.29
missed                         4     578.274414ms
missed                         3     578.274414ms
done 60ms                      4     537.388553ms
missed                         3     537.388553ms
missed                         2     537.388553ms
missed                         1     537.388553ms
missed                         1     537.388553ms   # never below 1
done 50ms                      2     504.388816ms   # w <= e: +1 again
done 40ms                      3     477.283087ms
done 30ms                      3     454.579859ms
done 20ms                      4     435.162746ms
done 10ms                      5     418.196429ms
done 5ms                       5     398.681148ms
done 4ms                       6     374.446707ms   # capped at the max
done 3ms                       6     347.841397ms
done 1000ms                    6     1.338164909s  # slow: the deadline jumps
`

func TestWindowScript(t *testing.T) {
	w := newWindow(2, 6, 10*time.Second)
	for n, line := range strings.Split(windowScript, "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		n++ // line numbers from 1
		var size, deadline string
		switch {
		case f[0] == "start" && len(f) == 3:
			size, deadline = f[1], f[2]
		case f[0] == "done" && len(f) == 4:
			d, err := time.ParseDuration(f[1])
			if err != nil {
				t.Fatalf("line %d: %v", n, err)
			}
			w.completed(d)
			size, deadline = f[2], f[3]
		case f[0] == "missed" && len(f) == 3:
			w.missed()
			size, deadline = f[1], f[2]
		default:
			t.Fatalf("line %d: cannot parse %q", n, line)
		}
		if got := strconv.Itoa(w.size()); got != size {
			t.Errorf("line %d %q: size %s, want %s (w = %.4f)", n, strings.TrimSpace(line), got, size, w.w)
		}
		if got := w.deadline(0).String(); got != deadline {
			t.Errorf("line %d %q: deadline %s, want %s", n, strings.TrimSpace(line), got, deadline)
		}
	}
}
