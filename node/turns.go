package node

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/internal/sockopt"
	"github.com/stampede-dev/stampede/wire"
)

// Upload turns: a node sends its pieces a few at a time across all its
// connections, in the order they were asked for, rather than all at once.
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
// sending its control frames meanwhile, and keeps it until the piece is
// written and all but turnLowat of it acknowledged: "written" alone is not
// enough, since the kernel then still holds up to a congestion window of it
// unsent in the uplink's queue. With the turns the queue was empty at half
// the samples and under 110 KB at nine in ten. Three turns, so that the
// uplink does not idle between pieces while the acknowledgements of the
// last come back: with one or two the last peer of a flash crowd of 50
// came later than without turns, with three 0.7 s sooner
// (docs/benchmarks.md, eleventh pass).
//
// A turn whose holder makes no progress for turnStall (a neighbour that
// stopped reading, or acknowledging) is given back and the piece goes on
// without it: one stalled neighbour never holds the others' pieces back.
const (
	defaultUploadTurns = 3
	turnStall          = 500 * time.Millisecond
	turnLowat          = 16 << 10
	// The holder looks at what is still unacknowledged again after the
	// time the uplink takes to send it (at our upload rate), within these.
	turnPollMin = time.Millisecond
	turnPollMax = 50 * time.Millisecond
)

// turns hands out the upload turns of a node; nil means uploads do not take
// turns. Goroutines blocked sending on a channel are served in the order
// they blocked, so turns go first come, first served.
type turns chan struct{}

// newTurns returns n turns (0: defaultUploadTurns), or nil (n < 0).
func newTurns(n int) turns {
	if n < 0 {
		return nil
	}
	if n == 0 {
		n = defaultUploadTurns
	}
	return make(turns, n)
}

// turn is one held turn. progress pushes its stall deadline back after a
// write that went through, pause stops it; done gives the turn back (more
// than once is fine).
type turn struct {
	p     *peerConn
	given atomic.Bool
	stall *time.Timer
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
	t.giveBack()
}

// giveBack gives the turn back, once; the stall timer calls it.
func (t *turn) giveBack() {
	if !t.given.CompareAndSwap(false, true) {
		return
	}
	sockopt.NotSentLowat(t.p.c, notSentLowat)
	<-t.p.n.turns
}

// drained waits until all but turnLowat of what the connection wrote is
// acknowledged, for as long as that makes progress (the turn is given back
// after turnStall without), or the connection ends. Connections that are
// not TCP do not wait.
func (t *turn) drained(ctx context.Context) {
	if t == nil {
		return
	}
	t.progress()
	last := -1
	for !t.given.Load() {
		u := sockopt.Unacked(t.p.c)
		if u <= turnLowat {
			return
		}
		if u != last {
			last = u
			t.progress()
		}
		wait := turnPollMax
		if r := t.p.n.uploadRate(); r > 0 {
			wait = time.Duration(float64(u-turnLowat) / r * float64(time.Second))
		}
		timer := time.NewTimer(min(max(wait, turnPollMin), turnPollMax))
		select {
		case <-timer.C:
		case <-ctx.Done():
		case <-t.p.done:
		}
		timer.Stop()
		if ctx.Err() != nil {
			return
		}
		select {
		case <-t.p.done:
			return
		default:
		}
	}
}

// takeTurn waits for an upload turn, passing control frames to handle
// meanwhile. It returns nil when uploads do not take turns, and done when
// the connection is ending (or handle says so).
func (p *peerConn) takeTurn(ctx context.Context, handle func(wire.Message) (done bool, err error)) (t *turn, done bool, err error) {
	ts := p.n.turns
	if ts == nil {
		return nil, false, nil
	}
	for {
		select {
		case ts <- struct{}{}:
			t := &turn{p: p}
			sockopt.NotSentLowat(p.c, turnLowat)
			t.stall = time.AfterFunc(turnStall, t.giveBack)
			return t, false, nil
		case m := <-p.ctrl:
			if done, err := handle(m); done || err != nil {
				return nil, done, err
			}
		case <-p.done:
			return nil, true, nil
		case <-ctx.Done():
			return nil, true, nil
		}
	}
}

// uploadRate is our upload rate to peers as the loop last measured it
// (bytes/s; 0 before it has).
func (n *Node) uploadRate() float64 { return math.Float64frombits(n.upRateBits.Load()) }
