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
only from --allow networks; CONNECT is never proxied. See docs/cdn.md.`)
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
