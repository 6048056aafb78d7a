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
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/internal/sockopt"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
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
	// Listener accepts peers, and Run closes it when it returns; when it
	// is set ListenAddr is ignored, when nil Run listens on ListenAddr.
	Listener   net.Listener
	ListenAddr string // default ":0"
	// Dial connects to a peer (default: net.Dialer with a 5s timeout).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// HTTPClient talks to the tracker (default: a client with 10s timeout).
	HTTPClient *http.Client
	// DownloadLimit and UploadLimit shape peer traffic (nil: unlimited).
	// DownloadLimit is shared with origin fetches by the caller.
	DownloadLimit, UploadLimit *ratelimit.Limiter
	// UploadTurns is how many pieces are sent to peers at once, across all
	// connections (turns.go; 0: 3, negative: no bound).
	UploadTurns int
	// SeedTime is how long to keep serving after completion (0: leave at
	// once, after the hand-over, see handedOver; negative: until ctx ends).
	SeedTime time.Duration
	// OnPiece is called (on the loop goroutine) after each piece stored.
	OnPiece func(piece int)
	// OnComplete is called once when every piece is stored, before seeding:
	// the caller publishes the file there. An error ends Run with it.
	OnComplete func() error
	// StallTimeout ends Run with ErrStalled when no piece arrived for this
	// long while pieces are missing (default 3m).
	StallTimeout time.Duration
	// Swarm tunes the scheduler; its NumPieces, PieceLen and Seed are set here.
	Swarm  swarm.Config
	Logger *slog.Logger
}

// ErrStalled: no piece arrived for Config.StallTimeout.
var ErrStalled = errors.New("node: no progress from peers or origin")

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
	// upRateBits is upRate for the other goroutines (math.Float64bits).
	upRateBits atomic.Uint64
	upAt       time.Time
	upLast     int64

	nextID    atomic.Uint64
	wg        sync.WaitGroup // connection and helper goroutines
	pieceBufs sync.Pool      // *[]byte of PieceSize capacity (pieceBuf)
	recent    *recentPieces  // the last pieces received, for uploads
	turns     *turns         // upload turns (turns.go); nil: none
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

	mu        sync.Mutex // guards the following
	origin    map[string]int
	seen      int
	banned    int
	lastSched swarm.Stats   // the scheduler's, as of the last tick
	interval  time.Duration // the tracker's announce interval
}

// New checks cfg and prepares a node.
func New(cfg Config) (*Node, error) {
	if cfg.Manifest == nil || cfg.Store == nil {
		return nil, errors.New("node: Manifest and Store are required")
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = ":0"
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
	}
	n.id = wire.NewPeerID()
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
	n.turns = newTurns(cfg.UploadTurns)
	return n, nil
}

// Addr is the listening address once Run has started listening.
func (n *Node) Addr() net.Addr {
	if n.ln == nil {
		return nil
	}
	return n.ln.Addr()
}

// Stats returns a snapshot of the counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	o := make(map[string]int, len(n.origin))
	for k, v := range n.origin {
		o[k] = v
	}
	return Stats{
		BytesFromPeers: n.bytesFromPeers.Load(), BytesToPeers: n.bytesToPeers.Load(),
		PiecesFromPeer: n.lastSched.Received, OriginFetches: o, PeersSeen: n.seen, PeersBanned: n.banned,
		QueueDrops: n.queueDrops.Load(), RequestTimeouts: n.lastSched.Timeouts,
		Cancels: n.lastSched.Cancels, DuplicatePieces: n.lastSched.Duplicates, OriginPicked: n.lastSched.OriginPicked,
		OriginInSwarm: n.lastSched.OriginInSwarm, LayerFrom: n.layerFrom(),
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
	if n.cfg.Listener != nil {
		n.ln = n.cfg.Listener
	} else {
		ln, err := net.Listen("tcp", n.cfg.ListenAddr)
		if err != nil {
			return fmt.Errorf("node: listen: %w", err)
		}
		n.ln = ln
	}
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		n.ln.Close()
		for _, p := range n.peers {
			p.close()
		}
		n.wg.Wait()
		hits, misses := n.recent.counts()
		n.log.Debug("uploads read", "from_memory", hits, "from_store", misses)
	}()
	n.wg.Go(func() { n.acceptLoop(ctx) })

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
		if n.complete && seedDone == nil {
			if n.handingOver() && n.handedOver(time.Now()) {
				n.leave()
				return nil
			}
			if n.cfg.SeedTime > 0 {
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
			announce.Reset(n.interval)
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
			if n.handingOver() {
				n.probeHandOver()
			}
			rtts = n.pathRTTs(now, rtts[:0])
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

// dialTimeout bounds a dial to a peer. A peer whose uplink is saturated
// drops packets at its bottleneck queue, the SYN-ACK among them; TCP sends
// the SYN again after 1, 3 and 7 s, so a short timeout (5 s was measured)
// left late arrivals of a flash crowd of 50 unable to reach anyone.
const dialTimeout = 15 * time.Second

// maxBatch bounds the events handed to the scheduler at once, so a flood
// cannot delay its decisions for long.
const maxBatch = 256

// register adopts a handshaken connection. Of two connections joining the
// same two peers, both keep the one dialed by the peer with the smaller ID
// (docs/protocol.md, section 3), so that when they dial each other at once
// they drop the same one rather than one each. A dial that ends as the
// dropped duplicate is reported to the scheduler as failed, since it waits
// for the outcome of every Connect. A peer ID the scheduler banned is
// turned away (GOODBYE corrupt data) whatever its address.
func (n *Node) register(ctx context.Context, j join) swarm.Event {
	p := j.p
	if n.bannedIDs[p.peerID] {
		n.sayGoodbye(p.c, wire.GoodbyeCorrupt, "banned")
		if j.outbound {
			return swarm.DialFailed{Addr: p.addr}
		}
		return nil
	}
	if oldID, dup := n.byPeerID[p.peerID]; dup {
		old := n.peers[oldID]
		if old == nil || !n.keepNew(p, j.outbound, old) {
			n.sayGoodbye(p.c, wire.GoodbyeDuplicate, "duplicate connection")
			if j.outbound {
				return swarm.DialFailed{Addr: p.addr}
			}
			return nil
		}
		// The old one goes; its reader reports PeerDown.
		old.sendControl(&wire.Goodbye{Reason: wire.GoodbyeDuplicate, Text: "duplicate connection"})
		old.closeAfterFlush()
	}
	n.peers[p.id] = p
	n.byPeerID[p.peerID] = p.id
	n.mu.Lock()
	n.seen++
	n.mu.Unlock()
	p.start(ctx)
	n.askLayer()
	n.log.Debug("peer up", "peer", p.addr, "outbound", j.outbound, "peers", len(n.peers))
	return swarm.PeerUp{Peer: p.id, Addr: p.addr, Outbound: j.outbound}
}

// maxBannedIDs bounds Node.bannedIDs: a peer can make up IDs at will, and
// past the bound the scheduler's ban of addresses still holds.
const maxBannedIDs = 4096

// sayGoodbye sends GOODBYE on a handshaken connection that is not adopted
// (a duplicate that lost, a banned peer ID) and closes it, off the loop,
// within closeGrace.
//
// What the peer sent meanwhile (its HAVESET) is read and dropped until it
// closes too: a TCP socket closed with unread data sends a reset, which
// can destroy the GOODBYE before the peer reads it.
func (n *Node) sayGoodbye(c net.Conn, reason wire.GoodbyeReason, text string) {
	n.wg.Go(func() {
		defer c.Close()
		c.SetDeadline(time.Now().Add(closeGrace))
		w := wire.NewWriter(c, n.geom)
		if w.WriteMessage(&wire.Goodbye{Reason: reason, Text: text}) != nil || w.Flush() != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		io.Copy(io.Discard, io.LimitReader(c, maxGoodbyeDrain))
	})
}

// maxGoodbyeDrain bounds what sayGoodbye reads from a peer it is leaving.
const maxGoodbyeDrain = 1 << 20

// keepNew reports whether p, a new connection to the same peer as old,
// replaces it: p was dialed by the peer with the smaller ID and old was not.
func (n *Node) keepNew(p *peerConn, outbound bool, old *peerConn) bool {
	smaller := n.id
	if bytes.Compare(p.peerID[:], n.id[:]) < 0 {
		smaller = p.peerID
	}
	dialer := func(outbound bool) wire.PeerID {
		if outbound {
			return n.id
		}
		return p.peerID
	}
	return dialer(outbound) == smaller && dialer(old.outbound) != smaller
}

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

// notSentLowat bounds the bytes a peer connection's kernel send buffer holds
// that TCP has not sent yet (sockopt.NotSentLowat): a HAVE, START or
// REQUEST, which the writer sends before piece data and between its 64 KiB
// DATA frames, waits behind at most this much unsent data plus one frame,
// not seconds of it, so the swarm does not coordinate on stale news
// (origin fetches of pieces already on their way, requests timing out).
const notSentLowat = 32 << 10

// The upload queue. Past what the node uploads in uploadQueueTime (at its
// measured rate, at least minUploadsQueued pieces), on all connections
// together, requests are refused as busy at once, so requesters ask
// another holder (one that just got the piece) instead of waiting seconds
// in a long queue here: in a crowd a new piece's first holder is asked by
// everyone at the same moment. On the testbed (8 Mbit/s up, 64 KiB
// pieces) the bound is 8 pieces; it took the last of 20 peers from 1.28
// to 1.23-1.25 × T_KR (three runs each).
// Requesters pause only briefly after a busy refusal (swarm's
// busyBackoff), so a sole holder's link does not idle.
const (
	uploadQueueTime  = 500 * time.Millisecond
	minUploadsQueued = 8
)

// The ramp's bound. While we hold fewer than rampPieces pieces and lack
// some, the first seconds of a crowd, everyone lacks the few we have and
// asks us for them at once. The queue's bound then counts the pieces
// waiting for an upload turn or being sent as well as those queued
// (uploading; a connection takes its piece out of its queue when it
// starts to wait for a turn, so a peer asked for a new piece by 25
// neighbours at once accepted them all, twelfth pass), and it is
// rampQueueTime of upload (at least rampMinQueued pieces): a requester
// refused goes to a neighbour that got the piece a moment after us, whose
// link would idle, instead of waiting a second here. In flash50 runs on
// the testbed the peers were about 0.2 s less behind at 3 and 4 s, and
// the last peer came at 38.54 s on average against 38.68 s (15 runs
// each, in turn). Past the ramp the longer bound is better: with the
// short one all along, in one run, holders idled while their refused
// requesters backed off and the last peer came 0.6 s later (thirteenth
// pass). 16 and 64 pieces did no better than 32 (4 and 5 runs;
// docs/benchmarks.md, eighteenth pass).
const (
	rampPieces    = 32
	rampQueueTime = 300 * time.Millisecond
	rampMinQueued = 4
)

// Lazy HAVEs. A HAVE goes at once to the neighbours that lack the piece
// and may fetch it from us: they may want it now. Those that have it
// already or that we choke, and still have pieces we lack, need not hear
// at once (swarm.Scheduler.HaveCanWait; an UNCHOKE goes after them): their
// HAVEs wait, for about lazyHaveDelay at most (the flush is on the loop's
// ticks), and go out in one write with the next HAVE that goes at once, or
// with the others held back, or when maxLazy are waiting. The START of a
// request to a peer waits with them (swarm.Scheduler.StartTo, Node.announce). A HAVE is
// one frame in a packet of its own, which draws an ACK, and each peer of a
// crowd of N sends N-1 of them per piece: in a flash crowd of 20 (512
// pieces, 8 Mbit/s links) 19 × 512 = 9,728 HAVEs per peer against about
// 23,000 data segments (32 MiB in 1,448-byte segments) and half as many
// ACKs for what it receives, all handled by the peers' processes and
// kernels, on the testbed two cores for all of them. In flash50 runs on
// that testbed, where the cores are saturated, the last peer came 1.0-1.5 s
// sooner on average than without (nine pairs of runs, one after the
// other, every pair in favour); in flash20 runs no change showed beyond
// the runs' spread of about a second.
const (
	lazyHaveDelay = time.Second
	maxLazy       = 64
)

// tickEvery is how often the loop ticks: timeouts, rates, lazy HAVEs.
const tickEvery = 200 * time.Millisecond

// A peer that leaves at once (SeedTime 0) still hands over what it has
// to the neighbours that lack it and ask in time: it goes once no upload
// has been queued or under way for handOverQuiet, once no neighbour lacks
// any piece of ours, or handOverMax after completion, whichever comes
// first. Without it, the last piece of a flash crowd left with the peer
// that fetched it from the origin, and every other peer fetched it from
// the origin in turn (in one flash20 run, 19 times, over 6 s).
//
// A neighbour keeps one request at a time to a peer on a short path
// (swarm.Scheduler.depth) and may be busy with others between two, so
// with 300 ms peers of the staggered scenario left while still asked, and
// those arriving after them found nobody and went to the origin: 3.5-3.7 F
// of origin bytes against 2.4-2.6 F with a second (pairs of runs). A
// second once cost flash crowds of 50 1-1.5 s, when a straggler kept its
// finished neighbours wanted and lingering on two busy cores; since the
// catch-up slot (swarm/choke.go) keeps stragglers up, it no longer does
// (three pairs of runs, none slower). docs/benchmarks.md, sixth pass.
const (
	handOverQuiet = time.Second
	handOverMax   = 2 * time.Second
)

// handedOver reports whether a peer leaving at once may go (see
// handOverQuiet). The loop asks on every wake-up, at least every tick.
func (n *Node) handedOver(now time.Time) bool {
	if n.completedAt.IsZero() {
		n.completedAt, n.lastUpload = now, now
	}
	if n.uploadsQueued() > 0 || n.uploading.Load() > 0 {
		n.lastUpload = now
	}
	return now.Sub(n.completedAt) >= handOverMax || now.Sub(n.lastUpload) >= handOverQuiet || !n.sched.Wanted()
}

// handingOver reports whether the node is complete and leaves at once,
// after the hand-over (handedOver).
func (n *Node) handingOver() bool {
	return n.complete && n.cfg.SeedTime == 0
}

// probeHandOver writes a KEEPALIVE, on each tick of the hand-over, to
// every neighbour that still lacks a piece of ours by the have-sets and
// HAVEs it sent: those the hand-over waits for. One that left may still
// count among them when what it sent last never came: a TCP peer that
// closes its socket with data unread sends a reset in place of its FIN
// and discards what it had not sent yet (its GOODBYE, its last HAVEs),
// and a reset is not sent again if a full bottleneck queue drops it. Then
// nothing more arrives, and we would wait handOverQuiet for nobody. A
// write to a connection whose other end is gone (its host still up)
// draws a fresh reset, which ends it here. Our reading of last peers that
// waited about 1 s for a neighbour that had exited, not confirmed; the
// measurements are in docs/benchmarks.md, fifteenth pass.
func (n *Node) probeHandOver() {
	for id, p := range n.peers {
		if n.sched.Lacks(id) {
			p.probe()
		}
	}
}

// uploadsQueued counts the pieces waiting for upload on all connections.
func (n *Node) uploadsQueued() int {
	q := 0
	for _, p := range n.peers {
		q += len(p.uploads)
	}
	return q
}

// uploadRanks is how many ranks the upload turns order pieces by
// (turns.go): the pieces no neighbour of ours has, those one has, and the
// rest.
const uploadRanks = 3

// uploadRank is the rank of an upload of piece: the fewer neighbours have
// it, the sooner it goes (turns.go).
func (n *Node) uploadRank(piece int) int {
	return min(n.sched.Holders(piece), uploadRanks-1)
}

// uploadsFull reports whether a request is to be refused as busy now: the
// upload queue's bound, or in the first seconds the ramp's (above).
func (n *Node) uploadsFull() bool {
	if n.sched.HaveCount() < rampPieces && !n.sched.Complete() {
		return n.uploadsQueued()+int(n.uploading.Load()) >= n.queueBound(rampQueueTime, rampMinQueued)
	}
	return n.uploadsQueued() >= n.queueBound(uploadQueueTime, minUploadsQueued)
}

// queueBound is how many pieces we upload in d at our measured rate, and
// at least floor.
func (n *Node) queueBound(d time.Duration, floor int) int {
	return max(floor, int(n.upRate*d.Seconds()/float64(n.m.PieceSize)))
}

// pieceBuf returns a buffer for a piece of n bytes being received or sent,
// from pieceBufs. A crowd's peer receives a piece every few milliseconds; a
// fresh 64 KiB allocation for each is zeroed, then garbage: in a perf
// profile of a flash crowd of 50, whose peers share two cores on the
// testbed, the kernel's page clearing alone was 2.8% of all CPU time. A
// buffer of its own for each connection's uploads was as bad at the start
// of a crowd (one per neighbour, 3 MiB a peer at 49 neighbours, each page
// faulted in on its first piece): page clearing was 7.9% of the CPU in the
// first seconds of a flash50 run, against 2.4% later.
func (n *Node) pieceBuf(size int) []byte {
	if b, ok := n.pieceBufs.Get().(*[]byte); ok && cap(*b) >= size {
		return (*b)[:size]
	}
	return make([]byte, size, n.m.PieceSize)
}

// putPieceBuf gives back a buffer from pieceBuf once nothing refers to it.
func (n *Node) putPieceBuf(b []byte) {
	b = b[:cap(b)]
	n.pieceBufs.Put(&b)
}

// readPiece returns piece i's bytes for an upload: the kept copy if it
// arrived lately (recentPieces), else read into buf from the store and
// verified. release must be called once the bytes are sent.
func (n *Node) readPiece(i int, buf []byte) (data []byte, release func(), err error) {
	if e, ok := n.recent.get(i); ok {
		return e.data, func() { n.recent.release(e) }, nil
	}
	data, err = n.cfg.Store.ReadPiece(i, buf)
	return data, func() {}, err
}

// announce sends a HAVE, START or STOP of piece to p, holds it back
// (wait; never a STOP), or drops it (!send: a claim p need not hear). What was held for p
// goes first, so p hears of each piece in order. A HAVE supersedes a START
// still held, and a STOP cancels it: that START does not go out, nor does
// the STOP. Any other STOP goes at once: it frees the piece for p's origin
// fetches, and STOPs are few.
func (n *Node) announce(p *peerConn, t wire.Type, piece int, send, wait bool) {
	if t == wire.TypeHave {
		p.unhold(wire.TypeStart, piece)
	}
	switch {
	case t == wire.TypeStop && p.unhold(wire.TypeStart, piece):
	case !send:
	case wait:
		p.hold(t, piece)
	default:
		p.sendLazy()
		switch t {
		case wire.TypeHave:
			p.sendControl(&wire.Have{Piece: uint32(piece)})
		case wire.TypeStart:
			p.sendControl(&wire.Start{Piece: uint32(piece)})
		case wire.TypeStop:
			p.sendControl(&wire.Stop{Piece: uint32(piece)})
		}
	}
}

// pathRTTs appends a swarm.PathRTT for each connection whose round trip
// without queues (sockopt.MinRTT) changed since it was last read, reading
// each at most every pathRTTEvery (a connection without a reading yet, on
// every tick). Transports that cannot tell give none.
func (n *Node) pathRTTs(now time.Time, evs []swarm.Event) []swarm.Event {
	for id, p := range n.peers {
		if p.pathRTT > 0 && now.Sub(p.pathRTTAt) < pathRTTEvery {
			continue
		}
		p.pathRTTAt = now
		if rtt := sockopt.MinRTT(p.c); rtt > 0 && rtt != p.pathRTT {
			p.pathRTT = rtt
			evs = append(evs, swarm.PathRTT{Peer: id, RTT: rtt})
		}
	}
	return evs
}

// pathRTTEvery is how often a connection's path RTT is read again.
const pathRTTEvery = 2 * time.Second

// measureUpload updates upRate, the bytes per second uploaded (a moving
// average over about a second, of the ticks' samples).
func (n *Node) measureUpload(now time.Time) {
	up := n.bytesToPeers.Load()
	if !n.upAt.IsZero() {
		if dt := now.Sub(n.upAt).Seconds(); dt > 0 {
			n.upRate += (float64(up-n.upLast)/dt - n.upRate) / 4
			n.upRateBits.Store(math.Float64bits(n.upRate))
		}
	}
	n.upAt, n.upLast = now, up
}

// apply carries out the scheduler's actions.
func (n *Node) apply(ctx context.Context, acts []swarm.Action) {
	for _, a := range acts {
		switch a := a.(type) {
		case swarm.Request:
			if p := n.peers[a.Peer]; p != nil {
				p.request(a.Piece, n.m.PieceLen(a.Piece))
			}
		case swarm.Cancel:
			if p := n.peers[a.Peer]; p != nil {
				if a.Timeout {
					n.log.Debug("request timed out", "peer", p.addr, "piece", a.Piece)
				}
				p.cancel(a.Piece, n.m.PieceLen(a.Piece))
			}
		case swarm.FetchOrigin:
			n.fetchOrigin(ctx, a)
		case swarm.Announce:
			for id, p := range n.peers {
				n.announce(p, wire.TypeHave, a.Piece, true, n.sched.HaveCanWait(id, a.Piece))
			}
		case swarm.AnnounceStart:
			for id, p := range n.peers {
				send, wait := n.sched.StartTo(id, a.Piece)
				n.announce(p, wire.TypeStart, a.Piece, send, wait)
			}
		case swarm.AnnounceStop:
			for id, p := range n.peers {
				send, _ := n.sched.StartTo(id, a.Piece) // a STOP never waits
				n.announce(p, wire.TypeStop, a.Piece, send, false)
			}
		case swarm.Choke:
			if p := n.peers[a.Peer]; p != nil {
				p.sendControl(&wire.Choke{})
				p.rejectQueued()
			}
		case swarm.Unchoke:
			if p := n.peers[a.Peer]; p != nil {
				p.sendLazy()
				p.sendControl(&wire.Unchoke{})
			}
		case swarm.Serve:
			if p := n.peers[a.Peer]; p != nil {
				if n.uploadsFull() {
					p.refuseBusy(a.Piece)
				} else if p.serve(a.Piece, n.uploadRank(a.Piece)) {
					continue
				}
				// Refused after all: the scheduler takes back what it
				// counted as served.
				n.postLater(ctx, swarm.Unserved{Peer: a.Peer, Piece: a.Piece})
			}
		case swarm.Reject:
			if p := n.peers[a.Peer]; p != nil {
				p.sendControl(&wire.Reject{Piece: uint32(a.Piece), Length: uint32(n.m.PieceLen(a.Piece)), Reason: rejectReason(a.Reason)})
			}
		case swarm.Connect:
			n.connect(ctx, a.Addr)
		case swarm.Disconnect:
			if p := n.peers[a.Peer]; p != nil {
				n.log.Debug("disconnecting", "peer", p.addr, "why", a.Reason, "ban", a.Ban)
				if a.Ban {
					if len(n.bannedIDs) < maxBannedIDs {
						n.bannedIDs[p.peerID] = true
					} else {
						n.log.Warn("too many banned peer IDs to remember; this one is banned by its address only", "peer", p.addr)
					}
					n.mu.Lock()
					n.banned++
					n.mu.Unlock()
				}
				p.sendControl(&wire.Goodbye{Reason: goodbyeReason(a), Text: a.Reason})
				p.closeAfterFlush()
			}
		case swarm.AskTracker:
			if a.Why == "completed" && n.cfg.SeedTime == 0 {
				// Leaving at once: "stopped" follows at once, and a
				// "completed" sent just before it could reach the
				// tracker after it, listing us as a seed that is gone.
				continue
			}
			n.askTracker(ctx, a.Why)
		case swarm.Recommend:
			if p := n.peers[a.Peer]; p != nil {
				p.sendControl(recommendation(a.Addrs))
			}
		case swarm.Complete:
			if n.complete {
				continue
			}
			n.complete = true
			if n.cfg.OnComplete != nil {
				if err := n.cfg.OnComplete(); err != nil {
					n.doneErr = err
					continue
				}
			}
			n.askTracker(ctx, "completed")
		}
	}
}

// goodbyeReason is the GOODBYE reason of the scheduler's Disconnect
// (docs/protocol.md, GOODBYE); its text is the scheduler's reason.
func goodbyeReason(d swarm.Disconnect) wire.GoodbyeReason {
	switch {
	case d.Ban: // corrupt data, now or before ("banned")
		return wire.GoodbyeCorrupt
	case d.Reason == swarm.DisconnectBadHaveSet:
		return wire.GoodbyeProtocol
	case d.Reason == swarm.DisconnectBothComplete:
		return wire.GoodbyeDone
	case d.Reason == swarm.DisconnectTooManyPeers:
		return wire.GoodbyeTooManyPeers
	}
	return wire.GoodbyeOther
}

func rejectReason(s string) wire.RejectReason {
	switch s {
	case "choked":
		return wire.RejectChoked
	case "don't have", "dont-have", "not-have":
		return wire.RejectDontHave
	case "busy":
		return wire.RejectBusy
	}
	return wire.RejectOther
}

func (n *Node) fetchOrigin(ctx context.Context, a swarm.FetchOrigin) {
	n.mu.Lock()
	n.origin[a.Reason]++
	n.mu.Unlock()
	n.log.Debug("origin fetch", "piece", a.Piece, "why", a.Reason, "peers", len(n.peers))
	if n.cfg.Origin == nil {
		n.postLater(ctx, swarm.OriginResult{Piece: a.Piece, OK: false})
		return
	}
	n.wg.Go(func() {
		start := time.Now()
		got, busy, err := n.cfg.Origin(ctx, a)
		n.log.Debug("origin fetch done", "piece", a.Piece, "took", time.Since(start), "ok", err == nil)
		if fe, ok := errors.AsType[*FatalError](err); ok {
			select {
			case n.fatal <- fe.Err:
			default:
			}
			return
		}
		res := swarm.OriginResult{Piece: a.Piece, OK: err == nil, Busy: busy}
		ie, inSwarm := errors.AsType[*InSwarmError](err)
		switch {
		case inSwarm:
			n.log.Debug("origin: pieces in the swarm", "piece", a.Piece, "retry_after", ie.Wait)
			res.InSwarm, res.Candidates = max(ie.Wait, time.Millisecond), a.Candidates
		case err != nil && busy == 0:
			n.log.Info("origin fetch failed", "piece", a.Piece, "err", err)
		case busy > 0:
			n.log.Debug("origin busy", "piece", a.Piece, "retry_after", busy)
		}
		if err == nil && got != a.Piece {
			n.log.Debug("origin picked", "asked", a.Piece, "got", got)
			res.Picked, res.Got = true, got
		}
		n.post(ctx, res)
	})
}

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

// announceEnough is the number of neighbours past which a periodic
// announce asks the tracker for few peers (askTracker).
const announceEnough = 8

// askTracker announces to every tracker in the background; answers come
// back as TrackerPeers events.
func (n *Node) askTracker(ctx context.Context, why string) {
	if len(n.cfg.Trackers) == 0 {
		if why == "join" || why == "refill" || why == "repair" {
			n.postLater(ctx, swarm.TrackerPeers{})
		}
		return
	}
	event := tracker.EventNone
	switch why {
	case "join":
		event = tracker.EventStarted
	case "completed":
		event = tracker.EventCompleted
	}
	left := n.m.Size
	if n.complete {
		left = 0
	}
	port := 0
	if ta, ok := n.ln.Addr().(*net.TCPAddr); ok {
		port = ta.Port
	}
	// Joining, refilling and repairing want addresses; the periodic
	// announces of a peer with neighbours enough, and a completion, only
	// keep it counted (and bring the swarm size): each peer listed is
	// about 80 bytes of the tracker's answer, which an embedded tracker
	// sends on the origin's link, 50 times a round in a crowd of 50.
	want := 30
	if why == "completed" || why == "" && len(n.peers) >= announceEnough {
		want = 5
	}
	req := tracker.AnnounceRequest{Root: n.m.Root, Size: n.m.Size, ID: tracker.PeerID(n.id), Port: uint16(port), Left: left, Event: event, NumWant: want}
	for _, url := range n.cfg.Trackers {
		n.wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			resp, err := tracker.Announce(actx, n.cfg.HTTPClient, url, req)
			if err != nil {
				n.log.Info("tracker announce failed", "tracker", url, "err", err)
				n.post(ctx, swarm.TrackerPeers{}) // no news: the scheduler decides
				return
			}
			addrs := make([]string, 0, len(resp.Peers))
			for _, p := range resp.Peers {
				addrs = append(addrs, p.Addr.String())
			}
			if resp.Interval > 0 {
				n.setInterval(resp.Interval)
			}
			n.log.Debug("tracker answered", "why", why, "peers", len(addrs), "swarm_size", resp.SwarmSize)
			n.post(ctx, swarm.TrackerPeers{Addrs: addrs, SwarmSize: resp.SwarmSize})
		})
	}
}

// setInterval records the tracker's announce interval (from tracker
// goroutines; the loop reads it under mu).
func (n *Node) setInterval(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d >= time.Second {
		n.interval = d
	}
}

// schedStats copies the scheduler's counters that Stats reports (on the
// loop goroutine, which owns the scheduler).
func (n *Node) schedStats() {
	st := n.sched.Stats()
	n.mu.Lock()
	n.lastSched = st
	n.mu.Unlock()
}

// leave says goodbye to every peer and the tracker (best effort, bounded).
func (n *Node) leave() {
	n.schedStats()
	for _, p := range n.peers {
		p.sendControl(&wire.Goodbye{Reason: wire.GoodbyeShutdown, Text: "leaving"})
		p.closeAfterFlush()
	}
	if len(n.cfg.Trackers) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req := tracker.AnnounceRequest{Root: n.m.Root, Size: n.m.Size, ID: tracker.PeerID(n.id), Event: tracker.EventStopped}
	for _, url := range n.cfg.Trackers {
		tracker.Announce(ctx, n.cfg.HTTPClient, url, req)
	}
}

func (n *Node) acceptLoop(ctx context.Context) {
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		n.wg.Go(func() { n.handshake(ctx, c, false, "") })
	}
}

func (n *Node) connect(ctx context.Context, addr string) {
	n.wg.Go(func() {
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		defer cancel()
		c, err := n.cfg.Dial(dctx, addr)
		if err != nil {
			n.log.Debug("dial failed", "peer", addr, "err", err)
			n.post(ctx, swarm.DialFailed{Addr: addr})
			return
		}
		if !n.handshake(ctx, c, true, addr) {
			n.log.Debug("handshake failed", "peer", addr)
			n.post(ctx, swarm.DialFailed{Addr: addr})
		}
	})
}

// handshake exchanges handshakes and, when they agree, registers the peer
// with the loop through a peerUp message.
func (n *Node) handshake(ctx context.Context, c net.Conn, outbound bool, addr string) bool {
	port := 0
	if ta, ok := n.ln.Addr().(*net.TCPAddr); ok {
		port = ta.Port
	}
	caps := wire.CapLayer
	if n.cfg.Store.Count() == n.m.NumPieces() {
		caps |= wire.CapSeed
	} else if n.cfg.Swarm.StrictTFT {
		caps |= wire.CapStrictTFT // strict only while downloading
	}
	mine := wire.Handshake{Caps: caps, Root: n.m.Root, Size: uint64(n.m.Size), PeerID: n.id, ListenPort: uint16(port)}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	theirs, err := wire.Exchange(hctx, c, mine)
	cancel()
	if err == nil && theirs.PeerID == n.id {
		// We dialed ourselves: an address of ours came back to us.
		n.sayGoodbye(c, wire.GoodbyeSelf, "self")
		return false
	}
	if err != nil {
		c.Close()
		return false
	}
	if !outbound {
		addr = ""
		if theirs.ListenPort != 0 {
			if host, _, err := net.SplitHostPort(c.RemoteAddr().String()); err == nil {
				addr = net.JoinHostPort(host, strconv.Itoa(int(theirs.ListenPort)))
			}
		}
	}
	sockopt.NotSentLowat(c, notSentLowat)
	id := swarm.PeerID(n.nextID.Add(1))
	p := newPeerConn(n, id, c, theirs.PeerID, addr)
	p.outbound, p.caps = outbound, theirs.Caps
	select {
	case n.joins <- join{p: p, outbound: outbound}:
	case <-ctx.Done():
		c.Close()
		return false
	}
	return true
}

type join struct {
	p        *peerConn
	outbound bool
}
