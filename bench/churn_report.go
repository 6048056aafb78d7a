package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/internal/units"
)

// ChurnRate is one rate of a churn run, or the median of the runs' (a
// system's Rates). Times are seconds; latency runs from an arrival's
// scheduled time to its verified object.
type ChurnRate struct {
	Rate      float64 `json:"rate"`
	Arrivals  int     `json:"arrivals"`
	Completed int     `json:"completed"` // verified
	Failed    int     `json:"failed,omitempty"`
	Mean      float64 `json:"mean"`
	P50       float64 `json:"p50"`
	P90       float64 `json:"p90"`
	P99       float64 `json:"p99"`
	Max       float64 `json:"max"`
	// OriginBytes is what the origin's namespace sent (its link's
	// counter) from the rate's first arrival until its last peer was done,
	// and OriginBytesPerArrival that over the arrivals.
	OriginBytes           int64   `json:"origin_bytes"`
	OriginBytesPerArrival float64 `json:"origin_bytes_per_arrival"`
	// CPUBusy is the machine's share of CPU time not idle during the
	// rate's arrivals (0-1, all CPUs), Load the load average at their end.
	CPUBusy float64 `json:"cpu_busy"`
	Load    float64 `json:"load"`
	// StartLagMean and StartLagP99: how late the peers' processes started
	// after their scheduled arrival.
	StartLagMean float64 `json:"start_lag_mean"`
	StartLagP99  float64 `json:"start_lag_p99"`
	// MaxPool is the largest pool of unfinished peers during the rate's
	// arrivals; Stable says whether it had stopped growing by their end,
	// by Flashback's test: the largest pool of the last window (a third
	// of the arrivals, at most 10 s) no larger than the largest of the
	// window before.
	MaxPool int  `json:"max_pool"`
	Stable  bool `json:"stable"`
	// GaveUp: peers still ran when the rate's drain time ran out.
	GaveUp bool     `json:"gave_up,omitempty"`
	Errors []string `json:"errors,omitempty"`
}

// ChurnNAT is what the stampede peers of one class reported of their
// neighbours (get --json's swarm.neighbours), summed.
type ChurnNAT struct {
	Class        string `json:"class"`
	NAT          string `json:"nat"`   // full-cone, port-restricted, symmetric or public
	Peers        int    `json:"peers"` // the peers whose summary was read
	Direct       int    `json:"direct"`
	Punched      int    `json:"punched"`
	Relayed      int    `json:"relayed"`
	RelayedBytes int64  `json:"relayed_bytes"`
}

// ChurnRun is one run of one system through every rate.
type ChurnRun struct {
	Rep   int         `json:"rep"`
	Load  float64     `json:"load"` // at the run's start
	Rates []ChurnRate `json:"rates"`
	// Pool is the number of arrived, unfinished peers every 0.5 s, in
	// seconds since the run's first arrival.
	Pool []Point    `json:"pool"`
	NAT  []ChurnNAT `json:"nat,omitempty"`
}

// summarizeChurn sets each system's rates (medians over its runs), pool
// (its first run's) and NAT counts (summed over its runs).
func (r *Report) summarizeChurn() {
	for _, s := range r.Systems {
		s.Complete = len(s.ChurnRuns) > 0
		s.Rates, s.Pool, s.NAT = nil, nil, nil
		for _, run := range s.ChurnRuns {
			for _, f := range run.Rates {
				s.Complete = s.Complete && f.Failed == 0 && !f.GaveUp && f.Completed == f.Arrivals
			}
			for i, n := range run.NAT {
				if i >= len(s.NAT) {
					s.NAT = append(s.NAT, ChurnNAT{Class: n.Class, NAT: n.NAT})
				}
				t := &s.NAT[i]
				t.Peers += n.Peers
				t.Direct += n.Direct
				t.Punched += n.Punched
				t.Relayed += n.Relayed
				t.RelayedBytes += n.RelayedBytes
			}
		}
		if len(s.ChurnRuns) == 0 {
			continue
		}
		s.Pool = s.ChurnRuns[0].Pool
		for i, f0 := range s.ChurnRuns[0].Rates {
			med := func(get func(ChurnRate) float64) float64 {
				var xs []float64
				for _, run := range s.ChurnRuns {
					if i < len(run.Rates) {
						xs = append(xs, get(run.Rates[i]))
					}
				}
				return rangeOf(xs).Median
			}
			s.Rates = append(s.Rates, ChurnRate{Rate: f0.Rate,
				Arrivals:              int(med(func(f ChurnRate) float64 { return float64(f.Arrivals) })),
				Completed:             int(med(func(f ChurnRate) float64 { return float64(f.Completed) })),
				Failed:                int(med(func(f ChurnRate) float64 { return float64(f.Failed) })),
				Mean:                  med(func(f ChurnRate) float64 { return f.Mean }),
				P50:                   med(func(f ChurnRate) float64 { return f.P50 }),
				P90:                   med(func(f ChurnRate) float64 { return f.P90 }),
				P99:                   med(func(f ChurnRate) float64 { return f.P99 }),
				Max:                   med(func(f ChurnRate) float64 { return f.Max }),
				OriginBytes:           int64(med(func(f ChurnRate) float64 { return float64(f.OriginBytes) })),
				OriginBytesPerArrival: med(func(f ChurnRate) float64 { return f.OriginBytesPerArrival }),
				CPUBusy:               med(func(f ChurnRate) float64 { return f.CPUBusy }),
				Load:                  med(func(f ChurnRate) float64 { return f.Load }),
				StartLagMean:          med(func(f ChurnRate) float64 { return f.StartLagMean }),
				StartLagP99:           med(func(f ChurnRate) float64 { return f.StartLagP99 }),
				MaxPool:               int(med(func(f ChurnRate) float64 { return float64(f.MaxPool) })),
				Stable:                med(func(f ChurnRate) float64 { return b2f(f.Stable) }) >= 0.5,
			})
		}
	}
	r.ChurnAims = r.churnAims()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// churnSystem is the system named, if it has rates.
func (r *Report) churnSystem(name string) *SystemResult {
	i := slices.IndexFunc(r.Systems, func(s *SystemResult) bool { return s.System == name && len(s.Rates) > 0 })
	if i < 0 {
		return nil
	}
	return r.Systems[i]
}

// churnLateStart is how late (p99) a rate's processes may start before
// the rate counts as CPU-bound: its figures then say more about the
// machine than about the system.
const churnLateStart = 0.5

// churnAims holds stampede's medians against issue 34's churn aims, at the
// rates the scenario has.
func (r *Report) churnAims() []PushAim {
	s := r.churnSystem(SysStampede)
	if s == nil {
		return nil
	}
	at := func(sys *SystemResult, rate float64) *ChurnRate {
		i := slices.IndexFunc(sys.Rates, func(f ChurnRate) bool { return f.Rate == rate })
		if i < 0 {
			return nil
		}
		return &sys.Rates[i]
	}
	var aims []PushAim
	lo, hi := at(s, 1), at(s, 16)
	if lo != nil && hi != nil && lo.P99 > 0 {
		aims = append(aims, PushAim{Aim: "p99 latency at 16/s ≤ 2.5 × at 1/s", Value: hi.P99 / lo.P99, Limit: 2.5})
	}
	if hi != nil {
		aims = append(aims, PushAim{Aim: "origin bytes per arrival at 16/s ≤ 0.1 × the object",
			Value: hi.OriginBytesPerArrival / float64(r.Scenario.Size), Limit: 0.1})
	}
	if a := r.churnSystem(SysAria2); a != nil {
		for _, f := range s.Rates {
			af := at(a, f.Rate)
			if af == nil || af.Mean <= 0 || af.StartLagP99 > churnLateStart {
				continue
			}
			aims = append(aims, PushAim{Aim: fmt.Sprintf("mean latency at %s ≤ 0.6 × aria2's", churnRateLabel(f.Rate)),
				Value: f.Mean / af.Mean, Limit: 0.6})
		}
	}
	for i := range aims {
		aims[i].Met = aims[i].Value <= aims[i].Limit && s.Complete
	}
	return aims
}

// churnTableRows are the cells of the churn table: one row per system and
// rate.
func (r *Report) churnTableRows() [][]string {
	rows := [][]string{{"system", "rate", "done", "mean", "p90", "p99", "origin/arrival", "pool", "CPU busy", "start lag p99"}}
	for _, s := range r.Systems {
		if len(s.Rates) == 0 {
			rows = append(rows, []string{s.Label, "-", "0", "-", "-", "-", "-", "-", "-", "-"})
			continue
		}
		for _, f := range s.Rates {
			rows = append(rows, []string{s.Label, churnRateLabel(f.Rate), fmt.Sprintf("%d/%d", f.Completed, f.Arrivals),
				ms(f.Mean), ms(f.P90), ms(f.P99), fmt.Sprintf("%s (%.2f)", units.Bytes(int64(f.OriginBytesPerArrival)),
					f.OriginBytesPerArrival/float64(r.Scenario.Size)), poolCell(f), fmt.Sprintf("%.0f%%", f.CPUBusy*100), ms(f.StartLagP99)})
		}
	}
	return rows
}

// poolCell is the largest pool, and whether it stabilized.
func poolCell(f ChurnRate) string {
	if f.Stable {
		return fmt.Sprintf("%d stable", f.MaxPool)
	}
	return fmt.Sprintf("%d growing", f.MaxPool)
}

// ms prints seconds as milliseconds below 10 s: latencies of small
// objects are short.
func ms(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case s < 10:
		return strconv.FormatFloat(s*1000, 'f', 0, 64) + " ms"
	}
	return fmt.Sprintf("%.1f s", s)
}

// churnLines are the aims, the NAT counts and the failures, one line each.
func (r *Report) churnLines(fn func(string)) {
	if len(r.ChurnAims) > 0 {
		fn("issue 34's aims, stampede's medians:")
		for _, a := range r.ChurnAims {
			mark := "met"
			if !a.Met {
				mark = "missed"
			}
			fn(fmt.Sprintf("  %s: %.2f (%s)", a.Aim, a.Value, mark))
		}
	}
	for _, s := range r.Systems {
		var late []string
		for _, f := range s.Rates {
			if f.StartLagP99 > churnLateStart {
				late = append(late, churnRateLabel(f.Rate))
			}
		}
		if len(late) > 0 {
			fn(fmt.Sprintf("%s: CPU-bound at %s (p99 of its processes started over %v s late)%s", s.Label,
				strings.Join(late, ", "), churnLateStart, map[bool]string{true: ": no aim compares it there", false: ""}[s.System == SysAria2]))
		}
	}
	for _, s := range r.Systems {
		for _, n := range s.NAT {
			fn(fmt.Sprintf("%s, class %s (%s): %d peers made %d direct, %d punched and %d relayed neighbours (%s relayed)",
				s.Label, n.Class, n.NAT, n.Peers, n.Direct, n.Punched, n.Relayed, units.Bytes(n.RelayedBytes)))
		}
		for _, run := range s.ChurnRuns {
			for _, f := range run.Rates {
				if f.GaveUp {
					fn(fmt.Sprintf("%s run %d at %s: peers still ran when the drain time ran out", s.Label, run.Rep, churnRateLabel(f.Rate)))
				}
				for _, e := range f.Errors {
					fn(fmt.Sprintf("%s run %d at %s: %s", s.Label, run.Rep, churnRateLabel(f.Rate), e))
				}
			}
		}
	}
}

// writeChurnTable is WriteTable for a churn report.
func (r *Report) writeChurnTable(w io.Writer) error {
	fmt.Fprintf(w, "%s: %s\n\n", r.Title(), r.Scenario.Summary())
	writeAligned(w, r.churnTableRows())
	fmt.Fprintln(w)
	r.churnLines(func(s string) { fmt.Fprintf(w, "%s\n", s) })
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// writeChurnMarkdown is WriteMarkdown for a churn report.
func (r *Report) writeChurnMarkdown(w io.Writer, scenarioPath string) error {
	sc := r.Scenario
	fmt.Fprintf(w, "### %s (%s backend)\n\n", sc.Name, r.Backend)
	if sc.Description != "" {
		fmt.Fprintf(w, "%s\n\n", sc.Description)
	}
	fmt.Fprintf(w, "Setup: %s. Scenario file: `%s`. Measured %s on %s (%d CPUs) with %s.\n\n",
		sc.Summary(), scenarioPath, r.Started.Format("2006-01-02"), r.Machine.Hostname, r.Machine.CPUs, versionOf(r.Features.Version))
	if r.Command != "" {
		fmt.Fprintf(w, "Command: `%s`\n\n", r.Command)
	}
	for i, row := range r.churnTableRows() {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		if i == 0 {
			fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(row)))
		}
	}
	fmt.Fprintln(w)
	r.churnLines(func(s string) { fmt.Fprintf(w, "- %s\n", strings.TrimSpace(s)) })
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	fmt.Fprintln(w)
	return nil
}

// writeChurnHTML is WriteHTML for a churn report: the table, the aims,
// the NAT mix, latency and origin bytes against the rate, and the pool.
func (r *Report) writeChurnHTML(w io.Writer) error {
	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>%s</title>\n<style>\n"+
		"body{font:15px/1.45 system-ui,sans-serif;color:#222;max-width:1020px;margin:24px auto;padding:0 16px}\n"+
		"table{border-collapse:collapse;font-size:13px}th,td{padding:4px 7px;border-bottom:1px solid #e3e3e3;text-align:right}"+
		"td:first-child,th:first-child{text-align:left}.bad{color:#b00020}pre{background:#f7f7f7;padding:8px}"+
		"svg{display:block;max-width:100%%;height:auto}figcaption{font-size:13px;color:#555}\n</style></head><body>\n",
		esc(r.Heading()))
	fmt.Fprintf(&b, "<h1>%s</h1>\n<p>%s</p>\n", esc(r.Heading()), esc(r.Scenario.Summary()))
	b.WriteString("<h2>Summary</h2>\n<table>\n")
	for i, row := range r.churnTableRows() {
		tag := "td"
		if i == 0 {
			tag = "th"
		}
		b.WriteString("<tr>")
		for _, c := range row {
			fmt.Fprintf(&b, "<%s>%s</%s>", tag, esc(c), tag)
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n<ul>\n")
	r.churnLines(func(s string) { fmt.Fprintf(&b, "<li>%s</li>\n", esc(strings.TrimSpace(s))) })
	b.WriteString("</ul>\n<h2>Latency</h2>\n")
	lat := &plot{Title: "Latency against the arrival rate", XLabel: "arrivals per second", YLabel: "seconds"}
	ob := &plot{Title: "Origin bytes per arrival", XLabel: "arrivals per second", YLabel: "copies of the object"}
	pool := &plot{Title: "Unfinished peers", XLabel: "time (s)", YLabel: "peers"}
	for _, s := range r.Systems {
		var mean, p99, cop []Point
		for _, f := range s.Rates {
			mean = append(mean, Point{T: f.Rate, V: f.Mean})
			p99 = append(p99, Point{T: f.Rate, V: f.P99})
			cop = append(cop, Point{T: f.Rate, V: f.OriginBytesPerArrival / float64(r.Scenario.Size)})
		}
		lat.Lines = append(lat.Lines, plotLine{Name: s.Label + " mean", Color: colorOf(s.System), Pts: mean, Width: 2},
			plotLine{Name: s.Label + " p99", Color: colorOf(s.System), Pts: p99, Width: 1, Opacity: 0.5})
		ob.Lines = append(ob.Lines, plotLine{Name: s.Label, Color: colorOf(s.System), Pts: cop, Width: 2})
		pool.Lines = append(pool.Lines, plotLine{Name: s.Label, Color: colorOf(s.System), Pts: s.Pool, Width: 1.5, Step: true})
	}
	b.WriteString(lat.svg())
	b.WriteString("<figcaption>Mean (thick) and p99 (thin) latency from an arrival to its verified object, per rate (median of the runs).</figcaption>\n")
	b.WriteString(ob.svg())
	b.WriteString("<figcaption>What the origin's namespace sent per arrival, in copies of the object (tracker answers included).</figcaption>\n")
	b.WriteString(pool.svg())
	b.WriteString("<figcaption>The pool of arrived, unfinished peers over the first run, the rates one after the other.</figcaption>\n")
	b.WriteString("<h2>Notes</h2>\n<ul>\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "<li>%s</li>\n", esc(n))
	}
	b.WriteString("</ul>\n<h2>Setup</h2>\n")
	fmt.Fprintf(&b, "<p>Measured %s to %s on %s (%d CPUs, %s); stampede binary %s (%s).</p>\n",
		esc(r.Started.Format("2006-01-02 15:04:05Z")), esc(r.Finished.Format("15:04:05Z")), esc(r.Machine.Hostname),
		r.Machine.CPUs, esc(r.Machine.OS), esc(r.Bin), esc(r.Features.Version))
	if r.Command != "" {
		fmt.Fprintf(&b, "<p>Command: <code>%s</code></p>\n", esc(r.Command))
	}
	if r.Scenario.Source != "" {
		fmt.Fprintf(&b, "<pre>%s</pre>\n", esc(r.Scenario.Source))
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// poolSeries is the number of arrived, unfinished peers every step
// seconds from from to end, given each peer's arrival and completion
// (negative: never).
func poolSeries(arrive, done []float64, end, step, from float64) []Point {
	var out []Point
	for t := from; t <= end+step/2; t += step {
		n := 0
		for i, a := range arrive {
			if a <= t && (done[i] < 0 || done[i] > t) {
				n++
			}
		}
		out = append(out, Point{T: math.Round(t*1000) / 1000, V: float64(n)})
	}
	return out
}

// poolStable runs Flashback's stability test (poolWatch) on the pool
// samples of a rate's arrivals, from from for d, and returns the largest
// pool then and whether it had stabilized by their end.
func poolStable(series []Point, from float64, d time.Duration) (maxPool int, stable bool) {
	w := poolWatch{window: min(d/3, 10*time.Second)}
	for _, p := range series {
		if p.T > from+d.Seconds()+1e-9 {
			break
		}
		maxPool = max(maxPool, int(p.V))
		stable = w.Observe(time.Duration((p.T-from)*float64(time.Second)), int(p.V))
	}
	return maxPool, stable
}

// cpuTimes is the machine's CPU time from /proc/stat, in ticks.
type cpuTimes struct{ idle, total uint64 }

func readCPU() cpuTimes {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	var c cpuTimes
	for i, v := range f[min(1, len(f)):] {
		n, _ := strconv.ParseUint(v, 10, 64)
		if i >= 8 { // guest time is counted in user already
			break
		}
		c.total += n
		if i == 3 || i == 4 { // idle, iowait
			c.idle += n
		}
	}
	return c
}

// busySince is the share of CPU time not idle between c0 and c.
func (c cpuTimes) busySince(c0 cpuTimes) float64 {
	if c.total <= c0.total {
		return 0
	}
	return 1 - float64(c.idle-c0.idle)/float64(c.total-c0.total)
}
