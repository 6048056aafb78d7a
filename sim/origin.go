package sim

import (
	"math"
	"slices"
	"time"

	"github.com/stampede-dev/stampede/swarm"
)

// The origin, as package origin answers a swarm's origin fetches: it picks
// the piece it has sent least among the one asked and the fetch's
// candidates, answers "in swarm" when every one of them went to a swarm
// peer less than ResendAfter ago (origin/pick.go), keeps each file's
// bytes within its egress budget, past which only pieces not sent in the
// budget's window go (origin/budget.go), and sends its piece answers three
// at a time in the order they came, refusing with a 503 those that would
// wait more than half a second for their turn (origin/pace.go). Its
// constants are origin's.
const (
	paceSlots     = 3                      // origin.paceSlots
	paceMaxWait   = 2 * time.Second        // origin.paceMaxWait
	paceMaxQueue  = 500 * time.Millisecond // origin.paceMaxQueue
	paceMaxHold   = 500 * time.Millisecond // origin.paceMaxHold
	sendingHold   = 4                      // origin.sendingHold
	overloadPeers = 10                     // origin.overloadPeers: peers named in a budget's refusal
)

// never is a time before any: a piece never sent.
const never = time.Duration(-1)

type origin struct {
	s    *Sim
	site *Site

	// The ledger (origin.sentLedger).
	count   []uint32
	last    []time.Duration
	swarm   []time.Duration
	sending []uint16

	// The pacer (origin.pacer).
	free  int
	queue []*fetch
	hold  time.Duration // smoothed time a turn is held; 0: none given back yet

	budget *budget // nil: none

	// Accounting.
	bytes                     float64
	inFlight, peers, flows    int
	maxInFlight, maxPeers     int
	maxFlows                  int
	flightSum, peersSum       float64 // integrals over time, in fetch-seconds
	since                     time.Duration
	ok, busy, inSwarm, picked int64
	spent, overBudget         int64 // refused past the budget; sent past it (unsent pieces, alone)
	reasons                   map[string]int
}

// budget is origin.budget: a file's egress budget, limit bytes per
// window, from the first body charged after the last window ended.
type budget struct {
	limit   int64
	window  time.Duration
	start   time.Duration
	started bool
	spent   int64
	sent    []uint16 // per piece, the sends to swarm clients this window
}

// roll starts a new window at now if the current one is over.
func (b *budget) roll(now time.Duration) {
	if !b.started || now-b.start >= b.window {
		b.start, b.started, b.spent = now, true, 0
		clear(b.sent)
	}
}

// fetch is one FetchOrigin, from the peer's request to its answer.
type fetch struct {
	n        *node
	a        swarm.FetchOrigin
	ask      int // the piece the request's Range asks: a.Piece, or the push agent's steer
	got      int
	swarmReq bool // it offered candidates
	prevLast time.Duration
	prevSw   time.Duration
	stamp    time.Duration // the ledger's record of it (undo)
	recorded bool
	charged  bool          // the budget charged its body
	chargeAt time.Duration // in the window that started then
	turn     bool
	turnAt   time.Duration
	queued   bool
	flow     *flow
	gen      int
	over     bool // answered, or its peer gone
	res      swarm.OriginResult
	peers    []string // named in a budget's refusal
	// told: the answer carries the budget's state (Stampede-Budget),
	// left bytes until reset.
	told  bool
	left  int64
	reset time.Duration
}

func newOrigin(s *Sim, site *Site) *origin {
	o := &origin{s: s, site: site, free: paceSlots, reasons: map[string]int{}}
	n := s.pieces
	o.count, o.last, o.swarm, o.sending = make([]uint32, n), make([]time.Duration, n), make([]time.Duration, n), make([]uint16, n)
	for i := range n {
		o.last[i], o.swarm[i] = never, never
	}
	if c := s.cfg.MaxCopies; c > 0 {
		o.budget = &budget{limit: int64(math.Ceil(c * float64(s.cfg.Size))), window: s.cfg.BudgetWindow, sent: make([]uint16, n)}
	}
	return o
}

// fetch is the FetchOrigin action: an HTTP request to the origin.
func (o *origin) fetch(n *node, a swarm.FetchOrigin) {
	ask := a.Piece
	if ps := o.s.push; ps != nil {
		var res *swarm.OriginResult
		if res, ask = ps.gate(n, &a); res != nil {
			// The push agent's gate answers without a request.
			n.post(*res)
			return
		}
	}
	f := &fetch{n: n, a: a, ask: ask}
	o.reasons[a.Reason]++
	n.fetches = append(n.fetches, f)
	o.account()
	o.inFlight++
	if len(n.fetches) == 1 {
		o.peers++
	}
	o.maxInFlight, o.maxPeers = max(o.maxInFlight, o.inFlight), max(o.maxPeers, o.peers)
	o.s.after(o.s.transit(n.site, o.site), event{kind: evOriginReq, x: f})
}

// account adds the fetches in flight since the last change to the
// integrals.
func (o *origin) account() {
	dt := (o.s.now - o.since).Seconds()
	o.flightSum += float64(o.inFlight) * dt
	o.peersSum += float64(o.peers) * dt
	o.since = o.s.now
}

// end takes f out of the fetches in flight.
func (o *origin) end(f *fetch) {
	if f.over {
		return
	}
	f.over = true
	n := f.n
	if k := slices.Index(n.fetches, f); k >= 0 {
		n.fetches = slices.Delete(n.fetches, k, k+1)
	}
	o.account()
	o.inFlight--
	if len(n.fetches) == 0 {
		o.peers--
	}
}

// request: the fetch has reached the origin.
func (o *origin) request(f *fetch) {
	if f.over {
		return
	}
	s := o.s
	resend := s.cfg.ResendAfter
	if f.a.Reason == swarm.ReasonNoPeers {
		// A peer that knows no other has no swarm to leave a piece to.
		resend = 0
	}
	alone := f.a.Reason == swarm.ReasonNoPeers
	from, offer := f.ask, f.a.Candidates
	if b := o.budget; b != nil && !alone {
		from, offer = b.filter(s.now, s.pieceLen(from), from, offer)
	}
	if wait := o.choose(f, from, offer, resend); wait > 0 {
		f.res = swarm.OriginResult{Piece: f.a.Piece, InSwarm: max(retryAfter(wait), time.Millisecond), Candidates: f.a.Candidates}
		o.inSwarm++
		o.answer(f)
		return
	}
	if b := o.budget; b != nil {
		if reset, ok := o.spend(f, alone); !ok {
			// The budget's refusal: the node leaves the pieces to the
			// swarm until the window ends, and hears of peers.
			o.undo(f)
			o.spent++
			f.res = swarm.OriginResult{Piece: f.a.Piece, InSwarm: retryAfter(max(reset, time.Second)), Candidates: f.a.Candidates}
			f.peers = s.tracker.peers(overloadPeers)
			f.told, f.left, f.reset = true, 0, reset
			o.answer(f)
			return
		}
	}
	if f.a.Reason == swarm.ReasonSpare { // not paced (origin.swarmFetch)
		o.send(f)
		return
	}
	if d := o.backlog(); d > paceMaxQueue {
		o.undo(f)
		o.settle(f, 0)
		f.told = false // a 503 without the budget's header
		f.res = swarm.OriginResult{Piece: f.a.Piece, Busy: retryAfter(d)}
		o.busy++
		o.answer(f)
		return
	}
	if o.free > 0 && len(o.queue) == 0 {
		o.free--
		f.turn = true
		o.send(f)
		return
	}
	f.queued = true
	o.queue = append(o.queue, f)
	s.after(paceMaxWait, event{kind: evPaceDeadline, x: f, i: f.gen})
}

// retryAfter is d as the client reads it from Retry-After: whole seconds,
// rounded up.
func retryAfter(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

// backlog is pacer.backlog: how long an answer asking now would wait for
// its turn.
func (o *origin) backlog() time.Duration {
	if len(o.queue) == 0 && o.free > 0 {
		return 0
	}
	hold := o.hold
	if hold == 0 {
		hold = paceMaxHold
	}
	return time.Duration(len(o.queue)/paceSlots+1) * hold
}

// filter is the budget's part in the pick (pickPiece): past the budget,
// only the pieces no swarm client got in this window are offered, the
// first in place of the one asked if that one went out.
func (b *budget) filter(now time.Duration, n int64, asked int, cands []int) (int, []int) {
	b.roll(now)
	if b.spent+n <= b.limit {
		return asked, cands
	}
	unsent := func(i int) bool { return b.sent[i] == 0 }
	var left []int
	for _, c := range cands {
		if unsent(c) {
			left = append(left, c)
		}
	}
	switch {
	case unsent(asked) && len(left) == 0 && len(cands) > 0:
		return asked, []int{asked} // still a swarm peer's fetch
	case unsent(asked):
		return asked, left
	case len(left) > 0:
		return left[0], left
	}
	return asked, cands
}

// spend is budget.spend for f's body: false when refused, with the time
// until the window ends.
func (o *origin) spend(f *fetch, alone bool) (reset time.Duration, ok bool) {
	b, now := o.budget, o.s.now
	b.roll(now)
	n := o.s.pieceLen(f.got)
	if b.spent+n > b.limit {
		if !alone && b.sent[f.got] > 0 {
			return b.start + b.window - now, false
		}
		o.overBudget++
	}
	b.spent += n
	b.sent[f.got]++
	f.charged, f.chargeAt = true, b.start
	f.told, f.left, f.reset = true, max(b.limit-b.spent, 0), max(b.start+b.window-now, 0)
	return 0, true
}

// settle is budget.settle: of f's charge, what it did not send (of sent
// bytes) is given back, and its piece is unsent again unless it went out
// whole; a charge of a window that has ended is left as it was.
func (o *origin) settle(f *fetch, sent int64) {
	b := o.budget
	if b == nil || !f.charged {
		return
	}
	f.charged = false
	if f.chargeAt != b.start {
		return
	}
	n := o.s.pieceLen(f.got)
	b.spent = max(b.spent+sent-n, 0)
	if sent < n && b.sent[f.got] > 0 {
		b.sent[f.got]--
	}
}

// choose is sentLedger.choose for the piece asked and the candidates
// offered: it records the piece f gets in f.got, or returns how long
// until one of them may be sent again.
func (o *origin) choose(f *fetch, asked int, cands []int, ra time.Duration) time.Duration {
	now := o.s.now
	f.swarmReq = len(cands) > 0
	recent := func(i int) bool {
		if !f.swarmReq || ra <= 0 || o.swarm[i] == never {
			return false
		}
		age := now - o.swarm[i]
		return age < ra || o.sending[i] > 0 && age < sendingHold*ra
	}
	again := func(i int) time.Duration {
		if age := now - o.swarm[i]; age < ra {
			return o.swarm[i] + ra
		}
		return min(now+ra, o.swarm[i]+sendingHold*ra)
	}
	better := func(c, b int) bool {
		if rc, rb := recent(c), recent(b); rc != rb {
			return rb
		}
		return o.count[c] < o.count[b] || o.count[c] == o.count[b] && o.last[c] < o.last[b]
	}
	best := asked
	for _, c := range cands {
		if better(c, best) {
			best = c
		}
	}
	if recent(best) {
		next := again(asked)
		for _, c := range cands {
			next = min(next, again(c))
		}
		return next - now
	}
	f.got, f.prevLast, f.prevSw, f.stamp, f.recorded = best, o.last[best], o.swarm[best], now, true
	o.count[best]++
	o.last[best] = now
	if f.swarmReq {
		o.swarm[best] = now
		o.sending[best]++
	}
	return 0
}

// undo takes back the ledger's record of f: its piece did not go out.
func (o *origin) undo(f *fetch) {
	if !f.recorded {
		return
	}
	f.recorded = false
	b := f.got
	o.count[b]--
	if o.last[b] == f.stamp {
		o.last[b] = f.prevLast
	}
	if f.swarmReq {
		o.sending[b]--
		if o.swarm[b] == f.stamp {
			o.swarm[b] = f.prevSw
		}
	}
}

// send starts f's body.
func (o *origin) send(f *fetch) {
	s := o.s
	f.queued = false
	f.turnAt = s.now
	var budgets []*link
	if ps := s.push; ps != nil {
		budgets = ps.links(nil, f.n)
	}
	f.flow = s.net.start(o.site, f.n.site, s.pieceLen(f.got), s.now, func(fl *flow) { o.sent(f, fl) }, budgets...)
	o.flows++
	o.maxFlows = max(o.maxFlows, o.flows)
	if f.turn {
		f.gen++
		s.after(paceMaxHold, event{kind: evPaceHold, x: f, i: f.gen})
	}
}

// sent: f's body is out. The piece's resend window counts from now.
func (o *origin) sent(f *fetch, fl *flow) {
	s := o.s
	f.flow = nil
	o.flows--
	o.bytes += float64(fl.size)
	o.releaseTurn(f)
	o.last[f.got] = s.now
	if f.swarmReq {
		o.swarm[f.got] = s.now
		o.sending[f.got]--
	}
	f.recorded = false
	f.charged = false // settled: sent in full
	o.ok++
	f.res = swarm.OriginResult{Piece: f.a.Piece, OK: true}
	if f.got != f.a.Piece {
		o.picked++
		f.res.Picked, f.res.Got = true, f.got
	}
	o.answer(f)
}

// releaseTurn gives f's turn, if it holds one, to the first answer
// waiting.
func (o *origin) releaseTurn(f *fetch) {
	if !f.turn {
		return
	}
	f.turn = false
	f.gen++
	d := o.s.now - f.turnAt
	if o.hold == 0 {
		o.hold = d
	} else {
		o.hold += (d - o.hold) / 8
	}
	if len(o.queue) == 0 {
		o.free++
		return
	}
	g := o.queue[0]
	o.queue = o.queue[1:]
	g.turn = true
	g.gen++
	o.send(g)
}

// holdOver: f has held its turn paceMaxHold; it goes back.
func (o *origin) holdOver(f *fetch, gen int) {
	if gen == f.gen && f.turn {
		o.releaseTurn(f)
	}
}

// deadline: f has waited paceMaxWait for a turn; it goes without one.
func (o *origin) deadline(f *fetch, gen int) {
	if gen != f.gen || !f.queued || f.over {
		return
	}
	if k := slices.Index(o.queue, f); k >= 0 {
		o.queue = slices.Delete(o.queue, k, k+1)
	}
	o.send(f)
}

// answer sends f's answer back to its peer.
func (o *origin) answer(f *fetch) {
	o.s.after(o.s.transit(o.site, f.n.site), event{kind: evOriginAns, x: f})
}

// answered: f's answer has reached its peer, which stored the piece it
// carries.
func (o *origin) answered(f *fetch) {
	if f.over {
		return
	}
	o.end(f)
	n := f.n
	if n.state != running {
		return
	}
	if f.res.OK {
		n.fromOrigin += o.s.pieceLen(f.got)
		n.have.Add(f.got)
		n.progressAt = o.s.now
	}
	if f.told {
		// originclient hands the answer's budget to the node first.
		n.post(swarm.OriginBudget{Left: f.left, Reset: f.reset})
	}
	if len(f.peers) > 0 {
		n.post(swarm.Learned{Addrs: f.peers})
	}
	n.post(f.res)
}

// dropNode ends the fetches of a peer that is gone: a body being sent is
// cut short (and not counted as sent), one waiting is dropped.
func (o *origin) dropNode(n *node) {
	for _, f := range slices.Clone(n.fetches) {
		if f.flow != nil {
			sent := f.flow.sent(o.s.now)
			o.bytes += sent
			o.settle(f, int64(sent))
			o.s.net.stop(f.flow, o.s.now)
			f.flow = nil
			o.flows--
			o.undo(f)
			o.releaseTurn(f)
		}
		if f.queued {
			if k := slices.Index(o.queue, f); k >= 0 {
				o.queue = slices.Delete(o.queue, k, k+1)
			}
			f.queued = false
			o.undo(f)
		}
		o.end(f)
	}
}
