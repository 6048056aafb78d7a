package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httpserve"
)

const adminUsage = "serve /metrics, the health checks (and serve's dashboard) on `HOST:PORT` instead of the public address, which then has none (keep it on 127.0.0.1 or a private network)"

// startAdmin serves h, the operator's endpoints, on addr (--admin; none
// when empty) in the background. stop ends it and waits; deferred with the
// command's error, it makes a failure of the admin server the command's
// when nothing else failed.
// dashboard says whether h serves the live dashboard at its root.
func startAdmin(ctx context.Context, e *env, addr string, h http.Handler, dashboard bool, log *slog.Logger) (stop func(*error), err error) {
	if addr == "" {
		return func(*error) {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--admin: %w", err)
	}
	fmt.Fprintf(e.stderr, "metrics on http://%s/metrics, health on http://%s%s\n", ln.Addr(), ln.Addr(), contract.ReadyzPath)
	if dashboard {
		fmt.Fprintf(e.stderr, "dashboard on http://%s/\n", ln.Addr())
	}
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- httpserve.Run(ctx, hs, ln, time.Second, nil) }()
	return func(cmdErr *error) {
		cancel()
		err := <-done
		if errors.Is(err, httpserve.ErrGraceExpired) {
			err = nil // a scrape or a dashboard stream cut short by the shutdown
		}
		if *cmdErr == nil && err != nil {
			*cmdErr = fmt.Errorf("--admin: %w", err)
		}
	}, nil
}
