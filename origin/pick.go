package origin

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/pieceset"
)

// Piece picks: the origin chooses which piece a swarm peer gets.
//
// A peer goes to the origin for a piece that no peer it knows has or is
// fetching. Its view is partial and late (a START or HAVE takes a round
// trip to reach it, and it does not know every peer), so two peers that
// do not see each other may fetch the same piece, and every such copy is
// origin upload spent twice. The origin sees every fetch. So a peer's
// request may offer, besides the piece its Range asks for, other pieces it
// would take as well:
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
// random sample). So
// concurrent fetchers of the crowd get pieces nobody has been sent yet as
// long as their candidates include one. Every single-piece Range request
// of a file whose manifest is cached counts as sending that piece, offered
// candidates or not. A pick answer carries no Retry-After, which tells it
// from an overload answer (overloadanswer.go): the peer may go on fetching.
//
// When the piece it would send went out less than Config.ResendAfter ago
// (counted from the end of its body, or from its request while it is
// still being sent), and the request offered candidates (only a swarm peer
// does), every piece the peer would take is already on its way through
// the swarm: another copy from the origin would be origin upload spent
// twice, taken from the pieces nobody has yet. The answer is then
//
//	503 Service Unavailable
//	Stampede-In-Swarm: 1
//	Retry-After: S                       (when the origin would send it again)
//
// and the peer leaves those pieces to the swarm for S, still free to fetch
// others. A piece whose copy is lost with a peer that left is sent again
// once ResendAfter has passed.
//
// Only files served from a directory pick; in upstream mode the range
// asked is forwarded as it is.

// CandidatesHeader lists the pieces a request would take instead of the
// one its Range asks for.
const CandidatesHeader = "Stampede-Candidates"

// InSwarmHeader marks a 503 that says "the pieces you would take were all
// sent just now: get them from the swarm".
const InSwarmHeader = "Stampede-In-Swarm"

// maxPickCandidates bounds the candidates read from one request.
const maxPickCandidates = 256

// sentLedger is how often and when last the origin sent each piece of one
// file version.
type sentLedger struct {
	count []uint32
	last  []int64 // UnixNano
}

func newSentLedger(n int) *sentLedger {
	return &sentLedger{count: make([]uint32, n), last: make([]int64, n)}
}

// choose returns the piece to send for a request asking for asked and
// offering cands (indexes below the ledger's length) and records it as
// sent; undo takes the record back if it is not sent after all. When cands
// is not empty and even the piece sent longest ago among the fewest-sent
// went out less than resendAfter ago (resendAfter > 0), nothing is
// recorded and wait is how long until it may go again.
func (l *sentLedger) choose(asked int, cands []int, now time.Time, resendAfter time.Duration) (piece int, undo func(), wait time.Duration) {
	// Fewest sends first, then the one sent longest ago (more likely lost
	// with a peer that left than one still on its way into the swarm).
	// Strict comparisons keep the asked piece on a tie: unsent, it is as
	// new as any, and the peer's choice respects its own preferences.
	best := asked
	for _, c := range cands {
		if l.count[c] < l.count[best] || l.count[c] == l.count[best] && l.last[c] < l.last[best] {
			best = c
		}
	}
	last := l.last[best]
	if len(cands) > 0 && resendAfter > 0 && l.count[best] > 0 {
		if age := now.Sub(time.Unix(0, last)); age < resendAfter {
			return best, nil, resendAfter - age
		}
	}
	l.count[best]++
	l.last[best] = now.UnixNano()
	return best, func() {
		l.count[best]--
		l.last[best] = last
	}, 0
}

// pickPiece records the piece r asks for in the file's ledger and, when r
// offers candidates and the origin prefers another of them, rewrites r's
// Range to that piece and marks the response with PieceHeader; or, when
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
	cands, _ := pieceset.ParseList(r.Header.Get(CandidatesHeader), m.NumPieces(), maxPickCandidates)
	now := time.Now()
	var (
		got   int
		again bool
		undo  func()
		wait  time.Duration
	)
	fresh := func() *sentLedger { return newSentLedger(m.NumPieces()) }
	s.picks.with(m, now, fresh, func(l *sentLedger) {
		got, undo, wait = l.choose(asked, cands, now, s.cfg.ResendAfter)
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
		w.Header().Set(PieceHeader, strconv.Itoa(got))
	}
	w.picked = func(sent bool) {
		if !sent {
			// A 503 or an overload answer, a 200 because If-Range did
			// not match, no response at all: the piece did not go out.
			// The request is the client's again (an overload answer
			// prefers the piece it asked for).
			s.picks.with(m, time.Now(), fresh, func(*sentLedger) { undo() })
			w.Header().Del(PieceHeader)
			r.Header.Set("Range", asking)
			return
		}
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
		// the swarm yet.
		w.delivered = func() {
			s.picks.with(m, time.Now(), fresh, func(l *sentLedger) { l.last[got] = time.Now().UnixNano() })
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
