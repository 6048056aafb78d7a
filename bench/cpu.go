package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// saturatedShare is the share of the machine's CPU time, busy, from which a
// half-second sample counts as saturated: the testbed's hosts share the
// machine's CPUs, and while they are all busy what the run measures is
// partly the CPU, not the emulated links.
const saturatedShare = 0.95

// cpuStat is the machine's CPU time so far, in clock ticks, from the first
// line of /proc/stat: busy (every state but idle and iowait) and total.
type cpuStat struct{ busy, total uint64 }

// readCPUStat reads /proc/stat; false where there is none (not Linux).
func readCPUStat() (cpuStat, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuStat{}, false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return cpuStat{}, false
	}
	return parseCPUStat(line)
}

// parseCPUStat reads the aggregate "cpu" line of /proc/stat: user, nice,
// system, idle, iowait, irq, softirq, steal, then guest times that user and
// nice already count (proc(5)).
func parseCPUStat(line string) (cpuStat, bool) {
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuStat{}, false
	}
	var s cpuStat
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuStat{}, false
		}
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	return s, true
}

// busyShare is the share of the CPU time from a to b that was busy; false
// when no time passed (clock ticks are coarse) or the counters went back.
func busyShare(a, b cpuStat) (float64, bool) {
	if b.total <= a.total || b.busy < a.busy {
		return 0, false
	}
	return float64(b.busy-a.busy) / float64(b.total-a.total), true
}
