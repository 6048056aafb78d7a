package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"time"

	"github.com/stampede-dev/stampede/internal/httpserve"
	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/tracker/redisstore"
)

// trackerShutdownGrace is how long announces in flight get to finish once
// the tracker is told to stop: they take microseconds.
const trackerShutdownGrace = 2 * time.Second

// storeUsage is the --store flag's help, for tracker and serve.
const storeUsage = "keep the swarms in the Redis at `URL` (redis://HOST:PORT/DB, rediss://..., unix:///PATH?db=N), shared by every tracker given it; default: in this process"

// storeOpenTimeout bounds the first contact with a --store at start.
const storeOpenTimeout = 5 * time.Second

// openStore opens the tracker store a --store URL names: nil (the
// tracker's own, in memory) for "". A bad URL is a usage error; a Redis
// that does not answer, a failure.
func openStore(ctx context.Context, url string, limits tracker.Limits) (tracker.Store, func(), error) {
	if url == "" {
		return nil, func() {}, nil
	}
	if _, err := redisstore.ParseURL(url); err != nil {
		return nil, nil, usageErrorf("--store %q: %v", redacted(url), err)
	}
	// Store failures are logged by the tracker; go-redis would log them
	// again, on stderr, its own way.
	redisstore.DiscardClientLog()
	ctx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	st, err := redisstore.Open(ctx, url, redisstore.Config{Limits: limits})
	if err != nil {
		return nil, nil, fmt.Errorf("--store: %w", err)
	}
	return st, func() { st.Close() }, nil
}

// redacted is a URL for messages: its password, if any, replaced by
// "xxxxx".
func redacted(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}

func runTracker(ctx context.Context, e *env, args []string) (err error) {
	fs := newFlagSet(e, "tracker", "[--listen HOST:PORT]", `Run only a tracker: peers downloading the same file announce themselves to it
and get a handful of others back, with an estimate of the swarm's size. Announces
go to /announce (or /.well-known/stampede/tracker/announce); metrics are at
/metrics. Name it in manifests with 'stampede serve --tracker URL'.`)
	listen := fs.String("listen", ":6969", "listen on `HOST:PORT`")
	interval := fs.Duration("interval", tracker.DefaultInterval, "time between a peer's periodic announces (whole seconds)")
	maxPeers := fs.Int("max-peers", tracker.DefaultMaxPeersPerSwarm, "peers kept per swarm (the swarm-size estimate counts beyond them)")
	maxSwarms := fs.Int("max-swarms", tracker.DefaultMaxSwarms, "swarms tracked at once; past it, a new swarm pushes out the idle longest of those with peers of one address, or is not kept")
	perAddress := fs.Int("max-peers-per-address", tracker.DefaultMaxPeersPerAddress, "peers of one address (IPv6: /64) a swarm keeps and counts in its size")
	rate := fs.Float64("announce-rate", tracker.DefaultAnnounceRate, "announces a second one address (IPv6: /64) may make on average; past it and the burst, 429 (0: no limit)")
	burst := fs.Int("announce-burst", tracker.DefaultAnnounceBurst, "announces one address (IPv6: /64) may make at once")
	storeURL := fs.String("store", "", storeUsage)
	admin := fs.String("admin", "", adminUsage)
	trustKeys := fs.StringArray("trust-key", nil, "track only private swarms: announces need a token signed by the origin key `KEY` (a file, or ed25519:... as keygen prints it; repeatable)")
	quiet := fs.BoolP("quiet", "q", false, "log only warnings and errors")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usageErrorf("tracker takes no arguments, got %q", pos)
	case *interval < time.Second:
		return usageErrorf("--interval must be at least 1s, got %v", *interval)
	case *maxPeers < 1:
		return usageErrorf("--max-peers must be at least 1, got %d", *maxPeers)
	case *maxSwarms < 1:
		return usageErrorf("--max-swarms must be at least 1, got %d", *maxSwarms)
	case *perAddress < 1 || *perAddress > 256:
		return usageErrorf("--max-peers-per-address must be 1 to 256, got %d", *perAddress)
	case *rate < 0:
		return usageErrorf("--announce-rate must not be negative, got %v", *rate)
	case *burst < 1:
		return usageErrorf("--announce-burst must be at least 1, got %d", *burst)
	}
	if *rate == 0 {
		*rate = -1 // tracker.Config: no limit
	}
	tokens, err := trustedKeys(*trustKeys)
	if err != nil {
		return err
	}
	log := e.logger(*quiet, false)
	cfg := tracker.Config{
		Interval:           *interval,
		MaxPeersPerSwarm:   *maxPeers,
		MaxSwarms:          *maxSwarms,
		MaxPeersPerAddress: *perAddress,
		AnnounceRate:       *rate,
		AnnounceBurst:      *burst,
		Tokens:             tokens,
		Logger:             log,
	}
	store, closeStore, err := openStore(ctx, *storeURL, cfg.Limits())
	if err != nil {
		return err
	}
	defer closeStore()
	cfg.Store = store
	tr := tracker.New(cfg)
	handler := tr.Handler()
	if *admin != "" {
		handler = tr.AnnounceHandler()
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	stopAdmin, err := startAdmin(ctx, e, *admin, tr.AdminHandler(), false, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopAdmin(&err)
	addr := ln.Addr().String()
	fmt.Fprintf(e.stderr, "tracker on http://%s/announce\n", addr)
	if e.ready != nil {
		e.ready(addr)
	}
	hs := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	hs.RegisterOnShutdown(tr.CloseWebSockets) // Shutdown leaves hijacked connections alone
	switch err := httpserve.Run(ctx, hs, ln, trackerShutdownGrace, nil); {
	case errors.Is(err, httpserve.ErrGraceExpired):
		log.Warn("announces were still in flight after the shutdown grace; their connections were closed")
	case err != nil:
		return fmt.Errorf("serve on %s: %w", addr, err)
	}
	return nil
}
