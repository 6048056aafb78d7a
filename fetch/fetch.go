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
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
)

// Error classes. Every error Run returns wraps at most one of them, or a
// network error from net/http, or none (generic failure).
var (
	// ErrVerify: data failed verification (a piece hash after retries, or
	// the whole-file SHA-256).
	ErrVerify = errors.New("verification failed")
	// ErrChanged: the file's validators changed during the download.
	ErrChanged = errors.New("file changed on the server during the download")
	// ErrProtocol: the server broke the protocol (bad manifest, wrong
	// Content-Range, truncated body).
	ErrProtocol = errors.New("protocol error")
	// ErrLocal: reading or writing local files failed (disk full, permissions).
	ErrLocal = errors.New("local I/O error")
	// ErrUsage: the configuration is invalid (bad URL, bad digest).
	ErrUsage = errors.New("invalid request")
)

// StatusError is an HTTP error status from the server.
type StatusError struct {
	URL    string
	Code   int
	Status string
}

func (e *StatusError) Error() string { return fmt.Sprintf("%s: server answered %s", e.URL, e.Status) }

// ManifestRel is the Link relation naming a file's manifest.
const ManifestRel = "stampede-manifest"

// Config describes one download. Zero values take the documented defaults.
type Config struct {
	URL string
	// Output is the final path; "-" streams the file to Stdout in order. Empty
	// means the remote name (see RemoteName) in the current directory.
	Output string
	Stdout io.Writer
	// Continue resumes from an existing Output+".part".
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
	// Retries is how many times one piece, or the stream, is retried after an
	// error, a corrupt body or a truncation (default 5; negative: never).
	Retries int
	// InitialDeadline is a piece's deadline before any piece time has been
	// measured (default 10s).
	InitialDeadline time.Duration
	// MaxRetryAfter caps how long a 503's Retry-After is honoured in total
	// before giving up (default 5m).
	MaxRetryAfter time.Duration
	// IdleTimeout ends a streamed body that delivers nothing for this long
	// (default 60s); the stream is then resumed or retried.
	IdleTimeout time.Duration
	Client      *http.Client
	Logger      *slog.Logger
	// Swarm configures the peer side; by default a download whose manifest
	// names trackers joins the swarm (not with Output "-").
	Swarm SwarmConfig
}

func (c *Config) setDefaults() {
	if c.MaxParallel <= 0 {
		c.MaxParallel = 16
	}
	if c.MemoryBudget <= 0 {
		c.MemoryBudget = 32 << 20
	}
	switch {
	case c.Retries == 0:
		c.Retries = 5
	case c.Retries < 0:
		c.Retries = 0
	}
	if c.InitialDeadline <= 0 {
		c.InitialDeadline = 10 * time.Second
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = 5 * time.Minute
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 60 * time.Second
	}
	if c.Client == nil {
		c.Client = NewClient(c.MaxParallel)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// NewClient returns an HTTP client suited to parallel Range requests to one
// host: enough idle connections to reuse one per request in flight, and no
// transparent decompression (bytes must arrive exactly as hashed).
func NewClient(parallel int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 2*parallel + 2
	t.DisableCompression = true
	t.ResponseHeaderTimeout = 60 * time.Second
	return &http.Client{Transport: t}
}

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
	// PiecesResumed were found verified on disk when resuming.
	PiecesResumed int `json:"pieces_resumed,omitempty"`
	// BytesReceived counts body bytes received, duplicates and rejected
	// pieces included; it exceeds Size by the waste.
	BytesReceived  int64 `json:"bytes_received"`
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
	// Uploaded counts piece bytes sent to other peers (0 outside a swarm).
	Uploaded int64
}

// Download is one download in progress. Create it with New, watch it with
// Progress from any goroutine, run it with Run.
type Download struct {
	cfg Config
	lim *ratelimit.Limiter

	phase    atomic.Value // string
	size     atomic.Int64
	done     atomic.Int64
	received atomic.Int64
	peer     atomic.Pointer[node.Node] // the swarm's node, once started

	sk        sink      // opened once per download (see openSink)
	completed time.Time // when the file was published, if before Run ends (seeding)

	// streamSum is the SHA-256 of the bytes written to stdout, kept when
	// --sha256 must be checked without a file to read back.
	streamSum hash.Hash

	mu       sync.Mutex // guards the following
	requests map[string]int
}

func (d *Download) outputName() string {
	if d.cfg.Output == "-" {
		return "stdout"
	}
	return d.cfg.Output
}

// New validates cfg and returns a Download.
func New(cfg Config) (*Download, error) {
	cfg.setDefaults()
	if _, err := ParseURL(cfg.URL); err != nil {
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
	d := &Download{cfg: cfg, lim: ratelimit.New(cfg.LimitRate), requests: map[string]int{}}
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
// last path segment, or index.html for a directory.
func RemoteName(u *url.URL) string {
	name := path.Base(u.Path)
	if name == "/" || name == "." || name == ".." || name == "" || strings.HasSuffix(u.Path, "/") {
		return "index.html"
	}
	return name
}

// Progress returns a snapshot; safe from any goroutine.
func (d *Download) Progress() Progress {
	p := Progress{Phase: d.phase.Load().(string), Size: d.size.Load(), Done: d.done.Load()}
	if nd := d.peer.Load(); nd != nil {
		p.Uploaded = nd.Stats().BytesToPeers
	}
	return p
}

func (d *Download) count(reason string) {
	d.mu.Lock()
	d.requests[reason]++
	d.mu.Unlock()
}

// info is what the probe learned about the resource.
type info struct {
	url          *url.URL // after redirects
	size         int64    // -1 if unknown
	etag         string
	lastModified string
	acceptRanges bool
	manifestURL  *url.URL
	reprDigest   []byte
}

// Run performs the download.
func (d *Download) Run(ctx context.Context) (*Result, error) {
	start := time.Now()
	defer func() {
		if d.sk != nil {
			d.sk.close()
		}
	}()
	u, _ := ParseURL(d.cfg.URL)
	in, err := d.probe(ctx, u)
	if err != nil {
		return nil, err
	}
	res := &Result{URL: in.url.String(), Path: d.cfg.Output}
	var m *manifest.Manifest
	if in.manifestURL != nil {
		m, err = d.fetchManifest(ctx, in)
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
			res.Root, res.Pieces = m.Root.String(), m.NumPieces()
			d.size.Store(m.Size)
		}
	}
	switch {
	case m != nil && len(m.Trackers) > 0 && !d.cfg.Swarm.Disabled && d.cfg.Output != "-":
		err = d.runSwarm(ctx, m, in, res)
		if errors.Is(err, errNoRanges) {
			d.cfg.Logger.Warn("server ignores Range requests; falling back to one stream", "url", in.url)
			err = d.runStream(ctx, in, m, res)
		}
	case m != nil && in.acceptRanges:
		err = d.runPieces(ctx, m, in, res)
		if errors.Is(err, errNoRanges) {
			d.cfg.Logger.Warn("server ignores Range requests; falling back to one stream", "url", in.url)
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
	if res.Seconds > 0 {
		res.RateBps = float64(res.Size) / res.Seconds
	}
	res.BytesReceived = d.received.Load()
	d.mu.Lock()
	res.OriginRequests = d.requests
	d.mu.Unlock()
	return res, nil
}

// probe sends HEAD and reads size, validators, range support, the manifest
// link and any Repr-Digest. A server that refuses HEAD leaves everything
// unknown and the download proceeds as one stream.
func (d *Download) probe(ctx context.Context, u *url.URL) (*info, error) {
	in := &info{url: u, size: -1}
	resp, err := d.doPatiently(ctx, http.MethodHead, u, nil, "probe", new(time.Duration))
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented:
		return in, nil
	case resp.StatusCode != http.StatusOK:
		return nil, &StatusError{URL: u.String(), Code: resp.StatusCode, Status: resp.Status}
	}
	in.url = resp.Request.URL
	in.size = resp.ContentLength
	in.etag = resp.Header.Get("ETag")
	in.lastModified = resp.Header.Get("Last-Modified")
	in.acceptRanges = strings.Contains(strings.ToLower(resp.Header.Get("Accept-Ranges")), "bytes")
	if link := httphdr.LinkTarget(resp.Header.Values("Link"), ManifestRel); link != "" {
		if in.manifestURL, err = in.url.Parse(link); err != nil {
			return nil, fmt.Errorf("%w: manifest link %q: %v", ErrProtocol, link, err)
		}
	}
	if in.reprDigest, err = httphdr.ReprDigestSHA256(resp.Header.Values("Repr-Digest")); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if in.size >= 0 {
		d.size.Store(in.size)
	}
	return in, nil
}

// fetchManifest downloads and validates the manifest and checks it describes
// the file the server serves now. A mismatch is retried once, since the file
// may have changed between the two requests.
func (d *Download) fetchManifest(ctx context.Context, in *info) (*manifest.Manifest, error) {
	var busyWaited time.Duration
	for attempt := 0; ; attempt++ {
		resp, err := d.doPatiently(ctx, http.MethodGet, in.manifestURL, nil, "manifest", &busyWaited)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, &StatusError{URL: in.manifestURL.String(), Code: resp.StatusCode, Status: resp.Status}
		}
		if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "" && !strings.Contains(ct, "json") {
			resp.Body.Close()
			return nil, fmt.Errorf("%w: manifest %s has content type %q", ErrProtocol, in.manifestURL, ct)
		}
		m, err := manifest.Decode(d.lim.Reader(ctx, resp.Body))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: manifest %s: %v", ErrProtocol, in.manifestURL, err)
		}
		mismatch := ""
		switch {
		case in.size >= 0 && m.Size != in.size:
			mismatch = fmt.Sprintf("manifest says %d bytes, server serves %d", m.Size, in.size)
		case m.ETag != "" && in.etag != "" && m.ETag != in.etag:
			mismatch = fmt.Sprintf("manifest is for ETag %s, server serves %s", m.ETag, in.etag)
		}
		if mismatch == "" {
			return m, nil
		}
		if attempt > 0 {
			return nil, fmt.Errorf("%w: %s", ErrChanged, mismatch)
		}
		d.cfg.Logger.Info("manifest does not match the file; probing again", "why", mismatch)
		fresh, err := d.probe(ctx, in.url)
		if err != nil {
			return nil, err
		}
		*in = *fresh
	}
}

// do sends one request, counting it under reason. Network errors come back
// as they are (a *url.Error); a 503 is returned to the caller to honour.
func (d *Download) do(ctx context.Context, method string, u *url.URL, hdr http.Header, reason string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", "stampede")
	if method == http.MethodGet && reason != "manifest" {
		// The origin counts its file requests by why they were made.
		req.Header.Set("Stampede-Reason", reason)
	}
	d.count(reason)
	return d.cfg.Client.Do(req)
}

// Manifest fetches and validates the manifest of the file at rawURL, found
// through the file's Link header.
func Manifest(ctx context.Context, client *http.Client, rawURL string) (*manifest.Manifest, error) {
	d, err := New(Config{URL: rawURL, Client: client, Output: "unused"})
	if err != nil {
		return nil, err
	}
	u, _ := ParseURL(rawURL)
	in, err := d.probe(ctx, u)
	if err != nil {
		return nil, err
	}
	if in.manifestURL == nil {
		return nil, fmt.Errorf("%w: %s publishes no manifest", ErrProtocol, rawURL)
	}
	return d.fetchManifest(ctx, in)
}

// doPatiently is do, waiting out 503 answers for their Retry-After until
// *busyWaited exceeds MaxRetryAfter.
func (d *Download) doPatiently(ctx context.Context, method string, u *url.URL, hdr http.Header, reason string, busyWaited *time.Duration) (*http.Response, error) {
	for {
		resp, err := d.do(ctx, method, u, hdr, reason)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			return resp, err
		}
		resp.Body.Close()
		wait := retryAfter(resp.Header, time.Now())
		if *busyWaited += wait; *busyWaited > d.cfg.MaxRetryAfter {
			return nil, &StatusError{URL: u.String(), Code: resp.StatusCode,
				Status: fmt.Sprintf("503 Service Unavailable for more than %v in total", d.cfg.MaxRetryAfter)}
		}
		d.cfg.Logger.Info("server busy, waiting", "url", u, "retry_after", wait)
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// retryAfter parses a 503's Retry-After (seconds or an HTTP date), defaulting
// to 1s and bounded to [100ms, 60s] per response.
func retryAfter(h http.Header, now time.Time) time.Duration {
	d := time.Second
	v := h.Get("Retry-After")
	if secs, err := strconv.Atoi(v); err == nil {
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(100*time.Millisecond, min(60*time.Second, d))
}

// ifRange is the validator to send in If-Range: a strong ETag, else
// Last-Modified (RFC 9110 13.1.5: weak ETags are not allowed there).
func ifRange(etag, lastModified string) string {
	if etag != "" && !strings.HasPrefix(etag, "W/") {
		return etag
	}
	return lastModified
}
