// Package tracker is stampede's tracker: it tells each peer downloading a
// file about a handful of others, and how large the crowd is. It runs
// inside "stampede serve" (package origin mounts it at WellKnownPath and
// names it in every manifest's trackers) or alone as "stampede tracker".
// Peers use it to join a swarm; once they have joined they trade peers
// among themselves, so a tracker that goes away hurts no one already in.
//
// # Protocol
//
// One request, over HTTP with a JSON answer:
//
//	GET <announce URL>?root=<64 hex>&size=<bytes>&id=<32 hex>&port=<port>&left=<bytes>&event=<event>&numwant=<n>
//
// Its parameters:
//
//   - root and size name the file, and so the swarm (the manifest's root
//     and size; the root alone does not pin the size).
//   - id is the peer's id: 16 random bytes, the same for every announce of
//     one download.
//   - port is where the peer accepts connections; 0 means it cannot. Such a
//     peer is counted in the swarm but never handed to others. The peer's
//     IP is the address the request comes from, never a parameter.
//   - left is the bytes the peer still lacks (0 to size); 0 makes it a seed.
//   - event is "started" when the peer joins, "completed" once when it has
//     the whole file (left must be 0), "stopped" when it leaves (it is
//     forgotten at once), and absent or empty on the periodic announces in
//     between. A peer may announce before its interval is up, to get more
//     peers; announces of one id less than a second apart are answered
//     from a peer list cached for the swarm and change nothing.
//   - numwant is how many peers to return: 10 when absent or 0, at most 50.
//
// Unknown parameters are ignored; a known one that is missing, malformed or
// repeated is answered 400 with {"error": "..."}. Any method but GET is 405.
// The answer, 200 application/json:
//
//	{"interval": 15, "swarm_size": 1234, "complete": 87,
//	 "peers": [{"addr": "192.0.2.7:7000", "id": "<32 hex>", "complete": true}, ...]}
//
// Its fields:
//
//   - interval: seconds until the next periodic announce. A peer not heard
//     from for 3 intervals is forgotten.
//   - swarm_size: an estimate of the peers in the swarm, the asker included
//     (after "stopped", without it). It stays right beyond the table of
//     peers the tracker keeps; peers go to the origin with probability k/n
//     for this n.
//   - complete: an estimate of the seeds among them.
//   - peers: up to numwant peers, never the asker: seeds first (a random
//     choice of them when there are more), then the latest arrivals, then
//     others at random.
//
// # State
//
// What the tracker keeps per swarm is bounded whatever the crowd: a table of
// the MaxPeersPerSwarm peers seen last (a newcomer to a full table pushes out
// the one seen longest ago), a ring of the latest arrivals, and a windowed
// HyperLogLog counting every peer heard from over the last interval and a
// half to two (estimate.go says why). While the table holds the whole swarm
// it counts exactly; past it, the HyperLogLog does. Swarms idle for 3
// intervals are dropped, and past MaxSwarms the one idle longest goes.
//
// Files: tracker.go (Config, Tracker, HTTP, metrics), swarm.go (the pure
// per-swarm core: table, picks, size), estimate.go (the swarm-size
// estimator), query.go (the request and its parsing), client.go (the answer
// and Announce, for peers).
package tracker

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/internal/promtext"
	"github.com/stampede-dev/stampede/manifest"
)

// WellKnownPath is where an origin serves its tracker, and where a
// standalone tracker answers too.
const WellKnownPath = "/.well-known/stampede/tracker/announce"

// Defaults for the zero fields of Config.
const (
	DefaultInterval         = 15 * time.Second
	DefaultMaxPeersPerSwarm = 256
	DefaultMaxSwarms        = 1024
)

// Config configures a Tracker. Zero or negative fields take their defaults.
type Config struct {
	// Interval is the time between a peer's periodic announces. A peer
	// silent for 3 intervals is forgotten. Default DefaultInterval; it is
	// rounded up to whole seconds.
	Interval time.Duration
	// MaxPeersPerSwarm bounds the table of peers kept per swarm (about
	// 100 bytes each); the swarm-size estimate does not depend on it.
	// Default DefaultMaxPeersPerSwarm.
	MaxPeersPerSwarm int
	// MaxSwarms bounds the swarms tracked at once; past it, the swarm idle
	// longest is dropped. Default DefaultMaxSwarms. A full swarm takes
	// about 30 KiB with the default table.
	MaxSwarms int
	// Logger receives the tracker's log. Default: discard.
	Logger *slog.Logger
	// Now tells the time. Default time.Now; tests set a fake clock.
	Now func() time.Time
}

// swarmKey names a swarm: a manifest's root and size.
type swarmKey struct {
	root manifest.Hash
	size int64
}

// Tracker answers announces; it is an http.Handler. Create it with New.
//
// Each swarm has a lock of its own, held while one announce is applied to
// it (microseconds: the table is small), so that a crowd on one file does
// not queue behind another's; the tracker's lock covers only finding the
// swarm.
type Tracker struct {
	cfg     Config
	log     *slog.Logger
	seed    maphash.Seed // keys the id hash of the size estimator
	metrics metrics

	mu     sync.Mutex // guards the following, and every slot's prev, next and last
	swarms map[swarmKey]*slot
	lru    slot // sentinel of the list of slots from most to least recently announced
}

// slot holds one swarm in the tracker.
type slot struct {
	key        swarmKey
	prev, next *slot     // guarded by Tracker.mu
	last       time.Time // of the last announce; guarded by Tracker.mu

	mu sync.Mutex // guards sw
	sw *swarm
}

// New returns a Tracker for cfg.
func New(cfg Config) *Tracker {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	cfg.Interval = (cfg.Interval + time.Second - 1).Truncate(time.Second)
	if cfg.MaxPeersPerSwarm <= 0 {
		cfg.MaxPeersPerSwarm = DefaultMaxPeersPerSwarm
	}
	if cfg.MaxSwarms <= 0 {
		cfg.MaxSwarms = DefaultMaxSwarms
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	t := &Tracker{
		cfg:    cfg,
		log:    cfg.Logger,
		seed:   maphash.MakeSeed(),
		swarms: make(map[swarmKey]*slot),
	}
	t.lru.prev, t.lru.next = &t.lru, &t.lru
	return t
}

// Interval returns the announce interval the tracker asks of peers.
func (t *Tracker) Interval() time.Duration { return t.cfg.Interval }

// ServeHTTP answers an announce (see the package documentation). It serves
// whatever path it is mounted at.
func (t *Tracker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		t.refuse(w, r, http.StatusMethodNotAllowed, fmt.Errorf("method %s: announce with GET", r.Method))
		return
	}
	req, err := parseAnnounce(r.URL.RawQuery)
	if err != nil {
		t.metrics.rejected.Add(1)
		t.refuse(w, r, http.StatusBadRequest, err)
		return
	}
	from, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		// Not a TCP connection (a test, a unix socket): no one to list.
		t.refuse(w, r, http.StatusBadRequest, fmt.Errorf("cannot tell the address of %q", r.RemoteAddr))
		return
	}
	ip := from.Addr().Unmap().WithZone("") // a zone means nothing to other hosts
	res, err := t.Announce(req, netip.AddrPortFrom(ip, req.Port))
	if err != nil { // parseAnnounce checked it all
		t.refuse(w, r, http.StatusInternalServerError, err)
		return
	}
	body, err := json.Marshal(res)
	if err != nil {
		t.refuse(w, r, http.StatusInternalServerError, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.Write(body)
}

func (t *Tracker) refuse(w http.ResponseWriter, r *http.Request, code int, err error) {
	t.log.Debug("refused an announce", "remote", r.RemoteAddr, "status", code, "err", err)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(errorBody(err))
}

// Announce applies req, coming from a peer reachable at addr (port 0:
// unreachable), and returns the answer. ServeHTTP calls it with the
// request's remote IP; an embedder may call it directly. req.NumWant is
// taken as in the protocol: 0 means DefaultNumWant. A request with
// parameters out of range is an error, as a 400 would be.
func (t *Tracker) Announce(req AnnounceRequest, addr netip.AddrPort) (*AnnounceResponse, error) {
	if err := req.check(); err != nil {
		t.metrics.rejected.Add(1)
		return nil, err
	}
	switch {
	case req.NumWant <= 0:
		req.NumWant = DefaultNumWant
	case req.NumWant > MaxNumWant:
		req.NumWant = MaxNumWant
	}
	now := t.cfg.Now()
	a := announce{AnnounceRequest: req, addr: addr, hash: maphash.Comparable(t.seed, req.ID)}
	s := t.slotFor(swarmKey{req.Root, req.Size}, now)
	// The swarm may be dropped from the tracker meanwhile; the announce
	// then lands in a swarm no one will see again, and the peer comes
	// back in on its next one.
	s.mu.Lock()
	res := s.sw.announce(a, now)
	s.mu.Unlock()

	t.metrics.announces[eventIndex(req.Event)].Add(1)
	if res.rateLimited {
		t.metrics.rateLimited.Add(1)
	}
	if res.late {
		t.metrics.late.Add(1)
	}
	t.metrics.countRemoved(&res.removed)
	if t.log.Enabled(context.Background(), slog.LevelDebug) {
		t.log.Debug("announce", "root", req.Root.String(), "size", req.Size, "id", req.ID.String(),
			"addr", addr.String(), "event", req.Event.metricName(), "left", req.Left,
			"swarm_size", res.swarmSize, "peers", len(res.peers), "rate_limited", res.rateLimited)
	}
	return &AnnounceResponse{
		Interval:  t.cfg.Interval,
		SwarmSize: res.swarmSize,
		Complete:  res.complete,
		Peers:     res.peers,
	}, nil
}

// Peers returns up to want peers (at most MaxNumWant) of the swarm of the
// file with this root and size, picked as for an announce, without counting
// anyone in or changing the swarm's place among the idle ones: for an
// overloaded origin that points a client it cannot serve at the swarm. The
// list is the one cached for announces that come too soon (refreshed at
// most once a second), so a crowd of such calls costs little. Nil when the
// tracker knows no such swarm.
func (t *Tracker) Peers(root manifest.Hash, size int64, want int) []Peer {
	want = min(max(want, 0), MaxNumWant)
	if want == 0 {
		return nil
	}
	now := t.cfg.Now()
	t.mu.Lock()
	s := t.swarms[swarmKey{root, size}]
	t.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.metrics.peersRemoved[removedExpired].Add(int64(s.sw.expire(now)))
	return s.sw.cached(PeerID{}, want, now)
}

// slotFor returns the slot of key, creating it if need be, and marks it
// announced at now.
func (t *Tracker) slotFor(key swarmKey, now time.Time) *slot {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropIdleLocked(now)
	s := t.swarms[key]
	if s == nil {
		if len(t.swarms) >= t.cfg.MaxSwarms {
			old := t.lru.prev
			t.log.Debug("dropping the swarm idle longest: tracking as many swarms as allowed",
				"root", old.key.root.String(), "idle", now.Sub(old.last), "max_swarms", t.cfg.MaxSwarms)
			t.removeLocked(old)
			t.metrics.swarmsRemoved[swarmsRemovedLimit].Add(1)
		}
		s = &slot{key: key, sw: newSwarm(t.cfg.Interval, t.cfg.MaxPeersPerSwarm, rand.Uint64(), now)}
		t.swarms[key] = s
		t.log.Debug("new swarm", "root", key.root.String(), "size", key.size)
	} else {
		s.prev.next, s.next.prev = s.next, s.prev
	}
	s.last = now
	s.prev, s.next = &t.lru, t.lru.next
	t.lru.next.prev = s
	t.lru.next = s
	return s
}

// dropIdleLocked drops the swarms no one has announced to for
// expiryIntervals: all their peers have expired.
func (t *Tracker) dropIdleLocked(now time.Time) {
	for s := t.lru.prev; s != &t.lru && now.Sub(s.last) >= expiryIntervals*t.cfg.Interval; s = t.lru.prev {
		t.removeLocked(s)
		t.metrics.swarmsRemoved[swarmsRemovedIdle].Add(1)
	}
}

func (t *Tracker) removeLocked(s *slot) {
	s.prev.next, s.next.prev = s.next, s.prev
	s.prev, s.next = nil, nil
	delete(t.swarms, s.key)
}

// Why a swarm was dropped, for the metrics.
const (
	swarmsRemovedIdle = iota
	swarmsRemovedLimit
	numSwarmsRemoved
)

var swarmsRemovedNames = [numSwarmsRemoved]string{"idle", "limit"}

var events = [...]Event{EventStarted, EventCompleted, EventStopped, EventNone}

func eventIndex(e Event) int {
	for i, x := range events {
		if x == e {
			return i
		}
	}
	panic("tracker: unknown event " + string(e))
}

// metrics are the tracker's counters, each named by the question it answers.
type metrics struct {
	announces     [len(events)]atomic.Int64
	rateLimited   atomic.Int64
	late          atomic.Int64
	rejected      atomic.Int64
	peersRemoved  [numRemoved]atomic.Int64
	swarmsRemoved [numSwarmsRemoved]atomic.Int64
}

func (m *metrics) countRemoved(n *[numRemoved]int) {
	for i, k := range n {
		if k != 0 {
			m.peersRemoved[i].Add(int64(k))
		}
	}
}

// WriteMetrics writes the tracker's metrics in the Prometheus text
// exposition format, for a /metrics page of the embedder's. It first drops
// idle swarms and expired peers, so the gauges are current.
func (t *Tracker) WriteMetrics(w io.Writer) error {
	now := t.cfg.Now()
	t.mu.Lock()
	t.dropIdleLocked(now)
	slots := make([]*slot, 0, len(t.swarms))
	for s := t.lru.next; s != &t.lru; s = s.next {
		slots = append(slots, s)
	}
	t.mu.Unlock()
	var peers, estimated int64
	for _, s := range slots {
		s.mu.Lock()
		t.metrics.peersRemoved[removedExpired].Add(int64(s.sw.expire(now)))
		n, _ := s.sw.size(now)
		peers += int64(s.sw.peers.len())
		estimated += int64(n)
		s.mu.Unlock()
	}

	var p promtext.Writer
	p.Family("stampede_tracker_announces_total", promtext.Counter, `Well-formed announces, by event ("periodic": none).`)
	for i, e := range events {
		p.Sample(t.metrics.announces[i].Load(), "event", e.metricName())
	}
	p.Family("stampede_tracker_announces_rate_limited_total", promtext.Counter, "Announces less than a second after the same peer's last, answered from the cached peer list.")
	p.Sample(t.metrics.rateLimited.Load())
	p.Family("stampede_tracker_announces_late_total", promtext.Counter, `Announces, other than "started", from a peer that said "stopped" within the last interval (one sent before overtaken by it): answered, not added back.`)
	p.Sample(t.metrics.late.Load())
	p.Family("stampede_tracker_announces_rejected_total", promtext.Counter, "Announces refused with 400 for bad parameters.")
	p.Sample(t.metrics.rejected.Load())
	p.Family("stampede_tracker_swarms", promtext.Gauge, "Swarms tracked.")
	p.Sample(int64(len(slots)))
	p.Family("stampede_tracker_peers", promtext.Gauge, "Peers in the swarms' tables (at most max-peers-per-swarm per swarm).")
	p.Sample(peers)
	p.Family("stampede_tracker_peers_estimated", promtext.Gauge, "Sum of the swarms' estimated sizes, counting peers beyond the tables.")
	p.Sample(estimated)
	p.Family("stampede_tracker_peers_removed_total", promtext.Counter, "Peers taken out of a swarm's table, by reason.")
	for i := range numRemoved {
		p.Sample(t.metrics.peersRemoved[i].Load(), "reason", removedNames[i])
	}
	p.Family("stampede_tracker_swarms_removed_total", promtext.Counter, "Swarms dropped, by reason.")
	for i := range numSwarmsRemoved {
		p.Sample(t.metrics.swarmsRemoved[i].Load(), "reason", swarmsRemovedNames[i])
	}
	_, err := p.WriteTo(w)
	return err
}
