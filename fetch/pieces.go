package fetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/originclient"
)

// attempt is one request for one piece.
type attempt struct {
	piece    int
	start    time.Time
	deadline time.Time
	cancel   context.CancelFunc
	buf      []byte
	late     bool // its deadline passed (counted once against the window)
	dropped  bool // cancelled by the loop; its outcome does not count
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
	transient originclient.Patience
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
func (d *Download) runPieces(ctx context.Context, m *manifest.Manifest, in *originclient.Resource, res *Result) error {
	nbuf := int(min(int64(2*d.cfg.MaxParallel+2), max(2, d.cfg.MemoryBudget/m.PieceSize)))
	free := make(chan []byte, nbuf)
	for range nbuf {
		free <- nil // allocated on first use
	}
	sk, err := d.openSink(m, d.resume)
	if err != nil {
		return err
	}
	todo := sk.missing()
	res.PiecesResumed = m.NumPieces() - len(todo)
	d.done.Store(m.Size - bytesOf(m, todo))
	d.resumed.Store(d.done.Load())
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
			if now.Before(pauseUntil) || !launch(i, ps, now, contract.ReasonRetryLate) {
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
					if !launch(i, failed[i], now, contract.ReasonRetryError) {
						break
					}
					delete(failed, i)
					retry = append(retry[:k], retry[k+1:]...)
					continue
				}
				if len(queue) == 0 || !launch(queue[0], &pieceState{transient: originclient.Patience{Retries: d.cfg.Retries}}, now, contract.ReasonPiece) {
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
			case errors.Is(err, ErrChanged), errors.Is(err, originclient.ErrNoRanges), errors.Is(err, ErrLocal):
				return err
			default:
				if be, ok := errors.AsType[*originclient.BusyError](err); ok {
					// Parallel 503s share one pause: count only the wall
					// clock the pause grows by.
					if until := now.Add(be.Wait); until.After(pauseUntil) {
						busyWaited += until.Sub(maxTime(pauseUntil, now))
					}
					if busyWaited > d.cfg.MaxRetryAfter {
						return &StatusError{URL: in.URL.String(), Code: http.StatusServiceUnavailable,
							Status: fmt.Sprintf("503 Service Unavailable for more than %v with no piece in between", d.cfg.MaxRetryAfter)}
					}
					pauseUntil = maxTime(pauseUntil, now.Add(be.Wait))
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
	case originclient.Permanent(err):
		return 0, fmt.Errorf("piece %d: %w", i, err)
	case originclient.Transient(err):
		wait, ok := ps.transient.Failed(verified)
		if !ok {
			return 0, fmt.Errorf("piece %d failed %d times in a row with no piece verified in between, last: %w",
				i, ps.transient.Failures, err)
		}
		d.cfg.Logger.Info("piece failed, retrying", "piece", i, "retry", fmt.Sprintf("%d/%d", ps.transient.Failures, d.cfg.Retries),
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
		wait := originclient.Backoff(ps.bad)
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

// fetchPiece requests piece a.piece (originclient.FetchPiece) and hands
// it to the sink, which verifies it before writing and returns the buffer
// to free.
func (d *Download) fetchPiece(ctx context.Context, m *manifest.Manifest, in *originclient.Resource, sk sink, a *attempt, free chan<- []byte, reason string) error {
	p := &originclient.PieceRequest{Piece: a.piece, Buf: a.buf, Reason: reason,
		Put: func(i int, data []byte) error { return sk.put(i, data, free) }}
	err := d.oc.FetchPiece(ctx, m, in, p)
	a.handedOff = p.HandedOff
	return err
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
