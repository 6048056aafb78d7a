package bench

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/internal/units"
)

// TestCDNLoopback runs the CDN testbed small on loopback: every client
// completes with the right bytes, and stampede's nodes take about one copy
// of each file from the origin.
func TestCDNLoopback(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl (scripts/install-test-deps.sh)")
	}
	cfg := CDNConfig{Binary: stampedeBin(t), Backend: BackendLoopback, Nodes: 3, Clients: 6, Size: 3 << 20, Files: 2,
		Timeout: time.Minute, Seed: 1, Log: testLogger(t)}
	for _, sys := range []string{CDNStampede, CDNNginx, CDNNginxSolo, CDNVarnish} {
		t.Run(sys, func(t *testing.T) {
			if prog := cdnProgram(sys); prog != "" {
				if _, err := exec.LookPath(prog); err != nil {
					t.Skipf("needs %s (scripts/install-test-deps.sh)", prog)
				}
			}
			cfg.Dir = filepath.Join(t.TempDir(), "run")
			res, err := RunCDN(t.Context(), cfg, sys)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res)
			if res.Failed != 0 || len(res.Times) != cfg.Clients {
				t.Errorf("%d clients failed", res.Failed)
			}
			if sys != CDNNginxSolo && res.Copies > 1.1 {
				t.Errorf("the origin sent %.2f copies", res.Copies)
			}
		})
	}
}

type cdnForm struct {
	name string
	tune func(*CDNConfig)
}

// TestCDNBench is issue 32's testbed run, on netns as root when
// STAMPEDETEST_CDN_BENCH is set (it takes minutes): 6 nodes at 100/100
// Mbit/s, 24 clients at 20/50, the origin at 50, 64 MiB, each system three
// times, in the plain, hot-spot and node-killed forms.
// STAMPEDETEST_CDN_BENCH_OUT names a JSON file for the results;
// STAMPEDETEST_CDN_BENCH_REPS, _SYSTEMS (default
// stampede-cdn,nginx-cdn,varnish-cdn; also nginx-solo) and _FORMS
// (plain,hot-spot,node-killed) narrow it.
func TestCDNBench(t *testing.T) {
	if os.Getenv("STAMPEDETEST_CDN_BENCH") == "" {
		t.Skip("set STAMPEDETEST_CDN_BENCH=1 to run the CDN testbed (root, netns, minutes)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (netns)")
	}
	mbit := func(s string) int64 {
		v, err := units.ParseRate(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	base := CDNConfig{Binary: stampedeBin(t), Backend: BackendNetns, Nodes: 6, Clients: 24, Size: 64 << 20, Files: 1,
		NodeUp: mbit("100Mbit"), NodeDown: mbit("100Mbit"), ClientUp: mbit("20Mbit"), ClientDown: mbit("50Mbit"),
		OriginUp: mbit("50Mbit"), Timeout: 10 * time.Minute, Seed: 32, Log: testLogger(t)}
	forms := []cdnForm{
		{"plain", func(*CDNConfig) {}},
		{"hot-spot", func(c *CDNConfig) { c.Files = 4 }},
		{"node-killed", func(c *CDNConfig) { c.KillAt = 10 * time.Second }},
	}
	reps := 3
	if s := os.Getenv("STAMPEDETEST_CDN_BENCH_REPS"); s != "" {
		if n, err := strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("STAMPEDETEST_CDN_BENCH_REPS %q", s)
		} else {
			reps = n
		}
	}
	systems := []string{CDNStampede, CDNNginx, CDNVarnish}
	if s := os.Getenv("STAMPEDETEST_CDN_BENCH_SYSTEMS"); s != "" {
		systems = strings.Split(s, ",")
	}
	if s := os.Getenv("STAMPEDETEST_CDN_BENCH_FORMS"); s != "" {
		forms = slices.DeleteFunc(forms, func(f cdnForm) bool { return !slices.Contains(strings.Split(s, ","), f.name) })
	}
	all := map[string][]*CDNResult{}
	for _, f := range forms {
		for _, sys := range systems {
			for rep := range reps {
				cfg := base
				f.tune(&cfg)
				cfg.Seed += uint64(rep)
				cfg.Dir = filepath.Join(t.TempDir(), "run")
				res, err := RunCDN(t.Context(), cfg, sys)
				if err != nil {
					t.Fatalf("%s %s: %v", f.name, sys, err)
				}
				t.Logf("%s rep %d: %v", f.name, rep+1, res)
				if res.Counters != nil {
					t.Logf("  nodes' counters: %v", res.Counters)
				}
				all[f.name+" "+sys] = append(all[f.name+" "+sys], res)
			}
		}
	}
	if out := os.Getenv("STAMPEDETEST_CDN_BENCH_OUT"); out != "" {
		b, _ := json.MarshalIndent(all, "", "  ")
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
