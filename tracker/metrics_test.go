package tracker

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/golden"
	"github.com/stampede-dev/stampede/internal/metrics"
	"github.com/stampede-dev/stampede/internal/metrics/metricstest"
)

// metricsHarness is a harness after a few announces of each kind.
func metricsHarness(t *testing.T) *harness {
	h := newHarness(t, Config{})
	for i := range 5 {
		h.announce(peer(i), EventStarted, 100, 0)
	}
	h.announce(peer(0), EventCompleted, 0, 0)
	h.announce(peer(1), EventNone, 50, 0) // less than a second later: rate limited
	h.clock.Advance(2 * time.Second)
	h.announce(peer(1), EventStopped, 50, 0)
	h.serve("GET", "root=nothex", "192.0.2.1:5000")
	return h
}

// TestMetricsExposition pins the tracker's series byte for byte, as the
// standalone tracker's /metrics has them: the testbed and dashboards read
// these names. The Go runtime's and the process's series are left out:
// their values are the machine's.
func TestMetricsExposition(t *testing.T) {
	h := metricsHarness(t)
	var b bytes.Buffer
	if err := metrics.WriteText(&b, h.tr.registry(), "stampede_tracker_"); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/metrics.golden", b.Bytes())

	var direct bytes.Buffer
	if err := h.tr.WriteMetrics(&direct); err != nil {
		t.Fatal(err)
	}
	if direct.String() != b.String() {
		t.Errorf("WriteMetrics differs from the registry's page:\n%s", direct.String())
	}
}

// keptNames are the series that scripts, tests and docs outside this
// package read by name (bench/system.go, cmd/stampede's tests,
// docs/tracker.md). Renaming one breaks them: add the new name beside the
// old, keep the old one for a release, and say so in docs/tracker.md.
var keptNames = []string{
	"stampede_tracker_announces_total",
	"stampede_tracker_announces_rate_limited_total",
	"stampede_tracker_announces_late_total",
	"stampede_tracker_announces_rejected_total",
	"stampede_tracker_store_failures_total",
	"stampede_tracker_swarms",
	"stampede_tracker_peers",
	"stampede_tracker_peers_estimated",
	"stampede_tracker_peers_removed_total",
	"stampede_tracker_swarms_removed_total",
}

// TestMetricsPage checks the standalone tracker's /metrics as Prometheus
// would read it, and that it has the series others read by name.
func TestMetricsPage(t *testing.T) {
	h := metricsHarness(t)
	rec := httptest.NewRecorder()
	h.tr.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %v", rec.Code, rec.Header())
	}
	names := metricstest.Check(t, rec.Body.Bytes())
	want := append([]string{"stampede_build_info", "stampede_tracker_announce_duration_seconds", "go_goroutines"}, keptNames...)
	if runtime.GOOS == "linux" {
		want = append(want, "process_cpu_seconds_total")
	}
	for _, name := range want {
		if !names[name] {
			t.Errorf("/metrics has no %s", name)
		}
	}
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

// TestHealth: the tracker is alive while it answers, and ready while its
// store does; a store that fails is named, never where it is.
func TestHealth(t *testing.T) {
	h := newHarness(t, Config{})
	for _, path := range []string{contract.HealthzPath, contract.ReadyzPath} {
		if code, body := get(t, h.tr.Handler(), path); code != http.StatusOK || body != "ok\n" {
			t.Errorf("%s: %d %q", path, code, body)
		}
	}

	down := newHarness(t, Config{Store: failingStore{}})
	if code, body := get(t, down.tr.Handler(), contract.HealthzPath); code != http.StatusOK {
		t.Errorf("healthz with the store down: %d %q", code, body)
	}
	code, body := get(t, down.tr.Handler(), contract.ReadyzPath)
	if code != http.StatusServiceUnavailable || body != "not ready: tracker store\n" {
		t.Errorf("readyz with the store down: %d %q", code, body)
	}
	var b strings.Builder
	down.tr.WriteMetrics(&b)
	if !strings.Contains(b.String(), "stampede_tracker_store_failures_total 2\n") {
		t.Errorf("store failures: want 2 (readyz, then the scrape):\n%s", b.String())
	}
}
