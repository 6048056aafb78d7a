package origin

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/sockopt"
)

// The piece answers to swarm peers' origin fetches (206 responses to
// requests with Stampede-Reason: origin:...) go out a few at a time, in the
// order they came, rather than all at once. A swarm keeps tens of pieces asked of the origin; sent
// all at once, each moves at a fraction of the link and all of them arrive
// late and together (processor sharing), while one after another the first
// arrives at once and is already being passed on among the peers while the
// next is sent. The origin's link does the same work either way; what
// changes is how soon each piece reaches the swarm. At the end of a flash
// crowd that is the difference between the last pieces reaching the peers
// one by one while the origin still sends, and tens of them arriving
// together, which the peers then spend seconds passing around.
//
// A piece answer waits for a turn (one of paceSlots) before its header goes
// out, and keeps its turn until its body is handed to the kernel, at most
// paceMaxHold (a client that reads slowly must not hold the others back).
// With 2 turns, in two flash20 runs, the origin's link idled more (two
// connections' windows could not keep it full) and the last peer came
// later than without pacing. 3 turns with a queue of half a second came
// out 0.4-0.6 s ahead of 6 turns with a queue of a second for the last of
// 50 peers, within what one build spreads from run to run
// (docs/benchmarks.md, eighth and ninth passes). A turn ends when the body
// is in the kernel, not when it is acknowledged, so on a faster link with
// a longer round trip the turns are held briefly and bound only how many
// answers are being pushed at once, not how many are in flight. While it
// holds a turn its connection keeps only pacedLowat unsent in the kernel,
// so "handed to the kernel" means "nearly on the wire" and the next answer
// starts as this one ends.
//
// The queue of answers waiting for a turn is kept short: one that would
// wait more than paceMaxQueue (the answers ahead of it, paceSlots at a
// time, each batch the smoothed time a turn is held) is answered 503 at
// once, with that wait as its Retry-After, and the peer leaves the origin
// alone for it (Slurpie's backoff, told by the one that knows the
// backlog). Before, a flash crowd of 50 queued 140 fetches in its first
// 4 s, and an answer that had waited paceMaxWait went out anyway, so
// tens of pieces were sent at once, each at a fraction of the link: ten
// seconds in, every peer had 2.7-3.1 MiB, while the origin's link had
// carried about 10 MB. paceMaxWait stays as a bound
// (a turn held by slow clients must not keep an answer waiting until the
// client's idle timeout, 5 s, ends it); such an answer still goes out.
const (
	paceSlots    = 3
	paceMaxWait  = 2 * time.Second
	paceMaxQueue = 500 * time.Millisecond
	paceMaxHold  = 500 * time.Millisecond
	pacedLowat   = 16 << 10
)

// Outcomes of a paced answer's wait, for the metrics.
const (
	paceTurn      = iota // got a turn
	paceWaited           // went out without one after paceMaxWait
	paceQueueFull        // answered 503: the queue was longer than paceMaxQueue
	numPace
)

var paceNames = [numPace]string{"turn", "waited", "queue_full"}

// pacer hands out the turns. Goroutines blocked sending on a channel are
// served in the order they blocked, so turns go first come, first served.
type pacer struct {
	turns chan struct{}

	mu      sync.Mutex    // guards the following
	waiting int           // answers blocked in wait
	hold    time.Duration // smoothed time a turn is held
}

func newPacer(n int) *pacer { return &pacer{turns: make(chan struct{}, n)} }

// backlog is how long an answer asking now would wait for its turn: 0 if
// a turn is free, else the answers ahead of it taken cap(turns) at a time,
// each batch the smoothed hold (paceMaxHold before any turn was given
// back). With turns held 100 ms, an answer is queued behind up to 14
// others; but a turn given back at paceMaxHold counts as held a little
// over it, so while the turns are held to the limit (the first seconds of
// a flash crowd on the testbed) any answer that finds all 3 busy is
// answered 503 at once.
func (p *pacer) backlog() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting == 0 && len(p.turns) < cap(p.turns) {
		return 0
	}
	hold := p.hold
	if hold == 0 { // no turn given back yet: the longest a turn is held
		hold = paceMaxHold
	}
	return time.Duration(p.waiting/cap(p.turns)+1) * hold
}

// held records that a turn was held for d.
func (p *pacer) held(d time.Duration) {
	p.mu.Lock()
	if p.hold == 0 {
		p.hold = d
	} else {
		p.hold += (d - p.hold) / 8
	}
	p.mu.Unlock()
}

// wait blocks until a turn is free, maxWait has passed or ctx ends. It
// returns the function that gives the turn back (safe to call more than
// once; it is called by itself after maxHold) and whether a turn was had.
// onGive, if set, runs when the turn is given back, once.
func (p *pacer) wait(ctx context.Context, maxWait, maxHold time.Duration, onGive func()) (done func(), ok bool) {
	t := time.NewTimer(maxWait)
	defer t.Stop()
	p.mu.Lock()
	p.waiting++
	p.mu.Unlock()
	var got bool
	select {
	case p.turns <- struct{}{}:
		got = true
	case <-t.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	p.waiting--
	p.mu.Unlock()
	if !got {
		return func() {}, false
	}
	start := time.Now()
	var once sync.Once
	give := func() {
		once.Do(func() {
			if onGive != nil {
				onGive()
			}
			p.held(time.Since(start))
			<-p.turns
		})
	}
	hold := time.AfterFunc(maxHold, give)
	return func() { hold.Stop(); give() }, true
}

// connKey is the request context key of the connection (Server.Serve).
type connKey struct{}

// swarmFetch reports whether a Stampede-Reason names a swarm's origin
// fetch of one piece. Those are few by design (the k/n rule), so the turns
// they wait for hold few transfer slots. Downloads without the swarm
// ("piece", "retry-*") are not paced: a crowd of them holds every slot,
// and a slot held waiting for a turn is one more 503 for the others (in a
// flash50 of plain downloads with them paced, 41 of 50 gave up on 503s).
// A resumed stream ("stream") asks for the rest of the file. Nor is a
// spare fetch (reasonSpare): the peers send those only while the origin's
// budget has room and its answers come quickly, for pieces the swarm
// already has, so there is no first copy to hurry, and paced, an origin
// faster than its clients' downlinks would send at three clients' pace
// (docs/benchmarks.md, "The origin's spare link").
func swarmFetch(r string) bool {
	return strings.HasPrefix(r, contract.ReasonOriginPrefix) && r != reasonSpare
}

// queueFull reports how long an answer to a swarm's origin fetch would wait
// for its turn if that is more than paceMaxQueue, else 0 (and 0 for any
// other response).
func (w *respWriter) queueFull(code int) time.Duration {
	// In upstream mode the header comes after the upstream has answered,
	// from the reverse proxy, which cannot turn its answer into a 503
	// cleanly (the client would see the connection end): those fetches
	// wait for their turn as before.
	if code != http.StatusPartialContent || !swarmFetch(w.req.Header.Get(contract.ReasonHeader)) || w.s.upstream != nil {
		return 0
	}
	if d := w.s.pacer.backlog(); d > paceMaxQueue {
		return d
	}
	return 0
}

// pace waits for a turn for w's body if it answers a swarm's origin fetch;
// finish gives the turn back, if the hold limit has not already. The
// response keeps its transfer slot (gate) while it waits.
func (w *respWriter) pace(code int) {
	if code != http.StatusPartialContent || !swarmFetch(w.req.Header.Get(contract.ReasonHeader)) {
		return
	}
	c, _ := w.req.Context().Value(connKey{}).(net.Conn)
	done, ok := w.s.pacer.wait(w.req.Context(), paceMaxWait, paceMaxHold, func() {
		if c != nil {
			sockopt.NotSentLowat(c, notSentLowat)
		}
	})
	if !ok {
		if w.req.Context().Err() == nil {
			w.s.metrics.paced[paceWaited].Add(1)
		}
		return
	}
	w.s.metrics.paced[paceTurn].Add(1)
	if c != nil {
		sockopt.NotSentLowat(c, pacedLowat)
	}
	w.unpace = done
}
