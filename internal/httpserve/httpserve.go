// Package httpserve runs an http.Server until a context ends, then shuts
// it down without waiting on connections that never sent a request.
package httpserve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// ErrGraceExpired is Run's error when requests were still in flight at the
// end of the grace; their connections were closed.
var ErrGraceExpired = errors.New("requests still in flight after the shutdown grace; their connections were closed")

// Run serves ln with hs until ctx is done, then calls stopping (if not
// nil) and shuts hs down: it stops accepting, closes the connections that
// have not sent a request, lets the requests in flight finish for up to
// grace and closes what remains. It returns nil after a clean shutdown,
// ErrGraceExpired if the grace ran out, and Serve's error if ln fails
// first.
//
// http.Server.Shutdown alone counts a connection that has sent nothing
// (a browser's preconnect, a client's spare dial) as busy until it is 5 s
// old, so a server told to stop would wait up to about 6 s for it, though
// a request read once the shutdown has begun is dropped unanswered. Run
// closes those connections as soon as Shutdown has closed the listeners.
// Run chains hs.ConnState; set it before calling Run.
func Run(ctx context.Context, hs *http.Server, ln net.Listener, grace time.Duration, stopping func()) error {
	var s silent
	next := hs.ConnState
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		s.track(c, st)
		if next != nil {
			next(c, st)
		}
	}
	// Shutdown runs this once it has closed the listeners and marked the
	// server as shutting down.
	hs.RegisterOnShutdown(s.close)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if stopping != nil {
		stopping()
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		hs.Close()
		err = ErrGraceExpired
	}
	<-errc // http.ErrServerClosed
	return err
}

// silent tracks the connections that have not sent a request yet: those
// in http.StateNew. A connection leaves that state for good once its first
// request starts.
type silent struct {
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closing bool // set by close: new connections are closed as they come
}

func (s *silent) track(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case st == http.StateNew && s.closing:
		c.Close()
	case st == http.StateNew:
		if s.conns == nil {
			s.conns = map[net.Conn]struct{}{}
		}
		s.conns[c] = struct{}{}
	default:
		delete(s.conns, c)
	}
}

func (s *silent) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
}
