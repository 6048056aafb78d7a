package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/cdn"
	"github.com/stampede-dev/stampede/codns"
	"github.com/stampede-dev/stampede/internal/httpserve"
	"github.com/stampede-dev/stampede/internal/units"
	"github.com/stampede-dev/stampede/sign"
)

// cdnShutdownGrace is how long responses in flight get once the node is
// told to stop; a long download is cut after it.
const cdnShutdownGrace = 5 * time.Second

func runCDN(ctx context.Context, e *env, args []string) (err error) {
	fs := newFlagSet(e, "cdn", "--listen HOST:PORT --nodes HOST:PORT,... --cache-dir DIR", `Run a cache node of a cooperating CDN, as CoDeeN and CoBlitz did: a cluster of
nodes fetches each file from its origin about once however many clients ask. Any
node answers any client, by URL prefix (curl http://node:8480/http://origin/path)
or as a reverse proxy for --origin hosts. Files travel as chunks (a manifest's
pieces, each verified, or fixed byte ranges); each chunk has an owner among the
healthy nodes (rendezvous hashing with bounded loads), the only node that asks
the origin for it. Give every node the same --nodes list (it may name the node
itself) and, to authenticate node requests, the same --key. Clients are served
only from --allow networks; CONNECT is never proxied. With --dns, the node looks
its origins' names up through a cooperative DNS forwarder of its own (as stampede
dns), whose peers are the other nodes' forwarders. See docs/cdn.md.`)
	listen := fs.String("listen", "127.0.0.1:8480", "listen on `HOST:PORT`; as other nodes reach it, it is this node's name on --nodes")
	nodes := fs.StringSlice("nodes", nil, "every node of the cluster, `HOST:PORT,...` (repeatable; may include this one)")
	cacheDir := fs.String("cache-dir", "", "keep chunks in `DIR` (required)")
	cacheSize := fs.String("cache-size", "10GiB", "keep at most `SIZE` of chunks, least recently used evicted first, e.g. 50GiB")
	origins := fs.StringArray("origin", nil, "as a reverse proxy, answer `NAME=URL`: requests for host NAME from the origin at URL (scheme and host; repeatable)")
	allowOrigins := fs.StringArray("allow-origin", nil, "let URL-prefix requests name the origin `HOST[:PORT]` (HOST alone: ports 80 and 443; repeatable)")
	allow := fs.StringSlice("allow", []string{"127.0.0.0/8", "::1/128"}, "serve clients from these networks only, `CIDR,...`")
	keyFile := fs.String("key", "", "authenticate node requests with the ed25519 key in `FILE` (stampede keygen; the same on every node); without it, node requests are taken from --nodes addresses only")
	chunkSize := fs.String("chunk-size", "1MiB", "cut files whose origin publishes no manifest into chunks of `SIZE` (16KiB to 64MiB)")
	maxPeers := fs.Int("max-peers", 0, "pick at most `N` peers, the nearest by heartbeat round-trip time (0: every healthy node)")
	dnsListen := fs.String("dns", "", "run a cooperative DNS forwarder (as stampede dns) on `HOST:PORT`, UDP and TCP, and look origin names up through it")
	dnsPeerList := fs.StringSlice("dns-peers", nil, "the forwarders --dns asks when its resolver is slow, `HOST:PORT,...` (default: every node of --nodes, on --dns's port)")
	dnsUpstreamFlag := fs.String("dns-upstream", "", "the local resolver of --dns, `HOST[:PORT]` (default: the first nameserver of /etc/resolv.conf)")
	quiet := fs.BoolP("quiet", "q", false, "log only warnings and errors")
	verbose := fs.BoolP("verbose", "v", false, "log each chunk re-forwarded and request passed through")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("cdn takes no arguments, got %q", pos)
	}
	cfg := cdn.Config{CacheDir: *cacheDir, AllowOrigins: *allowOrigins, Members: cdn.MembersConfig{MaxPeers: *maxPeers}}
	if cfg.CacheDir == "" {
		return usageErrorf("say where the chunks go: --cache-dir DIR")
	}
	if cfg.CacheSize, err = units.ParseSize(*cacheSize); err != nil || cfg.CacheSize <= 0 {
		return usageErrorf("--cache-size %q: want a positive size such as 10GiB", *cacheSize)
	}
	if cfg.ChunkSize, err = units.ParseSize(*chunkSize); err != nil || cfg.ChunkSize < 16<<10 || cfg.ChunkSize > 64<<20 {
		return usageErrorf("--chunk-size %q: want a size from 16KiB to 64MiB", *chunkSize)
	}
	if *maxPeers < 0 {
		return usageErrorf("--max-peers must not be negative, got %d", *maxPeers)
	}
	if cfg.Origins, err = parseOrigins(*origins); err != nil {
		return err
	}
	for _, a := range cfg.AllowOrigins {
		if err := checkHostPort(a); err != nil {
			return usageErrorf("--allow-origin %q: %v", a, err)
		}
	}
	for _, c := range *allow {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			if a, aerr := netip.ParseAddr(strings.TrimSpace(c)); aerr == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			} else {
				return usageErrorf("--allow %q: want networks such as 10.0.0.0/8,192.168.1.5", c)
			}
		}
		cfg.Allow = append(cfg.Allow, p.Masked())
	}
	for _, n := range *nodes {
		n = strings.TrimSpace(n)
		if err := checkNode(n); err != nil {
			return usageErrorf("--nodes %q: %v", n, err)
		}
		cfg.Nodes = append(cfg.Nodes, n)
	}
	if *keyFile != "" {
		if cfg.Key, err = sign.ReadPrivateKey(*keyFile); err != nil {
			return usageErrorf("--key %s: %v", *keyFile, err)
		}
	}
	if _, _, err := net.SplitHostPort(*listen); err != nil {
		return usageErrorf("--listen %q: want HOST:PORT", *listen)
	}
	log := e.logger(*quiet, *verbose)
	cfg.Logger = log
	var dnsCfg *codns.Config
	if *dnsListen == "" {
		if len(*dnsPeerList) > 0 || *dnsUpstreamFlag != "" {
			return usageErrorf("--dns-peers and --dns-upstream go with --dns HOST:PORT")
		}
	} else if dnsCfg, err = cdnDNSConfig(ctx, *dnsListen, *dnsPeerList, *dnsUpstreamFlag, &cfg); err != nil {
		return err
	}

	// The node and its forwarder stop together, when ctx ends or the
	// forwarder fails.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	if dnsCfg != nil {
		wait, err := startCDNDNS(ctx, stop, *dnsListen, *dnsCfg, &cfg, e)
		if err != nil {
			return err
		}
		defer func() {
			if derr := wait(); err == nil {
				err = derr
			}
		}()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if cfg.Self, err = selfName(*listen, ln.Addr().(*net.TCPAddr), cfg.Nodes); err != nil {
		ln.Close()
		return err
	}
	node, err := cdn.New(ctx, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	node.Start(ctx)
	defer node.Close()
	addr := ln.Addr().String()
	fmt.Fprintf(e.stderr, "cdn node %s on http://%s/ (%d nodes)\n", cfg.Self, addr, len(cfg.Nodes))
	if e.ready != nil {
		e.ready(addr)
	}
	hs := &http.Server{
		Handler:           node,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	switch err := httpserve.Run(ctx, hs, ln, cdnShutdownGrace, nil); {
	case errors.Is(err, httpserve.ErrGraceExpired):
		log.Warn("responses were still in flight after the shutdown grace; their connections were closed")
	case err != nil:
		return fmt.Errorf("serve on %s: %w", addr, err)
	}
	return nil
}

// cdnDNSConfig is the configuration of the node's forwarder, on listen:
// its peers (the nodes on listen's port, unless given), its upstream, the
// clients of cfg.Allow, and a TSIG secret drawn from cfg.Key.
func cdnDNSConfig(ctx context.Context, listen string, peers []string, upstream string, cfg *cdn.Config) (*codns.Config, error) {
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, usageErrorf("--dns %q: want HOST:PORT", listen)
	}
	if len(peers) == 0 {
		if port == "0" && len(cfg.Nodes) > 1 {
			return nil, usageErrorf("--dns %s: the nodes' forwarders are on --dns's port, which must then be fixed (or name them with --dns-peers)", listen)
		}
		for _, n := range cfg.Nodes {
			host, _, _ := net.SplitHostPort(n)
			peers = append(peers, net.JoinHostPort(host, port))
		}
	}
	dc := codns.Config{Allow: cfg.Allow, Logger: cfg.Logger.With("part", "dns")}
	if dc.Upstream, err = dnsUpstream("--dns-upstream", upstream); err != nil {
		return nil, err
	}
	if dc.Peers, err = dnsPeers(ctx, "--dns-peers", peers); err != nil {
		return nil, err
	}
	if cfg.Key != nil {
		dc.Key = dnsTSIGSecret(cfg.Key)
	}
	return &dc, nil
}

// startCDNDNS starts the node's forwarder on listen and makes cfg look
// origin names up through it and serve its metrics. The forwarder runs
// until ctx ends; if it fails, it calls stop. wait calls stop, waits for
// its end and returns its failure.
func startCDNDNS(ctx context.Context, stop func(), listen string, dc codns.Config, cfg *cdn.Config, e *env) (wait func() error, err error) {
	f, err := codns.New(dc)
	if err != nil {
		return nil, err
	}
	pc, ln, err := codns.Listen(listen)
	if err != nil {
		return nil, err
	}
	addr := pc.LocalAddr().String()
	if err := checkNotSelf("--dns-upstream", dc.Upstream, addr); err != nil {
		pc.Close()
		ln.Close()
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		err := f.Serve(ctx, pc, ln)
		if err != nil {
			stop()
		}
		done <- err
	}()
	cfg.LookupIP = f.LookupNetIP
	cfg.Collector = f.Collector()
	fmt.Fprintf(e.stderr, "cdn dns on %s (udp, tcp), upstream %s, %d peers\n", addr, dc.Upstream, len(dc.Peers))
	return func() error {
		stop()
		return <-done
	}, nil
}

// parseOrigins reads --origin NAME=URL flags.
func parseOrigins(flags []string) (map[string]*url.URL, error) {
	out := make(map[string]*url.URL, len(flags))
	for _, f := range flags {
		name, raw, ok := strings.Cut(f, "=")
		name = strings.ToLower(strings.TrimSpace(name))
		u, err := url.Parse(strings.TrimSpace(raw))
		switch {
		case !ok || name == "" || strings.ContainsAny(name, ":/@ []"):
			return nil, usageErrorf("--origin %q: want NAME=URL, such as www.example.com=http://10.0.0.5", f)
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			strings.Trim(u.Path, "/") != "" || u.RawQuery != "":
			return nil, usageErrorf("--origin %q: the URL must be http:// or https:// and a host, without a path", f)
		case out[name] != nil:
			return nil, usageErrorf("--origin %s given twice", name)
		}
		out[name] = &url.URL{Scheme: u.Scheme, Host: u.Host}
	}
	return out, nil
}

// checkHostPort checks an --allow-origin value: HOST or HOST:PORT.
func checkHostPort(s string) error {
	if s == "" || strings.ContainsAny(s, "/@ ") {
		return errors.New("want HOST or HOST:PORT")
	}
	if h, p, err := net.SplitHostPort(s); err == nil {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 || h == "" {
			return errors.New("bad port")
		}
	}
	return nil
}

// checkNode checks a --nodes entry: HOST:PORT with a port.
func checkNode(s string) error {
	h, p, err := net.SplitHostPort(s)
	if err != nil || h == "" {
		return errors.New("want HOST:PORT")
	}
	if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
		return errors.New("bad port")
	}
	return nil
}

// selfName is this node's name on the node list: the --listen address as
// given, else the entry whose port is the one listened on and whose host
// is an address of this machine. With no list, the address listened on.
func selfName(listen string, bound *net.TCPAddr, nodes []string) (string, error) {
	port := strconv.Itoa(bound.Port)
	host, _, _ := net.SplitHostPort(listen)
	given := net.JoinHostPort(host, port)
	if len(nodes) == 0 {
		if host == "" || bound.IP.IsUnspecified() {
			return net.JoinHostPort("127.0.0.1", port), nil
		}
		return given, nil
	}
	for _, n := range nodes {
		if n == given {
			return n, nil
		}
	}
	local := map[netip.Addr]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				local[p.Addr().Unmap()] = true
			}
		}
	}
	for _, n := range nodes {
		h, p, _ := net.SplitHostPort(n)
		if p != port {
			continue
		}
		if a, err := netip.ParseAddr(h); err == nil && local[a.Unmap()] {
			return n, nil
		}
		if ips, err := net.LookupIP(h); err == nil {
			for _, ip := range ips {
				if a, ok := netip.AddrFromSlice(ip); ok && local[a.Unmap()] {
					return n, nil
				}
			}
		}
	}
	if host != "" && !bound.IP.IsUnspecified() {
		return given, nil // not on the list: the others will not ask it
	}
	return "", usageErrorf("no entry of --nodes is this node (port %s on an address of this machine): give --listen the address the others use", port)
}
