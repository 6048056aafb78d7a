package node

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/internal/sockopt"
	"github.com/stampede-dev/stampede/wire"
)

// Upload turns: a node sends its pieces a few at a time across all its
// connections, rarest first, then first come (to the writer ready to send
// them), first served, rather than all at once.
//
// A node serves every unchoked neighbour (10 by default) and each keeps a
// request or two with it. Written all at once, the pieces share the uplink:
// every one moves at a tenth of it and all arrive late and together, and
// TCP puts a congestion window of each in the uplink's queue, where every
// connection's HAVE, START and REQUEST waits behind them. On the testbed's
// 8 Mbit/s uplinks that queue held 110-140 KB (over 0.1 s) at any moment in
// a flash crowd of 50, often up to its limit of 290 KB, dropping packets.
// One after another, each piece arrives sooner and its requester passes it
// on while the next is sent; the uplink does the same work either way.
//
// A connection with a piece to send waits for one of UploadTurns turns,
// sending its control frames meanwhile (a CHOKE or GOODBYE ends the wait:
// the piece is not sent), and keeps it until the piece is written and all
// but turnLowat of it acknowledged, still sending its control frames.
// "Written" alone is not enough: the kernel then still holds up to a
// congestion window of it in the uplink's queue. With the turns that queue
// was empty at half the samples and under 110 KB at nine in ten. Three
// turns, so that the uplink does not idle between pieces while the
// acknowledgements of the last come back: with one, or two released the
// same way, the last peer of a flash crowd of 50 came later than without
// turns; with three, about 0.6 s sooner (docs/benchmarks.md, eleventh
// pass).
//
// A turn whose holder makes no progress for turnStall (a neighbour that
// stopped reading, or acknowledging) is given back and the piece goes on
// without it: one stalled neighbour never holds the others' pieces back.
// So is one held past turnSlow times the time its piece takes at its
// share of our uplink (the turns' count times the piece over the most
// upload we have measured, slowAfter), when another piece waits for a
// turn: its neighbour's downlink is slower than that share. Else, in a
// crowd of 20 peers with 20 Mbit/s uplinks and 20 with 1/10 Mbit/s links,
// the fast peers' turns went to pieces for slow peers, each moving at
// what the slow downlink had left, and the fast uplinks sent 7 Mbit/s of
// their 20 (issue 30's mixed crowd). A piece that moves at its share keeps
// its turn.
//
// turnSlow is 1.25: a quarter past the share's time leaves room for the
// round trip and a shared link's noise, and is soon enough for a crowd
// whose downlinks are no faster than its uplinks (issue 30's big: 10
// peers on 40/40 Mbit/s links). Each downlink there takes pieces from
// several uplinks at once, so most pieces move a little under their
// share. At turnSlow 2 they kept their turns, and the uplinks sent about
// 76 % of what they could: the last peer came at 1.28 × T_KR in the
// simulator, 1.26 × on the testbed. At 1.25, at 1.15-1.20 × in the
// simulator, where no other crowd of its matrix moved past its seeds'
// spread, and at 1.16-1.18 × on the testbed, where flash50, mixed,
// fast-origin and adsl came as before; at 1, the simulator's mixed
// crowds took 10-15 % more origin copies (docs/benchmarks.md, issue
// 30's ninth pass).
//
// A turn that comes free goes to the waiting piece of the lowest rank
// (Node.uploadRank: 0 when no neighbour of ours has the piece, 1 when one
// has, 2 past that), the first that came among equals. A piece few of the
// neighbours have is one the swarm has just got: sent first, it reaches
// its next holders sooner, who pass it on in turn, while the pieces
// already common wait a little. Ranked by the holders count itself, the
// common pieces waited too long: the stragglers that lacked them finished
// 2 s later. With three ranks, in flash50 runs on the testbed, the last
// peer came at 38.70-38.94 s against 38.86-39.24 s without (four runs
// each), and with the layer's grace (layer.go) too at a median of 38.72 s
// against 39.01 s (39 runs and 12; docs/benchmarks.md, fourteenth pass).
// Giving the turn to the piece that came last, the eleventh pass's
// variant, made no difference in two pairs of runs.
//
// A piece that has waited rankAge goes as rank 0, so that a stream of
// rare pieces cannot hold a common one back until its requester gives up;
// the upload queue (uploadQueueTime) keeps waits well under that. Each
// connection still sends its own queue in order: a rare piece queued
// behind a common one on the same connection waits for it.
//
// The turns are a Node's, or shared by every node of a host (Config.Host):
// a process holding many swarms has one uplink, and one set of turns for it.
const (
	defaultUploadTurns = 3
	turnStall          = 500 * time.Millisecond
	turnSlow           = 1.25
	turnSlowMin        = 50 * time.Millisecond
	turnLowat          = 16 << 10
	// The holder looks at what is still unacknowledged again after the
	// time the uplink takes to send it (at our upload rate), within these.
	turnPollMin = time.Millisecond
	turnPollMax = 50 * time.Millisecond
	rankAge     = time.Second
)

// Turns hands out upload turns, lowest rank first, then first come, first
// served: a node's own, or one set shared by the nodes of a host (Host).
// A nil *Turns means uploads do not take turns.
type Turns struct {
	n int // turns in all

	mu      sync.Mutex // guards the following
	free    int
	waiting []waiter // in the order they came
}

// waiter is a connection waiting for a turn for a piece of the given rank.
type waiter struct {
	ch    chan struct{} // closed when given a turn
	rank  int
	since time.Time
}

// rankAt is w's rank at now: 0 once it has waited rankAge.
func (w waiter) rankAt(now time.Time) int {
	if now.Sub(w.since) >= rankAge {
		return 0
	}
	return w.rank
}

// NewTurns returns n turns (0 or less: the default, 3).
func NewTurns(n int) *Turns {
	if n <= 0 {
		n = defaultUploadTurns
	}
	return &Turns{n: n, free: n}
}

// enter joins the queue for a turn for a piece of the given rank; the
// channel is closed when one is given (at once if one is free and nobody
// waits).
func (ts *Turns) enter(rank int) chan struct{} {
	w := make(chan struct{})
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.free > 0 && len(ts.waiting) == 0 {
		ts.free--
		close(w)
		return w
	}
	ts.waiting = append(ts.waiting, waiter{w, rank, time.Now()})
	return w
}

// leave withdraws w from the queue; if it was given a turn meanwhile, the
// turn goes back.
func (ts *Turns) leave(w chan struct{}) {
	ts.mu.Lock()
	i := slices.IndexFunc(ts.waiting, func(x waiter) bool { return x.ch == w })
	if i >= 0 {
		ts.waiting = slices.Delete(ts.waiting, i, i+1)
	}
	ts.mu.Unlock()
	if i < 0 { // given a turn meanwhile
		ts.give()
	}
}

// give hands a turn back: to the first waiting of the lowest rank, if any.
func (ts *Turns) give() {
	ts.giveAt(time.Now())
}

// giveAt is give with the clock read by the caller (tests age waiters).
func (ts *Turns) giveAt(now time.Time) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.waiting) == 0 {
		ts.free++
		return
	}
	next := 0
	for i, w := range ts.waiting {
		if w.rankAt(now) < ts.waiting[next].rankAt(now) {
			next = i
		}
	}
	close(ts.waiting[next].ch)
	ts.waiting = slices.Delete(ts.waiting, next, next+1)
}

// turn is one held turn. progress pushes its stall deadline back after a
// write that went through, pause stops it; done gives the turn back (more
// than once is fine).
type turn struct {
	ts    *Turns
	p     *peerConn
	stall *time.Timer
	// slow is nil until an upload is measured. Its function reads it too,
	// from the timer's goroutine, which nothing orders after newTurn's
	// store: hence the atomic.
	slow  atomic.Pointer[time.Timer]
	mu    sync.Mutex // held while the turn is given back
	given atomic.Bool
}

func (t *turn) pause() {
	if t != nil {
		t.stall.Stop()
	}
}

func (t *turn) progress() {
	if t != nil {
		t.stall.Reset(turnStall)
	}
}

func (t *turn) done() {
	if t == nil {
		return
	}
	t.stall.Stop()
	if s := t.slow.Load(); s != nil {
		s.Stop()
	}
	t.giveBack()
}

// giveBack gives the turn back, once; the stall timer calls it. A done
// that comes while the timer does waits for it, so the connection's next
// turn cannot set its low-water mark before this one restores it.
func (t *turn) giveBack() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.given.Load() {
		return
	}
	t.given.Store(true)
	sockopt.NotSentLowat(t.p.c, notSentLowat)
	t.ts.give()
}

// drained waits until all but turnLowat of what the connection wrote is
// acknowledged, for as long as that makes progress (the turn is given back
// after turnStall without), or the connection ends, passing control frames
// to drain meanwhile (done: the writer is to stop). Connections that cannot
// tell (neither TCP nor a PathConn) do not wait.
func (t *turn) drained(ctx context.Context, drain func() (done bool, err error)) (bool, error) {
	if t == nil {
		return false, nil
	}
	t.progress()
	last := -1
	for !t.given.Load() {
		u := unacked(t.p.c)
		if u <= turnLowat {
			return false, nil
		}
		if u != last {
			last = u
			t.progress()
		}
		if done, err := drain(); done || err != nil {
			return done, err
		}
		wait := turnPollMax
		if r := t.p.n.uploadRate(); r > 0 {
			wait = time.Duration(float64(u-turnLowat) / r * float64(time.Second))
		}
		timer := time.NewTimer(min(max(wait, turnPollMin), turnPollMax))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return true, nil
		case <-t.p.done:
			timer.Stop()
			return true, nil
		}
	}
	return false, nil
}

// newTurn makes the turn p was given: its connection's unsent data is
// held to turnLowat, and the turn goes back after turnStall without
// progress, or after slowAfter.
func newTurn(ts *Turns, p *peerConn) *turn {
	t := &turn{ts: ts, p: p}
	sockopt.NotSentLowat(p.c, turnLowat)
	t.stall = time.AfterFunc(turnStall, t.giveBack)
	if peak := p.n.uploadPeak(); peak > 0 {
		d := slowAfter(ts.n, p.n.m.PieceSize, peak)
		t.slow.Store(time.AfterFunc(d, func() { t.slowBack(d) }))
	}
	return t
}

// slowBack gives the turn back past slowAfter if another piece waits for
// one; else it looks again after d. A lone requester's pieces keep their
// turn: giving it back would only pile its next pieces into the kernel.
func (t *turn) slowBack(d time.Duration) {
	switch {
	case t.given.Load(): // done meanwhile: no more looks
		return
	case t.ts.anyWaiting():
		t.giveBack()
	default:
		if s := t.slow.Load(); s != nil {
			s.Reset(d)
		}
	}
}

// anyWaiting reports whether a piece waits for a turn.
func (ts *Turns) anyWaiting() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.waiting) > 0
}

// slowAfter is how long a turn is held at most, for turns turns, pieces of
// pieceSize bytes and an uplink that has sent peak bytes/s: turnSlow times
// a piece's time at its share of the uplink, at least turnSlowMin; 0 (no
// limit) before any upload was measured.
func slowAfter(turns int, pieceSize int64, peak float64) time.Duration {
	if peak <= 0 {
		return 0
	}
	share := float64(turns) * float64(pieceSize) / peak
	return max(time.Duration(turnSlow*share*float64(time.Second)), turnSlowMin)
}

// takeTurn waits for an upload turn for a piece of the given rank, writing
// the control frames that come meanwhile with control. A CHOKE, GOODBYE or
// close ends the wait without a turn and is returned as stop, unwritten:
// the piece is not to be sent.
// It returns no turn when uploads do not take turns, and done when the
// connection is ending (or control says so).
func (p *peerConn) takeTurn(ctx context.Context, rank int, control func(wire.Message) (done bool, err error)) (t *turn, stop wire.Message, done bool, err error) {
	ts := p.n.turns
	if ts == nil || p.own {
		return nil, nil, false, nil
	}
	w := ts.enter(rank)
	asked := time.Now()
	for {
		select {
		case <-w:
			p.n.backlogged(asked)
			return newTurn(ts, p), nil, false, nil
		case m := <-p.ctrl:
			if holdsForPiece(m) {
				ts.leave(w)
				return nil, m, false, nil
			}
			if done, err := control(m); done || err != nil {
				ts.leave(w)
				return nil, nil, done, err
			}
		case <-p.done:
			ts.leave(w)
			return nil, nil, true, nil
		case <-ctx.Done():
			ts.leave(w)
			return nil, nil, true, nil
		}
	}
}

// backlogged tells the pacer that an upload waited since then for the
// uplink: for a turn, or for TCP to take its bytes (uplink.Estimator:
// the sign that the uplink, not the requests, holds the uploads back).
func (n *Node) backlogged(since time.Time) {
	if d := time.Since(since); d > time.Millisecond {
		n.cfg.Pacer.Backlogged(d)
	}
}

// uploadPeak is the most upload capacity measureCapacity has read (bytes/s;
// 0 before it has).
func (n *Node) uploadPeak() float64 { return math.Float64frombits(n.upPeakBits.Load()) }

// uploadRate is our upload rate to peers as the loop last measured it
// (bytes/s; 0 before it has).
func (n *Node) uploadRate() float64 { return math.Float64frombits(n.upRateBits.Load()) }
