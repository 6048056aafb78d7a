package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/daemon"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/tracker"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func randomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// testOrigin is a stampede origin with its tracker, on loopback.
type testOrigin struct {
	url   string
	files map[string][]byte
	sent  atomic.Int64 // body bytes of GETs answered
	close func()
}

// countingWriter counts the body bytes of an answer.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

func startOrigin(t *testing.T, rate int64, files map[string][]byte) *testOrigin {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := origin.New(origin.Config{Dir: dir, CacheDir: t.TempDir(), Rate: rate, Logger: testLogger(t),
		Tracker: tracker.New(tracker.Config{Logger: testLogger(t)})})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &testOrigin{url: "http://" + ln.Addr().String(), files: files}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w = countingWriter{w, &o.sent}
		}
		srv.Handler().ServeHTTP(w, r)
	})}
	go hs.Serve(ln)
	var once sync.Once
	o.close = func() { once.Do(func() { hs.Close(); srv.Close() }) }
	t.Cleanup(o.close)
	return o
}

// testDaemon is a daemon with its API on a unix socket in its state
// directory and its peer port on loopback.
type testDaemon struct {
	srv   *daemon.Server
	cfg   daemon.Config
	c     *daemon.Client
	allow string
}

func startDaemon(t *testing.T, cfg daemon.Config) *testDaemon {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	if len(cfg.AllowDirs) == 0 {
		cfg.AllowDirs = []string{filepath.Join(t.TempDir(), "dl")}
	}
	if cfg.PeerListen == "" {
		cfg.PeerListen = "127.0.0.1:0"
	}
	cfg.Logger = testLogger(t)
	srv, err := daemon.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	td := &testDaemon{srv: srv, cfg: cfg, allow: cfg.AllowDirs[0]}
	td.c = daemon.NewClient(srv.APIAddr().String(), srv.Token())
	t.Cleanup(func() { srv.Close() })
	return td
}

// waitState polls job id until it is in state, failing on a failed job
// or after limit.
func (td *testDaemon) waitState(t *testing.T, id, state string, limit time.Duration) daemon.Job {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		j, err := td.c.Job(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == state {
			return j
		}
		if j.State == daemon.StateFailed && state != daemon.StateFailed {
			t.Fatalf("job %s failed: %s", id, j.Error)
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %s after %v, want %s (%+v)", id, j.State, limit, state, j)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, not the origin's %d", path, len(got), len(want))
	}
}

// TestTwoFilesOnePeerPort: one daemon downloads two files on its one peer
// port and seeds both; a second daemon then gets a file from the first
// through that port.
func TestTwoFilesOnePeerPort(t *testing.T) {
	o := startOrigin(t, 0, map[string][]byte{"a.bin": randomBytes(3*MiB+5, 1), "b.bin": randomBytes(1*MiB+7, 2)})
	a := startDaemon(t, daemon.Config{})
	var ids []string
	for _, name := range []string{"a.bin", "b.bin"} {
		j, err := a.c.Download(t.Context(), o.url+"/"+name, "")
		if err != nil {
			t.Fatal(err)
		}
		if j.Path != filepath.Join(a.allow, name) {
			t.Errorf("path %q, want the allowed directory's %s", j.Path, name)
		}
		ids = append(ids, j.ID)
	}
	for i, name := range []string{"a.bin", "b.bin"} {
		j := a.waitState(t, ids[i], daemon.StateSeeding, 30*time.Second)
		checkFile(t, j.Path, o.files[name])
		if j.Done != j.Size || j.Size != int64(len(o.files[name])) {
			t.Errorf("%s: done %d of %d, want all of %d", name, j.Done, j.Size, len(o.files[name]))
		}
	}
	st, err := a.c.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Peers.Swarms != 2 || st.Jobs[daemon.StateSeeding] != 2 {
		t.Errorf("stats %+v: want 2 swarms and 2 seeding jobs", st)
	}

	b := startDaemon(t, daemon.Config{})
	j, err := b.c.Download(t.Context(), o.url+"/a.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	j = b.waitState(t, j.ID, daemon.StateSeeding, 30*time.Second)
	checkFile(t, j.Path, o.files["a.bin"])
	sa, _ := a.c.Stats(t.Context())
	t.Logf("second daemon: %d bytes from peers; first daemon: %d routed, %d to peers", j.FromPeers, sa.Peers.Routed, sa.BytesToPeers)
	if sa.Peers.Routed == 0 || j.FromPeers == 0 {
		t.Errorf("the second daemon got %d bytes from peers, the first routed %d connections: want both above 0", j.FromPeers, sa.Peers.Routed)
	}
}

// TestAPIBadInput: bad JSON and bad paths get 400 with a message, unknown
// jobs 404, and nothing is added.
func TestAPIBadInput(t *testing.T) {
	td := startDaemon(t, daemon.Config{})
	outside := t.TempDir()
	link := filepath.Join(td.allow, "out")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(td.allow, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A link inside to a file outside: never written through.
	linkf := filepath.Join(td.allow, "linkf")
	if err := os.Symlink(filepath.Join(outside, "f"), linkf); err != nil {
		t.Fatal(err)
	}
	base := "http://x"
	hc := unixClient(td.srv.APIAddr().String())
	for _, tc := range []struct {
		method, path, body string
		status             int
		says               string
	}{
		{"POST", "/v1/downloads", `{"url": `, 400, "bad JSON"},
		{"POST", "/v1/downloads", `{"url": "http://o/f", "dest": "/x"}`, 400, "unknown field"},
		{"POST", "/v1/downloads", `{"url": "http://o/f"} {}`, 400, "trailing data"},
		{"POST", "/v1/downloads", `{"url": "ftp://o/f"}`, 400, "scheme"},
		{"POST", "/v1/downloads", `{"url": "http://o/f", "path": "rel/f"}`, 400, "not absolute"},
		{"POST", "/v1/downloads", `{"url": "http://o/f", "path": "/etc/passwd"}`, 400, "outside the allowed"},
		{"POST", "/v1/downloads", fmt.Sprintf(`{"url": "http://o/f", "path": %q}`, filepath.Join(td.allow, "..", "f")), 400, "outside the allowed"},
		{"POST", "/v1/downloads", fmt.Sprintf(`{"url": "http://o/f", "path": %q}`, filepath.Join(link, "f")), 400, "outside the allowed"},
		{"POST", "/v1/downloads", fmt.Sprintf(`{"url": "http://o/f", "path": %q}`, link), 400, "outside the allowed"},
		{"POST", "/v1/downloads", fmt.Sprintf(`{"url": "http://o/f", "path": %q}`, linkf), 400, "symbolic link"},
		{"POST", "/v1/seeds", fmt.Sprintf(`{"path": %q, "url": "http://o/f", "tracker": "http://t/a"}`, filepath.Join(td.allow, "f")), 400, "not both"},
		{"POST", "/v1/seeds", fmt.Sprintf(`{"path": %q, "tracker": "http://t/a"}`, filepath.Join(td.allow, "none")), 400, "not a regular file"},
		{"POST", "/v1/seeds", `{"path": "/etc/hostname", "tracker": "http://t/a"}`, 400, "outside the allowed"},
		{"GET", "/v1/jobs/nope", "", 404, "no such job"},
		{"POST", "/v1/jobs/nope/pause", "", 404, "no such job"},
		{"POST", "/v1/jobs/nope/resume", "", 404, "no such job"},
		{"DELETE", "/v1/jobs/nope", "", 404, "no such job"},
		{"DELETE", "/v1/jobs/nope?delete_data=maybe", "", 400, "delete_data"},
		{"GET", "/v2/what", "", 404, "no such endpoint"},
		{"POST", "/v1/downloads", `{"url": "http://o/f", "path": "` + strings.Repeat("a", 70<<10) + `"}`, 400, "too large"},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.says) {
			t.Errorf("%s %s %s: %d %s, want %d saying %q", tc.method, tc.path, tc.body, resp.StatusCode, body, tc.status, tc.says)
		}
	}
	if jobs, err := td.c.Jobs(t.Context()); err != nil || len(jobs) != 0 {
		t.Errorf("jobs after bad requests: %v, %v; want none", jobs, err)
	}
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

// TestPauseResumeRemove: a paused download keeps its part file and goes
// on from it when resumed; removing a job with delete_data deletes its
// file, without it keeps it.
func TestPauseResumeRemove(t *testing.T) {
	data := randomBytes(4*MiB, 3)
	o := startOrigin(t, 1*MiB, map[string][]byte{"slow.bin": data, "other.bin": data[:MiB]})
	td := startDaemon(t, daemon.Config{})
	ctx := t.Context()
	j, err := td.c.Download(ctx, o.url+"/slow.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, td, j.ID, 512*KiB)
	j, err = td.c.Pause(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != daemon.StatePaused {
		t.Fatalf("after pause: %s, want paused", j.State)
	}
	if _, err := os.Stat(j.Path + ".part"); err != nil {
		t.Fatalf("the part file: %v", err)
	}
	if _, err := os.Stat(j.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a paused download published its file: %v", err)
	}
	if j, err = td.c.Resume(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	j = td.waitState(t, j.ID, daemon.StateSeeding, 30*time.Second)
	checkFile(t, j.Path, data)

	r, err := td.c.Remove(ctx, j.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Removed || !r.DataDeleted {
		t.Errorf("remove: %+v, want removed and data deleted", r)
	}
	if _, err := os.Stat(j.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file is still there: %v", err)
	}
	var api *daemon.APIError
	if _, err := td.c.Job(ctx, j.ID); !errors.As(err, &api) || api.Status != 404 {
		t.Errorf("the removed job: %v, want 404", err)
	}

	k, err := td.c.Download(ctx, o.url+"/other.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	k = td.waitState(t, k.ID, daemon.StateSeeding, 30*time.Second)
	if r, err := td.c.Remove(ctx, k.ID, false); err != nil || r.DataDeleted {
		t.Errorf("remove without delete_data: %+v, %v", r, err)
	}
	checkFile(t, k.Path, data[:MiB])
}

// waitDone polls until job id has at least n bytes done.
func waitDone(t *testing.T, td *testDaemon, id string, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := td.c.Job(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Done >= n {
			return
		}
		if j.State == daemon.StateSeeding || j.State == daemon.StateFailed || time.Now().After(deadline) {
			t.Fatalf("job %s is %s with %d bytes, want at least %d under way", id, j.State, j.Done, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRestart: a daemon stopped mid-download resumes the download when
// started again on the same state directory, from its part file, and
// seeds again what it seeded.
func TestRestart(t *testing.T) {
	data := randomBytes(4*MiB, 4)
	o := startOrigin(t, 1*MiB, map[string][]byte{"big.bin": data, "small.bin": data[:256*KiB]})
	state, allow := t.TempDir(), filepath.Join(t.TempDir(), "dl")
	cfg := daemon.Config{StateDir: state, AllowDirs: []string{allow}}
	td := startDaemon(t, cfg)
	ctx := t.Context()
	small, err := td.c.Download(ctx, o.url+"/small.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	td.waitState(t, small.ID, daemon.StateSeeding, 30*time.Second)
	big, err := td.c.Download(ctx, o.url+"/big.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, td, big.ID, MiB)
	if err := td.srv.Close(); err != nil {
		t.Fatal(err)
	}
	part, err := os.Stat(filepath.Join(allow, "big.bin.part"))
	if err != nil {
		t.Fatalf("no part file after the stop: %v", err)
	}
	sentBefore := o.sent.Load()

	td = startDaemon(t, cfg)
	jobs, err := td.c.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Fatalf("after the restart: %d jobs, want 2", len(jobs))
	}
	b := td.waitState(t, big.ID, daemon.StateSeeding, 30*time.Second)
	checkFile(t, b.Path, data)
	// Resumed from the part file: the origin sent well under the whole
	// file again (at least 1 MiB was verified before the stop).
	if again := o.sent.Load() - sentBefore; again > int64(len(data))-MiB/2 {
		t.Errorf("after the restart the origin sent %d of %d bytes (part file %d bytes): not resumed", again, len(data), part.Size())
	}
	s := td.waitState(t, small.ID, daemon.StateSeeding, 10*time.Second)
	if s.Root == "" || s.Size != 256*KiB {
		t.Errorf("the seed after the restart: %+v", s)
	}
	if st, _ := td.c.Stats(ctx); st.Peers.Swarms != 2 {
		t.Errorf("after the restart %d swarms, want 2", st.Peers.Swarms)
	}
}

// TestTCPAPI: a TCP API wants the token and its own Host.
func TestTCPAPI(t *testing.T) {
	td := startDaemon(t, daemon.Config{API: "127.0.0.1:0"})
	addr := td.srv.APIAddr().String()
	tok := td.srv.Token()
	if len(tok) < 32 {
		t.Fatalf("token %q: too short", tok)
	}
	saved, err := os.ReadFile(filepath.Join(td.cfg.StateDir, daemon.TokenFile))
	if err != nil || strings.TrimSpace(string(saved)) != tok {
		t.Errorf("token file: %q, %v", saved, err)
	}
	if fi, err := os.Stat(filepath.Join(td.cfg.StateDir, daemon.TokenFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode: %v, %v", fi.Mode(), err)
	}
	for _, tc := range []struct {
		host, token string
		status      int
	}{
		{addr, "", 401},
		{addr, "wrong", 401},
		{"evil.example:80", tok, 403},
		{addr, tok, 200},
		{"localhost:" + strings.Split(addr, ":")[1], tok, 200},
	} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/jobs", nil)
		req.Host = tc.host
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("Host %s, token %q: %d, want %d", tc.host, tc.token, resp.StatusCode, tc.status)
		}
	}
	if _, err := td.c.Jobs(t.Context()); err != nil {
		t.Errorf("the client with the token: %v", err)
	}
}

// TestStatusPage: / of the API shows the jobs.
func TestStatusPage(t *testing.T) {
	o := startOrigin(t, 0, map[string][]byte{"page.bin": randomBytes(100*KiB, 5)})
	td := startDaemon(t, daemon.Config{})
	j, err := td.c.Download(t.Context(), o.url+"/page.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	td.waitState(t, j.ID, daemon.StateSeeding, 30*time.Second)
	resp, err := unixClient(td.srv.APIAddr().String()).Get("http://x/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), j.ID) || !strings.Contains(string(body), "seeding") {
		t.Errorf("status page: %d %s", resp.StatusCode, body)
	}
}

// TestSecondDaemonSameState: a second daemon on the state directory of a
// running one is refused with a message.
func TestSecondDaemonSameState(t *testing.T) {
	td := startDaemon(t, daemon.Config{})
	_, err := daemon.Start(context.Background(), daemon.Config{StateDir: td.cfg.StateDir, PeerListen: "127.0.0.1:0", Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Errorf("second daemon: %v, want 'another daemon'", err)
	}
}

// TestGatewayInDaemon: the gateway runs inside the daemon, its files'
// swarms on the daemon's peer port, and "/" of its address shows the
// status page to a browser.
func TestGatewayInDaemon(t *testing.T) {
	data := randomBytes(1*MiB+3, 6)
	o := startOrigin(t, 0, map[string][]byte{"g.bin": data})
	td := startDaemon(t, daemon.Config{Gateway: "127.0.0.1:0", CacheDir: t.TempDir()})
	gw := "http://" + td.srv.GatewayAddr().String()
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := hc.Get(gw + "/" + o.url + "/g.bin")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(body, data) || resp.Header.Get("Stampede-Gateway") != "swarm" {
		t.Fatalf("through the gateway: %d bytes, answered %q", len(body), resp.Header.Get("Stampede-Gateway"))
	}
	st, err := td.c.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Peers.Swarms != 1 || st.GatewayAddr == "" {
		t.Errorf("stats %+v: want the gateway's file in one swarm of the host", st)
	}
	resp, err = hc.Get(gw + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "<h1>stampede daemon</h1>") || !strings.Contains(string(body), "curl -x http://"+td.srv.GatewayAddr().String()) {
		t.Errorf("/ of the gateway: %s", body)
	}
}

// TestQueue: past MaxDownloads a download waits, queued, and starts when
// one ends; past MaxJobs a job is refused with 429.
func TestQueue(t *testing.T) {
	data := randomBytes(2*MiB, 7)
	o := startOrigin(t, 2*MiB, map[string][]byte{"q1.bin": data, "q2.bin": data[:MiB]})
	td := startDaemon(t, daemon.Config{MaxDownloads: 1, MaxJobs: 2})
	ctx := t.Context()
	first, err := td.c.Download(ctx, o.url+"/q1.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	second, err := td.c.Download(ctx, o.url+"/q2.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	if first.State != daemon.StateDownloading || second.State != daemon.StateQueued {
		t.Fatalf("states %s and %s, want downloading and queued", first.State, second.State)
	}
	var api *daemon.APIError
	if _, err := td.c.Download(ctx, o.url+"/q3.bin", ""); !errors.As(err, &api) || api.Status != 429 {
		t.Errorf("a third job past MaxJobs 2: %v, want 429", err)
	}
	for {
		jobs, err := td.c.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		downloading, seeding := 0, 0
		for _, j := range jobs {
			switch j.State {
			case daemon.StateDownloading:
				downloading++
			case daemon.StateSeeding:
				seeding++
			}
		}
		if downloading > 1 {
			t.Fatalf("%d downloads at once, MaxDownloads is 1", downloading)
		}
		if seeding == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	j, _ := td.c.Job(ctx, second.ID)
	checkFile(t, j.Path, data[:MiB])
}

// TestSameFileTwice: the same file downloaded to a second path while the
// first copy seeds comes from that copy, through the daemon's own peer
// port (two nodes of one swarm in one host).
func TestSameFileTwice(t *testing.T) {
	data := randomBytes(2*MiB+1, 9)
	o := startOrigin(t, 0, map[string][]byte{"twice.bin": data})
	td := startDaemon(t, daemon.Config{})
	ctx := t.Context()
	first, err := td.c.Download(ctx, o.url+"/twice.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	td.waitState(t, first.ID, daemon.StateSeeding, 30*time.Second)
	second, err := td.c.Download(ctx, o.url+"/twice.bin", filepath.Join(td.allow, "again.bin"))
	if err != nil {
		t.Fatal(err)
	}
	j := td.waitState(t, second.ID, daemon.StateSeeding, 30*time.Second)
	checkFile(t, j.Path, data)
	if j.FromPeers == 0 {
		t.Errorf("the second copy took %d bytes from peers, want it from the first copy", j.FromPeers)
	}
}

// TestRestartSeedsWithoutOrigin: a restart seeds a downloaded file from
// the manifest kept at completion, with the origin gone.
func TestRestartSeedsWithoutOrigin(t *testing.T) {
	data := randomBytes(MiB+11, 10)
	o := startOrigin(t, 0, map[string][]byte{"kept.bin": data})
	cfg := daemon.Config{StateDir: t.TempDir(), AllowDirs: []string{filepath.Join(t.TempDir(), "dl")}}
	td := startDaemon(t, cfg)
	j, err := td.c.Download(t.Context(), o.url+"/kept.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	j = td.waitState(t, j.ID, daemon.StateSeeding, 30*time.Second)
	if err := td.srv.Close(); err != nil {
		t.Fatal(err)
	}
	o.close()
	td = startDaemon(t, cfg)
	// The seed's node joins the host only once it has a manifest: here
	// the kept one, the origin being gone (asking it would fail the job
	// after its retries, about 3 s).
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := td.c.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		k, err := td.c.Job(t.Context(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if k.State == daemon.StateFailed {
			t.Fatalf("after the restart with the origin gone: failed: %s", k.Error)
		}
		if st.Peers.Swarms == 1 {
			if k.State != daemon.StateSeeding || k.Root != j.Root {
				t.Errorf("after the restart with the origin gone: %+v, want seeding root %s", k, j.Root)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no swarm 10 s after the restart: %+v", k)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUnsafePaths: what lies on a job's path is checked when it is used,
// not only when the job is added: a link in the part file's place is
// never written through, a seed's file swapped for a link or a FIFO is
// refused at once (never followed, never waited on), and a path that
// exists already is never written over.
func TestUnsafePaths(t *testing.T) {
	data := randomBytes(300*KiB, 11)
	o := startOrigin(t, 0, map[string][]byte{"u.bin": data})
	td := startDaemon(t, daemon.Config{})
	ctx := t.Context()
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A link at the part file.
	dest := filepath.Join(td.allow, "u.bin")
	if err := os.Symlink(outside, dest+".part"); err != nil {
		t.Fatal(err)
	}
	j, err := td.c.Download(ctx, o.url+"/u.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	j = td.waitState(t, j.ID, daemon.StateFailed, 10*time.Second)
	if b, _ := os.ReadFile(outside); string(b) != "keep me" {
		t.Fatalf("written through the link: %q", b)
	}
	if fi, err := os.Lstat(dest); err == nil {
		t.Fatalf("something was published at %s: %v", dest, fi.Mode())
	}

	// A path that exists.
	var api *daemon.APIError
	if err := os.WriteFile(filepath.Join(td.allow, "mine.bin"), []byte("user's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := td.c.Download(ctx, o.url+"/u.bin", filepath.Join(td.allow, "mine.bin")); !errors.As(err, &api) || api.Status != 409 {
		t.Errorf("download over an existing file: %v, want 409", err)
	}

	// A seed whose file is swapped, while paused, for a link out and then
	// for a FIFO.
	seedPath := filepath.Join(td.allow, "seeded.bin")
	if err := os.WriteFile(seedPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := td.c.Seed(ctx, daemon.SeedRequest{Path: seedPath, URL: o.url + "/u.bin"})
	if err != nil {
		t.Fatal(err)
	}
	seeded := td.waitState(t, s.ID, daemon.StateSeeding, 10*time.Second)
	for seeded.Root == "" { // the file is hashed first
		time.Sleep(10 * time.Millisecond)
		if seeded, err = td.c.Job(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, swap := range []func() error{
		func() error { return os.Symlink(outside, seedPath) },
		func() error { return syscall.Mkfifo(seedPath, 0o644) },
	} {
		if _, err := td.c.Pause(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		os.Remove(seedPath)
		if err := swap(); err != nil {
			t.Fatal(err)
		}
		if _, err := td.c.Resume(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		f := td.waitState(t, s.ID, daemon.StateFailed, 5*time.Second)
		if f.Root != seeded.Root {
			t.Errorf("the swapped file was hashed and seeded: root %s, the seed's was %s", f.Root, seeded.Root)
		}
		if !strings.Contains(f.Error, "symbolic link") && !strings.Contains(f.Error, "too many levels") && !strings.Contains(f.Error, "not a regular file") {
			t.Errorf("failed with %q: want the link or the FIFO named", f.Error)
		}
	}
}

// TestRemoveHoldsThePath: while a job is being removed its path stays
// taken; delete_data deletes the part file of a download that never
// published, and nothing else.
func TestRemoveHoldsThePath(t *testing.T) {
	data := randomBytes(4*MiB, 12)
	o := startOrigin(t, MiB, map[string][]byte{"r.bin": data})
	td := startDaemon(t, daemon.Config{})
	ctx := t.Context()
	j, err := td.c.Download(ctx, o.url+"/r.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, td, j.ID, 256*KiB)
	removed := make(chan error, 1)
	go func() {
		_, err := td.c.Remove(ctx, j.ID, true)
		removed <- err
	}()
	// Until the removal has ended, the path is taken.
	for {
		select {
		case rerr := <-removed:
			if rerr != nil {
				t.Fatal(rerr)
			}
			goto done
		default:
		}
		k, err := td.c.Download(ctx, o.url+"/r.bin", "")
		var api *daemon.APIError
		switch {
		case err == nil:
			// Allowed only once the removal is over: its answer comes.
			if rerr := <-removed; rerr != nil {
				t.Fatal(rerr)
			}
			if _, err := td.c.Job(ctx, j.ID); err == nil {
				t.Fatal("a job took the path of one being removed")
			}
			if _, err := td.c.Remove(ctx, k.ID, true); err != nil {
				t.Fatal(err)
			}
			goto done
		case !errors.As(err, &api) || api.Status != 409:
			t.Fatalf("re-add during the removal: %v, want 409", err)
		}
	}
done:
	for _, p := range []string{j.Path, j.Path + ".part", j.Path + ".part.meta"} {
		if _, err := os.Lstat(p); err == nil && p != j.Path {
			t.Errorf("%s is still there after delete_data", p)
		}
	}
}
