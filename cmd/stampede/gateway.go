package main

import (
	"context"
	"strconv"
	"strings"

	"github.com/stampede-dev/stampede/daemon"
	"github.com/stampede-dev/stampede/gateway"
	"github.com/stampede-dev/stampede/internal/units"
)

func runGateway(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "gateway", "[--listen HOST:PORT]", `Run a local HTTP proxy that gets files through the swarm for programs that know
nothing of stampede. Use it as a proxy (curl -x http://127.0.0.1:8642 URL, or
http_proxy=http://127.0.0.1:8642 for apt and pip) or by URL prefix
(curl http://127.0.0.1:8642/https://host/path). Files whose origin publishes a
manifest are downloaded through the swarm, every piece verified, and streamed in
order as soon as their first pieces arrive; Range, HEAD and conditional requests
are answered from the cache. Complete files stay in a bounded cache and the most
recently used are seeded. Other origins are proxied straight through; HTTPS
(CONNECT) tunnels to port 443 pass untouched. Prefix requests under a host name
not the gateway's (DNS rebinding) are refused, and so, when it listens beyond
loopback, are loopback and private targets. It is "stampede daemon --gateway"
without the control API: every file's swarm on one peer port, one upload
budget. See docs/gateway.md.`)
	listen := fs.String("listen", gateway.DefaultListen, "listen on `HOST:PORT` (beyond loopback, whoever reaches it can use it: see docs/gateway.md)")
	cacheDir := fs.String("cache-dir", "", "keep downloaded files in `DIR` (default: the user cache directory's stampede/gateway)")
	cacheSize := fs.String("cache-size", "10GiB", "most bytes of files kept in the cache, e.g. 2GiB, 500MB")
	window := fs.String("window", "32MiB", "how far ahead of each reader pieces are fetched first")
	maxSeeds := fs.Int("max-seeds", gateway.DefaultMaxSeeds, "most complete files seeded at once, the most recently used (0: none)")
	peerListen := fs.String("peer-listen", ":0", "accept the peers of every file on `HOST:PORT` (port 0: one the system picks); it answers only peers that name a file it serves")
	upStr := fs.String("max-upload-rate", "0", "cap what we upload to peers, all files together, `RATE` (0: unlimited)")
	upstreamProxy := fs.String("upstream-proxy", "", upstreamProxyUsage)
	access := addGatewayAccessFlags(fs)
	quiet := fs.BoolP("quiet", "q", false, "log only warnings and errors")
	verbose := fs.BoolP("verbose", "v", false, "log every request: method, URL, status, bytes, how it was answered (swarm, bundle, direct), time taken")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("gateway takes no arguments, got %q", pos)
	}
	cfg := daemon.Config{CacheDir: *cacheDir, PeerListen: *peerListen, MaxCacheSeeds: *maxSeeds, Gateway: *listen, NoAPI: true, Logger: e.logger(*quiet, *verbose)}
	if cfg.GatewayUpstreamProxy, err = parseProxy("--upstream-proxy", *upstreamProxy); err != nil {
		return err
	}
	if err := access.apply(&cfg); err != nil {
		return err
	}
	if cfg.CacheSize, err = units.ParseSize(*cacheSize); err != nil || cfg.CacheSize <= 0 {
		return usageErrorf("--cache-size %q: want a positive size such as 10GiB", *cacheSize)
	}
	if cfg.GatewayWindow, err = units.ParseSize(*window); err != nil || cfg.GatewayWindow <= 0 {
		return usageErrorf("--window %q: want a positive size such as 32MiB", *window)
	}
	if cfg.MaxUploadRate, err = units.ParseRate(*upStr); err != nil {
		return usageErrorf("--max-upload-rate: %v", err)
	}
	switch {
	case *maxSeeds < 0:
		return usageErrorf("--max-seeds must not be negative, got %d", *maxSeeds)
	case *maxSeeds == 0:
		cfg.NoCacheSeeds = true
	}
	// The gateway alone keeps no jobs: its state is its cache.
	if cfg.CacheDir == "" {
		if cfg.CacheDir, err = gateway.DefaultCacheDir(); err != nil {
			return withCode(exitIO, err)
		}
	}
	cfg.StateDir = cfg.CacheDir
	return serveDaemon(ctx, e, cfg)
}

const upstreamProxyUsage = "reach origins through the proxy at `URL` (default: $https_proxy, $http_proxy, $no_proxy; never the gateway itself)"

// gatewayAccess holds the flags of what the gateway lets through, on
// "gateway" and "daemon" alike (docs/gateway.md, What the gateway
// exposes).
type gatewayAccess struct {
	hosts   []string
	ports   string
	private bool
}

func addGatewayAccessFlags(fs *flagSet) *gatewayAccess {
	a := new(gatewayAccess)
	fs.StringArrayVar(&a.hosts, "allow-host", nil, "answer prefix requests and the gateway's pages under host `NAME` too (repeatable; "+
		"IP addresses, localhost and this machine's name always are; others are refused, as DNS rebinding sends them)")
	fs.StringVar(&a.ports, "connect-ports", "443", "let CONNECT tunnels go to these `PORTS` only, e.g. 443,8443")
	fs.BoolVar(&a.private, "allow-private-targets", false, "listening beyond loopback, still connect to loopback, link-local and private addresses for clients")
	return a
}

func (a *gatewayAccess) apply(cfg *daemon.Config) error {
	for _, h := range a.hosts {
		if h == "" || strings.ContainsAny(h, ":/[]@ ") {
			return usageErrorf("--allow-host %q: want a host name without scheme or port, such as gateway.lan", h)
		}
	}
	cfg.GatewayAllowHosts = a.hosts
	for p := range strings.SplitSeq(a.ports, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
		if err != nil || n == 0 {
			return usageErrorf("--connect-ports %q: want port numbers separated by commas, such as 443,8443", a.ports)
		}
		cfg.GatewayConnectPorts = append(cfg.GatewayConnectPorts, uint16(n))
	}
	cfg.GatewayAllowPrivateTargets = a.private
	return nil
}
