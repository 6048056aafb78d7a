// Package sim is a discrete-event simulator of a stampede swarm: it answers
// "what happens with 10^4 or 10^5 peers" before anyone runs that many.
//
// It drives the real code, not a model of it: every peer is a
// swarm.Scheduler, fed the events package node would feed it and carrying
// out its actions as node does (node/apply.go): requests, upload queues and
// upload turns (node/uploads.go, node/turns.go), lazy HAVEs and START
// claims, choking, dials, goodbyes, the hand-over before leaving; its
// uplink pacer is package uplink's Estimator (pace.go). The
// tracker is tracker.Tracker over a tracker.MemoryStore, the code "stampede
// serve" runs, with the simulated clock. The origin is emulated after
// package origin: piece picks among a fetch's candidates and "in swarm"
// answers (origin/pick.go), the egress budget (origin/budget.go), three
// paced answers at a time with a bounded queue (origin/pace.go).
//
// What is simulated is the network: hosts with an upload and a download
// capacity, behind chains of shared links (racks, datacenters), each link
// with a latency; piece transfers are fluid flows sharing every link
// max-min fairly (net.go), recomputed when a flow starts or ends; control
// messages take the path's latency (and, with Config.Queue, the queues of
// its saturated links) and no capacity. Time jumps from event
// to event (an event heap), so a second of a quiet swarm costs nothing and
// a busy one costs what its peers decide.
//
// A run is deterministic for a Config, Seed included, given a tracker
// store that is: the default, a tracker.MemoryStore seeded from Seed, is.
// Config.Tracker takes another store.
//
// docs/sim.md says how to run it, what it leaves out and what it measured.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/stampede-dev/stampede/bench"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
)

// Config describes one simulated run. Zero fields take the documented
// defaults.
type Config struct {
	// Size is the file's size in bytes; PieceSize the size of its pieces
	// (default manifest.PieceSizeFor(Size), as stampede serve picks).
	Size, PieceSize int64
	// OriginUp caps the origin's upload in bytes/s (0: uncapped);
	// OriginGroup names the group it sits behind ("": on the core). The
	// tracker runs on the origin's host, as in stampede serve.
	OriginUp    int64
	OriginGroup string
	// Groups are the shared links: each group's hosts and groups reach the
	// rest of the network through its link.
	Groups []Group
	// Peers are the crowd.
	Peers []Peer
	// Linger is how long a peer serves after completing; 0 leaves at once,
	// after the hand-over, as stampede get without --seed-time.
	Linger time.Duration
	// Kills take peers down without a goodbye.
	Kills []Kill
	// Latency is the one-way latency of each host's own link, the origin's
	// included (default DefaultLatency; negative: none); a group's link
	// has its own.
	Latency time.Duration
	// Queue is the bytes a saturated link's bottleneck buffer holds: what
	// crosses the link waits behind them, control frames included (0:
	// none; see docs/sim.md).
	Queue int64
	// NoPacing: the peers upload as fast as their uplinks take, as
	// stampede get --no-pacing. By default each paces its uploads as
	// package node does (the uplink pacer, see pace.go).
	NoPacing bool
	// StepTime is how long one pass of a peer's loop takes: events that
	// reach a peer while it is busy are handed to its scheduler together
	// in its next pass, as node.Run batches what waits in its channel.
	// The scheduler's passes are most of a run's cost, and a peer's
	// events come every few milliseconds, so this sets the price of a run
	// (docs/sim.md has the figures). Default: DefaultStepTime, or a
	// hundredth of the crowd's T_KR if that is less; negative: none,
	// every instant's events in a pass of their own.
	StepTime time.Duration
	// Swarm is every peer's scheduler configuration; NumPieces, PieceLen
	// and Seed are set per peer.
	Swarm swarm.Config
	// Tracker keeps the tracker's swarms (default: a tracker.MemoryStore
	// with the default limits, its draws seeded from Seed).
	Tracker tracker.Store
	// ResendAfter is the origin's (origin.Config.ResendAfter; default
	// origin.DefaultResendAfter, 3 s; negative: none).
	ResendAfter time.Duration
	// MaxCopies and BudgetWindow are the origin's egress budget
	// (origin.Config.MaxCopies, BudgetWindow; defaults 1.5 copies per
	// 5 minutes; MaxCopies negative: no budget).
	MaxCopies    float64
	BudgetWindow time.Duration
	// Seed seeds the simulation: peer seeds, tick phases, kills.
	Seed uint64
	// MaxTime ends the run after this much simulated time, complete or not
	// (default 1 hour).
	MaxTime time.Duration
	// Push, if set, makes the run a cluster push (push.go): every peer
	// seeds on once complete, whatever Linger says.
	Push *Push
	// Progress, if set, is called every simulated second.
	Progress func(Progress)
}

// Group is a rack, a datacenter: a shared link between the hosts and
// groups behind it and the rest of the network.
type Group struct {
	Name string
	// Parent names the group this one sits in ("": the core); it must
	// come before this one in Config.Groups.
	Parent string
	// Up and Down cap the traffic leaving and entering the group, bytes/s
	// (0: uncapped).
	Up, Down int64
	// Latency is the link's one-way latency.
	Latency time.Duration
}

// Peer is one peer of the crowd.
type Peer struct {
	Class string
	// Arrive is when it joins, from the start of the run.
	Arrive time.Duration
	// Up and Down cap its host's link, bytes/s (0: uncapped).
	Up, Down int64
	// Group names its group ("": the core).
	Group string
}

// Kill takes Count peers down At, chosen at random among those running
// and not complete, without a goodbye: their neighbours see the
// connections reset.
type Kill struct {
	At    time.Duration
	Count int
}

// Defaults.
const (
	// DefaultLatency: 5 ms each way on every host's link, so 20 ms of
	// round trip between two peers.
	DefaultLatency = 5 * time.Millisecond
	// DefaultStepTime is the longest default StepTime. With it the
	// crowds of bench's flash scenarios finish within 1% of where they do
	// with passes of 1 ms, for a third of the cost.
	DefaultStepTime = 20 * time.Millisecond
	// DefaultResendAfter, DefaultMaxCopies and DefaultBudgetWindow are
	// origin's.
	DefaultResendAfter  = 3 * time.Second
	DefaultMaxCopies    = 0 // no budget
	DefaultBudgetWindow = 5 * time.Minute
	defaultMaxTime      = time.Hour
)

// Progress is a snapshot of a run, for a progress line.
type Progress struct {
	SimTime                    time.Duration
	Arrived, Finished, Running int
	Peers                      int
	OriginCopies               float64
	Wall                       time.Duration
}

// t0 is the simulated clock's origin: any fixed instant, so runs repeat.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Sim is one run. It is not safe for concurrent use.
type Sim struct {
	cfg    Config
	rng    *rand.Rand
	now    time.Duration
	events eventHeap
	seq    uint64
	net    network

	pieces   int
	pieceLen func(int) int64
	root     manifest.Hash

	origin  *origin
	tracker *trackerSim
	groups  map[string]*Site
	push    *pushSim
	nodes   []*node
	byAddr  map[netip.AddrPort]*node
	dirty   []*end  // ends with frames written by the event being handled
	bufs    [][]msg // frame buffers delivered, for reuse

	arrived, finished, killed, running int
	lastArrival                        time.Duration
	stats                              counters
	wallStart                          time.Time

	// Per class, for the result's ClassResult: bytes uploaded to each
	// class, and the share of the file held every classSampleEvery
	// samples.
	upTo    map[string]map[string]int64
	have    map[string][]float64
	sampled int
}

// classSampleEvery is how many 1 s samples apart ClassResult.Have's are.
const classSampleEvery = 10

// flowTo counts n bytes a peer of class from uploaded to one of class to.
func (s *Sim) flowTo(from, to string, n int64) {
	if s.upTo == nil {
		s.upTo = map[string]map[string]int64{}
	}
	if s.upTo[from] == nil {
		s.upTo[from] = map[string]int64{}
	}
	s.upTo[from][to] += n
}

// sampleClasses appends each class's mean share of the file held to
// s.have.
func (s *Sim) sampleClasses() {
	sum, count := map[string]float64{}, map[string]int{}
	var names []string
	for _, n := range s.nodes {
		if _, ok := count[n.class]; !ok {
			names = append(names, n.class)
		}
		count[n.class]++
		switch {
		case n.complete:
			sum[n.class]++
		case n.state != waiting:
			sum[n.class] += float64(n.have.Count()) / float64(s.pieces)
		}
	}
	if s.have == nil {
		s.have = map[string][]float64{}
	}
	for _, c := range names {
		s.have[c] = append(s.have[c], math.Round(1000*sum[c]/float64(count[c]))/1000)
	}
}

// New checks cfg and prepares a run.
func New(cfg Config) (*Sim, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.PieceSize <= 0 {
		cfg.PieceSize = manifest.PieceSizeFor(cfg.Size)
	}
	switch {
	case cfg.Latency == 0:
		cfg.Latency = DefaultLatency
	case cfg.Latency < 0:
		cfg.Latency = 0
	}
	switch {
	case cfg.StepTime == 0:
		// Short against the whole download: a crowd that takes a second
		// (a small file) must not wait 20 ms at every step.
		crowd := bench.Crowd{Size: cfg.Size, OriginUp: float64(cfg.OriginUp)}
		for _, p := range cfg.Peers {
			crowd.Up, crowd.Down = append(crowd.Up, float64(p.Up)), append(crowd.Down, float64(p.Down))
		}
		cfg.StepTime = min(DefaultStepTime, time.Duration(crowd.TKR()/100*float64(time.Second)))
	case cfg.StepTime < 0:
		cfg.StepTime = 0
	}
	switch {
	case cfg.ResendAfter == 0:
		cfg.ResendAfter = DefaultResendAfter
	case cfg.ResendAfter < 0:
		cfg.ResendAfter = 0
	}
	switch {
	case cfg.MaxCopies == 0:
		cfg.MaxCopies = DefaultMaxCopies
	}
	switch {
	case cfg.MaxCopies < 0:
		cfg.MaxCopies = 0
	}
	if cfg.BudgetWindow <= 0 {
		cfg.BudgetWindow = DefaultBudgetWindow
	}
	if cfg.MaxTime <= 0 {
		cfg.MaxTime = defaultMaxTime
	}
	if cfg.Push != nil {
		cfg.Linger = cfg.MaxTime // the agents seed until the request expires
	}
	s := &Sim{
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x73696d756c61746f)),
		byAddr: make(map[netip.AddrPort]*node, len(cfg.Peers)),
	}
	s.pieces = int((cfg.Size + cfg.PieceSize - 1) / cfg.PieceSize)
	size, ps := cfg.Size, cfg.PieceSize
	s.pieceLen = func(i int) int64 { return min(ps, size-int64(i)*ps) }
	// The file's identity only names the swarm at the tracker.
	s.root = simRoot

	groups := map[string]*Site{}
	s.groups = groups
	for _, g := range cfg.Groups {
		groups[g.Name] = newSite(groups[g.Parent], payload(g.Up), payload(g.Down), g.Latency)
	}
	s.origin = newOrigin(s, newSite(groups[cfg.OriginGroup], payload(cfg.OriginUp), 0, cfg.Latency))
	s.tracker = newTrackerSim(s)
	for i, p := range cfg.Peers {
		n := newNode(s, i, p, newSite(groups[p.Group], payload(p.Up), payload(p.Down), cfg.Latency))
		s.nodes = append(s.nodes, n)
		s.byAddr[n.ap] = n
	}
	if cfg.Push != nil {
		ps, err := newPushSim(s, cfg.Push)
		if err != nil {
			return nil, err
		}
		s.push = ps
	}
	return s, nil
}

// simRoot is the file's identity: it only names the swarm at the tracker
// (and seeds a push's plan).
var simRoot = manifest.Hash{'s', 'i', 'm'}

func (cfg *Config) check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if cfg.Size <= 0 {
		bad("size must be positive")
	}
	if cfg.PieceSize < 0 {
		bad("piece size must not be negative")
	}
	if cfg.OriginUp < 0 || cfg.Queue < 0 {
		bad("origin up and queue must not be negative")
	}
	if len(cfg.Peers) == 0 {
		bad("no peers")
	}
	if len(cfg.Peers) > maxPeers {
		bad("%d peers: at most %d (the simulated addresses run out)", len(cfg.Peers), maxPeers)
	}
	known := map[string]bool{"": true}
	group := func(what, name string) {
		if !known[name] {
			bad("%s: no group %q before it", what, name)
		}
	}
	for _, g := range cfg.Groups {
		group("group "+g.Name, g.Parent)
		if g.Name == "" || known[g.Name] {
			bad("group %q: a group needs a name of its own", g.Name)
		}
		known[g.Name] = true
		if g.Up < 0 || g.Down < 0 || g.Latency < 0 {
			bad("group %s: caps and latency must not be negative", g.Name)
		}
	}
	group("origin", cfg.OriginGroup)
	for i, p := range cfg.Peers {
		if p.Up < 0 || p.Down < 0 || p.Arrive < 0 {
			bad("peer %d: caps and arrival must not be negative", i)
		}
		group(fmt.Sprintf("peer %d", i), p.Group)
	}
	for _, k := range cfg.Kills {
		if k.Count < 0 || k.At < 0 {
			bad("kill %d at %v: count and time must not be negative", k.Count, k.At)
		}
	}
	if cfg.Linger < 0 {
		bad("linger must not be negative")
	}
	if cfg.MaxCopies > 0 && cfg.MaxCopies < 1 || math.IsNaN(cfg.MaxCopies) {
		bad("max copies %v: a budget must let at least one copy through per window (negative: no budget)", cfg.MaxCopies)
	}
	return errors.Join(errs...)
}

// maxPeers: the peers' addresses are 10.0.0.1 up, one /8.
const maxPeers = 1<<24 - 2

// A link's rate counts whole frames, and TCP's payload is what is left of
// a full-sized one: 1448 bytes of a 1514-byte Ethernet frame (a 1500-byte
// MTU, less the IP and TCP headers and TCP's timestamps, the Linux
// default; tc's token bucket on the testbed counts the Ethernet header
// too). The simulated flows carry payload, so a link of rate r carries
// them at payload(r): 95.6 % of it.
const (
	framePayload = 1448
	frameSize    = 1514
)

// payload is what a link of r bytes/s carries of TCP payload (0: uncapped).
func payload(r int64) int64 { return r * framePayload / frameSize }

// core is the root every site hangs from.
var core = &Site{}

func newSite(parent *Site, up, down int64, lat time.Duration) *Site {
	if parent == nil {
		parent = core
	}
	s := &Site{parent: parent, lat: lat, depth: parent.depth + 1}
	if up > 0 {
		s.up = &link{cap: float64(up), share: math.Inf(1)}
	}
	if down > 0 {
		s.down = &link{cap: float64(down), share: math.Inf(1)}
	}
	return s
}

// Run simulates until every peer that arrives has completed (or was
// killed), Config.MaxTime passes, or ctx ends (its error is returned with
// the result so far).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return s.Run(ctx)
}

// Run runs s; see the function Run.
func (s *Sim) Run(ctx context.Context) (*Result, error) {
	s.wallStart = time.Now()
	for _, n := range s.nodes {
		s.lastArrival = max(s.lastArrival, n.arrive)
		s.at(n.arrive, event{kind: evArrive, n: n})
	}
	for _, k := range s.cfg.Kills {
		s.at(k.At, event{kind: evKill, i: k.Count})
	}
	s.at(time.Second, event{kind: evSample})
	var err error
	timedOut := false
	for {
		if s.done() {
			break
		}
		ev, ok := s.next()
		if !ok {
			break
		}
		if s.now > s.cfg.MaxTime {
			timedOut = true
			break
		}
		s.stats.events++
		if ev.kind == evSample {
			if err = ctx.Err(); err != nil {
				break
			}
		}
		s.handle(ev)
		s.flushFrames()
	}
	return s.result(timedOut), err
}

// done reports whether every peer has arrived and finished or been killed.
func (s *Sim) done() bool {
	return s.arrived == len(s.nodes) && s.finished+s.killed == s.arrived
}

// next pops the next event, a flow's end if that comes first, and moves
// the clock to it.
func (s *Sim) next() (event, bool) {
	f := s.net.next()
	if f != nil && (len(s.events) == 0 || f.end <= s.events[0].at) {
		s.now = max(s.now, f.end)
		return event{kind: evFlowEnd, x: f}, true
	}
	if len(s.events) == 0 {
		return event{}, false
	}
	ev := s.events.pop()
	s.now = max(s.now, ev.at)
	return ev, true
}

// transit is how long a message from a to b takes now: the latency of
// the path and the queues of its saturated links.
func (s *Sim) transit(a, b *Site) time.Duration {
	return latency(a, b) + queued(a, b, float64(s.cfg.Queue), s.now)
}

// clock is the simulated time as the scheduler sees it.
func (s *Sim) clock() time.Time { return t0.Add(s.now) }

// at schedules ev at t.
func (s *Sim) at(t time.Duration, ev event) {
	ev.at = max(t, s.now)
	s.seq++
	ev.seq = s.seq
	s.events.push(ev)
}

// after schedules ev d from now.
func (s *Sim) after(d time.Duration, ev event) { s.at(s.now+d, ev) }

func (s *Sim) handle(ev event) {
	switch ev.kind {
	case evFlowEnd:
		f := ev.x.(*flow)
		s.net.stop(f, s.now)
		f.done(f)
	case evArrive:
		s.arrive(ev.n)
	case evWake:
		ev.n.wake()
	case evTick:
		ev.n.tick()
	case evAnnounce:
		ev.n.periodicAnnounce()
	case evDeliver:
		ev.e.deliver()
	case evDial:
		ev.n.dialed(ev.x.(*dialing))
	case evTurnFree:
		ev.e.turnFree(ev.i)
	case evTurnSlow:
		ev.e.turnSlow(ev.i)
	case evPieceIn:
		ev.e.pieceIn(ev.i)
	case evLeave:
		if ev.n.state == running {
			ev.n.leave()
		}
	case evKill:
		s.kill(ev.i)
	case evSample:
		s.sample()
		s.after(time.Second, event{kind: evSample})
	case evTrackerReq:
		s.tracker.request(ev.x.(*announce))
	case evTrackerAns:
		if ev.n.state == running {
			ev.n.post(ev.x.(swarm.TrackerPeers))
		}
	case evOriginReq:
		s.origin.request(ev.x.(*fetch))
	case evOriginAns:
		s.origin.answered(ev.x.(*fetch))
	case evPaceDeadline:
		s.origin.deadline(ev.x.(*fetch), ev.i)
	case evPaceHold:
		s.origin.holdOver(ev.x.(*fetch), ev.i)
	}
}

// arrive starts peer n.
func (s *Sim) arrive(n *node) {
	s.arrived++
	s.running++
	n.start()
}

// kill takes count running, incomplete peers down at random.
func (s *Sim) kill(count int) {
	var live []*node
	for _, n := range s.nodes {
		if n.state == running && !n.complete {
			live = append(live, n)
		}
	}
	for range min(count, len(live)) {
		k := s.rng.IntN(len(live))
		live[k].die()
		live = slices.Delete(live, k, k+1)
	}
}

// sample runs every simulated second: the tracker's state and progress.
func (s *Sim) sample() {
	s.tracker.sample()
	if s.sampled++; s.sampled%classSampleEvery == 0 {
		s.sampleClasses()
	}
	if s.cfg.Progress != nil {
		s.cfg.Progress(Progress{
			SimTime: s.now, Arrived: s.arrived, Finished: s.finished, Running: s.running, Peers: len(s.nodes),
			OriginCopies: s.origin.bytes / float64(s.cfg.Size), Wall: time.Since(s.wallStart),
		})
	}
}

// flushFrames sends the frames written while handling an event: those
// written to one peer together go as one delivery, as one write would.
func (s *Sim) flushFrames() {
	for _, e := range s.dirty {
		e.flush()
	}
	s.dirty = s.dirty[:0]
}

// Event kinds.
type evKind uint8

const (
	evFlowEnd evKind = iota
	evArrive
	evWake
	evTick
	evAnnounce
	evDeliver
	evDial
	evTurnFree
	evTurnSlow
	evPieceIn
	evLeave
	evKill
	evSample
	evTrackerReq
	evTrackerAns
	evOriginReq
	evOriginAns
	evPaceDeadline
	evPaceHold
)

// event is something that happens at a time; among equal times, in the
// order they were scheduled.
type event struct {
	at   time.Duration
	seq  uint64
	kind evKind
	i    int
	n    *node
	e    *end
	x    any
}

// eventHeap is a binary heap of events by (at, seq).
type eventHeap []event

func (h eventHeap) less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}

func (h *eventHeap) push(ev event) {
	*h = append(*h, ev)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a.less(i, p) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a[last] = event{}
	a = a[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(a) && a.less(l, m) {
			m = l
		}
		if r < len(a) && a.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}
