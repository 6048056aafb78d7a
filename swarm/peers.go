package swarm

import (
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
)

// peer is one connection as the scheduler sees it.
type peer struct {
	id       PeerID
	addr     string
	host     string // where the connection comes from (PeerUp.Host)
	outbound bool
	upAt     time.Time

	has    *pieceset.Set
	gotSet bool      // its HaveSet arrived
	setAt  time.Time // when
	offers int       // pieces it has that we lack: worth asking
	wants  int       // pieces we have that it lacks: it is interested in us

	// Download side.
	unchokedUs   bool
	reqs         []outReq // oldest first
	backoffUntil time.Time
	probation    bool    // timed out since its last delivery: depth 1
	distrusted   bool    // failed us while we starved (distrust), until it delivers
	timeouts     int     // timeouts since its last delivery
	lies         int     // "dont-have" rejects of pieces it advertised
	rate         float64 // delivery rate, bytes/s (EWMA)
	lat          time.Duration
	idleRTT      time.Duration // fastest round trip before the first rate sample
	pathRTT      time.Duration // the transport's RTT without queues (PathRTT), 0 if unknown
	capacity     float64       // its upload capacity as it told us (PeerCapacity), bytes/s, 0 if unknown
	samples      int
	lastRecv     time.Time
	claimed      []int // pieces it claimed with START (may be stale)
	avoid        []int // pieces it failed to deliver lately
	pickFailed   int   // Scheduler.gen when pick last found nothing

	// Upload side.
	amChoking    bool
	optimistic   bool
	catchingUp   bool // has the catch-up slot (catchUp)
	lastUnchoked time.Time
	served       int64 // bytes we committed to send it (Serve)

	down, up           rateWin
	downTotal, upTotal int64
}

type outReq struct {
	piece int
	sent  time.Time
	ahead int // requests to this peer outstanding when it was sent
}

func (p *peer) findReq(i int) int {
	for k, r := range p.reqs {
		if r.piece == i {
			return k
		}
	}
	return -1
}

// addrInfo is what we know about an address.
type addrInfo struct {
	banned    bool
	failedUs  bool // last dropped for stalling or lying (see disconnect)
	connected int  // connections with this address
	dialing   bool
	dialAt    time.Time
	failures  int
	retryAt   time.Time
}

const (
	maxKnown     = 256 // candidate addresses remembered
	maxRecent    = 32  // addresses in the recently-traded list
	recommendMax = 8   // addresses per Recommend
	dialTimeout  = 30 * time.Second
)

func (s *Scheduler) onPeerUp(e PeerUp) {
	if _, dup := s.peers[e.Peer]; dup {
		return
	}
	a := s.addrs[e.Addr]
	if e.Addr != "" && a != nil {
		if a.dialing {
			a.dialing = false
			s.dialing--
		}
		if a.banned {
			s.emit(Disconnect{Peer: e.Peer, Reason: "banned", Ban: true})
			return
		}
		if a.failedUs && !e.Outbound && s.now.Before(a.retryAt) {
			// Dropped for failing us: not back with a clean slate by
			// dialing us either, until its backoff is over.
			s.emit(Disconnect{Peer: e.Peer, Reason: "backoff"})
			return
		}
	}
	host := hostKey(e)
	h := s.hostInfo(host)
	p := &peer{
		id: e.Peer, addr: e.Addr, host: host, outbound: e.Outbound, upAt: s.now,
		has: pieceset.New(len(s.pieces)), amChoking: true,
		wants: s.have.Count(),
		// A host whose peers failed us is not trusted again under a
		// new peer ID before one of them delivers.
		distrusted: h.failing,
	}
	p.down.init(s.cfg.RateWindow)
	p.up.init(s.cfg.RateWindow)
	s.peers[e.Peer] = p
	k, _ := slices.BinarySearchFunc(s.order, p.id, byID)
	s.order = slices.Insert(s.order, k, p)
	if e.Addr != "" {
		s.addrInfo(e.Addr).connected++
	}
	h.conns++
	if rec := s.recommendations(e.Addr); len(rec) > 0 {
		s.emit(Recommend{Peer: e.Peer, Addrs: rec})
	}
}

func (s *Scheduler) onPeerDown(e PeerDown) {
	if p := s.peers[e.Peer]; p != nil {
		if e.Left {
			s.departed++
		}
		s.removePeer(p)
	}
}

// disconnect drops a peer now; events that still arrive for it are ignored
// (except Received, whose piece the runtime has stored).
func (s *Scheduler) disconnect(p *peer, reason string, ban bool) {
	s.emit(Disconnect{Peer: p.id, Reason: reason, Ban: ban})
	if ban && p.addr != "" {
		a := s.addrInfo(p.addr)
		if !a.banned {
			a.banned = true
			s.stats.Banned++
		}
	}
	s.removePeer(p)
	if !ban && p.addr != "" && (reason == "stalled" || reason == "dont-have") {
		// A peer dropped for failing us comes back no sooner than a
		// failed dial would, longer each time: else a peer that
		// advertises everything and delivers nothing is redialed with a
		// clean slate every DialBackoff and stalls the swarm again.
		a := s.addrInfo(p.addr)
		a.failures++
		a.failedUs = true
		a.retryAt = s.now.Add(s.cfg.DialBackoff << min(a.failures, 6))
	}
}

func (s *Scheduler) removePeer(p *peer) {
	for len(p.reqs) > 0 {
		s.dropReq(p, len(p.reqs)-1)
	}
	for i := range p.has.All() {
		s.lose(i)
	}
	for _, i := range p.claimed {
		s.unclaim(p.id, i)
	}
	if h := s.hosts[p.host]; h != nil {
		h.conns--
		if p.downTotal > 0 {
			s.setDelivered(h, h.delivered-1)
		}
		if h.conns <= 0 && !h.failing {
			delete(s.hosts, p.host)
		}
	}
	if p.addr != "" {
		if a := s.addrs[p.addr]; a != nil {
			a.connected = max(a.connected-1, 0)
			// Do not redial at once a peer that just went away.
			a.retryAt = s.now.Add(s.cfg.DialBackoff)
		}
	}
	delete(s.peers, p.id)
	if k, ok := slices.BinarySearchFunc(s.order, p.id, byID); ok {
		s.order = slices.Delete(s.order, k, k+1)
	}
}

func (s *Scheduler) onHaveSet(e HaveSet) {
	p := s.peers[e.Peer]
	if p == nil {
		return
	}
	if e.Set == nil || e.Set.Len() != len(s.pieces) {
		s.stats.Invalid++
		s.disconnect(p, DisconnectBadHaveSet, false)
		return
	}
	for i := range p.has.All() {
		s.lose(i)
	}
	if !p.gotSet {
		p.setAt = s.now
	}
	p.has, p.gotSet, p.pickFailed = e.Set.Clone(), true, 0
	p.offers, p.wants = 0, s.have.Count()
	for i := range p.has.All() {
		s.pieces[i].avail++
		s.unclaim(p.id, i)
		if s.have.Has(i) {
			p.wants--
		} else {
			p.offers++
		}
	}
}

// lose records that one peer fewer has piece i. When none is left, the
// piece's stall clock restarts: it can only stall again once a peer has it.
func (s *Scheduler) lose(i int) {
	ps := &s.pieces[i]
	ps.avail--
	if ps.avail == 0 && !ps.origin {
		ps.firstReq = time.Time{}
	}
}

func (s *Scheduler) onHave(e Have) {
	p := s.peers[e.Peer]
	if p == nil {
		return
	}
	if !s.valid(e.Piece) {
		s.stats.Invalid++
		return
	}
	s.unclaim(p.id, e.Piece)
	if !p.has.Add(e.Piece) {
		return
	}
	p.pickFailed = 0
	s.pieces[e.Piece].avail++
	if s.have.Has(e.Piece) {
		p.wants--
	} else {
		p.offers++
	}
}

func (s *Scheduler) onStarted(e Started) {
	p := s.peers[e.Peer]
	if p == nil {
		return
	}
	if !s.valid(e.Piece) {
		s.stats.Invalid++
		return
	}
	if s.have.Has(e.Piece) || p.has.Has(e.Piece) {
		return
	}
	until := s.since() + s.cfg.StartTimeout
	ps := &s.pieces[e.Piece]
	for k := range ps.claims {
		if ps.claims[k].peer == p.id {
			ps.claims[k].until = until
			return
		}
	}
	ps.claims = append(ps.claims, claim{peer: p.id, until: until})
	// Forget stale entries now and then so the list stays short.
	if len(p.claimed) >= 64 {
		p.claimed = slices.DeleteFunc(p.claimed, func(i int) bool { return !s.claimedBy(p.id, i) })
	}
	p.claimed = append(p.claimed, e.Piece)
}

func (s *Scheduler) claimedBy(id PeerID, i int) bool {
	now := s.since()
	for _, c := range s.pieces[i].claims {
		if c.peer == id && c.until > now {
			return true
		}
	}
	return false
}

func (s *Scheduler) unclaim(id PeerID, i int) {
	ps := &s.pieces[i]
	ps.claims = slices.DeleteFunc(ps.claims, func(c claim) bool { return c.peer == id })
}

// since is the time from New to now, as claims count it.
func (s *Scheduler) since() time.Duration { return s.now.Sub(s.epoch) }

// claimed reports whether another peer holds a live START claim on piece i.
func (s *Scheduler) claimed(i int) bool {
	now := s.since()
	for _, c := range s.pieces[i].claims {
		if c.until > now {
			return true
		}
	}
	return false
}

func (s *Scheduler) onCorrupt(e Corrupt) {
	s.stats.Corrupt++
	p := s.peers[e.Peer]
	if p == nil {
		return
	}
	if s.valid(e.Piece) {
		if k := p.findReq(e.Piece); k >= 0 {
			s.dropReq(p, k)
		}
	}
	s.disconnect(p, "corrupt", true)
}

// hostInfo is what we know about the connections from one host (address
// without the port). A host can open connections under as many peer IDs
// as it likes (a Sybil): it adds at most maxPerHost neighbours to the
// swarm-size estimate; its peers that have not delivered yet share
// hostProbes requests, however many they are; and once one of its peers
// has failed us (distrust, or a request that timed out before it ever
// delivered) its new ones start distrusted.
type hostInfo struct {
	conns     int  // connections from it
	delivered int  // of those, peers that delivered a piece to us
	probes    int  // requests in flight to those that have not
	failing   bool // one of its peers failed us since the last delivery from it
	stalled   bool // of those, one that never delivered let a request time out
}

// hostProbes bounds the requests in flight to one host's peers that have
// not delivered a piece yet: its untested peers are probed a few pieces
// at a time, not each at full depth. Every piece asked of a peer that
// never answers waits out a deadline, and nobody else is asked for it
// meanwhile; 64 such peers from one address, two requests each, held a
// crowd's pieces back in turns.
const hostProbes = 2

// untested reports whether p has not delivered a piece to us yet.
func (p *peer) untested() bool { return p.downTotal == 0 }

// mayProbe reports whether p may take one more request as far as its host
// is concerned: it has delivered, or its host's probes are not all out.
func (s *Scheduler) mayProbe(p *peer) bool {
	if !p.untested() {
		return true
	}
	h := s.hosts[p.host]
	return h == nil || h.probes < s.probes()
}

// probes is how many requests in flight the untested peers of one host
// share: hostProbes, or for a small object the whole burst (small.go):
// a peer that has delivered nothing a second after being asked no longer
// keeps the origin off its pieces (peers-failing), and the object is a
// second's download.
func (s *Scheduler) probes() int {
	if s.small {
		return max(hostProbes, len(s.pieces))
	}
	return hostProbes
}

// maxPerHost bounds the neighbours one host adds to the swarm-size
// estimate. A few peers behind one NAT are common;
// more are rarer than one machine posing as many.
const maxPerHost = 4

// maxHosts bounds the hosts remembered as failing with no connection.
const maxHosts = 1024

// hostKey is where the connection of e comes from: its IPv4 address, or
// its IPv6 /64, as the tracker counts sources. Peers on this machine's own
// addresses (127.0.0.1 and ::1), and those whose address we do not know,
// are told apart by nothing but their IDs, and each is a host of its own:
// a test's or a testbed's crowd shares 127.0.0.1, and whoever attacks from
// the machine itself has it anyway. The rest of 127.0.0.0/8 counts as
// other hosts, so that a test can play them.
func hostKey(e PeerUp) string {
	host := e.Host
	if host == "" {
		host, _, _ = net.SplitHostPort(e.Addr)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap().WithZone("")
		if ip != netip.AddrFrom4([4]byte{127, 0, 0, 1}) && ip != netip.IPv6Loopback() {
			if ip.Is6() {
				p, _ := ip.Prefix(64)
				return p.String()
			}
			return ip.String()
		}
	}
	return host + "#" + strconv.FormatUint(uint64(e.Peer), 10)
}

func (s *Scheduler) hostInfo(host string) *hostInfo {
	h := s.hosts[host]
	if h == nil {
		h = &hostInfo{}
		s.hosts[host] = h
	}
	return h
}

// setDelivered sets h's count of delivering peers, keeping s.credible, the
// sum over hosts of that count bounded by maxPerHost, up to date.
func (s *Scheduler) setDelivered(h *hostInfo, d int) {
	s.credible += min(d, maxPerHost) - min(h.delivered, maxPerHost)
	h.delivered = d
}

// mayClaim reports whether a request to p is worth a START claim, which
// keeps the peers that see it off the origin for that piece: not if p
// timed out since it last delivered (probation), nor if it never
// delivered and its oldest request has waited suspectDelay or its host
// let a request time out before ever delivering. Fake peers that
// advertise everything and never answer, asked one new peer ID after
// another for the last pieces, would otherwise have every peer of a crowd
// claim those pieces in turn and keep the whole crowd off the origin for
// them. A neighbour distrusted only because we starved (distrust) still
// claims: a crowd's last piece asked of the neighbour that just got it is
// likely on its way.
func (s *Scheduler) mayClaim(p *peer) bool {
	if p.probation {
		return false
	}
	if !p.untested() {
		return true
	}
	if len(p.reqs) > 0 && s.now.Sub(p.reqs[0].sent) >= s.suspectDelay() {
		return false
	}
	h := s.hosts[p.host]
	return h == nil || !h.stalled
}

// failed marks p's host as failing us (see hostInfo).
func (s *Scheduler) failed(p *peer) {
	h := s.hosts[p.host]
	if h == nil || h.failing {
		return
	}
	h.failing = true
	if len(s.hosts) > maxHosts {
		for k, o := range s.hosts {
			if o.conns == 0 {
				delete(s.hosts, k)
				break
			}
		}
	}
}

func (s *Scheduler) addrInfo(addr string) *addrInfo {
	a := s.addrs[addr]
	if a == nil {
		a = &addrInfo{}
		s.addrs[addr] = a
	}
	return a
}

// learn adds candidate addresses: recommended ones go first (a neighbour
// traded with them recently, so they are likely alive and useful), tracker
// ones last.
func (s *Scheduler) learn(addrs []string, recommended bool) {
	var fresh []string
	for _, addr := range addrs {
		if addr == "" || slices.Contains(fresh, addr) {
			continue
		}
		if a := s.addrs[addr]; a != nil && a.banned {
			continue
		}
		s.addrInfo(addr)
		if k := slices.Index(s.known, addr); k >= 0 {
			if !recommended {
				continue
			}
			s.known = slices.Delete(s.known, k, k+1)
		}
		fresh = append(fresh, addr)
	}
	if recommended {
		s.known = append(fresh, s.known...)
	} else {
		s.known = append(s.known, fresh...)
	}
	// Forget the oldest idle candidates past maxKnown (banned addresses stay
	// in s.addrs so they are never dialed again).
	for k := len(s.known) - 1; len(s.known) > maxKnown && k >= 0; k-- {
		a := s.addrs[s.known[k]]
		if a.connected > 0 || a.dialing {
			continue
		}
		if !a.banned {
			delete(s.addrs, s.known[k])
		}
		s.known = slices.Delete(s.known, k, k+1)
	}
}

func (s *Scheduler) onDialFailed(e DialFailed) {
	a := s.addrs[e.Addr]
	if a == nil {
		return
	}
	s.stats.DialFailures++
	if a.dialing {
		a.dialing = false
		s.dialing--
	}
	a.failures++
	a.retryAt = s.now.Add(s.cfg.DialBackoff << min(a.failures-1, 6))
}

// dialable reports whether addr may be dialed now.
func (s *Scheduler) dialable(addr string) bool {
	a := s.addrs[addr]
	return a != nil && !a.banned && a.connected == 0 && !a.dialing && !s.now.Before(a.retryAt)
}

// managePeers keeps the peer set between MinPeers and MaxPeers: expire
// dials, drop complete peers once we are complete, evict when above
// MaxPeers, dial candidates up to WantPeers while downloading.
func (s *Scheduler) managePeers() {
	// Every address being dialed is known (learn keeps them), and
	// s.dialing counts them: with none, there is no dial to time out.
	for k := 0; s.dialing > 0 && k < len(s.known); k++ {
		addr := s.known[k]
		if a := s.addrs[addr]; a != nil && a.dialing && s.now.Sub(a.dialAt) >= dialTimeout {
			s.onDialFailed(DialFailed{Addr: addr})
		}
	}
	if s.have.Complete() {
		// Two complete peers have nothing to trade.
		for _, p := range slices.Clone(s.order) {
			if p.has.Complete() {
				s.disconnect(p, DisconnectBothComplete, false)
			}
		}
	}
	for len(s.order) > s.cfg.MaxPeers {
		s.stats.Evicted++
		s.disconnect(s.leastUseful(false), DisconnectTooManyPeers, false)
	}
	if s.have.Complete() || len(s.known) == 0 {
		return
	}
	counted := s.counted(s.cfg.WantPeers)
	for _, addr := range s.known {
		// A complete peer serves those who come; it does not go looking.
		if s.have.Complete() || counted+s.dialing >= s.cfg.WantPeers {
			break
		}
		if s.dialable(addr) {
			a := s.addrs[addr]
			a.dialing, a.dialAt = true, s.now
			s.dialing++
			s.stats.Dials++
			s.emit(Connect{Addr: addr})
		}
	}
}

// idle reports whether p has shown nothing to trade since its have-set
// came suspectDelay ago: it has delivered nothing, offers nothing we lack
// and has taken nothing from us. A fake peer that only handshakes and
// sends an empty have-set is idle for good; an honest newcomer is so only
// while nobody has anything yet.
func (s *Scheduler) idle(p *peer) bool {
	return p.downTotal == 0 && p.upTotal == 0 && p.offers == 0 && p.gotSet && s.now.Sub(p.setAt) >= s.suspectDelay()
}

// counted is the number of connections that count towards WantPeers:
// those neither idle nor suspect, up to bound. Connections that only hold
// a slot would otherwise keep us from dialling the peers that trade.
func (s *Scheduler) counted(bound int) int {
	n := 0
	for _, p := range s.order {
		if n >= bound {
			break
		}
		if !s.idle(p) && !s.suspect(p) {
			n++
		}
	}
	return n
}

// crowding is how many connections p's host holds beyond maxPerHost (0
// when it holds no more). Among neighbours that do not deliver, those of
// the most crowded host go first: a host that opens connections under
// fresh peer IDs as fast as they are dropped (a Sybil) would otherwise
// keep every slot full of newcomers, which are evicted youngest first,
// and an honest peer that dials us would be the youngest and go at once.
// Dropping from the host with most connections leaves each other host its
// share, however many IDs one of them has.
func (s *Scheduler) crowding(p *peer) int {
	if h := s.hosts[p.host]; h != nil {
		return max(h.conns-maxPerHost, 0)
	}
	return 0
}

// leastUseful picks the peer to drop: not delivering to us lately,
// from the host most over its share of connections (crowding),
// suspect (its pieces do not come), idle (nothing to trade), past its grace period (unless all are
// new), it sent us least lately, has least we need, took least from us.
// With idleOnly it only considers peers with nothing to trade either way.
// A neighbour that delivers keeps its place against newcomers who have
// delivered nothing, which would otherwise take it by coming back again
// and again under new peer IDs.
func (s *Scheduler) leastUseful(idleOnly bool) *peer {
	var best *peer
	better := func(a, b *peer) bool { // a less useful than b
		da, db := a.down.sum(s.now), b.down.sum(s.now)
		if (da > 0) != (db > 0) {
			return db > 0
		}
		if ca, cb := s.crowding(a), s.crowding(b); ca != cb {
			return ca > cb
		}
		if sa, sb := s.suspect(a), s.suspect(b); sa != sb {
			return sa
		}
		if ia, ib := s.idle(a), s.idle(b); ia != ib {
			return ia
		}
		ga, gb := s.now.Sub(a.upAt) < s.cfg.PeerGrace, s.now.Sub(b.upAt) < s.cfg.PeerGrace
		if ga != gb {
			return gb
		}
		if da != db {
			return da < db
		}
		if a.offers != b.offers {
			return a.offers < b.offers
		}
		if ua, ub := a.up.sum(s.now), b.up.sum(s.now); ua != ub {
			return ua < ub
		}
		return a.id > b.id
	}
	for _, p := range s.order {
		if idleOnly && (p.offers > 0 || p.wants > 0 || len(p.reqs) > 0) {
			continue
		}
		if best == nil || better(p, best) {
			best = p
		}
	}
	return best
}

// askForPeers asks the tracker for a refill when too few peers are left and
// no candidate is left to dial, and for repair when no new piece has come for
// RepairAfter (Flashback's partition repair: the tracker's peers are, by
// definition, in the main swarm). Repair also drops one idle peer, if we are
// at WantPeers, to make room.
func (s *Scheduler) askForPeers() {
	if s.have.Complete() || !s.trackerKnown() {
		return
	}
	if s.now.Sub(s.lastProgress) >= s.cfg.RepairAfter && s.now.Sub(s.lastRepair) >= s.cfg.RepairAfter {
		s.lastRepair = s.now
		s.askTracker("repair")
		if len(s.order) >= s.cfg.WantPeers {
			if p := s.leastUseful(true); p != nil {
				s.disconnect(p, "repair", false)
			}
		}
		return
	}
	// A refill is worth it only if the tracker knows peers we lack; each
	// refill that brought nobody we could dial doubles the wait before the
	// next, up to maxRefillEvery (the tracker may count peers it cannot
	// hand out, or ones behind NAT nobody reaches).
	if len(s.order) >= s.cfg.WantPeers || s.dialing > 0 || s.swarmSize <= len(s.order)+1 ||
		s.now.Sub(s.lastAsk) < s.cfg.RefillEvery<<s.emptyRefills {
		return
	}
	for _, addr := range s.known {
		if s.dialable(addr) {
			return
		}
	}
	s.askTracker("refill")
}

// maxRefillBackoff bounds the doublings of RefillEvery (5 s << 4 = 80 s).
const maxRefillBackoff = 4

func (s *Scheduler) askTracker(why string) {
	s.lastAsk, s.lastAskWhy = s.now, why
	s.stats.TrackerAsks[why]++
	s.emit(AskTracker{Why: why})
}

func (s *Scheduler) trackerKnown() bool {
	return s.trackerAnswered || s.now.Sub(s.startAt) >= s.cfg.TrackerWait
}

// traded moves addr to the front of the recently-traded list (Flashback's
// roulette cache: recommended peers are alive and have data).
func (s *Scheduler) traded(addr string) {
	if addr == "" {
		return
	}
	if len(s.recent) > 0 && s.recent[0] == addr {
		return
	}
	if k := slices.Index(s.recent, addr); k >= 0 {
		s.recent = slices.Delete(s.recent, k, k+1)
	}
	s.recent = slices.Insert(s.recent, 0, addr)
	if len(s.recent) > maxRecent {
		s.recent = s.recent[:maxRecent]
	}
}

// recommendations returns up to recommendMax addresses recently traded with,
// most recent first, without the peer's own address and banned ones.
func (s *Scheduler) recommendations(exclude string) []string {
	var out []string
	for _, addr := range s.recent {
		if len(out) == recommendMax {
			break
		}
		if addr == exclude {
			continue
		}
		if a := s.addrs[addr]; a != nil && a.banned {
			continue
		}
		out = append(out, addr)
	}
	return out
}
