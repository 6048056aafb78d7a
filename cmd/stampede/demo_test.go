package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stampede-dev/stampede/bench"
)

// benchBinary builds stampede: the demo and bench commands run it as
// separate processes (origin and peers).
func benchBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stampede")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// benchBuffer is a buffer safe for a command writing while a test reads.
type benchBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *benchBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *benchBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func runStampede(t *testing.T, terminal bool, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr benchBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, stderrIsTerminal: terminal}
	code := run(t.Context(), args, e)
	return code, stdout.String(), stderr.String()
}

func TestDemoScenario(t *testing.T) {
	sc, err := demoScenario(20, "5MiB", "16Mbit", "16Mbit", "40Mbit", "all", "leave", "stampede,http", "loopback", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := bench.CrowdOf(sc)
	// The defaults: plain HTTP needs 20*5 MiB/16 Mbit/s = 52.4 s, T_KR is
	// F/u_s = 2.6 s: about a minute per system, and a clear gap.
	if h := c.HTTP(); h < 40 || h > 60 {
		t.Errorf("default demo: HTTP bound %.1f s, want 40-60 s", h)
	}
	if sc.Peers() != 20 || sc.Size != 5<<20 || sc.OriginUp != 2e6 || sc.Classes[0].Down != 5e6 {
		t.Errorf("demo scenario %+v", sc)
	}
	for _, bad := range [][]string{
		{"0", "5MiB", "16Mbit", "16Mbit", "40Mbit", "all", "leave", "http"},
		{"3", "five", "16Mbit", "16Mbit", "40Mbit", "all", "leave", "http"},
		{"3", "5MiB", "x", "16Mbit", "40Mbit", "all", "leave", "http"},
		{"3", "5MiB", "16Mbit", "16Mbit", "40Mbit", "soon", "leave", "http"},
		{"3", "5MiB", "16Mbit", "16Mbit", "40Mbit", "all", "stay", "http"},
		{"3", "5MiB", "16Mbit", "16Mbit", "40Mbit", "all", "leave", "ftp"},
	} {
		n := 0
		if bad[0] == "3" {
			n = 3
		}
		if _, err := demoScenario(n, bad[1], bad[2], bad[3], bad[4], bad[5], bad[6], bad[7], "loopback", 1, 1); err == nil {
			t.Errorf("demoScenario(%v) succeeded", bad)
		}
	}
	if code, _, stderr := runStampede(t, false, "demo", "--arrivals", "sometimes"); code != exitUsage || !strings.Contains(stderr, "--arrivals") {
		t.Errorf("bad --arrivals: exit %d: %s", code, stderr)
	}
}

// TestDemoRuns runs a small demo end to end, as a user would, and checks
// its outputs.
func TestDemoRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	out := t.TempDir()
	code, stdout, stderr := runStampede(t, true, "demo", "--peers", "3", "--size", "1MiB", "--origin-up", "32Mbit",
		"--peer-up", "16Mbit", "--peer-down", "32Mbit", "--systems", "http", "--out", out, "--bin", benchBinary(t))
	if code != 0 {
		t.Fatalf("demo exited %d:\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"HTTP (stampede get", "last/T_KR", "report.html"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	// The live view drew one glyph per peer and ended with all three done.
	if !strings.Contains(stderr, "✓✓✓") || !strings.Contains(stderr, "\033[") {
		t.Errorf("live view:\n%q", stderr)
	}
	rep, err := bench.ReadReport(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Systems) != 1 || !rep.Systems[0].Complete || rep.Systems[0].Runs[0].Finished != 3 {
		t.Errorf("report: %+v", rep.Systems)
	}
	page, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil || !bytes.Contains(page, []byte("<svg")) {
		t.Errorf("report.html: %v", err)
	}
	if !rep.Demo || !bytes.Contains(page, []byte("<title>stampede demo")) {
		t.Errorf("the report is not titled as the demo (demo %v)", rep.Demo)
	}
}

func TestBenchCommand(t *testing.T) {
	if code, stdout, _ := runStampede(t, false, "bench", "--list"); code != 0 || !strings.Contains(stdout, "flash20") {
		t.Errorf("bench --list: %d %s", code, stdout)
	}
	for _, args := range [][]string{
		{"bench"},
		{"bench", "nosuch"},
		{"bench", "ci", "--backend", "docker"},
		{"bench", "ci", "--systems", "ftp"},
	} {
		if code, _, stderr := runStampede(t, false, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d: %s", args, code, exitUsage, stderr)
		}
	}
	fs := describe(lookup("bench"))
	if _, err := fs.parse([]string{"--doc", "docs/benchmarks.md", "--out", "o", "-qv", "--reps=2", "--serve-args", "--rate 8Mbit", "a", "b"}); err != nil {
		t.Fatal(err)
	}
	got := benchCommand(fs, "bench/scenarios/a.txt")
	if want := "stampede bench --out o --quiet --reps 2 --serve-args '--rate 8Mbit' --verbose bench/scenarios/a.txt"; got != want {
		t.Errorf("benchCommand = %q, want %q", got, want)
	}
}

// TestBenchDoc runs a tiny scenario file and writes its table into a
// markdown file whose hand-written part must survive.
func TestBenchDoc(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	dir := t.TempDir()
	scen := filepath.Join(dir, "tiny.txt")
	if err := os.WriteFile(scen, []byte("# Tiny.\nsize = 512KiB\norigin_up = 32Mbit\npeers = 2\npeer_up = 16Mbit\npeer_down = 32Mbit\nsystems = http\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "benchmarks.md")
	hand := "# Benchmarks\n\n## Foundation\n\nkeep me\n"
	if err := os.WriteFile(doc, []byte(hand), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runStampede(t, false, "bench", scen, "--out", dir, "--doc", doc, "--bin", benchBinary(t))
	if code != 0 {
		t.Fatalf("bench exited %d:\n%s\n%s", code, stdout, stderr)
	}
	md, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{hand, bench.MarkBegin, "### tiny (loopback backend)", "| HTTP (stampede get", bench.MarkEnd} {
		if !strings.Contains(string(md), want) {
			t.Errorf("%s lacks %q:\n%s", doc, want, md)
		}
	}
	for _, f := range []string{"tiny.json", "tiny.html"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// A saved report renders again, the same.
	again := t.TempDir()
	code, stdout, stderr = runStampede(t, false, "bench", "--from-json", filepath.Join(dir, "tiny.json"), "--out", again)
	if code != 0 {
		t.Fatalf("bench --from-json exited %d: %s", code, stderr)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "tiny.html"))
	b, _ := os.ReadFile(filepath.Join(again, "tiny.html"))
	if !bytes.Equal(a, b) || !strings.Contains(stdout, "HTTP (stampede get") {
		t.Errorf("the re-rendered report differs (%d vs %d bytes):\n%s", len(a), len(b), stdout)
	}
}
