package fetch

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/originclient"
	"github.com/stampede-dev/stampede/sign"
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
	// NoPacing sends to peers as fast as the uplink takes, without the
	// pacer that keeps it a little below its measured capacity
	// (node.Config.NoPacing).
	NoPacing bool
	// SeedTime is how long to keep serving peers after completion (0: leave
	// at once, after handing over the uploads under way, at most 2 s).
	// SeedForever serves until the context ends.
	SeedTime    time.Duration
	SeedForever bool
	// StrictTFT serves a peer, while we download, only while what we sent
	// it minus what it sent us is under a tab of 2 pieces (Flashback's
	// strict tit-for-tat, swarm.Config.StrictTFT); peers hear it in our
	// handshake (wire.CapStrictTFT).
	StrictTFT bool
	// OriginIdleTimeout ends an origin fetch that receives nothing for this
	// long (default 5s): the piece goes back to the scheduler, which asks
	// again, on a new connection. A connection that lost packets on a full
	// link can wait many seconds in TCP's retransmission backoff while the
	// whole swarm waits for the piece it claimed. Each such end doubles the
	// timeout for the next fetches (up to IdleTimeout), and each fetch that
	// completes halves it back, so a server that is merely that slow is
	// still waited for. Keep it above a stampede origin's wait for a
	// piece answer's turn (2 s, origin/pace.go), during which no header
	// comes. 0 or less: 5 s.
	OriginIdleTimeout time.Duration
	// Node passes further settings (scheduler tuning, dialer) through.
	Node node.Config
}

// runSwarm downloads m as a peer of its swarm: pieces come from other peers
// where they can, from the origin under the scheduler's origin protection,
// and go to peers while we download and for SeedTime after.
func (d *Download) runSwarm(ctx context.Context, m *manifest.Manifest, in *originclient.Resource, res *Result) error {
	sk, err := d.openSink(m, d.resume)
	if err != nil {
		return err
	}
	fs, ok := sk.(*fileSink)
	if !ok {
		return fmt.Errorf("%w: the swarm needs a file to write to", ErrUsage)
	}
	res.PiecesResumed = fs.st.Count()
	d.done.Store(storedBytes(m, fs))
	d.resumed.Store(d.done.Load())
	d.phase.Store("downloading")

	// Origin fetches reuse the piece path of the HTTP downloader: the same
	// checks of status, validators and Content-Range, then the store
	// verifies the bytes (originclient.Client.Fetcher).
	var (
		nd        *node.Node // set before it runs, which is before any origin fetch
		once      sync.Once
		finishErr error
	)
	fetchOrigin := d.oc.Fetcher(m, in, fs.st, func() { res.PiecesRejected++ }, func() *node.Node { return nd })

	ncfg := d.cfg.Swarm.Node
	ncfg.Manifest, ncfg.Store = m, fs.st
	ncfg.Trackers = m.Trackers
	if in.Vouch.Token != "" {
		priv, err := d.private(m, in.Vouch)
		if err != nil {
			return err
		}
		ncfg.Private = priv
		d.isPrivate.Store(true)
	}
	ncfg.ListenAddr = d.cfg.Swarm.ListenAddr
	ncfg.DownloadLimit = d.lim
	ncfg.UploadLimit = ratelimit.New(d.cfg.Swarm.MaxUploadRate)
	ncfg.NoPacing = d.cfg.Swarm.NoPacing
	ncfg.SeedTime, ncfg.SeedForever = d.cfg.Swarm.SeedTime, d.cfg.Swarm.SeedForever
	if d.cfg.Swarm.StrictTFT {
		ncfg.Swarm.StrictTFT = true
	}
	ncfg.Origin = fetchOrigin
	if !m.HasLayer() {
		ncfg.FetchLayer = func(ctx context.Context) ([]manifest.Hash, error) {
			again := *in // Manifest may probe again and update it
			full, err := d.oc.Manifest(ctx, &again, false)
			if err != nil {
				return nil, err
			}
			if full.Root != m.Root || full.Size != m.Size {
				return nil, fmt.Errorf("%w: the manifest's root is %s now, its head said %s", ErrChanged, full.Root, m.Root)
			}
			return full.Pieces, nil
		}
	}
	if ncfg.Logger == nil {
		ncfg.Logger = d.cfg.Logger
	}
	if ncfg.HTTPClient == nil {
		// The tracker embedded in the origin answers on the connection
		// that brought the manifest: a new one would cost its handshake,
		// a round trip through the origin's saturated link (about 0.25 s
		// on the testbed) before the peer may join.
		ncfg.HTTPClient = d.cfg.Client
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

// private returns what the node of a private swarm shows and checks: our
// key, the token the origin issued for its peer ID, checked as the peers
// will, and a verifier trusting Config.TrustKey, or else the key the
// origin sent.
func (d *Download) private(m *manifest.Manifest, v originclient.Vouch) (*node.Private, error) {
	key := d.cfg.TrustKey
	if key == nil {
		k, err := sign.ParsePublicKey([]byte(v.Key))
		if err != nil {
			return nil, fmt.Errorf("%w: the origin sent a token without a key to check it with: %w", ErrProtocol, err)
		}
		key = k
	}
	tok, err := sign.ParseToken(v.Token)
	if err != nil {
		return nil, fmt.Errorf("%w: the origin's token: %w", ErrProtocol, err)
	}
	ver := sign.NewVerifier(key)
	id := sign.PeerIDOf(d.peerKey.Public().(ed25519.PublicKey))
	if err := ver.Verify(tok, m.Root, m.Size, id, time.Now()); err != nil {
		return nil, fmt.Errorf("%w: the origin's token for us: %w", ErrVerify, err)
	}
	return &node.Private{Key: d.peerKey, Token: tok, Verifier: ver}, nil
}
