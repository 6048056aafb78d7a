package originclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/manifest"
)

func TestTransientOrPermanent(t *testing.T) {
	const (
		neither = iota
		isTransient
		isPermanent
	)
	dial := func(err error) error {
		return &url.Error{Op: "Head", URL: "http://h/f", Err: &net.OpError{Op: "dial", Net: "tcp", Err: err}}
	}
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"connection refused", dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), isTransient},
		{"reset mid-body", fmt.Errorf("%w: piece 3: body ended after 512 of 65536 bytes: %w", ErrProtocol,
			&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), isTransient},
		{"closed before the answer", &url.Error{Op: "Get", URL: "http://h/f", Err: io.EOF}, isTransient},
		{"body cut", fmt.Errorf("%w: body ended: %w", ErrProtocol, io.ErrUnexpectedEOF), isTransient},
		{"timeout", &url.Error{Op: "Get", URL: "http://h/f", Err: os.ErrDeadlineExceeded}, isTransient},
		{"stalled body", fmt.Errorf("read: %w (%w after 1m0s)", context.Canceled, ErrIdle), isTransient},
		{"DNS failing for now", dial(&net.DNSError{Err: "server misbehaving", Name: "h", IsTemporary: true}), isTransient},
		{"502", &StatusError{Code: 502}, isTransient},
		{"504", &StatusError{Code: 504}, isTransient},
		{"429", &StatusError{Code: 429}, isTransient},
		{"DNS name not found", dial(&net.DNSError{Err: "no such host", Name: "h.invalid", IsNotFound: true}), isPermanent},
		{"404", &StatusError{Code: 404}, isPermanent},
		{"403", &StatusError{Code: 403}, isPermanent},
		{"503 past patience", &StatusError{Code: 503}, isPermanent},
		{"untrusted certificate", &url.Error{Op: "Get", URL: "https://h/f",
			Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, isPermanent},
		{"wrong host in certificate", &url.Error{Op: "Get", URL: "https://h/f", Err: x509.HostnameError{Host: "h"}}, isPermanent},
		{"TLS alert", &url.Error{Op: "Get", URL: "https://h/f", Err: &net.OpError{Op: "remote error", Err: tls.AlertError(40)}}, isPermanent},
		{"not TLS", &url.Error{Op: "Get", URL: "https://h/f", Err: http.ErrSchemeMismatch}, isPermanent},
		{"wrong Content-Range", fmt.Errorf("%w: piece 2: asked for bytes 0-9, got Content-Range %q", ErrProtocol, "bytes 5-9/10"), neither},
		{"corrupt", fmt.Errorf("store: %w", manifest.ErrCorruptPiece), neither},
		{"changed", fmt.Errorf("%w: ETag was a, is now b", ErrChanged), neither},
		{"local", fmt.Errorf("%w: disk full", ErrLocal), neither},
	} {
		got := neither
		switch tr, pe := Transient(tc.err), Permanent(tc.err); {
		case tr && pe:
			t.Errorf("%s: %v is both transient and permanent", tc.name, tc.err)
			continue
		case tr:
			got = isTransient
		case pe:
			got = isPermanent
		}
		if got != tc.want {
			t.Errorf("%s: %v: class %d, want %d (0 neither, 1 transient, 2 permanent)", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestPatience(t *testing.T) {
	p := Patience{Retries: 2}
	for i, step := range []struct {
		progress int64
		want     int // failures in a row after this one; 0: give up
	}{
		{0, 1}, {0, 2}, // two in a row
		{5, 1}, {5, 2}, // progress starts the count again
		{9, 1}, {9, 2}, {9, 0}, // the third in a row gives up
	} {
		wait, ok := p.Failed(step.progress)
		switch {
		case step.want == 0 && ok:
			t.Fatalf("step %d: retrying after %d failures in a row, want to give up", i, p.Failures)
		case step.want > 0 && (!ok || p.Failures != step.want || wait != Backoff(step.want)):
			t.Fatalf("step %d: ok %v, %d in a row, wait %v; want %d in a row, wait %v", i, ok, p.Failures, wait, step.want, Backoff(step.want))
		}
	}
}

// TestIdleBodyCountsOnlyReads: the time a reader spends between reads (its
// own work, a slow disk) does not count against the idle timeout.
func TestIdleBodyCountsOnlyReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 100 * time.Millisecond
		ctx, cancel := context.WithCancelCause(t.Context())
		b := newIdleBody(ctx, io.NopCloser(strings.NewReader("abcd")), idle, cancel)
		defer b.Close()
		buf := make([]byte, 1)
		for i := range 4 {
			if _, err := b.Read(buf); err != nil {
				t.Fatalf("read %d: %v", i, err)
			}
			time.Sleep(3 * idle) // the reader's own work, in the bubble's time
		}
		if err := context.Cause(ctx); err != nil {
			t.Fatalf("the body was cancelled (%v) while its reader was busy between reads", err)
		}
	})
}
