package cluster

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestProcLoad(t *testing.T) {
	p := &ProcLoad{Root: "testdata/proc"}
	l, err := p.Load()
	if err != nil {
		t.Fatal(err)
	}
	if want := 3.5 / float64(runtime.NumCPU()); math.Abs(l.CPU-want) > 1e-9 || math.Abs(l.IOWait-0.425) > 1e-9 {
		t.Errorf("PSI: %+v, want CPU %v and IOWait 0.425", l, want)
	}
	// Without PSI: iowait's share of the time between two readings.
	dir := t.TempDir()
	copyFile(t, "testdata/procnopsi/loadavg", filepath.Join(dir, "loadavg"))
	copyFile(t, "testdata/procnopsi/stat", filepath.Join(dir, "stat"))
	q := &ProcLoad{Root: dir}
	if l, err := q.Load(); err != nil || l.IOWait != 0 {
		t.Fatalf("first reading: %+v, %v", l, err)
	}
	// 100 more jiffies, 50 of them iowait.
	os.WriteFile(filepath.Join(dir, "stat"), []byte("cpu  120 0 110 720 150 0 0 0 0 0\n"), 0o644)
	if l, err := q.Load(); err != nil || math.Abs(l.IOWait-0.5) > 1e-9 {
		t.Fatalf("second reading: %+v, %v", l, err)
	}
	if _, err := (&ProcLoad{Root: t.TempDir()}).Load(); err == nil {
		t.Error("no loadavg, no error")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestThrottle(t *testing.T) {
	const budget = 10e6
	th := Throttle{MaxLoad: 2, MaxIOWait: 0.3}
	type step struct {
		load      HostLoad
		measured  float64
		want      float64
		throttled bool
	}
	for i, s := range []step{
		{HostLoad{CPU: 1}, 8e6, budget, false},
		// Load 4 per CPU, twice the threshold: half of what it got.
		{HostLoad{CPU: 4}, 8e6, 4e6, true},
		// IO wait 0.9, three times 0.3: a third of the limit now.
		{HostLoad{CPU: 1, IOWait: 0.9}, 4e6, 4e6 / 3, true},
		// Far past: a tenth at most per step, never under MinRate.
		{HostLoad{CPU: 400}, 1e6, 1e5, true},
		{HostLoad{CPU: 400}, 1e5, MinRate, true},
		// Back under: doubling up to the budget.
		{HostLoad{}, MinRate, 2 * MinRate, true},
		{HostLoad{}, 0, 4 * MinRate, true},
	} {
		got, thr := th.Step(s.load, s.measured, budget)
		if math.Abs(got-s.want) > 1 || thr != s.throttled {
			t.Fatalf("step %d: %v, %v; want %v, %v", i, got, thr, s.want, s.throttled)
		}
	}
	for range 20 {
		th.Step(HostLoad{}, 0, budget)
	}
	if got, thr := th.Step(HostLoad{}, 0, budget); got != budget || thr {
		t.Errorf("recovered: %v, %v", got, thr)
	}
	// Thresholds off: never throttled. No budget: unlimited until loaded.
	off := Throttle{}
	if got, thr := off.Step(HostLoad{CPU: 100, IOWait: 1}, 1e6, 0); got != 0 || thr {
		t.Errorf("off: %v, %v", got, thr)
	}
	nb := Throttle{MaxLoad: 1}
	if got, _ := nb.Step(HostLoad{CPU: 2}, 6e6, 0); got != 3e6 {
		t.Errorf("no budget, loaded: %v", got)
	}
	if got, thr := nb.Step(HostLoad{}, 3e6, 0); got != 0 || thr {
		t.Errorf("no budget, unloaded again: %v, %v", got, thr)
	}
	// Loaded at the start, with no rate known: the floor.
	start := Throttle{MaxLoad: 1}
	if got, thr := start.Step(HostLoad{CPU: 1.1}, 0, 0); got != MinRate || !thr {
		t.Errorf("no budget, nothing measured, loaded: %v, %v; want MinRate", got, thr)
	}
}
