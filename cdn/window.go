package cdn

import "time"

// window is the CoBlitz agent's congestion control over a client's chunk
// fetches: how many may be in flight at once. It grows by one chunk per
// window's worth of chunks that arrived within their deadline (additive
// increase) and halves when one missed it or failed (multiplicative
// decrease), so a client behind a slow link or a cluster under load asks
// for fewer chunks at once, and one on a fast path opens up.
type window struct {
	w        float64
	min, max float64
}

func newWindow(start, lo, hi int) *window {
	return &window{w: float64(start), min: float64(lo), max: float64(hi)}
}

// size is the number of chunks that may be in flight.
func (w *window) size() int { return int(w.w) }

func (w *window) success() { w.w = min(w.max, w.w+1/w.w) }

func (w *window) loss() { w.w = max(w.min, w.w/2) }

// deadline is a chunk fetch's retry deadline: a multiple of the smoothed
// time chunks took, within [lo, hi]. Past it the fetch is abandoned for
// the next node in the chunk's order (re-forwarding).
type deadline struct {
	srtt   time.Duration // 0 until the first sample
	lo, hi time.Duration
}

func (d *deadline) sample(took time.Duration) {
	if d.srtt == 0 {
		d.srtt = took
		return
	}
	d.srtt = (7*d.srtt + took) / 8
}

func (d *deadline) get() time.Duration {
	if d.srtt == 0 {
		return d.hi
	}
	return min(d.hi, max(d.lo, 4*d.srtt))
}
