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
// A source address past its rate (source.go) is answered 429 with a
// Retry-After; an announce to a swarm not tracked (Config.OnlyAdmitted),
// 403. The tracker never connects to the addresses announces name.
// A tracker whose store fails (Redis out of reach) answers 503 with a
// Retry-After of one interval and {"error": "tracker failure: ..."}, which
// does not say why; the peer announces again later.
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
// it counts exactly; past it, the HyperLogLog does. One source (an IPv4
// address, an IPv6 /64) counts as MaxPeersPerAddress peers at most, in
// both (source.go). Swarms idle for 3 intervals are dropped, and past
// MaxSwarms a new swarm pushes out the lone one (peers of one source at
// most) idle longest, or is not kept.
//
// The swarms live in a Store: MemoryStore (the default) in the process,
// or package redisstore's in Redis, shared by several trackers. Package
// storetest holds the behaviour both must have.
//
// # Metrics and health
//
// The tracker's series (stampede_tracker_*) are Prometheus metrics
// (metrics.go): an embedder registers Collector on its own registry
// (package origin does, for "stampede serve"), and a standalone tracker
// serves them with the Go runtime's and the process's on Handler's
// /metrics, beside the health checks of package contract (ready: the
// store answers).
//
// Files: tracker.go (Config, Tracker, HTTP), source.go (what one address
// may do: rate limits, counts), admit.go (the swarms an origin's tracker
// tracks), metrics.go (metrics, health,
// the standalone routes), store.go (the Store interface), memstore.go
// (MemoryStore: the swarms and their idle order), swarm.go (the pure
// per-swarm core: table, picks, size), estimate.go (the swarm-size
// estimator), query.go (the request and its parsing), client.go (the
// answer and Announce, for peers).
package tracker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/sign"
)

// WellKnownPath is where an origin serves its tracker, and where a
// standalone tracker answers too.
const WellKnownPath = "/.well-known/stampede/tracker/announce"

// Defaults for the zero fields of Config.
const (
	DefaultInterval         = 15 * time.Second
	DefaultMaxPeersPerSwarm = 256
	DefaultMaxSwarms        = 1024
	// An honest peer announces once an interval, plus a few times at
	// its start and end; docs/tracker.md says how these numbers were
	// chosen.
	DefaultMaxPeersPerAddress = 8
	DefaultAnnounceRate       = 20  // a second, per source
	DefaultAnnounceBurst      = 200 // per source
)

// Config configures a Tracker. Zero or negative fields take their defaults.
type Config struct {
	// Interval is the time between a peer's periodic announces. A peer
	// silent for 3 intervals is forgotten. Default DefaultInterval; it is
	// rounded up to whole seconds.
	Interval time.Duration
	// MaxPeersPerSwarm bounds the table of peers kept per swarm (about
	// 100 bytes each in memory); the swarm-size estimate does not depend
	// on it. Default DefaultMaxPeersPerSwarm.
	MaxPeersPerSwarm int
	// MaxSwarms bounds the swarms tracked at once. A new swarm past it
	// pushes out the one idle longest among those whose table holds
	// peers of one source (address) at most; when every swarm has peers
	// of two sources or more, the new swarm is not kept (its peer is
	// answered alone). Default DefaultMaxSwarms. A full swarm takes about
	// 30 KiB in memory with the default table.
	MaxSwarms int
	// MaxPeersPerAddress bounds the peers of one source (an IPv4
	// address, an IPv6 /64; loopback is exempt) a swarm's table holds and
	// its swarm_size counts (source.go). Default
	// DefaultMaxPeersPerAddress.
	MaxPeersPerAddress int
	// AnnounceRate is the announces a second one source may make on
	// average over HTTP and WebSocket (ws.go), and AnnounceBurst how many
	// at once; past them it is answered 429 with a Retry-After (over
	// WebSocket, an error). Loopback is not limited, nor
	// are AnnounceContext's callers. Defaults DefaultAnnounceRate and
	// DefaultAnnounceBurst; a negative AnnounceRate: no limit.
	AnnounceRate  float64
	AnnounceBurst int
	// OnlyAdmitted makes the tracker track only the swarms admitted with
	// Admit, and those its store has already (admitted by another tracker
	// sharing it, or before a restart): an announce to another is
	// answered 403 and changes nothing (admit.go). An origin's tracker
	// admits the files the origin serves. Default false: any swarm.
	OnlyAdmitted bool
	// Tokens, if it trusts any key, makes the tracker private: an
	// announce must carry a token (AnnounceRequest.Token) that it
	// verifies for the swarm and the peer ID, and be signed by the key of
	// that peer ID within 5 minutes of the tracker's clock
	// (AnnounceRequest.Sign), else it is answered 403 and changes
	// nothing. Default nil: no token asked for.
	Tokens *sign.Verifier
	// Store holds the swarms. Default: a MemoryStore of this Config's
	// Limits. A store made elsewhere (package redisstore) must be given
	// the same Limits.
	Store Store
	// StoreTimeout bounds a call to the store: an announce's (a peer
	// waiting longer is better told to come back), and those made without
	// a caller's context (Peers, WriteMetrics). Default
	// DefaultStoreTimeout.
	StoreTimeout time.Duration
	// Logger receives the tracker's log. Default: discard.
	Logger *slog.Logger
	// Now tells the time. Default time.Now; tests set a fake clock.
	Now func() time.Time
}

// DefaultStoreTimeout is Config.StoreTimeout's default.
const DefaultStoreTimeout = 2 * time.Second

// Limits returns the limits of c, with the defaults applied, for a Store.
func (c *Config) Limits() Limits {
	return Limits{Interval: c.Interval, MaxPeersPerSwarm: c.MaxPeersPerSwarm, MaxSwarms: c.MaxSwarms,
		MaxPeersPerAddress: c.MaxPeersPerAddress}.WithDefaults()
}

// Tracker answers announces; it is an http.Handler. Create it with New.
// It checks the requests, counts them and speaks HTTP; its Store keeps
// the swarms.
type Tracker struct {
	cfg      Config
	log      *slog.Logger
	store    Store
	metrics  *series
	limiter  *limiter  // nil: no rate limit
	admitted *admitted // nil: any swarm (Config.OnlyAdmitted)
	ws       wsHub     // WebRTC peers' signalling (ws.go)

	// regOnce makes reg, the standalone tracker's registry, on first use
	// (Handler): an embedded tracker's series go on its embedder's.
	regOnce sync.Once
	reg     *prometheus.Registry
}

// New returns a Tracker for cfg.
func New(cfg Config) *Tracker {
	l := cfg.Limits()
	cfg.Interval, cfg.MaxPeersPerSwarm, cfg.MaxSwarms, cfg.MaxPeersPerAddress = l.Interval, l.MaxPeersPerSwarm, l.MaxSwarms, l.MaxPeersPerAddress
	if cfg.AnnounceRate == 0 {
		cfg.AnnounceRate = DefaultAnnounceRate
	}
	if cfg.AnnounceBurst <= 0 {
		cfg.AnnounceBurst = DefaultAnnounceBurst
	}
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = DefaultStoreTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Store == nil {
		cfg.Store = NewMemoryStore(l, cfg.Logger)
	}
	t := &Tracker{cfg: cfg, log: cfg.Logger, store: cfg.Store, metrics: newSeries()}
	if cfg.AnnounceRate > 0 {
		t.limiter = newLimiter(cfg.AnnounceRate, cfg.AnnounceBurst)
	}
	if cfg.OnlyAdmitted {
		t.admitted = newAdmitted()
	}
	return t
}

// Interval returns the announce interval the tracker asks of peers.
func (t *Tracker) Interval() time.Duration { return t.cfg.Interval }

// ServeHTTP answers an announce (see the package documentation). It serves
// whatever path it is mounted at. A store that fails gets the peer a 503
// with a failure message that does not say why (the log does): the peer
// tries again on its next announce.
func (t *Tracker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isWebSocket(r) {
		t.serveWS(w, r) // ws.go
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		t.refuse(w, r, http.StatusMethodNotAllowed, fmt.Errorf("method %s: announce with GET", r.Method))
		return
	}
	from, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		// Not a TCP connection (a test, a unix socket): no one to list.
		t.refuse(w, r, http.StatusBadRequest, fmt.Errorf("cannot tell the address of %q", r.RemoteAddr))
		return
	}
	ip := from.Addr().Unmap().WithZone("") // a zone means nothing to other hosts
	// Every request of a source counts against its rate, well-formed or
	// not. The tracker never connects to the addresses it is told of
	// (nor to any): an announce costs it one answer.
	if src, ok := Source(ip); ok && t.limiter != nil {
		if ok, wait := t.limiter.allow(src, t.cfg.Now()); !ok {
			t.metrics.throttled.Add(1)
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int((wait+time.Second-1)/time.Second))))
			t.refuse(w, r, http.StatusTooManyRequests, errThrottled)
			return
		}
	}
	req, err := parseAnnounce(r.URL.RawQuery)
	if err != nil {
		t.metrics.rejected.Add(1)
		t.refuse(w, r, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), t.cfg.StoreTimeout)
	defer cancel()
	res, err := t.AnnounceContext(ctx, req, netip.AddrPortFrom(ip, req.Port))
	switch {
	case errors.Is(err, ErrNotTracked), errors.Is(err, ErrUnauthorized):
		t.refuse(w, r, http.StatusForbidden, err)
		return
	case errors.Is(err, ErrStore):
		w.Header().Set("Retry-After", strconv.Itoa(int(t.cfg.Interval/time.Second)))
		t.refuse(w, r, http.StatusServiceUnavailable, errStoreFailed)
		return
	case err != nil: // parseAnnounce checked it all
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

// errThrottled is what a source past its rate is told.
var errThrottled = errors.New("too many announces from this address: announce again after Retry-After")

// ErrNotTracked is wrapped by the errors of announces to a swarm a
// tracker with Config.OnlyAdmitted does not track.
var ErrNotTracked = errors.New("this tracker does not track that file")

// ErrUnauthorized is wrapped by the errors of announces a private tracker
// (Config.Tokens) refuses: without a token, or with one it does not
// verify.
var ErrUnauthorized = errors.New("this swarm is private: announce with a token from its origin")

// errStoreFailed is what a peer is told when the store fails: what
// failed (an address, a server's message) is for the log only.
var errStoreFailed = errors.New("tracker failure: swarm store unavailable, announce again later")

func (t *Tracker) refuse(w http.ResponseWriter, r *http.Request, code int, err error) {
	t.log.Debug("refused an announce", "remote", r.RemoteAddr, "status", code, "err", err)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(errorBody(err))
}

// Announce is AnnounceContext without a context of the caller's: the
// call to the store is bounded by Config.StoreTimeout.
func (t *Tracker) Announce(req AnnounceRequest, addr netip.AddrPort) (*AnnounceResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.StoreTimeout)
	defer cancel()
	return t.AnnounceContext(ctx, req, addr)
}

// AnnounceContext applies req, coming from a peer reachable at addr (port
// 0: unreachable), and returns the answer. ServeHTTP calls it with the
// request's remote IP; an embedder may call it directly. req.NumWant is
// taken as in the protocol: 0 means DefaultNumWant. A request with
// parameters out of range is an error wrapping errBadRequest, as a 400
// would be; one to a swarm not tracked (Config.OnlyAdmitted),
// ErrNotTracked; a store that fails, an error wrapping ErrStore.
func (t *Tracker) AnnounceContext(ctx context.Context, req AnnounceRequest, addr netip.AddrPort) (*AnnounceResponse, error) {
	if err := req.check(); err != nil {
		t.metrics.rejected.Add(1)
		return nil, err
	}
	if t.admitted != nil && !t.admitted.has(swarmKey{req.Root, req.Size}) {
		// Not admitted here: tracked only if the store has it already.
		res, err := t.store.Peers(ctx, req.Root, req.Size, 1, t.cfg.Now())
		if err != nil {
			t.metrics.failed.Add(1)
			t.log.Warn("announce failed: the store did not answer", "root", req.Root.String(), "err", err)
			return nil, storeError(err)
		}
		t.metrics.countRemoved(&res.Removed)
		if res.Peers == nil {
			t.metrics.untracked.Add(1)
			return nil, fmt.Errorf("%w (root %s, size %d)", ErrNotTracked, req.Root, req.Size)
		}
	}
	if t.cfg.Tokens.Trusts() {
		now := t.cfg.Now()
		err := t.cfg.Tokens.VerifyString(req.Token, req.Root, req.Size, req.ID, now)
		if err == nil {
			err = req.verifySigned(now)
		}
		if err != nil {
			t.metrics.unauthorized.Add(1)
			return nil, fmt.Errorf("%w: %w", ErrUnauthorized, err)
		}
	}
	switch {
	case req.NumWant <= 0:
		req.NumWant = DefaultNumWant
	case req.NumWant > MaxNumWant:
		req.NumWant = MaxNumWant
	}
	start := t.cfg.Now()
	res, err := t.store.Announce(ctx, req, addr, start)
	t.metrics.announceDuration.Observe(t.cfg.Now().Sub(start).Seconds())
	if err != nil {
		t.metrics.failed.Add(1)
		t.log.Warn("announce failed: the store did not answer", "root", req.Root.String(), "err", err)
		return nil, storeError(err)
	}
	t.metrics.announces[eventIndex(req.Event)].Add(1)
	if res.RateLimited {
		t.metrics.rateLimited.Add(1)
	}
	if res.Late {
		t.metrics.late.Add(1)
	}
	if res.AddressFull {
		t.metrics.addressFull.Add(1)
	}
	if res.SwarmsFull {
		t.metrics.swarmsFull.Add(1)
	}
	t.metrics.countRemoved(&res.Removed)
	if t.log.Enabled(ctx, slog.LevelDebug) {
		t.log.Debug("announce", "root", req.Root.String(), "size", req.Size, "id", req.ID.String(),
			"addr", addr.String(), "event", req.Event.metricName(), "left", req.Left,
			"swarm_size", res.SwarmSize, "peers", len(res.Peers), "rate_limited", res.RateLimited)
	}
	return &AnnounceResponse{
		Interval:  t.cfg.Interval,
		SwarmSize: res.SwarmSize,
		Complete:  res.Complete,
		Peers:     res.Peers,
	}, nil
}

// storeError wraps err in ErrStore unless it already is.
func storeError(err error) error {
	if errors.Is(err, ErrStore) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStore, err)
}

// Peers returns up to want peers (at most MaxNumWant) of the swarm of the
// file with this root and size, picked as for an announce, without counting
// anyone in or changing the swarm's place among the idle ones: for an
// overloaded origin that points a client it cannot serve at the swarm. The
// list is the one cached for announces that come too soon (refreshed at
// most once a second), so a crowd of such calls costs little. Nil when the
// tracker knows no such swarm, or its store fails (within
// Config.StoreTimeout; logged).
func (t *Tracker) Peers(root manifest.Hash, size int64, want int) []Peer {
	want = min(max(want, 0), MaxNumWant)
	if want == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.StoreTimeout)
	defer cancel()
	res, err := t.store.Peers(ctx, root, size, want, t.cfg.Now())
	if err != nil {
		t.metrics.failed.Add(1)
		t.log.Warn("peers lookup failed: the store did not answer", "root", root.String(), "err", err)
		return nil
	}
	t.metrics.countRemoved(&res.Removed)
	return res.Peers
}

// SwarmSize estimates the peers in the swarm of the file with this root
// and size, and the seeds among them, as an announce's answer would,
// without counting anyone in: for an origin's dashboard. ok is false when
// the tracker knows no such swarm, or its store fails (within
// Config.StoreTimeout; counted, not logged: a dashboard asks every
// second).
func (t *Tracker) SwarmSize(root manifest.Hash, size int64) (peers, seeds int, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.StoreTimeout)
	defer cancel()
	res, err := t.store.Peers(ctx, root, size, 1, t.cfg.Now())
	if err != nil {
		t.metrics.failed.Add(1)
		return 0, 0, false
	}
	t.metrics.countRemoved(&res.Removed)
	return res.SwarmSize, res.Complete, res.SwarmSize > 0
}
