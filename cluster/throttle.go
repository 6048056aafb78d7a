package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// HostLoad is how busy a host is.
type HostLoad struct {
	// CPU is the 1-minute load average per CPU (1: every CPU busy).
	CPU float64
	// IOWait is the share of time tasks wait on IO: Linux PSI's
	// /proc/pressure/io "some avg10" where present, else the share of
	// CPU time spent in iowait since the last reading (/proc/stat).
	IOWait float64
}

// LoadSource reads the host's load. Tests drive the throttle through
// their own; ProcLoad reads Linux's.
type LoadSource interface {
	Load() (HostLoad, error)
}

// ProcLoad reads /proc (Root, default "/proc"). Not safe for concurrent
// use: it keeps the last /proc/stat reading.
type ProcLoad struct {
	Root              string
	lastIOWait, lastT uint64
}

// Load reads the load average and the IO pressure.
func (p *ProcLoad) Load() (HostLoad, error) {
	root := p.Root
	if root == "" {
		root = "/proc"
	}
	var l HostLoad
	data, err := os.ReadFile(filepath.Join(root, "loadavg"))
	if err != nil {
		return l, fmt.Errorf("load: %w", err)
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return l, fmt.Errorf("load: %s/loadavg is empty", root)
	}
	if l.CPU, err = strconv.ParseFloat(f[0], 64); err != nil {
		return l, fmt.Errorf("load: %s/loadavg: %w", root, err)
	}
	l.CPU /= float64(runtime.NumCPU())
	if psi, err := os.ReadFile(filepath.Join(root, "pressure", "io")); err == nil {
		if v, ok := psiSome(psi); ok {
			l.IOWait = v / 100
			return l, nil
		}
	}
	stat, err := os.ReadFile(filepath.Join(root, "stat"))
	if err != nil {
		return l, nil // no IO figure: CPU alone
	}
	iowait, total, ok := cpuTimes(stat)
	if ok && total > p.lastT && p.lastT > 0 {
		l.IOWait = float64(iowait-p.lastIOWait) / float64(total-p.lastT)
	}
	if ok {
		p.lastIOWait, p.lastT = iowait, total
	}
	return l, nil
}

// psiSome returns the "some avg10" of a PSI file, in percent.
func psiSome(data []byte) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "some" {
			continue
		}
		if v, ok := strings.CutPrefix(f[1], "avg10="); ok {
			x, err := strconv.ParseFloat(v, 64)
			return x, err == nil
		}
	}
	return 0, false
}

// cpuTimes returns the iowait and total jiffies of /proc/stat's cpu line.
func cpuTimes(data []byte) (iowait, total uint64, ok bool) {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i == 4 {
			iowait = v
		}
	}
	return iowait, total, true
}

// Throttle decides an agent's rate from the host's load: past MaxLoad or
// MaxIOWait it cuts the rate in proportion to how far past (at least to
// a tenth: a push must still end); once the load is back under, it
// doubles the rate each step back to the budget (without a budget, it
// lifts the limit at once). Pure: the caller reads
// the load, measures its rate and applies the limit Step returns.
type Throttle struct {
	// MaxLoad (load per CPU) and MaxIOWait (a share) are the thresholds;
	// 0 turns either off.
	MaxLoad, MaxIOWait float64
	limit              float64 // the rate now; 0: the budget
}

// MinRate is the least rate a throttle goes down to, bytes/s.
const MinRate = 64 << 10

// Step returns the rate to apply, bytes/s (0: not limited), given the
// load, the rate measured since the last step and the budget (0: none).
// Loaded with no rate to cut (no budget, no limit yet, nothing measured:
// a push that starts on a loaded host), it starts from MinRate.
func (t *Throttle) Step(l HostLoad, measured, budget float64) (rate float64, throttled bool) {
	factor := 1.0
	if t.MaxLoad > 0 && l.CPU > t.MaxLoad {
		factor = min(factor, t.MaxLoad/l.CPU)
	}
	if t.MaxIOWait > 0 && l.IOWait > t.MaxIOWait {
		factor = min(factor, t.MaxIOWait/l.IOWait)
	}
	if factor < 1 {
		base := t.limit
		if base == 0 || (measured > 0 && measured < base) {
			base = measured
		}
		if base == 0 {
			base = budget
		}
		t.limit = max(MinRate, base*max(factor, 0.1))
		if budget > 0 {
			t.limit = min(t.limit, budget)
		}
		return t.limit, true
	}
	if t.limit == 0 {
		return budget, false
	}
	t.limit *= 2
	// Without a budget there is no rate to climb back to: unlimited at
	// once.
	if budget == 0 || t.limit >= budget {
		t.limit = 0
		return budget, false
	}
	return t.limit, true
}
