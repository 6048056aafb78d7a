package fetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/swarm"
)

// ErrNoManifest: the server links no manifest for the file (OpenSource).
var ErrNoManifest = errors.New("the server publishes no manifest for this file")

// Source is a file on an origin that publishes a manifest, probed and with
// its manifest checked, from which a node fetches pieces with every check
// of a download (see Fetcher). The gateway uses it; a download builds the
// same thing inside Run.
type Source struct {
	d  *Download
	in *info
	m  *manifest.Manifest

	mu       sync.Mutex // guards the following
	rejected int
}

// OpenSource probes cfg.URL with HEAD, fetches the manifest its Link names
// and checks that the manifest describes the file served now, as a
// download does before its first piece. Of cfg it uses URL, Client,
// Logger, LimitRate, Retries and MaxRetryAfter. A server that links no
// manifest gives ErrNoManifest; one that links a manifest it does not serve
// gives the *StatusError of that request.
func OpenSource(ctx context.Context, cfg Config) (*Source, error) {
	cfg.Output = ""
	d, err := New(cfg)
	if err != nil {
		return nil, err
	}
	u, _ := ParseURL(cfg.URL)
	in, err := d.probe(ctx, u, false)
	if err != nil {
		return nil, err
	}
	if in.manifestURL == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoManifest, in.url)
	}
	m, err := d.fetchManifest(ctx, in, false)
	if err != nil {
		return nil, err
	}
	return &Source{d: d, in: in, m: m}, nil
}

// Manifest is the file's manifest.
func (s *Source) Manifest() *manifest.Manifest { return s.m }

// URL is the file's URL after the probe's redirects.
func (s *Source) URL() *url.URL { return s.in.url }

// Requests counts the requests made to the origin so far, by reason.
func (s *Source) Requests() map[string]int {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	out := make(map[string]int, len(s.d.requests))
	for k, v := range s.d.requests {
		out[k] = v
	}
	return out
}

// PiecesRejected counts pieces from the origin that failed verification.
func (s *Source) PiecesRejected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rejected
}

// Fetcher returns the origin fetcher of a node downloading into st (opened
// for this source's manifest): each piece is requested with Range and
// If-Range, the response checked (status, validators, Content-Range,
// Content-Length) and the body verified by st before it is written. An
// overloaded origin's answers (another piece, peers) go to the node nd
// returns, which must be set before the node runs.
func (s *Source) Fetcher(st *store.File, nd func() *node.Node) node.OriginFetcher {
	return s.d.originFetcher(s.m, s.in, &fileSink{st: st}, func() {
		s.mu.Lock()
		s.rejected++
		s.mu.Unlock()
	}, nd)
}

// originFetcher is the origin side of a swarm download: it reuses the
// piece path of the HTTP downloader (the same checks of status, validators
// and Content-Range; the sink verifies the bytes) and sorts its errors into
// those worth retrying and those that end the download (node.FatalError).
// onRejected, if set, is called for each corrupt piece (serialised); nd
// returns the node, which hears of pieces and peers an overloaded origin
// hands out.
func (d *Download) originFetcher(m *manifest.Manifest, in *info, sk sink, onRejected func(), nd func() *node.Node) node.OriginFetcher {
	var (
		bufs       = make(chan []byte, 8) // piece buffers for origin fetches, reused
		mu         sync.Mutex             // guards the following
		busyWaited time.Duration
		corrupt    = map[int]int{}
		idle       = d.cfg.Swarm.OriginIdleTimeout // see SwarmConfig.OriginIdleTimeout
	)
	return func(ctx context.Context, f swarm.FetchOrigin) (got int, wait time.Duration, err error) {
		piece := f.Piece
		var buf []byte
		select {
		case buf = <-bufs:
		default:
			buf = make([]byte, m.PieceSize)
		}
		free := make(chan []byte, 1)
		mu.Lock()
		a := &attempt{piece: piece, start: time.Now(), buf: buf, overload: true, candidates: f.Candidates, idle: idle}
		mu.Unlock()
		err = d.fetchPiece(ctx, m, in, sk, a, free, "origin:"+f.Reason)
		mu.Lock()
		switch {
		case errors.Is(err, errIdle) && ctx.Err() == nil:
			// Never down: a fetch that started before others doubled it
			// must not take it back.
			idle = min(max(idle, 2*a.idle), max(d.cfg.IdleTimeout, d.cfg.Swarm.OriginIdleTimeout))
		case err == nil:
			idle = max(idle/2, d.cfg.Swarm.OriginIdleTimeout)
		}
		mu.Unlock()
		if a.handedOff {
			buf = <-free
		}
		select {
		case bufs <- buf:
		default:
		}
		// An overloaded origin's answer: another piece, stored, and peers.
		// The node learns both; for the piece asked it is a busy answer,
		// which keeps the scheduler off the origin for its Retry-After.
		// Neither it nor a 503 naming peers counts against MaxRetryAfter:
		// the origin is pointing us at the swarm, and the node's stall
		// timeout watches that the swarm delivers.
		if oa, ok := errors.AsType[*overloadAnswer](err); ok {
			nd().Stored(ctx, oa.piece)
			if len(oa.peers) > 0 {
				nd().AddPeers(ctx, oa.peers)
			}
			return -1, oa.wait, err
		}
		if _, ok := errors.AsType[*node.InSwarmError](err); ok {
			return -1, 0, err // not a failure: the swarm has the pieces
		}
		if be, ok := errors.AsType[*busyError](err); ok && len(be.peers) > 0 {
			nd().AddPeers(ctx, be.peers)
			return -1, be.wait, err
		}
		mu.Lock()
		defer mu.Unlock()
		var se *StatusError
		switch {
		case err == nil:
			busyWaited = 0 // patience with 503s counts from the last piece
			return a.got, 0, nil
		case errors.As(err, new(*busyError)):
			be, _ := errors.AsType[*busyError](err)
			busyWaited += be.wait
			if busyWaited > d.cfg.MaxRetryAfter {
				return -1, be.wait, &node.FatalError{Err: &StatusError{URL: in.url.String(), Code: 503,
					Status: fmt.Sprintf("503 Service Unavailable for more than %v with no piece in between", d.cfg.MaxRetryAfter)}}
			}
			return -1, be.wait, err
		case isCorrupt(err):
			if onRejected != nil {
				onRejected()
			}
			if corrupt[piece]++; corrupt[piece] > d.cfg.Retries {
				return -1, 0, &node.FatalError{Err: fmt.Errorf("%w: piece %d from the origin was corrupt %d times: %v", ErrVerify, piece, corrupt[piece], err)}
			}
			return -1, 0, err
		case errors.Is(err, ErrChanged), errors.Is(err, ErrLocal), errors.Is(err, errNoRanges),
			errors.As(err, &se) && se.Code != http.StatusServiceUnavailable && se.Code < 500:
			// Retrying cannot help: stop the download with the reason.
			return -1, 0, &node.FatalError{Err: err}
		}
		return -1, 0, err
	}
}
