package fetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
)

// SwarmConfig is the peer side of a download; the zero value joins the
// swarm with the defaults.
type SwarmConfig struct {
	// Disabled fetches from the origin only, as a plain HTTP client.
	Disabled bool
	// ListenAddr is where other peers connect (default ":0").
	ListenAddr string
	// MaxUploadRate caps what we send to peers, bytes/s (0: unlimited).
	MaxUploadRate int64
	// SeedTime is how long to keep serving peers after completion (0: leave
	// at once; negative: until the context ends).
	SeedTime time.Duration
	// Node passes further settings (scheduler tuning, dialer) through.
	Node node.Config
}

// runSwarm downloads m as a peer of its swarm: pieces come from other peers
// where they can, from the origin under the scheduler's origin protection,
// and go to peers while we download and for SeedTime after.
func (d *Download) runSwarm(ctx context.Context, m *manifest.Manifest, in *info, res *Result) error {
	sk, err := d.openSink(m, d.cfg.Continue)
	if err != nil {
		return err
	}
	fs, ok := sk.(*fileSink)
	if !ok {
		return fmt.Errorf("%w: the swarm needs a file to write to", ErrUsage)
	}
	res.PiecesResumed = fs.st.Count()
	d.done.Store(storedBytes(m, fs))
	d.phase.Store("downloading")

	// Origin fetches reuse the piece path of the HTTP downloader: the same
	// checks of status, validators and Content-Range, then the store
	// verifies the bytes.
	var (
		nd         *node.Node             // set before it runs, which is before any origin fetch
		bufs       = make(chan []byte, 8) // piece buffers for origin fetches, reused
		once       sync.Once
		finishErr  error
		mu         sync.Mutex // guards the following
		busyWaited time.Duration
		corrupt    = map[int]int{}
	)
	fetchOrigin := func(ctx context.Context, piece int, reason string) (time.Duration, error) {
		var buf []byte
		select {
		case buf = <-bufs:
		default:
			buf = make([]byte, m.PieceSize)
		}
		free := make(chan []byte, 1)
		a := &attempt{piece: piece, start: time.Now(), buf: buf, overload: true}
		err := d.fetchPiece(ctx, m, in, sk, a, free, "origin:"+reason)
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
			nd.Stored(ctx, oa.piece)
			if len(oa.peers) > 0 {
				nd.AddPeers(ctx, oa.peers)
			}
			return oa.wait, err
		}
		if be, ok := errors.AsType[*busyError](err); ok && len(be.peers) > 0 {
			nd.AddPeers(ctx, be.peers)
			return be.wait, err
		}
		mu.Lock()
		defer mu.Unlock()
		var se *StatusError
		switch {
		case err == nil:
			return 0, nil
		case errors.As(err, new(*busyError)):
			be, _ := errors.AsType[*busyError](err)
			busyWaited += be.wait
			if busyWaited > d.cfg.MaxRetryAfter {
				return be.wait, &node.FatalError{Err: &StatusError{URL: in.url.String(), Code: 503,
					Status: fmt.Sprintf("503 Service Unavailable for more than %v in total", d.cfg.MaxRetryAfter)}}
			}
			return be.wait, err
		case isCorrupt(err):
			res.PiecesRejected++
			if corrupt[piece]++; corrupt[piece] > d.cfg.Retries {
				return 0, &node.FatalError{Err: fmt.Errorf("%w: piece %d from the origin was corrupt %d times: %v", ErrVerify, piece, corrupt[piece], err)}
			}
			return 0, err
		case errors.Is(err, ErrChanged), errors.Is(err, ErrLocal), errors.Is(err, errNoRanges),
			errors.As(err, &se) && se.Code != http.StatusServiceUnavailable && se.Code < 500:
			// Retrying cannot help: stop the download with the reason.
			return 0, &node.FatalError{Err: err}
		}
		return 0, err
	}

	ncfg := d.cfg.Swarm.Node
	ncfg.Manifest, ncfg.Store = m, fs.st
	ncfg.Trackers = m.Trackers
	ncfg.ListenAddr = d.cfg.Swarm.ListenAddr
	ncfg.DownloadLimit = d.lim
	ncfg.UploadLimit = ratelimit.New(d.cfg.Swarm.MaxUploadRate)
	ncfg.SeedTime = d.cfg.Swarm.SeedTime
	ncfg.Origin = fetchOrigin
	if ncfg.Logger == nil {
		ncfg.Logger = d.cfg.Logger
	}
	ncfg.OnPiece = func(int) { d.done.Store(storedBytes(m, fs)) }
	ncfg.OnComplete = func() error {
		once.Do(func() {
			finishErr = d.finish(sk, res)
			d.completed = time.Now()
			if finishErr == nil {
				d.phase.Store("seeding")
			}
		})
		return finishErr
	}
	nd, err = node.New(ncfg)
	if err != nil {
		return err
	}
	d.peer.Store(nd)
	err = nd.Run(ctx)
	st := nd.Stats()
	res.Swarm = &st
	if finishErr != nil {
		return finishErr
	}
	return err
}

func storedBytes(m *manifest.Manifest, fs *fileSink) int64 {
	n := int64(fs.st.Count()) * m.PieceSize
	if fs.st.Count() == m.NumPieces() || n > m.Size {
		return m.Size
	}
	return n
}
