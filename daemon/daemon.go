// Package daemon is "stampede daemon": one long-running process per host
// that holds any number of swarms on one peer port (package host), with
// one upload budget, a bounded cache, the gateway (package gateway) and a
// local control API (JSON over HTTP, on a unix socket by default) to add,
// pause, resume and remove downloads and seeds. docs/daemon.md documents
// the API.
//
// Server{Config}.Start wires it all; one test process can run several.
// The jobs (downloads and seeds) are kept in StateDir, so a restart
// resumes unfinished downloads and seeds what it seeded.
//
// Files: daemon.go (Config, Server, wiring), jobs.go (downloads and seeds),
// api.go (the control API and its access control), status.go (the status
// page), metrics.go (/metrics and the health checks).
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-dev/stampede/gateway"
	"github.com/stampede-dev/stampede/host"
	"github.com/stampede-dev/stampede/internal/dashboard"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/rtcpeer"
)

// Defaults for the zero fields of Config.
const (
	DefaultPeerListen   = ":7881"
	DefaultMaxSeeds     = 8
	DefaultMaxDownloads = 4
	DefaultMaxJobs      = 1024
	// APISocket is the API's socket name in StateDir.
	APISocket = "api.sock"
	// TokenFile holds the token of a TCP API, in StateDir.
	TokenFile = "api-token"
)

// Config configures a Server. Zero values take the documented defaults.
type Config struct {
	// StateDir holds the jobs (jobs.json), the API's socket and token, and
	// the cache by default (default DefaultStateDir()). Two daemons on one
	// host need two state directories.
	StateDir string
	// PeerListen is where peers of every swarm connect (default
	// DefaultPeerListen). PeerListener, when set, is used instead.
	PeerListen   string
	PeerListener net.Listener
	// WebRTC also carries peers over WebRTC data channels (package
	// rtcpeer): every swarm joins its trackers' signalling, so that
	// visitors' browsers reach the daemon's seeds (docs/browser.md).
	WebRTC bool
	// WebRTCAuto, with WebRTC, joins the signalling only where the
	// site's STUN sees the daemon behind a NAT (rtcpeer.Config.Auto,
	// docs/nat.md).
	WebRTCAuto bool
	// MaxUploadRate caps what all swarms send to peers together, bytes/s
	// (0: unlimited).
	MaxUploadRate int64
	// NoPacing sends to peers as fast as the uplink takes, without the
	// pacer that keeps the swarms' uploads together a little below its
	// measured capacity (package uplink). A daemon with a cluster file
	// (Push.Cluster) does not pace: the push shapes every link to the
	// capacity the file gives, less its reserve.
	NoPacing bool
	// API is the control API's address: a unix socket path, or HOST:PORT
	// for TCP (then with a token). Default: StateDir/api.sock. NoAPI runs
	// none (the gateway alone). APIListener, when set, is used instead.
	API         string
	APIListener net.Listener
	NoAPI       bool
	// APIToken is the bearer token a TCP API requires (default: read from
	// StateDir/api-token, or made and written there, mode 0600).
	APIToken string
	// Gateway is the gateway's address ("": none); GatewayListener, when
	// set, is used instead. CacheDir (default StateDir/cache), CacheSize,
	// MaxCacheSeeds and NoCacheSeeds are its cache's (gateway.Config).
	Gateway         string
	GatewayListener net.Listener
	CacheDir        string
	CacheSize       int64
	MaxCacheSeeds   int
	NoCacheSeeds    bool
	// GatewayWindow is how far ahead of each reader the gateway fetches
	// (gateway.Config.Window).
	GatewayWindow int64
	// GatewayUpstreamProxy is the gateway's upstream proxy
	// (gateway.Config.UpstreamProxy; nil: the environment's).
	GatewayUpstreamProxy *url.URL
	// GatewayAllowHosts, GatewayConnectPorts and GatewayAllowPrivateTargets
	// are what the gateway lets through: gateway.Config's AllowHosts,
	// ConnectPorts and AllowPrivateTargets.
	GatewayAllowHosts          []string
	GatewayConnectPorts        []uint16
	GatewayAllowPrivateTargets bool
	// AllowDirs are the directories downloads may write into and seeds be
	// read from (default: StateDir/downloads). Paths outside them, or that
	// reach outside through a symbolic link, are refused.
	AllowDirs []string
	// MaxSeeds bounds the complete downloads and seeds served at once, the
	// most recently used (default DefaultMaxSeeds).
	MaxSeeds int
	// MaxDownloads bounds the downloads under way at once; the others wait
	// in the queue, oldest first (default DefaultMaxDownloads).
	MaxDownloads int
	// MaxJobs bounds the jobs the daemon keeps (default DefaultMaxJobs):
	// each costs memory and, while it runs, a swarm.
	MaxJobs int
	// Push runs the cluster push service (push.go) when its Cluster is
	// set.
	Push PushConfig
	// Transport reaches origins and trackers (default: fetch.NewClient's).
	Transport http.RoundTripper
	Logger    *slog.Logger
}

// DefaultStateDir is $STATE_DIRECTORY (set by systemd's StateDirectory=),
// else $XDG_STATE_HOME/stampede, else ~/.local/state/stampede.
func DefaultStateDir() (string, error) {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		return strings.Split(d, ":")[0], nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "stampede"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("daemon: no default state directory (set one): %w", err)
	}
	return filepath.Join(home, ".local", "state", "stampede"), nil
}

// Server is a running daemon.
type Server struct {
	cfg    Config
	log    *slog.Logger
	host   *host.Host
	gw     *gateway.Gateway
	client *http.Client
	token  string
	allow  []string // AllowDirs, absolute with symbolic links resolved

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errc   chan error // the first failure of a server goroutine

	peerAddr, apiAddr, gatewayAddr net.Addr
	reg                            *prometheus.Registry // what /metrics serves, on the API and the gateway (metrics.go)
	dash, publicDash               *dashboard.Handler   // the status pages of the API and the gateway (status.go)

	push *pushSvc // the push service (push.go); nil when it does not run

	mu   sync.Mutex // guards the following, and every job's fields
	jobs map[string]*job
}

// Start checks cfg, opens the state, the listeners and the cache, resumes
// the jobs of an earlier run and serves until ctx ends or Close.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, client: httpClientFor(cfg.Transport), jobs: map[string]*job{}, errc: make(chan error, 4)}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.initMetrics()
	s.initDashboards()
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	// 0750: the socket's group must reach the socket inside.
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return nil, fmt.Errorf("daemon: state directory: %w", err)
	}
	for _, d := range cfg.AllowDirs {
		if cfg.NoAPI {
			break // no job can be added
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("daemon: allowed directory: %w", err)
		}
		r, err := filepath.EvalSymlinks(d)
		if err != nil {
			return nil, fmt.Errorf("daemon: allowed directory: %w", err)
		}
		// A download must never be able to write the daemon's own state
		// (its jobs, its token, its manifests) or its cache: no allowed
		// directory may hold them, nor lie inside the cache or the
		// manifests (the default, STATE-DIR/downloads, is beside them).
		for _, own := range []string{cfg.StateDir, cfg.CacheDir, filepath.Join(cfg.StateDir, "manifests")} {
			if err := os.MkdirAll(own, 0o750); err != nil {
				return nil, fmt.Errorf("daemon: %w", err)
			}
			o, err := filepath.EvalSymlinks(own)
			if err != nil {
				return nil, fmt.Errorf("daemon: %w", err)
			}
			inside := own != cfg.StateDir && within(o, r)
			if r == o || within(r, o) || inside {
				return nil, fmt.Errorf("daemon: allowed directory %s overlaps %s, which the daemon keeps for itself", d, own)
			}
		}
		s.allow = append(s.allow, r)
	}
	saved, err := loadJobs(cfg.StateDir)
	if err != nil {
		return nil, err
	}

	pl := cfg.PeerListener
	if pl == nil {
		if pl, err = net.Listen("tcp", cfg.PeerListen); err != nil {
			return nil, fmt.Errorf("daemon: peer port: %w", err)
		}
	}
	s.peerAddr = pl.Addr()
	hc := host.Config{Transports: []host.Transport{host.TCP(pl)}, UploadRate: cfg.MaxUploadRate,
		NoPacing: cfg.NoPacing || cfg.Push.Cluster != nil, Logger: s.log}
	if cfg.WebRTC {
		rt := rtcpeer.New(rtcpeer.Config{Auto: cfg.WebRTCAuto, Logger: s.log})
		hc.Transports, hc.OnAttach = append(hc.Transports, rt), rt.JoinNode
	}
	s.host, err = host.New(hc)
	if err != nil {
		pl.Close()
		return nil, err
	}
	s.goServe("peers", func() error { return s.host.Run(s.ctx) })

	// The saved jobs are known, and started, before the API answers, so
	// that its first requests see them (paths taken, the bounds) and
	// cannot start one twice.
	s.mu.Lock()
	for _, k := range saved {
		if k.State == StateRemoving {
			// Removed when the daemon stopped: gone, its data kept.
			os.Remove(s.manifestPath(k.ID))
			continue
		}
		s.jobs[k.ID] = &job{Job: k}
	}
	for _, j := range s.sortedLocked() {
		switch j.State {
		case StateQueued, StateDownloading, StateSeeding:
			s.startLocked(j, false)
		}
	}
	s.mu.Unlock()
	if cfg.Gateway != "" || cfg.GatewayListener != nil {
		if err := s.startGateway(); err != nil {
			return nil, err
		}
	}
	if cfg.Push.Cluster != nil {
		if err := s.startPush(); err != nil {
			return nil, err
		}
	}
	if !cfg.NoAPI {
		if err := s.startAPI(); err != nil {
			return nil, err
		}
	}
	s.log.Info("daemon started", "state", cfg.StateDir, "peers", s.peerAddr, "api", s.apiAddr, "gateway", s.gatewayAddr, "jobs", len(saved))
	return s, nil
}

func (c *Config) setDefaults() error {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.StateDir == "" {
		d, err := DefaultStateDir()
		if err != nil {
			return err
		}
		c.StateDir = d
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return fmt.Errorf("daemon: state directory: %w", err)
	}
	c.StateDir = abs
	if c.PeerListen == "" {
		c.PeerListen = DefaultPeerListen
	}
	if c.API == "" {
		c.API = filepath.Join(c.StateDir, APISocket)
	}
	if c.CacheDir == "" {
		c.CacheDir = filepath.Join(c.StateDir, "cache")
	}
	if len(c.AllowDirs) == 0 {
		c.AllowDirs = []string{filepath.Join(c.StateDir, "downloads")}
	}
	for i, d := range c.AllowDirs {
		if c.AllowDirs[i], err = filepath.Abs(d); err != nil {
			return fmt.Errorf("daemon: allowed directory %q: %w", d, err)
		}
	}
	if c.MaxSeeds < 0 || c.MaxDownloads < 0 || c.MaxJobs < 0 {
		return errors.New("daemon: MaxSeeds, MaxDownloads and MaxJobs must not be negative")
	}
	if c.MaxSeeds == 0 {
		c.MaxSeeds = DefaultMaxSeeds
	}
	if c.MaxDownloads == 0 {
		c.MaxDownloads = DefaultMaxDownloads
	}
	if c.MaxJobs == 0 {
		c.MaxJobs = DefaultMaxJobs
	}
	if c.MaxUploadRate < 0 || c.CacheSize < 0 {
		return errors.New("daemon: MaxUploadRate and CacheSize must not be negative")
	}
	return nil
}

// goServe runs a server goroutine; its failure stops the daemon (Wait
// returns it).
func (s *Server) goServe(what string, f func() error) {
	s.wg.Go(func() {
		if err := f(); err != nil && s.ctx.Err() == nil {
			select {
			case s.errc <- fmt.Errorf("daemon: %s: %w", what, err):
			default:
			}
			s.cancel()
		}
	})
}

func (s *Server) startGateway() error {
	ln := s.cfg.GatewayListener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.Gateway); err != nil {
			return fmt.Errorf("daemon: gateway: %w", err)
		}
	}
	g, err := gateway.New(gateway.Config{
		CacheDir: s.cfg.CacheDir, CacheSize: s.cfg.CacheSize, MaxSeeds: s.cfg.MaxCacheSeeds, NoSeeds: s.cfg.NoCacheSeeds, Window: s.cfg.GatewayWindow,
		UpstreamProxy: s.cfg.GatewayUpstreamProxy,
		AllowHosts:    s.cfg.GatewayAllowHosts, ConnectPorts: s.cfg.GatewayConnectPorts, AllowPrivateTargets: s.cfg.GatewayAllowPrivateTargets,
		Node: node.Config{Host: s.host}, Status: s.publicDash, Registry: s.reg, Logger: s.log.With("part", "gateway"),
	})
	if err != nil {
		ln.Close()
		return err
	}
	s.gw, s.gatewayAddr = g, ln.Addr()
	s.goServe("gateway", func() error { return g.Serve(s.ctx, ln) })
	return nil
}

// PeerAddr, APIAddr and GatewayAddr are the daemon's addresses (nil for a
// part not running).
func (s *Server) PeerAddr() net.Addr    { return s.peerAddr }
func (s *Server) APIAddr() net.Addr     { return s.apiAddr }
func (s *Server) GatewayAddr() net.Addr { return s.gatewayAddr }

// Token is the bearer token of a TCP API ("" for a unix socket).
func (s *Server) Token() string { return s.token }

// Wait blocks until the daemon stops (its context ended, Close, or a
// listener failed) and returns the failure, if any.
func (s *Server) Wait() error {
	<-s.ctx.Done()
	select {
	case err := <-s.errc:
		return err
	default:
		return nil
	}
}

// Close stops every job (their state is kept for the next start), the
// gateway, the API and the peer port, and waits for them.
func (s *Server) Close() error {
	s.cancel()
	s.wg.Wait()
	var err error
	if s.gw != nil {
		err = s.gw.Close()
	}
	s.mu.Lock()
	if len(s.jobs) > 0 {
		err = errors.Join(err, s.saveLocked())
	}
	s.mu.Unlock()
	return err
}

// confine returns path, absolute and clean, if it lies inside an allowed
// directory without a symbolic link leading out; else an error saying so.
// A path that does not exist yet is judged by its parent directory, which
// must exist. The last element must not be a symbolic link.
func (s *Server) confine(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("path %q is not absolute", path)
	}
	path = filepath.Clean(path)
	dir, name := filepath.Split(path)
	rdir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("path %q: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return "", fmt.Errorf("path %q is a symbolic link", path)
	}
	real := filepath.Join(rdir, name)
	if slices.ContainsFunc(s.allow, func(a string) bool { return within(a, real) }) {
		return real, nil
	}
	return "", fmt.Errorf("path %q is outside the allowed directories (%s)", path, strings.Join(s.cfg.AllowDirs, ", "))
}

// within reports whether path is dir or below it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && rel != "."
}
