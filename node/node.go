// Package node is one stampede peer in a swarm: the runtime around the pure
// scheduler of package swarm. It owns the listener, the connections (package
// wire over any net.Conn), the tracker announces and the origin fetches, turns
// everything that happens into swarm events, and carries out the actions the
// scheduler returns.
//
// One goroutine (Run's loop) owns the scheduler; each connection has a reader
// and a writer goroutine and talks to the loop through channels. A connection
// that stalls or misbehaves costs only itself: its send queue is bounded and a
// full queue closes that connection (counted), never blocks the loop.
package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/internal/uplink"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/sign"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/wire"
)

// OriginFetcher carries out f: it fetches f.Piece from the origin, or
// another of f.Candidates if the origin picks one, and stores it
// (verified); f.Reason is why the scheduler chose the origin (counted by
// the origin). It returns the piece stored, the origin's Retry-After when
// it answered 503, and an error when no piece could be had: an
// *InSwarmError when the origin sent them all to others just now.
type OriginFetcher func(ctx context.Context, f swarm.FetchOrigin) (got int, busy time.Duration, err error)

// InSwarmError is the origin's answer that the piece asked and every
// candidate went out to other peers just now (503 with Stampede-In-Swarm):
// it would send them again only after Wait, and meanwhile the swarm has
// them. It is not a failure, nor a busy origin.
type InSwarmError struct{ Wait time.Duration }

func (e *InSwarmError) Error() string {
	return fmt.Sprintf("origin sent these pieces to other peers just now; it sends them again in %v", e.Wait)
}

// Config describes one peer. Zero values take the documented defaults.
type Config struct {
	Manifest *manifest.Manifest
	Store    *store.File
	// Origin fetches from the origin; nil for a pure seeder.
	Origin OriginFetcher
	// FetchLayer fetches the piece layer from the origin, for a Manifest
	// that came without it (a head: manifest.Manifest.HasLayer is false).
	// Such a node asks its neighbours for the layer first (layer.go) and
	// requests no piece until it is known. nil: from neighbours only.
	FetchLayer func(ctx context.Context) ([]manifest.Hash, error)
	// Trackers are announce URLs (the manifest's, usually).
	Trackers []string
	// PeerID is the node's peer ID. Zero, the default: a random one. In
	// a private swarm it is the one of Private.Key, whatever this says.
	PeerID wire.PeerID
	// Private, if set, makes the swarm private (docs/security.md): in
	// every handshake the node proves it holds its token and the key the
	// token's peer ID is of, and admits a peer only with such a proof
	// Private.Verifier checks; its announces carry the token and its
	// signature.
	Private *Private
	// Listener accepts peers, and Run closes it when it returns; when it
	// is set ListenAddr is ignored, when nil Run listens on ListenAddr.
	Listener   net.Listener
	ListenAddr string // default ":0"
	// Dial connects to a peer (default: net.Dialer with a 5s timeout).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Host, when set, carries the node's connections instead: a process
	// holding many swarms on one peer port (package host) accepts them,
	// reads each handshake and hands this swarm's to Adopt, dials for the
	// node, and shares one upload budget and one set of upload turns among
	// its swarms. Listener, ListenAddr, Dial, UploadLimit, Pacer and
	// UploadTurns are then ignored.
	Host Host
	// HTTPClient talks to the tracker (default: a client with 10s timeout).
	HTTPClient *http.Client
	// DownloadLimit and UploadLimit shape peer traffic (nil: unlimited).
	// DownloadLimit is shared with origin fetches by the caller.
	DownloadLimit, UploadLimit *ratelimit.Limiter
	// Pacer keeps the uploads a little below the uplink's capacity, which
	// it measures (package uplink), so that the uplink's queue does not
	// hold back the acknowledgements of our downloads. Nil: the node
	// paces itself, unless NoPacing.
	Pacer    *uplink.Pacer
	NoPacing bool
	// UploadTurns is how many pieces are sent to peers at once, across all
	// connections (turns.go; default 3). NoUploadTurns sends them all at
	// once.
	UploadTurns   int
	NoUploadTurns bool
	// SeedTime is how long to keep serving after completion (0: leave at
	// once, after the hand-over, see handedOver). SeedForever serves
	// until ctx ends.
	SeedTime    time.Duration
	SeedForever bool
	// OnPiece is called (on the loop goroutine) after each piece stored.
	OnPiece func(piece int)
	// OnComplete is called once when every piece is stored, before seeding:
	// the caller publishes the file there. An error ends Run with it.
	OnComplete func() error
	// StallTimeout ends Run with ErrStalled when no piece arrived for this
	// long while pieces are missing (default 3m).
	StallTimeout time.Duration
	// OriginPatience ends Run sooner, when no piece arrived for this long
	// and the origin's last answer was a failure (refused, reset, timed
	// out, 5xx; not a 503): the origin is gone and the peers do not make
	// up for it. The error wraps ErrStalled and the origin's (default
	// 60s).
	OriginPatience time.Duration
	// PeerConn, when set, may wrap or refuse each peer connection
	// (peerhook.go).
	PeerConn PeerConnFunc
	// Swarm tunes the scheduler; its NumPieces, PieceLen and Seed are set here.
	Swarm  swarm.Config
	Logger *slog.Logger
}

// ErrStalled: no piece arrived for Config.StallTimeout, or for
// Config.OriginPatience while the origin failed.
var ErrStalled = errors.New("node: no progress from peers or origin")

// DefaultOriginPatience is Config.OriginPatience's default.
const DefaultOriginPatience = 60 * time.Second

// FatalError wraps an origin error that must end the download (the file
// changed, the disk is full, the file is gone) rather than be retried.
type FatalError struct{ Err error }

func (e *FatalError) Error() string { return e.Err.Error() }
func (e *FatalError) Unwrap() error { return e.Err }

// Stats are counters for --json and tests.
type Stats struct {
	BytesFromPeers int64          `json:"bytes_from_peers"`
	BytesToPeers   int64          `json:"bytes_to_peers"`
	PiecesFromPeer int            `json:"pieces_from_peers"`
	OriginFetches  map[string]int `json:"origin_fetches"`
	PeersSeen      int            `json:"peers_seen"`
	PeersBanned    int            `json:"peers_banned"`
	QueueDrops     int64          `json:"send_queue_drops"`
	// The scheduler's counts, refreshed every tick. RequestTimeouts counts
	// peers that missed a request's deadline: their requests were taken
	// back and asked elsewhere. Cancels counts requests withdrawn (timeouts,
	// endgame, a piece got elsewhere); DuplicatePieces, pieces from peers we
	// had already (PiecesFromPeer leaves them out); OriginPicked, origin
	// fetches answered with another piece than the one asked.
	RequestTimeouts int `json:"request_timeouts"`
	Cancels         int `json:"cancels"`
	DuplicatePieces int `json:"duplicate_pieces"`
	OriginPicked    int `json:"origin_picked"`
	// OriginInSwarm counts origin fetches answered "in swarm": the pieces
	// asked had just gone to other peers, and were left to the swarm.
	OriginInSwarm int `json:"origin_in_swarm"`
	// LayerFrom says where a node that joined with the manifest's head got
	// the piece layer: "peer" or "origin" ("" if it had it).
	LayerFrom string `json:"layer_from,omitempty"`
	// Neighbours counts the neighbours made by how their connection
	// reaches them (paths.go).
	Neighbours Paths `json:"neighbours"`
	// UplinkCapacity is the uplink's capacity for data as the pacer read
	// it, and UploadPace the pace it set, in bytes/s (0: not read yet,
	// or not paced; package uplink). Shared by the swarms of a host.
	UplinkCapacity float64 `json:"uplink_capacity"`
	UploadPace     float64 `json:"upload_pace"`
	// UploadCapacity is our upload capacity as the scheduler knows it,
	// bytes/s: what TCP delivered to peers in a second, the most seen,
	// decaying (measureCapacity). It is told to the neighbours (RATE),
	// which measure what we upload to them against it (reciprocation).
	UploadCapacity float64 `json:"upload_capacity"`
	// UnchokedMean is how many neighbours we unchoked, UnchokedUsMean how
	// many unchoked us, on average over the download (sampled every tick
	// until complete). A choke round unchokes at most UploadSlots and
	// OptimisticSlots (10 by default) unless the object is small or
	// tit-for-tat strict; between rounds, a slot left by a peer that lost
	// interest is given to another, so the count can run higher.
	UnchokedMean   float64 `json:"unchoked_mean"`
	UnchokedUsMean float64 `json:"unchoked_us_mean"`
}

// Node is one running peer.
type Node struct {
	cfg    Config
	m      *manifest.Manifest
	geom   wire.Geometry
	log    *slog.Logger
	id     wire.PeerID
	ln     net.Listener
	events chan swarm.Event
	joins  chan join  // handshaken connections for the loop to register
	fatal  chan error // a FatalError from an origin fetch ends Run
	sched  *swarm.Scheduler
	// The loop's measure of our upload rate (measureUpload).
	upRate float64
	// upRateBits is upRate for the other goroutines (math.Float64bits);
	// upPeakBits the most capacity measureCapacity read (uploadPeak).
	upRateBits, upPeakBits atomic.Uint64
	upAt                   time.Time
	upLast                 int64
	// Our upload capacity (measureCapacity): when it was last read, the
	// estimate, and the estimate last told to the scheduler and the
	// neighbours (RATE).
	capAt    time.Time
	capacity float64
	capSent  float64

	// adoptCtx is Run's context while the node takes peers (accepting),
	// nil before and after: Adopt starts no goroutine past Run's wait.
	adoptMu  sync.Mutex
	adoptCtx context.Context

	nextID    atomic.Uint64
	wg        sync.WaitGroup // connection and helper goroutines
	pieceBufs sync.Pool      // *[]byte of PieceSize capacity (pieceBuf)
	recent    *recentPieces  // the last pieces received, for uploads
	turns     *Turns         // upload turns (turns.go); nil: none
	layer     layerState     // the piece layer, for a node that joined with the head (layer.go)

	// Owned by the loop goroutine.
	batch    []swarm.Event
	peers    map[swarm.PeerID]*peerConn
	byPeerID map[wire.PeerID]swarm.PeerID
	// bannedIDs are the peer IDs of the neighbours the scheduler banned:
	// the scheduler bans addresses, and a peer that cannot be dialed
	// (listen port 0) has none.
	bannedIDs map[wire.PeerID]bool
	complete  bool
	// completedAt and lastUpload time the hand-over of a peer leaving at
	// once (handedOver); uploading counts the pieces being sent to peers
	// now, from the wait for an upload turn to the acknowledgements (the
	// queues hold the others).
	completedAt, lastUpload time.Time
	uploading               atomic.Int32
	doneErr                 error     // from OnComplete
	lazySent                time.Time // when the lazy HAVEs last went out
	lastPiece               time.Time // when a piece last arrived

	bytesFromPeers, bytesToPeers, queueDrops atomic.Int64
	// bytesFromOrigin counts the origin's pieces; pacerRecv, the bytes
	// downloaded last told to the pacer (measureCapacity).
	bytesFromOrigin atomic.Int64
	pacerRecv       int64
	paths           pathCounts // paths.go

	mu        sync.Mutex // guards the following
	origin    map[string]int
	seen      int
	banned    int
	lastSched swarm.Stats   // the scheduler's, as of the last tick
	interval  time.Duration // the tracker's announce interval
	originErr error         // the origin's last answer, if a failure (OriginPatience)
	originAt  time.Time     // when it came
	// trackerFails holds the trackers whose last announce failed.
	trackerFails map[string]*trackerBackoff
	// unchokes sums, over the ticks while downloading, how many
	// neighbours we unchoked and how many unchoked us (Stats'
	// UnchokedMean, UnchokedUsMean).
	unchokes struct{ ticks, ours, theirs int }
	// trackerFailed tells the loop an announce failed: its periodic
	// timer is re-armed for the tracker's backoff.
	trackerFailed chan struct{}
}

// New checks cfg and prepares a node.
func New(cfg Config) (*Node, error) {
	if cfg.Manifest == nil || cfg.Store == nil {
		return nil, errors.New("node: Manifest and Store are required")
	}
	if cfg.UploadTurns < 0 || cfg.SeedTime < 0 {
		return nil, errors.New("node: UploadTurns and SeedTime must not be negative (NoUploadTurns, SeedForever)")
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = ":0"
	}
	if cfg.Host != nil {
		cfg.Listener, cfg.ListenAddr = nil, ""
		cfg.Dial = cfg.Host.Dial
		cfg.UploadLimit = cfg.Host.UploadLimit()
		cfg.Pacer = cfg.Host.Pacer()
	} else if cfg.Pacer == nil && !cfg.NoPacing {
		cfg.Pacer = uplink.New()
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: dialTimeout}
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = 3 * time.Minute
	}
	if cfg.OriginPatience <= 0 {
		cfg.OriginPatience = DefaultOriginPatience
	}
	n := &Node{
		cfg:       cfg,
		m:         cfg.Manifest,
		log:       cfg.Logger,
		events:    make(chan swarm.Event, 1024),
		joins:     make(chan join),
		fatal:     make(chan error, 1),
		peers:     map[swarm.PeerID]*peerConn{},
		byPeerID:  map[wire.PeerID]swarm.PeerID{},
		bannedIDs: map[wire.PeerID]bool{},
		origin:    map[string]int{},
		interval:  15 * time.Second,

		trackerFails:  map[string]*trackerBackoff{},
		trackerFailed: make(chan struct{}, 1),
	}
	n.id = cfg.PeerID
	if p := cfg.Private; p != nil {
		if p.Key == nil || p.Verifier == nil {
			return nil, errors.New("node: a private swarm needs the node's key and a verifier")
		}
		n.id = sign.PeerIDOf(p.Key.Public().(ed25519.PublicKey))
	}
	if n.id == (wire.PeerID{}) {
		n.id = wire.NewPeerID()
	}
	g, err := wire.NewGeometry(cfg.Manifest.Size, cfg.Manifest.PieceSize)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.geom = g
	// The testbed's corrupting peer damages what it uploads in place, so
	// it reads every upload into a buffer of its own (testbed.go).
	keep := int64(recentBytes)
	if corruptUploads {
		keep = 0
	}
	n.recent = newRecentPieces(cfg.Manifest.PieceSize, keep, n.putPieceBuf)
	n.layer.init(cfg.Manifest.HasLayer())
	n.turns = NewTurns(cfg.UploadTurns)
	if cfg.NoUploadTurns {
		n.turns = nil
	}
	if cfg.Host != nil {
		n.turns = cfg.Host.Turns()
	}
	return n, nil
}

// Addr is the listening address once Run has started listening, or the
// host's (Config.Host).
func (n *Node) Addr() net.Addr {
	if n.cfg.Host != nil {
		return n.cfg.Host.Addr()
	}
	if n.ln == nil {
		return nil
	}
	return n.ln.Addr()
}

// Manifest is the node's manifest; its piece layer is set once known
// (Manifest.HasLayer).
func (n *Node) Manifest() *manifest.Manifest { return n.m }

// Stats returns a snapshot of the counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	o := make(map[string]int, len(n.origin))
	for k, v := range n.origin {
		o[k] = v
	}
	capacity, pace := n.cfg.Pacer.Rates()
	return Stats{
		UplinkCapacity: capacity, UploadPace: pace,
		BytesFromPeers: n.bytesFromPeers.Load(), BytesToPeers: n.bytesToPeers.Load(),
		PiecesFromPeer: n.lastSched.Received, OriginFetches: o, PeersSeen: n.seen, PeersBanned: n.banned,
		QueueDrops: n.queueDrops.Load(), RequestTimeouts: n.lastSched.Timeouts,
		Cancels: n.lastSched.Cancels, DuplicatePieces: n.lastSched.Duplicates, OriginPicked: n.lastSched.OriginPicked,
		OriginInSwarm: n.lastSched.OriginInSwarm, LayerFrom: n.layerFrom(), Neighbours: n.paths.snapshot(),
		UploadCapacity: n.lastSched.Capacity,
		UnchokedMean:   perTick(n.unchokes.ours, n.unchokes.ticks),
		UnchokedUsMean: perTick(n.unchokes.theirs, n.unchokes.ticks),
	}
}

// have rebuilds the set of pieces present in the store.
func (n *Node) have() *pieceset.Set {
	s := pieceset.New(n.m.NumPieces())
	for i := range n.m.NumPieces() {
		if n.cfg.Store.Has(i) {
			s.Add(i)
		}
	}
	return s
}

// Run takes part in the swarm until the file is complete and SeedTime has
// passed, or ctx ends. It returns nil once complete (the store is committed
// by the caller) and ctx's error if cancelled before.
func (n *Node) Run(ctx context.Context) error {
	switch {
	case n.cfg.Host != nil:
	case n.cfg.Listener != nil:
		n.ln = n.cfg.Listener
	default:
		ln, err := net.Listen("tcp", n.cfg.ListenAddr)
		if err != nil {
			return fmt.Errorf("node: listen: %w", err)
		}
		n.ln = ln
	}
	ctx, cancel := context.WithCancel(ctx)
	detach, err := n.accepting(ctx)
	if err != nil {
		cancel()
		return err
	}
	defer func() {
		cancel()
		detach()
		for _, p := range n.peers {
			p.close()
		}
		n.wg.Wait()
		hits, misses := n.recent.counts()
		n.log.Debug("uploads read", "from_memory", hits, "from_store", misses)
	}()

	scfg := n.cfg.Swarm
	if scfg.LayerPending = !n.layer.known.Load(); scfg.LayerPending {
		n.wg.Go(func() { n.fetchLayerLater(ctx) })
	}
	scfg.NumPieces = n.m.NumPieces()
	scfg.PieceLen = func(i int) int64 { return n.m.PieceLen(i) }
	if scfg.Seed == 0 {
		scfg.Seed = uint64(n.id[0])<<56 | uint64(n.id[1])<<48 | uint64(n.id[2])<<40 | uint64(n.id[3])<<32 | uint64(n.id[4])<<24
	}
	now := time.Now()
	n.sched = swarm.New(scfg, n.have(), now)
	n.apply(ctx, n.sched.Start(now))

	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	n.mu.Lock() // the join announce above may already be setting it
	announce := time.NewTimer(n.interval)
	n.mu.Unlock()
	defer announce.Stop()
	var seedDone <-chan time.Time
	var rtts []swarm.Event // a tick's PathRTTs, added to its batch
	n.lastPiece = time.Now()
	for {
		if n.doneErr != nil {
			n.leave()
			return n.doneErr
		}
		if !n.complete && time.Since(n.lastPiece) > n.cfg.StallTimeout {
			n.leave()
			return fmt.Errorf("%w for %v", ErrStalled, n.cfg.StallTimeout)
		}
		if at, err := n.originFailing(); !n.complete && outOfPatience(time.Now(), n.lastPiece, at, err, n.cfg.OriginPatience) {
			n.leave()
			return fmt.Errorf("%w for %v, and the origin fails: %w", ErrStalled, n.cfg.OriginPatience, err)
		}
		if n.complete && seedDone == nil {
			if n.handingOver() && n.handedOver(time.Now()) {
				n.leave()
				return nil
			}
			if n.cfg.SeedTime > 0 && !n.cfg.SeedForever {
				seedDone = time.After(n.cfg.SeedTime)
			}
		}
		var ev swarm.Event
		select {
		case <-ctx.Done():
			n.leave()
			if n.complete {
				return nil
			}
			return ctx.Err()
		case <-seedDone:
			n.leave()
			return nil
		case err := <-n.fatal:
			n.leave()
			return err
		case <-announce.C:
			n.askTracker(ctx, "")
			n.mu.Lock()
			announce.Reset(n.announceWaitLocked())
			n.mu.Unlock()
			continue
		case <-n.trackerFailed:
			n.mu.Lock()
			announce.Reset(n.announceWaitLocked())
			n.mu.Unlock()
			continue
		case j := <-n.joins:
			if ev = n.register(ctx, j); ev == nil {
				continue
			}
		case <-n.layer.retry:
			n.askLayer()
			continue
		case now := <-tick.C:
			ev = swarm.Tick{}
			// Every lazyHaveDelay at most, on the ticks.
			if now.Sub(n.lazySent) >= lazyHaveDelay-tickEvery {
				for _, p := range n.peers {
					p.sendLazy()
				}
				n.lazySent = now
			}
			n.schedStats()
			n.measureUpload(now)
			rtts = n.measureCapacity(now, rtts)
			if n.handingOver() {
				n.probeHandOver()
			}
			rtts = n.pathRTTs(now, rtts)
		case ev = <-n.events:
		}
		// Hand the scheduler everything already waiting in one batch: a
		// busy swarm sends bursts of HAVE and START, and deciding once per
		// burst instead of once per frame saves most of the CPU.
		batch := append(n.batch[:0], ev)
		batch = append(batch, rtts...)
		rtts = rtts[:0]
	drain:
		for len(batch) < maxBatch {
			select {
			case e := <-n.events:
				batch = append(batch, e)
			default:
				break drain
			}
		}
		for _, e := range batch {
			n.observe(e)
		}
		n.apply(ctx, n.sched.StepAll(batch, time.Now()))
		n.batch = batch
	}
}

// originFailing is the origin's last answer if it was a failure, and when
// it came.
func (n *Node) originFailing() (time.Time, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.originAt, n.originErr
}

// outOfPatience reports whether a download gives up at now: no piece
// since lastPiece for longer than patience, and the origin's last answer,
// at, a failure since that piece. A failure older than the last piece says
// nothing of the origin now: a slow swarm with a healthy origin waits for
// the stall timeout instead.
func outOfPatience(now, lastPiece, at time.Time, err error, patience time.Duration) bool {
	return err != nil && at.After(lastPiece) && now.Sub(lastPiece) > patience
}

// maxBatch bounds the events handed to the scheduler at once, so a flood
// cannot delay its decisions for long.
const maxBatch = 256

// observe updates the runtime's own books before the scheduler sees ev.
func (n *Node) observe(ev swarm.Event) {
	switch ev := ev.(type) {
	case swarm.PeerDown:
		if p := n.peers[ev.Peer]; p != nil {
			n.log.Debug("peer down", "peer", p.addr, "why", ev.Reason)
			delete(n.peers, ev.Peer)
			if n.byPeerID[p.peerID] == ev.Peer {
				delete(n.byPeerID, p.peerID)
			}
			p.close()
			n.askEnded(p)
			n.dropHeld(p)
		}
	case swarm.TrackerPeers:
		if !n.layer.known.Load() {
			n.drawLayer(ev.SwarmSize, len(ev.Addrs))
		}
	case swarm.HaveSet:
		if ev.Set.Count() > 0 {
			n.haveFrom(ev.Peer)
		}
	case swarm.Have:
		n.haveFrom(ev.Peer)
	case swarm.Received:
		n.stored(ev.Piece)
	case swarm.OriginResult:
		switch {
		case ev.OK && ev.Picked:
			n.stored(ev.Got)
		case ev.OK:
			n.stored(ev.Piece)
		}
	}
}

func (n *Node) stored(piece int) {
	n.lastPiece = time.Now()
	for _, p := range n.peers {
		p.forget(piece)
	}
	if n.cfg.OnPiece != nil {
		n.cfg.OnPiece(piece)
	}
}

// tickEvery is how often the loop ticks: timeouts, rates, lazy HAVEs.
const tickEvery = 200 * time.Millisecond

// post delivers an event to the loop unless the node is shutting down.
func (n *Node) post(ctx context.Context, ev swarm.Event) {
	select {
	case n.events <- ev:
	case <-ctx.Done():
	}
}

// Prefer asks for pieces from to from+count-1 before all others, lowest
// first (swarm.Prefer): a reader streaming the file in order, or a Range
// request, waits for them. count 0 ends the preference. Safe to call from
// any goroutine, before or during Run; it waits while the event queue is
// full, until ctx ends.
func (n *Node) Prefer(ctx context.Context, from, count int) {
	n.post(ctx, swarm.Prefer{From: from, Count: count})
}

// AddPeers hands the scheduler peer addresses learnt outside the tracker
// (an overloaded origin's answer, a gateway's own list): candidates to
// dial (swarm.Learned). Same rules as Prefer.
func (n *Node) AddPeers(ctx context.Context, addrs []string) {
	n.post(ctx, swarm.Learned{Addrs: addrs})
}

// OriginBudget tells the scheduler what the origin said of its egress
// budget for the file (swarm.OriginBudget): left bytes more to swarm
// clients until its window ends in reset. Same rules as Prefer.
func (n *Node) OriginBudget(ctx context.Context, left int64, reset time.Duration) {
	n.post(ctx, swarm.OriginBudget{Left: left, Reset: reset})
}

// Stored tells the scheduler that piece was verified and stored by the
// caller, outside the node's own fetches (an overloaded origin answering a
// request for one piece with another): it is announced to peers and never
// fetched again, as if an origin fetch of it had succeeded. Same rules as
// Prefer.
func (n *Node) Stored(ctx context.Context, piece int) {
	n.post(ctx, swarm.OriginResult{Piece: piece, OK: true})
}

// postLater is post for the loop goroutine itself, which must never wait
// for room in its own channel: a peer flooding us with frames keeps it full.
func (n *Node) postLater(ctx context.Context, ev swarm.Event) {
	n.wg.Go(func() { n.post(ctx, ev) })
}

// Private is what a node of a private swarm shows and checks
// (Config.Private; docs/security.md).
type Private struct {
	// Key is the node's own key: its peer ID is sign.PeerIDOf its public
	// half, and it signs the node's proofs and announces.
	Key ed25519.PrivateKey
	// Token is the node's own, issued by the origin for that peer ID.
	Token sign.Token
	// Verifier checks the peers' proofs: it trusts the origin's key.
	Verifier *sign.Verifier
	// Now is the clock tokens expire by. Default time.Now.
	Now func() time.Time
}

func (p *Private) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// privateHello is a node's wire.Private: its proof in its handshakes, and
// the check of its peers'.
type privateHello struct {
	p *Private
	m *manifest.Manifest
}

func (h privateHello) Prove(mine, theirs wire.Handshake) ([]byte, error) {
	return sign.Prove(h.p.Key, h.p.Token, sign.ProofContext{
		Root: h.m.Root, Size: h.m.Size, Prover: mine.PeerID, Hearer: theirs.PeerID, Challenge: theirs.Challenge,
	}), nil
}

func (h privateHello) Admit(mine, theirs wire.Handshake, auth []byte) error {
	return h.p.Verifier.Check(auth, sign.ProofContext{
		Root: h.m.Root, Size: h.m.Size, Prover: theirs.PeerID, Hearer: mine.PeerID, Challenge: mine.Challenge,
	}, h.p.now())
}
