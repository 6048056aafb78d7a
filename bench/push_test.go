package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPushBound(t *testing.T) {
	const F = 128 * MiB
	top := &PushTopology{Racks: 4, HostsPerRack: 6, HostUp: 12.5e6, HostDown: 12.5e6, RackUplink: 5e6, Reserve: 0.2}
	// push-4x6: the rack uplinks bind, a copy at 32 Mbit/s.
	if got, want := PushBound(F, 5e6, top), float64(F)/4e6; math.Abs(got-want) > 1e-9 {
		t.Errorf("4x6 bound %.3f s, want %.3f", got, want)
	}
	// A slow origin binds at its full capacity: it has no budget.
	if got, want := PushBound(F, 1e6, top), float64(F)/1e6; math.Abs(got-want) > 1e-9 {
		t.Errorf("slow origin: %.3f s, want %.3f", got, want)
	}
	// A narrow datacenter link binds at its budget.
	dc := *top
	dc.Datacenters, dc.DCUplink = 2, 2.5e6
	if got, want := PushBound(F, 5e6, &dc), float64(F)/2e6; math.Abs(got-want) > 1e-9 {
		t.Errorf("datacenters: %.3f s, want %.3f", got, want)
	}
	// Hosts that upload slowly bind: a rack's 6 copies come over its
	// uplink or from its hosts' uploads.
	slow := *top
	slow.HostUp = 1e6
	if got, want := PushBound(F, 5e6, &slow), 6*float64(F)/(0.8*(5e6+6e6)); math.Abs(got-want) > 1e-9 {
		t.Errorf("slow uploads: %.3f s, want %.3f", got, want)
	}
}

func TestMaxWindowRate(t *testing.T) {
	// 1 MB/s for 2 s, then a burst of 3 MB in 0.5 s, then idle.
	pts := []Point{{0, 0}, {0.5, 0.5e6}, {1, 1e6}, {1.5, 1.5e6}, {2, 2e6}, {2.5, 5e6}, {3, 5e6}, {3.5, 5e6}}
	// The burst's second: 3.5 MB over 1 s (1.5 to 2.5 s).
	if got := maxWindowRate(pts, loadWindow); math.Abs(got-3.5e6) > 1 {
		t.Errorf("max 1 s rate %.0f, want 3.5e6", got)
	}
	if got := maxWindowRate(pts[:2], loadWindow); got != 0 {
		t.Errorf("under a window: %.0f, want 0", got)
	}
}

func TestLinkFigures(t *testing.T) {
	links := []*PushLink{
		{Name: "origin", Kind: linkOrigin, Rack: -1, Budget: 5e6},
		{Name: "rack0 in", Kind: linkRackIn, Rack: 0, Budget: 4e6},
		{Name: "rack0 out", Kind: linkRackOut, Rack: 0, Budget: 4e6},
		{Name: "rack1 in", Kind: linkRackIn, Rack: 1, Budget: 4e6},
	}
	t0 := time.Unix(1000, 0)
	const size = 10e6
	var samples [][]linkSample
	// Counters start anywhere; the origin sends 11 MB, rack 0 takes 12 MB
	// in at 4.4 MB/s at best, rack 1 10 MB; one reading of rack 1 fails.
	for i := range 7 {
		at := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		in0 := []int64{0, 1e6, 3.2e6, 5.4e6, 7.6e6, 9.8e6, 12e6}[i]
		s := []linkSample{
			{at, 7e6 + int64(i)*11e6/6, true},
			{at, 100 + in0, true},
			{at, 50, true},
			{at, int64(i) * 10e6 / 6, i != 3},
		}
		samples = append(samples, s)
	}
	series, f := linkFigures(links, samples, t0, size)
	if len(series[3]) != 6 || series[1][0].V != 0 || series[1][6].T != 3 {
		t.Errorf("series %v", series)
	}
	if math.Abs(f.OriginCopies-1.1) > 1e-9 || math.Abs(f.RackInCopies-1.2) > 1e-9 {
		t.Errorf("origin %.3f copies, rack in %.3f, want 1.1 and 1.2", f.OriginCopies, f.RackInCopies)
	}
	if math.Abs(f.LinkMaxOverBudget-1.1) > 1e-9 {
		t.Errorf("link_max_over_budget %.3f, want 1.1 (4.4 MB/s over 4)", f.LinkMaxOverBudget)
	}
	if len(f.Links) != 3 || f.Links[1].Link != "rack0 out" || f.Links[1].Copies != 0 || f.Links[1].MaxOverBudget != 0 {
		t.Errorf("links %+v", f.Links)
	}
	if m, l, s := hostTimes([]float64{4, 2, 3, 10}); m != 3.5 || l != 10 || math.Abs(s-10/3.5) > 1e-9 {
		t.Errorf("hostTimes = %v %v %v", m, l, s)
	}
}

// pushTestReport is a push report as runPush makes it, for two systems.
func pushTestReport(t *testing.T) *Report {
	t.Helper()
	sc, err := LoadScenario("push-4x6")
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Scenario: sc, Backend: BackendNetns, Push: &PushReport{BoundSeconds: PushBound(sc.Size, sc.OriginUp, sc.Push),
		Links: []PushLink{{Name: "rack0 in", Rack: 0, Capacity: 5e6, Budget: 4e6}}}}
	run := func(sys string, last, origin, rackIn, peak float64) *RunResult {
		r := &RunResult{System: sys, Label: pushLabels[sys], Rep: 1, Arrived: 2, Finished: 2, Complete: true, Last: last,
			Peers: []*PeerResult{{ID: 0, Host: "r0h0", Class: "r0", Finished: true, Seconds: last * 0.9, Done: last * 0.9},
				{ID: 1, Host: "r0h1", Class: "r0", Finished: true, Seconds: last, Done: last}},
			Origin: []Point{{0, 0}, {1, 1e6}, {last, origin * float64(sc.Size)}}}
		r.Completion = distOf([]float64{last * 0.9, last})
		r.Push = &PushRunFigures{LastSeconds: last, MedianSeconds: last * 0.95, SlowestOverMedian: 1 / 0.95,
			OriginCopies: origin, RackInCopies: rackIn, LinkMaxOverBudget: peak, BoundSeconds: rep.Push.BoundSeconds,
			LastOverBound: last / rep.Push.BoundSeconds,
			Links:         []PushLinkLoad{{Link: "rack0 in", Copies: rackIn, MaxOverBudget: peak, Bytes: []Point{{0, 0}, {1, 4e6}, {2, 8e6}}}}}
		return r
	}
	rep.Systems = []*SystemResult{
		{System: SysPush, Label: pushLabels[SysPush], Runs: []*RunResult{run(SysPush, 42, 1.09, 1.07, 0.97)}},
		{System: SysAria2, Label: pushLabels[SysAria2], Runs: []*RunResult{run(SysAria2, 60, 1.9, 2.7, 1.3)}},
	}
	rep.summarize()
	rep.summarizePush()
	return rep
}

func TestPushReport(t *testing.T) {
	rep := pushTestReport(t)
	aims := map[string]bool{}
	for _, a := range rep.Push.Aims {
		aims[a.Aim] = a.Met
	}
	want := map[string]bool{
		"origin bytes ≤ 1.10 copies": true, "bytes into each rack over its uplink ≤ 1.2 copies": true,
		"no shared link above its capacity less the reserve in any 1 s window": true,
		"slowest host ≤ 1.3 × the median host":                                 true,
		"last host ≤ 1.2 × the topology bound":                                 false, // 42 s over 33.6 s
		"last host ≤ 0.6 × aria2's":                                            false, // 0.70
	}
	for aim, met := range want {
		if got, ok := aims[aim]; !ok || got != met {
			t.Errorf("aim %q: met %v (present %v), want %v", aim, got, ok, met)
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"4 racks × 6 hosts", "topology bound on the last host: 33.6 s", "link_max_over_budget",
		"rack_in_copies", "stampede push", "42.0 s", "1.07", "last host ≤ 0.6 × aria2's: 0.70 (MISSED)", "rack0 in 1.07/0.97"} {
		if !strings.Contains(table.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, table.String())
		}
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Shared links: stampede push", "rack_in_copies", "Issue 31's aims", "topology bound"} {
		if !strings.Contains(page.String(), w) {
			t.Errorf("report.html lacks %q", w)
		}
	}
	for _, bad := range []string{"NaN", "T<sub>KR</sub>", ">T_KR<"} {
		if i := strings.Index(page.String(), bad); i >= 0 {
			t.Errorf("report.html shows %q: %s", bad, page.String()[max(i-200, 0):min(i+100, page.Len())])
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Push    PushReport `json:"push"`
		Systems []struct {
			Push PushSystemFigures `json:"push"`
			Runs []struct {
				Push PushRunFigures `json:"push"`
			} `json:"runs"`
		} `json:"systems"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Push.BoundSeconds != rep.Push.BoundSeconds || back.Systems[0].Push.RackInCopies.Median != 1.07 ||
		back.Systems[1].Runs[0].Push.LinkMaxOverBudget != 1.3 {
		t.Errorf("report.json: %+v", back)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md, "bench/scenarios/push-4x6.txt"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| stampede push | 1 | 2/2 |") {
		t.Errorf("markdown:\n%s", md.String())
	}
}

// TestPushSmoke runs a 2 × 2 cluster with a 2 MiB file on the netns
// backend, every push system that can run here, and checks the report.
func TestPushSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mode = push needs root (network namespaces and tc)")
	}
	if testing.Short() {
		t.Skip("builds a cluster of namespaces and runs real transfers")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("mode = push needs %s", tool)
		}
	}
	sc, err := ParseScenario("smoke.txt", strings.NewReader("mode = push\nsize = 2MiB\norigin_up = 40Mbit\nracks = 2\n"+
		"hosts_per_rack = 2\nhost_up = 100Mbit\nhost_down = 100Mbit\nrack_uplink = 40Mbit\ntimeout = 90s\n"))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	rep, err := Run(t.Context(), Config{Scenario: sc, Bin: stampedeBin(t), WorkDir: work, SkipUnavailable: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Logf("report:\n%s", table.String())
	checkClean(t, work)
	if rep.Push == nil || len(rep.Systems) == 0 || rep.Systems[0].System != SysPush {
		t.Fatalf("not a push report with stampede push first: %+v", rep.Systems)
	}
	if len(rep.Push.Links) != 5 { // the origin's, and each rack's uplink both ways
		t.Errorf("%d links watched, want 5", len(rep.Push.Links))
	}
	for _, s := range rep.Systems {
		if !s.Complete || s.Push == nil {
			t.Errorf("%s: complete %v, figures %v", s.Label, s.Complete, s.Push)
			continue
		}
		f := s.Push
		if f.LastSeconds.Median <= 0 || f.LinkMaxOverBudget.Median <= 0 || f.RackInCopies.Median < 0.95 || f.OriginCopies.Median < 0.95 {
			t.Errorf("%s: implausible figures %+v", s.Label, f)
		}
	}
	// The tree and plain HTTP bring every copy into a rack from outside
	// or from the origin; a push brings about one into each rack.
	if p := rep.pushSystem(SysPush); p != nil && p.Push.RackInCopies.Median > 1.6 {
		t.Errorf("push brought %.2f copies into a rack", p.Push.RackInCopies.Median)
	}
	if h := rep.pushSystem(SysHTTP); h != nil && h.Push.OriginCopies.Median < 3.5 {
		t.Errorf("plain HTTP: the origin sent %.2f copies to 4 hosts", h.Push.OriginCopies.Median)
	}
}

// TestPushSmokeDatacenters pushes 2 MiB to 2 datacenters of one rack of 2
// hosts: the datacenter links are made, watched and budgeted.
func TestPushSmokeDatacenters(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mode = push needs root (network namespaces and tc)")
	}
	if testing.Short() {
		t.Skip("builds a cluster of namespaces and runs real transfers")
	}
	sc, err := ParseScenario("smoke-dc.txt", strings.NewReader("mode = push\nsize = 2MiB\norigin_up = 40Mbit\ndatacenters = 2\n"+
		"dc_uplink = 80Mbit\nracks = 1\nhosts_per_rack = 2\nhost_up = 100Mbit\nhost_down = 100Mbit\nrack_uplink = 40Mbit\n"+
		"systems = push\ntimeout = 60s\n"))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	rep, err := Run(t.Context(), Config{Scenario: sc, Bin: stampedeBin(t), WorkDir: work, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkClean(t, work)
	if n := len(rep.Push.Links); n != 9 { // the origin's, each datacenter's and each rack's link both ways
		t.Errorf("%d links watched, want 9", n)
	}
	p := rep.pushSystem(SysPush)
	if p == nil || !p.Complete {
		t.Fatalf("push incomplete: %+v", rep.Systems)
	}
	if f := p.Push; f.DCInCopies.Median < 0.95 || f.DCInCopies.Median > 1.6 || f.RackInCopies.Median < 0.95 {
		t.Errorf("into a datacenter %.2f copies, into a rack %.2f", f.DCInCopies.Median, f.RackInCopies.Median)
	}
}

// TestPushInterrupt cancels a push scenario mid-run: Run returns the
// context's error and leaves no process, file or namespace behind.
func TestPushInterrupt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mode = push needs root (network namespaces and tc)")
	}
	if testing.Short() {
		t.Skip("builds a cluster of namespaces")
	}
	sc, err := ParseScenario("interrupt.txt", strings.NewReader("mode = push\nsize = 32MiB\norigin_up = 40Mbit\nracks = 2\n"+
		"hosts_per_rack = 2\nhost_up = 100Mbit\nhost_down = 100Mbit\nrack_uplink = 40Mbit\nsystems = push,tree\n"))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	observe := func(s Snapshot) {
		if s.Elapsed > 1 {
			once.Do(func() { close(started) })
		}
	}
	go func() {
		<-started
		cancel()
	}()
	_, err = Run(ctx, Config{Scenario: sc, Bin: stampedeBin(t), WorkDir: work, Logger: testLogger(t), Observe: observe})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	checkClean(t, work)
}

// TestPushSystemFails runs push with a stampede that cannot make keys: the
// run reports every host failed, with the cause, and the bench goes on.
func TestPushSystemFails(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mode = push needs root (network namespaces and tc)")
	}
	if testing.Short() {
		t.Skip("builds a cluster of namespaces")
	}
	bin := filepath.Join(t.TempDir(), "stampede")
	script := "#!/bin/sh\ncase \"$1\" in help|version) echo stampede broken;; *) echo \"no $1 here\" >&2; exit 1;; esac\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sc, err := ParseScenario("broken.txt", strings.NewReader("mode = push\nsize = 1MiB\norigin_up = 40Mbit\nracks = 1\n"+
		"hosts_per_rack = 2\nhost_up = 100Mbit\nhost_down = 100Mbit\nrack_uplink = 40Mbit\nsystems = push\nreps = 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	rep, err := Run(t.Context(), Config{Scenario: sc, Bin: bin, WorkDir: work, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkClean(t, work)
	s := rep.Systems[0]
	if s.Complete || len(s.Runs) != 2 {
		t.Fatalf("complete %v after %d runs, want 2 failed runs", s.Complete, len(s.Runs))
	}
	for _, p := range s.Runs[1].Peers {
		if p.State != string(PeerFailed) || !strings.Contains(p.Error, "no keygen here") {
			t.Errorf("host %s: %s, %q", p.Host, p.State, p.Error)
		}
	}
}
