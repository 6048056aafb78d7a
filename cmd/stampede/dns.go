package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/stampede-dev/stampede/codns"
	"github.com/stampede-dev/stampede/internal/httpserve"
	"github.com/stampede-dev/stampede/sign"
)

// resolvConf is where the default upstream comes from.
var resolvConf = "/etc/resolv.conf"

// dnsPeerResolveTimeout bounds the lookups of peers named by host name at
// start.
const dnsPeerResolveTimeout = 5 * time.Second

func runDNS(ctx context.Context, e *env, args []string) (err error) {
	fs := newFlagSet(e, "dns", "[--listen HOST:PORT] [--upstream HOST[:PORT]] [--peers HOST:PORT,...]", `Run a cooperative DNS forwarder, as CoDNS did: each lookup goes to the local
resolver (--upstream) first, and when that is slower than usual (an adaptive
delay drawn from its recent response times) or fails, to the other nodes of
--peers too, each of which answers from its own resolver and cache; the first
good answer wins. Answers are cached for their TTL. Give every node the same
--peers list (it may name the node itself). Clients are served only from
--allow networks, peers only from their addresses on --peers or, with --key,
when they sign their queries; a peer's query is never passed on. UDP and TCP.
See docs/dns.md.`)
	listen := fs.String("listen", codns.DefaultListen, "answer on `HOST:PORT`, UDP and TCP; other nodes reach it there, as named on their --peers")
	upstream := fs.String("upstream", "", "the local resolver, `HOST[:PORT]` (default: the first nameserver of /etc/resolv.conf)")
	peers := fs.StringSlice("peers", nil, "ask the other nodes at `HOST:PORT,...` (repeatable; may include this one)")
	allow := fs.StringSlice("allow", []string{"127.0.0.0/8", "::1/128"}, "serve clients only from the networks `CIDR,...`")
	metricsListen := fs.String("metrics-listen", "", "serve /metrics and the health checks over HTTP on `HOST:PORT`")
	timeout := fs.Duration("timeout", codns.DefaultTimeout, "give up a lookup after this long, and answer SERVFAIL")
	peerTimeout := fs.Duration("peer-timeout", codns.DefaultPeerTimeout, "give up a query to a peer after this long")
	maxPeers := fs.Int("max-peers", codns.DefaultMaxPeersPerLookup, "peers one lookup may ask, one after another")
	peerRate := fs.Float64("peer-rate", codns.DefaultPeerRate, "queries a second each peer may make on average; past it and a burst of twice as many, REFUSED")
	cacheSize := fs.Int("cache-size", 10000, "answers kept, the least recently used dropped first")
	keyFile := fs.String("key", "", "authenticate the queries between peers (TSIG) with a secret drawn from the ed25519 key in `FILE` (stampede keygen; the same on every node); without it, peers are known by their addresses on --peers")
	quiet := fs.BoolP("quiet", "q", false, "log only warnings and errors")
	verbose := fs.BoolP("verbose", "v", false, "log refused queries and failing upstreams")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 0:
		return usageErrorf("dns takes no arguments, got %q", pos)
	case *timeout <= 0:
		return usageErrorf("--timeout must be positive, got %v", *timeout)
	case *peerTimeout <= 0:
		return usageErrorf("--peer-timeout must be positive, got %v", *peerTimeout)
	case *maxPeers < 1:
		return usageErrorf("--max-peers must be at least 1, got %d", *maxPeers)
	case *peerRate <= 0:
		return usageErrorf("--peer-rate must be positive, got %v", *peerRate)
	case *cacheSize < 1:
		return usageErrorf("--cache-size must be at least 1, got %d", *cacheSize)
	}
	if _, _, err := net.SplitHostPort(*listen); err != nil {
		return usageErrorf("--listen %q: want HOST:PORT", *listen)
	}
	if *metricsListen != "" {
		if _, _, err := net.SplitHostPort(*metricsListen); err != nil {
			return usageErrorf("--metrics-listen %q: want HOST:PORT", *metricsListen)
		}
	}
	cfg := codns.Config{
		Timeout:           *timeout,
		PeerTimeout:       *peerTimeout,
		MaxPeersPerLookup: *maxPeers,
		PeerRate:          *peerRate,
		PeerBurst:         max(1, int(2**peerRate)),
		Cache:             codns.CacheConfig{Entries: *cacheSize},
	}
	if cfg.Allow, err = parseNetworks("--allow", *allow); err != nil {
		return err
	}
	if cfg.Upstream, err = dnsUpstream("--upstream", *upstream); err != nil {
		return err
	}
	if cfg.Peers, err = dnsPeers(ctx, "--peers", *peers); err != nil {
		return err
	}
	if *keyFile != "" {
		key, err := sign.ReadPrivateKey(*keyFile)
		if err != nil {
			return usageErrorf("--key %s: %v", *keyFile, err)
		}
		cfg.Key = dnsTSIGSecret(key)
	}
	log := e.logger(*quiet, *verbose)
	cfg.Logger = log
	f, err := codns.New(cfg)
	if err != nil {
		return err
	}
	pc, ln, err := codns.Listen(*listen)
	if err != nil {
		return err
	}
	addr := pc.LocalAddr().String()
	if err := checkNotSelf("--upstream", cfg.Upstream, addr); err != nil {
		pc.Close()
		ln.Close()
		return err
	}
	// The metrics server ends with the forwarder, whether its context
	// ended or it failed.
	mctx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	metricsAddr, stopMetrics, err := startDNSMetrics(mctx, *metricsListen, f.Handler(), log)
	if err != nil {
		pc.Close()
		ln.Close()
		return err
	}
	defer stopMetrics(&err)
	defer stopServing()
	fmt.Fprintf(e.stderr, "dns on %s (udp, tcp), upstream %s, %d peers\n", addr, cfg.Upstream, len(cfg.Peers))
	if metricsAddr != "" {
		fmt.Fprintf(e.stderr, "dns metrics on http://%s/metrics\n", metricsAddr)
	}
	if e.ready != nil {
		e.ready(addr)
		if metricsAddr != "" {
			e.ready(metricsAddr)
		}
	}
	return f.Serve(ctx, pc, ln)
}

// dnsTSIGSecret is the TSIG secret of the key of --key: a hash of its
// seed, named for this one use, so that the key signs nothing else here.
func dnsTSIGSecret(key ed25519.PrivateKey) []byte {
	h := sha256.New()
	h.Write([]byte("stampede dns TSIG\x00"))
	h.Write(key.Seed())
	return h.Sum(nil)
}

// dnsUpstream returns the upstream resolver the flag called name gives,
// HOST:PORT (port 53 when none is given), or the first nameserver of
// resolvConf.
func dnsUpstream(name, flag string) (string, error) {
	if flag == "" {
		conf, err := dns.ClientConfigFromFile(resolvConf)
		if err != nil || len(conf.Servers) == 0 {
			return "", usageErrorf("no %s, and no nameserver in %s: %v", name, resolvConf, err)
		}
		return net.JoinHostPort(conf.Servers[0], conf.Port), nil
	}
	hostport := flag
	if _, _, err := net.SplitHostPort(flag); err != nil {
		hostport = net.JoinHostPort(strings.Trim(flag, "[]"), "53") // an address alone
	}
	host, port, err := net.SplitHostPort(hostport)
	if _, perr := net.LookupPort("udp", port); err != nil || perr != nil || host == "" || strings.ContainsAny(host, "[]/ ") {
		return "", usageErrorf("%s %q: want HOST[:PORT]", name, flag)
	}
	if _, err := netip.ParseAddr(host); err != nil && strings.Contains(host, ":") {
		return "", usageErrorf("%s %q: want HOST[:PORT]", name, flag)
	}
	return hostport, nil
}

// checkNotSelf refuses an upstream (the flag called name) that is the
// forwarder's own address, listening: it would ask itself.
func checkNotSelf(name, upstream, listening string) error {
	if up, err := netip.ParseAddrPort(upstream); err == nil && net.UDPAddrFromAddrPort(up).String() == listening {
		return usageErrorf("%s %s is this forwarder's own address: name the local resolver", name, upstream)
	}
	return nil
}

// dnsPeers returns the addresses the flag called name gives, host names
// looked up (once, now, with the system's resolver).
func dnsPeers(ctx context.Context, name string, vals []string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if ap, err := netip.ParseAddrPort(v); err == nil {
			out = append(out, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
			continue
		}
		host, port, err := net.SplitHostPort(v)
		if err != nil || host == "" {
			return nil, usageErrorf("%s %q: want HOST:PORT", name, v)
		}
		pn, err := net.LookupPort("udp", port)
		if err != nil {
			return nil, usageErrorf("%s %q: bad port", name, v)
		}
		lctx, cancel := context.WithTimeout(ctx, dnsPeerResolveTimeout)
		ips, err := net.DefaultResolver.LookupNetIP(lctx, "ip", host)
		cancel()
		if err != nil || len(ips) == 0 {
			return nil, fmt.Errorf("%s %q: %w", name, v, err)
		}
		out = append(out, netip.AddrPortFrom(ips[0].Unmap(), uint16(pn)))
	}
	return out, nil
}

// parseNetworks reads a list of networks (CIDR, or an address alone).
func parseNetworks(flag string, vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		v = strings.TrimSpace(v)
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return nil, usageErrorf("%s %q: want networks such as 10.0.0.0/8,192.168.1.5", flag, v)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// startDNSMetrics serves h on addr ("": nothing) until ctx ends, and
// returns the address it listens on; stop waits for the server to end and
// sets *err to its failure if *err is nil.
func startDNSMetrics(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (string, func(*error), error) {
	if addr == "" {
		return "", func(*error) {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	done := make(chan error, 1)
	go func() { done <- httpserve.Run(ctx, hs, ln, time.Second, nil) }()
	return ln.Addr().String(), func(errp *error) {
		if err := <-done; err != nil && !errors.Is(err, httpserve.ErrGraceExpired) && *errp == nil {
			*errp = fmt.Errorf("metrics on %s: %w", addr, err)
		}
	}, nil
}
