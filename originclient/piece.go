package originclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
)

// PieceRequest is one request for one piece of a file.
type PieceRequest struct {
	Piece int
	// Buf holds the piece's bytes on their way to Put (at least the
	// manifest's piece size).
	Buf []byte
	// Reason goes to the origin in contract.ReasonHeader.
	Reason string
	// Overload asks for overload mode: the origin may answer past its
	// limits with another piece (given to Put, then reported as an
	// *OverloadAnswer) and peers.
	Overload bool
	// Candidates are other pieces the origin may send instead (a pick
	// answer; the piece got is then in Got).
	Candidates []int
	// Alone, with Overload (a swarm fetch), tells the origin that no
	// neighbour delivers to us (contract.SuppliersHeader: 0): we have
	// nowhere else to get the piece, and a stampede origin serves it past
	// the file's egress budget.
	Alone bool
	// Idle, if set, ends the request when the origin sends nothing for
	// that long: no answer, or no body byte (ErrIdle).
	Idle time.Duration
	// Put receives the bytes of piece i, a slice of Buf, and verifies them
	// before they count (an error wrapping manifest.ErrCorruptPiece when
	// they fail). Buf is Put's from the call on.
	Put func(i int, data []byte) error

	// Got is the piece the answer carried (Piece, or the origin's pick),
	// set by FetchPiece.
	Got int
	// Budget is the file's egress budget as the answer told it
	// (contract.BudgetHeader: a stampede origin tells swarm clients), set
	// by FetchPiece; nil when it did not.
	Budget *contract.Budget
	// HandedOff is set once Buf went to Put.
	HandedOff bool
}

// BusyError is a 503 to honour: stay away for Wait. Peers are those an
// overloaded origin named (to a request in overload mode).
type BusyError struct {
	Wait  time.Duration
	Peers []string
}

func (e *BusyError) Error() string { return fmt.Sprintf("server busy (503), retry after %v", e.Wait) }

// BudgetError is a stampede origin's refusal past the file's egress budget
// (503 with contract.BudgetHeader "spent"): the piece asked and every
// candidate went to swarm clients in the budget's current window, so the
// swarm has them. It is neither a failure of the origin (no backoff, no
// giving up) nor a busy origin (other pieces may still come from it):
// leave those pieces to the swarm for Wait, the Retry-After (held to 60 s
// like any), and ask again after it. Reset is when the window ends and the
// budget is whole again; Peers, those the origin named.
type BudgetError struct {
	Wait, Reset time.Duration
	Peers       []string
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("the origin's egress budget for the file is spent and the pieces asked went out in its window "+
		"(get them from the swarm; retry after %v, budget back in %v)", e.Wait, e.Reset)
}

// OverloadAnswer is an overloaded origin's answer to a piece request: it
// sent (and Put took) another piece, named peers, and asks the client to
// stay away for Wait. It is an error for the piece asked.
type OverloadAnswer struct {
	Asked, Piece int
	Wait         time.Duration
	Peers        []string
}

func (e *OverloadAnswer) Error() string {
	return fmt.Sprintf("origin overloaded: asked for piece %d, got piece %d and %d peers; retry after %v",
		e.Asked, e.Piece, len(e.Peers), e.Wait)
}

// maxAnswerPeers bounds the peers taken from one answer.
const maxAnswerPeers = 50

// FetchPiece requests piece p.Piece of the file in (whose manifest is m)
// with Range and If-Range, checks the response (status, validators,
// Content-Range, Content-Length), reads it into p.Buf and hands it to
// p.Put. Besides the error classes, it returns an *OverloadAnswer, a
// *BusyError, a *node.InSwarmError (a 503 saying the pieces offered are
// all in the swarm), a *BudgetError (a 503 saying the file's egress
// budget is spent and the pieces asked went out in its window),
// ErrNoRanges (the server sent the whole file) or ErrIdle. p.Budget is
// what the answer said of the budget, whatever it was.
func (c *Client) FetchPiece(ctx context.Context, m *manifest.Manifest, in *Resource, p *PieceRequest) error {
	i := p.Piece
	off, n := m.PieceOffset(i), m.PieceLen(i)
	hdr := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", off, off+n-1)}}
	etag, lm := Validators(m, in)
	if v := ifRange(etag, lm); v != "" {
		hdr.Set("If-Range", v)
	}
	if p.Overload {
		hdr.Set(contract.CapabilitiesHeader, contract.CapabilityOverload)
	}
	if len(p.Candidates) > 0 {
		hdr.Set(contract.CandidatesHeader, contract.FormatCandidates(p.Candidates))
	}
	if p.Alone && p.Overload {
		hdr.Set(contract.SuppliersHeader, contract.FormatSuppliers(0))
	}
	p.Got, p.Budget = i, nil
	resp, err := c.doWatched(ctx, in.URL, hdr, p.Reason, p.Idle)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if v := resp.Header.Get(contract.BudgetHeader); v != "" {
		if b, err := contract.ParseBudget(v); err == nil {
			p.Budget = &b
			c.noteBudget(b)
		} else {
			c.cfg.Logger.Debug("ignoring a malformed budget", "url", in.URL, "err", err)
		}
	}
	if err := CheckValidators(resp.Header, etag, lm); err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		switch {
		case resp.Header.Get(contract.PieceHeader) == "":
		case p.Overload && resp.Header.Get("Retry-After") != "":
			return c.readOverloadAnswer(ctx, m, p, resp)
		case len(p.Candidates) > 0:
			return c.readPickAnswer(ctx, m, p, resp)
		}
	case http.StatusOK:
		return ErrNoRanges
	case http.StatusServiceUnavailable:
		if p.Budget != nil && p.Budget.Spent {
			// Its short body is read, so the connection is kept.
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			return &BudgetError{Wait: retryAfter(resp.Header, time.Now()), Reset: p.Budget.Reset,
				Peers: contract.ParsePeers(resp.Header.Values(contract.PeersHeader), maxAnswerPeers)}
		}
		if resp.Header.Get(contract.InSwarmHeader) != "" && len(p.Candidates) > 0 {
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
		be := &BusyError{Wait: retryAfter(resp.Header, time.Now())}
		if p.Overload {
			be.Peers = contract.ParsePeers(resp.Header.Values(contract.PeersHeader), maxAnswerPeers)
		}
		return be
	case http.StatusRequestedRangeNotSatisfiable:
		return fmt.Errorf("%w: server says bytes %d-%d are outside the file", ErrChanged, off, off+n-1)
	default:
		return &StatusError{URL: in.URL.String(), Code: resp.StatusCode, Status: resp.Status}
	}
	return c.readPiece(ctx, m, i, p, resp, fmt.Sprintf("piece %d", i))
}

// Overload mode, the client side (the origin side and the exact answer are
// in package origin, overloadanswer.go). In the swarm, every request to the
// origin says it can take an overload answer; an origin past its limits
// then answers 206 with one piece of its choosing (contract.PieceHeader),
// peers of the swarm (contract.PeersHeader) and a Retry-After. The piece is
// verified and stored like any other, and the request counts as a busy
// answer for the piece asked (Source.Fetcher tells the node of the piece
// and the peers), so the scheduler stays off the origin for the
// Retry-After and takes the rest from peers.

// readOverloadAnswer checks and stores the piece of an overload answer to
// p. The response's validators were checked already.
func (c *Client) readOverloadAnswer(ctx context.Context, m *manifest.Manifest, p *PieceRequest, resp *http.Response) error {
	h := resp.Header
	j, err := strconv.Atoi(strings.TrimSpace(h.Get(contract.PieceHeader)))
	if err != nil || j < 0 || j >= m.NumPieces() {
		return fmt.Errorf("%w: overload answer names piece %q of %d", ErrProtocol, h.Get(contract.PieceHeader), m.NumPieces())
	}
	if root := h.Get(contract.RootHeader); root != "" && !strings.EqualFold(root, m.Root.String()) {
		return fmt.Errorf("%w: overload answer for root %s, the manifest's is %s", ErrChanged, root, m.Root)
	}
	if err := c.readPiece(ctx, m, j, p, resp, fmt.Sprintf("overload answer for piece %d", j)); err != nil {
		return err
	}
	return &OverloadAnswer{Asked: p.Piece, Piece: j, Wait: retryAfter(h, time.Now()),
		Peers: contract.ParsePeers(h.Values(contract.PeersHeader), maxAnswerPeers)}
}

// Piece picks, the client side (the origin side and the exchange are in
// package origin, pick.go). In the swarm, a request to the origin may
// offer other pieces it would take as well (contract.CandidatesHeader; the
// piece asked alone when there is no other); the origin sends the one it
// has sent least, naming it in contract.PieceHeader without a Retry-After.
// The piece is verified and stored like any other, and reported as the
// piece got.

// readPickAnswer checks and stores the piece the origin picked among p's
// candidates, and records it in p.Got. The response's validators were
// checked already.
func (c *Client) readPickAnswer(ctx context.Context, m *manifest.Manifest, p *PieceRequest, resp *http.Response) error {
	v := resp.Header.Get(contract.PieceHeader)
	j, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || (j != p.Piece && !slices.Contains(p.Candidates, j)) {
		return fmt.Errorf("%w: asked for piece %d, the origin sent piece %q, which was not offered", ErrProtocol, p.Piece, v)
	}
	if err := c.readPiece(ctx, m, j, p, resp, fmt.Sprintf("piece %d (picked instead of %d)", j, p.Piece)); err != nil {
		return err
	}
	p.Got = j
	return nil
}

// readPiece checks that resp (a 206) carries exactly piece j of m, reads it
// into p.Buf and hands it to p.Put, which verifies it before writing. what
// names the answer in errors.
func (c *Client) readPiece(ctx context.Context, m *manifest.Manifest, j int, p *PieceRequest, resp *http.Response, what string) error {
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
	data := p.Buf[:n]
	k, err := io.ReadFull(c.cfg.Limiter.Reader(ctx, resp.Body), data)
	c.received.Add(int64(k))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s: body ended after %d of %d bytes: %w", ErrProtocol, what, k, n, err)
	}
	p.HandedOff = true
	return p.Put(j, data)
}

// doWatched is a GET by Do that fails with ErrIdle when idle > 0 and the
// server sends nothing for idle: no answer, or no body byte while the body
// is being read (time spent between reads does not count). A TCP connection
// whose packets were dropped can sit in retransmission backoff for many
// seconds; a fetch on a new connection is quicker than waiting it out.
func (c *Client) doWatched(ctx context.Context, u *url.URL, hdr http.Header, reason string, idle time.Duration) (*http.Response, error) {
	if idle <= 0 {
		return c.Do(ctx, http.MethodGet, u, hdr, reason)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(idle, func() { cancel(ErrIdle) })
	resp, err := c.Do(rctx, http.MethodGet, u, hdr, reason)
	if !t.Stop() && err == nil && errors.Is(context.Cause(rctx), ErrIdle) {
		// The answer came just as the timer fired: its body is cancelled.
		resp.Body.Close()
		err = rctx.Err()
	}
	if err != nil {
		if errors.Is(context.Cause(rctx), ErrIdle) && ctx.Err() == nil {
			err = fmt.Errorf("no answer for %v: %w", idle, ErrIdle)
		}
		cancel(nil)
		return nil, err
	}
	resp.Body = newIdleBody(rctx, resp.Body, idle, cancel)
	return resp, nil
}

// GetStream sends a GET for the file in (from byte off, if off > 0, with
// If-Range) and waits out 503s. The body it returns fails with ErrIdle if
// no byte arrives for IdleTimeout, so a stalled server becomes a
// truncation to resume from, not a hang.
func (c *Client) GetStream(ctx context.Context, in *Resource, off int64, busyWaited *time.Duration) (*http.Response, error) {
	hdr := http.Header{}
	if off > 0 {
		hdr.Set("Range", fmt.Sprintf("bytes=%d-", off))
		if v := ifRange(in.ETag, in.LastModified); v != "" {
			hdr.Set("If-Range", v)
		}
	}
	rctx, cancel := context.WithCancelCause(ctx)
	resp, err := c.DoPatiently(rctx, http.MethodGet, in.URL, hdr, contract.ReasonStream, busyWaited)
	if err != nil {
		cancel(nil)
		return nil, err
	}
	resp.Body = newIdleBody(rctx, resp.Body, c.cfg.IdleTimeout, cancel)
	return resp, nil
}

// idleBody cancels its request when one Read has waited longer than
// timeout; the time between reads (the reader's own work) does not count.
type idleBody struct {
	io.ReadCloser
	ctx    context.Context
	timer  *time.Timer
	cancel context.CancelCauseFunc
	d      time.Duration
}

func newIdleBody(ctx context.Context, rc io.ReadCloser, d time.Duration, cancel context.CancelCauseFunc) *idleBody {
	b := &idleBody{ReadCloser: rc, ctx: ctx, cancel: cancel, d: d}
	b.timer = time.AfterFunc(d, func() { cancel(ErrIdle) })
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.d)
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	if err != nil && !errors.Is(err, io.EOF) && errors.Is(context.Cause(b.ctx), ErrIdle) {
		err = fmt.Errorf("%w (%w after %v)", err, ErrIdle, b.d)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	b.cancel(nil)
	return b.ReadCloser.Close()
}

// Validators are what a download must keep seeing: the manifest's, or the
// probe's when the manifest carries none (or there is no manifest).
func Validators(m *manifest.Manifest, in *Resource) (etag, lastModified string) {
	if m != nil && (m.ETag != "" || m.LastModified != "") {
		return m.ETag, m.LastModified
	}
	return in.ETag, in.LastModified
}

// CheckValidators fails with ErrChanged when a response carries a
// validator that differs from the one the download started with.
func CheckValidators(h http.Header, etag, lastModified string) error {
	if got := h.Get("ETag"); etag != "" && got != "" && got != etag {
		return fmt.Errorf("%w: ETag was %s, is now %s", ErrChanged, etag, got)
	}
	if got := h.Get("Last-Modified"); lastModified != "" && got != "" && got != lastModified {
		return fmt.Errorf("%w: Last-Modified was %s, is now %s", ErrChanged, lastModified, got)
	}
	return nil
}

// ifRange is the validator to send in If-Range: a strong ETag, else
// Last-Modified (RFC 9110 13.1.5: weak ETags are not allowed there).
func ifRange(etag, lastModified string) string {
	if etag != "" && !strings.HasPrefix(etag, "W/") {
		return etag
	}
	return lastModified
}
