// Package originclient is what a client does against a stampede origin (or
// any HTTP server): the probe (HEAD, with the manifest's head asked for),
// the manifest, pieces by Range with the checks that keep a download
// honest (validators and If-Range, Content-Range, Content-Length), the
// origin's answers beyond plain HTTP (an overload answer's other piece and
// peers, a pick among the candidates offered, "in swarm", the egress
// budget's refusal and what is left of it, 503 with Retry-After), and the
// retry rules around all of it. The names it speaks
// are package contract's.
//
// Package fetch (stampede get) and the gateway use it, and through Source
// a swarm node (package node) gets its origin fetches from it. It verifies
// nothing itself: pieces go to a PieceRequest's Put, which verifies them
// (store.File does) before they count.
//
// Errors are classified with the sentinels below, which stampede get maps
// to documented exit codes (README).
package originclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/ratelimit"
)

// Error classes. Every error this package returns wraps at most one of
// them, or a network error from net/http, or none (generic failure).
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
	// ErrNoManifest: the server links no manifest for the file (Open).
	ErrNoManifest = errors.New("the server publishes no manifest for this file")
	// ErrNoRanges: the server answered a Range request with the whole file.
	ErrNoRanges = errors.New("server ignores Range requests")
	// ErrIdle ends a request or a body that stopped delivering.
	ErrIdle = errors.New("no data for too long")
)

// StatusError is an HTTP error status from the server.
type StatusError struct {
	URL    string
	Code   int
	Status string
}

func (e *StatusError) Error() string { return fmt.Sprintf("%s: server answered %s", e.URL, e.Status) }

// DefaultRetries is stampede get's default for Config.Retries.
const DefaultRetries = 5

// Config configures a Client. Zero durations take the documented defaults.
type Config struct {
	// Client sends the requests (default NewHTTPClient(16)).
	Client *http.Client
	// PeerKey, the swarm node's public key in its one-line form, goes to
	// the origin with the probe and the manifest's requests
	// (contract.PeerKeyHeader), so that the origin of a private swarm
	// answers with a token for it. Empty: not sent.
	PeerKey string
	// Header is sent with every request to the origin (stampede get's
	// --header, --user-agent, --user), before the request's own headers;
	// a User-Agent here replaces "stampede". Peers never see it. Its
	// credentials (Authorization, Cookie: the headers Go's client drops
	// on a redirect to another host) go only to AuthHost.
	Header http.Header
	// AuthHost says where Header's credentials were given for: the
	// scheme, host and port of the URL (https://example.com:8443, without
	// its userinfo). They go there, and to the host's subdomains on the
	// same scheme and port, only (auth.go), after redirects too: the
	// probe's redirect to another host sends none, but the pieces are then
	// asked of that host directly, and a manifest link may name a third.
	// A bare host name checks the host alone. With no AuthHost they go
	// nowhere. Package fetch sets its URL's.
	AuthHost string
	// Logger receives the client's log (default: discard).
	Logger *slog.Logger
	// Limiter caps the rate at which bodies are read (nil: unlimited).
	Limiter *ratelimit.Limiter
	// Retries bounds the retries after transient failures (0: none).
	// Transient failures are refused or reset connections, timeouts, a
	// connection closed before the answer or the end of the body, a
	// temporary DNS failure, and 408, 429, 500, 502 and 504. The probe and
	// the manifest are each tried at most Retries+1 times; a caller's loop
	// over pieces counts with Patience. Permanent failures (other 4xx, a
	// host name that does not exist, TLS) are not retried. The pauses
	// between tries are Backoff's (a 429's or 5xx's Retry-After when
	// longer).
	Retries int
	// MaxRetryAfter caps how long 503s' Retry-After are honoured in total
	// with nothing coming in between, before giving up (default 5m).
	MaxRetryAfter time.Duration
	// IdleTimeout ends a streamed body that delivers nothing for this long
	// (default 60s), and bounds OriginIdleTimeout's growth.
	IdleTimeout time.Duration
	// OriginIdleTimeout ends a swarm node's origin fetch (Source.Fetcher)
	// that receives nothing for this long (default 5s): the piece goes
	// back to the scheduler, which asks again, on a new connection. A
	// connection that lost packets on a full link can wait many seconds in
	// TCP's retransmission backoff while the whole swarm waits for the
	// piece it claimed. Each such end doubles the timeout for the next
	// fetches (up to IdleTimeout), and each fetch that completes halves it
	// back, so a server that is merely that slow is still waited for. Keep
	// it above a stampede origin's wait for a piece answer's turn (2 s,
	// origin/pace.go), during which no header comes.
	OriginIdleTimeout time.Duration
}

// NewHTTPClient returns an HTTP client suited to parallel Range requests to
// one host: enough idle connections to reuse one per request in flight, and
// no transparent decompression (bytes must arrive exactly as hashed).
func NewHTTPClient(parallel int) *http.Client {
	c, _ := HTTPOptions{Parallel: parallel}.Client()
	return c
}

// HTTPOptions are the transport settings a user may choose: stampede get's
// --proxy, --cacert, --insecure and --connect-timeout.
type HTTPOptions struct {
	// Parallel is the most requests in flight to one host (default 16).
	Parallel int
	// Proxy, if set, carries every request; otherwise the environment's
	// (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) does.
	Proxy *url.URL
	// RootCAs, if set, replaces the system's certificate authorities.
	RootCAs *x509.CertPool
	// Insecure skips checking the server's certificate.
	Insecure bool
	// ConnectTimeout bounds connecting, TLS handshake included (default 30s).
	ConnectTimeout time.Duration
}

// Client returns an HTTP client with o's settings (see NewHTTPClient).
func (o HTTPOptions) Client() (*http.Client, error) {
	if o.Parallel <= 0 {
		o.Parallel = 16
	}
	if o.ConnectTimeout < 0 {
		return nil, fmt.Errorf("%w: connect timeout %v", ErrUsage, o.ConnectTimeout)
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 30 * time.Second
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 2*o.Parallel + 2
	t.DisableCompression = true
	t.ResponseHeaderTimeout = 60 * time.Second
	t.DialContext = (&net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = o.ConnectTimeout
	if o.Proxy != nil {
		t.Proxy = http.ProxyURL(o.Proxy)
	}
	if o.RootCAs != nil || o.Insecure {
		t.TLSClientConfig = &tls.Config{RootCAs: o.RootCAs, InsecureSkipVerify: o.Insecure}
	}
	return &http.Client{Transport: t}, nil
}

// Client talks to origins. It is safe for concurrent use; it counts the
// requests it sends by reason and the body bytes of pieces it receives.
type Client struct {
	cfg      Config
	received atomic.Int64

	mu       sync.Mutex // guards the following
	requests map[string]int
	budget   contract.Budget // the latest an answer told (Budget)
	budgetAt time.Time       // zero: none yet
}

// New returns a Client for cfg, its zero fields set to their defaults.
func New(cfg Config) *Client {
	if cfg.Client == nil {
		cfg.Client = NewHTTPClient(16)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Retries < 0 {
		cfg.Retries = 0
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = 5 * time.Minute
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 60 * time.Second
	}
	if cfg.OriginIdleTimeout <= 0 {
		cfg.OriginIdleTimeout = 5 * time.Second
	}
	return &Client{cfg: cfg, requests: map[string]int{}}
}

// Requests returns the requests sent so far by reason (a copy).
func (c *Client) Requests() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.requests))
	for k, v := range c.requests {
		out[k] = v
	}
	return out
}

// Received counts the body bytes of pieces received (FetchPiece), those of
// rejected pieces included.
func (c *Client) Received() int64 { return c.received.Load() }

// Budget is the file's egress budget as the latest piece answer that told
// it said (contract.BudgetHeader), when that answer came, and false if
// none has. A stampede origin tells every swarm client's piece answer: the
// bytes of the file it may still send swarm clients in its window, and
// when the window ends. For a Client fetching one file (stampede get's)
// it is that file's; Source.Budget is one file's.
func (c *Client) Budget() (b contract.Budget, at time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.budget, c.budgetAt, !c.budgetAt.IsZero()
}

func (c *Client) noteBudget(b contract.Budget) {
	c.mu.Lock()
	c.budget, c.budgetAt = b, time.Now()
	c.mu.Unlock()
}

func (c *Client) count(reason string) {
	c.mu.Lock()
	c.requests[reason]++
	c.mu.Unlock()
}
