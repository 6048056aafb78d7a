package daemon_test

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/daemon"
	"github.com/stampede-dev/stampede/internal/metrics/metricstest"
)

func fetch(t *testing.T, c *http.Client, method, u string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestMetrics: the API's /metrics and the gateway's serve one page, with
// the daemon's series and the gateway's, that passes Prometheus' checks.
func TestMetrics(t *testing.T) {
	o := startOrigin(t, 0, map[string][]byte{"m.bin": randomBytes(100*KiB, 8)})
	td := startDaemon(t, daemon.Config{Gateway: "127.0.0.1:0", CacheDir: t.TempDir()})
	j, err := td.c.Download(t.Context(), o.url+"/m.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	td.waitState(t, j.ID, daemon.StateSeeding, 30*time.Second)

	resp, page := fetch(t, unixClient(td.srv.APIAddr().String()), "GET", "http://x/metrics")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("API /metrics: %s %s", resp.Status, page)
	}
	names := metricstest.Check(t, []byte(page))
	for _, name := range []string{"stampede_daemon_jobs", "stampede_daemon_swarms", "stampede_daemon_peer_connections_total",
		"stampede_daemon_jobs_received_from_peers_bytes", "stampede_daemon_jobs_sent_to_peers_bytes",
		"stampede_daemon_neighbours", "stampede_daemon_jobs_relayed_bytes", "stampede_gateway_requests_total", "stampede_gateway_cache_files", "stampede_build_info", "go_goroutines"} {
		if !names[name] {
			t.Errorf("API /metrics has no %s", name)
		}
	}
	for _, want := range []string{`stampede_daemon_jobs{state="seeding"} 1` + "\n", `stampede_daemon_jobs{state="queued"} 0` + "\n",
		"stampede_daemon_swarms 1\n", `stampede_daemon_neighbours{path="relayed"} 0` + "\n"} {
		if !strings.Contains(page, want) {
			t.Errorf("API /metrics lacks %q", want)
		}
	}

	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, gwPage := fetch(t, hc, "GET", "http://"+td.srv.GatewayAddr().String()+"/metrics")
	if resp.StatusCode != http.StatusOK || !strings.Contains(gwPage, `stampede_daemon_jobs{state="seeding"} 1`) {
		t.Errorf("gateway /metrics: %s, want the daemon's series too:\n%s", resp.Status, gwPage)
	}
}

// TestHealth: the API answers its health checks, on a TCP API without
// the token a prober does not have; everything else there still wants
// it. The gateway answers its own.
func TestHealth(t *testing.T) {
	td := startDaemon(t, daemon.Config{API: "127.0.0.1:0", Gateway: "127.0.0.1:0", CacheDir: t.TempDir()})
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	api := "http://" + td.srv.APIAddr().String()
	for _, base := range []string{api, "http://" + td.srv.GatewayAddr().String()} {
		for _, path := range []string{contract.HealthzPath, contract.ReadyzPath} {
			if resp, body := fetch(t, hc, "GET", base+path); resp.StatusCode != http.StatusOK || body != "ok\n" {
				t.Errorf("%s%s: %s %q", base, path, resp.Status, body)
			}
		}
	}
	if resp, _ := fetch(t, hc, "GET", api+"/metrics"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("API /metrics without the token: %s, want 401", resp.Status)
	}
	if resp, _ := fetch(t, hc, "GET", api+"/metrics", "Authorization", "Bearer "+td.srv.Token()); resp.StatusCode != http.StatusOK {
		t.Errorf("API /metrics with the token: %s", resp.Status)
	}
	if resp, _ := fetch(t, hc, "POST", api+contract.HealthzPath); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST %s: %s, want the API's 401", contract.HealthzPath, resp.Status)
	}

	if err := os.RemoveAll(td.cfg.StateDir); err != nil {
		t.Fatal(err)
	}
	if resp, body := fetch(t, hc, "GET", api+contract.ReadyzPath); resp.StatusCode != http.StatusServiceUnavailable || body != "not ready: state directory\n" {
		t.Errorf("readyz without the state directory: %s %q", resp.Status, body)
	}
}
