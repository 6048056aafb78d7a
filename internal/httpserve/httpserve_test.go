package httpserve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// start runs Run on a loopback listener and returns its address, the
// function that stops it and the channel of its result. onNew, if not nil,
// is the server's own ConnState hook for new connections, which Run must
// keep calling.
func start(t *testing.T, h http.Handler, grace time.Duration, onNew func()) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew && onNew != nil {
			onNew()
		}
	}}
	ctx, cancel := context.WithCancel(t.Context())
	done, returned := make(chan error, 1), make(chan struct{})
	go func() {
		done <- Run(ctx, hs, ln, grace, nil)
		close(returned)
	}()
	t.Cleanup(func() {
		cancel()
		<-returned
	})
	return ln.Addr().String(), cancel, done
}

// within waits up to d for Run's result.
func within(t *testing.T, done <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("Run did not return within %v", d)
		return nil
	}
}

// client is an HTTP client of the test's own, its connections closed when
// the test ends.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestSilentConnectionDoesNotHoldShutdown: a connection that never sent a
// request is closed at once; http.Server.Shutdown alone waits 5 s for it.
func TestSilentConnectionDoesNotHoldShutdown(t *testing.T) {
	accepted := make(chan struct{}, 1)
	addr, stop, done := start(t, http.NotFoundHandler(), 10*time.Second, func() { accepted <- struct{}{} })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-accepted // its StateNew hook ran (the chained one too)
	begin := time.Now()
	stop()
	if err := within(t, done, 2*time.Second); err != nil {
		t.Errorf("Run: %v", err)
	}
	t.Logf("shut down in %v with a silent connection open", time.Since(begin))
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("the silent connection read %d bytes, want it closed", n)
	}
}

// TestStoppingRunsFirst: the stopping hook runs once, when ctx ends, before
// Run returns.
func TestStoppingRunsFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, &http.Server{Handler: http.NotFoundHandler()}, ln, time.Second, func() { calls++ })
	}()
	cancel()
	if err := within(t, done, 2*time.Second); err != nil || calls != 1 {
		t.Errorf("Run: %v, stopping called %d times; want nil and once", err, calls)
	}
}

// TestRequestInFlightFinishes: a request under way when the shutdown
// begins gets its whole answer; Run waits for it and returns nil.
func TestRequestInFlightFinishes(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	addr, stop, done := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		io.WriteString(w, "whole answer")
	}), 10*time.Second, nil)
	got := make(chan string, 1)
	go func() {
		resp, err := client(t).Get("http://" + addr + "/")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-started
	stop()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v with a request in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if s := <-got; s != "whole answer" {
		t.Errorf("the request in flight got %q", s)
	}
	if err := within(t, done, 2*time.Second); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestGraceExpires: a request that outlasts the grace is cut, and Run says
// so.
func TestGraceExpires(t *testing.T) {
	started := make(chan struct{})
	addr, stop, done := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	}), 100*time.Millisecond, nil)
	go func() {
		if resp, err := client(t).Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	stop()
	if err := within(t, done, 2*time.Second); !errors.Is(err, ErrGraceExpired) {
		t.Errorf("Run: %v, want ErrGraceExpired", err)
	}
}

// TestListenerFails: Run returns Serve's error when the listener fails.
func TestListenerFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	err = Run(t.Context(), &http.Server{Handler: http.NotFoundHandler()}, ln, time.Second, nil)
	if err == nil || errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Run on a closed listener: %v, want its error", err)
	}
}
