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
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/contract"
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
	// Retries bounds the retries after failures (default 5; negative:
	// never). Transient failures are refused or reset connections,
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
	Retries int
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
	if c.Swarm.OriginIdleTimeout <= 0 {
		c.Swarm.OriginIdleTimeout = 5 * time.Second
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
	head         *manifest.Manifest // the manifest's head, if the answer carried it
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
	// A swarm peer asks for the manifest's head and gets the piece layer
	// from its neighbours (node/layer.go): a crowd's manifests would take
	// the origin's link at its start. Resuming verifies what is on disk
	// first, which takes the layer.
	swarm := !d.cfg.Swarm.Disabled && d.cfg.Output != "-"
	headOnly := swarm && !d.cfg.Continue
	in, err := d.probe(ctx, u, headOnly)
	if err != nil {
		return nil, err
	}
	d.cfg.Logger.Debug("probe answered", "took", time.Since(start), "with_head", in.head != nil)
	res := &Result{URL: in.url.String(), Path: d.cfg.Output}
	var m *manifest.Manifest
	if in.manifestURL != nil {
		m, err = d.fetchManifest(ctx, in, headOnly)
		if err == nil && !m.HasLayer() && len(m.Trackers) == 0 {
			m, err = d.fetchManifest(ctx, in, false) // no swarm to get the layer from
		}
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
	switch {
	case m != nil && len(m.Trackers) > 0 && swarm:
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
// link and any Repr-Digest, and with wantHead asks for the manifest's head
// too (contract.WantHeader), which a stampede origin sends when it knows the
// manifest already. A server that refuses HEAD leaves everything unknown
// and the download proceeds as one stream.
func (d *Download) probe(ctx context.Context, u *url.URL, wantHead bool) (*info, error) {
	in := &info{url: u, size: -1}
	var hdr http.Header
	if wantHead {
		hdr = http.Header{contract.WantHeader: {contract.WantManifestHead}}
	}
	resp, err := d.doRetrying(ctx, http.MethodHead, u, hdr, "probe", new(time.Duration))
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
	if link := httphdr.LinkTarget(resp.Header.Values("Link"), contract.ManifestRel); link != "" {
		if in.manifestURL, err = in.url.Parse(link); err != nil {
			return nil, fmt.Errorf("%w: manifest link %q: %v", ErrProtocol, link, err)
		}
	}
	if in.reprDigest, err = httphdr.ReprDigestSHA256(resp.Header.Values("Repr-Digest")); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if v := resp.Header.Get(contract.ManifestHeadHeader); wantHead && v != "" && in.manifestURL != nil {
		// Nothing is lost with a head we cannot read: the manifest URL
		// serves it too.
		if in.head, err = contract.DecodeManifestHead(v); err != nil {
			d.cfg.Logger.Info("the server's answer carried a manifest head we cannot read; asking for it", "err", err)
		}
	}
	if in.size >= 0 {
		d.size.Store(in.size)
	}
	return in, nil
}

// fetchManifest downloads and validates the manifest, or only its head
// (without the piece layer, from a stampede origin; another server sends
// the whole manifest), and checks it describes the file the server serves
// now. A head the probe's answer carried (in.head) is taken instead of
// asked for, and checked the same. A mismatch is retried once, since the
// file may have changed between the two requests, after probing again
// without asking for the head, so the retry asks the manifest URL.
func (d *Download) fetchManifest(ctx context.Context, in *info, head bool) (*manifest.Manifest, error) {
	var busyWaited time.Duration
	for attempt := 0; ; attempt++ {
		var m *manifest.Manifest
		u := in.manifestURL
		if head {
			u = contract.ManifestHeadURL(u)
		}
		if head && in.head != nil {
			m = in.head // checked below as if fetched
		} else if err := d.retrying(ctx, "GET "+u.String(), func() (hint time.Duration, err error) {
			m, hint, err = d.getManifest(ctx, u, head, &busyWaited)
			return hint, err
		}); err != nil {
			return nil, err
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
		fresh, err := d.probe(ctx, in.url, false)
		if err != nil {
			return nil, err
		}
		*in = *fresh
	}
}

// getManifest sends one GET for the manifest at u and decodes it, as a
// manifest or (head) a manifest head. hint is the server's Retry-After on
// a transient status, if it sent one.
func (d *Download) getManifest(ctx context.Context, u *url.URL, head bool, busyWaited *time.Duration) (m *manifest.Manifest, hint time.Duration, err error) {
	// A stampede origin sends the manifest a quarter smaller with gzip.
	// Asking ourselves (the client may decompress transparently only when
	// it asked) means decoding it ourselves, whatever the client.
	hdr := http.Header{"Accept-Encoding": {"gzip"}}
	resp, err := d.doPatiently(ctx, http.MethodGet, u, hdr, "manifest", busyWaited)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, retryHint(resp), &StatusError{URL: u.String(), Code: resp.StatusCode, Status: resp.Status}
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "" && !strings.Contains(ct, "json") {
		return nil, 0, fmt.Errorf("%w: manifest %s has content type %q", ErrProtocol, u, ct)
	}
	body := d.lim.Reader(ctx, resp.Body)
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: manifest %s: gzip: %w", ErrProtocol, u, err)
		}
		body = zr
	default:
		return nil, 0, fmt.Errorf("%w: manifest %s has content encoding %q, which was not asked for", ErrProtocol, u, enc)
	}
	// %w keeps a body cut by the network recognisable as transient.
	decode := manifest.Decode
	if head {
		decode = manifest.DecodeHead
	}
	if m, err = decode(body); err != nil {
		return nil, 0, fmt.Errorf("%w: manifest %s: %w", ErrProtocol, u, err)
	}
	return m, 0, nil
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
		req.Header.Set(contract.ReasonHeader, reason)
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
	in, err := d.probe(ctx, u, false)
	if err != nil {
		return nil, err
	}
	if in.manifestURL == nil {
		return nil, fmt.Errorf("%w: %s publishes no manifest", ErrProtocol, rawURL)
	}
	return d.fetchManifest(ctx, in, false)
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

// doRetrying is doPatiently, tried again after transient failures (see
// Config.Retries): for the requests a download cannot start without, the
// probe and the manifest. Any other status comes back to the caller.
func (d *Download) doRetrying(ctx context.Context, method string, u *url.URL, hdr http.Header, reason string, busyWaited *time.Duration) (*http.Response, error) {
	var resp *http.Response
	err := d.retrying(ctx, method+" "+u.String(), func() (time.Duration, error) {
		r, err := d.doPatiently(ctx, method, u, hdr, reason, busyWaited)
		if err != nil {
			return 0, err
		}
		if retryableStatus(r.StatusCode) {
			r.Body.Close()
			return retryHint(r), &StatusError{URL: u.String(), Code: r.StatusCode, Status: r.Status}
		}
		resp = r
		return 0, nil
	})
	return resp, err
}

// retrying calls try until it succeeds, fails for good, or has failed
// transiently Retries+1 times in a row, pausing backoff(n) after the n-th
// failure, or longer when try returns the server's Retry-After as a hint.
// what names the request in the log and in the final error.
func (d *Download) retrying(ctx context.Context, what string, try func() (hint time.Duration, err error)) error {
	p := patience{retries: d.cfg.Retries}
	for {
		hint, err := try()
		if err == nil || ctx.Err() != nil || !transient(err) {
			return err
		}
		wait, ok := p.failed(0)
		if !ok {
			return fmt.Errorf("gave up on %s after %s, last: %w", what, plural(p.failures, "try", "tries"), err)
		}
		wait = max(wait, hint)
		// Warn, not Info: nothing else is happening, and a progress bar
		// would otherwise sit still with no word of why.
		d.cfg.Logger.Warn("request failed, retrying", "request", what,
			"retry", fmt.Sprintf("%d/%d", p.failures, p.retries), "in", wait, "err", err)
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// patience counts the consecutive transient failures of one request loop
// (a piece, the stream, the probe) since it last saw the download progress.
type patience struct {
	retries  int   // Config.Retries
	failures int   // in a row, without progress
	mark     int64 // the furthest progress seen at a failure
}

// failed records a failure when the download's progress measure (which
// only means something compared with itself: pieces verified, the
// furthest stream offset) stands at progress. Progress since the last
// failure starts the count again. It returns the pause before the next
// try, or false once the failures in a row exceed retries.
func (p *patience) failed(progress int64) (time.Duration, bool) {
	if progress > p.mark {
		p.failures, p.mark = 0, progress
	}
	p.failures++
	if p.failures > p.retries {
		return 0, false
	}
	return backoff(p.failures), true
}

// backoff is the pause before the n-th retry (from 1): 100 ms doubling to at
// most 5 s, so that a dead origin with the default 5 retries is given up
// on after 3.1 s of pauses.
func backoff(n int) time.Duration {
	return min(5*time.Second, 100*time.Millisecond<<min(n-1, 10))
}

// retryableStatus: answers that say "not now" rather than "no" (the set
// curl's --retry uses): 408 and 429, and the 5xx a server, or a proxy in
// front of one that is restarting, gives. 503 is waited out for its
// Retry-After by doPatiently, under MaxRetryAfter; a *StatusError with 503
// means that patience is spent.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryHint is the Retry-After of a transient status, if the server sent one.
func retryHint(resp *http.Response) time.Duration {
	if !retryableStatus(resp.StatusCode) || resp.Header.Get("Retry-After") == "" {
		return 0
	}
	return retryAfter(resp.Header, time.Now())
}

// transient reports whether err may go away by itself: the network failed
// (a refused, reset or timed-out connection, one closed before the answer
// or the end of the body, a temporary DNS failure, a stalled body) or the
// server said "not now" (retryableStatus).
func transient(err error) bool {
	switch {
	case errors.Is(err, ErrUsage), errors.Is(err, ErrLocal), errors.Is(err, ErrChanged),
		errors.Is(err, ErrVerify), errors.Is(err, errNoRanges), isCorrupt(err):
		return false
	case permanent(err):
		return false
	}
	if se, ok := errors.AsType[*StatusError](err); ok {
		return retryableStatus(se.Code)
	}
	var timeout interface{ Timeout() bool }
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errIdle) ||
		errors.As(err, new(*net.OpError)) || (errors.As(err, &timeout) && timeout.Timeout())
}

// permanent reports whether retrying err cannot help: an error status other
// than those of retryableStatus, a host name that does not exist, a TLS
// failure (a certificate we do not trust, an alert, a server that does not
// speak TLS).
func permanent(err error) bool {
	if se, ok := errors.AsType[*StatusError](err); ok {
		return !retryableStatus(se.Code)
	}
	if dns, ok := errors.AsType[*net.DNSError](err); ok {
		return dns.IsNotFound
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && (op.Op == "remote error" || op.Op == "local error") {
		return true // crypto/tls reports alerts so
	}
	return errors.Is(err, http.ErrSchemeMismatch) ||
		errors.As(err, new(*tls.CertificateVerificationError)) || errors.As(err, new(tls.RecordHeaderError)) ||
		errors.As(err, new(tls.AlertError)) || errors.As(err, new(x509.UnknownAuthorityError)) ||
		errors.As(err, new(x509.HostnameError)) || errors.As(err, new(x509.CertificateInvalidError))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
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
