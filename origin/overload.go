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
// once, and past that it answers at once instead of queueing:
//
//   - A client that says it speaks stampede (contract.CapabilitiesHeader with the
//     token "overload") gets overload mode, after Overhaul: 206 with ONE
//     piece of the file chosen to spread the swarm (handout.go), the peers
//     the embedded tracker knows for that file, and the manifest's Link; it
//     fetches the rest from peers. At most OverloadTransfers such answers go
//     out at once, and each piece of a file is handed out at most
//     OverloadCopies times per OverloadWindow, which bounds the bytes overload
//     mode can cost whatever the crowd does.
//   - Everyone else, and a capable client when overload mode cannot answer
//     (full, every piece already handed out, no manifest at hand), gets 503
//     with a Retry-After, which stampede's downloader honours.
//
// The policy is decide, a pure function of the load; what a piece answer
// contains is overloadanswer.go.

// action is what the policy does with a response about to send a body.
type action int

const (
	actionAdmit  action = iota // send the body now
	actionReject               // 503 with Retry-After
	actionPiece                // overload mode: one piece of the origin's choosing, with peers
)

// decision is the policy's answer.
type decision struct {
	action     action
	retryAfter time.Duration // for actionReject and actionPiece
	outcome    int           // for actionReject: why (an outcome* constant)
}

// load is what the policy sees when a body is about to go out.
type load struct {
	active int           // bodies being sent (admitted transfers)
	max    int           // Config.MaxTransfers
	rate   int64         // Config.Rate in bytes/s, 0 unlimited
	fixed  time.Duration // Config.RetryAfter, 0 to estimate
	// remaining holds the bytes left of each active body (-1 unknown); it
	// is filled only when the policy may reject.
	remaining []int64

	capable    bool // the client asked for overload mode
	answering  int  // overload answers being sent
	maxAnswers int  // Config.OverloadTransfers; 0: overload mode is off
}

// Retry-After bounds: at least a second (the header's resolution), at most a
// few minutes so that a bad estimate does not lose clients.
const (
	minRetryAfter = time.Second
	maxRetryAfter = 5 * time.Minute
)

// decide is the overload policy. jitter, in [0, 1), spreads the Retry-After
// of clients turned away at the same moment. Below MaxTransfers nothing
// else matters: the body is sent, whoever asks.
func decide(l load, jitter float64) decision {
	if l.active < l.max {
		return decision{action: actionAdmit}
	}
	d := decision{action: actionReject, retryAfter: retryAfter(l, jitter)}
	switch {
	case !l.capable:
		d.outcome = outcomeLegacy
	case l.maxAnswers <= 0:
		d.outcome = outcomeOff
	case l.answering >= l.maxAnswers:
		d.outcome = outcomeFull
	default:
		// What overload mode costs is bounded by the handout budget, not
		// by how soon clients come back, and a piece given sooner spreads
		// sooner: capable clients may come back for another in a second or
		// two, whatever the full transfers have left to send.
		d.action, d.outcome = actionPiece, outcomePiece
		d.retryAfter = retryAfter(load{fixed: l.fixed}, jitter)
	}
	return d
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
// per answer.
type gate struct {
	max        int
	maxAnswers int // overload answers at once; 0: overload mode off
	rate       int64
	fixed      time.Duration
	log        *slog.Logger

	mu sync.Mutex // guards the following
	// active holds the transfers admitted and not yet done; answering the
	// overload answers being sent.
	active    map[*transfer]struct{}
	answering map[*transfer]struct{}
	// overRun counts the answers past the limit since it was reached; 0
	// when the origin is below its limit.
	overRun int64
}

func newGate(max, maxAnswers int, rate int64, fixed time.Duration, log *slog.Logger) *gate {
	return &gate{max: max, maxAnswers: maxAnswers, rate: rate, fixed: fixed, log: log,
		active: make(map[*transfer]struct{}), answering: make(map[*transfer]struct{})}
}

// enter asks whether t may start; capable says the client asked for
// overload mode. If admitted, or answered with a piece, t holds a slot
// until leave.
func (g *gate) enter(t *transfer, capable bool, jitter float64) decision {
	g.mu.Lock()
	l := load{active: len(g.active), max: g.max, rate: g.rate, fixed: g.fixed,
		capable: capable, answering: len(g.answering), maxAnswers: g.maxAnswers}
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
		run, g.overRun = g.overRun, 0
	case actionPiece:
		g.answering[t] = struct{}{}
		g.overRun++
		run = g.overRun
	case actionReject:
		g.overRun++
		run = g.overRun
	}
	g.mu.Unlock()

	switch {
	case d.action != actionAdmit && run == 1:
		g.log.Warn("at the transfer limit: answering capable clients with a piece and peers, others 503, until a transfer ends",
			"max_transfers", g.max, "overload_transfers", g.maxAnswers, "retry_after", d.retryAfter)
	case d.action == actionAdmit && run > 0:
		g.log.Info("below the transfer limit again", "answered_past_it", run)
	}
	return d
}

// leave frees t's slot.
func (g *gate) leave(t *transfer) {
	g.mu.Lock()
	delete(g.active, t)
	delete(g.answering, t)
	g.mu.Unlock()
}

func (g *gate) activeCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.active)
}

func (g *gate) answeringCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.answering)
}
