package sim

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/stampede-dev/stampede/internal/uplink"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
)

// A peer as package node runs it, over the simulated network. The
// constants are node's (their comments there say why they are what they
// are); a change there is to be made here too.
const (
	tickEvery     = 200 * time.Millisecond // node.tickEvery
	lazyHaveDelay = time.Second            // node.lazyHaveDelay
	maxLazy       = 64                     // node.maxLazy
	maxBatch      = 256                    // node.maxBatch
	uploadQueue   = 16                     // node.uploadQueue: per connection
	uploadTurns   = 3                      // node.defaultUploadTurns
	uploadRanks   = 3                      // node.uploadRanks
	rankAge       = time.Second            // node.rankAge
	turnLowat     = 16 << 10               // node.turnLowat
	turnSlow      = 1.25                   // node.turnSlow
	turnSlowMin   = 50 * time.Millisecond  // node.turnSlowMin
	maxLateKept   = 4                      // node.maxLateKept

	uploadQueueTime  = 500 * time.Millisecond // node.uploadQueueTime
	minUploadsQueued = 8                      // node.minUploadsQueued
	rampPieces       = 32                     // node.rampPieces
	rampQueueTime    = 300 * time.Millisecond // node.rampQueueTime
	rampMinQueued    = 4                      // node.rampMinQueued
	handOverQuiet    = time.Second            // node.handOverQuiet
	handOverMax      = 2 * time.Second        // node.handOverMax
	announceEnough   = 8                      // node.announceEnough
	capacityEvery    = time.Second            // node.capacityEvery
	capacityDecay    = 0.95                   // node.capacityDecay
	capacityChange   = 0.25                   // node.capacityChange
	minCapacity      = 1 << 10                // node.minCapacity
	peerPort         = 7000
)

// node states.
const (
	waiting = iota // not arrived yet
	running
	gone // left or killed
)

// node is one peer: its scheduler and what node.Node keeps around it.
type node struct {
	s      *Sim
	idx    int
	class  string
	site   *Site
	ap     netip.AddrPort
	addr   string // ap as the scheduler and the tracker spell it
	host   string // its IP
	tid    tracker.PeerID
	arrive time.Duration
	state  int
	sched  *swarm.Scheduler
	have   *pieceset.Set // what its store holds

	ends   []*end // connected peers, by id
	byID   []*end // by id: ids count up from 1
	conns  map[*node]*end
	nextID swarm.PeerID

	inbox, spare []swarm.Event
	woken        bool          // a pass is scheduled
	busyUntil    time.Duration // the current pass ends (Config.StepTime)

	// Uploads: turns (node/turns.go), the pieces queued on all
	// connections, the heads from their turn wait to their release.
	turnsFree         int
	waiters           []*end
	queued, uploading int
	ownQueued         int     // queued on own-budget connections (end.own), outside the bound
	upBytes           float64 // bytes of the uploads finished
	upRate, upLast    float64 // node.measureUpload's
	upAt              time.Duration
	upMeasured        bool
	// node.measureCapacity's: the bytes delivered at the last reading,
	// when, the estimate, and the estimate last told (RATE).
	capDelivered       float64
	capAt              time.Duration
	capMeasured        bool
	capacity, capSent  float64
	capPeak            float64 // the most rate read (node.uploadPeak)
	lazySent           time.Duration
	complete, leaveSet bool
	doneAt             time.Duration
	handing            bool // the hand-over has begun
	completedAt        time.Duration
	progressAt         time.Duration // the last piece stored, or the start
	lastUpload         time.Duration
	fetches            []*fetch // origin fetches not answered yet

	// The uplink pacer (pace.go): node's Estimator, the link every upload
	// started since it first paced crosses at its pace (nil until then),
	// the capacity it read when it first paced (0: it never did), and
	// what was downloaded at its last reading.
	pacer     uplink.Estimator
	paceLink  *link
	firstRead float64
	pacerRecv int64

	fromPeers, fromOrigin int64
	final                 swarm.Stats // the scheduler's counters when it stopped
}

func newNode(s *Sim, idx int, p Peer, site *Site) *node {
	n := &node{s: s, idx: idx, class: p.Class, site: site, arrive: p.Arrive,
		conns: map[*node]*end{}, turnsFree: uploadTurns}
	k := idx + 1
	ip := netip.AddrFrom4([4]byte{10, byte(k >> 16), byte(k >> 8), byte(k)})
	n.ap = netip.AddrPortFrom(ip, peerPort)
	n.addr, n.host = n.ap.String(), ip.String()
	for i := range 8 {
		n.tid[i] = byte(uint64(k) >> (8 * i))
	}
	copy(n.tid[8:], "stampede")
	return n
}

// start is the peer's arrival: node.Run up to its loop.
func (n *node) start() {
	s := n.s
	n.state = running
	n.progressAt = s.now
	cfg := s.cfg.Swarm
	cfg.NumPieces, cfg.PieceLen = s.pieces, s.pieceLen
	cfg.Seed = mix(s.cfg.Seed, uint64(n.idx))
	if ps := s.push; ps != nil {
		cfg.OriginHolder = ps.roles[n.idx].DCRep // the agent's node.Config.Swarm
	}
	n.have = pieceset.New(s.pieces)
	n.sched = swarm.New(cfg, n.have, s.clock())
	n.lazySent = s.now
	n.apply(n.sched.Start(s.clock()))
	// Loops started at different moments tick at different phases.
	s.after(1+time.Duration(s.rng.Int64N(int64(tickEvery))), event{kind: evTick, n: n})
	s.after(s.tracker.interval, event{kind: evAnnounce, n: n})
}

// mix derives a peer's scheduler seed from the run's (splitmix64).
func mix(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// post hands ev to the peer's loop: in its next pass.
func (n *node) post(ev swarm.Event) {
	n.inbox = append(n.inbox, ev)
	if !n.woken {
		n.woken = true
		n.s.at(max(n.s.now, n.busyUntil), event{kind: evWake, n: n})
	}
}

// wake is one pass of the loop over the events waiting, in batches of
// maxBatch as node.Run hands them over.
func (n *node) wake() {
	n.woken = false
	if n.state != running {
		n.inbox = n.inbox[:0]
		return
	}
	s := n.s
	all := n.inbox
	n.inbox = n.spare[:0]
	for batch := all; len(batch) > 0 && n.state == running; {
		k := min(len(batch), maxBatch)
		for _, ev := range batch[:k] {
			n.observe(ev)
		}
		acts := n.sched.StepAll(batch[:k], s.clock())
		s.stats.steps++
		n.apply(acts)
		batch = batch[k:]
	}
	clear(all)
	n.spare = all[:0]
	n.busyUntil = s.now + s.cfg.StepTime
	n.checkLeave()
}

// observe is node.observe: the runtime's books before the scheduler sees ev.
func (n *node) observe(ev swarm.Event) {
	switch ev := ev.(type) {
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

// stored drops the cancelled requests for piece: its late data is
// dropped quietly now (node.stored, peerConn.forget).
func (n *node) stored(piece int) {
	for _, e := range n.ends {
		e.forget(piece)
	}
}

// tick is the loop's tick: lazy HAVEs, the upload rate, path RTTs, Tick.
func (n *node) tick() {
	if n.state != running {
		return
	}
	s := n.s
	s.after(tickEvery, event{kind: evTick, n: n})
	if s.now-n.lazySent >= lazyHaveDelay-tickEvery {
		for _, e := range n.ends {
			e.sendLazy()
		}
		n.lazySent = s.now
	}
	n.measureUpload()
	n.paceTick()
	if s.push != nil {
		s.push.tick(n)
	}
	n.post(swarm.Tick{})
	n.measureCapacity()
	// TCP's minimum RTT, read on the first tick of a connection: the
	// path's round trip.
	for _, e := range n.ends {
		if !e.rtt {
			e.rtt = true
			if e.lat > 0 {
				n.post(swarm.PathRTT{Peer: e.id, RTT: 2 * e.lat})
			}
		}
	}
}

// measureUpload is node.measureUpload: a moving average over the ticks of
// the bytes sent to peers, those of the pieces being sent included.
func (n *node) measureUpload() {
	now := n.s.now
	up := n.sentToPeers()
	if n.upMeasured {
		if dt := (now - n.upAt).Seconds(); dt > 0 {
			n.upRate += ((up-n.upLast)/dt - n.upRate) / 4
		}
	}
	n.upAt, n.upLast, n.upMeasured = now, up, true
}

// sentToPeers is the bytes of the uploads so far, those of the pieces
// being sent included.
func (n *node) sentToPeers() float64 {
	up := n.upBytes
	for _, e := range n.ends {
		if e.flow != nil {
			up += e.flow.sent(n.s.now)
		}
	}
	return up
}

// measureCapacity is node.measureCapacity: every capacityEvery, the most
// bytes delivered to peers in a second, decaying; told to the scheduler
// (Capacity) and the neighbours (RATE) when it has moved by
// capacityChange. What TCP has not delivered yet is left out: here, the
// last round trip's worth of the pieces being sent.
func (n *node) measureCapacity() {
	now := n.s.now
	if n.capMeasured && now-n.capAt < capacityEvery {
		return
	}
	delivered := n.upBytes
	for _, e := range n.ends {
		if f := e.flow; f != nil {
			delivered += max(f.sent(now)-f.rate*(2*e.lat).Seconds(), 0)
		}
	}
	if n.capMeasured {
		n.pace(max(delivered-n.capDelivered, 0))
		rate := (delivered - n.capDelivered) / (now - n.capAt).Seconds()
		n.capacity = max(rate, n.capacity*capacityDecay)
		n.capPeak = max(n.capPeak, rate)
	}
	n.capAt, n.capDelivered, n.capMeasured = now, max(delivered, n.capDelivered), true
	if n.capacity < minCapacity || math.Abs(n.capacity-n.capSent) < capacityChange*n.capSent {
		return
	}
	n.capSent = n.capacity
	for _, e := range n.ends {
		e.send(msg{kind: mRate, x: rateUp(n.capSent)})
	}
	n.post(swarm.Capacity{Up: n.capSent})
}

// rateUp is node.rateUp: a capacity as RATE carries it.
func rateUp(c float64) uint32 { return uint32(min(c, math.MaxUint32)) }

// periodicAnnounce is the announce of every tracker interval.
func (n *node) periodicAnnounce() {
	if n.state != running {
		return
	}
	n.askTracker("")
	n.s.after(n.s.tracker.interval, event{kind: evAnnounce, n: n})
}

// checkLeave runs after every pass: a complete peer leaves after the
// hand-over, or Linger after completing.
func (n *node) checkLeave() {
	if !n.complete || n.state != running {
		return
	}
	s := n.s
	if s.cfg.Linger > 0 {
		if !n.leaveSet {
			n.leaveSet = true
			s.at(n.doneAt+s.cfg.Linger, event{kind: evLeave, n: n})
		}
		return
	}
	if n.handedOver() {
		n.leave()
	}
}

// handedOver is node.handedOver.
func (n *node) handedOver() bool {
	now := n.s.now
	if !n.handing {
		n.handing = true
		n.completedAt, n.lastUpload = now, now
	}
	if n.queued > 0 || n.uploading > 0 {
		n.lastUpload = now
	}
	return now-n.completedAt >= handOverMax || now-n.lastUpload >= handOverQuiet || !n.sched.Wanted()
}

// leave is node.leave: GOODBYE to every peer, "stopped" to the tracker.
func (n *node) leave() {
	n.stop(byeShutdown)
	req := n.announceReq(tracker.EventStopped, 0)
	n.s.tracker.send(n, req)
}

// die is a kill: the connections are reset, nobody is told.
func (n *node) die() {
	n.stop(byeReset)
	n.s.killed++
}

func (n *node) stop(how uint8) {
	s := n.s
	n.final = n.sched.Stats()
	n.state = gone
	s.running--
	for _, e := range slices.Clone(n.ends) {
		e.hangUp(how, "leaving")
	}
	s.origin.dropNode(n)
	n.sched, n.inbox, n.spare, n.byID, n.conns = nil, nil, nil, nil, nil
}

// apply is node.apply: it carries out the scheduler's actions.
func (n *node) apply(acts []swarm.Action) {
	s := n.s
	for _, a := range acts {
		if n.state != running {
			return
		}
		switch a := a.(type) {
		case swarm.Request:
			if e := n.endOf(a.Peer); e != nil {
				e.request(a.Piece)
			}
		case swarm.Cancel:
			if e := n.endOf(a.Peer); e != nil {
				e.cancel(a.Piece)
			}
		case swarm.FetchOrigin:
			s.origin.fetch(n, a)
		case swarm.Announce:
			for _, e := range n.ends {
				e.announce(mHave, a.Piece, true, n.sched.HaveCanWait(e.id, a.Piece))
			}
		case swarm.AnnounceStart:
			for _, e := range n.ends {
				send, wait := n.sched.StartTo(e.id, a.Piece)
				e.announce(mStart, a.Piece, send, wait)
			}
		case swarm.AnnounceStop:
			for _, e := range n.ends {
				send, _ := n.sched.StartTo(e.id, a.Piece)
				e.announce(mStop, a.Piece, send, false)
			}
		case swarm.Choke:
			if e := n.endOf(a.Peer); e != nil {
				e.choke()
			}
		case swarm.Unchoke:
			if e := n.endOf(a.Peer); e != nil {
				e.sendLazy()
				e.send(msg{kind: mUnchoke})
			}
		case swarm.Serve:
			if e := n.endOf(a.Peer); e != nil {
				if !e.own && n.uploadsFull() || !e.serve(a.Piece) {
					e.send(msg{kind: mReject, piece: int32(a.Piece), arg: rejectBusy})
					// Refused after all: the scheduler takes back what
					// it counted as served, in a later pass.
					n.post(swarm.Unserved(a))
				}
			}
		case swarm.Reject:
			if e := n.endOf(a.Peer); e != nil {
				e.send(msg{kind: mReject, piece: int32(a.Piece), arg: rejectCode(a.Reason)})
			}
		case swarm.Connect:
			n.dial(a.Addr)
		case swarm.Disconnect:
			if e := n.endOf(a.Peer); e != nil {
				e.hangUp(byeOther, a.Reason)
				n.post(swarm.PeerDown{Peer: e.id, Reason: a.Reason})
			}
		case swarm.AskTracker:
			if a.Why == "completed" && s.cfg.Linger == 0 {
				// Leaving at once: node skips it (its "stopped" follows).
				continue
			}
			n.askTracker(a.Why)
		case swarm.Recommend:
			if e := n.endOf(a.Peer); e != nil {
				e.send(msg{kind: mRecommend, x: a.Addrs})
			}
		case swarm.Complete:
			if n.complete {
				continue
			}
			n.complete, n.doneAt = true, s.now
			s.finished++
			n.askTracker("completed")
		}
	}
}

// uploadsFull is node.uploadsFull: a request is refused as busy.
func (n *node) uploadsFull() bool {
	if n.sched.HaveCount() < rampPieces && !n.sched.Complete() {
		return n.queued-n.ownQueued+n.uploading >= n.queueBound(rampQueueTime, rampMinQueued)
	}
	return n.queued-n.ownQueued >= n.queueBound(uploadQueueTime, minUploadsQueued)
}

func (n *node) queueBound(d time.Duration, floor int) int {
	return max(floor, int(n.upRate*d.Seconds()/float64(n.s.cfg.PieceSize)))
}

// askTracker is node.askTracker: the answer comes back as TrackerPeers.
func (n *node) askTracker(why string) {
	ev := tracker.EventNone
	switch why {
	case "join":
		ev = tracker.EventStarted
	case "completed":
		ev = tracker.EventCompleted
	}
	want := 30
	if why == "completed" || why == "" && len(n.ends) >= announceEnough {
		want = 5
	}
	n.s.tracker.send(n, n.announceReq(ev, want))
}

func (n *node) announceReq(ev tracker.Event, want int) tracker.AnnounceRequest {
	left := n.s.cfg.Size
	if n.complete {
		left = 0
	}
	return tracker.AnnounceRequest{Root: n.s.root, Size: n.s.cfg.Size, ID: n.tid, Port: peerPort,
		Left: left, Event: ev, NumWant: want}
}

// dial connects to addr: a round trip later, the connection is up or
// refused.
func (n *node) dial(addr string) {
	s := n.s
	ap, err := netip.ParseAddrPort(addr)
	to := s.byAddr[ap]
	rtt := 2 * s.cfg.Latency
	if err == nil && to != nil {
		rtt = s.transit(n.site, to.site) + s.transit(to.site, n.site)
	}
	s.after(rtt, event{kind: evDial, n: n, x: &dialing{to: to, addr: addr}})
}

type dialing struct {
	to   *node
	addr string
}

// dialed ends a dial: a peer that is not running refuses it, and so does
// one we are connected to already (either side's view: a connection
// closing on one side is still up on the other until it hears).
func (n *node) dialed(d *dialing) {
	if n.state != running {
		return
	}
	to := d.to
	if to == nil || to == n || to.state != running || n.conns[to] != nil || to.conns[n] != nil ||
		n.s.push != nil && !n.s.push.mayConnect(n, to) {
		n.post(swarm.DialFailed{Addr: d.addr})
		return
	}
	lat := latency(n.site, to.site)
	a := &end{n: n, lat: lat}
	b := &end{n: to, lat: lat}
	a.peer, b.peer = b, a
	if ps := n.s.push; ps != nil && ps.roles[n.idx].Rack != ps.roles[to.idx].Rack {
		a.own, b.own = true, true // the agent's shapedConn across the uplink
	}
	n.add(a)
	to.add(b)
	// The writer sends the have-set first, before anything the loop
	// queues; then a RATE if we have told one (node.register).
	a.write(msg{kind: mHaveSet, x: n.have.Clone()})
	b.write(msg{kind: mHaveSet, x: to.have.Clone()})
	if n.capSent > 0 {
		a.write(msg{kind: mRate, x: rateUp(n.capSent)})
	}
	if to.capSent > 0 {
		b.write(msg{kind: mRate, x: rateUp(to.capSent)})
	}
	n.post(swarm.PeerUp{Peer: a.id, Addr: to.addr, Host: to.host, Outbound: true})
	to.post(swarm.PeerUp{Peer: b.id, Addr: n.addr, Host: n.host})
}

func (n *node) add(e *end) {
	n.nextID++
	e.id = n.nextID
	n.ends = append(n.ends, e)
	for len(n.byID) <= int(e.id) {
		n.byID = append(n.byID, nil)
	}
	n.byID[e.id] = e
	n.conns[e.peer.n] = e
}

// endOf is the connection of id, or nil.
func (n *node) endOf(id swarm.PeerID) *end {
	if id < swarm.PeerID(len(n.byID)) {
		return n.byID[id]
	}
	return nil
}

func (n *node) remove(e *end) {
	if n.conns == nil { // stopped
		return
	}
	n.byID[e.id] = nil
	delete(n.conns, e.peer.n)
	if k := slices.Index(n.ends, e); k >= 0 {
		n.ends = slices.Delete(n.ends, k, k+1)
	}
}

// giveTurn hands an upload turn back: to the waiting piece of the lowest
// rank, the first that came among equals (Turns.giveAt).
// uploadRank is node.uploadRank.
func (n *node) uploadRank(piece int) int {
	return min(n.sched.Holders(piece), uploadRanks-1)
}

func (n *node) giveTurn() {
	if len(n.waiters) == 0 {
		n.turnsFree++
		return
	}
	now := n.s.now
	best := 0
	for i, w := range n.waiters {
		if w.rankAt(now) < n.waiters[best].rankAt(now) {
			best = i
		}
	}
	e := n.waiters[best]
	n.waiters = slices.Delete(n.waiters, best, best+1)
	n.backlogged(now - e.waitSince)
	e.startSend()
}

func (n *node) String() string { return fmt.Sprintf("peer %d (%s)", n.idx, n.addr) }
