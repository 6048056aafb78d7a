package fetch

import (
	"math"
	"time"
)

// window is the adaptive request window and per-piece deadline of the CoBlitz
// agent (Park's thesis, 5.2.3 and 5.4.4), kept free of I/O and clocks so it can
// be driven by tests:
//
//   - a piece that arrives faster than the average piece time grows the window
//     by 1/ln(w) (1 while w < e), a slow-start-like rise that flattens as the
//     window opens;
//   - a piece that misses its deadline shrinks the window by one whole piece
//     (not multiplicatively: the slow one may be a single bad connection);
//   - a piece's deadline is the moving average of recent piece times plus four
//     mean deviations (as TCP's retransmission timer), doubled for each retry
//     of the same piece.
type window struct {
	w        float64 // current window, in pieces
	min, max float64

	avg, dev time.Duration // EWMA of piece times and of their deviation
	samples  int

	initial time.Duration // deadline before any sample
	floor   time.Duration // smallest deadline ever given
	ceiling time.Duration // largest deadline ever given
}

func newWindow(start, maxw int, initial time.Duration) *window {
	return &window{
		w: float64(max(1, min(start, maxw))), min: 1, max: float64(max(1, maxw)),
		initial: initial, floor: 250 * time.Millisecond, ceiling: 5 * time.Minute,
	}
}

// size is the number of requests that may be in flight.
func (w *window) size() int { return int(w.w) }

// completed records a piece fetched in d, on its first attempt or not.
func (w *window) completed(d time.Duration) {
	fast := w.samples == 0 || d < w.avg
	if w.samples == 0 {
		w.avg, w.dev = d, d/2
	} else {
		// Gains of 1/8 and 1/4, as in RFC 6298.
		diff := d - w.avg
		w.avg += diff / 8
		w.dev += (abs(diff) - w.dev) / 4
	}
	w.samples++
	if fast {
		inc := 1.0
		if w.w > math.E {
			inc = 1 / math.Log(w.w)
		}
		w.w = min(w.max, w.w+inc)
	}
}

// missed records a deadline miss.
func (w *window) missed() { w.w = max(w.min, w.w-1) }

// deadline is how long the attempt-th try (0 for the first) of a piece may
// take before another request for it is sent.
func (w *window) deadline(attempt int) time.Duration {
	d := w.initial
	if w.samples > 0 {
		d = w.avg + 4*w.dev
	}
	for range min(attempt, 10) {
		if d >= w.ceiling {
			break
		}
		d *= 2
	}
	return max(w.floor, min(w.ceiling, d))
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
