package origin

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/golden"
	"github.com/stampede-dev/stampede/internal/metrics"
	"github.com/stampede-dev/stampede/internal/metrics/metricstest"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

// TestMetricsExposition pins the origin's series byte for byte:
// dashboards and the testbed read these names, and the format is
// Prometheus text 0.0.4. The Go runtime's and the process's series, whose
// values are the machine's, are left out.
func TestMetricsExposition(t *testing.T) {
	m := newSeries()
	m.bytesSent.Add(123456789)
	for k := range numKinds {
		m.requests[k].Add(float64(10 + k))
	}
	for i := range m.fileReasons {
		m.fileReasons[i].Add(float64(100 + i))
	}
	for _, code := range []int{503, 200, 206, 200, 404, 200} {
		m.countResponse(code)
	}
	m.rejectedOverload.Add(7)
	m.stalled.Add(3)
	for i := range numOutcomes {
		m.overload[i].Add(float64(20 + i))
	}
	m.overloadBytes.Add(1 << 20)
	m.pieceSends[sendFirst].Add(512)
	m.pieceSends[sendAgain].Add(15)
	m.picksSwapped.Add(37)
	m.manifestsComputed.Add(5)
	m.manifestFailures.Add(1)
	m.manifestHits[hitMemory].Add(40)
	m.manifestHits[hitDisk].Add(4)
	m.cacheBytes.Set(22361)
	for i := range numCacheRemoved {
		m.cacheRemoved[i].Add(float64(50 + i))
	}
	for i := range numUpstream {
		m.upstreamRequests[i].Add(float64(30 + i))
	}
	// Values on bucket bounds and between them, binary fractions so that
	// the sums print exactly.
	for _, d := range []float64{0.0009765625, 0.25, 3, 400} {
		m.requestDuration[kindFile].Observe(d)
	}
	m.requestDuration[kindManifest].Observe(0.0078125)
	m.firstByte[kindFile].Observe(0.0625)
	m.firstByte[kindManifest].Observe(0.0078125)
	m.pieceDuration.Observe(0.015625)
	m.pieceDuration.Observe(2)
	g := newGate(64, 16, 0, 0, testLogger(t))
	g.enter(&transfer{size: 100}, false, 0)
	var b bytes.Buffer
	if err := metrics.WriteText(&b, newRegistry(m, g, 1<<20, DefaultMaxCopies, DefaultBudgetWindow, nil), "stampede_origin_"); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/metrics.golden", b.Bytes())
}

// keptNames are the series that scripts, tests and docs outside this
// package read by name (bench/system.go reads the bytes sent, the node and
// cmd/stampede tests several, docs/architecture.md explains them).
// Renaming one breaks them: add the new name beside the old, keep the old
// one for a release, and say so in docs/architecture.md, as for
// stampede_origin_rate_limit_bytes.
var keptNames = []string{
	"stampede_origin_bytes_sent_total",
	"stampede_origin_requests_total",
	"stampede_origin_file_requests_total",
	"stampede_origin_responses_total",
	"stampede_origin_rejected_total",
	"stampede_origin_responses_stalled_total",
	"stampede_origin_overload_answers_total",
	"stampede_origin_overload_bytes_sent_total",
	"stampede_origin_piece_sends_total",
	"stampede_origin_piece_picks_total",
	"stampede_origin_paced_total",
	"stampede_origin_transfers_active",
	"stampede_origin_transfers_max",
	"stampede_origin_overload_answers_active",
	"stampede_origin_overload_answers_max",
	"stampede_origin_rate_limit_bytes", // deprecated: gone after the next release
	"stampede_origin_manifests_computed_total",
	"stampede_origin_manifest_failures_total",
	"stampede_origin_manifest_cache_hits_total",
	"stampede_origin_manifest_cache_bytes",
	"stampede_origin_manifest_cache_removed_total",
	"stampede_origin_upstream_requests_total",
	"stampede_origin_budget_overruns_total",
	"stampede_origin_budget_copies",
	"stampede_origin_budget_window_seconds",
}

// TestMetricsPage checks /metrics of an origin with an embedded tracker
// as Prometheus reads it, and that it has the series others read by name,
// the new ones, the tracker's, and the Go runtime's and the process's.
func TestMetricsPage(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", bytes.Repeat([]byte("x"), 5000), time.Now())
	ts := start(t, Config{Dir: dir, Tracker: tracker.New(tracker.Config{Logger: testLogger(t)})})
	ts.do(t, "GET", "/f")
	ts.manifest(t, "/f")

	res, body := ts.do(t, "GET", "/metrics")
	if res.StatusCode != http.StatusOK || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("/metrics: %s %v", res.Status, res.Header)
	}
	names := metricstest.Check(t, body)
	want := append([]string{
		"stampede_origin_rate_limit_bytes_per_second",
		"stampede_origin_request_duration_seconds",
		"stampede_origin_time_to_first_byte_seconds",
		"stampede_origin_piece_duration_seconds",
		"stampede_tracker_announces_total",
		"stampede_tracker_swarms",
		"stampede_build_info",
		"go_goroutines",
	}, keptNames...)
	if runtime.GOOS == "linux" {
		want = append(want, "process_resident_memory_bytes")
	}
	for _, name := range want {
		if !names[name] {
			t.Errorf("/metrics has no %s", name)
		}
	}
	samples := ts.metrics(t)
	for series, min := range map[string]int64{
		`stampede_origin_request_duration_seconds_count{kind="file"}`:    1,
		`stampede_origin_time_to_first_byte_seconds_count{kind="file"}`:  1,
		`stampede_origin_request_duration_seconds_count{kind="metrics"}`: 1,
	} {
		if samples[series] < min {
			t.Errorf("%s = %d, want at least %d", series, samples[series], min)
		}
	}
}

// TestHealth: the health checks answer at their well-known paths, are
// counted as such (not as file bytes), and readyz fails while the served
// directory cannot be read.
func TestHealth(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "site")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "f", []byte("hello"), time.Now())
	ts := start(t, Config{Dir: dir})
	for _, path := range []string{contract.HealthzPath, contract.ReadyzPath} {
		res, body := ts.do(t, "GET", path)
		if res.StatusCode != http.StatusOK || string(body) != "ok\n" || res.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: %s %q %v", path, res.Status, body, res.Header)
		}
		if res, _ := ts.do(t, "HEAD", path); res.StatusCode != http.StatusOK {
			t.Errorf("HEAD %s: %s", path, res.Status)
		}
	}
	samples := ts.metrics(t)
	if got := samples[`stampede_origin_requests_total{kind="health"}`]; got != 4 {
		t.Errorf("health requests %d, want 4", got)
	}
	if got := samples["stampede_origin_bytes_sent_total"]; got != 0 {
		t.Errorf("bytes sent %d, want 0: health checks are the operator's", got)
	}

	if os.Getuid() == 0 {
		// root reads a directory whatever its mode: a closed one stands
		// for a directory gone bad.
		ts.closeRoot()
	} else {
		if err := os.Chmod(dir, 0o311); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
	}
	res, body := ts.do(t, "GET", contract.ReadyzPath)
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "not ready: directory") {
		t.Errorf("readyz of an unreadable directory: %s %q", res.Status, body)
	}
	if res, _ := ts.do(t, "GET", contract.HealthzPath); res.StatusCode != http.StatusOK {
		t.Errorf("healthz of an unreadable directory: %s", res.Status)
	}
}

// TestHealthTrackerStore: an origin whose embedded tracker's store fails
// is not ready, and says why without saying where the store is.
func TestHealthTrackerStore(t *testing.T) {
	ts := start(t, Config{Dir: t.TempDir(), Tracker: tracker.New(tracker.Config{Store: downStore{}, Logger: testLogger(t)})})
	res, body := ts.do(t, "GET", contract.ReadyzPath)
	if res.StatusCode != http.StatusServiceUnavailable || string(body) != "not ready: tracker store\n" {
		t.Errorf("readyz: %s %q", res.Status, body)
	}
}

// downStore is a tracker store that does not answer.
type downStore struct{}

var errStoreDown = errors.New("dial tcp 10.1.2.3:6379: connection refused")

func (downStore) Announce(context.Context, tracker.AnnounceRequest, netip.AddrPort, time.Time) (tracker.Outcome, error) {
	return tracker.Outcome{}, errStoreDown
}

func (downStore) Peers(context.Context, manifest.Hash, int64, int, time.Time) (tracker.Outcome, error) {
	return tracker.Outcome{}, errStoreDown
}

func (downStore) Stats(context.Context, time.Time) (tracker.StoreStats, error) {
	return tracker.StoreStats{}, errStoreDown
}
