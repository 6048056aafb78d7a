package webpeer_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pion/turn/v5"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/webpeer"
)

// TestJavaScript runs the modules' own tests (node's built-in runner):
// wire.js against the Go encoder's frames in wire/testdata, and the
// merkle verification against manifests the Go package built.
func TestJavaScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("STAMPEDETEST_REQUIRE_NODE") == "1" {
			t.Fatalf("no node: %v", err)
		}
		t.Skipf("no node (Debian's nodejs package; set STAMPEDETEST_REQUIRE_NODE=1 to fail instead): %v", err)
	}
	cmd := exec.Command(node, "--test", "js/")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test js/: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func get(t *testing.T, h http.Handler, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Result()
}

func TestHandler(t *testing.T) {
	h := webpeer.Handler(webpeer.Config{})
	r := get(t, h, webpeer.WorkerPath)
	if r.StatusCode != 200 || r.Header.Get("Service-Worker-Allowed") != "/" || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("worker: %d %v", r.StatusCode, r.Header)
	}
	for _, p := range []string{webpeer.PeerPath, webpeer.Prefix + "peer/wire.js", webpeer.Prefix + "peer/swarm.js"} {
		if r := get(t, h, p); r.StatusCode != 200 || r.Header.Get("Service-Worker-Allowed") != "" {
			t.Errorf("%s: %d %v", p, r.StatusCode, r.Header)
		}
	}
	for _, p := range []string{webpeer.Prefix + "peer/wire.test.js", webpeer.Prefix + "peer/nope.js", webpeer.Prefix + "peer/../webpeer.go"} {
		if r := get(t, h, p); r.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", p, r.StatusCode)
		}
	}
	var doc map[string]any
	b, _ := io.ReadAll(get(t, h, webpeer.ConfigPath).Body)
	if err := json.Unmarshal(b, &doc); err != nil || doc["enabled"] != true || doc["upload_rate"] != float64(webpeer.DefaultUploadRate) ||
		doc["max_memory"] != float64(webpeer.DefaultMaxMemory) {
		t.Errorf("peer.json: %s, %v", b, err)
	}
}

// TestKillSwitch: with Off, peer.json says so and nothing else.
func TestKillSwitch(t *testing.T) {
	b, _ := io.ReadAll(get(t, webpeer.Handler(webpeer.Config{Off: true}), webpeer.ConfigPath).Body)
	if string(b) != `{"enabled":false}` {
		t.Errorf("peer.json: %s", b)
	}
}

var update = flag.Bool("update", false, "rewrite testdata/manifests.json")

// fixtureContent is the fixtures' file content: byte i is (i*7 + i>>8 + (i>>16)*13) & 255
// (verify.test.js builds the same).
func fixtureContent(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + i>>8 + i>>16*13)
	}
	return b
}

// TestFixtures writes (with -update) and checks testdata/manifests.json:
// manifests of the Go package, which verify.test.js checks pieces against.
func TestFixtures(t *testing.T) {
	type fixture struct {
		Name     string          `json:"name"`
		Manifest json.RawMessage `json:"manifest"`
	}
	var fs []fixture
	for _, f := range []struct {
		name            string
		size, pieceSize int64
	}{
		{"one piece of 3 blocks", 40000, 64 << 10},
		{"4 pieces of 64 KiB, the last short", 200000, 64 << 10},
		{"5 pieces of 16 KiB: a padded layer", 5 * 16 << 10, 16 << 10},
	} {
		b, err := manifest.NewBuilder(f.size, f.pieceSize)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(fixtureContent(int(f.size)))
		m, err := b.Manifest("fixture")
		if err != nil {
			t.Fatal(err)
		}
		j, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, fixture{f.name, j})
	}
	want, err := json.MarshalIndent(fs, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	const path = "testdata/manifests.json"
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is not what package manifest builds (%v): go test ./webpeer -run TestFixtures -update", path, err)
	}
}

// TestICEHost: "{host}" in an ICE server is the host the visitor asked.
func TestICEHost(t *testing.T) {
	h := webpeer.Handler(webpeer.Config{ICEServers: []string{"stun:{host}:3478"}})
	for host, want := range map[string]string{
		"example.org:8080": "stun:example.org:3478",
		"[2001:db8::1]:80": "stun:[2001:db8::1]:3478",
		"evil\"x":          "stun:{host}:3478",
	} {
		req := httptest.NewRequest("GET", webpeer.ConfigPath, nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var doc struct {
			ICE []string `json:"ice_servers"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || len(doc.ICE) != 1 || doc.ICE[0] != want {
			t.Errorf("Host %q: %s (%v), want %s", host, rec.Body.Bytes(), err, want)
		}
	}
}

// TestGzip: a client that takes gzip gets the modules gzipped, and what
// they weigh stays within the budget of docs/browser.md.
func TestGzip(t *testing.T) {
	h := webpeer.Handler(webpeer.Config{})
	req := httptest.NewRequest("GET", webpeer.PeerPath, nil)
	req.Header.Set("Accept-Encoding", "br, gzip")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	zr, err := gzip.NewReader(rec.Body)
	if err != nil || rec.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip: %v, %v", err, rec.Header())
	}
	b, _ := io.ReadAll(zr)
	if !bytes.Contains(b, []byte("serviceWorker.register")) {
		t.Error("peer.js does not unzip to itself")
	}
	page, worker := webpeer.Weight()
	t.Logf("gzipped: %d bytes for the page, %d for the worker", page, worker)
	if page > 20<<10 || worker > 5<<10 {
		t.Errorf("the page's modules weigh %d bytes gzipped (budget 20 KiB), the worker %d (5 KiB)", page, worker)
	}
}

// TestTURNCredentials: peer.json names the TURN server with credentials
// that the origin's TURN server accepts.
func TestTURNCredentials(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- origin.ServeTURN(ctx, pc, origin.TURNConfig{RelayIP: net.IPv4(127, 0, 0, 1), Secret: "s3cret"}, nil)
	}()
	defer func() {
		cancel()
		<-done
	}()
	h := webpeer.Handler(webpeer.Config{TURN: &webpeer.TURN{URL: "turn:{host}:3479", Secret: "s3cret"}})
	var doc struct {
		ICE []struct {
			URLs       string `json:"urls"`
			Username   string `json:"username"`
			Credential string `json:"credential"`
		} `json:"ice_servers"`
	}
	req := httptest.NewRequest("GET", webpeer.ConfigPath, nil)
	req.Host = "example.org"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || len(doc.ICE) != 1 || doc.ICE[0].URLs != "turn:example.org:3479" {
		t.Fatalf("peer.json: %s, %v", rec.Body.Bytes(), err)
	}
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c, err := turn.NewClient(&turn.ClientConfig{TURNServerAddr: pc.LocalAddr().String(), STUNServerAddr: pc.LocalAddr().String(),
		Username: doc.ICE[0].Username, Password: doc.ICE[0].Credential, Realm: "stampede", Conn: conn, RTO: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	relay, err := c.Allocate()
	if err != nil {
		t.Fatalf("the TURN server refused peer.json's credentials: %v", err)
	}
	relay.Close()
}
