// Package gateway is stampede's local HTTP proxy, "stampede gateway": it
// lets programs that know nothing of stampede (browsers, curl, apt, pip)
// get files through the swarm, as CoBlitz's agent and Flashback's
// in-browser server did.
//
// A client uses it as a forward proxy (absolute-form request URIs, the
// http_proxy convention) or by URL prefix (GET /https://origin/path). For
// each GET or HEAD the gateway first asks the origin with HEAD; when the
// answer links a manifest (Link: <...>; rel="stampede-manifest", see
// docs/architecture.md), the file is downloaded by a swarm node (package
// node) into an on-disk cache, every piece verified (package store), and
// streamed to the client in order as soon as the pieces it needs are in:
// the node is told to fetch the pieces just ahead of each reader first
// (node.Prefer), and the bytes go from the cache file to the socket
// (sendfile), so memory stays bounded by a window, not by the file size.
// Range and conditional requests are answered from the manifest's
// validators by http.ServeContent. Everything else (other origins, other
// methods, requests with credentials) is proxied straight through, and
// CONNECT tunnels are spliced untouched.
//
// Completed files stay in the cache (bounded in bytes, least recently used
// evicted first, never while being read), and the gateway seeds the most
// recently used of them to their swarms. For an HTML page whose origin
// publishes a bundle (rel="stampede-bundle"), the page and its same-origin
// assets come through one swarm download of the bundle (bundle.go).
//
// Files: gateway.go (Config, routing), guard.go (what the gateway
// refuses: rebinding Hosts, CONNECT ports, private targets), metrics.go
// (metrics, health and the gateway's own pages), passthrough.go (the
// plain proxy),
// connect.go (CONNECT), swarmed.go (answering from the swarm), object.go (one
// cached file and its node), cache.go (the cache and the seeding bound),
// reader.go (the body reader), bundle.go (pages).
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-dev/stampede/internal/dashboard"
	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/internal/uplink"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/originclient"
)

// Defaults for the zero fields of Config.
const (
	DefaultListen    = "127.0.0.1:8642"
	DefaultCacheSize = 10 << 30
	DefaultWindow    = 32 << 20
	DefaultMaxSeeds  = 4
)

// Header is the response header saying how the gateway answered: "swarm"
// (a manifest-backed file, from the cache and the swarm), "bundle" (a page
// or an asset from a page bundle) or "direct" (proxied straight through).
const Header = "Stampede-Gateway"

// Config configures a Gateway. Zero values take the documented defaults.
type Config struct {
	// CacheDir holds downloaded files (default DefaultCacheDir()). Files
	// complete there survive restarts; partial ones do not. One gateway
	// per directory.
	CacheDir string
	// CacheSize bounds the bytes of files kept in CacheDir (default
	// DefaultCacheSize). A file that does not fit, even after evicting
	// every file not being read, is proxied straight through instead.
	CacheSize int64
	// Window is how far ahead of each reader, in bytes, pieces are fetched
	// before all others (default DefaultWindow; at least two pieces).
	Window int64
	// MaxSeeds bounds the complete files seeded to their swarms at once,
	// the most recently used ones (default DefaultMaxSeeds). NoSeeds seeds
	// none.
	MaxSeeds int
	NoSeeds  bool
	// PeerListen is the address each swarm node accepts peers on
	// (default ":0": every interface, a port per file) when Node.Host is
	// nil. Such a port answers any handshake with its file's, so whoever
	// connects learns the root it serves; a node.Host (as "stampede
	// gateway" and the daemon use) answers only handshakes naming a swarm
	// it runs (docs/gateway.md, What the gateway exposes).
	PeerListen string
	// UploadRate caps the bytes per second sent to peers, all files
	// together (0: unlimited).
	UploadRate int64
	// Transport reaches origins. Default: a clone of http.DefaultTransport
	// that goes through the upstream proxy (UpstreamProxy, else the
	// environment's, never the gateway itself: upstream.go), never
	// decompresses (bytes must arrive as hashed) and dials through the
	// check of AllowPrivateTargets (guard.go). A Transport given here is
	// used as it is: that check is then the embedder's.
	Transport *http.Transport
	// UpstreamProxy, if set, carries every request to origins and
	// trackers; otherwise HTTPS_PROXY, HTTP_PROXY and NO_PROXY do
	// (http.ProxyFromEnvironment: requests to loopback go direct).
	UpstreamProxy *url.URL
	// AllowHosts are host names, besides IP literals, localhost (and
	// *.localhost) and the machine's host name, that requests in origin
	// form (by URL prefix, or for the gateway's own pages) may carry in
	// Host; others get 403, as DNS rebinding sends them (guard.go).
	// Forward-proxy requests and CONNECT are not checked.
	AllowHosts []string
	// ConnectPorts are the ports CONNECT tunnels may go to (default
	// DefaultConnectPorts: 443); others get 403.
	ConnectPorts []uint16
	// AllowPrivateTargets lets a gateway that Serves beyond loopback
	// connect to loopback, link-local and private addresses (origins,
	// trackers, tunnels) for its clients. On loopback they are always
	// allowed. The addresses are checked as dialled, after DNS.
	AllowPrivateTargets bool
	// Node passes further settings to every node (scheduler tuning, a
	// dialer); its Manifest, Store, Origin, Trackers, ListenAddr,
	// UploadLimit, SeedTime, OnPiece and OnComplete are set here.
	Node node.Config
	// Status, when set, answers a browser's GET of "/" on the gateway's
	// own address (the daemon's status page), and of dashboard.Path and
	// below (its script, its stream); without it "/" gets a short help
	// text.
	Status http.Handler
	// Registry is where the gateway registers its series, and what its
	// /metrics serves (an embedder's series too, then: the daemon's).
	// Default: a registry of its own (package internal/metrics). One
	// gateway per registry.
	Registry *prometheus.Registry
	// Logger receives the gateway's log. Default: discard.
	Logger *slog.Logger
}

// DefaultCacheDir returns the default Config.CacheDir:
// os.UserCacheDir()/stampede/gateway.
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("gateway: no default cache directory (set one): %w", err)
	}
	return filepath.Join(dir, "stampede", "gateway"), nil
}

// Gateway is the proxy; it is an http.Handler. Create it with New, serve
// with Serve (or mount it on a server of your own, without a ServeMux: the
// request targets are URLs, not paths), and Close it when done.
type Gateway struct {
	cfg       Config
	log       *slog.Logger
	transport *http.Transport
	probes    *http.Client         // HEAD probes: no redirects followed
	fetches   *http.Client         // bundle indexes: redirects followed
	origins   *originclient.Client // manifests and pieces, over fetches
	trackers  *http.Client         // tracker announces, through the upstream proxy too
	upload    *ratelimit.Limiter
	pacer     *uplink.Pacer
	via       string    // our token in Via, to detect loops
	selfProxy sync.Once // warns once that the upstream proxy is ourselves
	proxy     *httputil.ReverseProxy

	allowHosts    map[string]struct{} // names Host may carry in origin form (guard.go)
	connectPorts  []uint16
	refusePrivate atomic.Bool             // serving beyond loopback: dials to private addresses refused
	kindOf        func(netip.Addr) string // addrKind; tests narrow it

	ctx    context.Context // ends every node on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // nodes and background removals

	cache *cache

	// mu guards the following; it is taken before cache.mu.
	mu         sync.Mutex
	closed     bool
	self       map[string]struct{} // addresses we listen on, to refuse loops
	proxyAddrs map[string]struct{} // upstream proxies' HOST:PORT, dialled unchecked
	urls       map[string]*urlEntry
	pages      map[string]*bundleRef // bundle members by request URL (bundle.go)
	tunnels    map[net.Conn]struct{} // client sides of CONNECT tunnels

	metrics *series
	// ownPages are the gateway's own pages by path (metrics.go).
	ownPages map[string]http.Handler
}

// New checks cfg, fills in its defaults, loads the cache index from
// CacheDir and returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.CacheSize < 0 || cfg.Window < 0 || cfg.UploadRate < 0 || cfg.MaxSeeds < 0 {
		return nil, errors.New("gateway: CacheSize, Window, UploadRate and MaxSeeds must not be negative")
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	switch {
	case cfg.NoSeeds:
		cfg.MaxSeeds = 0
	case cfg.MaxSeeds == 0:
		cfg.MaxSeeds = DefaultMaxSeeds
	}
	if cfg.PeerListen == "" {
		cfg.PeerListen = ":0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CacheDir == "" {
		dir, err := DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		cfg.CacheDir = dir
	}
	t := cfg.Transport
	if t == nil {
		t = http.DefaultTransport.(*http.Transport).Clone()
		t.DisableCompression = true
		t.MaxIdleConnsPerHost = 16
		t.ResponseHeaderTimeout = 60 * time.Second
	}
	var id [4]byte
	rand.Read(id[:])
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gateway{
		cfg:       cfg,
		log:       cfg.Logger,
		transport: t,
		probes: &http.Client{Transport: t, Timeout: 60 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		fetches:      &http.Client{Transport: t},
		trackers:     &http.Client{Transport: t, Timeout: 10 * time.Second},
		upload:       ratelimit.New(cfg.UploadRate),
		pacer:        uplink.New(),
		via:          "stampede-" + hex.EncodeToString(id[:]),
		ctx:          ctx,
		cancel:       cancel,
		self:         map[string]struct{}{},
		proxyAddrs:   map[string]struct{}{},
		allowHosts:   allowedHosts(cfg.AllowHosts),
		connectPorts: slices.Clone(cfg.ConnectPorts),
		kindOf:       addrKind,
		urls:         map[string]*urlEntry{},
		pages:        map[string]*bundleRef{},
		tunnels:      map[net.Conn]struct{}{},
		metrics:      newSeries(),
	}
	if len(g.connectPorts) == 0 {
		g.connectPorts = slices.Clone(DefaultConnectPorts)
	}
	if cfg.Transport == nil {
		t.Proxy = g.proxyFor(cfg.UpstreamProxy)
		t.DialContext = g.dialUpstream
	}
	g.origins = originclient.New(originclient.Config{Client: g.fetches, Logger: cfg.Logger, Retries: originclient.DefaultRetries})
	g.proxy = g.reverseProxy()
	c, err := openCache(g, cfg.CacheDir, cfg.CacheSize)
	if err != nil {
		cancel()
		return nil, err
	}
	g.cache = c
	if err := g.initMetrics(); err != nil {
		cancel()
		c.close()
		return nil, err
	}
	g.spawn(func() { c.verifyAll(g.ctx) })
	return g, nil
}

// Serve answers requests on ln until ctx is done, then closes the
// listener and the connections in flight and returns nil. It returns early
// with an error if ln fails. Requests to ln's own address are refused as
// loops. When ln is beyond loopback, Serve warns, and from then on the
// gateway refuses loopback, link-local and private targets unless
// Config.AllowPrivateTargets (guard.go).
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	g.mu.Lock()
	g.self[ln.Addr().String()] = struct{}{}
	g.mu.Unlock()
	if beyondLoopback(ln.Addr()) {
		if g.cfg.AllowPrivateTargets {
			g.log.Warn("the gateway listens beyond loopback: whoever reaches it can use it as a proxy, to private addresses too ("+flagAllowPrivate+")", "addr", ln.Addr())
		} else {
			g.refusePrivate.Store(true)
			// Connections pooled before now were not checked.
			g.transport.CloseIdleConnections()
			g.log.Warn("the gateway listens beyond loopback: whoever reaches it can use it as a proxy; "+
				"loopback, link-local and private addresses are refused ("+flagAllowPrivate+" allows them)", "addr", ln.Addr())
		}
	}
	hs := &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	// A proxy's connections are long downloads and tunnels: nothing to
	// wait for.
	hs.Close()
	<-errc
	g.mu.Lock()
	for c := range g.tunnels {
		c.Close()
	}
	g.mu.Unlock()
	return nil
}

// spawn runs f on a goroutine Close waits for, unless the gateway is
// closed.
func (g *Gateway) spawn(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Go(f)
	return true
}

// Close stops every node (leaving the swarms), closes the cache's files
// and waits. Call it once the handler is no longer used.
func (g *Gateway) Close() error {
	g.mu.Lock()
	g.closed = true
	for c := range g.tunnels {
		c.Close()
	}
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
	g.cache.close()
	g.transport.CloseIdleConnections()
	return nil
}

// ServeHTTP routes a request: CONNECT to a tunnel, GET and HEAD to the
// swarm when the origin publishes a manifest, the gateway's own pages
// (/metrics, the health checks) to themselves, everything else straight
// through.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		g.metrics.requests[answerTunnel].Inc()
		g.tunnel(w, r)
		return
	}
	cw := &countingWriter{ResponseWriter: w}
	start := time.Now()
	defer g.metrics.count(cw, start)
	defer g.accessLog(cw, r, start)
	g.serve(cw, r)
}

// accessLog logs a request at debug level (stampede gateway -v): what was
// asked, how it was answered and how long it took.
func (g *Gateway) accessLog(w *countingWriter, r *http.Request, start time.Time) {
	if !g.log.Enabled(r.Context(), slog.LevelDebug) {
		return
	}
	g.log.Debug("request", "method", r.Method, "uri", r.RequestURI, "remote", r.RemoteAddr, "status", w.code,
		"bytes", w.bytes, "answer", w.Header().Get(Header), "took", time.Since(start))
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() && !g.hostAllowed(r.Host) {
		g.refuseHost(w, r)
		return
	}
	target, prefixed, err := g.target(w, r)
	if err != nil {
		g.badRequest(w, r, err)
		return
	}
	if target == nil {
		return // answered (the help text, or a redirect)
	}
	if g.loops(r, target.Host) {
		http.Error(w, "stampede gateway: this request would loop back to the gateway", http.StatusLoopDetected)
		return
	}
	req := &request{w: w, r: r, target: target, prefixed: prefixed}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Authorization") == "" {
		g.serveSwarmable(req)
		return
	}
	g.passThrough(req)
}

// request is one client request and where it goes.
type request struct {
	w        http.ResponseWriter
	r        *http.Request
	target   *url.URL
	prefixed bool // asked by URL prefix, not as a proxy
}

// target finds the URL a request is for: its absolute-form request URI,
// or the URL after the leading "/" in prefix form. A path-absolute request
// whose Referer is a prefixed page (a page's "/style.css") is redirected
// to the prefixed URL on the same origin; "/" gets a short help text. In
// both cases target returns nil, nil.
func (g *Gateway) target(w http.ResponseWriter, r *http.Request) (*url.URL, bool, error) {
	if r.URL.IsAbs() {
		u := *r.URL
		return checkTarget(&u, false)
	}
	raw := strings.TrimPrefix(r.RequestURI, "/")
	if rest, ok := cutScheme(raw); ok {
		u, err := url.Parse(rest)
		if err != nil {
			return nil, true, fmt.Errorf("bad URL after the prefix: %v", err)
		}
		return checkTarget(u, true)
	}
	// Only an origin-form target ("/path") is an asset of the Referer's
	// page: another ("*", an authority) joined to its host would name
	// another host.
	if base := g.prefixedReferer(r); base != nil && strings.HasPrefix(r.RequestURI, "/") {
		loc := "/" + base.Scheme + "://" + base.Host + r.RequestURI
		http.Redirect(w, r, loc, http.StatusTemporaryRedirect)
		return nil, false, nil
	}
	if h := g.page(r); h != nil {
		h.ServeHTTP(w, r)
		return nil, false, nil
	}
	if g.cfg.Status != nil && isStatusPath(r.URL.Path) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		g.cfg.Status.ServeHTTP(w, r)
		return nil, false, nil
	}
	if r.URL.Path == "/" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "stampede gateway\n\nUse it as a proxy:   curl -x http://%s http://example.org/file\nor by URL prefix:    curl http://%s/https://example.org/file\n", r.Host, r.Host)
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("%q is neither an absolute URL (proxy form) nor /http://... or /https://... (prefix form)", r.RequestURI)
}

// isStatusPath reports whether p is Config.Status's.
func isStatusPath(p string) bool {
	return p == "/" || p == dashboard.Path || strings.HasPrefix(p, dashboard.Path+"/")
}

// cutScheme recognises "http://", "https://" and, from clients that
// collapse double slashes, "http:/" and "https:/" at the start of s, and
// returns s with the double slash restored.
func cutScheme(s string) (string, bool) {
	for _, scheme := range []string{"http:", "https:"} {
		if len(s) < len(scheme) || !strings.EqualFold(s[:len(scheme)], scheme) {
			continue
		}
		rest := s[len(scheme):]
		switch {
		case strings.HasPrefix(rest, "//"):
			return scheme + rest, true
		case strings.HasPrefix(rest, "/"):
			return scheme + "/" + rest, true
		}
	}
	return "", false
}

func checkTarget(u *url.URL, prefixed bool) (*url.URL, bool, error) {
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, prefixed, fmt.Errorf("scheme %q: the gateway fetches http and https URLs", u.Scheme)
	}
	if u.Host == "" {
		return nil, prefixed, fmt.Errorf("URL %q has no host", u.String())
	}
	u.User = nil
	u.Fragment = ""
	return u, prefixed, nil
}

// prefixedReferer returns the origin of a prefixed Referer on this gateway,
// or nil.
func (g *Gateway) prefixedReferer(r *http.Request) *url.URL {
	ref, err := url.Parse(r.Referer())
	if err != nil || ref.Host != r.Host {
		return nil
	}
	rest, ok := cutScheme(strings.TrimPrefix(ref.Path, "/"))
	if !ok {
		return nil
	}
	u, err := url.Parse(rest)
	if err != nil || u.Host == "" {
		return nil
	}
	u.RawQuery = ref.RawQuery
	return u
}

// loops reports whether a request for host would come back to us: it is
// one of our listening addresses, or it already went through us.
func (g *Gateway) loops(r *http.Request, host string) bool {
	for _, v := range r.Header.Values("Via") {
		if strings.Contains(v, g.via) {
			return true
		}
	}
	return g.isSelf(host)
}

// isSelf reports whether host (IP:PORT) is an address of one of the
// gateway's listeners (listensOn). A target's host name is not looked up,
// which would add a lookup to every request: a request sent back to us
// under a name carries our Via. The upstream proxy's name is looked up
// (upstream.go): its requests would not carry it.
func (g *Gateway) isSelf(host string) bool {
	ap, err := netip.ParseAddrPort(host)
	if err != nil {
		return false
	}
	return g.listensOn(ap.Addr(), ap.Port(), interfaceAddrs)
}

func (g *Gateway) badRequest(w http.ResponseWriter, r *http.Request, err error) {
	g.log.Info("bad request", "uri", r.RequestURI, "err", err)
	http.Error(w, "stampede gateway: "+err.Error(), http.StatusBadRequest)
}
