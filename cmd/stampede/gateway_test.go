package main

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// startGateway runs `stampede gateway` in-process until the test ends and
// returns its base URL.
func startGateway(t *testing.T, args ...string) string {
	t.Helper()
	addr, _ := startDaemon(t, append([]string{"gateway", "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(),
		"--peer-listen", "127.0.0.1:0", "-q"}, args...)...)
	return "http://" + addr
}

func TestGatewayCommand(t *testing.T) {
	www := t.TempDir()
	data := randomBytes(1<<20+3, 17)
	writeFile(t, www, "f.bin", data)
	base := startServe(t, www)
	gw := startGateway(t, "--cache-size", "64MiB", "--window", "4MiB", "--max-seeds", "2")

	proxy, _ := url.Parse(gw)
	for _, c := range []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"as a proxy", &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}, base + "/f.bin"},
		{"by prefix", &http.Client{Transport: &http.Transport{Proxy: nil}}, gw + "/" + base + "/f.bin"},
	} {
		resp, err := c.client.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != string(data) {
			t.Fatalf("%s: %d bytes (err %v), want the %d-byte file", c.name, len(body), err, len(data))
		}
		if got := resp.Header.Get("Stampede-Gateway"); got != "swarm" {
			t.Errorf("%s: answered %q, want swarm", c.name, got)
		}
	}
}

func TestGatewayFlags(t *testing.T) {
	for _, args := range [][]string{
		{"gateway", "--cache-size", "lots"},
		{"gateway", "--window", "0"},
		{"gateway", "--max-seeds", "-1"},
		{"gateway", "extra"},
	} {
		if code, _, stderr := runCmd(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, stderr)
		}
	}
	code, stdout, _ := runCmd(t, "help", "gateway")
	if code != 0 || !strings.Contains(stdout, "--cache-size") && !strings.Contains(stdout, "-cache-size") {
		t.Errorf("help gateway: exit %d:\n%s", code, stdout)
	}
}
