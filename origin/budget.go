package origin

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
)

// The egress budget (Config.MaxCopies, Config.BudgetWindow). Where the
// peers' uplinks, not the origin's, bound a crowd, every copy the origin
// sends shortens the crowd's time, and an origin that sends whatever it is
// asked sends many (aria2 took 11 copies of an uplink-bound crowd's file).
// The operator chooses between egress and speed: at most MaxCopies copies
// of each file version per window go to swarm clients, and past that a
// swarm client gets the pieces no peer can have from the origin, and the
// rest from the swarm.
//
// Every body byte of the version counts, whoever it goes to: piece and
// range answers, overload answers (overloadanswer.go), whole files. A
// body is charged in full when its header goes out (so that a crowd's
// concurrent requests cannot all pass a budget that has room for one), and
// what it did not send is given back when it ends, if its window has not.
// A window starts with the first body charged after the last one ended.
//
// Past the budget (the body would take the window's bytes over it):
//
//   - A swarm client (one that sends contract.CapabilitiesHeader with
//     "overload": stampede's swarm fetches) is still served a piece that
//     has not gone to a swarm client in this window: every piece gets out
//     at least once per window, so nobody starves of a piece no peer has.
//     Among the pieces a request offers (Stampede-Candidates) such a piece
//     is picked (pick.go), and overload answers hand out only such pieces.
//   - A swarm client that says it downloads alone (Stampede-Suppliers: 0,
//     or Stampede-Reason: origin:no-peers) is served: it has nowhere else
//     to get the piece.
//   - Any other swarm request is answered
//
//     503 Service Unavailable
//     Stampede-Budget: spent, left=0, reset=S
//     Retry-After: S                 (the window's end)
//     Stampede-Peers: ...            (the swarm, when a tracker runs here)
//
//     which a client tells from a failing or busy origin by its
//     Stampede-Budget, and leaves the pieces it asked to the swarm.
//   - A plain client (curl, a browser, get --no-swarm, a swarm client's
//     200 after a failed If-Range, which tells it the file changed) is
//     never refused: it cannot get the file from peers. Its bytes count
//     all the same: the budget is the operator's egress, and swarm
//     clients, who have peers, make way for those who have not.
//
// Every answer to a swarm client that sends a body carries Stampede-Budget
// with the bytes left in the window and the seconds until it ends, so a
// client may spend spare budget where it shortens the crowd's time.
//
// The budget is the bound on what a file costs per window; overload mode's
// OverloadCopies per OverloadWindow bounds its own share within it (by
// default one copy per 30 s, which could spend a 1.5-copy budget in 45 s).
// Overload answers count against the budget like any other, and past it an
// overload answer carries only a piece not yet sent this window, or is the
// 503 above. So the file's bytes to swarm clients stay within MaxCopies per
// BudgetWindow, beyond which each piece goes out once more per window at
// most (plus what lone clients take), whichever mode sends it.
//
// The window is minutes, not seconds (DefaultBudgetWindow): it must hold a
// whole flash crowd for the budget to be "copies per crowd", and a budget
// binds only if the origin can send more than it within a window: at
// 40 Mbit/s a copy of 512 MiB takes 107 s, so a 30-second window (the
// overload window's) would let 0.28 copies through and never refuse
// anything, while a crowd of that file takes minutes. A crowd takes at
// least F/u, its peers' time to upload a copy each: 134 s for 16 MiB on
// 1 Mbit/s uplinks. The window is not hours either: once the budget is
// spent, a piece whose every holder left after its one send waits for the
// window's end.
//
// The core (budget) is pure: the state of one version, events with their
// time. Versions are keyed by the manifest cache's key and validators, so
// that bodies sent before the manifest is computed count too; which piece
// a body is needs the manifest, and a swarm request for a version whose
// manifest the origin does not have at hand is served (counted as
// "unknown"): the origin cannot tell whether its pieces went out.

// budget is the pure state of one file version's egress budget.
type budget struct {
	start time.Time // of the current window; zero before the first charge
	spent int64     // body bytes charged in the current window
	// sent counts, per piece, the sends to swarm clients charged in the
	// current window; nil until the version's pieces are known.
	sent []uint16
}

// spendAsk is an answer about to send a body of the version.
type spendAsk struct {
	bytes  int64 // its body's length, 0 if unknown (charged when it ends)
	swarm  bool  // to a swarm client
	alone  bool  // that says it downloads alone
	pieces int   // the version's pieces, 0 if the manifest is not at hand
	piece  int   // the one piece the body is, -1 none
}

// verdict is what the budget says of an answer.
type verdict int

const (
	verdictWithin  verdict = iota // within the budget
	verdictUnsent                 // past it: a piece not sent to a swarm client this window
	verdictAlone                  // past it: a swarm client alone
	verdictPlain                  // past it: a plain client
	verdictUnknown                // past it: a swarm client, the version's pieces not known here
	verdictSpent                  // refused
	numVerdicts
)

// overrunNames label the answers sent past a budget, by why
// (verdictUnsent to verdictUnknown).
var overrunNames = [...]string{"unsent", "alone", "plain", "unknown"}

// charge is what an answer was charged, to settle when it ends.
type charge struct {
	start time.Time // the window charged
	bytes int64
	piece int // marked sent, -1 none
}

// roll starts a new window at now if the current one is over.
func (b *budget) roll(now time.Time, window time.Duration) {
	if b.start.IsZero() || now.Sub(b.start) >= window || now.Before(b.start) {
		b.start, b.spent = now, 0
		clear(b.sent)
	}
}

// past reports whether a body of n bytes at now would take the window's
// bytes over limit.
func (b *budget) past(n int64, now time.Time, limit int64, window time.Duration) bool {
	b.roll(now, window)
	return b.spent+n > limit
}

// unsent reports whether piece i has gone to no swarm client this window.
func (b *budget) unsent(i int) bool { return i >= 0 && i < len(b.sent) && b.sent[i] == 0 }

// spend decides a and charges it unless refused.
func (b *budget) spend(a spendAsk, now time.Time, limit int64, window time.Duration) (verdict, charge) {
	b.roll(now, window)
	if a.pieces > 0 && len(b.sent) != a.pieces {
		b.sent = make([]uint16, a.pieces)
	}
	v := verdictWithin
	if b.spent+a.bytes > limit {
		switch {
		case !a.swarm:
			v = verdictPlain
		case a.alone:
			v = verdictAlone
		case a.pieces == 0:
			v = verdictUnknown
		case b.unsent(a.piece):
			v = verdictUnsent
		default:
			return verdictSpent, charge{}
		}
	}
	b.spent += a.bytes
	c := charge{start: b.start, bytes: a.bytes, piece: -1}
	if a.swarm && a.piece >= 0 && a.piece < len(b.sent) && b.sent[a.piece] < math.MaxUint16 {
		b.sent[a.piece]++
		c.piece = a.piece
	}
	return v, c
}

// settle ends the answer charged c, which sent sent body bytes, all of
// them if complete: what it did not send is given back, and a piece it did
// not deliver is unsent again. A charge of a window that has ended is
// left as it was.
func (b *budget) settle(c charge, sent int64, complete bool) {
	if !c.start.Equal(b.start) {
		return
	}
	b.spent = max(b.spent+sent-c.bytes, 0)
	if !complete && c.piece >= 0 && c.piece < len(b.sent) && b.sent[c.piece] > 0 {
		b.sent[c.piece]--
	}
}

// left is the bytes left under limit, and the time until the window ends.
func (b *budget) left(now time.Time, limit int64, window time.Duration) (int64, time.Duration) {
	return max(limit-b.spent, 0), max(b.start.Add(window).Sub(now), 0)
}

// versionKey names a file version for its budget: the manifest cache's key
// and the version's validators.
type versionKey struct {
	name string
	v    validators
}

// budgets holds the budget of every file version served.
type budgets struct {
	copies float64 // Config.MaxCopies
	window time.Duration
	files  perFile[versionKey, *budget]
}

// newBudgets returns the budgets for copies per window; nil when copies is
// not positive (no budget).
func newBudgets(copies float64, window time.Duration) *budgets {
	if copies <= 0 {
		return nil
	}
	return &budgets{copies: copies, window: window}
}

// limit is the budget of a version of size bytes.
func (bs *budgets) limit(size int64) int64 {
	return int64(math.Min(math.Ceil(bs.copies*float64(size)), math.MaxInt64/2))
}

// spend decides a for the version k of size bytes at now and charges it;
// left and reset are where the budget stands after it.
func (bs *budgets) spend(k versionKey, size int64, a spendAsk, now time.Time) (v verdict, c charge, left int64, reset time.Duration) {
	limit := bs.limit(size)
	bs.files.with(k, now, func() *budget { return new(budget) }, func(b *budget) {
		v, c = b.spend(a, now, limit, bs.window)
		left, reset = b.left(now, limit, bs.window)
	})
	return v, c, left, reset
}

// settle ends an answer charged c (budget.settle).
func (bs *budgets) settle(k versionKey, c charge, sent int64, complete bool, now time.Time) {
	bs.files.with(k, now, func() *budget { return new(budget) }, func(b *budget) { b.settle(c, sent, complete) })
}

// unsentPast returns, when a body of n bytes of version k (size bytes, of
// pieces pieces) would go past its budget at now, which pieces may still
// go (those sent to no swarm client this window; a copy, taken now) and
// when the window ends; nil while within the budget.
func (bs *budgets) unsentPast(k versionKey, size int64, pieces int, n int64, now time.Time) (unsent func(int) bool, reset time.Duration) {
	limit := bs.limit(size)
	bs.files.with(k, now, func() *budget { return new(budget) }, func(b *budget) {
		if !b.past(n, now, limit, bs.window) {
			return
		}
		_, reset = b.left(now, limit, bs.window)
		if len(b.sent) != pieces {
			unsent = func(int) bool { return true } // none known sent
			return
		}
		sent := make([]bool, pieces)
		for i, c := range b.sent {
			sent[i] = c > 0
		}
		unsent = func(i int) bool { return i >= 0 && i < len(sent) && !sent[i] }
	})
	return unsent, reset
}

// version is the file version a response's body belongs to.
type version struct {
	key versionKey
	// entry returns the version's manifest if it is at hand, or nil.
	entry func() *entry
}

// alone reports whether r says its client downloads alone.
func alone(r *http.Request) bool {
	return r.Header.Get(contract.ReasonHeader) == reasonNoPeers || contract.Alone(r.Header.Get(contract.SuppliersHeader))
}

// swarmClient reports whether an answer with status code to r goes to a
// swarm client, as the budget counts them: a client that asks for
// overload mode, except for a 200 after an If-Range that failed (the file
// changed: the client learns so from it, as a plain client would).
func swarmClient(r *http.Request, code int) bool {
	return capable(r) && !(code == http.StatusOK && r.Header.Get("If-Range") != "")
}

// spend asks the budget whether the file body about to go out with status
// code, header h and size bytes (-1 unknown) may go, charges it, and tells
// a swarm client where the budget stands (contract.BudgetHeader). False:
// refused; the caller answers with budgetSpent. It decides once per
// response, and has no say over anything but a file body sent to a GET.
func (w *respWriter) spend(code int, h http.Header, size int64) bool {
	bs := w.s.budgets
	if w.budgeted || bs == nil || w.version == nil {
		return true
	}
	w.budgeted = true
	if w.kind != kindFile || w.req.Method != http.MethodGet || (code != http.StatusOK && code != http.StatusPartialContent) {
		return true
	}
	a := spendAsk{bytes: max(size, 0), swarm: swarmClient(w.req, code), alone: alone(w.req), piece: -1}
	total := int64(-1)
	var m *manifest.Manifest
	if e := w.version.entry(); e != nil {
		m = e.m
		total, a.pieces, a.piece = m.Size, m.NumPieces(), bodyPiece(code, h, m)
	} else if code == http.StatusOK {
		total = size
	} else if cr, err := httphdr.ParseContentRange(h.Get("Content-Range")); err == nil {
		total = cr.Size
	}
	if total < 0 {
		return true // no size, no budget
	}
	v, c, left, reset := bs.spend(w.version.key, total, a, time.Now())
	if v == verdictSpent {
		w.spentReset = reset
		if m != nil {
			w.spentPeers = w.s.peersHeader(m)
		}
		return false
	}
	w.charge = &c
	if v != verdictWithin {
		w.s.metrics.budgetOverruns[v-verdictUnsent].Inc()
	}
	if a.swarm {
		h.Set(contract.BudgetHeader, contract.FormatBudget(contract.Budget{Left: left, Reset: reset}))
	}
	return true
}

// bodyPiece is the piece of m that a body with status code and header h
// is exactly, or -1.
func bodyPiece(code int, h http.Header, m *manifest.Manifest) int {
	if code == http.StatusOK {
		if m.NumPieces() == 1 {
			return 0
		}
		return -1
	}
	cr, err := httphdr.ParseContentRange(h.Get("Content-Range"))
	if err != nil || cr.Size != m.Size || cr.First%m.PieceSize != 0 {
		return -1
	}
	i := int(cr.First / m.PieceSize)
	if i >= m.NumPieces() || cr.Last != cr.First+m.PieceLen(i)-1 {
		return -1
	}
	return i
}

// budgetFilter is what a swarm client's piece choice (an overload answer,
// a pick among candidates) must keep to when a piece of n bytes of m would
// go past the budget: the pieces not sent this window, and when the window
// ends. nil when anything may go: within the budget, no budget, a plain
// client or one alone.
func (w *respWriter) budgetFilter(m *manifest.Manifest, n int64) (unsent func(int) bool, reset time.Duration) {
	bs := w.s.budgets
	if bs == nil || w.version == nil || !capable(w.req) || alone(w.req) {
		return nil, 0
	}
	return bs.unsentPast(w.version.key, m.Size, m.NumPieces(), n, time.Now())
}

// budgetSpent answers 503 to a swarm client past the file's budget: the
// pieces it asked went out this window, and the swarm has them. Whatever
// was readied for the body (a piece picked, a transfer slot) is given back.
func (w *respWriter) budgetSpent() {
	if w.picked != nil {
		w.picked(false)
		w.picked = nil
	}
	w.leaveGate()
	w.rejected = true
	secs := retrySeconds(max(w.spentReset, time.Second))
	h := w.Header()
	clear(h)
	h.Set(contract.BudgetHeader, contract.FormatBudget(contract.Budget{Spent: true, Reset: w.spentReset}))
	if w.spentPeers != "" {
		h.Set(contract.PeersHeader, w.spentPeers)
	}
	w.write503(secs, fmt.Sprintf("stampede: this file's egress budget for this window is spent, and the pieces asked went out in it; "+
		"get them from the swarm, or ask again in %d s\n", secs))
	w.s.metrics.rejectedBudget.Add(1)
	w.s.log.Debug("answered 503: budget spent", "path", w.req.URL.Path, "remote", w.req.RemoteAddr, "retry_after", secs)
}

// settleBudget gives back, when the response ends, what its charge did
// not send.
func (w *respWriter) settleBudget() {
	if w.charge == nil {
		return
	}
	var sent int64
	if w.status == http.StatusOK || w.status == http.StatusPartialContent {
		sent = w.bytes
	}
	c := *w.charge
	complete := !w.conn.stalled && sent > 0 && (c.bytes == 0 || sent == c.bytes)
	w.s.budgets.settle(w.version.key, c, sent, complete, time.Now())
	w.charge = nil
}
