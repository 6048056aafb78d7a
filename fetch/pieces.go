package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
)

// errNoRanges: the server answered a Range request with the whole file.
var errNoRanges = errors.New("server ignores Range requests")

// busyError is a 503 to honour. peers are those an overloaded origin
// named (overload.go).
type busyError struct {
	wait  time.Duration
	peers []string
}

func (e *busyError) Error() string { return fmt.Sprintf("server busy (503), retry after %v", e.wait) }

// attempt is one request for one piece.
type attempt struct {
	piece    int
	start    time.Time
	deadline time.Time
	cancel   context.CancelFunc
	buf      []byte
	late     bool // its deadline passed (counted once against the window)
	dropped  bool // cancelled by the loop; its outcome does not count
	// overload asks for overload mode: the origin may answer past its
	// limits with another piece (stored, then reported as *overloadAnswer).
	overload bool
	// candidates are other pieces the origin may send instead (pick.go);
	// got is the piece the response carried (piece, or the origin's pick).
	candidates []int
	got        int
	// idle, if set, ends the attempt when the origin sends nothing for that
	// long: no answer to the request, or no body byte (errIdle).
	idle time.Duration
	// handedOff is set by the attempt's goroutine when the sink took buf
	// (and will return it to the free list itself).
	handedOff bool
}

type pieceState struct {
	attempts []*attempt // in flight, oldest first; at most two
	tries    int        // attempts started
	// transient counts the network's failures (and "not now" statuses)
	// since the download last verified a piece: a slow origin that resets
	// a connection now and then must not wear the piece out.
	transient patience
	bad       int       // corrupt or malformed answers: these never reset
	notBefore time.Time // retry backoff
}

type outcome struct {
	a   *attempt
	err error
}

// runPieces fetches the pieces of m that are missing with parallel Range
// requests. It is the only goroutine touching the scheduling state; each
// attempt runs in its own goroutine and reports back on a channel.
func (d *Download) runPieces(ctx context.Context, m *manifest.Manifest, in *info, res *Result) error {
	nbuf := int(min(int64(2*d.cfg.MaxParallel+2), max(2, d.cfg.MemoryBudget/m.PieceSize)))
	free := make(chan []byte, nbuf)
	for range nbuf {
		free <- nil // allocated on first use
	}
	sk, err := d.openSink(m, d.cfg.Continue)
	if err != nil {
		return err
	}
	todo := sk.missing()
	res.PiecesResumed = m.NumPieces() - len(todo)
	d.done.Store(m.Size - bytesOf(m, todo))
	d.phase.Store("downloading")

	win := newWindow(2, min(d.cfg.MaxParallel, nbuf), d.cfg.InitialDeadline)

	ctx, cancelAll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancelAll(); wg.Wait() }()
	outcomes := make(chan outcome, 2*nbuf)

	var (
		queue      = todo // pieces not started, in order
		retry      []int  // pieces to start again, after notBefore
		inflight   = map[int]*pieceState{}
		failed     = map[int]*pieceState{} // state of pieces waiting in retry
		active     int                     // attempts in flight
		remaining  = len(todo)
		pauseUntil time.Time // set by 503
		busyWaited time.Duration
		verified   int64 // pieces verified and written: the progress that resets patience
	)
	head := func() int { // lowest piece not yet done
		h := -1
		if len(queue) > 0 {
			h = queue[0]
		}
		for _, i := range retry {
			if h < 0 || i < h {
				h = i
			}
		}
		for i := range inflight {
			if h < 0 || i < h {
				h = i
			}
		}
		return h
	}
	launch := func(i int, ps *pieceState, now time.Time, reason string) bool {
		// In ordered output, pieces waiting for an earlier one hold buffers;
		// keep one back for the earliest so it can always be fetched.
		if sk.ordered() && i != head() && len(free) <= 1 {
			return false
		}
		var buf []byte
		select {
		case buf = <-free:
		default:
			return false
		}
		if buf == nil {
			buf = make([]byte, m.PieceSize)
		}
		actx, cancel := context.WithCancel(ctx)
		a := &attempt{piece: i, start: now, deadline: now.Add(win.deadline(ps.tries)), cancel: cancel, buf: buf}
		ps.attempts = append(ps.attempts, a)
		ps.tries++
		inflight[i] = ps
		active++
		wg.Go(func() {
			err := d.fetchPiece(actx, m, in, sk, a, free, reason)
			outcomes <- outcome{a: a, err: err}
		})
		return true
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for remaining > 0 {
		now := time.Now()
		wake := now.Add(time.Hour)

		// Late pieces: shrink the window once per late attempt, and ask
		// again; at most two requests per piece, so the oldest gives way.
		for i, ps := range inflight {
			newest := ps.attempts[len(ps.attempts)-1]
			if now.Before(newest.deadline) {
				wake = minTime(wake, newest.deadline)
				continue
			}
			if !newest.late {
				newest.late = true
				win.missed()
			}
			var old *attempt
			if len(ps.attempts) == 2 {
				old = ps.attempts[0]
			}
			if now.Before(pauseUntil) || !launch(i, ps, now, "retry-late") {
				wake = minTime(wake, now.Add(50*time.Millisecond))
				continue
			}
			d.cfg.Logger.Debug("piece late, asked again", "piece", i, "after", now.Sub(newest.start))
			if old != nil {
				old.dropped = true
				old.cancel()
				ps.attempts = removeAttempt(ps.attempts, old)
			}
		}

		// New work, lowest piece first, within the window.
		if now.After(pauseUntil) {
			for active < win.size() {
				if k := readyRetry(retry, failed, now); k >= 0 {
					i := retry[k]
					if !launch(i, failed[i], now, "retry-error") {
						break
					}
					delete(failed, i)
					retry = append(retry[:k], retry[k+1:]...)
					continue
				}
				if len(queue) == 0 || !launch(queue[0], &pieceState{transient: patience{retries: d.cfg.Retries}}, now, "piece") {
					break
				}
				queue = queue[1:]
			}
			for _, i := range retry {
				wake = minTime(wake, failed[i].notBefore)
			}
		} else {
			wake = minTime(wake, pauseUntil)
		}

		timer.Reset(max(time.Millisecond, time.Until(wake)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			continue
		case o := <-outcomes:
			active--
			a, i := o.a, o.a.piece
			if !a.handedOff {
				free <- a.buf
			}
			ps := inflight[i]
			if ps == nil { // the piece finished by another attempt
				continue
			}
			ps.attempts = removeAttempt(ps.attempts, a)
			now := time.Now()
			switch err := o.err; {
			case err == nil:
				win.completed(now.Sub(a.start))
				for _, other := range ps.attempts {
					other.dropped = true
					other.cancel()
				}
				delete(inflight, i)
				remaining--
				verified++
				busyWaited = 0 // patience with 503s counts from the last piece
				d.done.Add(m.PieceLen(i))
			case a.dropped:
				// Cancelled in favour of a newer attempt; nothing learned.
			case errors.Is(err, ErrChanged), errors.Is(err, errNoRanges), errors.Is(err, ErrLocal):
				return err
			default:
				if be, ok := errors.AsType[*busyError](err); ok {
					// Parallel 503s share one pause: count only the wall
					// clock the pause grows by.
					if until := now.Add(be.wait); until.After(pauseUntil) {
						busyWaited += until.Sub(maxTime(pauseUntil, now))
					}
					if busyWaited > d.cfg.MaxRetryAfter {
						return &StatusError{URL: in.url.String(), Code: http.StatusServiceUnavailable,
							Status: fmt.Sprintf("503 Service Unavailable for more than %v with no piece in between", d.cfg.MaxRetryAfter)}
					}
					pauseUntil = maxTime(pauseUntil, now.Add(be.wait))
					win.missed()
				} else {
					wait, err := d.pieceFailed(m, i, ps, err, verified, res)
					if err != nil {
						return err
					}
					ps.notBefore = now.Add(wait)
				}
				if len(ps.attempts) == 0 {
					delete(inflight, i)
					failed[i] = ps
					retry = append(retry, i)
				}
			}
		}
	}
	// Every attempt must be over before the file is published.
	cancelAll()
	wg.Wait()
	return d.finish(sk, res)
}

// pieceFailed counts a failed attempt at piece i against its budget (see
// Config.Retries), verified being the number of pieces in so far, and
// returns the pause before the next attempt, or the error that ends the
// download.
func (d *Download) pieceFailed(m *manifest.Manifest, i int, ps *pieceState, err error, verified int64, res *Result) (time.Duration, error) {
	switch {
	case permanent(err):
		return 0, fmt.Errorf("piece %d: %w", i, err)
	case transient(err):
		wait, ok := ps.transient.failed(verified)
		if !ok {
			return 0, fmt.Errorf("piece %d failed %d times in a row with no piece verified in between, last: %w",
				i, ps.transient.failures, err)
		}
		d.cfg.Logger.Info("piece failed, retrying", "piece", i, "retry", fmt.Sprintf("%d/%d", ps.transient.failures, d.cfg.Retries),
			"in", wait, "err", err)
		return wait, nil
	default: // corrupt, or an answer that is not what was asked
		ps.bad++
		if isCorrupt(err) {
			res.PiecesRejected++
		}
		if ps.bad > d.cfg.Retries {
			if isCorrupt(err) {
				return 0, fmt.Errorf("%w: piece %d (bytes %d-%d) was corrupt %d times: %v",
					ErrVerify, i, m.PieceOffset(i), m.PieceOffset(i)+m.PieceLen(i)-1, ps.bad, err)
			}
			return 0, fmt.Errorf("piece %d failed %d times, last: %w", i, ps.bad, err)
		}
		wait := backoff(ps.bad)
		d.cfg.Logger.Info("bad answer for a piece, retrying", "piece", i, "retry", fmt.Sprintf("%d/%d", ps.bad, d.cfg.Retries),
			"in", wait, "err", err)
		return wait, nil
	}
}

// finish checks --sha256 and publishes the file.
func (d *Download) finish(sk sink, res *Result) error {
	d.phase.Store("finishing")
	res.Verified = "merkle"
	if err := d.checkWholeSHA256(res); err != nil {
		return err
	}
	return sk.finish()
}

// fetchPiece requests piece i, checks the response, reads it into buf and
// hands it to the sink, which verifies it before writing.
func (d *Download) fetchPiece(ctx context.Context, m *manifest.Manifest, in *info, sk sink, a *attempt, free chan<- []byte, reason string) error {
	i := a.piece
	off, n := m.PieceOffset(i), m.PieceLen(i)
	hdr := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", off, off+n-1)}}
	etag, lm := validators(m, in)
	if v := ifRange(etag, lm); v != "" {
		hdr.Set("If-Range", v)
	}
	if a.overload {
		hdr.Set(contract.CapabilitiesHeader, contract.CapabilityOverload)
	}
	if len(a.candidates) > 0 {
		hdr.Set(contract.CandidatesHeader, contract.FormatCandidates(a.candidates))
	}
	a.got = i
	resp, err := d.doWatched(ctx, in.url, hdr, reason, a.idle)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := checkValidators(resp.Header, etag, lm); err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		switch {
		case resp.Header.Get(contract.PieceHeader) == "":
		case a.overload && resp.Header.Get("Retry-After") != "":
			return d.readOverloadAnswer(ctx, m, sk, a, free, resp)
		case len(a.candidates) > 0:
			return d.readPickAnswer(ctx, m, sk, a, free, resp)
		}
	case http.StatusOK:
		return errNoRanges
	case http.StatusServiceUnavailable:
		if resp.Header.Get(contract.InSwarmHeader) != "" && len(a.candidates) > 0 {
			// Only an answer to our candidates: otherwise it is a 503
			// like any other. Its short body is read, so the connection
			// is kept for the next fetch.
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			return &node.InSwarmError{Wait: retryAfter(resp.Header, time.Now())}
		}
		// Its short body is read too, so the connection is kept: a stampede
		// origin answers a full piece queue this way, and a new connection
		// would cost a handshake through its busy link.
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		be := &busyError{wait: retryAfter(resp.Header, time.Now())}
		if a.overload {
			be.peers = contract.ParsePeers(resp.Header.Values(contract.PeersHeader), maxAnswerPeers)
		}
		return be
	case http.StatusRequestedRangeNotSatisfiable:
		return fmt.Errorf("%w: server says bytes %d-%d are outside the file", ErrChanged, off, off+n-1)
	default:
		return &StatusError{URL: in.url.String(), Code: resp.StatusCode, Status: resp.Status}
	}
	return d.readPiece(ctx, m, sk, i, a, free, resp, fmt.Sprintf("piece %d", i))
}

// doWatched is a GET by do that fails with errIdle when idle > 0 and the
// server sends nothing for idle: no answer, or no body byte while the body
// is being read (time spent between reads does not count). A TCP connection
// whose packets were dropped can sit in retransmission backoff for many
// seconds; a fetch on a new connection is quicker than waiting it out.
func (d *Download) doWatched(ctx context.Context, u *url.URL, hdr http.Header, reason string, idle time.Duration) (*http.Response, error) {
	if idle <= 0 {
		return d.do(ctx, http.MethodGet, u, hdr, reason)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(idle, func() { cancel(errIdle) })
	resp, err := d.do(rctx, http.MethodGet, u, hdr, reason)
	if !t.Stop() && err == nil && errors.Is(context.Cause(rctx), errIdle) {
		// The answer came just as the timer fired: its body is cancelled.
		resp.Body.Close()
		err = rctx.Err()
	}
	if err != nil {
		if errors.Is(context.Cause(rctx), errIdle) && ctx.Err() == nil {
			err = fmt.Errorf("no answer for %v: %w", idle, errIdle)
		}
		cancel(nil)
		return nil, err
	}
	resp.Body = newIdleBody(rctx, resp.Body, idle, cancel)
	return resp, nil
}

// readPiece checks that resp (a 206) carries exactly piece j of m, reads it
// into a.buf and hands it to the sink, which verifies it before writing.
// what names the answer in errors.
func (d *Download) readPiece(ctx context.Context, m *manifest.Manifest, sk sink, j int, a *attempt, free chan<- []byte, resp *http.Response, what string) error {
	off, n := m.PieceOffset(j), m.PieceLen(j)
	cr, err := httphdr.ParseContentRange(resp.Header.Get("Content-Range"))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrProtocol, what, err)
	}
	if cr.Size >= 0 && cr.Size != m.Size {
		return fmt.Errorf("%w: the file is now %d bytes, the manifest says %d", ErrChanged, cr.Size, m.Size)
	}
	if cr.First != off || cr.Last != off+n-1 {
		return fmt.Errorf("%w: %s: asked for bytes %d-%d, got Content-Range %q",
			ErrProtocol, what, off, off+n-1, resp.Header.Get("Content-Range"))
	}
	if resp.ContentLength >= 0 && resp.ContentLength != n {
		return fmt.Errorf("%w: %s: Content-Length %d for a %d-byte range", ErrProtocol, what, resp.ContentLength, n)
	}
	data := a.buf[:n]
	k, err := io.ReadFull(d.lim.Reader(ctx, resp.Body), data)
	d.received.Add(int64(k))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s: body ended after %d of %d bytes: %w", ErrProtocol, what, k, n, err)
	}
	a.handedOff = true
	return sk.put(j, data, free)
}

// validators are what the download must keep seeing: the manifest's, or the
// probe's when the manifest carries none.
func validators(m *manifest.Manifest, in *info) (etag, lastModified string) {
	if m != nil && (m.ETag != "" || m.LastModified != "") {
		return m.ETag, m.LastModified
	}
	return in.etag, in.lastModified
}

// checkValidators fails with ErrChanged when a response carries a validator
// that differs from the one the download started with.
func checkValidators(h http.Header, etag, lastModified string) error {
	if got := h.Get("ETag"); etag != "" && got != "" && got != etag {
		return fmt.Errorf("%w: ETag was %s, is now %s", ErrChanged, etag, got)
	}
	if got := h.Get("Last-Modified"); lastModified != "" && got != "" && got != lastModified {
		return fmt.Errorf("%w: Last-Modified was %s, is now %s", ErrChanged, lastModified, got)
	}
	return nil
}

// readyRetry returns the index in retry of the lowest piece whose backoff
// has passed, or -1.
func readyRetry(retry []int, failed map[int]*pieceState, now time.Time) int {
	best := -1
	for k, i := range retry {
		if !now.Before(failed[i].notBefore) && (best < 0 || i < retry[best]) {
			best = k
		}
	}
	return best
}

func removeAttempt(as []*attempt, a *attempt) []*attempt {
	for k, x := range as {
		if x == a {
			return append(as[:k], as[k+1:]...)
		}
	}
	return as
}

func bytesOf(m *manifest.Manifest, pieces []int) int64 {
	var n int64
	for _, i := range pieces {
		n += m.PieceLen(i)
	}
	return n
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
