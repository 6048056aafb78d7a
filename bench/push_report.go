package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// PushRunFigures are a push-mode run's figures (RunResult.Push). Copies and
// loads are bytes on the wire, from the links' tc counters.
type PushRunFigures struct {
	// The hosts' completion times, in seconds from the transfer's start:
	// the median host, the last, and the last over the median.
	MedianSeconds     float64 `json:"median_seconds"`
	LastSeconds       float64 `json:"last_seconds"`
	SlowestOverMedian float64 `json:"slowest_over_median"`
	// OriginCopies is what crossed the origin's link, in copies of the
	// file.
	OriginCopies float64 `json:"origin_copies"`
	// RackInCopies is the most bytes into one rack over its uplink, in
	// copies of the file; DCInCopies the same for a datacenter's link.
	RackInCopies float64 `json:"rack_in_copies"`
	DCInCopies   float64 `json:"dc_in_copies,omitempty"`
	// LinkMaxOverBudget is the highest 1 s load of any shared link (a rack
	// uplink or a datacenter link, either way) over its capacity less the
	// reserve.
	LinkMaxOverBudget float64 `json:"link_max_over_budget"`
	// BoundSeconds is the topology bound (PushBound), LastOverBound the
	// last host's time over it.
	BoundSeconds  float64 `json:"bound_seconds"`
	LastOverBound float64 `json:"last_over_bound"`
	// CPUSeconds is the CPU time the system's processes used (daemons,
	// clients, servers; not the harness): on a busy machine, the system
	// that needs more of it is slowed down more.
	CPUSeconds float64 `json:"cpu_seconds"`
	// Links are the shared links one by one.
	Links []PushLinkLoad `json:"links"`
}

// PushSystemFigures are a push system's figures over its runs
// (SystemResult.Push): the median, least and largest of each.
type PushSystemFigures struct {
	MedianSeconds     Range   `json:"median_seconds"`
	LastSeconds       Range   `json:"last_seconds"`
	SlowestOverMedian Range   `json:"slowest_over_median"`
	OriginCopies      Range   `json:"origin_copies"`
	RackInCopies      Range   `json:"rack_in_copies"`
	DCInCopies        Range   `json:"dc_in_copies"`
	LinkMaxOverBudget Range   `json:"link_max_over_budget"`
	LastOverBound     Range   `json:"last_over_bound"`
	CPUSeconds        Range   `json:"cpu_seconds"`
	BoundSeconds      float64 `json:"bound_seconds"`
}

// PushReport is what a push-mode report has besides the systems (Report.Push).
type PushReport struct {
	// BoundSeconds is the topology bound on the last host (PushBound).
	BoundSeconds float64 `json:"bound_seconds"`
	// Links are the links watched, with their capacities and budgets.
	Links []PushLink `json:"links"`
	// Aims are issue 31's aims, held against stampede push's medians.
	Aims []PushAim `json:"aims,omitempty"`
}

// PushAim is one aim of issue 31 and how the push fared against it.
type PushAim struct {
	Aim   string  `json:"aim"`
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	Met   bool    `json:"met"`
}

// summarizePush sets the systems' push figures and the aims.
func (r *Report) summarizePush() {
	if r.Push == nil {
		return
	}
	for _, s := range r.Systems {
		var f [9][]float64
		for _, run := range s.Runs {
			p := run.Push
			if p == nil {
				continue
			}
			for i, v := range []float64{p.MedianSeconds, p.LastSeconds, p.SlowestOverMedian, p.OriginCopies,
				p.RackInCopies, p.DCInCopies, p.LinkMaxOverBudget, p.LastOverBound, p.CPUSeconds} {
				f[i] = append(f[i], v)
			}
		}
		if len(f[0]) == 0 {
			continue
		}
		s.Push = &PushSystemFigures{MedianSeconds: rangeOf(f[0]), LastSeconds: rangeOf(f[1]), SlowestOverMedian: rangeOf(f[2]),
			OriginCopies: rangeOf(f[3]), RackInCopies: rangeOf(f[4]), DCInCopies: rangeOf(f[5]), LinkMaxOverBudget: rangeOf(f[6]),
			LastOverBound: rangeOf(f[7]), CPUSeconds: rangeOf(f[8]), BoundSeconds: r.Push.BoundSeconds}
	}
	r.Push.Aims = r.pushAims()
}

// pushSystem is the system named, if it has figures.
func (r *Report) pushSystem(name string) *SystemResult {
	i := slices.IndexFunc(r.Systems, func(s *SystemResult) bool { return s.System == name && s.Push != nil })
	if i < 0 {
		return nil
	}
	return r.Systems[i]
}

// pushAims holds stampede push's medians against issue 31's aims; a
// comparison with a baseline needs that baseline in the report.
func (r *Report) pushAims() []PushAim {
	p := r.pushSystem(SysPush)
	if p == nil {
		return nil
	}
	f := p.Push
	aims := []PushAim{
		{Aim: "origin bytes ≤ 1.10 copies", Value: f.OriginCopies.Median, Limit: 1.10},
		{Aim: "bytes into each rack over its uplink ≤ 1.2 copies", Value: f.RackInCopies.Median, Limit: 1.2},
		{Aim: "no shared link above its capacity less the reserve in any 1 s window", Value: f.LinkMaxOverBudget.Median, Limit: 1},
		{Aim: "slowest host ≤ 1.3 × the median host", Value: f.SlowestOverMedian.Median, Limit: 1.3},
		{Aim: "last host ≤ 1.2 × the topology bound", Value: f.LastOverBound.Median, Limit: 1.2},
	}
	for _, base := range []struct{ sys, name string }{{SysAria2, "aria2's"}, {SysTree, "the tree's"}} {
		if s := r.pushSystem(base.sys); s != nil && s.Push.LastSeconds.Median > 0 {
			aims = append(aims, PushAim{Aim: "last host ≤ 0.6 × " + base.name,
				Value: f.LastSeconds.Median / s.Push.LastSeconds.Median, Limit: 0.6})
		}
	}
	for i := range aims {
		aims[i].Met = aims[i].Value <= aims[i].Limit && p.Complete
	}
	return aims
}

// pushColumns are the push table's columns and what each means.
var pushColumns = []struct{ name, help string }{
	{"system", "How the hosts got the file:"},
	{"runs", "How many times the push was run with this system. With more than one, each figure is the median over the runs " +
		"(the range is under it)."},
	{"hosts done", "Hosts that ended with the whole file, checked against its SHA-256, out of all of them."},
	{"median host", "The median host's completion time, from the transfer's start."},
	{"last host", "The last host's completion time: how long the whole push took."},
	{"slowest/median", "The last host's time over the median host's."},
	{"last/bound", "The last host's time over the topology bound: the least time a push within every link's budget can take."},
	{"origin copies", "What crossed the origin's link, in copies of the file, on the wire (tc counts headers too: about 1.05 per copy)."},
	{"rack_in_copies", "The most bytes that came into one rack over its uplink, in copies of the file, on the wire."},
	{"link_max_over_budget", "The highest load of any shared link (a rack uplink or a datacenter link, either way) over any 1 s window, " +
		"over its capacity less the reserve: above 1, the push took part of the reserve left to the applications."},
	{"CPU", "The CPU time the system's processes used, in all hosts (not the harness's): on a busy machine the system " +
		"that needs more is slowed down more."},
}

// pushTableRows are the cells of the push summary table.
func (r *Report) pushTableRows() [][]string {
	multi := r.multiRep()
	var header []string
	for _, c := range pushColumns {
		header = append(header, c.name)
	}
	rows := [][]string{header}
	for _, s := range r.Systems {
		f := s.Push
		if f == nil {
			row := []string{s.Label, "0"}
			for len(row) < len(header) {
				row = append(row, "-")
			}
			rows = append(rows, row)
			continue
		}
		done, total := 0, 0
		for _, run := range s.Runs {
			done += run.Finished
			total += run.Arrived
		}
		cell := func(x Range, format string) string {
			if math.IsNaN(x.Median) {
				return "-"
			}
			c := fmt.Sprintf(format, x.Median)
			if multi && len(s.Runs) > 1 {
				c += fmt.Sprintf(" ("+format+"-"+format+")", x.Min, x.Max)
			}
			return c
		}
		cpu := "-" // reports made before CPU time was counted
		if f.CPUSeconds.Max > 0 {
			cpu = cell(f.CPUSeconds, "%.1f s")
		}
		rows = append(rows, []string{s.Label, fmt.Sprint(len(s.Runs)), fmt.Sprintf("%d/%d", done, total),
			cell(f.MedianSeconds, "%.1f s"), cell(f.LastSeconds, "%.1f s"), cell(f.SlowestOverMedian, "%.2f"),
			cell(f.LastOverBound, "%.2f"), cell(f.OriginCopies, "%.2f"), cell(f.RackInCopies, "%.2f"),
			cell(f.LinkMaxOverBudget, "%.2f"), cpu})
	}
	return rows
}

// pushBoundLine words the topology bound.
func (r *Report) pushBoundLine() string {
	return fmt.Sprintf("topology bound on the last host: %s (each rack takes a copy in over its uplink's budget, each host over "+
		"its link's, the origin sends one; docs/benchmarks.md, \"Cluster push\")", secs(r.Push.BoundSeconds))
}

// pushAimLines are the aims, one line each.
func (r *Report) pushAimLines() []string {
	var out []string
	for _, a := range r.Push.Aims {
		mark := "met"
		if !a.Met {
			mark = "MISSED"
		}
		out = append(out, fmt.Sprintf("%s: %.2f (%s)", a.Aim, a.Value, mark))
	}
	return out
}

// writePushTable is WriteTable for a push report.
func (r *Report) writePushTable(w io.Writer) error {
	fmt.Fprintf(w, "%s: %s\n%s\n\n", r.Title(), r.Scenario.Summary(), r.pushBoundLine())
	writeAligned(w, r.pushTableRows())
	if len(r.Push.Aims) > 0 {
		fmt.Fprintf(w, "\nissue 31's aims, stampede push's medians:\n")
		for _, l := range r.pushAimLines() {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	fmt.Fprintln(w)
	r.eachRunLine(func(s string) { fmt.Fprintf(w, "  %s\n", s) })
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// eachRunLine passes each run's notes, failed hosts and busiest links to
// fn, one line each.
func (r *Report) eachRunLine(fn func(string)) {
	for _, s := range r.Systems {
		for _, run := range s.Runs {
			for _, n := range run.Notes {
				fn(fmt.Sprintf("%s run %d: %s", s.Label, run.Rep, n))
			}
			for _, p := range run.Peers {
				if p.Error != "" {
					fn(fmt.Sprintf("%s run %d: host %s failed: %s", s.Label, run.Rep, p.Host, firstLine(p.Error, 300)))
				}
			}
			if run.Push != nil {
				fn(fmt.Sprintf("%s run %d: shared links, copies and peak load over budget: %s", s.Label, run.Rep, linkSummary(run.Push.Links)))
			}
		}
	}
}

// linkSummary words each link's copies and peak load.
func linkSummary(links []PushLinkLoad) string {
	var parts []string
	for _, l := range links {
		parts = append(parts, fmt.Sprintf("%s %.2f/%.2f", l.Link, l.Copies, l.MaxOverBudget))
	}
	return strings.Join(parts, ", ")
}

// writePushMarkdown is WriteMarkdown for a push report.
func (r *Report) writePushMarkdown(w io.Writer, scenarioPath string) error {
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
	fmt.Fprintf(w, "The %s.\n\n", r.pushBoundLine())
	for i, row := range r.pushTableRows() {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		if i == 0 {
			fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(row)))
		}
	}
	fmt.Fprintln(w)
	if len(r.Push.Aims) > 0 {
		fmt.Fprintf(w, "Issue 31's aims, stampede push's medians:\n\n")
		for _, l := range r.pushAimLines() {
			fmt.Fprintf(w, "- %s\n", l)
		}
		fmt.Fprintln(w)
	}
	r.eachRunLine(func(s string) { fmt.Fprintf(w, "- %s\n", s) })
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	fmt.Fprintln(w)
	return nil
}

// pushHTML is what report.html shows of a push report above its table:
// the bound and the aims.
func (r *Report) pushHTML() string {
	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, "<p>The %s.</p>\n", esc(r.pushBoundLine()))
	if len(r.Push.Aims) > 0 {
		b.WriteString("<div class=\"headline\"><p><b>Issue 31's aims, stampede push's medians</b></p>\n<table>\n")
		for _, a := range r.Push.Aims {
			mark := "met"
			if !a.Met {
				mark = `<span class="bad">missed</span>`
			}
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%.2f</td><td>%s</td></tr>\n", esc(a.Aim), a.Value, mark)
		}
		b.WriteString("</table></div>\n")
	}
	return b.String()
}

// pushHelpHTML is what the push table's columns mean.
func (r *Report) pushHelpHTML() string {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString("<h2>What the figures mean</h2>\n<dl class=\"help\">\n")
	for _, c := range pushColumns {
		fmt.Fprintf(&b, "<dt>%s</dt><dd>%s", esc(c.name), esc(c.help))
		if c.name == "system" {
			b.WriteString("<ul>")
			for _, s := range r.Systems {
				fmt.Fprintf(&b, "<li><b>%s</b>: %s</li>", esc(s.Label), esc(pushSystemHelp[s.System]))
			}
			b.WriteString("</ul>")
		}
		b.WriteString("</dd>\n")
	}
	b.WriteString("</dl>\n")
	return b.String()
}

// pushLinksHTML charts each system's shared links (the run shown): every
// link's load over its budget, averaged over 1 s, with a table of each
// link's copies and peak.
func (r *Report) pushLinksHTML() string {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString("<h2>Shared links</h2>\n")
	budget := map[string]float64{}
	for _, l := range r.Push.Links {
		budget[l.Name] = l.Budget
	}
	palette := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}
	for _, s := range r.Systems {
		if len(s.Runs) == 0 || s.Runs[s.Shown].Push == nil {
			continue
		}
		run := s.Runs[s.Shown]
		p := &plot{Title: "Shared links: " + s.Label, XLabel: "time (s)", YLabel: "load / budget", XMax: r.timeAxis(), H: 260}
		for i, l := range run.Push.Links {
			if budget[l.Link] <= 0 {
				continue
			}
			var pts []Point
			for _, pt := range rates(l.Bytes, 1) {
				pts = append(pts, Point{T: pt.T, V: pt.V / budget[l.Link]})
			}
			p.Lines = append(p.Lines, plotLine{Name: l.Link, Color: palette[i%len(palette)], Pts: pts, Width: 1.4})
		}
		p.HLines = append(p.HLines, marker{At: 1, Label: "budget", Color: "#000", Dash: "6,4"})
		b.WriteString(p.svg())
		fmt.Fprintf(&b, "<figcaption>%s, run %d: each shared link's load over its budget (capacity less reserve), "+
			"from its tc counter read every 0.5 s, averaged over 1 s.</figcaption>\n<table>\n"+
			"<tr><th>link</th><th>copies</th><th>peak 1 s load / budget</th></tr>\n", esc(s.Label), run.Rep)
		for _, l := range run.Push.Links {
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%.2f</td><td>%.2f</td></tr>\n", esc(l.Link), l.Copies, l.MaxOverBudget)
		}
		b.WriteString("</table>\n")
	}
	return b.String()
}
