package gateway

import (
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/metrics/metricstest"
)

// TestMetrics: the gateway's /metrics (a 400 before it had one) passes
// Prometheus' checks and counts each answer by how it was made: a file
// through the swarm, whose client waited for pieces, and a 404 proxied
// straight through. A proxy request for an origin's /metrics still goes to
// the origin.
func TestMetrics(t *testing.T) {
	data := randomBytes(1<<20+5, 3)
	o := startOrigin(t, map[string][]byte{"f.bin": data}, originOpts{})
	g := startGateway(t, Config{})
	if resp, body := get(t, g.proxyClient(), "GET", o.base+"/f.bin", nil); resp.StatusCode != 200 || len(body) != len(data) {
		t.Fatalf("swarm answer: %s, %d bytes", resp.Status, len(body))
	}
	if resp, _ := get(t, g.proxyClient(), "GET", o.base+"/missing", nil); resp.StatusCode != 404 {
		t.Fatalf("404 passed on: %s", resp.Status)
	}
	resp, body := get(t, g.proxyClient(), "GET", o.base+"/metrics", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "stampede_origin_bytes_sent_total") {
		t.Fatalf("the origin's /metrics through the gateway: %s\n%s", resp.Status, body)
	}

	// A handler counts its answer once it returns, which may be just
	// after its client has the whole body: scrape until the swarm answer
	// is counted (or give up after a while and let the checks say what
	// is missing).
	scrapes := 0 // before the last, each counted as a "gateway" answer
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, body = get(t, plainClient(), "GET", g.base+"/metrics", nil)
		scrapes++
		if strings.Contains(string(body), `stampede_gateway_requests_total{answer="swarm"} 1`) || time.Now().After(deadline) {
			break
		}
	}
	if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("/metrics: %s %v", resp.Status, resp.Header)
	}
	names := metricstest.Check(t, body)
	want := []string{"stampede_gateway_requests_total", "stampede_gateway_bytes_sent_total", "stampede_gateway_responses_total",
		"stampede_gateway_request_duration_seconds", "stampede_gateway_time_to_first_byte_seconds", "stampede_gateway_piece_wait_seconds",
		"stampede_gateway_cache_files", "stampede_gateway_cache_bytes", "stampede_build_info", "go_goroutines"}
	if runtime.GOOS == "linux" {
		want = append(want, "process_open_fds")
	}
	for _, name := range want {
		if !names[name] {
			t.Errorf("/metrics has no %s", name)
		}
	}
	s := metricstest.Samples(t, body)
	for series, want := range map[string]float64{
		`stampede_gateway_requests_total{answer="swarm"}`:                            1,
		`stampede_gateway_requests_total{answer="direct"}`:                           2,
		`stampede_gateway_bytes_sent_total{answer="swarm"}`:                          float64(len(data)),
		`stampede_gateway_responses_total{code="404"}`:                               1,
		`stampede_gateway_time_to_first_byte_seconds_count{answer="swarm"}`:          1,
		`stampede_gateway_request_duration_seconds_count{answer="direct"}`:           2,
		`stampede_gateway_cache_files`:                                               1,
		`stampede_gateway_cache_bytes`:                                               float64(len(data)),
		`stampede_gateway_request_duration_seconds_count{answer="gateway"}`:          float64(scrapes - 1), // this scrape counts once answered
		`stampede_gateway_cache_damaged_files_total`:                                 0,
		`stampede_gateway_time_to_first_byte_seconds_count{answer="gateway"}`:        float64(scrapes - 1),
		`stampede_gateway_request_duration_seconds_bucket{answer="swarm",le="+Inf"}`: 1,
	} {
		if got, ok := s[series]; !ok || got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// The client asked before any piece was in: it waited for some.
	if n := s["stampede_gateway_piece_wait_seconds_count"]; n < 1 {
		t.Errorf("piece waits %v, want at least 1", n)
	}
	_, body = get(t, plainClient(), "GET", g.base+"/metrics", nil)
	if got := metricstest.Samples(t, body)[`stampede_gateway_requests_total{answer="gateway"}`]; got != float64(scrapes) {
		t.Errorf("the gateway's own answers %v, want %d (the scrapes before)", got, scrapes)
	}
}

// TestHealth: the gateway answers its health checks in origin form, is
// not ready without its cache directory, and leaves a proxy request for
// the same path on another host alone.
func TestHealth(t *testing.T) {
	cacheDir := t.TempDir()
	g := startGateway(t, Config{CacheDir: cacheDir})
	for _, path := range []string{contract.HealthzPath, contract.ReadyzPath} {
		resp, body := get(t, plainClient(), "GET", g.base+path, nil)
		if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
			t.Errorf("%s: %s %q", path, resp.Status, body)
		}
		if resp, _ := get(t, plainClient(), "HEAD", g.base+path, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("HEAD %s: %s", path, resp.Status)
		}
		if resp, _ := get(t, plainClient(), "POST", g.base+path, nil); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s: %s, want 400: the gateway's pages are read-only", path, resp.Status)
		}
	}
	live := serveOn(t, http.NotFoundHandler())
	if resp, _ := get(t, g.proxyClient(), "GET", live+contract.HealthzPath, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a proxy request for another host's %s: %s, want that host's 404", contract.HealthzPath, resp.Status)
	}

	if err := os.RemoveAll(cacheDir); err != nil {
		t.Fatal(err)
	}
	resp, body := get(t, plainClient(), "GET", g.base+contract.ReadyzPath, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "not ready: cache directory\n" {
		t.Errorf("readyz without the cache directory: %s %q", resp.Status, body)
	}
	if resp, _ := get(t, plainClient(), "GET", g.base+contract.HealthzPath, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("healthz without the cache directory: %s", resp.Status)
	}
}
