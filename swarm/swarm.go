// Package swarm is the pure scheduler of a stampede peer: given what happened
// (a peer connected, announced a piece, delivered one, the origin answered,
// time passed) it decides what to do next (request this piece from that peer,
// fetch that one from the origin, unchoke, serve, connect, ask the tracker).
//
// It follows raft's Step/Ready shape: a Scheduler is a plain struct with no
// I/O, no goroutines, no clock and no global randomness (a PCG seeded from
// Config.Seed). The runtime (package node: one goroutine per swarm) feeds it
// Events with the time they happened and carries out the Actions it
// returns, in order. Given the same Config and the same events at the same
// times, it returns the same actions, which is what the scenario scripts
// under testdata/scenarios pin down.
//
// The ideas come from the seed papers:
//
//   - Slurpie: the origin is protected by coordinated randomized backoff.
//     Time is cut into slices of Config.OriginSlice; in each slice a peer
//     holds the origin with probability k/n (n: the swarm size estimate), so
//     about k peers use it at once however large the crowd; and peers come
//     first. This also solves the last-block problem: when everyone lacks
//     the same pieces, only about k go to the origin and the rest get the
//     pieces from them (origin.go).
//   - Tekel's work stealing: a peer announces START for a piece it begins to
//     fetch; others pick something else while they have a choice, and never
//     fetch a START-claimed piece from the origin (pick.go).
//   - Flashback (Roulette): strict tit-for-tat with a small tab as an option
//     (choke.go), recommending recently traded neighbours to newcomers,
//     partition repair when no new data has arrived for a while (peers.go),
//     and for small objects under churn, stop-and-go bursts and an origin
//     deadline (small.go).
//   - BitTorrent: rarest first, endgame, choking with optimistic unchokes;
//     the request pipeline sized to each peer's bandwidth-delay product
//     (rate.go).
//
// # Contract with the runtime
//
//   - Call Start once, then Step for every event (Step calls Start itself if
//     needed). Send Tick every 100-250 ms: deadlines, choking rounds and
//     origin slices advance on events, and Tick is the event when nothing
//     else happens.
//   - A connection starts choked both ways, as in BitTorrent: the scheduler
//     requests from a peer only after Unchoked, and emits Unchoke for a peer
//     as soon as it may use an upload slot. After Choke, drop the uploads
//     queued for that peer: it voids its requests when it sees CHOKE (no
//     CANCEL comes).
//   - After PeerUp send our have-set to the peer; after Announce send HAVE
//     to every peer (it may wait where HaveCanWait says so; the HAVEs held
//     for a peer go before its UNCHOKE), after AnnounceStart START, after
//     AnnounceStop STOP (to the peers and with the waits StartTo says).
//   - For an outbound connection, PeerUp.Addr must be the Connect.Addr; a
//     Connect that ends without PeerUp (refused, failed handshake, duplicate
//     of a connection we have) must be reported as DialFailed, or the
//     address counts as being dialed for 30 s.
//   - Rejected.Reason carries the peer's reason (RejectChoked,
//     RejectDontHave, RejectBusy, or "" when unknown).
//   - TrackerPeers.SwarmSize 0 means "no estimate" (a failed announce): the
//     scheduler keeps its previous one.
//   - Disconnect removes the peer from the scheduler at once; later events
//     for it are ignored, except Received (the runtime stored the piece, so
//     it counts).
//   - The periodic tracker announce (AskTracker "interval") is the runtime's
//     job, since it knows the tracker's interval; the scheduler asks on
//     "join", "refill" and "repair".
package swarm

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
)

// DefaultPieceLen is the length of every piece when Config.PieceLen is nil.
const DefaultPieceLen = 256 << 10

// Config tunes a Scheduler. Zero fields take the documented defaults.
type Config struct {
	// NumPieces is the number of pieces of the file; 0 is an empty file,
	// complete from the start.
	NumPieces int
	// PieceLen returns the length of piece i in bytes (the last piece may be
	// shorter). Default: DefaultPieceLen for every piece.
	PieceLen func(i int) int64

	// MinPeers is the floor of WantPeers (4). Below WantPeers, with no
	// address left to dial, the scheduler asks the tracker for more, at
	// most every RefillEvery.
	MinPeers int
	// MaxPeers: above it the least useful peer is disconnected (64).
	MaxPeers int
	// LayerPending: the piece layer is not known yet (the peer joined with
	// the manifest's root and geometry alone, and fetches the layer from
	// its neighbours or the origin): it connects and trades have-sets, but
	// requests nothing, from peers or the origin, until LayerReady.
	LayerPending bool
	// WantPeers: the scheduler dials until it has this many, leaving room for
	// inbound connections up to MaxPeers (24, at least MinPeers):
	// in a crowd where everyone dials WantPeers, a peer also takes about
	// as many inbound, and evicting newcomers for lack of room cuts them
	// off (a flash crowd of 50 with 24 peers at most left a cluster of late
	// arrivals trading only with each other). A peer that sees a piece in
	// none of its neighbours fetches it from the origin, so the fuller the
	// mesh, the fewer copies the origin sends.
	WantPeers int

	// OriginK is Slurpie's k: about k peers of the swarm hold the origin at
	// any time (3).
	OriginK int
	// OriginHolder says the application chose this peer to fetch from the
	// origin, as a cluster push chooses its datacenters' representatives:
	// it holds every slice instead of drawing k/n for it, and keeps
	// OriginPipeline fetches in flight, whether or not its peers have
	// pieces for it (not OriginWindow's bytes: the holders are at the
	// origin all the time, together, and more would only queue there).
	// The origin's load is the application's choice.
	OriginHolder bool
	// OriginSlice is the length of one origin time slice, τ in Slurpie
	// (250 ms: a piece orphaned by a peer that left waits a slice or two
	// for a holder, not seconds).
	OriginSlice time.Duration
	// OriginPipeline is the least number of origin fetches kept in flight
	// while we hold a slice and the peers have nothing more for us (2).
	OriginPipeline int
	// OriginWindow is the bytes of origin fetches kept in flight while we
	// hold a slice and the peers have nothing more for us, when that is
	// more than OriginPipeline pieces (256 KiB): with small pieces, a
	// pipeline of whole pieces would leave the origin's link idle between
	// requests. While the peers still have pieces for us, half of it.
	OriginWindow int64
	// OriginBackoff is the first pause of origin use after an origin fetch
	// failed (refused, reset, timed out, 5xx: not a 503, which says how
	// long itself): every fetch that fails after the pause doubles it, up
	// to OriginBackoffMax, each pause drawn at random between half and
	// all of it, and while the origin fails one fetch at a time goes out
	// to try it. The first that succeeds ends the pauses (250 ms, 10 s).
	OriginBackoff, OriginBackoffMax time.Duration
	// StartTimeout is how long another peer's START claim keeps us off a
	// piece (10 s). Our own claims are re-announced every StartTimeout/2
	// while the fetch lasts.
	StartTimeout time.Duration
	// QuietRequests: announce START only for origin fetches, not when a
	// piece is first requested from a peer (false: announce both, which keeps
	// neighbours from fetching a piece from the origin that is already on
	// its way into the neighbourhood).
	QuietRequests bool
	// TrackerWait: if the tracker has not answered this long after Start,
	// act as if it had given nobody (3 s).
	TrackerWait time.Duration

	// UploadSlots is the number of regular unchoked peers (8).
	UploadSlots int
	// OptimisticSlots is the number of optimistic unchokes (2; negative: none).
	OptimisticSlots int
	// OptimisticInterval is how often the optimistic unchokes rotate (5 s).
	OptimisticInterval time.Duration
	// ChokeInterval is the reciprocation round (2 s).
	ChokeInterval time.Duration
	// RateWindow is the window over which transfer rates are ranked (20 s).
	RateWindow time.Duration
	// StrictTFT serves a peer only while what we sent it minus what it sent
	// us is below TFTTab, regardless of choking (Flashback). A complete peer
	// (seeding) falls back to the choking rules.
	StrictTFT bool
	// TFTTab is the tab a peer may run up under StrictTFT (2 pieces).
	TFTTab int64

	// RepairAfter: when no new piece arrived for this long while pieces are
	// missing, ask the tracker for fresh peers (5 s).
	RepairAfter time.Duration
	// RefillEvery is the least time between two "refill" tracker asks (5 s),
	// doubled after each refill that brought nobody to dial, up to 16 times.
	RefillEvery time.Duration
	// DialBackoff is the wait before redialing an address that failed,
	// doubled per failure up to 64× (5 s). A peer dropped for stalling or
	// for lying about its pieces counts as a failure too (and may not
	// dial us back before then), until it delivers a piece.
	DialBackoff time.Duration
	// PeerGrace protects a new connection from eviction for this long (10 s).
	PeerGrace time.Duration

	// RequestTimeout is the deadline of a request to a peer that has not
	// delivered yet while no peer has (10 s). Once a peer has delivered, its
	// deadline is eight times its expected piece time (latency plus the
	// transfer of the piece and of those queued ahead of it), at least
	// MinRequestTimeout and at most 8×RequestTimeout. A peer without samples
	// gets four times the median piece time of the peers that have (times
	// the queue ahead; the last median measured once they have left), at
	// least MinRequestTimeout and at most RequestTimeout.
	RequestTimeout time.Duration
	// MinRequestTimeout is the smallest request deadline (500 ms). At 1.5 s
	// a flash crowd of 50 took back fewer requests that were only queued at
	// their holder (181 against 601), but a deaf staller kept its three
	// strikes' requests three times as long: in node's TestStalledSeed the
	// median peer took 6.8 s against 2.3 s without the staller.
	MinRequestTimeout time.Duration
	// MaxDepth caps the per-peer request pipeline (16).
	MaxDepth int
	// EndgameMax is the most requests in flight for one piece in endgame,
	// the origin fetch included (2).
	EndgameMax int
	// Strikes: a peer is dropped after this many timeouts in a row, or this
	// many "dont-have" rejects of pieces it advertised (3).
	Strikes int
	// StallAfter: a piece peers have that has not arrived this long after we
	// first asked for it may be fetched from the origin (reason "stalled"),
	// one at a time and still only in a slice we hold (4×RequestTimeout).
	StallAfter time.Duration

	// SmallDeadline is the origin fallback of a small object (small.go):
	// the pieces still missing this long after Start are fetched from the
	// origin, all at once, whatever the draw and the origin's "in swarm"
	// answers (DefaultSmallDeadline; negative: a small object is
	// scheduled as any other file).
	SmallDeadline time.Duration

	// Seed seeds the scheduler's PCG: ties, the origin draw, eviction.
	Seed uint64
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.PieceLen == nil {
		c.PieceLen = func(int) int64 { return DefaultPieceLen }
	}
	def(&c.MinPeers, 4)
	def(&c.MaxPeers, 64)
	c.MaxPeers = max(c.MaxPeers, c.MinPeers)
	def(&c.WantPeers, min(24, c.MaxPeers))
	c.WantPeers = min(max(c.WantPeers, c.MinPeers), c.MaxPeers)
	def(&c.OriginK, DefaultOriginK)
	defD(&c.OriginSlice, 250*time.Millisecond)
	def(&c.OriginPipeline, 2)
	defD(&c.OriginBackoff, 250*time.Millisecond)
	defD(&c.OriginBackoffMax, 10*time.Second)
	c.OriginBackoffMax = max(c.OriginBackoffMax, c.OriginBackoff)
	if c.OriginWindow <= 0 {
		c.OriginWindow = 256 << 10
	}
	defD(&c.StartTimeout, 10*time.Second)
	defD(&c.TrackerWait, 3*time.Second)
	def(&c.UploadSlots, 8)
	switch {
	case c.OptimisticSlots == 0:
		c.OptimisticSlots = 2
	case c.OptimisticSlots < 0:
		c.OptimisticSlots = 0
	}
	defD(&c.OptimisticInterval, 5*time.Second)
	defD(&c.ChokeInterval, 2*time.Second)
	defD(&c.RateWindow, 20*time.Second)
	if c.TFTTab <= 0 {
		c.TFTTab = 2 * DefaultPieceLen
		if c.NumPieces > 0 {
			c.TFTTab = 2 * c.PieceLen(0)
		}
	}
	defD(&c.RepairAfter, 5*time.Second)
	defD(&c.RefillEvery, 5*time.Second)
	defD(&c.DialBackoff, 5*time.Second)
	defD(&c.PeerGrace, 10*time.Second)
	defD(&c.RequestTimeout, 10*time.Second)
	defD(&c.MinRequestTimeout, 500*time.Millisecond)
	def(&c.MaxDepth, 16)
	def(&c.EndgameMax, 2)
	def(&c.Strikes, 3)
	defD(&c.StallAfter, 4*c.RequestTimeout)
	if c.SmallDeadline == 0 {
		c.SmallDeadline = DefaultSmallDeadline
	}
	return c
}

// Stats are the scheduler's counters, named by outcome.
type Stats struct {
	Pieces, Have int
	Complete     bool
	Peers        int // connected now

	// OriginFetches counts FetchOrigin actions by reason.
	OriginFetches                        map[string]int
	OriginOK, OriginErrors, OriginBusy   int
	OriginBackoffs                       int // pauses of origin use after a failure (OriginBackoff)
	OriginInSwarm                        int // results saying the pieces were sent to others just now
	OriginPicked                         int // OK results that brought another candidate (OriginResult.Picked)
	OriginSlicesDrawn, OriginSlicesWon   int
	OriginSlicesUsed                     int // won slices in which we fetched
	Requests, Cancels, Timeouts, Rejects int
	Received, Duplicates, Unrequested    int // pieces from peers
	Corrupt                              int // pieces, and piece layers, that failed verification
	Served, Refused                      int // upload side
	BytesDown, BytesUp                   int64
	Dials, DialFailures, Evicted, Banned int
	TrackerAsks                          map[string]int
	Invalid                              int // events naming bad pieces or sets
	// Capacity is our upload capacity as the node last told it
	// (Capacity), bytes/s; 0 if never told.
	Capacity float64

	PerPeer []PeerStats // sorted by ID
}

// PeerStats describes one connected peer.
type PeerStats struct {
	ID                  PeerID
	Addr                string
	Down, Up            int64 // bytes received from / uploaded to it
	InFlight, Depth     int   // requests outstanding, pipeline size
	Rate                float64
	Latency             time.Duration
	Unchoked, UnchokeUs bool
}

// Scheduler is one peer's decision core for one file. It is not safe for
// concurrent use: one goroutine owns it.
type Scheduler struct {
	cfg    Config
	rng    *rand.Rand
	have   *pieceset.Set
	avgLen float64
	now    time.Time
	epoch  time.Time // New's now: claims count their time from it
	out    []Action

	started, completeSent bool
	layerPending          bool // Config.LayerPending until LayerReady
	small                 bool // the file is a small object (small.go)
	startAt, lastProgress time.Time

	pieces []pieceState
	peers  map[PeerID]*peer
	order  []*peer // connected peers by ID: decisions never range over maps

	addrs map[string]*addrInfo
	hosts map[string]*hostInfo // of the connected peers
	// credible is how many connected peers delivered a piece to us, at
	// most maxPerHost per host: the neighbours that count in swarmN.
	credible int
	capacity float64 // our upload capacity (Capacity), bytes/s, 0 if unknown
	// The origin's budget as it last said (OriginBudget): the bytes it
	// has left until budgetUntil (zero: it said nothing).
	budgetLeft  int64
	budgetUntil time.Time
	capBuf      []float64
	known       []string // candidate addresses, best first
	recent      []string // addresses recently traded with, most recent first
	dialing     int

	trackerAnswered           bool
	trackerAt                 time.Time // last TrackerPeers
	joined                    bool
	joinedAt                  time.Time // first TrackerPeers with an answer
	departed                  int       // peers that left (PeerDown.Left) since the last swarm size
	swarmSize                 int
	lastAsk, lastRepair       time.Time
	lastAskWhy                string
	emptyRefills              int // refills in a row that brought nobody to dial (askForPeers)
	nextChoke, nextOptimistic time.Time
	nextSlice, busyUntil      time.Time
	holding, sliceUsed        bool
	sliceOdds                 float64       // the last draw's odds (FetchOrigin)
	originReqs                []int         // origin fetches in flight
	originTime                time.Duration // smoothed time of our origin fetches
	originTimeAt              time.Time     // when originTime was last measured
	originMin                 time.Duration // our quickest origin fetch
	originFails               int           // origin failures in a row, one per pause (originFailed)
	originFailAt              time.Time     // when the last of them came
	originRetryAt             time.Time     // no origin fetch before
	originHeardAt             time.Time     // the origin's last answer (not a failure), or our start
	typical                   time.Duration // last median piece time of the delivering peers (typicalPieceTime)
	typicalAt                 time.Time     // when it was measured
	timeoutsAt                time.Time     // when checkTimeouts last ran
	stalledInUse              int
	gen                       int   // bumped when a piece becomes requestable again
	preferFrom, preferTo      int   // Prefer: [from, to) goes first
	lapsed                    []int // pieces whose fetches all ended this step
	candBuf                   []int // pickOrigin's sample, reused
	loneExtra                 int   // origin fetches that came back while we were alone (originPipeline)

	stats Stats
}

// pieceState is what the scheduler knows about one piece beyond have/not.
type pieceState struct {
	avail    int       // connected peers that have it
	reqs     int       // peer requests in flight
	origin   bool      // origin fetch in flight
	stalled  bool      // that origin fetch has reason "stalled"
	restart  bool      // was in flight and lost: finish it first
	firstReq time.Time // first time we asked anyone for it
	started  time.Time // when we last announced START for it
	retry    time.Time // no origin fetch before (after an origin error)
	failed   bool      // an origin fetch of ours failed (pickOrigin)
	inSwarm  time.Time // no origin fetch before, unless preferred (the origin said "in swarm")
	// leftToSwarm: the origin said "in swarm" of this piece of a small
	// object; the next fetch offers no candidates (small.go).
	leftToSwarm bool
	fetchAt     time.Time // when the origin fetch in flight started
	claims      []claim   // other peers' START claims
}

// claim is a START claim: 16 bytes, since a piece's list holds one for
// most neighbours in a crowd and every START and HAVE of the piece scans
// it (a fifth of the simulator's CPU at 300 peers; with 16 bytes rather
// than 32, flash50 at 200 peers took 6 % less).
type claim struct {
	peer  PeerID
	until time.Duration // since Scheduler.epoch
}

// New returns a scheduler for a file of cfg.NumPieces pieces of which we
// already have have (copied; nil, or a set of another length, counts as
// none). Nothing happens until Start.
func New(cfg Config, have *pieceset.Set, now time.Time) *Scheduler {
	cfg = cfg.withDefaults()
	n := max(cfg.NumPieces, 0)
	s := &Scheduler{
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5354414d50454445)),
		pieces: make([]pieceState, n),
		peers:  make(map[PeerID]*peer),
		addrs:  make(map[string]*addrInfo),
		hosts:  make(map[string]*hostInfo),
		now:    now,
		epoch:  now,
		gen:    1,

		originHeardAt: now,
		layerPending:  cfg.LayerPending,
	}
	if have != nil && have.Len() == n {
		s.have = have.Clone()
	} else {
		s.have = pieceset.New(n)
	}
	var total int64
	for i := range n {
		total += cfg.PieceLen(i)
	}
	s.avgLen = DefaultPieceLen
	if n > 0 && total > 0 {
		s.avgLen = float64(total) / float64(n)
	}
	s.small = cfg.smallObject(n, total)
	s.stats.OriginFetches = make(map[string]int)
	s.stats.TrackerAsks = make(map[string]int)
	return s
}

// Start returns the initial actions: AskTracker "join", and Complete at once
// if nothing is missing (an empty file or a finished resume).
func (s *Scheduler) Start(now time.Time) []Action {
	s.start(now)
	return s.flush()
}

func (s *Scheduler) start(now time.Time) {
	if s.started {
		return
	}
	s.started = true
	s.now, s.startAt, s.lastProgress = now, now, now
	s.nextChoke = now.Add(s.cfg.ChokeInterval)
	s.askTracker("join")
	s.checkComplete()
}

// DefaultOriginK is Config.OriginK's default.
const DefaultOriginK = 3

// Step applies one event that happened at now and returns what to do.
func (s *Scheduler) Step(ev Event, now time.Time) []Action {
	return s.StepAll([]Event{ev}, now)
}

// StepAll applies events that happened by now, in order, then decides once.
// A runtime that finds many events waiting (a burst of HAVE and START frames
// from a busy swarm) hands them over together: deciding after each would
// cost a pass over the pieces per event for nothing.
func (s *Scheduler) StepAll(evs []Event, now time.Time) []Action {
	s.start(now)
	if now.After(s.now) {
		s.now = now
	}
	tick := false
	for _, ev := range evs {
		if _, ok := ev.(Tick); ok {
			tick = true
		}
		s.apply(ev)
	}
	s.schedule()
	if tick {
		s.reannounce()
	}
	s.withdraw()
	return s.flush()
}

// apply updates the state for one event.
func (s *Scheduler) apply(ev Event) {
	switch e := ev.(type) {
	case Tick:
	case PeerUp:
		s.onPeerUp(e)
	case PeerDown:
		s.onPeerDown(e)
	case HaveSet:
		s.onHaveSet(e)
	case Have:
		s.onHave(e)
	case Started:
		s.onStarted(e)
	case Stopped:
		if p := s.peers[e.Peer]; p != nil && s.valid(e.Piece) {
			s.unclaim(p.id, e.Piece)
		}
	case Choked:
		s.onChoked(e)
	case Unchoked:
		if p := s.peers[e.Peer]; p != nil {
			p.unchokedUs = true
		}
	case Received:
		s.onReceived(e)
	case Corrupt:
		s.onCorrupt(e)
	case Rejected:
		s.onRejected(e)
	case OriginResult:
		s.onOriginResult(e)
	case PeerRequest:
		s.onPeerRequest(e)
	case Uploaded:
		s.onUploaded(e)
	case PathRTT:
		if p := s.peers[e.Peer]; p != nil && e.RTT > 0 {
			p.pathRTT = e.RTT
		}
	case Capacity:
		s.capacity = max(e.Up, 0)
	case OriginBudget:
		s.budgetLeft, s.budgetUntil = max(e.Left, 0), s.now.Add(max(e.Reset, 0))
	case PeerCapacity:
		if p := s.peers[e.Peer]; p != nil {
			p.capacity = max(e.Up, 0)
		}
	case Unserved:
		if p := s.peers[e.Peer]; p != nil && s.valid(e.Piece) {
			p.served -= s.pieceLen(e.Piece)
			s.stats.Served--
			s.stats.Refused++
		}
	case Recommended:
		if p := s.peers[e.Peer]; p != nil {
			s.learn(e.Addrs, true)
		}
	case TrackerPeers:
		if !s.joined && (e.SwarmSize > 0 || len(e.Addrs) > 0) {
			// The first real answer (a failed announce is an empty one).
			s.joined, s.joinedAt = true, s.now
		}
		s.trackerAnswered, s.trackerAt = true, s.now
		if e.SwarmSize > 0 { // 0: no estimate (a failed announce); keep ours
			s.swarmSize, s.departed = e.SwarmSize, 0
		}
		s.learn(e.Addrs, false)
		if s.lastAskWhy == "refill" && e.SwarmSize > 0 {
			// The answer to our refill (answers to other asks, and
			// failed announces, say nothing about refills).
			s.lastAskWhy = ""
			if slices.ContainsFunc(s.known, s.dialable) {
				s.emptyRefills = 0
			} else {
				s.emptyRefills = min(s.emptyRefills+1, maxRefillBackoff)
			}
		}
	case DialFailed:
		s.onDialFailed(e)
	case Learned:
		s.learn(e.Addrs, false)
	case LayerReady:
		s.layerPending = false
		s.gen++ // every peer's pick runs again
	case Prefer:
		// [From, From+Count) within [0, n), without overflow.
		n := len(s.pieces)
		from, to := e.From, n
		if e.Count <= 0 || from >= n {
			from, to = 0, 0
		} else if e.Count < n-from {
			to = from + e.Count
		}
		s.preferFrom, s.preferTo = max(from, 0), max(to, 0)
		s.gen++
	}
}

// schedule makes the time- and state-driven decisions after every event.
func (s *Scheduler) schedule() {
	if s.now.Sub(s.timeoutsAt) >= timeoutsEvery {
		s.timeoutsAt = s.now
		s.checkTimeouts()
	}
	s.managePeers()
	s.reciprocate()
	if !s.layerPending {
		s.fillRequests()
		s.useOrigin()
	}
	s.askForPeers()
}

// withdraw sends STOP for the pieces we announced START for whose fetches
// all ended in this step without the piece, unless this step's decisions
// fetch them again, from the origin or a peer that may claim (mayClaim):
// others would otherwise stay off the origin for them until our claim
// expired (StartTimeout).
func (s *Scheduler) withdraw() {
	for _, i := range s.lapsed {
		ps := &s.pieces[i]
		if (ps.reqs > 0 && s.askedOfClaimant(i)) || ps.origin || s.have.Has(i) || ps.started.IsZero() || s.now.Sub(ps.started) >= s.cfg.StartTimeout {
			continue
		}
		ps.started = time.Time{}
		s.emit(AnnounceStop{Piece: i})
	}
	s.lapsed = s.lapsed[:0]
}

// askedOfClaimant reports whether piece i is requested of a peer that may
// claim it (mayClaim).
func (s *Scheduler) askedOfClaimant(i int) bool {
	for _, p := range s.order {
		if p.findReq(i) >= 0 && s.mayClaim(p) {
			return true
		}
	}
	return false
}

func (s *Scheduler) emit(a Action) { s.out = append(s.out, a) }

func (s *Scheduler) flush() []Action {
	out := s.out
	s.out = nil
	return out
}

// Have returns the pieces we have (a copy).
func (s *Scheduler) Have() *pieceset.Set { return s.have.Clone() }

// Complete reports whether every piece is in.
func (s *Scheduler) Complete() bool { return s.have.Complete() }

// HaveCount reports how many pieces we have.
func (s *Scheduler) HaveCount() int { return s.have.Count() }

// Holders reports how many connected peers have piece i, by the have-sets
// and HAVEs they sent (0 for an index out of range): the count rarest-first
// picks by, which a node also uses to order its uploads.
func (s *Scheduler) Holders(i int) int {
	if !s.valid(i) {
		return 0
	}
	return s.pieces[i].avail
}

// piecesOf is how many pieces p has, by the have-set and HAVEs it sent but
// at least the pieces we sent it, so that one hiding its HAVEs cannot look
// poorer than it is (catchUp).
func (s *Scheduler) piecesOf(p *peer) int {
	return max(p.has.Count(), int(float64(p.upTotal)/s.avgLen))
}

// Wanted reports whether a connected peer lacks a piece we have (by the
// have-sets it sent): what a peer leaving at once hands over first.
func (s *Scheduler) Wanted() bool {
	return slices.ContainsFunc(s.order, func(p *peer) bool { return p.wants > 0 })
}

// Lacks reports whether the connected peer id lacks a piece we have, by
// the have-sets it sent: one of those Wanted waits for (false for a peer
// not connected).
func (s *Scheduler) Lacks(id PeerID) bool {
	p := s.peers[id]
	return p != nil && p.wants > 0
}

// HaveCanWait reports whether our HAVE of piece i may wait before it goes
// to the connected peer id: by the have-set it sent, it still has pieces we
// lack, and it has piece i or we are choking it (under strict tit-for-tat
// every interested peer is unchoked in the step that makes it interested,
// so this never holds a HAVE there). What it decides about a piece it
// has does not depend on whether we have it; a peer we choke cannot fetch
// the piece from us until we unchoke it, and the node sends the HAVEs held
// back before the UNCHOKE; and what it decides about us (are we interested
// in it: its unchoke slots, its hand-over before leaving) does not change
// while it has more for us. The HAVE after which it has nothing more for
// us goes at once (and the node sends the ones held back with it), or it
// would keep an unchoke slot for us that others could use; so does the
// HAVE that completes us.
//
// In a crowd most neighbours are choked (UploadSlots and OptimisticSlots
// of them are not), so most HAVEs can wait. In five pairs of flash50 runs
// on the testbed, whose two cores the run saturates, holding back those to
// choked peers too (with two cuts in CPU use made with it: timeoutsEvery,
// and pieceBuf for uploads) brought the mean completion 0.9 s sooner on
// average, in four pairs of the five, and the last peer as much.
func (s *Scheduler) HaveCanWait(id PeerID, i int) bool {
	p := s.peers[id]
	return p != nil && !s.small && s.valid(i) && p.offers > 0 && (p.has.Has(i) || p.amChoking)
}

// StartTo says whether our START or STOP of piece i goes to the connected
// peer id, and whether it may wait like a HAVE (HaveCanWait). A claim only
// matters to a peer that may fetch the piece: one that has it, by the
// have-set it sent, hears neither. The START of an origin fetch goes at
// once, since it is what keeps the neighbours off the origin for that
// piece. That of a request to a peer may wait, to go out with the HAVEs
// held back, in a swarm of at least startWaitN×k: the piece is coming
// from the swarm, and a neighbour goes to the origin for it meanwhile
// only if it wins a draw of k/n (1 in 10 a slice or less) and none of
// its own neighbours has or claims it. Each START for a request cost a
// frame to every neighbour, most in a packet of their own: in flash50
// runs on the testbed a peer's uplink carried about 290 small data
// segments a second besides its pieces, and with those STARTs held the
// last peer came 1.3 s sooner (docs/benchmarks.md, eighth pass). In a
// small swarm the draw is likely: with STARTs held in the staggered
// scenario the origin sent 2.71-3.28 F (5 runs) against 2.40-2.65 F (7
// runs) without, though that scenario spreads widely from run to run.
func (s *Scheduler) StartTo(id PeerID, i int) (send, wait bool) {
	p := s.peers[id]
	if p == nil || !s.valid(i) {
		return true, false
	}
	if p.has.Has(i) {
		return false, false
	}
	// A renewal (StartTimeout/2 after the first request) goes at once: the
	// START it renews went out, and a STOP would be dropped with a held
	// renewal, leaving that START to hold until it expires.
	ps := &s.pieces[i]
	young := s.now.Sub(ps.firstReq) < s.cfg.StartTimeout/2
	return true, !ps.origin && !s.small && young && s.swarmN() >= startWaitN*s.cfg.OriginK
}

// startWaitN: a START for a request may wait in a swarm of at least
// startWaitN×k peers (StartTo).
const startWaitN = 10

// Config returns the configuration in use, defaults filled in.
func (s *Scheduler) Config() Config { return s.cfg }

// Stats returns a snapshot of the counters.
func (s *Scheduler) Stats() Stats {
	st := s.stats
	st.Pieces, st.Have, st.Complete = s.have.Len(), s.have.Count(), s.have.Complete()
	st.Peers = len(s.order)
	st.Capacity = s.capacity
	st.OriginFetches = cloneMap(s.stats.OriginFetches)
	st.TrackerAsks = cloneMap(s.stats.TrackerAsks)
	st.PerPeer = nil
	for _, p := range s.order {
		st.PerPeer = append(st.PerPeer, PeerStats{
			ID: p.id, Addr: p.addr, Down: p.downTotal, Up: p.upTotal,
			InFlight: len(p.reqs), Depth: s.depth(p), Rate: p.rate, Latency: p.lat,
			Unchoked: !p.amChoking, UnchokeUs: p.unchokedUs,
		})
	}
	return st
}

func cloneMap(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (s *Scheduler) valid(i int) bool { return i >= 0 && i < len(s.pieces) }

// preferred reports whether piece i is in the Prefer range.
func (s *Scheduler) preferred(i int) bool { return i >= s.preferFrom && i < s.preferTo }

func (s *Scheduler) pieceLen(i int) int64 { return s.cfg.PieceLen(i) }

// addPiece records a stored piece: announce it, cancel duplicates in flight,
// update interest, and complete when it was the last.
func (s *Scheduler) addPiece(i int) {
	if !s.have.Add(i) {
		return
	}
	s.lastProgress = s.now
	ps := &s.pieces[i]
	ps.restart, ps.claims = false, nil
	s.emit(Announce{Piece: i})
	for _, p := range s.order {
		if k := p.findReq(i); k >= 0 {
			s.emit(Cancel{Peer: p.id, Piece: i})
			s.stats.Cancels++
			s.dropReq(p, k)
		}
		if p.has.Has(i) {
			p.offers--
		} else {
			p.wants++
		}
	}
	s.checkComplete()
}

func (s *Scheduler) checkComplete() {
	if s.have.Complete() && !s.completeSent {
		s.completeSent = true
		s.emit(Complete{})
	}
}

func byID(p *peer, id PeerID) int { return cmp.Compare(p.id, id) }
