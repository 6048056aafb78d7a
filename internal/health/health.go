// Package health answers the health checks every stampede server serves
// (the origin, the tracker, the gateway, the daemon's API), at the paths
// package contract names: contract.HealthzPath, alive, and
// contract.ReadyzPath, ready to do the server's work. A server lists what
// readiness means for it as Checks.
//
// A failing check is named in the answer, and its error is only logged:
// what failed (a Redis address, a server's message, a path) is for the
// operator, not for whoever reaches the server.
package health

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/contract"
)

// Timeout bounds a readiness answer, all its checks together: a check
// stuck on an unreachable store fails rather than hanging the prober.
const Timeout = 5 * time.Second

// Check is one condition of readiness.
type Check struct {
	// Name says what is checked, in the 503's body ("directory",
	// "tracker store").
	Name string
	// Run returns nil when the condition holds.
	Run func(ctx context.Context) error
}

// Live answers a liveness check: 200 "ok" to whoever asks, as long as the
// server answers HTTP at all.
func Live() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, "ok\n")
	})
}

// Ready answers a readiness check: it runs checks in order and answers
// 200 "ok" when all hold, else 503 with a line "not ready: NAME" for each
// that does not. The errors go to log.
func Ready(log *slog.Logger, checks ...Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), Timeout)
		defer cancel()
		var failed strings.Builder
		for _, c := range checks {
			if err := c.Run(ctx); err != nil {
				log.Warn("readiness check failed", "check", c.Name, "err", err)
				failed.WriteString("not ready: " + c.Name + "\n")
			}
		}
		if failed.Len() > 0 {
			answer(w, http.StatusServiceUnavailable, failed.String())
			return
		}
		answer(w, http.StatusOK, "ok\n")
	})
}

// DirReadable returns a check that the directory open opens can be
// listed: a disk unmounted or a permission changed under a server shows
// there before its requests fail one by one.
func DirReadable(open func() (*os.File, error)) func(context.Context) error {
	return func(context.Context) error {
		d, err := open()
		if err != nil {
			return err
		}
		defer d.Close()
		if _, err := d.Readdirnames(1); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		return nil
	}
}

// Mount serves Live and Ready at their contract paths on mux, for GET and
// HEAD.
func Mount(mux *http.ServeMux, log *slog.Logger, checks ...Check) {
	mux.Handle("GET "+contract.HealthzPath, Live())
	mux.Handle("GET "+contract.ReadyzPath, Ready(log, checks...))
}

func answer(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	// A probe must see the server's state now, not a cache's.
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write([]byte(body))
}
