package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stampede-dev/stampede/internal/units"
)

// Report is everything one bench invocation measured; report.json is its
// JSON form, report.html and the tables are made from it.
type Report struct {
	Scenario *Scenario `json:"scenario"`
	Backend  string    `json:"backend"`
	Command  string    `json:"command,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  Machine   `json:"machine"`
	Bin      string    `json:"bin"`
	Features Features  `json:"features"`
	// TKR and HTTPBound are the bounds for the whole crowd, in seconds.
	TKR       float64 `json:"tkr"`
	HTTPBound float64 `json:"http_bound"`
	// Budget is the scenario's origin's egress budget in copies of the
	// file per window (serve --max-copies; 0: none), TKRB the bound with
	// it (T_KR(B), the one stampede is held to) and MeanBound the least
	// mean completion with it, for a crowd that arrives at once and leaves
	// on completion (0 for other crowds); in seconds, set by summarize.
	Budget    float64         `json:"budget,omitempty"`
	TKRB      float64         `json:"tkr_b,omitempty"`
	MeanBound float64         `json:"mean_bound,omitempty"`
	Systems   []*SystemResult `json:"systems"`
	Notes     []string        `json:"notes"`
	// Demo marks the report of stampede demo (false: stampede bench's),
	// titled as the demo: its reader came to see stampede, not a benchmark.
	Demo bool `json:"demo,omitempty"`
	// Push is set for a scenario of mode = push (push_report.go).
	Push *PushReport `json:"push,omitempty"`
	// ChurnAims are issue 34's aims against stampede's figures, for a
	// scenario of mode = churn (churn_report.go).
	ChurnAims []PushAim `json:"churn_aims,omitempty"`
}

// churn says whether r is a report of mode = churn.
func (r *Report) churn() bool { return r.Scenario != nil && r.Scenario.Mode == ModeChurn }

// SystemResult is one system's runs and their figures over the runs
// (median, least, largest).
type SystemResult struct {
	System   string       `json:"system"`
	Label    string       `json:"label"`
	Runs     []*RunResult `json:"runs"`
	Complete bool         `json:"complete"` // every run delivered to every peer
	Mean     Range        `json:"mean"`
	P50      Range        `json:"p50"`
	P90      Range        `json:"p90"`
	Last     Range        `json:"last"`
	// OriginBytes and R (OriginBytes/F).
	OriginBytes  Range `json:"origin_bytes"`
	R            Range `json:"r"`
	LastOverTKR  Range `json:"last_over_tkr"`
	LastOverTKRR Range `json:"last_over_tkr_r"`
	// Shown is the run plotted in report.html: the one with the median
	// last completion.
	Shown int `json:"shown"`
	// Push: the figures of a push system (mode = push).
	Push *PushSystemFigures `json:"push,omitempty"`
	// Mode = churn (churn_report.go): the runs, the figures per rate
	// (medians over the runs), the first run's pool of unfinished peers
	// and the neighbours the stampede peers made, by class.
	ChurnRuns []*ChurnRun `json:"churn_runs,omitempty"`
	Rates     []ChurnRate `json:"rates,omitempty"`
	Pool      []Point     `json:"pool,omitempty"`
	NAT       []ChurnNAT  `json:"nat,omitempty"`
}

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (r *Report) summarize() {
	if r.Push == nil {
		r.budgetBounds()
	}
	for _, s := range r.Systems {
		var mean, p50, p90, last, ob, rr, lt, ltr []float64
		s.Complete = len(s.Runs) > 0
		for _, run := range s.Runs {
			s.Complete = s.Complete && run.Complete
			mean = append(mean, run.Completion.Mean)
			p50 = append(p50, run.Completion.P50)
			p90 = append(p90, run.Completion.P90)
			last = append(last, run.Last)
			ob = append(ob, float64(run.OriginBytes))
			rr = append(rr, run.R)
			lt = append(lt, run.LastOverTKR)
			ltr = append(ltr, run.LastOverTKRR)
		}
		s.Mean, s.P50, s.P90, s.Last = rangeOf(mean), rangeOf(p50), rangeOf(p90), rangeOf(last)
		s.OriginBytes, s.R, s.LastOverTKR, s.LastOverTKRR = rangeOf(ob), rangeOf(rr), rangeOf(lt), rangeOf(ltr)
		// The run whose last completion is the median (the lower middle
		// one for an even count).
		idx := make([]int, len(s.Runs))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			return compareFloat(s.Runs[a].Last, s.Runs[b].Last)
		})
		if len(idx) > 0 {
			s.Shown = idx[(len(idx)-1)/2]
		}
	}
}

// budgetBounds sets the bounds that take the origin's egress budget into
// account, from the scenario's serve_args.
func (r *Report) budgetBounds() {
	if r.Scenario == nil {
		return
	}
	b, err := BudgetOf(r.Scenario)
	if err != nil {
		r.note("no bounds with the origin's budget: %v", err)
		return
	}
	c := CrowdOf(r.Scenario)
	r.Budget, r.TKRB, r.MeanBound = 0, c.TKRB(b), 0
	if !math.IsInf(b, 1) {
		r.Budget = b
	}
	if r.Scenario.Arrivals.Kind == ArriveAll && r.Scenario.Departure.Linger == 0 {
		r.MeanBound = c.MeanBound(b)
	}
}

// budgetLine words the bounds with the origin's budget, "" when the
// report has none (one written before they were).
func (r *Report) budgetLine() string {
	if r.TKRB == 0 {
		return ""
	}
	s := fmt.Sprintf("with the origin's budget of B = %s %s a window (serve --max-copies), T_KR(B) = %s",
		formatFloat(r.Budget), copies(r.Budget), secs(r.TKRB))
	if r.Budget == 0 {
		s = fmt.Sprintf("with no origin budget (serve --max-copies off), T_KR(B) = T_KR = %s", secs(r.TKRB))
	}
	if r.MeanBound > 0 {
		s += fmt.Sprintf(" and the mean completion is at least %s (peers arriving at once and leaving when done)", secs(r.MeanBound))
	}
	return s
}

// copies is "copy" or "copies", as b asks.
func copies(b float64) string {
	if b == 1 {
		return "copy"
	}
	return "copies"
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(r)
}

// ReadReport reads a report written by WriteJSON.
func ReadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Title is the report's heading: the scenario and the backend.
func (r *Report) Title() string {
	return fmt.Sprintf("%s on %s", r.Scenario.Name, r.Backend)
}

// Heading is report.html's title: the demo's, or the benchmark's
// scenario and backend.
func (r *Report) Heading() string {
	if r.Demo {
		return fmt.Sprintf("stampede demo: a flash crowd of %d peers on %s", r.Scenario.Peers(), r.Backend)
	}
	return "stampede bench: " + r.Title()
}

func (r *Report) multiRep() bool {
	for _, s := range r.Systems {
		if len(s.Runs) > 1 {
			return true
		}
	}
	return false
}

// tableRows are the cells of the summary table: a header and one row per
// system. With several runs, each time is the median over them and the last
// completion also shows its range.
func (r *Report) tableRows() [][]string {
	if r.Push != nil {
		return r.pushTableRows()
	}
	if r.churn() {
		return r.churnTableRows()
	}
	multi := r.multiRep()
	var header []string
	for _, c := range columns {
		header = append(header, c.name)
	}
	rows := [][]string{header}
	for _, s := range r.Systems {
		if len(s.Runs) == 0 {
			row := []string{s.Label, "0"}
			for len(row) < len(rows[0]) {
				row = append(row, "-")
			}
			rows = append(rows, row)
			continue
		}
		done, total := 0, 0
		for _, run := range s.Runs {
			done += run.Finished
			total += run.Arrived - run.Killed
		}
		last := secs(s.Last.Median)
		if multi && len(s.Runs) > 1 {
			last = fmt.Sprintf("%s (%s-%s)", last, secs(s.Last.Min), secs(s.Last.Max))
		}
		ratio := func(x Range) string {
			if math.IsNaN(x.Median) || x.Median == 0 {
				return "-"
			}
			if multi && len(s.Runs) > 1 {
				return fmt.Sprintf("%.2f (%.2f-%.2f)", x.Median, x.Min, x.Max)
			}
			return fmt.Sprintf("%.2f", x.Median)
		}
		rows = append(rows, []string{s.Label, fmt.Sprint(len(s.Runs)), fmt.Sprintf("%d/%d", done, total),
			secs(s.Mean.Median), secs(s.P50.Median), secs(s.P90.Median), last,
			units.Bytes(int64(s.OriginBytes.Median)), fmt.Sprintf("%.2f", s.R.Median),
			ratio(s.LastOverTKR), ratio(s.LastOverTKRR)})
	}
	return rows
}

func secs(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	return fmt.Sprintf("%.1f s", s)
}

// WriteTable prints the summary for a terminal: the setup, the bounds, the
// table, the headline and the notes.
func (r *Report) WriteTable(w io.Writer) error {
	if r.Push != nil {
		return r.writePushTable(w)
	}
	if r.churn() {
		return r.writeChurnTable(w)
	}
	fmt.Fprintf(w, "%s: %s\n", r.Title(), r.Scenario.Summary())
	fmt.Fprintf(w, "bounds: T_KR %s, HTTP %s (T_KR(R) per system, R = origin bytes / file size)\n",
		secs(r.TKR), secs(r.HTTPBound))
	if l := r.budgetLine(); l != "" {
		fmt.Fprintf(w, "  %s\n", l)
	}
	fmt.Fprintln(w)
	writeAligned(w, r.tableRows())
	if h, ok := r.Headline(); ok {
		fmt.Fprintln(w)
		h.write(w)
		fmt.Fprintln(w)
	}
	for _, s := range r.Systems {
		for _, run := range s.Runs {
			for _, n := range run.Notes {
				fmt.Fprintf(w, "  %s run %d: %s\n", s.Label, run.Rep, n)
			}
			for _, p := range run.Peers {
				if p.Error != "" {
					fmt.Fprintf(w, "  %s run %d: peer %d failed: %s\n", s.Label, run.Rep, p.ID, firstLine(p.Error, 300))
				}
			}
		}
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func firstLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " | ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// WriteMarkdown writes the report as a docs/benchmarks.md section: the
// setup, the command, the table and the notes.
func (r *Report) WriteMarkdown(w io.Writer, scenarioPath string) error {
	if r.Push != nil {
		return r.writePushMarkdown(w, scenarioPath)
	}
	if r.churn() {
		return r.writeChurnMarkdown(w, scenarioPath)
	}
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
	fmt.Fprintf(w, "Bounds: T_KR = %s; plain HTTP needs at least %s", secs(r.TKR), secs(r.HTTPBound))
	if l := r.budgetLine(); l != "" {
		fmt.Fprintf(w, "; %s", l)
	}
	fmt.Fprint(w, ".\n\n")
	for i, row := range r.tableRows() {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		if i == 0 {
			fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(row)))
		}
	}
	fmt.Fprintln(w)
	for _, s := range r.Systems {
		for _, run := range s.Runs {
			for _, n := range run.Notes {
				fmt.Fprintf(w, "- %s, run %d: %s\n", s.Label, run.Rep, n)
			}
			for _, p := range run.Peers {
				if p.Error != "" {
					fmt.Fprintf(w, "- %s, run %d: peer %d failed: %s\n", s.Label, run.Rep, p.ID, firstLine(p.Error, 300))
				}
			}
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	fmt.Fprintln(w)
	return nil
}

// Markers delimit the generated part of docs/benchmarks.md; inside it,
// each scenario's section has markers of its own, so that a run of some
// scenarios (say, without root for the netns ones) keeps the others.
const (
	MarkBegin = "<!-- bench:begin (generated by stampede bench --doc; edit the scenarios, not this) -->"
	MarkEnd   = "<!-- bench:end -->"
)

func scenarioMarks(name string) (begin, end string) {
	return "<!-- bench:scenario " + name + " -->", "<!-- bench:/scenario " + name + " -->"
}

// SpliceMarkdown puts section, the markdown of scenario name, into the
// generated part of doc: in place of that scenario's previous section, or
// at the end of the generated part. A doc without a generated part gets
// intro and one appended. Everything outside the markers is kept as is.
func SpliceMarkdown(doc, intro, name, section string) (string, error) {
	const beginPrefix = "<!-- bench:begin"
	i := strings.Index(doc, beginPrefix)
	if i < 0 {
		if strings.Contains(doc, MarkEnd) {
			return "", fmt.Errorf("%q without a begin marker", MarkEnd)
		}
		doc = strings.TrimRight(doc, "\n") + "\n\n" + intro + MarkBegin + "\n" + MarkEnd + "\n"
		i = strings.Index(doc, beginPrefix)
	}
	j := strings.Index(doc[i:], MarkEnd)
	if j < 0 {
		return "", fmt.Errorf("begin marker without %q", MarkEnd)
	}
	j += i
	sb, se := scenarioMarks(name)
	block := sb + "\n" + strings.TrimRight(section, "\n") + "\n" + se + "\n"
	if k := strings.Index(doc[i:j], sb); k >= 0 {
		k += i
		l := strings.Index(doc[k:j], se)
		if l < 0 {
			return "", fmt.Errorf("%q without %q", sb, se)
		}
		l += k + len(se)
		if l < len(doc) && doc[l] == '\n' {
			l++
		}
		return doc[:k] + block + doc[l:], nil
	}
	return doc[:j] + block + doc[j:], nil
}

// writeAligned prints rows as columns: the first left-aligned, the others
// right-aligned, two spaces apart.
func writeAligned(w io.Writer, rows [][]string) {
	var width []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

// versionOf names the binary measured: "stampede v0.1-3-gabc" as
// "stampede version v0.1-3-gabc".
func versionOf(v string) string {
	v = strings.TrimSpace(strings.TrimPrefix(v, "stampede "))
	if v == "" {
		v = "unknown"
	}
	return "stampede version " + v
}
