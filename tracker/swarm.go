package tracker

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"time"
)

// The state of one swarm, and the decisions taken on it: which peers an
// announce gets back and how large the swarm is. It is pure: no clock, no
// locks, no I/O; the MemoryStore serializes the calls and passes the time
// in.

// minAnnounceGap is the shortest time between two announces of one peer that
// are both acted on; one sooner is answered from the cached peer list.
const minAnnounceGap = time.Second

// arrivalRing is how many of the latest arrivals a swarm remembers. A new
// peer is the one most likely to lack pieces others have and to have pieces
// others lack soon, and the one nobody knows yet: handing it out spreads
// it into the swarm within an interval.
const arrivalRing = 16

// stoppedRing is how many of the latest departures a swarm remembers. An
// announce can overtake another on its way (a peer's "completed" sent in
// the background just before it leaves arrives after its "stopped"), and
// would put a peer that is gone back in the table, first in every answer
// as a seed, for expiryIntervals. So for one interval after a peer said
// "stopped", only a "started" from it (it came back) adds it again.
const stoppedRing = 64

// expiryIntervals is how many intervals a peer stays after its last
// announce: it may miss two and still be listed.
const expiryIntervals = 3

// Why a peer left a swarm's table, for the metrics.
const (
	removedStopped = iota
	removedExpired
	removedTableFull
	numRemoved
)

var removedNames = [numRemoved]string{"stopped", "expired", "table_full"}

// announce is an AnnounceRequest as the swarm sees it: with the address the
// request came from and the keyed hash of the peer's id.
type announce struct {
	AnnounceRequest
	addr netip.AddrPort // the request's IP, the announced port
	hash uint64
}

// result is what an announce decided.
type result struct {
	swarmSize, complete int
	peers               []Peer
	rateLimited         bool
	late                bool // from a peer that said "stopped" (stoppedRing): not added
	addressFull         bool // from a source with perAddress peers in the table: not added
	removed             [numRemoved]int
}

// swarm is the bounded state of one swarm: a table of its most recently seen
// peers, a ring of its latest arrivals, and a window counting every peer
// heard from whether or not the table still holds it.
type swarm struct {
	interval   time.Duration
	perAddress int  // peers of one source the table holds (source.go)
	small      bool // the file is a small object (smallObject)
	peers      table
	win        *window
	rng        *rand.Rand

	// sources counts the table's peers of each source; nsrc counts the
	// sources, each exempt (loopback) peer as one of its own. A swarm of
	// one source is cheap to drop (see MemoryStore).
	sources map[netip.Prefix]int32
	nsrc    int

	arrivals  [arrivalRing]PeerID
	nArrivals int // ever recorded; the latest is arrivals[(nArrivals-1)%arrivalRing]

	departed  [stoppedRing]departure
	nDeparted int // ever recorded, as nArrivals

	// overflowAt is the last time a live peer was pushed out of the full
	// table. For expiryIntervals after it, the table is not the whole swarm
	// and the window's count is used; zero: never.
	overflowAt time.Time

	// cache is a peer list picked for nobody in particular, handed (minus
	// the asker) to announces that come too soon after the asker's last.
	cache   []Peer
	cacheAt time.Time // zero: no cache

	// Scratch space for pick, kept to spare the allocations.
	cand   []int32
	chosen []bool
}

func newSwarm(interval time.Duration, capacity, perAddress int, seed uint64, now time.Time) *swarm {
	return &swarm{
		interval:   interval,
		perAddress: perAddress,
		peers:      newTable(capacity),
		win:        newWindow(interval, now),
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		sources:    make(map[netip.Prefix]int32),
	}
}

// lone reports whether the table holds peers of one source at most.
func (s *swarm) lone() bool { return s.nsrc < 2 }

// counted adds (n 1) or takes off (n -1) a peer of ip to the counts of
// sources.
func (s *swarm) counted(ip netip.Addr, n int32) {
	src, ok := Source(ip)
	if !ok {
		s.nsrc += int(n)
		return
	}
	k := s.sources[src] + n
	switch {
	case k == 0:
		delete(s.sources, src)
		s.nsrc--
	case k == 1 && n > 0:
		s.sources[src] = k
		s.nsrc++
	default:
		s.sources[src] = k
	}
}

// sourceFull reports whether ip's source has perAddress peers in the
// table.
func (s *swarm) sourceFull(ip netip.Addr) bool {
	src, ok := Source(ip)
	return ok && int(s.sources[src]) >= s.perAddress
}

// removePeer takes row i out of the table.
func (s *swarm) removePeer(i int32) {
	s.counted(s.peers.rows[i].addr.Addr(), -1)
	s.peers.remove(i)
}

// announce applies a at time now and returns the answer.
func (s *swarm) announce(a announce, now time.Time) result {
	var res result
	res.removed[removedExpired] = s.expire(now)
	i, known := s.peers.find(a.ID)
	switch {
	case a.Event == EventStopped:
		// Peers learn each other's ids: only the address a peer announced
		// from may take it out.
		if known && s.peers.rows[i].addr.Addr() == a.addr.Addr() {
			s.removePeer(i)
			s.win.stop(now)
			res.removed[removedStopped]++
			s.departed[s.nDeparted%stoppedRing] = departure{id: a.ID, addr: a.addr.Addr(), at: now}
			s.nDeparted++
		}
		res.swarmSize, res.complete = s.size(now)
		res.peers = []Peer{}
		return res
	case !known && a.Event != EventStarted && s.leftRecently(a, now):
		// A late announce of a peer that has left (see stoppedRing).
		res.late = true
		res.peers = s.cached(a.ID, a.NumWant, now)
		res.swarmSize, res.complete = s.size(now)
		return res
	case known && now.Sub(s.peers.rows[i].seen) < minAnnounceGap &&
		(a.Event != EventCompleted || s.peers.rows[i].complete):
		res.rateLimited = true
		res.peers = s.cached(a.ID, a.NumWant, now)
		res.swarmSize, res.complete = s.size(now)
		return res
	}

	complete := a.Left == 0
	switch {
	case known:
		// A peer whose address changed has moved (a new network): the
		// latest announce is where it can be reached. (It keeps its row
		// whatever its new source holds: only newcomers are bounded.)
		if old := s.peers.rows[i].addr.Addr(); old != a.addr.Addr() {
			s.counted(old, -1)
			s.counted(a.addr.Addr(), 1)
		}
		s.peers.update(i, a.addr, complete, now)
	case s.sourceFull(a.addr.Addr()):
		// Counted (as one of its source's perAddress), answered, not
		// kept: ids cost nothing, and would push out the others.
		res.addressFull = true
	default:
		if s.peers.full() {
			s.removePeer(s.peers.tail)
			s.overflowAt = now
			res.removed[removedTableFull]++
		}
		s.peers.insert(peerRow{id: a.ID, addr: a.addr, complete: complete, seen: now})
		s.counted(a.addr.Addr(), 1)
	}
	if a.Event == EventStarted && !res.addressFull {
		s.arrivals[s.nArrivals%arrivalRing] = a.ID
		s.nArrivals++
	}
	s.win.add(a.hash, now)
	res.peers = s.pick(&a.ID, a.NumWant)
	res.swarmSize, res.complete = s.size(now)
	return res
}

// outcome returns r as a Store tells it.
func (r *result) outcome() Outcome {
	return Outcome{
		SwarmSize:   r.swarmSize,
		Complete:    r.complete,
		Peers:       r.peers,
		RateLimited: r.rateLimited,
		Late:        r.late,
		AddressFull: r.addressFull,
		Removed: Removals{
			PeersStopped:   r.removed[removedStopped],
			PeersExpired:   r.removed[removedExpired],
			PeersTableFull: r.removed[removedTableFull],
		},
	}
}

// departure is a peer that said "stopped".
type departure struct {
	id   PeerID
	addr netip.Addr
	at   time.Time
}

// leftRecently reports whether the peer announcing a said "stopped", from
// the same address, within the last interval.
func (s *swarm) leftRecently(a announce, now time.Time) bool {
	for k := range min(s.nDeparted, stoppedRing) {
		d := &s.departed[k]
		if d.id == a.ID && d.addr == a.addr.Addr() && now.Sub(d.at) < s.interval {
			return true
		}
	}
	return false
}

// expire removes the peers not heard from for expiryIntervals and returns
// how many.
func (s *swarm) expire(now time.Time) int {
	n := 0
	for s.peers.tail >= 0 && now.Sub(s.peers.rows[s.peers.tail].seen) >= expiryIntervals*s.interval {
		s.removePeer(s.peers.tail)
		n++
	}
	return n
}

// size estimates the peers in the swarm and how many of them are seeds.
// While the table holds every live peer it counts them exactly; otherwise
// the window counts, and the seeds are the table's share of seeds scaled
// up: the table holds the peers seen last, and seeds announce as often as
// anyone, so it is a fair sample.
func (s *swarm) size(now time.Time) (n, complete int) {
	n, complete = s.peers.len(), s.peers.seeds
	if s.overflowAt.IsZero() || now.Sub(s.overflowAt) >= expiryIntervals*s.interval || n == 0 {
		return n, complete
	}
	est := max(n, int(math.Round(s.win.estimate(now))))
	return est, int(math.Round(float64(est) * float64(complete) / float64(n)))
}

// smallObject is the largest file whose swarm is answered most recent
// first (pick): a file that fits in one burst of requests, as the
// scheduler counts small objects (swarm/small.go: at most its origin
// window, 256 KiB by default; the tracker does not know the piece size).
const smallObject = 256 << 10

// pick chooses up to want peers others may connect to, never the asker
// (nil: no one is left out): seeds first, then the latest arrivals, then
// others at random. Seeds, when more than wanted, are also taken at
// random, so that the load spreads over all of them. A small object's
// swarm (smallObject) is answered most recently seen first (pickRecent).
func (s *swarm) pick(asker *PeerID, want int) []Peer {
	if s.small {
		return s.pickRecent(asker, want)
	}
	out := make([]Peer, 0, min(want, s.peers.len()))
	rows := s.peers.rows
	if cap(s.chosen) < len(rows) {
		s.chosen = make([]bool, len(rows), s.peers.capacity)
	}
	s.chosen = s.chosen[:len(rows)]
	clear(s.chosen)
	eligible := func(i int32) bool {
		p := &rows[i]
		return !s.chosen[i] && p.addr.Port() != 0 && (asker == nil || p.id != *asker)
	}
	take := func(i int32) {
		s.chosen[i] = true
		out = append(out, rows[i].peer())
	}
	takeRandom := func(cand []int32) {
		for j := 0; len(out) < want && j < len(cand); j++ {
			r := j + s.rng.IntN(len(cand)-j)
			cand[j], cand[r] = cand[r], cand[j]
			take(cand[j])
		}
	}

	s.cand = s.cand[:0]
	for i := range int32(len(rows)) {
		if rows[i].complete && eligible(i) {
			s.cand = append(s.cand, i)
		}
	}
	takeRandom(s.cand)
	for k := 0; k < min(s.nArrivals, arrivalRing) && len(out) < want; k++ {
		id := s.arrivals[(s.nArrivals-1-k)%arrivalRing]
		if i, ok := s.peers.find(id); ok && eligible(i) {
			take(i)
		}
	}
	if len(out) < want {
		s.cand = s.cand[:0]
		for i := range int32(len(rows)) {
			if eligible(i) {
				s.cand = append(s.cand, i)
			}
		}
		takeRandom(s.cand)
	}
	return out
}

// pickRecent chooses up to want peers, never the asker, in the order
// they last announced, most recent first. Visitors fetching a small object
// leave the moment they have it (after a hand-over of a second or two), so
// the peers that announced last are the ones still there: those that just
// arrived (the pool of unfinished peers, Flashback's stabilized pool) and
// those that just completed and hand over what they have. A seed or an
// arrival of a few seconds ago has most likely left.
func (s *swarm) pickRecent(asker *PeerID, want int) []Peer {
	out := make([]Peer, 0, min(want, s.peers.len()))
	for i := s.peers.head; i >= 0 && len(out) < want; i = s.peers.rows[i].next {
		p := &s.peers.rows[i]
		if p.addr.Port() != 0 && (asker == nil || p.id != *asker) {
			out = append(out, p.peer())
		}
	}
	return out
}

// cached returns the peer list for an announce that came too soon: the
// swarm's cached list, refreshed at most once per minAnnounceGap, without
// the asker.
func (s *swarm) cached(asker PeerID, want int, now time.Time) []Peer {
	if s.cacheAt.IsZero() || now.Sub(s.cacheAt) >= minAnnounceGap || now.Before(s.cacheAt) {
		s.cache = s.pick(nil, MaxNumWant+1)
		s.cacheAt = now
	}
	out := make([]Peer, 0, min(want, len(s.cache)))
	for _, p := range s.cache {
		if len(out) == want {
			break
		}
		if p.ID != asker {
			out = append(out, p)
		}
	}
	return out
}

// peerRow is one row of a swarm's table.
type peerRow struct {
	id       PeerID
	addr     netip.AddrPort // port 0: cannot accept connections
	complete bool
	seen     time.Time // of the last announce acted on
	// prev and next link the rows from the most to the least recently
	// seen; -1 ends the list.
	prev, next int32
}

func (p *peerRow) peer() Peer { return Peer{Addr: p.addr, ID: p.id, Complete: p.complete} }

// table is a fixed-capacity set of peers, by id, in the order they were
// last seen, so that both expiry and eviction take from the tail.
type table struct {
	capacity   int
	rows       []peerRow
	index      map[PeerID]int32
	head, tail int32
	seeds      int // rows with complete set
}

func newTable(capacity int) table {
	return table{capacity: capacity, index: make(map[PeerID]int32), head: -1, tail: -1}
}

func (t *table) len() int   { return len(t.rows) }
func (t *table) full() bool { return len(t.rows) >= t.capacity }

func (t *table) find(id PeerID) (int32, bool) {
	i, ok := t.index[id]
	return i, ok
}

// insert adds p, which must be new, as the most recently seen. The table
// must not be full.
func (t *table) insert(p peerRow) {
	i := int32(len(t.rows))
	t.rows = append(t.rows, p)
	t.index[p.id] = i
	if p.complete {
		t.seeds++
	}
	t.pushFront(i)
}

// update records an announce of the peer in row i.
func (t *table) update(i int32, addr netip.AddrPort, complete bool, now time.Time) {
	p := &t.rows[i]
	if p.complete != complete {
		if complete {
			t.seeds++
		} else {
			t.seeds--
		}
	}
	p.addr, p.complete, p.seen = addr, complete, now
	t.unlink(i)
	t.pushFront(i)
}

// remove deletes row i, moving the last row into its place.
func (t *table) remove(i int32) {
	t.unlink(i)
	if t.rows[i].complete {
		t.seeds--
	}
	delete(t.index, t.rows[i].id)
	last := int32(len(t.rows) - 1)
	if i != last {
		t.rows[i] = t.rows[last]
		p := &t.rows[i]
		t.index[p.id] = i
		if p.prev >= 0 {
			t.rows[p.prev].next = i
		} else {
			t.head = i
		}
		if p.next >= 0 {
			t.rows[p.next].prev = i
		} else {
			t.tail = i
		}
	}
	t.rows[last] = peerRow{}
	t.rows = t.rows[:last]
}

func (t *table) unlink(i int32) {
	p := &t.rows[i]
	if p.prev >= 0 {
		t.rows[p.prev].next = p.next
	} else {
		t.head = p.next
	}
	if p.next >= 0 {
		t.rows[p.next].prev = p.prev
	} else {
		t.tail = p.prev
	}
	p.prev, p.next = -1, -1
}

func (t *table) pushFront(i int32) {
	p := &t.rows[i]
	p.prev, p.next = -1, t.head
	if t.head >= 0 {
		t.rows[t.head].prev = i
	} else {
		t.tail = i
	}
	t.head = i
}
