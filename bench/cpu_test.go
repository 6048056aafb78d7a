package bench

import (
	"runtime"
	"testing"
)

func TestParseCPUStat(t *testing.T) {
	for _, c := range []struct {
		line        string
		busy, total uint64
		ok          bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice:
		// the guest times are in user and nice already.
		{"cpu  100 5 50 800 20 3 7 1 40 2\n", 166, 986, true},
		{"cpu 10 0 10 80", 20, 100, true}, // an old kernel's four fields
		{"cpu0 100 5 50 800 20 3 7 1 0 0", 0, 0, false},
		{"cpu  100 x 50 800 20", 0, 0, false},
		{"intr 1 2 3 4 5", 0, 0, false},
		{"", 0, 0, false},
	} {
		s, ok := parseCPUStat(c.line)
		if ok != c.ok || s.busy != c.busy || s.total != c.total {
			t.Errorf("parseCPUStat(%q) = %+v, %v; want busy %d total %d, %v", c.line, s, ok, c.busy, c.total, c.ok)
		}
	}
}

func TestBusyShare(t *testing.T) {
	a := cpuStat{busy: 100, total: 400}
	if got, ok := busyShare(a, cpuStat{busy: 175, total: 500}); !ok || !near(got, 0.75) {
		t.Errorf("busyShare = %v, %v; want 0.75", got, ok)
	}
	if _, ok := busyShare(a, a); ok {
		t.Error("no time passed, and a share came out")
	}
	if _, ok := busyShare(a, cpuStat{busy: 90, total: 500}); ok {
		t.Error("a busy counter that went back gave a share")
	}
}

// checkCPU checks a run's CPU series (Linux only): a share of each half
// second, in time order, and no more saturated seconds than the run had.
func checkCPU(t *testing.T, label string, run *RunResult) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	if len(run.CPU) == 0 {
		t.Errorf("%s: no CPU samples", label)
		return
	}
	for i, p := range run.CPU {
		if p.V < 0 || p.V > 1 || i > 0 && p.T < run.CPU[i-1].T {
			t.Errorf("%s: CPU sample %d out of range or order: %+v", label, i, p)
			break
		}
	}
	if end := run.CPU[len(run.CPU)-1].T; run.CPUSaturated < 0 || run.CPUSaturated > end+0.5 {
		t.Errorf("%s: %.1f s saturated in a run sampled for %.1f s", label, run.CPUSaturated, end)
	}
}
