package origin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/contract"
)

// errOverloaded ends the body of a response that was turned into a 503.
var errOverloaded = errors.New("origin: at the transfer limit")

// errBudgetSpent turns a proxied response into the 503 of a spent budget
// (budget.go).
var errBudgetSpent = errors.New("origin: past the file's egress budget")

// respWriter is the http.ResponseWriter every request is served through. It
// records the status and the body bytes for the metrics, asks the overload
// gate before a file body goes out, and shapes file bodies to Config.Rate.
//
// Otherwise it stays out of the way: without a rate it passes io.ReaderFrom
// straight through, so that http.ServeContent's copy from an *os.File still
// becomes sendfile(2), and Unwrap lets http.ResponseController reach the
// connection. Under it, conn ends the responses whose client stops reading.
type respWriter struct {
	http.ResponseWriter
	// conn is the ResponseWriter above, which ends stalled responses.
	conn  *idleWriter
	s     *Server
	req   *http.Request
	kind  kind
	start time.Time
	// shaped is where file bodies go when Config.Rate is set; nil otherwise.
	shaped io.Writer
	// onFull, if set, runs just before a 200 header goes out, to add the
	// headers only full responses carry (Repr-Digest).
	onFull func(http.Header)
	// source, if set, is what an overload answer is cut from: the file or
	// bundle being served (overloadanswer.go).
	source *pieceSource
	// version, if set, is the file version whose budget the body is
	// charged to (budget.go).
	version *version
	// picked, if set, is told once whether the piece pickPiece chose goes
	// out (a 206 admitted by the gate) or not (pick.go); then delivered,
	// when the handler is done, whether its whole body was written.
	picked    func(sent bool)
	delivered func(complete bool)

	status   int       // 0 until the header is written
	headerAt time.Time // when it was
	onePiece bool      // the answer is one piece: a swarm peer's, or an overload answer
	bytes    int64
	decided  bool          // the gate has been asked (or did not need to be)
	rejected bool          // the response is not the one the handler writes: a 503 or an overload answer
	retry    time.Duration // Retry-After of the 503 or the overload answer
	outcome  int           // why the answer past the limit is what it is (outcome*)
	piece    bool          // the gate said: answer with a piece
	t        *transfer     // the admitted transfer or overload answer, nil if none
	unpace   func()        // gives back the pacer's turn (pace.go), nil if none

	// The budget (budget.go): whether it was asked, what it charged, and
	// what a refusal says.
	budgeted   bool
	charge     *charge
	spentReset time.Duration
	spentPeers string
}

func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// WriteHeader asks the gate before a file body goes out, and writes a 503
// instead if the gate says no; the body that follows is then refused.
func (w *respWriter) WriteHeader(code int) {
	if w.status != 0 || code < 200 {
		// Informational headers, and superfluous calls net/http logs.
		w.ResponseWriter.WriteHeader(code)
		return
	}
	admitted := w.admit(code, contentLength(w.Header()))
	if admitted && !w.spend(code, w.Header(), contentLength(w.Header())) {
		w.budgetSpent()
		return
	}
	if wait := w.queueFull(code); admitted && wait > 0 {
		w.queueIsFull(wait)
		return
	}
	if w.picked != nil {
		w.picked(admitted && code == http.StatusPartialContent)
		w.picked = nil
	}
	if !admitted {
		w.overloaded()
		return
	}
	if code == http.StatusOK && w.onFull != nil {
		w.onFull(w.Header())
	}
	if code == http.StatusPartialContent {
		trimPartial(w.Header(), w.req.Header.Get("If-Range"))
	}
	w.pace(code)
	w.sendHeader(code)
}

// sendHeader writes the response's header with status code, noting when
// for the time-to-first-byte histogram.
func (w *respWriter) sendHeader(code int) {
	w.status, w.headerAt = code, time.Now()
	w.ResponseWriter.WriteHeader(code)
}

// trimPartial drops from a single-part 206 that answers an If-Range
// request the fields its client already has, from the response whose
// validator it sent. RFC 9110 (15.3.7) says such a 206 SHOULD NOT carry
// representation fields beyond those it requires (Content-Range; Date,
// ETag, Cache-Control, Expires, Content-Location and Vary when a 200 would
// carry them). So Content-Type, Content-Language and Last-Modified go; so,
// by our choice, do Accept-Ranges and the manifest's Link, which tell the
// client nothing new. Content-Encoding stays (it says how to read the
// body), and so does every other field. A piece answer of `stampede serve`
// goes from 347 header bytes to 168, 0.27% of a 64 KiB piece on the
// origin's link, where every swarm peer's pieces come from. A multipart
// answer (no Content-Range) keeps its Content-Type, which carries the
// parts' boundary. Nothing is dropped unless the answer's own validator is
// the one the client sent: an upstream that ignored If-Range may be
// answering from another version, and its Last-Modified is then the only
// way the client can tell. Overload answers do not come here
// (overloadanswer.go).
func trimPartial(h http.Header, ifRange string) {
	if ifRange == "" || h.Get("Content-Range") == "" {
		return
	}
	if strings.HasPrefix(ifRange, `"`) {
		if h.Get("Etag") != ifRange {
			return
		}
	} else if h.Get("Last-Modified") != ifRange {
		return
	}
	for _, k := range []string{"Content-Language", "Last-Modified", "Accept-Ranges", "Link"} {
		delete(h, k)
	}
	h["Content-Type"] = nil // nil, not deleted: net/http would sniff one
}

func (w *respWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.rejected {
		return 0, errOverloaded
	}
	var (
		n   int
		err error
	)
	if w.shaped != nil {
		n, err = w.shaped.Write(p)
	} else {
		n, err = w.ResponseWriter.Write(p)
	}
	w.count(int64(n))
	return n, err
}

// ReadFrom keeps net/http's sendfile path when the body is not shaped.
func (w *respWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.rejected {
		return 0, errOverloaded
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok && w.shaped == nil {
		n, err := rf.ReadFrom(src)
		w.count(n)
		return n, err
	}
	return io.Copy(writerOnly{w}, src)
}

// writerOnly hides ReadFrom so io.Copy does not call it again.
type writerOnly struct{ io.Writer }

func (w *respWriter) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *respWriter) Flush() { w.FlushError() }

func (w *respWriter) count(n int64) {
	w.bytes += n
	if w.kind != kindMetrics && w.kind != kindHealth {
		// What the origin serves; scrapes of /metrics and health checks
		// are the operator's.
		w.s.metrics.bytesSent.Add(float64(n))
	}
	if w.t != nil {
		w.t.sent.Add(n)
	}
}

// admit decides, once per response, whether a response with status code
// and a body of size bytes (-1 unknown) may go out. Only file bodies sent
// to a GET count as transfers.
func (w *respWriter) admit(code int, size int64) bool {
	if w.decided {
		return !w.rejected
	}
	w.decided = true
	if w.kind != kindFile || w.req.Method != http.MethodGet || (code != http.StatusOK && code != http.StatusPartialContent) {
		return true
	}
	t := &transfer{size: size}
	d := w.s.gate.enter(t, capable(w.req), rand.Float64())
	switch d.action {
	case actionAdmit:
		w.t = t
		return true
	case actionPiece:
		w.t, w.piece = t, true
	}
	w.rejected, w.retry, w.outcome = true, d.retryAfter, d.outcome
	return false
}

// overloaded answers a request the gate did not admit: with a piece if the
// gate said so and one can be given, with 503 otherwise.
func (w *respWriter) overloaded() {
	if w.piece && w.answerPiece() {
		w.s.metrics.overload[outcomePiece].Add(1)
		return
	}
	w.leaveGate() // the piece answer's slot, unused
	w.s.metrics.overload[w.outcome].Add(1)
	if w.outcome == outcomeBudget {
		w.budgetSpent()
		return
	}
	w.reject()
}

// reject answers 503 with Retry-After for an origin at its transfer limit.
func (w *respWriter) reject() {
	secs := retrySeconds(w.retry)
	h := w.Header()
	peers := h.Get(contract.PeersHeader) // set by answerPiece when it found no piece to give
	clear(h)
	if peers != "" {
		h.Set(contract.PeersHeader, peers)
	}
	w.write503(secs, fmt.Sprintf("stampede: this origin is sending as many files as it may (%d); retry in %d s\n",
		w.s.cfg.MaxTransfers, secs))
	w.s.metrics.rejectedOverload.Add(1)
	w.s.log.Debug("answered 503", "path", w.req.URL.Path, "remote", w.req.RemoteAddr, "retry_after", secs)
}

// leaveGate gives back the transfer slot the gate gave w, if any.
func (w *respWriter) leaveGate() {
	if w.t != nil {
		w.s.gate.leave(w.t)
		w.t = nil
	}
}

// queueIsFull answers 503 to a swarm's origin fetch that would wait wait
// for its turn (pace.go), with Retry-After wait: the piece picked for it
// does not go out, and the transfer slot the gate gave it is freed.
func (w *respWriter) queueIsFull(wait time.Duration) {
	if w.picked != nil {
		w.picked(false)
		w.picked = nil
	}
	w.leaveGate()
	w.rejected = true
	secs := retrySeconds(wait)
	clear(w.Header())
	w.write503(secs, fmt.Sprintf("stampede: %v of pieces are queued for the swarm before this one; get pieces from the swarm, or ask again in %d s\n",
		wait.Round(time.Millisecond), secs))
	w.s.metrics.paced[paceQueueFull].Add(1)
	w.s.log.Debug("answered 503: piece queue full", "path", w.req.URL.Path, "remote", w.req.RemoteAddr, "retry_after", secs)
}

// inSwarm answers 503 "in swarm" (pick.go): every piece the swarm peer
// would take was sent less than Config.ResendAfter ago, and may be sent
// again in wait.
func (w *respWriter) inSwarm(wait time.Duration) {
	secs := retrySeconds(wait)
	clear(w.Header())
	w.Header().Set(contract.InSwarmHeader, "1")
	w.decided = true // not a file body: the transfer gate has no say
	w.write503(secs, fmt.Sprintf("stampede: the pieces asked were all sent in the last %v; get them from the swarm, or ask again in %d s\n",
		w.s.cfg.ResendAfter, secs))
	w.s.metrics.rejectedInSwarm.Add(1)
}

// retrySeconds is d as a Retry-After: whole seconds, rounded up.
func retrySeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// write503 sends a 503 with Retry-After secs and a text body. The headers
// set for the file were cleared by the caller (validators describe a
// representation, and this is not one), which may have added its own.
func (w *respWriter) write503(secs int64, body string) {
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.sendHeader(http.StatusServiceUnavailable)
	n, _ := io.WriteString(w.ResponseWriter, body)
	w.count(int64(n))
}

// finish runs when the handler returns: it frees the transfer slot and
// accounts for the request.
func (w *respWriter) finish() {
	if w.picked != nil { // no header was written: nothing went out
		w.picked(false)
		w.picked = nil
	}
	if w.delivered != nil {
		// Written in full means handed to net/http and the kernel; the
		// last buffered bytes are flushed after we return.
		w.delivered(!w.conn.stalled && w.bytes == contentLength(w.Header()))
	}
	if w.conn.stalled {
		w.s.metrics.stalled.Add(1)
		w.s.log.Debug("ended a response: the client stopped reading", "path", w.req.URL.Path,
			"remote", w.req.RemoteAddr, "bytes", w.bytes, "write_idle_timeout", w.conn.idle)
	} else {
		// What net/http still has to write once we return (buffered bytes,
		// the end of a chunked body) gets a deadline too.
		w.conn.arm()
	}
	if w.unpace != nil {
		w.unpace()
	}
	w.settleBudget()
	if w.t != nil {
		w.s.gate.leave(w.t)
		if hook := w.s.testHookTransferDone; hook != nil {
			hook()
		}
	}
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	m := w.s.metrics
	m.requests[w.kind].Inc()
	if w.kind == kindFile && w.req.Method == http.MethodGet {
		m.fileReasons[reasonIndex(w.req.Header.Get(contract.ReasonHeader))].Inc()
	}
	m.countResponse(status)
	took := time.Since(w.start)
	m.requestDuration[w.kind].Observe(took.Seconds())
	if !w.headerAt.IsZero() {
		m.firstByte[w.kind].Observe(w.headerAt.Sub(w.start).Seconds())
	}
	if w.onePiece && w.status == http.StatusPartialContent {
		m.pieceDuration.Observe(took.Seconds())
	}
	if w.s.log.Enabled(context.Background(), slog.LevelDebug) {
		attrs := []slog.Attr{slog.String("method", w.req.Method), slog.String("path", w.req.URL.Path),
			slog.String("remote", w.req.RemoteAddr), slog.Int("status", status),
			slog.Int64("bytes", w.bytes), slog.Duration("took", took)}
		if rg := w.req.Header.Get("Range"); rg != "" {
			attrs = append(attrs, slog.String("range", rg))
		}
		if r := w.req.Header.Get(contract.ReasonHeader); r != "" {
			attrs = append(attrs, slog.String("reason", r))
		}
		w.s.log.LogAttrs(context.Background(), slog.LevelDebug, "request", attrs...)
	}
}

// contentLength returns the Content-Length in h, or -1.
func contentLength(h http.Header) int64 {
	n, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// minWriteRate sizes the writes, in bytes per second: each is cut to what a
// client taking minWriteRate takes within the write idle timeout, so that
// a short timeout does not end the response of such a client for want of
// a write it could not finish in time. With the default timeout the slices
// are larger than any write: nothing is cut.
const minWriteRate = 2 << 10

// idleWriter is the connection end of every response. Before each write it
// sets the connection's write deadline Config.WriteIdleTimeout ahead
// (http.ResponseController.SetWriteDeadline), so that a client that stops
// reading ends its response, and frees the transfer slot it holds, instead
// of holding it forever; a client that keeps reading keeps pushing the
// deadline back.
//
// A write that misses its deadline ends the response: net/http then closes
// the connection. The exception is sendfile(2), which sends a whole body in
// one call: there the deadline is renewed each time it passes if the client
// took any bytes since it was set, so a body is ended once its client has
// taken nothing for a whole timeout (within two timeouts of its last byte),
// however long it takes in all.
type idleWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	req     *http.Request
	idle    time.Duration // 0: no deadlines
	slice   int           // most bytes per write: what a client at minWriteRate takes within idle
	stalled bool          // a write missed its deadline: the response is over
}

func newIdleWriter(w http.ResponseWriter, r *http.Request, idle time.Duration) *idleWriter {
	iw := &idleWriter{ResponseWriter: w, rc: http.NewResponseController(w), req: r}
	if idle > 0 {
		iw.idle = idle
		iw.slice = max(1, int(min(idle.Seconds()*minWriteRate, 1<<30)))
	}
	return iw
}

func (w *idleWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// arm sets the write deadline idle ahead. A ResponseWriter that cannot set
// deadlines (a recorder in tests, a server of the embedder's that hides
// its connection) turns them off for the response.
func (w *idleWriter) arm() {
	if w.idle > 0 && w.rc.SetWriteDeadline(time.Now().Add(w.idle)) != nil {
		w.idle = 0
	}
}

func (w *idleWriter) Write(p []byte) (int, error) {
	w.arm()
	if w.idle == 0 {
		return w.ResponseWriter.Write(p)
	}
	var n int
	for len(p) > 0 {
		k := min(len(p), w.slice)
		m, err := w.ResponseWriter.Write(p[:k])
		n += m
		if err != nil {
			w.check(err)
			return n, err
		}
		if p = p[k:]; len(p) > 0 {
			w.arm()
		}
	}
	return n, nil
}

// ReadFrom keeps net/http's sendfile path for the files http.ServeContent
// sends (an *io.LimitedReader over an *os.File); anything else goes
// through Write, a deadline per write.
func (w *idleWriter) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := w.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.Copy(writerOnly{w}, src)
	}
	w.arm()
	if w.idle == 0 {
		return rf.ReadFrom(src)
	}
	lr, ok := src.(*io.LimitedReader)
	if !ok {
		return io.Copy(writerOnly{w}, src)
	}
	if _, ok := lr.R.(*os.File); !ok {
		return io.Copy(writerOnly{w}, src)
	}
	var sent int64
	for {
		left := lr.N
		n, err := rf.ReadFrom(lr)
		sent += n
		// Go on only where nothing was lost: every byte taken from the file
		// was handed on (a copy through a buffer that a write gave up on
		// takes more than it hands on), and net/http saw no failed write of
		// its own buffers (it cancels the request's context on one).
		if n > 0 && errors.Is(err, os.ErrDeadlineExceeded) && left-lr.N == n && w.req.Context().Err() == nil {
			w.arm()
			continue
		}
		w.check(err)
		return sent, err
	}
}

func (w *idleWriter) FlushError() error {
	w.arm()
	err := w.rc.Flush()
	w.check(err)
	return err
}

// check notes a write that missed its deadline.
func (w *idleWriter) check(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.stalled = true
	}
}
