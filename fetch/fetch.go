// Package fetch is stampede's downloader, the engine behind "stampede get".
//
// A download starts with a HEAD request. If the server publishes a manifest
// (a Link header with rel="stampede-manifest"), the file is fetched as pieces
// with parallel Range requests under the adaptive window of [window]; every
// piece is verified against the manifest before it is written to FILE.part,
// and the file appears at its final name only once complete (store.File.Commit).
// Without a manifest, or from a server that ignores Range, it falls back to
// one stream, verified by --sha256 or the server's Repr-Digest when either is
// there, and reported as unverified otherwise.
//
// Errors are classified with the sentinels below so the command can map them
// to documented exit codes.
package fetch

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/originclient"
	"github.com/stampede-dev/stampede/sign"
	"github.com/stampede-dev/stampede/store"
)

// Error classes (package originclient's, the same values). Every error
// Run returns wraps at most one of them, or a network error from net/http,
// or none (generic failure).
var (
	// ErrVerify: data failed verification (a piece hash after retries, or
	// the whole-file SHA-256).
	ErrVerify = originclient.ErrVerify
	// ErrChanged: the file's validators changed during the download.
	ErrChanged = originclient.ErrChanged
	// ErrProtocol: the server broke the protocol (bad manifest, wrong
	// Content-Range, truncated body).
	ErrProtocol = originclient.ErrProtocol
	// ErrLocal: reading or writing local files failed (disk full, permissions).
	ErrLocal = originclient.ErrLocal
	// ErrUsage: the configuration is invalid (bad URL, bad digest).
	ErrUsage = originclient.ErrUsage
)

// StatusError is an HTTP error status from the server.
type StatusError = originclient.StatusError

// Config describes one download. Zero values take the documented defaults.
type Config struct {
	URL string
	// Output is the final path; "-" streams the file to Stdout in order. Empty
	// means the remote name (see RemoteName) in the current directory.
	Output string
	Stdout io.Writer
	// An existing Output+".part" is resumed whether or not Continue is set:
	// its pieces are verified again against the manifest (without one, it
	// is resumed only when its record of the server's validators matches,
	// and discarded with a warning otherwise). Continue also finds a
	// complete Output already there: verified against the manifest, it is
	// not downloaded again (Result.AlreadyComplete).
	Continue bool
	// LimitRate caps the download rate in bytes per second (0: unlimited).
	LimitRate int64
	// SHA256, if set (hex), is the expected digest of the whole file.
	SHA256 string
	// MaxParallel caps the request window (default 16).
	MaxParallel int
	// MemoryBudget bounds the bytes held in piece buffers (default 32 MiB; at
	// least two pieces).
	MemoryBudget int64
	// Retries bounds the retries after failures (default 5); NoRetries
	// tries everything once. Transient failures are refused or reset connections,
	// timeouts, a connection closed before the answer or the end of the
	// body, a temporary DNS failure, and 408, 429, 500, 502 and 504. The
	// probe (HEAD) and the manifest are each tried at most Retries+1
	// times. A piece, or the stream, ends the download once it has failed
	// Retries+1 times in a row with no progress in between (no piece
	// verified; for a stream, no byte beyond the furthest reached), so
	// failures spread over a download that keeps going never add up.
	// Corrupt or malformed answers for a piece count against it for good.
	// Permanent failures (other 4xx, a host name that does not exist, TLS)
	// are not retried. The pauses between tries are 100 ms, doubling to at
	// most 5 s (a 429's or 5xx's Retry-After when longer).
	Retries   int
	NoRetries bool
	// InitialDeadline is a piece's deadline before any piece time has been
	// measured (default 10s).
	InitialDeadline time.Duration
	// MaxRetryAfter caps how long 503s' Retry-After are honoured in total
	// with no piece coming in between, before giving up (default 5m): a
	// download behind a busy origin that still moves is never given up.
	MaxRetryAfter time.Duration
	// IdleTimeout ends a streamed body that delivers nothing for this long
	// (default 60s); the stream is then resumed or retried.
	IdleTimeout time.Duration
	Client      *http.Client
	// Header is sent with every request to the server (originclient's
	// Config.Header): never to peers or trackers. Its credentials
	// (Authorization, Cookie) go only to URL's scheme, host and port (and
	// the host's subdomains on the same scheme and port), not to another
	// place a redirect or the manifest's link leads to (originclient's
	// Config.AuthHost).
	Header http.Header
	Logger *slog.Logger
	// Swarm configures the peer side; by default a download whose manifest
	// names trackers joins the swarm (not with Output "-").
	// TrustKey, if set, is the origin's public key: the manifest must
	// come signed with it (contract.SignatureHeader), else the download
	// fails with ErrVerify before any byte is fetched. A private swarm's
	// peers are checked with it too (else with the key the origin sent).
	TrustKey ed25519.PublicKey
	Swarm    SwarmConfig
}

func (c *Config) setDefaults() {
	if c.MaxParallel <= 0 {
		c.MaxParallel = 16
	}
	if c.MemoryBudget <= 0 {
		c.MemoryBudget = 32 << 20
	}
	switch {
	case c.NoRetries:
		c.Retries = 0
	case c.Retries == 0:
		c.Retries = originclient.DefaultRetries
	}
	if c.InitialDeadline <= 0 {
		c.InitialDeadline = 10 * time.Second
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = 5 * time.Minute
	}
	if c.Client == nil {
		c.Client = originclient.NewHTTPClient(c.MaxParallel)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// NewClient returns an HTTP client suited to parallel Range requests to one
// host (originclient.NewHTTPClient).
func NewClient(parallel int) *http.Client { return originclient.NewHTTPClient(parallel) }

// Result summarises a finished download; it is what --json prints.
type Result struct {
	URL      string  `json:"url"`
	Path     string  `json:"path"`
	Size     int64   `json:"size"`
	Seconds  float64 `json:"seconds"`
	RateBps  float64 `json:"rate_bytes_per_second"`
	Verified string  `json:"verified"` // "merkle", "sha256", "repr-digest" or "none"
	Root     string  `json:"root,omitempty"`
	Pieces   int     `json:"pieces,omitempty"`
	// PiecesResumed were found verified on disk when resuming, and
	// BytesResumed their bytes: not downloaded this time, and not in
	// RateBps, which is the rate of the bytes that were.
	PiecesResumed int   `json:"pieces_resumed,omitempty"`
	BytesResumed  int64 `json:"bytes_resumed"`
	// AlreadyComplete: with Continue, the file at Path was already whole
	// and verified, and nothing was downloaded.
	AlreadyComplete bool `json:"already_complete,omitempty"`
	// BytesReceived counts the body bytes received from the server (HTTP),
	// duplicates and rejected pieces included. Bytes from peers are
	// BytesFromPeers (and Swarm's account). Together they exceed the
	// bytes downloaded by the waste.
	BytesReceived  int64 `json:"bytes_received"`
	BytesFromPeers int64 `json:"bytes_from_peers"`
	PiecesRejected int   `json:"pieces_rejected"`
	// OriginRequests counts requests to the origin by reason.
	OriginRequests map[string]int `json:"origin_requests"`
	// Swarm is the peer side's account, when the download joined a swarm.
	Swarm *node.Stats `json:"swarm,omitempty"`
}

// Progress is a snapshot for display.
type Progress struct {
	Phase string // "connecting", "verifying", "downloading", "finishing"
	Size  int64  // -1 while unknown
	Done  int64  // bytes verified and written (or checked on disk while verifying)
	// Resumed is the part of Done found on disk when resuming, set once
	// the check is over: Done less Resumed is what this run downloaded.
	Resumed int64
	// Uploaded counts piece bytes sent to other peers (0 outside a swarm).
	Uploaded int64
}

// Download is one download in progress. Create it with New, watch it with
// Progress from any goroutine, run it with Run.
type Download struct {
	cfg Config
	url *url.URL // cfg.URL, parsed once by New
	lim *ratelimit.Limiter
	oc  *originclient.Client // every request to the origin
	// peerKey is the swarm node's key, named to the origin for a private
	// swarm's token (the node's peer ID is then the key's).
	peerKey   ed25519.PrivateKey
	isPrivate atomic.Bool // the swarm is private (Private)

	phase    atomic.Value // string
	size     atomic.Int64
	done     atomic.Int64
	resumed  atomic.Int64 // Progress.Resumed
	received atomic.Int64
	// resume: continue from the part file (with Continue, or when there is
	// one), decided by Run.
	resume bool
	peer   atomic.Pointer[node.Node] // the swarm's node, once started

	sk        sink      // opened once per download (see openSink)
	completed time.Time // when the file was published, if before Run ends (seeding)

	// streamSum is the SHA-256 of the bytes written to stdout, kept when
	// --sha256 must be checked without a file to read back.
	streamSum hash.Hash
}

func (d *Download) outputName() string {
	if d.cfg.Output == "-" {
		return "stdout"
	}
	return d.cfg.Output
}

// New validates cfg and returns a Download.
func New(cfg Config) (*Download, error) {
	if cfg.Retries < 0 || cfg.Swarm.SeedTime < 0 {
		return nil, fmt.Errorf("%w: Retries and Swarm.SeedTime must not be negative (NoRetries, Swarm.SeedForever)", ErrUsage)
	}
	cfg.setDefaults()
	u, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.SHA256 != "" {
		if _, err := manifest.ParseHash(strings.ToLower(cfg.SHA256)); err != nil {
			return nil, fmt.Errorf("%w: --sha256: want 64 hex digits", ErrUsage)
		}
	}
	if cfg.Output == "-" && cfg.Stdout == nil {
		return nil, fmt.Errorf("%w: output is stdout but no writer given", ErrUsage)
	}
	d := &Download{cfg: cfg, url: u, lim: ratelimit.New(cfg.LimitRate), peerKey: sign.GenerateKey()}
	d.oc = originclient.New(originclient.Config{
		Client: cfg.Client, Header: cfg.Header, PeerKey: sign.FormatPublicKey(d.peerKey.Public().(ed25519.PublicKey)), AuthHost: u.Scheme + "://" + u.Host, Logger: cfg.Logger, Limiter: d.lim, Retries: cfg.Retries,
		MaxRetryAfter: cfg.MaxRetryAfter, IdleTimeout: cfg.IdleTimeout, OriginIdleTimeout: cfg.Swarm.OriginIdleTimeout,
	})
	d.phase.Store("connecting")
	d.size.Store(-1)
	return d, nil
}

// ParseURL accepts absolute http and https URLs with a host.
func ParseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: URL %q: %v", ErrUsage, s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: URL %q: scheme must be http or https", ErrUsage, s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: URL %q has no host", ErrUsage, s)
	}
	return u, nil
}

// RemoteName is the local file name for u, as wget and curl -O choose it: the
// last path segment, or index.html for a directory. Control characters
// (an escape sequence, a newline) are written %XX, as wget does: a hostile
// link must not put them into a file name, or through it onto a terminal.
func RemoteName(u *url.URL) string {
	name := path.Base(u.Path)
	if name == "/" || name == "." || name == ".." || name == "" || strings.HasSuffix(u.Path, "/") {
		return "index.html"
	}
	if strings.IndexFunc(name, isControl) < 0 {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		if isControl(r) {
			fmt.Fprintf(&b, "%%%02X", r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 }

// Progress returns a snapshot; safe from any goroutine.
func (d *Download) Progress() Progress {
	p := Progress{Phase: d.phase.Load().(string), Size: d.size.Load(), Done: d.done.Load(), Resumed: d.resumed.Load()}
	if nd := d.peer.Load(); nd != nil {
		p.Uploaded = nd.Stats().BytesToPeers
	}
	return p
}

// Run performs the download.
func (d *Download) Run(ctx context.Context) (*Result, error) {
	start := time.Now()
	defer func() {
		if d.sk != nil {
			d.sk.close()
		}
	}()
	u := d.url
	// A swarm peer asks for the manifest's head and gets the piece layer
	// from its neighbours (node/layer.go): a crowd's manifests would take
	// the origin's link at its start. Resuming verifies what is on disk
	// first, which takes the layer.
	swarm := !d.cfg.Swarm.Disabled && d.cfg.Output != "-"
	part := d.partExists()
	d.resume = d.cfg.Continue || part
	headOnly := swarm && !d.resume
	in, err := d.oc.Probe(ctx, u, headOnly)
	if err != nil {
		return nil, err
	}
	d.storeSize(in)
	d.cfg.Logger.Debug("probe answered", "took", time.Since(start), "with_head", in.Head != nil)
	res := &Result{URL: in.URL.String(), Path: d.cfg.Output}
	var m *manifest.Manifest
	if in.ManifestURL != nil {
		m, err = d.oc.Manifest(ctx, in, headOnly)
		if err == nil && !m.HasLayer() && len(m.Trackers) == 0 {
			m, err = d.oc.Manifest(ctx, in, false) // no swarm to get the layer from
		}
		d.storeSize(in) // the manifest's check may have probed again
		var se *StatusError
		switch {
		case errors.As(err, &se):
			// Advertised but not available (a front that cannot build it):
			// the file itself may still be fine. A manifest that arrives
			// but fails validation is another matter, and stops us.
			d.cfg.Logger.Warn("the server links a manifest it does not serve; downloading without it", "err", err)
			m = nil
		case err != nil:
			return nil, err
		default:
			d.cfg.Logger.Debug("manifest fetched", "took", time.Since(start), "pieces", m.NumPieces())
			res.Root, res.Pieces = m.Root.String(), m.NumPieces()
			d.size.Store(m.Size)
		}
	}
	if d.cfg.TrustKey != nil {
		if m == nil {
			return nil, fmt.Errorf("%w: the origin serves no manifest, so nothing it signed: --trust-key cannot be honoured", ErrVerify)
		}
		if err := sign.VerifyManifest(d.cfg.TrustKey, m.Root, m.Size, in.Vouch.Signature); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrVerify, err)
		}
	}
	// A --sha256 to check takes the whole download's path, which checks it.
	if m != nil && d.cfg.Continue && !part && d.cfg.Output != "-" && d.cfg.SHA256 == "" {
		done, err := d.alreadyComplete(m)
		if err != nil {
			return nil, err
		}
		if done {
			res.Size, res.Verified, res.AlreadyComplete = m.Size, "merkle", true
			res.PiecesResumed, res.BytesResumed = m.NumPieces(), m.Size
			res.OriginRequests = d.oc.Requests()
			return res, nil
		}
	}
	switch {
	case m != nil && len(m.Trackers) > 0 && swarm && in.Vouch.Private && in.Vouch.Token == "":
		// A proxy between us may have dropped our key, or the origin's
		// token: no peer would admit us, and we must serve no one.
		d.cfg.Logger.Warn("the swarm is private and the origin gave us no token: downloading from the origin only")
		err = d.runPieces(ctx, m, in, res)
	case m != nil && len(m.Trackers) > 0 && swarm:
		err = d.runSwarm(ctx, m, in, res)
		if errors.Is(err, originclient.ErrNoRanges) {
			d.cfg.Logger.Warn("server ignores Range requests; falling back to one stream", "url", in.URL)
			err = d.runStream(ctx, in, m, res)
		}
	case m != nil && in.AcceptRanges:
		err = d.runPieces(ctx, m, in, res)
		if errors.Is(err, originclient.ErrNoRanges) {
			d.cfg.Logger.Warn("server ignores Range requests; falling back to one stream", "url", in.URL)
			err = d.runStream(ctx, in, m, res)
		}
	default:
		err = d.runStream(ctx, in, m, res)
	}
	if err != nil {
		return nil, err
	}
	res.Size = d.size.Load()
	end := time.Now()
	if !d.completed.IsZero() {
		end = d.completed // not counting the time spent seeding
	}
	res.Seconds = end.Sub(start).Seconds()
	res.BytesResumed = d.resumed.Load()
	if res.Seconds > 0 {
		res.RateBps = float64(res.Size-res.BytesResumed) / res.Seconds
	}
	res.BytesReceived = d.received.Load() + d.oc.Received()
	if res.Swarm != nil {
		res.BytesFromPeers = res.Swarm.BytesFromPeers
	}
	res.OriginRequests = d.oc.Requests()
	return res, nil
}

// partExists reports whether Output has a part file, which is then resumed
// with or without Continue (see Config.Continue).
func (d *Download) partExists() bool {
	if d.cfg.Output == "-" {
		return false
	}
	fi, err := os.Lstat(d.cfg.Output + store.PartSuffix)
	return err == nil && fi.Mode().IsRegular()
}

// alreadyComplete reports whether Output is already the whole file m
// describes (with Continue and no part file: wget's "already fully
// retrieved"), verifying every piece.
func (d *Download) alreadyComplete(m *manifest.Manifest) (bool, error) {
	d.phase.Store("verifying")
	ok, err := store.IsComplete(d.cfg.Output, m, func(done, total int) {
		d.done.Store(int64(done) * m.PieceSize)
	})
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrLocal, err)
	}
	if ok {
		d.done.Store(m.Size)
		d.resumed.Store(m.Size)
		d.cfg.Logger.Info("the file is already complete and verified; nothing to download", "path", d.cfg.Output)
	} else {
		d.done.Store(0)
	}
	return ok, nil
}

// storeSize shows the size the probe found, if it found one.
func (d *Download) storeSize(in *originclient.Resource) {
	if in.Size >= 0 {
		d.size.Store(in.Size)
	}
}

// Manifest fetches and validates the manifest of the file at rawURL, found
// through the file's Link header (Join, without what a private swarm's
// seed needs besides).
func Manifest(ctx context.Context, client *http.Client, rawURL string) (*manifest.Manifest, error) {
	m, _, err := Join(ctx, client, rawURL)
	return m, err
}

// Join is what a seed of the file at rawURL needs to join its swarm: its
// manifest and, in a private swarm, the node's key, token and verifier of
// the others' (nil in a public swarm), issued by the origin with the
// manifest. A private swarm whose origin gave no token is an error.
func Join(ctx context.Context, client *http.Client, rawURL string) (*manifest.Manifest, *node.Private, error) {
	d, err := New(Config{URL: rawURL, Client: client, Output: "unused"})
	if err != nil {
		return nil, nil, err
	}
	src, err := d.oc.Open(ctx, d.url)
	if errors.Is(err, originclient.ErrNoManifest) {
		return nil, nil, fmt.Errorf("%w: %s publishes no manifest", ErrProtocol, rawURL)
	}
	if err != nil {
		return nil, nil, err
	}
	m, v := src.Manifest(), src.Vouch()
	switch {
	case v.Token != "":
		priv, err := d.private(m, v)
		return m, priv, err
	case v.Private:
		return nil, nil, fmt.Errorf("%w: the swarm of %s is private and its origin gave us no token", ErrProtocol, rawURL)
	}
	return m, nil, nil
}
