package health_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/health"
)

func get(h http.Handler, method, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

func TestHealth(t *testing.T) {
	var storeErr error
	mux := http.NewServeMux()
	health.Mount(mux, slog.New(slog.DiscardHandler),
		health.Check{Name: "directory", Run: func(context.Context) error { return nil }},
		health.Check{Name: "tracker store", Run: func(context.Context) error { return storeErr }},
	)
	for _, path := range []string{contract.HealthzPath, contract.ReadyzPath} {
		rec := get(mux, "GET", path)
		if rec.Code != http.StatusOK || rec.Body.String() != "ok\n" || rec.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s: %d %q %v", path, rec.Code, rec.Body, rec.Header())
		}
		if rec := get(mux, "HEAD", path); rec.Code != http.StatusOK {
			t.Errorf("HEAD %s: %d", path, rec.Code)
		}
	}

	storeErr = errors.New("dial tcp 10.1.2.3:6379: connection refused")
	if rec := get(mux, "GET", contract.HealthzPath); rec.Code != http.StatusOK {
		t.Errorf("healthz with a check failing: %d", rec.Code)
	}
	rec := get(mux, "GET", contract.ReadyzPath)
	if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != "not ready: tracker store\n" {
		t.Errorf("readyz with the store down: %d %q", rec.Code, rec.Body)
	}
}

// TestReadyDeadline: the checks run under a deadline, so that a store
// that does not answer fails the check rather than hanging the prober.
func TestReadyDeadline(t *testing.T) {
	h := health.Ready(slog.New(slog.DiscardHandler), health.Check{Name: "stuck", Run: func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		return nil
	}})
	if rec := get(h, "GET", "/"); rec.Code != http.StatusOK {
		t.Errorf("%d %q", rec.Code, rec.Body)
	}
}
