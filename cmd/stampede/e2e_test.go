package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/fetch"
)

// These tests run `serve` and `get` as a user would, on loopback: in-process
// through run() where possible, and as a real process where one must be
// killed.

func randomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 42))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// syncBuffer is a bytes.Buffer safe for a command writing while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs `stampede serve args...` in-process until the test ends and
// returns its base URL.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	base, _ := startServeLog(t, args...)
	return base
}

// startServeLog is startServe that also returns serve's stderr.
func startServeLog(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	addr, r := startDaemon(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir()}, args...)...)
	return "http://" + addr, r.stderr
}

// cmdResult is what a command run by startCmd left.
type cmdResult struct {
	code   int
	stdout string
	ended  time.Time
}

// running is a command started by startCmd.
type running struct {
	done   chan struct{} // closed when it has ended; res is set then
	res    cmdResult
	addr   chan string // where it listens, for the commands that say
	stderr *syncBuffer
}

// startCmd runs `stampede args...` in-process until it exits or ctx ends.
// A command still running when the test ends is stopped and waited for
// before the test's temporary directories go.
func startCmd(t *testing.T, ctx context.Context, args ...string) *running {
	ctx, cancel := context.WithCancel(ctx)
	r := &running{done: make(chan struct{}), addr: make(chan string, 1), stderr: new(syncBuffer)}
	stdout := new(syncBuffer)
	e := &env{stdin: strings.NewReader(""), stdout: stdout, stderr: r.stderr, ready: func(a string) { r.addr <- a }}
	go func() {
		code := run(ctx, args, e)
		r.res = cmdResult{code: code, stdout: stdout.String(), ended: time.Now()}
		close(r.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// wait waits for the command to end.
func (r *running) wait(t *testing.T, what string) cmdResult {
	t.Helper()
	select {
	case <-r.done:
		return r.res
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not end: %s", what, r.stderr.String())
		return cmdResult{}
	}
}

// listening waits for the command to say where it listens.
func (r *running) listening(t *testing.T, what string) string {
	t.Helper()
	select {
	case a := <-r.addr:
		return a
	case <-r.done:
		t.Fatalf("%s exited %d before listening: %s", what, r.res.code, r.stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not start: %s", what, r.stderr.String())
	}
	return ""
}

// startDaemon runs a command that listens (serve, gateway, tracker)
// in-process until the test ends, and returns where it listens. Stopped
// at the end, it must exit 0.
func startDaemon(t *testing.T, args ...string) (string, *running) {
	t.Helper()
	var r *running
	// Registered before startCmd's cleanup, so it runs after the command
	// has been stopped.
	t.Cleanup(func() {
		if r != nil && r.res.code != 0 {
			t.Errorf("%s exited %d: %s", args[0], r.res.code, r.stderr.String())
		}
	})
	r = startCmd(t, context.Background(), args...)
	return r.listening(t, args[0]), r
}

// runCmd runs one stampede command in-process and returns its exit code,
// stdout and stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}
	code := run(t.Context(), args, e)
	return code, stdout.String(), stderr.String()
}

func writeFile(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, differs from the %d-byte source", path, len(got), len(want))
	}
}

func TestServeGet(t *testing.T) {
	www := t.TempDir()
	data := randomBytes(5<<20+7, 1)
	writeFile(t, www, "big.bin", data)
	base := startServe(t, www)

	out := filepath.Join(t.TempDir(), "copy.bin")
	code, stdout, stderr := runCmd(t, "get", base+"/big.bin", "-o", out, "--json")
	if code != 0 {
		t.Fatalf("get exited %d: %s", code, stderr)
	}
	sameFile(t, out, data)
	var res fetch.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("--json output %q: %v", stdout, err)
	}
	if res.Verified != "merkle" || res.Size != int64(len(data)) || res.Pieces < 2 {
		t.Errorf("summary %+v: want a merkle-verified multi-piece download", res)
	}
	code, mroot, _ := runCmd(t, "manifest", "--root", filepath.Join(www, "big.bin"))
	if code != 0 || strings.TrimSpace(mroot) != res.Root {
		t.Errorf("manifest --root = %q, the download's root %q", mroot, res.Root)
	}

	// Stream to stdout.
	code, stdout, stderr = runCmd(t, "get", "-q", base+"/big.bin", "-o", "-")
	if code != 0 || stdout != string(data) {
		t.Fatalf("get -o - exited %d with %d bytes: %s", code, len(stdout), stderr)
	}
}

func TestGetFromUpstream(t *testing.T) {
	data := randomBytes(3<<20, 2)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "f", time.Unix(1e9, 0), bytes.NewReader(data))
	}))
	defer up.Close()
	base := startServe(t, "--upstream", up.URL)
	out := filepath.Join(t.TempDir(), "f")
	code, stdout, stderr := runCmd(t, "get", base+"/any/path/f", "-o", out, "--json")
	if code != 0 {
		t.Fatalf("get exited %d: %s", code, stderr)
	}
	sameFile(t, out, data)
	if !strings.Contains(stdout, `"verified": "merkle"`) {
		t.Errorf("summary %s: want merkle verification through the upstream front", stdout)
	}
}

func TestOverloadedOriginStillDelivers(t *testing.T) {
	www := t.TempDir()
	data := randomBytes(1<<20, 3)
	writeFile(t, www, "f", data)
	// One transfer at a time, slowly: concurrent clients get overload answers
	// (a piece and peers) or 503 + Retry-After, and must carry on rather than
	// fail.
	// At 2 MB/s the 1 MiB file takes about half a second, which makes the
	// three clients (goroutines running get) likelier to overlap when they
	// start apart on a busy machine: at 8 MB/s one run of this package's
	// tests saw none overlap.
	base := startServe(t, www, "--max-transfers", "1", "--rate", "2MB")
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range codes {
		wg.Go(func() {
			codes[i], _, _ = runCmd(t, "get", "-q", "--parallel", "2", base+"/f", "-o", filepath.Join(t.TempDir(), "f"))
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != 0 {
			t.Errorf("client %d exited %d", i, c)
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	past := 0
	for _, counter := range []string{`stampede_origin_rejected_total\{reason="overload"\}`, `stampede_origin_overload_answers_total\{outcome="piece"\}`} {
		m := regexp.MustCompile(`(?m)^` + counter + ` (\d+)`).FindStringSubmatch(string(body))
		if m == nil {
			t.Fatalf("/metrics has no %s:\n%s", counter, body)
		}
		n, _ := strconv.Atoi(m[1])
		past += n
	}
	if past == 0 {
		t.Errorf("no 503 or overload answer was sent: the test did not exercise overload")
	}
}

func TestExitCodes(t *testing.T) {
	www := t.TempDir()
	writeFile(t, www, "f", []byte("hello"))
	base := startServe(t, www)
	ln := closedAddr()
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"get"}, exitUsage},
		{[]string{"get", "--no-such-flag", base + "/f"}, exitUsage},
		{[]string{"get", "ftp://x/y"}, exitUsage},
		{[]string{"get", base + "/f", "--limit-rate", "fast"}, exitUsage},
		{[]string{"get", base + "/f", "--sha256", "xyz"}, exitUsage},
		{[]string{"get", base + "/missing", "-o", filepath.Join(dir, "m")}, exitServer},
		{[]string{"get", "http://" + ln + "/f", "-o", filepath.Join(dir, "r"), "--retries", "1"}, exitNetwork},
		{[]string{"get", base + "/f", "-o", filepath.Join(dir, "no/such/dir/f")}, exitIO},
		{[]string{"get", base + "/f", "-o", filepath.Join(dir, "ok"), "--sha256", strings.Repeat("0", 64)}, exitVerify},
		{[]string{"nosuchcommand"}, exitUsage},
		{[]string{"serve", "/no/such/dir"}, exitUsage},
		{[]string{"help"}, exitOK},
		{[]string{"help", "get"}, exitOK},
	} {
		code, _, stderr := runCmd(t, tc.args...)
		if code != tc.code {
			t.Errorf("stampede %s: exit %d, want %d (%s)", strings.Join(tc.args, " "), code, tc.code, stderr)
		}
	}
}

// closedAddr returns a loopback address nothing listens on any more.
func closedAddr() string {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	return strings.TrimPrefix(srv.URL, "http://")
}

// binDir holds the binary built for tests that need a real process.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinary compiles stampede once for tests that need a real process.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "stampede-test-bin")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "stampede")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func TestResumeAfterKill(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	www := t.TempDir()
	data := randomBytes(16<<20, 4)
	writeFile(t, www, "f", data)
	base := startServe(t, www, "--rate", "16MB")
	out := filepath.Join(t.TempDir(), "f")

	cmd := exec.Command(bin, "get", "-q", base+"/f", "-o", out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once the origin has sent about a third of the file.
	deadline := time.Now().Add(20 * time.Second)
	for sent := 0.0; sent < float64(len(data))/3; sent = metric(t, base, "stampede_origin_bytes_sent_total") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("origin sent only %.0f bytes in 20s", sent)
		}
		time.Sleep(20 * time.Millisecond) // polling a process we do not control
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("%s exists after the kill", out)
	}

	code, stdout, stderr := runCmd(t, "get", "-c", base+"/f", "-o", out, "--json")
	if code != 0 {
		t.Fatalf("resume exited %d: %s", code, stderr)
	}
	sameFile(t, out, data)
	var res fetch.Result
	json.Unmarshal([]byte(stdout), &res)
	if res.PiecesResumed == 0 || res.PiecesResumed >= res.Pieces {
		t.Errorf("resumed %d of %d pieces; want some but not all", res.PiecesResumed, res.Pieces)
	}
}

// TestInterruptedGet: Ctrl-C exits 130, as a shell reports a process SIGINT
// ended, with one line that says what to do next and none per request cut
// short; the resume that follows logs nothing alarming either.
func TestInterruptedGet(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	www := t.TempDir()
	data := randomBytes(16<<20, 5)
	writeFile(t, www, "f", data)
	base := startServe(t, www, "--rate", "16MB")
	out := filepath.Join(t.TempDir(), "f")

	cmd := exec.Command(bin, "get", base+"/f", "-o", out) // not -q: info logs on
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for sent := 0.0; sent < float64(len(data))/4; sent = metric(t, base, "stampede_origin_bytes_sent_total") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("origin sent only %.0f bytes in 20s", sent)
		}
		time.Sleep(20 * time.Millisecond) // polling a process we do not control
	}
	cmd.Process.Signal(syscall.SIGINT)
	err = cmd.Wait()
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 130 {
		t.Fatalf("get after SIGINT: %v, want exit status 130; stderr:\n%s", err, stderr.String())
	}
	// Progress lines ("f  25% [...") may come first, every 5 s.
	var got strings.Builder
	for line := range strings.Lines(stderr.String()) {
		if !strings.HasPrefix(line, "f ") {
			got.WriteString(line)
		}
	}
	want := "stampede get: interrupted; " + out + ".part is kept: run the same command again to resume\n"
	if got.String() != want {
		t.Errorf("stderr after SIGINT:\n%s\nwant only:\n%s", stderr.String(), want)
	}

	code, _, errs := runCmd(t, "get", "-c", base+"/f", "-o", out)
	if code != 0 {
		t.Fatalf("resume exited %d: %s", code, errs)
	}
	sameFile(t, out, data)
	for line := range strings.Lines(errs) {
		if strings.Contains(line, "level=") && !strings.Contains(line, "level=INFO msg=\"resuming") ||
			strings.Contains(line, "fail") || strings.Contains(line, "cancel") {
			t.Errorf("a successful resume logged %q", line)
		}
	}
	if !strings.Contains(errs, "resumed from f.part") {
		t.Errorf("the resume's summary does not say what was resumed: %q", errs)
	}
	// Once more with -c: complete already, so nothing is downloaded.
	code, _, errs = runCmd(t, "get", "-c", base+"/f", "-o", out)
	if code != 0 || !strings.Contains(errs, "f: already complete (16.0 MiB), verified: merkle") {
		t.Errorf("-c on the complete file: exit %d: %q", code, errs)
	}
	sameFile(t, out, data)
}

func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

func TestDiskFull(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	www := t.TempDir()
	data := randomBytes(3<<20, 5)
	writeFile(t, www, "f", data)
	base := startServe(t, www)
	out := filepath.Join(mnt, "f")
	code, _, stderr := runCmd(t, "get", "-q", base+"/f", "-o", out)
	if code != exitIO || !strings.Contains(stderr, "no space") {
		t.Fatalf("exit %d (%s), want %d naming the full disk", code, stderr, exitIO)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s exists after a failed download", out)
	}
}

func TestFileChangedDuringGet(t *testing.T) {
	www := t.TempDir()
	data := randomBytes(8<<20, 6)
	writeFile(t, www, "f", data)
	base := startServe(t, www, "--rate", "8MB")
	out := filepath.Join(t.TempDir(), "f")
	done := make(chan int, 1)
	var stderr string
	go func() {
		var code int
		code, _, stderr = runCmd(t, "get", "-q", "--parallel", "2", base+"/f", "-o", out)
		done <- code
	}()
	deadline := time.Now().Add(20 * time.Second)
	for metric(t, base, "stampede_origin_bytes_sent_total") < 1<<20 {
		if time.Now().After(deadline) {
			t.Fatal("the download did not start")
		}
		time.Sleep(10 * time.Millisecond) // polling another component's counter
	}
	// The operator replaces the file mid-download.
	data[0] ^= 1
	writeFile(t, www, "f", data)
	future := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(www, "f"), future, future)
	if code := <-done; code != exitChanged {
		t.Fatalf("exit %d (%s), want %d", code, stderr, exitChanged)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s exists after the file changed mid-download", out)
	}
}

func TestLimitRate(t *testing.T) {
	www := t.TempDir()
	data := randomBytes(1<<20, 7)
	writeFile(t, www, "f", data)
	base := startServe(t, www)
	out := filepath.Join(t.TempDir(), "f")
	start := time.Now()
	code, _, stderr := runCmd(t, "get", "-q", "--limit-rate", "2MiB", base+"/f", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	sameFile(t, out, data)
	// 1 MiB at 2 MiB/s with a burst of a tenth of a second: at least 0.4 s.
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("1 MiB at --limit-rate 2MiB took %v, want at least 0.4s", d)
	}
}
