package origin

import (
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Overload handling. An origin that accepts every request in a flash crowd
// slows every transfer to a crawl, and clients time out having received
// nothing useful. So the origin sends at most MaxTransfers file bodies at
// once and answers the rest 503 with a Retry-After, which stampede's
// downloader honours. The policy is decide, a pure function of the load, so
// that it can grow: overload mode will answer capable clients with one piece
// and a list of peers instead of a 503.

// action is what the policy does with a response about to send a body.
type action int

const (
	actionAdmit  action = iota // send the body now
	actionReject               // 503 with Retry-After
)

// decision is the policy's answer.
type decision struct {
	action     action
	retryAfter time.Duration // for actionReject
}

// load is what the policy sees when a body is about to go out.
type load struct {
	active int           // bodies being sent
	max    int           // Config.MaxTransfers
	rate   int64         // Config.Rate in bytes/s, 0 unlimited
	fixed  time.Duration // Config.RetryAfter, 0 to estimate
	// remaining holds the bytes left of each active body (-1 unknown); it
	// is filled only when the policy may reject.
	remaining []int64
}

// Retry-After bounds: at least a second (the header's resolution), at most a
// few minutes so that a bad estimate does not lose clients.
const (
	minRetryAfter = time.Second
	maxRetryAfter = 5 * time.Minute
)

// decide is the overload policy. jitter, in [0, 1), spreads the Retry-After
// of clients turned away at the same moment.
func decide(l load, jitter float64) decision {
	if l.active < l.max {
		return decision{action: actionAdmit}
	}
	return decision{action: actionReject, retryAfter: retryAfter(l, jitter)}
}

// retryAfter estimates when a transfer slot frees: with a rate, each of
// the active bodies gets rate/active, so the one with the least left is done
// in least*active/rate. Without a rate the clients set the pace and nothing
// is known, so a second. The estimate is then stretched by up to twice,
// randomly, and rounded up to whole seconds.
func retryAfter(l load, jitter float64) time.Duration {
	if l.fixed > 0 {
		return l.fixed
	}
	base := minRetryAfter.Seconds()
	if l.rate > 0 {
		least := int64(-1)
		for _, r := range l.remaining {
			if r >= 0 && (least < 0 || r < least) {
				least = r
			}
		}
		if least >= 0 {
			base = float64(least) * float64(max(l.active, 1)) / float64(l.rate)
		}
	}
	secs := math.Ceil(base * (1 + min(max(jitter, 0), 1)))
	secs = min(max(secs, minRetryAfter.Seconds()), maxRetryAfter.Seconds())
	return time.Duration(secs) * time.Second
}

// transfer is a file body being sent.
type transfer struct {
	size int64 // bytes announced, -1 unknown
	sent atomic.Int64
}

func (t *transfer) remaining() int64 {
	if t.size < 0 {
		return -1
	}
	return max(t.size-t.sent.Load(), 0)
}

// gate applies the policy to the transfers in flight. It logs when the
// origin reaches its limit and when it is below it again, rather than once
// per 503.
type gate struct {
	max   int
	rate  int64
	fixed time.Duration
	log   *slog.Logger

	mu sync.Mutex // guards the following
	// active holds the transfers admitted and not yet done.
	active map[*transfer]struct{}
	// rejectedRun counts the 503s since the limit was reached; 0 when the
	// origin is below its limit.
	rejectedRun int64
}

func newGate(max int, rate int64, fixed time.Duration, log *slog.Logger) *gate {
	return &gate{max: max, rate: rate, fixed: fixed, log: log, active: make(map[*transfer]struct{})}
}

// enter asks whether t may start; if so, t holds a slot until leave.
func (g *gate) enter(t *transfer, jitter float64) decision {
	g.mu.Lock()
	l := load{active: len(g.active), max: g.max, rate: g.rate, fixed: g.fixed}
	if l.active >= l.max {
		l.remaining = make([]int64, 0, len(g.active))
		for a := range g.active {
			l.remaining = append(l.remaining, a.remaining())
		}
	}
	d := decide(l, jitter)
	var run int64
	switch d.action {
	case actionAdmit:
		g.active[t] = struct{}{}
		run, g.rejectedRun = g.rejectedRun, 0
	case actionReject:
		g.rejectedRun++
		run = g.rejectedRun
	}
	g.mu.Unlock()

	switch {
	case d.action == actionReject && run == 1:
		g.log.Warn("at the transfer limit: answering 503 until a transfer ends",
			"max_transfers", g.max, "retry_after", d.retryAfter)
	case d.action == actionAdmit && run > 0:
		g.log.Info("below the transfer limit again", "rejected", run)
	}
	return d
}

// leave frees t's slot.
func (g *gate) leave(t *transfer) {
	g.mu.Lock()
	delete(g.active, t)
	g.mu.Unlock()
}

func (g *gate) activeCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.active)
}
