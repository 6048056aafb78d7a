package origin

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

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
// out, at most paceMaxWait (it then goes out anyway: a backlog that long
// gains nothing from order), and keeps its turn until its body is handed to
// the kernel, at most paceMaxHold (a client that reads slowly must not hold
// the others back). With 2 turns, in two flash20 runs, the origin's link
// idled more (two connections' windows could not keep it full) and the
// last peer came later than without pacing. While it holds a turn its connection keeps only
// pacedLowat unsent in the kernel, so "handed to the kernel" means "nearly
// on the wire" and the next answer starts as this one ends.
const (
	paceSlots   = 6
	paceMaxWait = 2 * time.Second
	paceMaxHold = 500 * time.Millisecond
	pacedLowat  = 16 << 10
)

// Outcomes of a paced answer's wait, for the metrics.
const (
	paceTurn   = iota // got a turn
	paceWaited        // went out without one after paceMaxWait
	numPace
)

var paceNames = [numPace]string{"turn", "waited"}

// pacer hands out the turns. Goroutines blocked sending on a channel are
// served in the order they blocked, so turns go first come, first served.
type pacer struct {
	turns chan struct{}
}

func newPacer(n int) *pacer { return &pacer{turns: make(chan struct{}, n)} }

// wait blocks until a turn is free, maxWait has passed or ctx ends. It
// returns the function that gives the turn back (safe to call more than
// once; it is called by itself after maxHold) and whether a turn was had.
// onGive, if set, runs when the turn is given back, once.
func (p *pacer) wait(ctx context.Context, maxWait, maxHold time.Duration, onGive func()) (done func(), ok bool) {
	t := time.NewTimer(maxWait)
	defer t.Stop()
	select {
	case p.turns <- struct{}{}:
	case <-t.C:
		return func() {}, false
	case <-ctx.Done():
		return func() {}, false
	}
	var once sync.Once
	give := func() {
		once.Do(func() {
			if onGive != nil {
				onGive()
			}
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
// A resumed stream ("stream") asks for the rest of the file.
func swarmFetch(r string) bool {
	return strings.HasPrefix(r, "origin:")
}

// pace waits for a turn for w's body if it answers a swarm's origin fetch;
// finish gives the turn back, if the hold limit has not already. The
// response keeps its transfer slot (gate) while it waits.
func (w *respWriter) pace(code int) {
	if code != http.StatusPartialContent || !swarmFetch(w.req.Header.Get(ReasonHeader)) {
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
