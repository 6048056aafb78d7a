package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/stampede-dev/stampede/internal/units"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/sign"
	"github.com/stampede-dev/stampede/tracker"
)

func runServe(ctx context.Context, e *env, args []string) (err error) {
	fs := newFlagSet(e, "serve", "DIR | --upstream URL", `Serve the files of DIR over HTTP, or front the web server at --upstream URL, as an
origin stampede downloaders get the most of: ranges and validators, a manifest of
every file at /.well-known/stampede/manifest/PATH (computed once, cached on disk,
never stale), Repr-Digest on full responses, and metrics at /metrics. It runs a
tracker at /.well-known/stampede/tracker/announce and names it in every manifest,
unless told to name others (--tracker) or none (--no-tracker).

Overload: past --max-transfers concurrent downloads it answers at once instead of
slowing everyone down. A client that sends "Stampede-Capabilities: overload" (stampede
get does, in the swarm) gets 206 with ONE piece of the origin's choosing, peers of
the file's swarm (Stampede-Peers) and the manifest's Link, and fetches the rest from
peers; pieces go out in rounds over the file, so successive clients get different
ones, and each piece at most --overload-copies times per --overload-window (which
bounds overload mode's bytes to that many copies of the file per window). At most
--overload-transfers such answers go out at once. Everyone else, and capable
clients when no piece can be given, gets 503 with Retry-After. A client that stops
reading has its response ended after --write-idle-timeout, which frees its slot;
a slow one still reading (about 2 KiB/s or more) is not cut.

Egress budget: at most --max-copies copies of each file (each version of it) go to
swarm clients per --budget-window, every body byte of the file counted: piece and
range answers, overload answers, and plain clients' downloads. Past it a swarm
client still gets a piece no swarm client got in the window (every piece gets out
once a window), and so does one that says it has no peer delivering
("Stampede-Suppliers: 0"); the others get 503 with "Stampede-Budget: spent" and
Retry-After the window's end, and take those pieces from the swarm. Plain clients
(curl, browsers, get --no-swarm) cannot use peers and are never refused. Each
answer to a swarm client says what is left (Stampede-Budget: left=BYTES,
reset=SECONDS). Overload answers count against the budget and, past it, hand out
only pieces not sent in the window: --overload-copies per --overload-window bounds
overload mode's share, --max-copies per --budget-window what the file costs in all.
The window is minutes so that it holds a whole crowd: a copy of 512 MiB at
40 Mbit/s takes 107 s, and a budget binds only where the origin could send more.

Swarm peers' piece requests name the other pieces they would take; the origin
sends one it has not sent to the swarm recently, the one sent least among
those, and answers 503 "in swarm" when all of them went to other swarm peers
less than --resend-after ago (or are still being sent): those peers are
passing them on, and another copy would cost the origin's link twice.

Pages: an HTML page of DIR (.html, .htm) links its bundle (rel="stampede-bundle"):
/.well-known/stampede/bundle/PATH is the page and its same-origin assets in one
file, swarmed like any other, and /.well-known/stampede/bundle-index/PATH lists
them (JSON: path, offset, size, content type, validators). At most 128 assets and
32 MiB per bundle. Not in --upstream mode.

Hidden: a path with a segment that starts with a dot (.git/config, .env,
a/.htpasswd) is not found (404) by any route, not listed and left out of
bundles, unless --dotfiles; /.well-known/ is served, though not the dot names
below it. Directories without an index.html are listed unless --no-listing
(then 404). Error answers name no path; the log has the detail.

For operators: /metrics (Prometheus), /.well-known/stampede/healthz and readyz,
and a live dashboard at /.well-known/stampede/dashboard (egress against --rate,
transfers, requests by reason, the tracker's swarms; docs/dashboard.md). With
--admin they move to a listener of their own, and the dashboard there also
names the files.`)
	listen := fs.String("listen", ":8080", "listen on `HOST:PORT`")
	upstream := fs.String("upstream", "", "front the web server at `URL` instead of serving a DIR")
	rate := fs.String("rate", "0", "cap the egress of file bodies to `RATE`, e.g. 8Mbit, 100MB (0: unlimited)")
	maxTransfers := fs.Int("max-transfers", origin.DefaultMaxTransfers, "most downloads sent at once; past it, overload answers or 503 with Retry-After")
	retryAfter := fs.Duration("retry-after", 0, "Retry-After to send with a 503 or an overload answer, e.g. 10s (0: estimated from the load)")
	overloadTransfers := fs.Int("overload-transfers", origin.DefaultOverloadTransfers,
		"most overload answers (one piece and peers) sent at once past --max-transfers; 0 turns overload mode off")
	overloadCopies := fs.Int("overload-copies", origin.DefaultOverloadCopies, "times each piece of a file is handed out in overload answers per --overload-window")
	overloadWindow := fs.Duration("overload-window", origin.DefaultOverloadWindow, "period over which --overload-copies counts")
	maxCopies := fs.String("max-copies", "off",
		"egress budget: at most `B` copies of each file to swarm clients per --budget-window, B at least 1, or off for none; "+
			"past it they get only pieces not sent in the window unless alone; plain clients are never refused")
	budgetWindow := fs.Duration("budget-window", origin.DefaultBudgetWindow, "period over which --max-copies counts, from the first byte of a file sent after the last window")
	resendAfter := fs.Duration("resend-after", origin.DefaultResendAfter,
		"answer a swarm peer 503 \"in swarm\" for pieces sent to other peers less than this long ago (0: always send them again)")
	writeIdle := fs.Duration("write-idle-timeout", origin.DefaultWriteIdleTimeout,
		"end a response whose client takes none of its bytes for this long, freeing its slot (0: never)")
	cacheDir := fs.String("cache-dir", "", "keep computed manifests in `DIR`, swept of those of files gone or changed and kept under 256 MiB (default: the user cache directory's stampede/manifests)")
	warm := fs.Bool("warm", false, "hash every file of DIR in the background at start")
	dotfiles := fs.Bool("dotfiles", false, "serve and list the paths of DIR with a segment starting with a dot (.git, .env); /.well-known/ is served anyway")
	noListing := fs.Bool("no-listing", false, "answer 404 for a directory of DIR without an index.html instead of listing it")
	trackers := fs.StringArray("tracker", nil, "name the tracker at announce `URL` in manifests instead of running one (repeatable)")
	noTracker := fs.Bool("no-tracker", false, "run no tracker and name none in manifests")
	openTracker := fs.Bool("open-tracker", false, "let the tracker serve runs track any file, not only those it serves (whose manifest it has sent)")
	storeURL := fs.String("store", "", storeUsage)
	admin := fs.String("admin", "", adminUsage)
	signKey := fs.String("sign-key", "", "sign the manifests served with the ed25519 private key in `FILE` (stampede keygen), for get --trust-key")
	private := fs.Bool("private", false, "make the swarms private (needs --sign-key): the manifest's answer carries a token for the peer asking, and the tracker and peers refuse anyone without one")
	tokenTTL := fs.Duration("token-ttl", origin.DefaultTokenTTL, "how long a private swarm's token admits its peer")
	quiet := fs.BoolP("quiet", "q", false, "log only warnings and errors")
	web := addWebFlags(fs.FlagSet)
	verbose := fs.BoolP("verbose", "v", false, "log at debug level: every request (method, path, client, status, bytes, time taken, Range, Stampede-Reason), every 503, the tracker's announces; overrides -q")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}

	cfg := origin.Config{
		MaxTransfers:      *maxTransfers,
		RetryAfter:        *retryAfter,
		OverloadTransfers: *overloadTransfers,
		OverloadCopies:    *overloadCopies,
		OverloadWindow:    *overloadWindow,
		WriteIdleTimeout:  *writeIdle,
		ResendAfter:       *resendAfter,
		CacheDir:          *cacheDir,
		Warm:              *warm,
		Dotfiles:          *dotfiles,
		NoListing:         *noListing,
		AdminApart:        *admin != "",
		Logger:            e.logger(*quiet, *verbose),
	}
	if cfg.Rate, err = units.ParseRate(*rate); err != nil {
		return usageErrorf("--rate: %v", err)
	}
	if cfg.MaxCopies, err = parseMaxCopies(*maxCopies); err != nil {
		return err
	}
	cfg.BudgetWindow = *budgetWindow
	switch {
	case *maxTransfers < 1:
		return usageErrorf("--max-transfers must be at least 1, got %d", *maxTransfers)
	case *retryAfter < 0:
		return usageErrorf("--retry-after must not be negative, got %v", *retryAfter)
	case *overloadTransfers < 0:
		return usageErrorf("--overload-transfers must not be negative, got %d", *overloadTransfers)
	case *overloadCopies < 1:
		return usageErrorf("--overload-copies must be at least 1, got %d", *overloadCopies)
	case *overloadWindow <= 0:
		return usageErrorf("--overload-window must be positive, got %v", *overloadWindow)
	case *budgetWindow <= 0:
		return usageErrorf("--budget-window must be positive, got %v", *budgetWindow)
	case *writeIdle < 0:
		return usageErrorf("--write-idle-timeout must not be negative, got %v", *writeIdle)
	case *resendAfter < 0:
		return usageErrorf("--resend-after must not be negative, got %v", *resendAfter)
	}
	if *overloadTransfers == 0 {
		cfg.OverloadTransfers = -1 // off
	}
	if *writeIdle == 0 {
		cfg.WriteIdleTimeout = -1 // never
	}
	if *resendAfter == 0 {
		cfg.ResendAfter = -1 // always send again
	}
	var what string
	switch {
	case *upstream != "" && len(pos) > 0:
		return usageErrorf("give a DIR or --upstream URL, not both")
	case *upstream != "":
		u, err := url.Parse(*upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usageErrorf("--upstream %q: want an http:// or https:// URL", *upstream)
		}
		cfg.Upstream, what = u, u.Redacted()
	case len(pos) == 1:
		fi, err := os.Stat(pos[0])
		if err != nil {
			return usageErrorf("%v", err)
		}
		if !fi.IsDir() {
			return usageErrorf("%s is not a directory", pos[0])
		}
		cfg.Dir, what = pos[0], pos[0]
	default:
		return usageErrorf("want one DIR or --upstream URL, got %d arguments", len(pos))
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"--warm", *warm}, {"--dotfiles", *dotfiles}, {"--no-listing", *noListing}} {
		if f.set && cfg.Dir == "" {
			return usageErrorf("%s needs a DIR (an upstream applies its own rules)", f.name)
		}
	}
	if *private && *signKey == "" {
		return usageErrorf("--private needs --sign-key FILE: the tokens are signed with it (make one with stampede keygen)")
	}
	if *tokenTTL <= 0 {
		return usageErrorf("--token-ttl must be positive, got %v", *tokenTTL)
	}
	if *signKey != "" {
		key, err := sign.ReadPrivateKey(*signKey)
		if err != nil {
			return usageErrorf("--sign-key: %v", err)
		}
		cfg.SignKey, cfg.Private, cfg.TokenTTL = key, *private, *tokenTTL
	}
	switch {
	case *noTracker && len(*trackers) > 0:
		return usageErrorf("give --tracker URL or --no-tracker, not both")
	case len(*trackers) > 0:
		for _, t := range *trackers {
			u, err := url.Parse(t)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageErrorf("--tracker %q: want an http:// or https:// announce URL", t)
			}
		}
		cfg.Trackers = *trackers
	case !*noTracker:
		tcfg := tracker.Config{Logger: cfg.Logger, OnlyAdmitted: !*openTracker}
		if cfg.Private {
			tcfg.Tokens = sign.NewVerifier(cfg.SignKey.Public().(ed25519.PublicKey))
		}
		store, closeStore, err := openStore(ctx, *storeURL, tcfg.Limits())
		if err != nil {
			return err
		}
		defer closeStore()
		tcfg.Store = store
		cfg.Tracker = tracker.New(tcfg)
	}
	if *storeURL != "" && cfg.Tracker == nil {
		return usageErrorf("--store is for the tracker serve runs: not with --tracker or --no-tracker")
	}
	if *openTracker && cfg.Tracker == nil {
		return usageErrorf("--open-tracker is for the tracker serve runs: not with --tracker or --no-tracker")
	}

	if cfg.WebPeer, err = web.handler(); err != nil {
		return err
	}
	srv, err := origin.New(cfg)
	if err != nil {
		// Everything New checks comes from the command line: the
		// directories and the upstream.
		return withCode(exitUsage, err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	stopAdmin, err := startAdmin(ctx, e, *admin, srv.AdminHandler(), true, cfg.Logger)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopAdmin(&err)
	if err := web.startSTUN(ctx, srv, cfg.Logger); err != nil {
		ln.Close()
		return err
	}
	addr := ln.Addr().String()
	fmt.Fprintf(e.stderr, "serving %s on http://%s/\n", what, addr)
	if cfg.Tracker != nil {
		fmt.Fprintf(e.stderr, "tracker on http://%s%s\n", addr, tracker.WellKnownPath)
	}
	if e.ready != nil {
		e.ready(addr)
	}
	return srv.Serve(ctx, ln)
}

// parseMaxCopies reads --max-copies: a number of copies, at least 1, or
// "off", which is origin.Config's negative MaxCopies.
func parseMaxCopies(v string) (float64, error) {
	if strings.EqualFold(v, "off") {
		return -1, nil
	}
	b, err := strconv.ParseFloat(v, 64)
	switch {
	case err != nil || math.IsNaN(b) || math.IsInf(b, 0):
		return 0, usageErrorf("--max-copies %q: want a number of copies of each file per window (1.5, 3), or off", v)
	case b < 1:
		return 0, usageErrorf("--max-copies %s: at least 1, since every piece must get out once a window; off turns the budget off", v)
	}
	return b, nil
}
