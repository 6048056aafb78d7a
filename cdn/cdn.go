// Package cdn is stampede's CDN mode, "stampede cdn": cache nodes that
// cooperate as CoDeeN's and CoBlitz's did, so a cluster of them fetches each
// file from its origin about once however many clients ask.
//
// Any node answers any client, by URL prefix (GET /http://origin/path) or
// as a reverse proxy for configured origins (by Host). A file travels as
// chunks: the pieces of its manifest when the origin publishes one (every
// chunk verified), fixed byte ranges otherwise (the validators checked on
// every range, the whole file against Repr-Digest when the origin gives
// one). Each chunk has an owner among the healthy nodes, by rendezvous
// hashing with bounded loads (hrw.go); only the owner fetches a chunk from
// the origin, once however many ask at once (collapsed forwarding), the
// others fetch it from the owner, a slow owner is bypassed for the next
// node in the chunk's order (re-forwarding), and the overflow of a hot
// chunk makes its runners-up replicas. The node a client reached streams
// it the file in order, fetching a congestion-controlled window of chunks
// at once (window.go), as CoBlitz's agent did.
//
// Files: cdn.go (Config, Node, routing), hrw.go (owners), members.go
// (heartbeats' verdicts and peer choice), peers.go (the heartbeats),
// window.go (the agent's window and deadlines), access.go (who may ask
// what), meta.go (a file's description and HTTP caching rules), chunk.go
// (getting one chunk), flight.go (collapsed forwarding), agent.go
// (answering a client), store.go (the on-disk cache), metrics.go (metrics,
// status). docs/cdn.md describes it for users.
package cdn

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/originclient"
)

// Config configures a Node. Zero fields take the documented defaults.
type Config struct {
	// Self is this node's HOST:PORT as the other nodes reach it (its
	// entry in Nodes). Required.
	Self string
	// Nodes lists every node of the cluster as HOST:PORT; it may name
	// Self, so that every node can be given the same list.
	Nodes []string
	// CacheDir holds the chunk cache (required); CacheSize bounds it in
	// bytes (default 10 GiB).
	CacheDir  string
	CacheSize int64
	// Origins maps a host name clients use (the Host of their requests)
	// to the origin that serves it, a reverse proxy's backends
	// (--origin www.example.com=http://10.0.0.5): a scheme and a host,
	// no path. The origin is asked with that Host (and, over https, that
	// server name).
	Origins map[string]*url.URL
	// AllowOrigins are the other origins a request by URL prefix may
	// name, as HOST:PORT, or HOST for ports 80 and 443.
	AllowOrigins []string
	// Allow are the client networks served (default DefaultAllow:
	// loopback).
	Allow []netip.Prefix
	// Key, if set, signs this node's requests to the others, and the
	// others' must carry its signature; without it, node requests are
	// taken only from the addresses of Nodes. Every node has the same key.
	Key ed25519.PrivateKey
	// ChunkSize is the chunk of a file without a manifest (default 1 MiB;
	// a manifest's chunks are its pieces).
	ChunkSize int64
	// LoadFactor bounds a node's chunk requests in flight, as a multiple
	// of the mean (default DefaultLoadFactor, 1.25).
	LoadFactor float64
	// HotThreshold is how many of its clients' requests make a chunk hot
	// at a node, which then keeps a copy (default 3).
	HotThreshold int
	// Window is the chunks a client starts with in flight (default 4);
	// it grows to MaxWindow (default 16) and MaxWindowBytes (default 16 MiB).
	Window, MaxWindow int
	MaxWindowBytes    int64
	// MinDeadline and MaxDeadline bound a chunk fetch's deadline before
	// it is re-forwarded (defaults 2s and 15s; in between, four times the
	// smoothed time chunks take).
	MinDeadline, MaxDeadline time.Duration
	// FetchTimeout bounds one fetch from an origin or a node that clients
	// wait on together (default 60s).
	FetchTimeout time.Duration
	// BeatInterval is the time between heartbeats to each node (default
	// 1s); a beat not answered within BeatTimeout (default 1.5s) failed.
	// A refused connection fails at once: a dead node leaves in about
	// Members.DownBeats intervals, a hung one in Members.DownAfter.
	BeatInterval, BeatTimeout time.Duration
	// Members tunes when nodes leave and return, and peer choice.
	Members MembersConfig
	// LookupIP, if set, looks up the host names of origins, for every
	// connection to an origin (stampede cdn --dns: the node's CoDNS
	// forwarder, codns.Forwarder.LookupNetIP); default, the system's
	// resolver. The addresses are dialed in turn.
	LookupIP func(ctx context.Context, network, host string) ([]netip.Addr, error)
	// Collector, if set, is served among the node's metrics (stampede cdn
	// --dns: the forwarder's stampede_dns_ series).
	Collector prometheus.Collector
	// RTT, if set, replaces the measured round-trip time of a beat to a
	// node (tests; the testbed has no latency emulation).
	RTT func(node string, measured time.Duration) time.Duration
	// Logger receives the node's log (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Paths of the nodes' own pages and requests.
const (
	pathPrefix = "/.cdn/"
	pathBeat   = "/.cdn/beat"
	pathMeta   = "/.cdn/meta"
	pathChunk  = "/.cdn/chunk"
	pathStatus = "/.cdn/status"
	pathMetric = "/.cdn/metrics"
)

// Node is one cache node.
type Node struct {
	cfg            Config
	log            *slog.Logger
	self           string
	allow          []netip.Prefix
	allowedOrigins map[string]bool
	nodeAddrs      map[netip.Addr]bool
	pub            ed25519.PublicKey
	client         *http.Client
	nodeClient     *http.Client
	oc             *originclient.Client
	store          *store
	met            *series
	metaFlights    flights[*meta]
	chunkFlights   flights[[]byte]  // a node's fetch of a chunk (localChunk)
	entryFlights   flights[fetched] // its clients' (clientChunk)
	served         atomic.Int64     // node requests for chunks in progress
	lie            atomic.Bool      // tests: corrupt every chunk and manifest served to nodes
	lieValidators  atomic.Bool      // tests: forge the ETag of every meta and chunk served to nodes
	slow           atomic.Int64     // tests: how long (ns) each chunk served to nodes waits first

	mu        sync.Mutex // guards the following
	members   *Members
	ringCache Ring
	bal       Balancer
	metas     map[string]*meta // by variant key
	byID      map[string]*meta
	varyNames map[string][]string
	manifests map[string]*manifest.Manifest
	heat      map[string]int
	owners    []ownerNote // the latest chunks placed, for the status page
	// checked holds, by variant key, the meta ID (or "uncacheable") of
	// the latest meta a node handed over that this node checked with the
	// origin itself.
	checked map[string]string
	// distrusted are the IDs of files whose whole body failed its
	// Repr-Digest here: their chunks come from the origin alone.
	distrusted map[string]bool

	stop    context.CancelFunc
	stopped chan struct{}
	// life ends with Close: the fetches clients wait for together run on
	// it, not on any one client's context.
	life    context.Context
	endLife context.CancelFunc
}

// New makes a node; Start runs its heartbeats, ServeHTTP answers.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Self == "" {
		return nil, errors.New("cdn: Config.Self is required")
	}
	if cfg.CacheDir == "" {
		return nil, errors.New("cdn: Config.CacheDir is required")
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 10 << 30
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 1 << 20
	}
	if cfg.HotThreshold <= 0 {
		cfg.HotThreshold = 3
	}
	if cfg.Window <= 0 {
		cfg.Window = 4
	}
	if cfg.MaxWindow <= 0 {
		cfg.MaxWindow = 16
	}
	if cfg.MaxWindowBytes <= 0 {
		cfg.MaxWindowBytes = 16 << 20
	}
	if cfg.MinDeadline <= 0 {
		cfg.MinDeadline = 2 * time.Second
	}
	if cfg.MaxDeadline <= 0 {
		cfg.MaxDeadline = 15 * time.Second
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = time.Minute
	}
	if cfg.BeatInterval <= 0 {
		cfg.BeatInterval = time.Second
	}
	if cfg.BeatTimeout <= 0 {
		cfg.BeatTimeout = 1500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	origins := make(map[string]*url.URL, len(cfg.Origins))
	for name, u := range cfg.Origins {
		if u == nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
			return nil, fmt.Errorf("cdn: origin %s: want an http or https URL without a path", name)
		}
		origins[strings.ToLower(name)] = u
	}
	cfg.Origins = origins
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConnsPerHost = 64
	tr.DialContext = originDialer(origins, &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}, cfg.LookupIP)
	client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	n := &Node{cfg: cfg, log: cfg.Logger, self: cfg.Self, allow: cfg.Allow, client: client,
		metas: make(map[string]*meta), byID: make(map[string]*meta), varyNames: make(map[string][]string),
		manifests: make(map[string]*manifest.Manifest), heat: make(map[string]int), stopped: make(chan struct{}),
		checked: make(map[string]string), distrusted: make(map[string]bool)}
	if len(n.allow) == 0 {
		n.allow = DefaultAllow
	}
	n.life, n.endLife = context.WithCancel(context.WithoutCancel(ctx))
	n.bal.Factor = cfg.LoadFactor
	var err error
	// A configured origin is allowed under its name, on its scheme's port.
	names := make(map[string]*url.URL, len(origins))
	for name, u := range origins {
		names[name] = &url.URL{Scheme: u.Scheme, Host: name}
	}
	if n.allowedOrigins, err = allowedOriginSet(names, cfg.AllowOrigins); err != nil {
		return nil, fmt.Errorf("cdn: %w", err)
	}
	nodes := slices.Clone(cfg.Nodes)
	if !slices.Contains(nodes, n.self) {
		if len(nodes) > 0 {
			n.log.Warn("this node is not on the node list: the others will not ask it for chunks", "self", n.self)
		}
		nodes = append(nodes, n.self)
	}
	if cfg.Key != nil {
		n.pub = cfg.Key.Public().(ed25519.PublicKey)
	} else if n.nodeAddrs, err = resolveNodeAddrs(ctx, nodes); err != nil {
		return nil, fmt.Errorf("cdn: %w", err)
	}
	ntr := http.DefaultTransport.(*http.Transport).Clone()
	ntr.Proxy = nil
	ntr.MaxIdleConnsPerHost = 64
	ntr.DialContext = (&net.Dialer{Timeout: 2 * cfg.BeatTimeout}).DialContext
	n.nodeClient = &http.Client{Transport: ntr}
	n.oc = originclient.New(originclient.Config{Client: client, Logger: cfg.Logger, Retries: 1})
	if n.store, err = openStore(cfg.CacheDir, cfg.CacheSize, cfg.Logger); err != nil {
		return nil, fmt.Errorf("cdn: %w", err)
	}
	n.members = NewMembers(cfg.Members, n.self, nodes, cfg.Now())
	n.ringCache = n.members.Ring()
	n.met = newSeries(n)
	return n, nil
}

func (n *Node) now() time.Time { return n.cfg.Now() }

// ring is the ring of healthy nodes as this node sees it.
func (n *Node) ring() Ring {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ringCache
}

func (n *Node) memberFailed(node string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.members.Failed(node, n.now()) {
		n.ringChangedLocked()
	}
}

func (n *Node) ringChangedLocked() {
	n.ringCache = n.members.Ring()
	n.log.Info("ring changed", "nodes", n.ringCache.Nodes())
}

// Start runs the heartbeats until Close or ctx ends.
func (n *Node) Start(ctx context.Context) {
	ctx, n.stop = context.WithCancel(ctx)
	go func() {
		defer close(n.stopped)
		n.beatLoop(ctx)
	}()
}

// Close stops the heartbeats and the fetches under way, and waits for
// them to end.
func (n *Node) Close() error {
	if n.stop != nil {
		n.stop()
		<-n.stopped
	}
	n.endLife()
	n.metaFlights.wait()
	n.chunkFlights.wait()
	n.entryFlights.wait()
	n.nodeClient.CloseIdleConnections()
	n.client.CloseIdleConnections()
	return nil
}

// ServeHTTP answers clients and nodes.
func (n *Node) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		n.met.requests[answerRefused].Inc()
		http.Error(w, "a cdn node does not tunnel (CONNECT)", http.StatusMethodNotAllowed)
		return
	}
	if !r.URL.IsAbs() && strings.HasPrefix(r.URL.Path, pathPrefix) {
		n.serveOwn(w, r)
		return
	}
	if !n.clientAllowed(r) {
		n.met.requests[answerRefused].Inc()
		http.Error(w, "this cdn node does not serve your network (see --allow)", http.StatusForbidden)
		return
	}
	if r.URL.Path == "/metrics" && !r.URL.IsAbs() && n.cfg.Origins[hostOnly(r.Host)] == nil {
		n.met.handler.ServeHTTP(w, r)
		return
	}
	u, err := n.target(r)
	if err != nil {
		n.met.requests[answerRefused].Inc()
		status := http.StatusBadRequest
		if rf, ok := errors.AsType[*refusal](err); ok {
			status = rf.status
		}
		http.Error(w, err.Error(), status)
		return
	}
	n.serveClient(w, r, u)
}

func hostOnly(hostport string) string {
	h := strings.ToLower(hostport)
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// serveOwn answers the node's own pages: node requests, and the status
// and metrics (to clients and nodes).
func (n *Node) serveOwn(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case pathStatus, pathMetric:
		if !n.clientAllowed(r) && n.nodeAllowed(r) != nil {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		if r.URL.Path == pathStatus {
			n.serveStatus(w, r)
		} else {
			n.met.handler.ServeHTTP(w, r)
		}
		return
	case pathBeat, pathMeta, pathChunk:
	default:
		http.NotFound(w, r)
		return
	}
	if err := n.nodeAllowed(r); err != nil {
		n.met.nodeRefused.Inc()
		http.Error(w, "not a node's request: "+err.Error(), http.StatusForbidden)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case pathBeat:
		n.serveBeat(w, r)
	case pathMeta:
		n.serveNodeMeta(w, r)
	case pathChunk:
		n.serveNodeChunk(w, r)
	}
}

// corrupt is data as served to nodes: itself, or, in tests of a lying
// node, a copy with a byte flipped.
func (n *Node) corrupt(data []byte) []byte {
	if !n.lie.Load() || len(data) == 0 {
		return data
	}
	out := slices.Clone(data)
	out[len(out)/2] ^= 0xff
	return out
}

// forge is m as served to nodes: itself, or, in tests of a lying node, a
// copy whose manifest is of other bytes (zeros) of the same size or,
// without a manifest, with another ETag.
func (n *Node) forge(m *meta) *meta {
	if !m.Cacheable {
		return m
	}
	if m.m == nil && n.lieValidators.Load() {
		out := *m
		out.ETag = n.forgeValidator(m.ETag)
		sum := sha256.Sum256([]byte(out.ID + out.ETag))
		out.ID = "r" + hex.EncodeToString(sum[:16])
		return &out
	}
	if !n.lie.Load() || m.m == nil {
		return m
	}
	fake, err := manifest.FromReader(io.LimitReader(zeros{}, m.Size), m.Size, m.m.Name)
	if err != nil {
		return m
	}
	out := *m
	out.m = fake
	out.Manifest, _ = fake.MarshalJSON()
	out.ID = "m" + hex.EncodeToString(fake.Root[:]) + "-" + strconv.FormatInt(fake.Size, 10)
	return &out
}

// forgeValidator is etag as served to nodes: itself, or, in tests of a
// lying node, another.
func (n *Node) forgeValidator(etag string) string {
	if !n.lieValidators.Load() {
		return etag
	}
	return `"forged"`
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
