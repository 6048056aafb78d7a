// Package origin is stampede's origin server, "stampede serve": it serves the
// files of a directory, or fronts an existing web server, with everything
// stampede's downloader relies on, and it stays calm under a flash crowd by
// refusing the work it cannot do well instead of doing all of it slowly.
//
// The HTTP contract it keeps (the downloader in package fetch is the other
// side):
//
//   - GET and HEAD of a file at path P answer with a strong ETag,
//     Last-Modified, Range and If-Range support, conditional requests as in
//     RFC 9110, and a header pointing at the file's manifest:
//     Link: </.well-known/stampede/manifest/P>; rel="stampede-manifest".
//     A 206 answering If-Range with its own validator (how swarm peers
//     fetch pieces) leaves out Content-Type, Content-Language,
//     Last-Modified, Accept-Ranges and Link, which its client has (RFC
//     9110 15.3.7; trimPartial); overload answers keep them.
//   - Full 200 responses carry Repr-Digest: sha-256=:...: (RFC 9530).
//   - /.well-known/stampede/manifest/P is the file's manifest (package
//     manifest), whose ETag and LastModified are the validators the file is
//     served with at that moment. It is never stale. A client that accepts
//     gzip (Accept-Encoding) gets it compressed (Vary: Accept-Encoding).
//     With ?piece_layer=0 it is the manifest's head (manifest.Manifest.Head):
//     the same without the piece hashes, which a swarm peer gets from its
//     neighbours (docs/protocol.md, section 5, GETLAYER), so that a crowd's manifests
//     do not take the origin's link at its start. A HEAD of the file with
//     Stampede-Want: manifest-head carries that head in
//     Stampede-Manifest-Head (base64) when the manifest is known already
//     (addManifestHead), sparing the client the request.
//   - Past MaxTransfers concurrent file bodies, a GET that would send one gets
//     an overload answer if it asked for one (Stampede-Capabilities:
//     overload): 206 with one piece of the origin's choosing, the swarm's
//     peers and the manifest's Link (overload.go, overloadanswer.go);
//     otherwise, or when no piece can be given, 503 Service Unavailable with
//     Retry-After. HEAD, 304, manifests and bundle indexes always pass.
//   - Each file version has an egress budget, MaxCopies copies per
//     BudgetWindow (budget.go): past it a swarm client (Stampede-
//     Capabilities: overload) gets only pieces no swarm client got in the
//     window, unless it says it downloads alone (Stampede-Suppliers: 0),
//     and otherwise 503 with Stampede-Budget: spent and the window's end
//     as Retry-After. Plain clients are never refused, and count. Every
//     body to a swarm client carries Stampede-Budget: what is left.
//   - An HTML page P of Dir links its bundle, the page and its same-origin
//     assets in one resource at /.well-known/stampede/bundle/P, served and
//     swarmed like a file, with its table of contents at
//     /.well-known/stampede/bundle-index/P (bundle.go).
//   - A path of Dir with a segment starting with a dot is not found by any
//     route, nor listed, nor a bundle's member, unless Config.Dotfiles;
//     /.well-known/ is exempt. Error bodies name no path and no system
//     error (errorAnswer): the log has them.
//   - /metrics is in the Prometheus text format.
//   - dashboard.Path (/.well-known/stampede/dashboard) is the live status
//     page (package internal/dashboard; dashboard.go). With AdminApart,
//     /metrics, the health checks and the dashboard are on AdminHandler
//     instead.
//   - With Config.Tracker, the tracker (package tracker) answers at
//     /.well-known/stampede/tracker/announce, and every manifest served names
//     it in its trackers, by the scheme and Host the request came with;
//     Config.Trackers are named too. Its metrics join /metrics.
//
// A manifest is computed once per version of a file (its path and
// validators), hashing the merkle tree and the whole-file SHA-256 at once,
// with concurrent requests for the same version sharing one computation. It is
// kept in memory and in CacheDir, so a restart does not hash again; CacheDir
// is swept of manifests of files gone or changed, and kept within
// CacheMaxBytes, least recently used first.
//
// Files: origin.go (Config, Server, routing), writer.go (the response writer
// every request goes through: accounting, shaping, admission, the write idle
// timeout), overload.go
// (the overload policy), handout.go (which piece an overload answer
// carries), overloadanswer.go (the answer), budget.go (the egress
// budget), dir.go (serving a directory),
// bundle.go and assets.go (bundles of HTML pages), upstream.go (fronting a
// web server), cache.go (the manifest cache), cachegc.go (keeping its
// directory bounded), trackers.go (trackers in manifests), metrics.go,
// dashboard.go (the live status page's snapshot).
package origin

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/dashboard"
	"github.com/stampede-dev/stampede/internal/health"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/internal/httpserve"
	"github.com/stampede-dev/stampede/internal/metrics"
	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/internal/sockopt"
	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/webpeer"
)

// ManifestContentType is the media type of a manifest response.
const ManifestContentType = "application/vnd.stampede.manifest+json"

// Defaults for the zero fields of Config.
const (
	DefaultMaxTransfers      = 64
	DefaultOverloadTransfers = 16
	DefaultOverloadCopies    = 1
	DefaultOverloadWindow    = 30 * time.Second
	DefaultMaxCopies         = 0 // no budget: see Config.MaxCopies
	DefaultBudgetWindow      = 5 * time.Minute
	DefaultResendAfter       = 3 * time.Second
	DefaultMemoryManifests   = 256
	DefaultCacheMaxBytes     = 256 << 20
	DefaultShutdownGrace     = 5 * time.Second
	DefaultWriteIdleTimeout  = 30 * time.Second
	DefaultBundleMaxAssets   = 128
	DefaultBundleMaxBytes    = 32 << 20
)

// Config configures a Server. Exactly one of Dir and Upstream is set.
type Config struct {
	// Dir is the directory whose files are served. Symbolic links are
	// followed only while they stay inside Dir.
	Dir string
	// Upstream is the web server to front: a request for /P is proxied to
	// Upstream's path joined with /P. Manifests are computed from the
	// upstream's content and revalidated with its ETag and Last-Modified.
	Upstream *url.URL

	// Dotfiles serves the files of Dir whose path has a segment starting
	// with a dot (.git/config, .env, a/.htpasswd), as nginx and Caddy
	// users expect not to by default: such a name is otherwise not found,
	// by every route (file, manifest, bundle, bundle index), not listed,
	// not part of a page's bundle and not warmed. /.well-known/ (RFC 8615)
	// is served anyway, but not the dot names below it. An Upstream
	// applies its own rules.
	Dotfiles bool
	// NoListing answers a directory of Dir without an index.html 404 Not
	// Found, with or without its trailing slash, instead of listing it.
	NoListing bool

	// Rate caps the bytes per second of all file bodies together. 0, the
	// default, means unlimited, and then bodies from Dir go out through
	// sendfile(2). Manifests and /metrics are not shaped: they are small and
	// they are what turns a crowd into a swarm.
	Rate int64
	// MaxTransfers is the most file bodies sent at once; a GET past it is
	// answered 503 with Retry-After. Default DefaultMaxTransfers.
	MaxTransfers int
	// RetryAfter is the Retry-After sent with a 503 or an overload answer.
	// 0, the default, estimates it from the load and spreads it so that the
	// clients turned away together do not come back together.
	RetryAfter time.Duration

	// Overload mode (overload.go). Past MaxTransfers, a GET from a client
	// that sends contract.CapabilitiesHeader with "overload" is answered 206 with one
	// piece of the origin's choosing, the swarm's peers and the manifest's
	// Link, instead of 503. OverloadTransfers is the most such answers sent
	// at once, on top of MaxTransfers: default DefaultOverloadTransfers;
	// negative turns overload mode off (capable clients get 503 too).
	OverloadTransfers int
	// OverloadCopies is how many times each piece of a file is handed out
	// per OverloadWindow at most; once they all have, capable clients get
	// 503 until the window ends. It bounds what overload mode costs to
	// OverloadCopies times the file per window. Defaults
	// DefaultOverloadCopies and DefaultOverloadWindow.
	OverloadCopies int
	OverloadWindow time.Duration

	// MaxCopies is the egress budget (budget.go): at most this many copies
	// of each file version go to swarm clients per BudgetWindow, every body
	// byte of the version counted, overload answers and plain clients'
	// included. Past it a swarm client is still served a piece not sent to
	// a swarm client this window, and so is one that says it downloads
	// alone (contract.SuppliersHeader 0); the others get 503 with
	// contract.BudgetHeader "spent" and the pieces from the swarm. Plain
	// clients are never refused. Overload answers count against it, and
	// past it carry only pieces not sent this window: OverloadCopies bounds
	// overload mode within it. At least 1 (every piece must get out); 0
	// or negative: no budget, the default (DefaultMaxCopies). Off by
	// default because a budget can hold a download back for the rest of
	// the window: past it, a piece already sent this window whose holders
	// have all left is refused to everyone who is not alone (in the
	// simulator, a pool of 60 Poisson arrivals took a mean 224 s with 1.5
	// copies, 1.15 s without).
	MaxCopies float64
	// BudgetWindow is the period MaxCopies counts over, from the first body
	// charged. Default DefaultBudgetWindow: minutes, to hold a whole flash
	// crowd (budget.go says why).
	BudgetWindow time.Duration

	// ResendAfter: a swarm peer's piece request whose piece and candidates
	// (pick.go) all went to swarm peers less than ResendAfter ago (from the
	// end of their bodies), or are still being sent to one, is answered
	// 503, "in swarm", rather than sent again: the peers they went to are
	// passing them on (never to a peer that knows no other peer: Stampede-
	// Reason origin:no-peers). 0 means DefaultResendAfter; negative sends
	// them again at once.
	ResendAfter time.Duration

	// BundleMaxAssets and BundleMaxBytes bound the bundle of an HTML page
	// (bundle.go): at most BundleMaxAssets assets after the page, and at
	// most BundleMaxBytes in all, the page included; assets that do not
	// fit are left out. Defaults DefaultBundleMaxAssets and
	// DefaultBundleMaxBytes.
	BundleMaxAssets int
	BundleMaxBytes  int64

	// CacheDir keeps computed manifests across restarts. Default
	// DefaultCacheDir(). It must not lie inside Dir: the server never writes
	// into what it serves. Servers may share it.
	CacheDir string
	// CacheMaxBytes bounds the manifest files in CacheDir, their sizes
	// added up: past it the least recently used go (cachegc.go), except
	// those any server sharing CacheDir used in the last two minutes.
	// Manifests of files that are gone or changed go whatever the bound.
	// Default DefaultCacheMaxBytes (256 MiB: a cache file takes about 800
	// bytes for a file of 100 KiB, 22 KB for 2 GiB, 1.1 MB for 100 GiB).
	CacheMaxBytes int64
	// MemoryManifests is how many manifests are kept in memory in front of
	// CacheDir. Default DefaultMemoryManifests.
	MemoryManifests int
	// Warm hashes every file under Dir in the background from New on, so
	// that first requests do not wait for a hash. Default off.
	Warm bool

	// AdminApart leaves /metrics, the health checks and the dashboard off
	// Handler: they are served by AdminHandler on a listener of their own
	// (serve --admin), and a site's own /metrics is then a file like any
	// other.
	AdminApart bool

	// Tracker, if set, is served at tracker.WellKnownPath and named first
	// in the trackers of every manifest served, as
	// SCHEME://HOST/.well-known/stampede/tracker/announce with the scheme and
	// Host of the manifest request. Its metrics join /metrics.
	Tracker *tracker.Tracker
	// Trackers are announce URLs (http or https) named in the trackers of
	// every manifest served, after Tracker's.
	Trackers []string

	// Transport makes the requests to Upstream. Default: a clone of
	// http.DefaultTransport keeping more idle connections per host.
	Transport http.RoundTripper
	// WriteIdleTimeout ends a response whose client takes none of its
	// bytes for this long (a write that makes no progress), freeing the
	// transfer slot it holds: a client that stops reading must not keep a
	// slot forever. A client that keeps reading is not cut: on the
	// sendfile path any byte it takes within the timeout renews it;
	// elsewhere each write, cut to what a client taking 2 KiB/s takes
	// within the timeout, must finish within it (writer.go). Default
	// DefaultWriteIdleTimeout; negative: no timeout.
	WriteIdleTimeout time.Duration
	// ShutdownGrace is how long Serve lets transfers in flight finish once
	// its context is done, before it closes their connections. Default
	// DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// SignKey, if set, signs the manifests served: their answers carry
	// the signature of the file's root and size and the public key
	// (contract.SignatureHeader, contract.KeyHeader), which a client
	// given the key checks (get --trust-key).
	SignKey ed25519.PrivateKey
	// Private makes the files' swarms private (it needs SignKey): an
	// answer carrying a manifest or its head also carries a token
	// (contract.TokenHeader) for the peer ID the request names, which
	// the tracker and the peers ask for. The tracker must be given the
	// key too (tracker.Config.Tokens). The swarms are as private as the
	// manifests: whoever the origin serves one gets a token.
	Private bool
	// TokenTTL is how long a token admits its peer. Default
	// DefaultTokenTTL.
	TokenTTL time.Duration

	// WebPeer, if set, serves the browser peer (package webpeer) at
	// webpeer.Paths.
	WebPeer http.Handler

	// Logger receives the server's log. Default: discard.
	Logger *slog.Logger
}

// DefaultCacheDir returns the default Config.CacheDir:
// os.UserCacheDir()/stampede/manifests.
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("origin: no default manifest cache directory (set one): %w", err)
	}
	return filepath.Join(dir, "stampede", "manifests"), nil
}

// Server is an origin. Create it with New, serve with Serve or mount
// Handler on a server of your own, and Close it when done.
type Server struct {
	cfg     Config
	log     *slog.Logger
	handler http.Handler
	limiter *ratelimit.Limiter
	gate    *gate
	pacer   *pacer // turns for the answers to swarm origin fetches (pace.go)
	// handouts chooses the piece of each overload answer.
	handouts *handouts
	// picks remembers which pieces of each file went out (pick.go).
	picks perFile[fileKey, *sentLedger]
	// budgets are the files' egress budgets (budget.go); nil: none.
	budgets *budgets
	cache   *cache
	metrics *series
	reg     *prometheus.Registry // what /metrics serves
	// metricsHandler serves reg.
	metricsHandler http.Handler
	dash           *dashboard.Handler // dashboard.go
	bg             *background
	// hashSem bounds the manifests computed at once: each already hashes on
	// every CPU, and the disk or the upstream is shared.
	hashSem chan struct{}

	// Dir mode.
	root  *os.Root
	pages *pageCache // the assets found in HTML pages, for bundles
	// dirKey prefixes cache keys with the absolute directory, so servers of
	// different directories can share a CacheDir.
	dirKey string

	// Upstream mode.
	upstream *url.URL
	client   *http.Client
	proxy    *httputil.ReverseProxy
	probes   *group[validators]

	// Test hooks, set before the server handles requests.
	testHookHashed       func(name string) // after hashing a file of Dir, before checking it did not change
	testHookTransferDone func()            // after a file body's transfer slot is released
}

// concurrentHashes is the number of manifests computed at once.
const concurrentHashes = 2

// New checks cfg, fills in its defaults and returns a Server.
func New(cfg Config) (*Server, error) {
	if (cfg.Dir == "") == (cfg.Upstream == nil) {
		return nil, errors.New("origin: set exactly one of Dir and Upstream")
	}
	if cfg.Rate < 0 || cfg.MaxTransfers < 0 || cfg.RetryAfter < 0 || cfg.MemoryManifests < 0 || cfg.ShutdownGrace < 0 ||
		cfg.OverloadCopies < 0 || cfg.OverloadWindow < 0 || cfg.BundleMaxAssets < 0 || cfg.BundleMaxBytes < 0 ||
		cfg.CacheMaxBytes < 0 || cfg.BudgetWindow < 0 {
		return nil, errors.New("origin: Rate, MaxTransfers, RetryAfter, MemoryManifests, ShutdownGrace, " +
			"OverloadCopies, OverloadWindow, BundleMaxAssets, BundleMaxBytes, CacheMaxBytes and BudgetWindow must not be negative")
	}
	if cfg.Private && cfg.SignKey == nil {
		return nil, errors.New("origin: a private origin needs a signing key")
	}
	if cfg.TokenTTL < 0 {
		return nil, fmt.Errorf("origin: a negative token lifetime %v", cfg.TokenTTL)
	}
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	if err := checkTrackerURLs(cfg.Trackers); err != nil {
		return nil, err
	}
	if cfg.MaxTransfers == 0 {
		cfg.MaxTransfers = DefaultMaxTransfers
	}
	switch {
	case cfg.OverloadTransfers == 0:
		cfg.OverloadTransfers = DefaultOverloadTransfers
	case cfg.OverloadTransfers < 0:
		cfg.OverloadTransfers = 0 // off
	}
	if cfg.OverloadCopies == 0 {
		cfg.OverloadCopies = DefaultOverloadCopies
	}
	if cfg.OverloadWindow == 0 {
		cfg.OverloadWindow = DefaultOverloadWindow
	}
	switch {
	case cfg.MaxCopies == 0:
		cfg.MaxCopies = DefaultMaxCopies
	case cfg.MaxCopies < 0 || math.IsInf(cfg.MaxCopies, 1):
		cfg.MaxCopies = 0 // no budget
	case cfg.MaxCopies < 1 || math.IsNaN(cfg.MaxCopies):
		return nil, fmt.Errorf("origin: MaxCopies %v: a budget must let at least one copy of each file through per window (negative: no budget)", cfg.MaxCopies)
	}
	if cfg.BudgetWindow == 0 {
		cfg.BudgetWindow = DefaultBudgetWindow
	}
	if cfg.ResendAfter == 0 {
		cfg.ResendAfter = DefaultResendAfter
	}
	if cfg.BundleMaxAssets == 0 {
		cfg.BundleMaxAssets = DefaultBundleMaxAssets
	}
	if cfg.BundleMaxBytes == 0 {
		cfg.BundleMaxBytes = DefaultBundleMaxBytes
	}
	if cfg.MemoryManifests == 0 {
		cfg.MemoryManifests = DefaultMemoryManifests
	}
	if cfg.CacheMaxBytes == 0 {
		cfg.CacheMaxBytes = DefaultCacheMaxBytes
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	switch {
	case cfg.WriteIdleTimeout == 0:
		cfg.WriteIdleTimeout = DefaultWriteIdleTimeout
	case cfg.WriteIdleTimeout < 0:
		cfg.WriteIdleTimeout = 0 // none
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		limiter: ratelimit.New(cfg.Rate),
		metrics: newSeries(),
		bg:      newBackground(),
		hashSem: make(chan struct{}, concurrentHashes),
	}
	s.gate = newGate(cfg.MaxTransfers, cfg.OverloadTransfers, cfg.Rate, cfg.RetryAfter, s.log)
	s.pacer = newPacer(paceSlots)
	s.handouts = newHandouts(cfg.OverloadCopies, cfg.OverloadWindow)
	s.budgets = newBudgets(cfg.MaxCopies, cfg.BudgetWindow)
	s.reg = newRegistry(s.metrics, s.gate, cfg.Rate, cfg.MaxCopies, cfg.BudgetWindow, cfg.Tracker)
	s.metricsHandler = metrics.Handler(s.reg, s.log)
	s.dash = dashboard.New(dashboard.Config{Snapshot: s.snapshot, Logger: s.log})
	if err := s.init(); err != nil {
		s.Close()
		return nil, err
	}
	s.handler = s.routes()
	if cfg.Warm && s.root != nil {
		s.bg.spawn(func(ctx context.Context) { s.Warm(ctx) })
	}
	return s, nil
}

func (s *Server) init() error {
	var servedDir string
	if s.cfg.Dir != "" {
		abs, err := filepath.Abs(s.cfg.Dir)
		if err != nil {
			return fmt.Errorf("origin: %w", err)
		}
		if s.root, err = os.OpenRoot(abs); err != nil {
			return fmt.Errorf("origin: %w", err)
		}
		servedDir, s.dirKey = abs, "file:"+abs+"/"
		s.pages = newPageCache()
	} else if err := s.initUpstream(); err != nil {
		return err
	}
	return s.initCache(servedDir)
}

func (s *Server) initCache(servedDir string) error {
	dir := s.cfg.CacheDir
	if dir == "" {
		var err error
		if dir, err = DefaultCacheDir(); err != nil {
			return err
		}
	}
	if servedDir != "" && inside(dir, servedDir) {
		return fmt.Errorf("origin: manifest cache %s lies inside the served directory %s; choose another", dir, servedDir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("origin: manifest cache: %w", err)
	}
	s.cache = newCache(dir, s.cfg.MemoryManifests, s.cfg.CacheMaxBytes, s.bg, s.metrics, s.log)
	return s.bg.spawn(s.cache.sweeper)
}

// inside reports whether dir is sub or lies below it, following symbolic
// links as far as the paths exist.
func inside(dir, sub string) bool {
	rel, err := filepath.Rel(resolve(sub), resolve(dir))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// resolve makes p absolute and resolves the symbolic links of its longest
// existing prefix.
func resolve(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	rest := ""
	for {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// Handler returns the server's handler, with its own ServeMux.
func (s *Server) Handler() http.Handler { return s.handler }

// AdminHandler serves what an operator reads, apart from the site (see
// Config.AdminApart): /metrics, the health checks and the dashboard (at
// dashboard.Path, and at / for a person who types the address alone).
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metricsHandler)
	mux.Handle("GET "+contract.HealthzPath, health.Live())
	mux.Handle("GET "+contract.ReadyzPath, health.Ready(s.log, s.readyChecks()...))
	mux.Handle("GET /{$}", s.dash)
	s.mountDashboard(mux)
	return mux
}

// mountDashboard serves the dashboard on mux, outside route: its requests
// are not counted (dashboard.go).
func (s *Server) mountDashboard(mux *http.ServeMux) {
	mux.Handle("GET "+dashboard.Path, s.dash)
	mux.Handle("GET "+dashboard.Path+"/", s.dash)
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	if !s.cfg.AdminApart {
		mux.Handle("GET /metrics", s.route(kindMetrics, s.serveMetrics))
		live, ready := health.Live(), health.Ready(s.log, s.readyChecks()...)
		mux.Handle("GET "+contract.HealthzPath, s.route(kindHealth, func(w *respWriter, r *http.Request) { live.ServeHTTP(w, r) }))
		mux.Handle("GET "+contract.ReadyzPath, s.route(kindHealth, func(w *respWriter, r *http.Request) { ready.ServeHTTP(w, r) }))
		s.mountDashboard(mux)
	}
	mux.Handle("GET "+contract.ManifestPrefix+"/", s.route(kindManifest, s.serveManifest))
	for _, p := range webpeer.Paths {
		if s.cfg.WebPeer != nil {
			mux.Handle("GET "+p, s.cfg.WebPeer)
		}
	}
	if s.root != nil {
		mux.Handle("GET /", s.route(kindFile, s.serveDir))
		mux.Handle("GET "+contract.BundlePrefix+"/", s.route(kindFile, s.serveBundle))
		mux.Handle("GET "+contract.BundleIndexPrefix+"/", s.route(kindBundleIndex, s.serveBundleIndex))
		mux.Handle("/", s.route(kindOther, func(w *respWriter, r *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: this origin serves files with GET and HEAD", http.StatusMethodNotAllowed)
		}))
	} else {
		mux.Handle("/", s.route(kindFile, s.serveProxy))
	}
	t := s.cfg.Tracker
	if t == nil {
		return mux
	}
	// The tracker takes every method at its path (it answers 405 itself),
	// which a ServeMux pattern could not express beside "GET /" and "/":
	// neither a file nor the upstream answers there.
	announce := s.route(kindTracker, func(w *respWriter, r *http.Request) { t.ServeHTTP(w, r) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == tracker.WellKnownPath {
			announce.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// route adapts serve to http.Handler, passing it the response writer that
// accounts for the request.
func (s *Server) route(k kind, serve func(*respWriter, *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn := newIdleWriter(w, r, s.cfg.WriteIdleTimeout)
		rw := &respWriter{ResponseWriter: conn, conn: conn, s: s, req: r, kind: k, start: time.Now()}
		if k == kindFile && s.limiter != nil {
			rw.shaped = s.limiter.Writer(r.Context(), conn)
		}
		defer rw.finish()
		serve(rw, r)
	})
}

func (s *Server) serveManifest(w *respWriter, r *http.Request) {
	var (
		e   *entry
		err error
	)
	p := strings.TrimPrefix(r.URL.Path, contract.ManifestPrefix)
	if page, ok := strings.CutPrefix(p, contract.BundlePrefix+"/"); ok && s.root != nil {
		e, err = s.bundleManifest(r.Context(), page)
	} else if s.root != nil {
		e, err = s.dirManifest(r.Context(), p)
	} else {
		e, err = s.upstreamManifest(r.Context(), r)
	}
	if err != nil {
		s.manifestError(w, r, err)
		return
	}
	pub, err := e.bodyWith(s.trackersFor(r))
	if err != nil {
		s.manifestError(w, r, err)
		return
	}
	s.admit(e) // its tracker tracks the file from now on
	body := pub.body
	h := w.Header()
	h.Set("Content-Type", ManifestContentType)
	h.Set(contract.RootHeader, e.m.Root.String())
	// The file may change at any time: clients and caches must revalidate.
	h.Set("Cache-Control", "no-cache")
	h.Set("Vary", "Accept-Encoding")
	s.vouch(h, r, e.m)
	if r.URL.Query().Get(contract.ManifestHeadQuery) == "0" {
		// The head: a few hundred bytes, never worth compressing.
		body = pub.head
	} else if httphdr.AcceptsGzip(r.Header.Values("Accept-Encoding")) {
		// A crowd's manifests go out together at its start, before any
		// peer can pass anything on: gzip makes them a quarter smaller
		// (the piece hashes are base64, 6 bits a byte).
		body = pub.gzipped
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

// statusError is an error that answers a request with an HTTP status.
type statusError struct {
	code int
	err  error
	// public: err's text may go in the answer's body (publicErrorf).
	public bool
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

func statusErrorf(code int, format string, args ...any) error {
	return &statusError{code: code, err: fmt.Errorf(format, args...)}
}

// publicErrorf is statusErrorf for an error whose text tells the client
// why, and names no path and nothing of the server's.
func publicErrorf(code int, format string, args ...any) error {
	return &statusError{code: code, err: fmt.Errorf(format, args...), public: true}
}

// errorAnswer is the status and body that answer a request failed with
// err: the body is the status's text, or a public error's. What went wrong
// for which path goes to the log only: a path or an error of the system's
// in a body tells a stranger what lies where (a symbolic link that
// "escapes from parent" exists, and points out of the directory).
func errorAnswer(err error) (code int, body string) {
	se, ok := errors.AsType[*statusError](err)
	if !ok {
		return http.StatusInternalServerError, "internal error"
	}
	if se.public {
		return se.code, se.err.Error()
	}
	return se.code, strings.ToLower(http.StatusText(se.code))
}

func (s *Server) manifestError(w *respWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		s.log.Debug("manifest request abandoned by the client", "path", r.URL.Path, "err", err)
		return
	}
	code, body := errorAnswer(err)
	level := slog.LevelWarn
	if code == http.StatusNotFound {
		level = slog.LevelDebug
	}
	s.log.Log(r.Context(), level, "no manifest", "path", r.URL.Path, "status", code, "err", err)
	http.Error(w, "stampede: no manifest: "+body, code)
}

func (s *Server) serveMetrics(w *respWriter, r *http.Request) {
	s.metricsHandler.ServeHTTP(w, r)
}

// readyChecks are what the origin needs to do its work: the directory it
// serves readable (an unmounted disk, a permission changed), and the
// store of the tracker it embeds answering. An upstream's health is the
// upstream's own: a request that finds it down is answered 502.
func (s *Server) readyChecks() []health.Check {
	var checks []health.Check
	if s.root != nil {
		checks = append(checks, health.Check{Name: "directory", Run: health.DirReadable(func() (*os.File, error) { return s.root.Open(".") })})
	}
	if t := s.cfg.Tracker; t != nil {
		checks = append(checks, health.Check{Name: "tracker store", Run: t.Ready})
	}
	return checks
}

// notSentLowat bounds what the kernel holds unsent for each connection
// (sockopt.NotSentLowat). Without it a body's writes, sendfile's included,
// return once megabytes sit in the socket buffer: the transfer slot is
// freed and the bytes counted as sent while the client has none of them,
// so --max-transfers would not bound the responses in flight, and a
// manifest or tracker answer on a connection waits behind seconds of
// queued piece data. 128 KiB keeps a fast link busy between wakeups.
const notSentLowat = 128 << 10

// Serve answers requests on ln until ctx is done, then stops accepting,
// lets the requests in flight finish for up to ShutdownGrace, closes what
// remains and returns nil. It returns early with an error if ln fails.
// Connections that have not sent a request are closed at once
// (internal/httpserve).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler: s.handler,
		// Slow headers are an attack, slow bodies are a download: only the
		// former has a deadline. A body that makes no progress at all is
		// another matter: WriteIdleTimeout ends it (writer.go).
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c) // for pace.go
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateNew {
				sockopt.NotSentLowat(c, notSentLowat)
			}
		},
	}
	// A dashboard's stream never ends by itself: end it, rather than wait
	// out the grace for it.
	hs.RegisterOnShutdown(s.dash.EndStreams)
	if t := s.cfg.Tracker; t != nil {
		hs.RegisterOnShutdown(t.CloseWebSockets) // WebSocket signalling (tracker/ws.go)
	}
	stopping := func() {
		s.log.Info("shutting down", "transfers_active", s.gate.activeCount(), "grace", s.cfg.ShutdownGrace)
	}
	switch err := httpserve.Run(ctx, hs, ln, s.cfg.ShutdownGrace, stopping); {
	case errors.Is(err, httpserve.ErrGraceExpired):
		s.log.Warn("transfers were still running after the shutdown grace; their connections were closed",
			"transfers_active", s.gate.activeCount(), "grace", s.cfg.ShutdownGrace)
	case err != nil:
		return fmt.Errorf("origin: serve on %s: %w", ln.Addr(), err)
	}
	return nil
}

// Close stops background work (warming, manifest computations) and waits
// for it. Call it once Serve has returned or the Handler is no longer used.
func (s *Server) Close() error {
	s.bg.close()
	s.closeRoot()
	return nil
}

func (s *Server) closeRoot() {
	if s.root != nil {
		s.root.Close()
	}
}

// background runs the goroutines that outlive a request, such as a
// manifest computation a client has stopped waiting for, under one context
// that Close cancels.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex // guards closed and wg.Go against wg.Wait
	closed bool
	wg     sync.WaitGroup
}

func newBackground() *background {
	ctx, cancel := context.WithCancel(context.Background())
	return &background{ctx: ctx, cancel: cancel}
}

var errClosed = errors.New("origin: server closed")

// spawn runs f on a new goroutine unless the server is closed.
func (b *background) spawn(f func(ctx context.Context)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	b.wg.Go(func() { f(b.ctx) })
	return nil
}

func (b *background) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
}

// acquireHash waits for a turn to compute a manifest.
func (s *Server) acquireHash(ctx context.Context) (release func(), err error) {
	select {
	case s.hashSem <- struct{}{}:
		return func() { <-s.hashSem }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// hashWorkers is the goroutines manifest.FromReaderAt uses: the whole-file
// SHA-256 runs beside them on one more.
func hashWorkers() int { return max(1, runtime.GOMAXPROCS(0)-1) }
