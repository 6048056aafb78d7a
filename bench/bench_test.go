package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The integration tests run the real stampede binary, built once per test
// process (or taken from STAMPEDETEST_BENCH_BIN).

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func stampedeBin(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("STAMPEDETEST_BENCH_BIN"); p != "" {
			binPath = p
			return
		}
		if binDir, binErr = os.MkdirTemp("", "bench-test-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "stampede")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/stampede-dev/stampede/cmd/stampede").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// checkClean fails if anything the harness made under workDir is left: a
// file, a process whose command line names workDir, or (as root) one of
// this process's network namespaces.
func checkClean(t *testing.T, workDir string) {
	t.Helper()
	ents, err := os.ReadDir(workDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left in the work directory: %s", e.Name())
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err == nil && bytes.Contains(cmdline, []byte(workDir)) {
			t.Errorf("process left running: %s: %s", filepath.Dir(p), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
	if os.Geteuid() == 0 {
		names, err := ListNetns(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		prefix := "stb" + strconv.Itoa(os.Getpid()) + "x"
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				t.Errorf("network namespace left: %s", n)
			}
		}
	}
}

// TestCIScenario runs the CI scenario (5 peers, 4 MiB, caps) on loopback
// and checks that the report's numbers hold together.
func TestCIScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes for about 15 s")
	}
	sc, err := LoadScenario("ci")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	start := time.Now()
	rep, err := Run(t.Context(), Config{Scenario: sc, Backend: BackendLoopback, Bin: stampedeBin(t), WorkDir: work, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("ci scenario took %v", took)
	if took > 60*time.Second {
		t.Errorf("the CI scenario took %v, want under a minute", took)
	}
	checkClean(t, work)

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())

	n, size := sc.Peers(), sc.Size
	crowd := CrowdOf(sc)
	// T_KR by hand: F = 4 MiB = 4194304 B; u_s = 32 Mbit/s = 4e6 B/s;
	// u_i = d_i = 16 Mbit/s = 2e6 B/s: F/u_s = 1.048576, F/d = 2.097152,
	// 5F/(4e6+10e6) = 1.497966 -> 2.097152 s. HTTP: 5F/u_s = 5.24288 s.
	if !near(rep.TKR, 2.097152) || !near(rep.HTTPBound, 5.24288) || !near(crowd.TKR(), rep.TKR) {
		t.Errorf("bounds: T_KR %v, HTTP %v", rep.TKR, rep.HTTPBound)
	}
	if len(rep.Systems) != 2 {
		t.Fatalf("systems: %d, want stampede and http", len(rep.Systems))
	}
	for _, s := range rep.Systems {
		if len(s.Runs) != 1 || !s.Complete {
			t.Errorf("%s: %d runs, complete %v", s.Label, len(s.Runs), s.Complete)
			continue
		}
		run := s.Runs[0]
		if run.Arrived != n || run.Finished != n || !run.Complete || run.TimedOut {
			t.Errorf("%s: arrived %d finished %d complete %v timed out %v", s.Label, run.Arrived, run.Finished, run.Complete, run.TimedOut)
		}
		var secs []float64
		for _, p := range run.Peers {
			if !p.Finished || !p.Verified || p.Exit != 0 || p.Error != "" {
				t.Errorf("%s: peer %d: %+v", s.Label, p.ID, p)
			}
			if !(0 <= p.Start && p.Start <= p.Done && p.Done <= p.End+1e-9) || !near(p.Seconds, p.Done-p.Start) {
				t.Errorf("%s: peer %d times out of order: start %v done %v end %v seconds %v", s.Label, p.ID, p.Start, p.Done, p.End, p.Seconds)
			}
			if p.Done > run.Last+1e-9 {
				t.Errorf("%s: peer %d done at %v after the last completion %v", s.Label, p.ID, p.Done, run.Last)
			}
			if p.Bytes != size {
				t.Errorf("%s: peer %d ended with %d bytes of %d", s.Label, p.ID, p.Bytes, size)
			}
			for i := 1; i < len(p.Progress); i++ {
				if p.Progress[i].T < p.Progress[i-1].T {
					t.Errorf("%s: peer %d progress goes back in time", s.Label, p.ID)
					break
				}
			}
			secs = append(secs, p.Seconds)
		}
		c := run.Completion
		if c.N != n || !(c.Min <= c.P50 && c.P50 <= c.P90 && c.P90 <= c.Max) || c.Mean < c.Min || c.Mean > c.Max {
			t.Errorf("%s: completion out of order: %+v", s.Label, c)
		}
		if d := distOf(secs); d != c {
			t.Errorf("%s: completion %+v, recomputed %+v", s.Label, c, d)
		}
		if run.Last < c.Max-1e-9 || run.Last > c.Max+1 {
			t.Errorf("%s: last %v, slowest peer %v", s.Label, run.Last, c.Max)
		}
		// Bytes add up. Every byte came from the origin (no swarm yet, or
		// the HTTP baseline): at least N copies, and waste (re-requested
		// pieces) bounded.
		if run.OriginBytes < size {
			t.Errorf("%s: origin sent %d bytes, less than the file", s.Label, run.OriginBytes)
		}
		fromOrigin := s.System == SysHTTP || !rep.Features.Swarm
		if fromOrigin && (run.OriginBytes < int64(n)*size || run.OriginBytes > int64(n)*size*3/2) {
			t.Errorf("%s: origin sent %d bytes for %d copies of %d", s.Label, run.OriginBytes, n, size)
		}
		if got := int64(run.Done[len(run.Done)-1].V); got != int64(n)*size {
			t.Errorf("%s: the peers' bytes add up to %d, want %d", s.Label, got, int64(n)*size)
		}
		checkPeerBytes(t, s.Label, run, int64(n)*size, fromOrigin)
		if !near(run.R, float64(run.OriginBytes)/float64(size)) || !near(run.LastOverTKR, run.Last/run.TKR) ||
			!near(run.TKRR, crowd.TKRR(run.R)) || !near(run.LastOverTKRR, run.Last/run.TKRR) {
			t.Errorf("%s: ratios inconsistent: %+v", s.Label, run)
		}
		for i := 1; i < len(run.Origin); i++ {
			if run.Origin[i].V < run.Origin[i-1].V || run.Done[i].V < run.Done[i-1].V || run.Origin[i].T < run.Origin[i-1].T {
				t.Errorf("%s: a cumulative series decreases at sample %d", s.Label, i)
				break
			}
		}
		// Nothing beats physics: with every byte from the capped origin,
		// the last peer cannot finish before N*F/u_s (10% slack for the
		// token bucket's initial burst).
		if fromOrigin && run.Last < 0.9*rep.HTTPBound {
			t.Errorf("%s: last %.2f s beats the HTTP bound %.2f s: the origin's cap leaks", s.Label, run.Last, rep.HTTPBound)
		}
		if run.Last < 0.9*rep.TKR {
			t.Errorf("%s: last %.2f s beats T_KR %.2f s", s.Label, run.Last, rep.TKR)
		}
		if len(run.Origin) < 5 {
			t.Errorf("%s: only %d origin samples", s.Label, len(run.Origin))
		}
		checkCPU(t, s.Label, run)
	}

	// The JSON form round-trips; the HTML stands alone.
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Systems[0].Runs[0].Finished != n || back.TKR != rep.TKR {
		t.Errorf("report.json lost figures")
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	checkHTML(t, page.String())
}

// checkPeerBytes checks that what the peers counted they sent each other
// adds up: with every progress line, in every summary and against what
// they delivered. delivered is the verified bytes of the peers that
// finished; fromOrigin says no peer uploads (the HTTP baseline).
func checkPeerBytes(t *testing.T, label string, run *RunResult, delivered int64, fromOrigin bool) {
	t.Helper()
	if want := max(delivered-run.OriginBytes, 0); run.PeerBytesDerived != want {
		t.Errorf("%s: derived peer bytes %d, want %d", label, run.PeerBytesDerived, want)
	}
	if !run.PeerBytesCounted || len(run.Uploaded) != len(run.Origin) {
		t.Fatalf("%s: peer bytes not counted (%d upload samples, %d origin samples)", label, len(run.Uploaded), len(run.Origin))
	}
	var last, fromPeers, inSummaries int64
	for _, p := range run.Peers {
		last += p.Uploaded
		var sum struct {
			Swarm *struct {
				BytesFromPeers int64 `json:"bytes_from_peers"`
				BytesToPeers   int64 `json:"bytes_to_peers"`
			} `json:"swarm"`
		}
		if err := json.Unmarshal(p.Summary, &sum); err != nil {
			t.Errorf("%s: peer %d: summary: %v", label, p.ID, err)
			continue
		}
		if sum.Swarm != nil {
			fromPeers += sum.Swarm.BytesFromPeers
			inSummaries += sum.Swarm.BytesToPeers
			if sum.Swarm.BytesToPeers != p.Uploaded {
				t.Errorf("%s: peer %d: summary says %d bytes to peers, its last progress line %d", label, p.ID, sum.Swarm.BytesToPeers, p.Uploaded)
			}
		} else if !fromOrigin {
			t.Errorf("%s: peer %d has no swarm summary", label, p.ID)
		}
	}
	if run.PeerBytes != last || int64(run.Uploaded[len(run.Uploaded)-1].V) != last || inSummaries != last {
		t.Errorf("%s: peer bytes %d, the peers' last progress lines %d, the last sample %v, their summaries %d",
			label, run.PeerBytes, last, run.Uploaded[len(run.Uploaded)-1].V, inSummaries)
	}
	for i := 1; i < len(run.Uploaded); i++ {
		if run.Uploaded[i].V < run.Uploaded[i-1].V || run.Uploaded[i].T != run.Origin[i].T {
			t.Errorf("%s: the upload series decreases or lags the origin's at sample %d", label, i)
			break
		}
	}
	if fromOrigin {
		if run.PeerBytes != 0 {
			t.Errorf("%s: peers uploaded %d bytes without a swarm", label, run.PeerBytes)
		}
		return
	}
	// Every verified byte came from the origin or a peer, so what the
	// origin sent and the peers carried covers what was delivered: the
	// derived figure is a floor for what the peers received, and nobody
	// receives more than was sent. Waste (duplicates, endgame) stays
	// bounded.
	if run.PeerBytesDerived > fromPeers || fromPeers > run.PeerBytes {
		t.Errorf("%s: derived %d <= received from peers %d <= sent to peers %d does not hold",
			label, run.PeerBytesDerived, fromPeers, run.PeerBytes)
	}
	if total := run.OriginBytes + run.PeerBytes; total < delivered || total > 2*delivered {
		t.Errorf("%s: origin %d + peers %d = %d bytes for %d delivered", label, run.OriginBytes, run.PeerBytes, total, delivered)
	}
}

// checkHTML checks a report page is self-contained.
func checkHTML(t *testing.T, page string) {
	t.Helper()
	if n := strings.Count(page, "<svg"); n < 4 {
		t.Errorf("report.html has %d charts", n)
	}
	for _, bad := range []string{"<script", "src=", "<link", "@import", "url(http"} {
		if strings.Contains(page, bad) {
			t.Errorf("report.html contains %q: it must stand alone", bad)
		}
	}
	if strings.Contains(page, "NaN") || strings.Contains(page, "+Inf") {
		t.Errorf("report.html has NaN or Inf in it")
	}
}

// TestInterruptCleansUp cancels a run midway: Run must return promptly
// with the cancellation, leaving no process, file or namespace behind.
func TestInterruptCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	backends := []string{BackendLoopback}
	if os.Geteuid() == 0 {
		backends = append(backends, BackendNetns)
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			sc, err := LoadScenario("ci")
			if err != nil {
				t.Fatal(err)
			}
			sc.OriginUp = 1e6 // slow: the run is still going when cancelled
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var once sync.Once
			work := t.TempDir()
			observe := func(s Snapshot) {
				if s.Elapsed > 1.5 {
					once.Do(cancel)
				}
			}
			start := time.Now()
			_, err = Run(ctx, Config{Scenario: sc, Backend: backend, Bin: stampedeBin(t), WorkDir: work,
				Logger: testLogger(t), Observe: observe})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v, want context.Canceled", err)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("Run took %v to stop", took)
			}
			checkClean(t, work)
		})
	}
}

// transfer measures one capped download, as the harness does: a stampede
// origin (or with nginx, nginx behind the harness's relay) on from, a
// stampede get on to, both with the caps of their hosts. It returns the
// steady rate in bytes/s, from get's progress reports between 1 s in and
// the last report before completion.
// transfer gets a file of size bytes from host from to host to and returns
// its mean rate after the first second and its peak rate (peakRate).
func transfer(t *testing.T, nw Network, from, to *Host, size int64, nginx bool) (mean, peak float64) {
	t.Helper()
	bin := stampedeBin(t)
	dir := t.TempDir()
	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := writeRandomFile(filepath.Join(www, "f"), size, 3); err != nil {
		t.Fatal(err)
	}
	e := &runEnv{sc: &Scenario{OriginUp: from.Up}, net: nw, origin: from, bin: bin, dir: dir, www: www, file: "f", log: testLogger(t)}
	var url string
	if nginx {
		n, err := newNginx(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer n.stop()
		url = "http://" + n.relay.addr() + "/f"
	} else {
		o := &stampedeOrigin{env: e}
		if err := o.start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer o.stop()
		url = o.url("/f")
	}
	argv := []string{bin, "get", url, "-o", filepath.Join(dir, "out"), "-q", "--progress-json"}
	if nw.AppShaping() && to.Down > 0 {
		argv = append(argv, "--limit-rate", strconv.FormatInt(to.Down, 10))
	}
	var mu sync.Mutex
	var pts []progressLine
	p, err := startProc(procSpec{name: "get", argv: to.Command(argv...), stderr: func(line string, _ time.Time) {
		if pl, ok := parseProgressJSON(line); ok {
			mu.Lock()
			pts = append(pts, pl)
			mu.Unlock()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := p.wait(ctx); err != nil {
		p.kill()
		t.Fatalf("get did not finish: %v", err)
	}
	if p.code != 0 {
		t.Fatalf("get: %s", p.describe())
	}
	mu.Lock()
	defer mu.Unlock()
	var first, last *progressLine
	for i := range pts {
		pl := &pts[i]
		if first == nil && pl.T >= 1 && pl.Done > 0 {
			first = pl
		}
		if pl.Done < size {
			last = pl
		}
	}
	if first == nil || last == nil || last.T-first.T < 2 {
		t.Fatalf("too few progress reports to measure a rate: %+v", pts)
	}
	return float64(last.Done-first.Done) / (last.T - first.T), peakRate(pts, size)
}

// peakRate is the best rate over any window of at least three seconds
// between two progress reports of a transfer, after its first second. A cap
// shows in it even when the transfer stalls now and then (a busy machine,
// TCP backing off from the cap's drops), which drags the mean down. Windows
// are three seconds long because reports come in bursts.
func peakRate(pts []progressLine, size int64) float64 {
	best := 0.0
	for i, a := range pts {
		if a.T < 1 || a.Done == 0 {
			continue
		}
		for _, b := range pts[i+1:] {
			if b.Done >= size {
				break
			}
			if b.T-a.T >= 3 {
				best = max(best, float64(b.Done-a.Done)/(b.T-a.T))
				break
			}
		}
	}
	return best
}

// TestShapingLoopback checks the application-level caps the loopback
// backend relies on: a single capped transfer runs at 90-105% of its cap.
func TestShapingLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real transfers for about 10 s")
	}
	const capBps = 4e6 // 32 Mbit/s
	for _, tt := range []struct {
		name     string
		up, down int64
		nginx    bool
	}{
		{"get --limit-rate from an uncapped serve", 0, capBps, false},
		{"serve --rate to an uncapped get", capBps, 0, false},
		{"nginx through the relay's bucket to an uncapped get", capBps, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.nginx {
				skipUnlessInstalled(t, SysNginx)
			}
			nw := loopback{}
			from, _ := nw.AddHost(t.Context(), "origin", tt.up, 0)
			to, _ := nw.AddHost(t.Context(), "peer", 0, tt.down)
			rate, _ := transfer(t, nw, from, to, 5*capBps, tt.nginx)
			ratio := rate / capBps
			t.Logf("%s: %.3f MB/s for a cap of %.3f MB/s: %.1f%%", tt.name, rate/1e6, capBps/1e6, 100*ratio)
			if ratio < 0.90 || ratio > 1.05 {
				t.Errorf("rate %.1f%% of the cap, want 90-105%%", 100*ratio)
			}
		})
	}
}

// TestNetnsSmoke builds a two-host netns network and checks that tc caps
// apply: the upload cap of the origin's host, then the download cap of the
// peer's host, each reached within 80-110% over the transfer's best three seconds;
// and that everything is deleted.
func TestNetnsSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the netns backend needs root")
	}
	if testing.Short() {
		t.Skip("runs real transfers for about 10 s")
	}
	for _, tt := range []struct {
		name     string
		up, down int64
		cap      float64
	}{
		{"origin upload cap 8 Mbit/s, peer download 20 Mbit/s", 1e6, 2.5e6, 1e6},
		{"origin uncapped, peer download cap 16 Mbit/s", 0, 2e6, 2e6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nw := newTestNetns(t)
			from, err := nw.AddHost(t.Context(), "origin", tt.up, 0)
			if err != nil {
				t.Fatal(err)
			}
			to, err := nw.AddHost(t.Context(), "peer", 0, tt.down)
			if err != nil {
				t.Fatal(err)
			}
			if from.IP == to.IP || !strings.HasPrefix(from.IP, "198.18.") {
				t.Fatalf("addresses %s and %s", from.IP, to.IP)
			}
			mean, peak := transfer(t, nw, from, to, int64(8*tt.cap), false)
			t.Logf("%s: mean %.3f MB/s, peak %.3f MB/s for a cap of %.3f MB/s: %.1f%%, %.1f%%",
				tt.name, mean/1e6, peak/1e6, tt.cap/1e6, 100*mean/tt.cap, 100*peak/tt.cap)
			// The cap holds if no three seconds go past it; it is the cap
			// that binds if the best three reach it. The mean is only
			// logged: it fell to 75-78% in CI and once on a quiet machine.
			if r := peak / tt.cap; r < 0.80 || r > 1.10 {
				t.Errorf("peak rate %.1f%% of the cap, want 80-110%%", 100*r)
			}
		})
	}
}

// newTestNetns returns a netns network that is closed when the test ends,
// checking that its namespaces are gone.
func newTestNetns(t *testing.T) Network {
	t.Helper()
	nw, err := NewNetwork(t.Context(), BackendNetns, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nw.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		checkNetnsGone(t, nw.(*netns).prefix)
	})
	return nw
}

func checkNetnsGone(t *testing.T, prefix string) {
	t.Helper()
	names, err := ListNetns(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			t.Errorf("namespace %s left after Close", n)
		}
	}
}

// TestAria2Baseline runs a tiny crowd with the BitTorrent baseline, where
// aria2c, opentracker and mktorrent are installed.
func TestAria2Baseline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	skipUnlessInstalled(t, SysAria2)
	sc, err := ParseScenario("aria2.txt", strings.NewReader(`
size = 2MiB
origin_up = 8Mbit
peers = 3
peer_up = 8Mbit
peer_down = 20Mbit
systems = aria2
`))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	rep, err := Run(t.Context(), Config{Scenario: sc, Bin: stampedeBin(t), WorkDir: work, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkClean(t, work)
	run := rep.Systems[0].Runs[0]
	if !run.Complete || run.Finished != 3 {
		var b bytes.Buffer
		_ = rep.WriteTable(&b)
		t.Fatalf("aria2 run incomplete:\n%s", b.String())
	}
	// The seeder sent at least one copy, and the origin's counter agrees
	// with what the peers hold to within what was still in flight.
	if run.OriginBytes < sc.Size || run.OriginBytes > 4*sc.Size {
		t.Errorf("seeder uploaded %d bytes for 3 peers of a %d-byte file", run.OriginBytes, sc.Size)
	}
	if math.IsNaN(run.LastOverTKR) || run.Last < 0.9*run.TKR {
		t.Errorf("last %.2f s against T_KR %.2f s", run.Last, run.TKR)
	}
	t.Logf("aria2: last %.1f s (%.2f x T_KR), origin %.2f copies", run.Last, run.LastOverTKR, run.R)
}

// TestFaults kills a peer and restarts the origin during a run: the killed
// peer is counted apart, the others finish, and the origin's bytes carry
// over its restart.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	sc, err := ParseScenario("faults.txt", strings.NewReader(`
size = 2MiB
origin_up = 8Mbit
peers = 3
peer_up = 8Mbit
peer_down = 20Mbit
systems = http
fault = kill 1 at 1s
fault = restart origin at 2s
fault = restart tracker at 3s
fault = corrupt 1
`))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	rep, err := Run(t.Context(), Config{Scenario: sc, Bin: stampedeBin(t), WorkDir: work, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkClean(t, work)
	run := rep.Systems[0].Runs[0]
	notes := strings.Join(run.Notes, "\n")
	t.Logf("notes:\n%s", notes)
	if run.Killed != 1 || run.Finished != 2 || !run.Complete {
		t.Errorf("killed %d, finished %d, complete %v", run.Killed, run.Finished, run.Complete)
	}
	for _, want := range []string{`fault "kill 1 at 1s": killed peers [`, `fault "restart origin at 2s": the origin was down`,
		`fault "restart tracker at 3s" not applied: HTTP`, `fault "corrupt 1" not applied`} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q", want)
		}
	}
	// Two peers got the whole file from the origin, the killed one some of
	// it: the counter must not have started again from zero.
	if run.OriginBytes < 2*sc.Size {
		t.Errorf("origin bytes %d over a restart, want at least %d", run.OriginBytes, 2*sc.Size)
	}
	for _, p := range run.Peers {
		if p.State == string(PeerKilled) && (p.Finished || p.Exit != -1) {
			t.Errorf("killed peer %+v", p)
		}
	}
}

// TestSwarmFaults runs the standard "faults" scenario: a corrupting
// stampede peer, the tracker and the origin restarted, with stampede and,
// where installed, nginx as a second HTTP origin. The corrupting peer must
// be banned, every peer must finish with a verified file, the restarted
// tracker must be announced to, and the origin's bytes must carry over.
func TestSwarmFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes for about 25 s")
	}
	sc, err := LoadScenario("faults")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	rep, err := Run(t.Context(), Config{Scenario: sc, Bin: stampedeBin(t), WorkDir: work, Logger: testLogger(t),
		SkipUnavailable: true})
	if err != nil {
		t.Fatal(err)
	}
	checkClean(t, work)
	var table bytes.Buffer
	_ = rep.WriteTable(&table)
	t.Logf("\n%s", table.String())

	n, size := sc.Peers(), sc.Size
	wantSystems := 2
	if len(missingPrograms(exec.LookPath, nginxPrograms)) > 0 {
		wantSystems = 1
	}
	if len(rep.Systems) != wantSystems {
		t.Fatalf("%d systems, want %d", len(rep.Systems), wantSystems)
	}
	for _, s := range rep.Systems {
		run := s.Runs[0]
		notes := strings.Join(run.Notes, "\n")
		if !run.Complete || run.Finished != n {
			t.Errorf("%s: finished %d of %d, complete %v", s.Label, run.Finished, n, run.Complete)
		}
		for _, p := range run.Peers {
			if !p.Verified {
				t.Errorf("%s: peer %d (corrupting %v): not verified: %s", s.Label, p.ID, p.Corrupting, p.Error)
			}
		}
		if !strings.Contains(notes, `fault "restart origin at 4s": the origin was down`) {
			t.Errorf("%s: the origin restart is not in the notes", s.Label)
		}
		// The origin's counter carries over its restart: every byte the
		// peers verified came from it or from a peer.
		if run.OriginBytes+run.PeerBytes < int64(n)*size {
			t.Errorf("%s: origin %d + peers %d bytes for %d delivered", s.Label, run.OriginBytes, run.PeerBytes, int64(n)*size)
		}
		switch s.System {
		case SysStampede:
			checkPeerBytes(t, s.Label, run, int64(n)*size, false)
			if !strings.Contains(notes, `fault "restart tracker at 1.5s": the tracker was down`) || run.RestartedTrackerAnnounces == 0 {
				t.Errorf("%s: tracker restart: %d announces after it; notes:\n%s", s.Label, run.RestartedTrackerAnnounces, notes)
			}
			c := run.Corrupt
			if c == nil {
				t.Fatalf("%s: no corrupting peer; notes:\n%s", s.Label, notes)
			}
			if len(c.Peers) != 1 || !run.Peers[c.Peers[0]].Corrupting {
				t.Errorf("%s: corrupting peers %v", s.Label, c.Peers)
			}
			// It sent corrupt data, somebody banned it, every honest peer
			// finished verified, and nobody banned an honest peer (the
			// corrupting one receives only good data).
			if c.SentBytes == 0 || c.HonestBanning == 0 || c.Honest != n-1 || c.HonestFinished != c.Honest || c.BansByCorrupting != 0 {
				t.Errorf("%s: corrupt outcome %+v", s.Label, *c)
			}
			if run.Peers[c.Peers[0]].Uploaded != c.SentBytes {
				t.Errorf("%s: corrupting peer uploaded %d, reported %d", s.Label, run.Peers[c.Peers[0]].Uploaded, c.SentBytes)
			}
		case SysNginx:
			checkPeerBytes(t, s.Label, run, int64(n)*size, true)
			if run.Corrupt != nil || !strings.Contains(notes, `fault "corrupt 1" not applied`) {
				t.Errorf("%s: the corrupt fault applied to HTTP peers", s.Label)
			}
			// Every byte from nginx, through one capped relay: at least N
			// copies (a restart wastes what was in flight), and no faster
			// than the cap allows.
			if run.OriginBytes < int64(n)*size || run.OriginBytes > int64(n)*size*3/2 {
				t.Errorf("%s: origin sent %d bytes for %d copies of %d", s.Label, run.OriginBytes, n, size)
			}
			if run.Last < 0.9*rep.HTTPBound {
				t.Errorf("%s: last %.2f s beats the HTTP bound %.2f s: the relay's cap leaks", s.Label, run.Last, rep.HTTPBound)
			}
		default:
			t.Errorf("unexpected system %s", s.System)
		}
	}
}

// skipUnlessInstalled skips t where a program system runs is not installed.
func skipUnlessInstalled(t *testing.T, system string) {
	t.Helper()
	if m := missingPrograms(exec.LookPath, systemPrograms(system)); len(m) > 0 {
		t.Skipf("%v", &Unavailable{System: system, Missing: m})
	}
}

// TestDebugLogMakesDir: STAMPEDETEST_PEER_LOGS naming a directory that
// does not exist yet gets it made, rather than the run logging nothing.
func TestDebugLogMakesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs", "run1")
	t.Setenv("STAMPEDETEST_PEER_LOGS", dir)
	f := peerLog(3)
	if f == nil {
		t.Fatal("peerLog: nil with a directory that can be made")
	}
	if _, err := f.WriteString("hello\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b, err := os.ReadFile(filepath.Join(dir, "peer-3.log"))
	if err != nil || string(b) != "hello\n" {
		t.Fatalf("peer-3.log: %q, %v", b, err)
	}
	// A path under a regular file cannot be a directory: nil, not a panic.
	t.Setenv("STAMPEDETEST_PEER_LOGS", filepath.Join(dir, "peer-3.log", "x"))
	if f := peerLog(4); f != nil {
		f.Close()
		t.Fatal("peerLog: a file under a regular file opened")
	}
}
