package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/stampede-dev/stampede/daemon"
	"github.com/stampede-dev/stampede/gateway"
	"github.com/stampede-dev/stampede/internal/units"
)

func runDaemon(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "daemon", "[flags]", `Run one long-lived process that holds any number of swarms on one peer port,
with one upload budget: downloads and seeds added through its control API
(JSON over HTTP on a unix socket; "stampede get --daemon URL" uses it), the
gateway for unmodified clients (--gateway), and a status page at / of the API
and of the gateway. Its jobs live in --state-dir: a restart resumes unfinished
downloads and seeds again what it seeded. See docs/daemon.md.`)
	var (
		cfg              daemon.Config
		upStr, cacheSize string
		allow            []string
		quiet, verbose   bool
	)
	fs.StringVar(&cfg.StateDir, "state-dir", "", "keep jobs, the API socket and the cache in `DIR` (default $STATE_DIRECTORY, $XDG_STATE_HOME/stampede or ~/.local/state/stampede)")
	fs.StringVar(&cfg.PeerListen, "peer-listen", daemon.DefaultPeerListen, "accept the peers of every swarm on `HOST:PORT`")
	fs.StringVar(&upStr, "max-upload-rate", "0", "cap what all swarms upload together, `RATE` (0: unlimited)")
	fs.BoolVar(&cfg.NoPacing, "no-pacing", false, "upload to peers as fast as the uplink takes; by default the swarms' uploads keep a little below its measured capacity, so that the acknowledgements of the downloads get through (never with --cluster: the push shapes the links)")
	webRTC := webrtcFlag(fs.FlagSet)
	fs.StringVar(&cfg.API, "api", "", "serve the control API on unix socket `PATH` or on HOST:PORT (then with a token, in STATE-DIR/api-token; default STATE-DIR/api.sock)")
	fs.StringVar(&cfg.Gateway, "gateway", "", "run the gateway on `HOST:PORT` too (e.g. "+gateway.DefaultListen+"; beyond loopback, whoever reaches it can use it)")
	fs.StringVar(&cfg.CacheDir, "cache-dir", "", "the gateway's cache, `DIR` (default STATE-DIR/cache)")
	fs.StringVar(&cacheSize, "cache-size", "10GiB", "most bytes of files the gateway's cache keeps")
	fs.IntVar(&cfg.MaxCacheSeeds, "max-cache-seeds", gateway.DefaultMaxSeeds, "most files of the cache seeded at once, the most recently used (0: none)")
	fs.IntVar(&cfg.MaxSeeds, "max-seeds", daemon.DefaultMaxSeeds, "most downloads and seeds served at once, the most recently used")
	fs.IntVar(&cfg.MaxDownloads, "max-downloads", daemon.DefaultMaxDownloads, "most downloads under way at once; the others wait in a queue")
	fs.StringArrayVar(&allow, "allow-dir", nil, "downloads may write, and seeds read, only under `DIR` (repeatable; default STATE-DIR/downloads)")
	upstreamProxy := fs.String("upstream-proxy", "", upstreamProxyUsage)
	access := addGatewayAccessFlags(fs)
	push := addPushAgentFlags(fs)
	fs.BoolVarP(&quiet, "quiet", "q", false, "log only warnings and errors")
	fs.BoolVarP(&verbose, "verbose", "v", false, "log every job and connection decision, and every gateway request")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("daemon takes no arguments, got %q", pos)
	}
	if cfg.MaxUploadRate, err = units.ParseRate(upStr); err != nil {
		return usageErrorf("--max-upload-rate: %v", err)
	}
	rtcMode, err := parseWebRTC(*webRTC)
	if err != nil {
		return err
	}
	cfg.WebRTC, cfg.WebRTCAuto = rtcMode != webrtcOff, rtcMode == webrtcAuto
	if cfg.CacheSize, err = units.ParseSize(cacheSize); err != nil || cfg.CacheSize <= 0 {
		return usageErrorf("--cache-size %q: want a positive size such as 10GiB", cacheSize)
	}
	if cfg.MaxSeeds < 1 || cfg.MaxCacheSeeds < 0 || cfg.MaxDownloads < 1 {
		return usageErrorf("--max-seeds and --max-downloads must be at least 1, --max-cache-seeds at least 0")
	}
	cfg.NoCacheSeeds = cfg.MaxCacheSeeds == 0
	cfg.AllowDirs = allow
	if cfg.GatewayUpstreamProxy, err = parseProxy("--upstream-proxy", *upstreamProxy); err != nil {
		return err
	}
	if err := access.apply(&cfg); err != nil {
		return err
	}
	if err := push.apply(&cfg); err != nil {
		return err
	}
	cfg.Logger = e.logger(quiet, verbose)
	return serveDaemon(ctx, e, cfg)
}

// serveDaemon runs a daemon until ctx ends (SIGINT, SIGTERM) and reports
// where it listens.
func serveDaemon(ctx context.Context, e *env, cfg daemon.Config) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	s, err := daemon.Start(ctx, cfg)
	if err != nil {
		return withCode(exitIO, err)
	}
	if a := s.APIAddr(); a != nil {
		fmt.Fprintf(e.stderr, "daemon: API on %s, peers on %s\n", a, s.PeerAddr())
	}
	if a := s.PushAddr(); a != nil {
		fmt.Fprintf(e.stderr, "daemon: push service on %s\n", a)
	}
	if a := s.GatewayAddr(); a != nil {
		addr := a.String()
		fmt.Fprintf(e.stderr, "gateway on http://%s/ (curl -x http://%s URL, or http://%s/URL)\n", addr, addr, addr)
		if e.ready != nil {
			e.ready(addr)
		}
	} else if e.ready != nil {
		e.ready(s.APIAddr().String())
	}
	err = s.Wait()
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}
