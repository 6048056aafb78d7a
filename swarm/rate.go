package swarm

import (
	"math"
	"slices"
	"time"
)

// rateWin counts bytes over a sliding window of rateBuckets buckets, so
// "who sent us most over the last 20 s" needs no per-transfer history.
type rateWin struct {
	width   time.Duration
	start   time.Time // start of the current bucket
	cur     int
	buckets [rateBuckets]int64
}

const rateBuckets = 10

func (r *rateWin) init(window time.Duration) {
	r.width = max(window/rateBuckets, time.Millisecond)
}

func (r *rateWin) rotate(now time.Time) {
	if r.start.IsZero() {
		r.start = now
		return
	}
	if now.Sub(r.start) >= rateBuckets*r.width {
		r.buckets = [rateBuckets]int64{}
		r.start = now
		return
	}
	for now.Sub(r.start) >= r.width {
		r.cur = (r.cur + 1) % rateBuckets
		r.buckets[r.cur] = 0
		r.start = r.start.Add(r.width)
	}
}

func (r *rateWin) add(now time.Time, n int64) {
	r.rotate(now)
	r.buckets[r.cur] += n
}

// sum is the bytes counted over the window ending at now.
func (r *rateWin) sum(now time.Time) int64 {
	r.rotate(now)
	var t int64
	for _, b := range r.buckets {
		t += b
	}
	return t
}

// sample updates p's delivery-rate and latency estimates with a piece of b
// bytes that answered r at now.
//
// A piece delivered back to back with the previous one (its request was out
// when the previous piece arrived, and it came within 1.5 transfer times)
// was queued behind it: the time since the previous delivery is its
// transfer time, a clean rate sample (EWMA, gain 1/4; a sample is capped at
// 4× the estimate so a burst of deliveries cannot inflate it). Latency is
// the request-to-delivery time minus the transfer time: exact for a piece
// that was not queued (EWMA, gain 1/4), an upper bound for one that was
// (it can only lower the estimate). Before the first rate sample, the
// fastest round trip is kept for the first latency estimate.
//
// With the path's RTT known (PathRTT), a piece that was not queued behind
// ours is a rate sample too: it took the request-to-delivery time less the
// path RTT, the share of the peer's link we got while it also served
// others. One request at a time (depth) never delivers back to back, and
// without these samples the rate, and so the depth, would stay where it
// was when the pipeline shrank to one.
func (p *peer) sample(r outReq, b int64, now time.Time) {
	e := now.Sub(r.sent)
	queued := false
	if p.lastRecv.After(r.sent) {
		queued = p.rate <= 0 || now.Sub(p.lastRecv) < 3*transferTime(b, p.rate)/2
	}
	busy := now.Sub(p.lastRecv)
	if !queued {
		busy = 0
		if p.pathRTT > 0 && p.rate > 0 {
			// Its bytes started no sooner than a round trip after the
			// request, nor before the previous piece had arrived.
			busy = now.Sub(later(r.sent.Add(p.pathRTT), p.lastRecv))
		}
	}
	if busy > 0 {
		rs := float64(b) / busy.Seconds()
		if p.rate > 0 {
			p.rate += (min(rs, 4*p.rate) - p.rate) / 4
		} else {
			p.rate = rs
		}
	}
	if p.rate <= 0 {
		if p.idleRTT == 0 || e < p.idleRTT {
			p.idleRTT = e
		}
		return
	}
	ls := max(e-transferTime(b, p.rate), 0)
	switch {
	case p.samples == 0:
		if p.idleRTT > 0 && p.idleRTT < e {
			ls = max(p.idleRTT-transferTime(b, p.rate), 0)
		}
		p.lat = ls
	case queued:
		p.lat = min(p.lat, ls)
	default:
		p.lat += (ls - p.lat) / 4
	}
	p.samples++
}

func transferTime(b int64, rate float64) time.Duration {
	return time.Duration(float64(b) / rate * float64(time.Second))
}

// depth is the number of requests to keep in flight to p: its
// bandwidth-delay product in pieces, plus one so the pipe never drains while
// a request travels; 2 before any sample, 1 while on probation.
//
// The delay is the path's round trip without queues (PathRTT) when the
// transport tells it, and the rate then our share of the peer's link (see
// sample): a peer whose product is below a tenth of a piece (a short path,
// or a link shared with many) gets one request at a time. Our measured
// latency includes the time our request waits at the peer behind the
// pieces it sends to the others it serves, and pipelining to cover that
// wait only queues a second request of ours behind the first: every
// uploader of a crowd then holds twice the pieces, and each hop of a piece
// through the swarm takes twice as long, while the peer's link, busy with
// the others, gains nothing. A peer we have to ourselves over a longer path
// measures its whole link as our share, and gets its product plus one
// (rounded up from a tenth: one request at a time would idle its link for
// a round trip after each piece, half of it at a product near one).
// docs/benchmarks.md, "Flash crowds, fifth pass", has the figures.
func (s *Scheduler) depth(p *peer) int {
	switch {
	case p.probation:
		return 1
	case s.small:
		return s.cfg.MaxDepth // one burst (small.go)
	case p.samples == 0 || p.rate <= 0:
		return min(2, s.cfg.MaxDepth)
	}
	if p.pathRTT > 0 {
		bdp := p.rate * p.pathRTT.Seconds() / s.avgLen
		return min(int(bdp+0.9)+1, s.cfg.MaxDepth)
	}
	bdp := p.rate * p.lat.Seconds() / s.avgLen
	return min(max(int(math.Ceil(bdp))+1, 1), s.cfg.MaxDepth)
}

// pieceTime is the expected time for p to deliver a piece with ahead others
// queued before it; ok is false before any sample.
func (s *Scheduler) pieceTime(p *peer, ahead int) (time.Duration, bool) {
	if p.samples == 0 || p.rate <= 0 {
		return 0, false
	}
	return p.lat + time.Duration(float64(ahead+1)*s.avgLen/p.rate*float64(time.Second)), true
}

// timeout is the deadline for a request to p with ahead others queued
// before it. typical is the median single-piece time of the peers that have
// delivered (0 if none ever has; see typicalPieceTime). Deadlines are recomputed on
// every check, so a peer asked before anything was measured still loses its
// requests quickly once the others show what normal is.
func (s *Scheduler) timeout(p *peer, ahead int, typical time.Duration) time.Duration {
	if d, ok := s.pieceTime(p, ahead); ok {
		return min(max(8*d, s.cfg.MinRequestTimeout), 8*s.cfg.RequestTimeout)
	}
	if typical == 0 {
		return s.cfg.RequestTimeout
	}
	return min(max(4*typical*time.Duration(ahead+1), s.cfg.MinRequestTimeout), s.cfg.RequestTimeout)
}

// typicalPieceTime is the median of the single-piece times of the connected
// peers that have delivered. When none of them has, it is the last median
// measured, for RequestTimeout after it was (0 before and after): once the
// peers that delivered have left, a peer that never delivers must not get
// the 10 s base deadline back, which left the last piece of a download
// waiting on a staller; but slower peers met long after must not be held
// to the pace of fast ones that left.
func (s *Scheduler) typicalPieceTime() time.Duration {
	var times []time.Duration
	for _, p := range s.order {
		if d, ok := s.pieceTime(p, 0); ok {
			times = append(times, d)
		}
	}
	if len(times) == 0 {
		if s.now.Sub(s.typicalAt) < s.cfg.RequestTimeout {
			return s.typical
		}
		return 0
	}
	slices.Sort(times)
	s.typical, s.typicalAt = times[len(times)/2], s.now
	return s.typical
}
