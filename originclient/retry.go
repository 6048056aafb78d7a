package originclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
)

// Do sends one request, counting it under reason, which goes to the origin
// in contract.ReasonHeader on a GET of the file's bytes. Network errors
// come back as they are (a *url.Error); a 503 is returned to the caller to
// honour.
func (c *Client) Do(ctx context.Context, method string, u *url.URL, hdr http.Header, reason string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	req.Header.Set("User-Agent", "stampede")
	scope := parseAuthScope(c.cfg.AuthHost)
	for k, v := range c.cfg.Header {
		if credentialHeader(k) && !scope.allows(u) {
			continue
		}
		req.Header[k] = v
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c.cfg.PeerKey != "" && (reason == "probe" || reason == "manifest") {
		req.Header.Set(contract.PeerKeyHeader, c.cfg.PeerKey)
	}
	if method == http.MethodGet && reason != "manifest" {
		// The origin counts its file requests by why they were made.
		req.Header.Set(contract.ReasonHeader, reason)
	}
	c.count(reason)
	return scope.guardRedirects(c.cfg.Client, req).Do(req)
}

// DoPatiently is Do, waiting out 503 answers for their Retry-After until
// *busyWaited exceeds MaxRetryAfter.
func (c *Client) DoPatiently(ctx context.Context, method string, u *url.URL, hdr http.Header, reason string, busyWaited *time.Duration) (*http.Response, error) {
	for {
		resp, err := c.Do(ctx, method, u, hdr, reason)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			return resp, err
		}
		resp.Body.Close()
		wait := retryAfter(resp.Header, time.Now())
		if *busyWaited += wait; *busyWaited > c.cfg.MaxRetryAfter {
			return nil, &StatusError{URL: u.String(), Code: resp.StatusCode,
				Status: fmt.Sprintf("503 Service Unavailable for more than %v in total", c.cfg.MaxRetryAfter)}
		}
		c.cfg.Logger.Info("server busy, waiting", "url", u, "retry_after", wait)
		if err := Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// doRetrying is DoPatiently, tried again after transient failures (see
// Config.Retries): for the requests a download cannot start without, the
// probe and the manifest. Any other status comes back to the caller.
func (c *Client) doRetrying(ctx context.Context, method string, u *url.URL, hdr http.Header, reason string, busyWaited *time.Duration) (*http.Response, error) {
	var resp *http.Response
	err := c.retrying(ctx, method+" "+u.String(), func() (time.Duration, error) {
		r, err := c.DoPatiently(ctx, method, u, hdr, reason, busyWaited)
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
// transiently Retries+1 times in a row, pausing Backoff(n) after the n-th
// failure, or longer when try returns the server's Retry-After as a hint.
// what names the request in the log and in the final error.
func (c *Client) retrying(ctx context.Context, what string, try func() (hint time.Duration, err error)) error {
	p := Patience{Retries: c.cfg.Retries}
	for {
		hint, err := try()
		if err == nil || ctx.Err() != nil || !Transient(err) {
			return err
		}
		wait, ok := p.Failed(0)
		if !ok {
			return fmt.Errorf("gave up on %s after %s, last: %w", what, p.Tries(), err)
		}
		wait = max(wait, hint)
		// Warn, not Info: nothing else is happening, and a progress bar
		// would otherwise sit still with no word of why.
		c.cfg.Logger.Warn("request failed, retrying", "request", what,
			"retry", fmt.Sprintf("%d/%d", p.Failures, p.Retries), "in", wait, "err", err)
		if err := Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// Patience counts the consecutive transient failures of one request loop
// (a piece, the stream, the probe) since it last saw the download progress.
type Patience struct {
	Retries  int   // Config.Retries
	Failures int   // in a row, without progress
	mark     int64 // the furthest progress seen at a failure
}

// Failed records a failure when the download's progress measure (which
// only means something compared with itself: pieces verified, the
// furthest stream offset) stands at progress. Progress since the last
// failure starts the count again. It returns the pause before the next
// try, or false once the failures in a row exceed Retries.
func (p *Patience) Failed(progress int64) (time.Duration, bool) {
	if progress > p.mark {
		p.Failures, p.mark = 0, progress
	}
	p.Failures++
	if p.Failures > p.Retries {
		return 0, false
	}
	return Backoff(p.Failures), true
}

// Tries says how many tries the failures in a row were: "1 try", "3 tries".
func (p *Patience) Tries() string {
	if p.Failures == 1 {
		return "1 try"
	}
	return strconv.Itoa(p.Failures) + " tries"
}

// Backoff is the pause before the n-th retry (from 1): 100 ms doubling to
// at most 5 s, so that a dead origin with the default 5 retries is given up
// on after 3.1 s of pauses.
func Backoff(n int) time.Duration {
	return min(5*time.Second, 100*time.Millisecond<<min(n-1, 10))
}

// retryableStatus: answers that say "not now" rather than "no" (the set
// curl's --retry uses): 408 and 429, and the 5xx a server, or a proxy in
// front of one that is restarting, gives. 503 is waited out for its
// Retry-After by DoPatiently, under MaxRetryAfter; a *StatusError with 503
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

// Transient reports whether err may go away by itself: the network failed
// (a refused, reset or timed-out connection, one closed before the answer
// or the end of the body, a temporary DNS failure, a stalled body) or the
// server said "not now" (408, 429, 500, 502, 504).
func Transient(err error) bool {
	switch {
	case errors.Is(err, ErrUsage), errors.Is(err, ErrLocal), errors.Is(err, ErrChanged),
		errors.Is(err, ErrVerify), errors.Is(err, ErrNoRanges), isCorrupt(err):
		return false
	case Permanent(err):
		return false
	}
	if se, ok := errors.AsType[*StatusError](err); ok {
		return retryableStatus(se.Code)
	}
	var timeout interface{ Timeout() bool }
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrIdle) ||
		errors.As(err, new(*net.OpError)) || (errors.As(err, &timeout) && timeout.Timeout())
}

// Permanent reports whether retrying err cannot help: an error status other
// than the "not now" ones, a host name that does not exist, a TLS failure
// (a certificate we do not trust, an alert, a server that does not speak
// TLS).
func Permanent(err error) bool {
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

func isCorrupt(err error) bool { return errors.Is(err, manifest.ErrCorruptPiece) }

// retryAfter parses a 503's Retry-After (seconds or an HTTP date), defaulting
// to 1s and bounded to [100ms, 60s] per response. A number of seconds too
// large for an int64 is a very long time, the cap; the seconds are bounded
// before they become a Duration, which a large count would overflow.
func retryAfter(h http.Header, now time.Time) time.Duration {
	const lo, hi = 100 * time.Millisecond, 60 * time.Second
	d := time.Second
	v := h.Get("Retry-After")
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil || (errors.Is(err, strconv.ErrRange) && isInteger(v)) {
		// On ErrRange, ParseInt gives the int64 nearest the number; it
		// may say so before it has read the rest (hence isInteger).
		d = time.Duration(max(-1, min(secs, int64(hi/time.Second)+1))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(lo, min(hi, d))
}

// isInteger reports whether v is a whole number of seconds, as ParseInt
// reads them: digits, perhaps after a "+". (A negative one is nonsense,
// of any size.)
func isInteger(v string) bool {
	v = strings.TrimPrefix(v, "+")
	return v != "" && strings.Trim(v, "0123456789") == ""
}

// Sleep pauses for d, or until ctx ends (its error then).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
