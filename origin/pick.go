package origin

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
)

// Piece picks: the origin chooses which piece a swarm peer gets.
//
// A peer goes to the origin for a piece that no peer it knows has or is
// fetching. Its view is partial and late (a START or HAVE takes a round
// trip to reach it, and it does not know every peer), so two peers that
// do not see each other may fetch the same piece, and every such copy is
// origin upload spent twice. The origin sees every fetch. So a peer's
// request may offer, besides the piece its Range asks for, other pieces it
// would take as well (or name the piece asked alone, which marks it as a
// swarm peer's fetch with nothing else to offer: see "in swarm" below):
//
//	GET /P
//	Range: bytes=A-B                     (exactly one piece of the manifest)
//	Stampede-Candidates: 3,7-9,120       (piece indexes, ascending ranges)
//
//	206 Partial Content
//	Content-Range: bytes X-Y/SIZE        (piece N)
//	Stampede-Piece: N                    (only when N is not the piece asked)
//
// The origin sends the piece it has sent least often of the asked one and
// the candidates; among equals, the one sent longest ago, and the asked
// one, then the first offered, among those never sent (the peer offers a
// random sample). So concurrent fetchers of the crowd get pieces nobody
// has been sent yet as long as their candidates include one. Every
// single-piece Range request of a file whose manifest is cached counts as
// sending that piece, offered candidates or not, unless its body is cut
// short. A pick answer carries no Retry-After, which tells it from an
// overload answer (overloadanswer.go): the peer may go on fetching.
//
// A piece sent to a swarm peer (a request that offered candidates) less
// than Config.ResendAfter ago, counted from the end of its body, or still
// being sent to one (for at most 4 windows from its request), is on its
// way through the swarm: another copy from the origin would be origin
// upload spent twice, taken from the pieces nobody has yet. A swarm peer's
// request gets such a piece only when it names no other; when every piece
// it names is such, the answer is
//
//	503 Service Unavailable
//	Stampede-In-Swarm: 1
//	Retry-After: S                       (when the first may be sent again)
//
// and the peer leaves those pieces to the swarm for S, still free to fetch
// others. A piece whose copy is lost with a peer that left is sent again
// once ResendAfter has passed. Sends to other clients (plain HTTP, get
// --no-swarm) do not count here: the swarm does not have those pieces.
// Nor is a request refused whose If-Range is not the file's ETag: a peer
// with a stale manifest learns so from the 200 it gets; nor one whose
// Stampede-Reason is origin:no-peers: a peer that knows no other has no
// swarm to get the piece from.
//
// Only files served from a directory pick; in upstream mode the range
// asked is forwarded as it is.

// maxPickCandidates bounds the candidates read from one request.
const maxPickCandidates = 256

// sentLedger is how often and when last the origin sent each piece of one
// file version.
type sentLedger struct {
	count []uint32
	last  []int64 // UnixNano of the last send to anyone
	// swarm is the UnixNano of the last send to a swarm peer (a request
	// that offered candidates): when its body went out in full, or when
	// it was asked for while it is being sent. 0: never.
	swarm []int64
	// sending counts the sends to swarm peers under way.
	sending []uint16
}

func newSentLedger(n int) *sentLedger {
	return &sentLedger{count: make([]uint32, n), last: make([]int64, n), swarm: make([]int64, n), sending: make([]uint16, n)}
}

// sendingHold bounds, in resend windows from its request, how long a send
// to a swarm peer still under way keeps its piece "recent": a busy origin's
// sends take seconds, but a stuck one (ended only by the write idle
// timeout) must not hold the piece from the rest of the swarm that long.
const sendingHold = 4

// choose returns the piece to send for a request asking for asked and
// offering cands (indexes below the ledger's length) and records it as
// sent; undo takes the record back if it is not sent after all.
//
// For a swarm peer's request (cands not empty) and resendAfter > 0, the
// pieces on their way through the swarm come last: sent to a swarm peer
// less than resendAfter ago, or still being sent to one (for at most
// sendingHold windows). If all of them are, nothing is recorded and wait
// is how long until the first may go again.
func (l *sentLedger) choose(asked int, cands []int, now time.Time, resendAfter time.Duration) (piece int, undo func(), wait time.Duration) {
	swarm, t, ra := len(cands) > 0, now.UnixNano(), int64(resendAfter)
	recent := func(i int) bool {
		if !swarm || ra <= 0 || l.swarm[i] == 0 {
			return false
		}
		age := t - l.swarm[i]
		return age < ra || l.sending[i] > 0 && age < sendingHold*ra
	}
	// again is when a recent piece i may go again (UnixNano).
	again := func(i int) int64 {
		if age := t - l.swarm[i]; age < ra {
			return l.swarm[i] + ra
		}
		return min(t+ra, l.swarm[i]+sendingHold*ra) // still being sent
	}
	// Then fewest sends first, then the one sent longest ago (more likely
	// lost with a peer that left than one still on its way into the
	// swarm). Strict comparisons keep the asked piece on a tie: unsent,
	// it is as new as any, and the peer's choice respects its own
	// preferences.
	better := func(c, b int) bool {
		if rc, rb := recent(c), recent(b); rc != rb {
			return rb
		}
		return l.count[c] < l.count[b] || l.count[c] == l.count[b] && l.last[c] < l.last[b]
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
		return best, nil, time.Duration(next - t)
	}
	last, sw := l.last[best], l.swarm[best]
	l.count[best]++
	l.last[best] = t
	if swarm {
		l.swarm[best] = t
		l.sending[best]++
	}
	return best, func() {
		// Later sends of the same piece may have been recorded since:
		// their times stay.
		l.count[best]--
		if l.last[best] == t {
			l.last[best] = last
		}
		if swarm {
			l.sending[best]--
			if l.swarm[best] == t {
				l.swarm[best] = sw
			}
		}
	}, 0
}

// delivered records that the body of piece went out in full, to a swarm
// peer if swarm (a send choose recorded): its resend window counts from
// now.
func (l *sentLedger) delivered(piece int, swarm bool, now time.Time) {
	l.last[piece] = now.UnixNano()
	if swarm {
		l.swarm[piece] = now.UnixNano()
		l.sending[piece]--
	}
}

// pickPiece records the piece r asks for in the file's ledger and, when r
// offers candidates and the origin prefers another of them, rewrites r's
// Range to that piece and marks the response with contract.PieceHeader; or, when
// every piece r would take was sent just now, answers 503 "in swarm" and
// reports true: the handler is done. It does nothing unless r's Range asks
// for exactly one piece of e's manifest.
func (s *Server) pickPiece(w *respWriter, r *http.Request, e *entry) (answered bool) {
	if e == nil || r.Method != http.MethodGet {
		return false
	}
	m := e.m
	asked := askedPiece(r, m)
	if asked < 0 || !exactPiece(r, m, asked) {
		return false
	}
	// Malformed candidates are ignored: the piece asked is served.
	cands, _ := contract.ParseCandidates(r.Header.Get(contract.CandidatesHeader), m.NumPieces(), maxPickCandidates)
	now := time.Now()
	var (
		got   int
		again bool
		undo  func()
		wait  time.Duration
	)
	fresh := func() *sentLedger { return newSentLedger(m.NumPieces()) }
	resend := s.cfg.ResendAfter
	switch ir := r.Header.Get("If-Range"); {
	case ir != "" && ir != w.Header().Get("Etag"):
		// Likely a stale manifest: the 200 it gets tells the peer so.
		resend = 0
	case r.Header.Get(contract.ReasonHeader) == reasonNoPeers:
		// A peer that knows no other has no swarm to leave a piece to: the
		// peer that had it may have left (one download of a file after
		// another, each alone, waited ResendAfter for its pieces).
		resend = 0
	}
	from, offer := asked, cands
	if unsent, _ := w.budgetFilter(m, m.PieceLen(asked)); unsent != nil {
		// Past the file's budget only a piece no swarm client got this
		// window may go (budget.go): offer those alone, the first in place
		// of the piece asked if that one went out.
		var left []int
		for _, c := range cands {
			if unsent(c) {
				left = append(left, c)
			}
		}
		switch {
		case unsent(asked) && len(left) == 0 && len(cands) > 0:
			offer = []int{asked} // still a swarm peer's fetch
		case unsent(asked):
			offer = left
		case len(left) > 0:
			from, offer = left[0], left
		}
	}
	s.picks.with(keyOf(m), now, fresh, func(l *sentLedger) {
		got, undo, wait = l.choose(from, offer, now, resend)
		again = l.count[got] > 1
	})
	if wait > 0 {
		w.inSwarm(wait)
		return true
	}
	swapped := got != asked
	asking := r.Header.Get("Range")
	if swapped {
		off, n := m.PieceOffset(got), m.PieceLen(got)
		r.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
		w.Header().Set(contract.PieceHeader, strconv.Itoa(got))
	}
	w.picked = func(sent bool) {
		if !sent {
			// A 503 or an overload answer, a 200 because If-Range did
			// not match, no response at all: the piece did not go out.
			// The request is the client's again (an overload answer
			// prefers the piece it asked for).
			s.picks.with(keyOf(m), time.Now(), fresh, func(*sentLedger) { undo() })
			w.Header().Del(contract.PieceHeader)
			r.Header.Set("Range", asking)
			return
		}
		w.onePiece = true
		if again {
			s.metrics.pieceSends[sendAgain].Add(1)
		} else {
			s.metrics.pieceSends[sendFirst].Add(1)
		}
		if swapped {
			s.metrics.picksSwapped.Add(1)
		}
		// The resend window counts from the end of the body: a piece
		// still on its way (a busy origin sends tens at once) is not in
		// the swarm yet. A body cut short did not send the piece.
		w.delivered = func(complete bool) {
			s.picks.with(keyOf(m), time.Now(), fresh, func(l *sentLedger) {
				if complete {
					l.delivered(got, len(offer) > 0, time.Now())
				} else {
					undo()
				}
			})
		}
	}
	return false
}

// Whether a piece sent had been sent before, for the metrics.
const (
	sendFirst = iota
	sendAgain
	numSends
)

var sendNames = [numSends]string{"first", "again"}

// exactPiece reports whether r's Range is exactly piece i of m.
func exactPiece(r *http.Request, m *manifest.Manifest, i int) bool {
	rs, err := httphdr.ParseRange(r.Header.Get("Range"), m.Size)
	return err == nil && len(rs) == 1 && rs[0].Start == m.PieceOffset(i) && rs[0].Length == m.PieceLen(i)
}
