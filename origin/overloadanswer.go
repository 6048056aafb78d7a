package origin

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
)

// The overload answer (Overhaul's "one chunk, a list of peers and the chunk
// hashes"), as HTTP:
//
//	GET /P                                   (past MaxTransfers)
//	Range: bytes=A-B                         (the piece the client wants; optional)
//	Stampede-Capabilities: overload
//
//	206 Partial Content
//	Content-Range: bytes X-Y/SIZE            (exactly piece N of the manifest)
//	Stampede-Piece: N
//	Stampede-Root: <the manifest's root, hex>
//	Stampede-Peers: 192.0.2.7:7000, [2001:db8::5]:7000
//	Retry-After: S                           (stay off the origin this long)
//	Stampede-Budget: left=B, reset=T         (the file's egress budget, budget.go)
//	Link: </.well-known/stampede/manifest/P>; rel="stampede-manifest"
//	ETag, Last-Modified, Content-Type        (as for any response of the file)
//
// Stampede-Piece marks the answer: the piece is the origin's choice
// (handout.go), which may differ from the range asked. Stampede-Peers is
// absent when the origin runs no tracker or the tracker knows no peers.
// Overload answers count against the file's egress budget; past it they
// carry only pieces not sent to a swarm client in its window, and when
// none is left the answer is the budget's 503 (budget.go).

// overloadPeers is how many peers an overload answer names.
const overloadPeers = 10

// What a request past MaxTransfers got, for the metrics.
const (
	outcomePiece      = iota // 206 with one piece and peers
	outcomeLegacy            // 503: the client did not ask for overload mode
	outcomeOff               // 503: overload mode is off
	outcomeFull              // 503: OverloadTransfers answers in flight
	outcomeNoManifest        // 503: the manifest of this version is not computed yet
	outcomeExhausted         // 503: every piece went out OverloadCopies times this window
	outcomeUpstream          // 503: upstream mode has no overload answers
	outcomeBudget            // 503: past the file's egress budget, and every piece not handed out went out this window (budget.go)
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"piece", "legacy", "off", "full", "no-manifest", "exhausted", "upstream", "budget"}

// capable reports whether r asks for overload mode.
func capable(r *http.Request) bool {
	return httphdr.HasToken(r.Header.Values(contract.CapabilitiesHeader), contract.CapabilityOverload)
}

// pieceSource is what an overload answer is cut from: the bytes of the
// version being served and a way to find its manifest without computing it.
type pieceSource struct {
	r io.ReaderAt
	// entry returns the cached manifest of exactly this version, or nil.
	entry func() *entry
}

// answerPiece sends the overload answer, or reports why it cannot (in
// w.outcome) and returns false. The handler's headers for the file (ETag,
// Last-Modified, Content-Type, Link) are kept; whatever the handler writes
// after this is refused.
func (w *respWriter) answerPiece() bool {
	src := w.source
	if src == nil {
		w.outcome = outcomeUpstream
		return false
	}
	e := src.entry()
	if e == nil {
		w.outcome = outcomeNoManifest
		return false
	}
	m := e.m
	peers := w.s.peersHeader(m)
	// Past the file's budget only a piece not sent this window may go.
	unsent, reset := w.budgetFilter(m, m.PieceSize)
	piece, retry, ok := w.s.handouts.pick(m, askedPiece(w.req, m), time.Now(), unsent)
	if !ok && unsent != nil && retry.IsZero() {
		w.outcome, w.spentReset, w.spentPeers = outcomeBudget, reset, peers
		return false
	}
	if !ok {
		w.outcome = outcomeExhausted
		w.retry = max(w.retry, min(time.Until(retry), maxRetryAfter))
		if peers != "" {
			w.Header().Set(contract.PeersHeader, peers) // reject keeps it
		}
		return false
	}
	off, n := m.PieceOffset(piece), m.PieceLen(piece)
	secs := int64((w.retry + time.Second - 1) / time.Second)
	h := w.Header()
	h.Del("Repr-Digest") // describes the whole representation, never a 206
	h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, m.Size))
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	h.Set(contract.PieceHeader, strconv.Itoa(piece))
	h.Set(contract.RootHeader, m.Root.String())
	if peers != "" {
		h.Set(contract.PeersHeader, peers)
	}
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	h.Set("Cache-Control", "no-store")
	if !w.spend(http.StatusPartialContent, h, n) {
		// The piece went to a swarm client between the choice and now.
		w.outcome = outcomeBudget
		return false
	}
	w.sendHeader(http.StatusPartialContent)
	w.onePiece = true
	sent, err := w.copyBody(io.NewSectionReader(src.r, off, n))
	w.s.metrics.overloadBytes.Add(float64(sent))
	if err != nil {
		w.s.log.Debug("overload answer cut short", "path", w.req.URL.Path, "piece", piece, "sent", sent, "err", err)
	}
	w.s.log.Debug("answered with a piece", "path", w.req.URL.Path, "remote", w.req.RemoteAddr,
		"piece", piece, "peers", peers, "retry_after", secs)
	return true
}

// copyBody sends src as the body, shaped like any file body, and counts it.
func (w *respWriter) copyBody(src io.Reader) (int64, error) {
	var dst io.Writer = w.ResponseWriter
	if w.shaped != nil {
		dst = w.shaped
	}
	n, err := io.Copy(writerOnly{dst}, src)
	w.count(n)
	return n, err
}

// askedPiece is the piece r's Range asks for when it asks for exactly the
// start of one piece, as stampede's downloader does; -1 otherwise.
func askedPiece(r *http.Request, m *manifest.Manifest) int {
	rs, err := httphdr.ParseRange(r.Header.Get("Range"), m.Size)
	if err != nil || len(rs) != 1 || rs[0].Start%m.PieceSize != 0 {
		return -1
	}
	return int(rs[0].Start / m.PieceSize)
}

// peersHeader is the value of contract.PeersHeader for m's swarm: the
// peers the embedded tracker knows, "" if none (or no tracker runs here).
func (s *Server) peersHeader(m *manifest.Manifest) string {
	if s.cfg.Tracker == nil {
		return ""
	}
	var addrs []netip.AddrPort
	for _, p := range s.cfg.Tracker.Peers(m.Root, m.Size, overloadPeers) {
		addrs = append(addrs, p.Addr)
	}
	return contract.FormatPeers(addrs)
}
