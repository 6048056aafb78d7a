package originclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/swarm"
)

// Fetcher returns the origin fetcher of a node downloading into st (opened
// for this source's manifest): each piece is requested by FetchPiece, in
// overload mode and with the scheduler's candidates, and verified by st
// before it is written. An overloaded origin's answers (another piece,
// peers) go to the node nd returns, which must be set before the node
// runs.
func (s *Source) Fetcher(st *store.File, nd func() *node.Node) node.OriginFetcher {
	return s.c.fetcher(s.m, s.in, st, func() {
		s.mu.Lock()
		s.rejected++
		s.mu.Unlock()
	}, nd, func(b contract.Budget) {
		s.mu.Lock()
		s.budget, s.budgetAt = b, time.Now()
		s.mu.Unlock()
	})
}

// Budget is the file's egress budget as the latest answer to this
// source's Fetcher that told it said (Client.Budget), when it came, and
// false if none has.
func (s *Source) Budget() (b contract.Budget, at time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.budget, s.budgetAt, !s.budgetAt.IsZero()
}

// Fetcher is the origin side of a swarm download of the file in, whose
// manifest is m, into st: it sorts FetchPiece's errors into those worth
// retrying and those that end the download (node.FatalError). onRejected,
// if set, is called for each corrupt piece (serialised); nd returns the
// node, which hears of pieces and peers an overloaded origin hands out.
//
// A fetch for reason no-peers says so to the origin (PieceRequest.Alone),
// which serves it past the file's egress budget. The budget's refusal
// (*BudgetError) comes back wrapped with a *node.InSwarmError of its wait:
// neither a failure nor a busy origin, the node leaves the pieces it named
// to the swarm for that long, as it does those sent to other peers just
// now.
func (c *Client) Fetcher(m *manifest.Manifest, in *Resource, st *store.File, onRejected func(), nd func() *node.Node) node.OriginFetcher {
	return c.fetcher(m, in, st, onRejected, nd, nil)
}

// fetcher is Fetcher, telling onBudget, if set, what each answer that
// says so says of the file's budget.
func (c *Client) fetcher(m *manifest.Manifest, in *Resource, st *store.File, onRejected func(), nd func() *node.Node,
	onBudget func(contract.Budget)) node.OriginFetcher {
	var (
		bufs       = make(chan []byte, 8) // piece buffers for origin fetches, reused
		mu         sync.Mutex             // guards the following
		busyWaited time.Duration
		corrupt    = map[int]int{}
		idle       = c.cfg.OriginIdleTimeout
	)
	put := func(i int, data []byte) error {
		if err := st.WritePiece(i, data); err != nil {
			if isCorrupt(err) {
				return err
			}
			return fmt.Errorf("%w: %v", ErrLocal, err)
		}
		return nil
	}
	return func(ctx context.Context, f swarm.FetchOrigin) (got int, wait time.Duration, err error) {
		piece := f.Piece
		var buf []byte
		select {
		case buf = <-bufs:
		default:
			buf = make([]byte, m.PieceSize)
		}
		mu.Lock()
		p := &PieceRequest{Piece: piece, Buf: buf, Reason: contract.ReasonOriginPrefix + f.Reason,
			Overload: true, Candidates: f.Candidates, Alone: f.Reason == swarm.ReasonNoPeers, Idle: idle, Put: put}
		mu.Unlock()
		err = c.FetchPiece(ctx, m, in, p)
		if p.Budget != nil {
			if onBudget != nil {
				onBudget(*p.Budget)
			}
			// The scheduler spends what the origin has to spare
			// (swarm's spare).
			if n := nd(); n != nil {
				n.OriginBudget(ctx, p.Budget.Left, p.Budget.Reset)
			}
		}
		mu.Lock()
		switch {
		case errors.Is(err, ErrIdle) && ctx.Err() == nil:
			// Never down: a fetch that started before others doubled it
			// must not take it back.
			idle = min(max(idle, 2*p.Idle), max(c.cfg.IdleTimeout, c.cfg.OriginIdleTimeout))
		case err == nil:
			idle = max(idle/2, c.cfg.OriginIdleTimeout)
		}
		mu.Unlock()
		select {
		case bufs <- buf: // Put is done with it
		default:
		}
		// An overloaded origin's answer: another piece, stored, and peers.
		// The node learns both; for the piece asked it is a busy answer,
		// which keeps the scheduler off the origin for its Retry-After.
		// Neither it nor a 503 naming peers counts against MaxRetryAfter:
		// the origin is pointing us at the swarm, and the node's stall
		// timeout watches that the swarm delivers.
		if oa, ok := errors.AsType[*OverloadAnswer](err); ok {
			nd().Stored(ctx, oa.Piece)
			if len(oa.Peers) > 0 {
				nd().AddPeers(ctx, oa.Peers)
			}
			return -1, oa.Wait, err
		}
		if _, ok := errors.AsType[*node.InSwarmError](err); ok {
			return -1, 0, err // not a failure: the swarm has the pieces
		}
		if be, ok := errors.AsType[*BudgetError](err); ok {
			// Not a failure either, nor a busy origin: the pieces named
			// went to swarm clients in the budget's window.
			if len(be.Peers) > 0 {
				nd().AddPeers(ctx, be.Peers)
			}
			return -1, 0, fmt.Errorf("%w; %w", be, &node.InSwarmError{Wait: be.Wait})
		}
		if be, ok := errors.AsType[*BusyError](err); ok && len(be.Peers) > 0 {
			nd().AddPeers(ctx, be.Peers)
			return -1, be.Wait, err
		}
		mu.Lock()
		defer mu.Unlock()
		var se *StatusError
		switch {
		case err == nil:
			busyWaited = 0 // patience with 503s counts from the last piece
			return p.Got, 0, nil
		case errors.As(err, new(*BusyError)):
			be, _ := errors.AsType[*BusyError](err)
			busyWaited += be.Wait
			if busyWaited > c.cfg.MaxRetryAfter {
				return -1, be.Wait, &node.FatalError{Err: &StatusError{URL: in.URL.String(), Code: 503,
					Status: fmt.Sprintf("503 Service Unavailable for more than %v with no piece in between", c.cfg.MaxRetryAfter)}}
			}
			return -1, be.Wait, err
		case isCorrupt(err):
			if onRejected != nil {
				onRejected()
			}
			if corrupt[piece]++; corrupt[piece] > c.cfg.Retries {
				return -1, 0, &node.FatalError{Err: fmt.Errorf("%w: piece %d from the origin was corrupt %d times: %v", ErrVerify, piece, corrupt[piece], err)}
			}
			return -1, 0, err
		case errors.Is(err, ErrChanged), errors.Is(err, ErrLocal), errors.Is(err, ErrNoRanges),
			errors.As(err, &se) && se.Code != http.StatusServiceUnavailable && se.Code < 500:
			// Retrying cannot help: stop the download with the reason.
			return -1, 0, &node.FatalError{Err: err}
		}
		return -1, 0, err
	}
}
