package bench

import (
	"fmt"
	"hash/fnv"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/stampede-dev/stampede/internal/units"
)

// report.html is one self-contained page: inline CSS and SVG, no scripts,
// no external assets, readable offline and printable.

var systemColors = map[string]string{
	SysStampede: "#d62728", SysHTTP: "#1f77b4", SysCurl: "#17becf", SysAria2: "#2ca02c", SysNginx: "#9467bd",
	SysPush: "#d62728", SysTree: "#ff7f0e",
}

func colorOf(system string) string {
	if c, ok := systemColors[system]; ok {
		return c
	}
	return "#7f7f7f"
}

// WriteHTML writes report.html.
func (r *Report) WriteHTML(w io.Writer) error {
	if r.churn() {
		return r.writeChurnHTML(w)
	}
	var b strings.Builder
	esc := html.EscapeString
	sc := r.Scenario
	fmt.Fprintf(&b, `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%s</title>
<style>
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;max-width:1020px;margin:24px auto;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:3px}
.sub{color:#555;margin:0 0 14px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{padding:4px 7px;border-bottom:1px solid #e3e3e3;text-align:right;white-space:nowrap}
th{background:#f5f5f5;font-weight:600;white-space:normal;vertical-align:bottom}td:first-child,th:first-child{text-align:left}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:6px;vertical-align:-1px}
figure{margin:14px 0}figcaption{font-size:13px;color:#555;margin-top:2px}
svg{display:block;max-width:100%%;height:auto}
ul.notes{font-size:13.5px;color:#333;padding-left:20px}
pre{background:#f7f7f7;padding:8px 10px;font-size:12.5px;overflow:auto}
details{margin:8px 0}summary{cursor:pointer;font-weight:600}
.rng{color:#666;font-size:12px}.rng.bad,.bad{color:#b00020}
.wide{overflow-x:auto}
.headline{font-size:17px;background:#f4f8f4;border-left:4px solid #2ca02c;padding:8px 14px;margin:14px 0}
.headline p{margin:4px 0}.headline table{font-size:14px}
dl.help dt{font-weight:600;margin-top:6px}dl.help dd{margin:0 0 0 18px}dl.help ul{margin:2px 0;padding-left:20px}
</style></head><body>
`, esc(r.Heading()))
	fmt.Fprintf(&b, "<h1>%s</h1>\n<p class=\"sub\">%s</p>\n", esc(r.Heading()), esc(sc.Summary()))
	if sc.Description != "" {
		fmt.Fprintf(&b, "<p>%s</p>\n", esc(sc.Description))
	}
	if h, ok := r.Headline(); ok {
		b.WriteString(h.html())
	}
	if r.Push != nil {
		b.WriteString(r.pushHTML())
	} else {
		fmt.Fprintf(&b, "<p>Bounds (fluid model): <b>T<sub>KR</sub> = %s</b>, the least time any system could take with these caps; "+
			"plain HTTP needs at least <b>%s</b>. They are explained under the table.</p>\n",
			esc(secs(r.TKR)), esc(secs(r.HTTPBound)))
	}
	if r.TKRB > 0 {
		b.WriteString(r.budgetHTML())
	}

	b.WriteString("<h2>Summary</h2>\n<div class=\"wide\"><table>\n")
	for i, row := range r.tableRows() {
		tag := "td"
		if i == 0 {
			tag = "th"
		}
		b.WriteString("<tr>")
		for j, cell := range row {
			c := esc(cell)
			if v, rng, ok := strings.Cut(c, " ("); ok && i > 0 && j > 0 {
				c = v + `<br><span class="rng">(` + rng + `</span>` // a range over runs, under the median
			}
			if i > 0 && j == 0 {
				s := r.Systems[i-1]
				c = fmt.Sprintf(`<span class="sw" style="background:%s"></span>%s`, colorOf(s.System), c)
				if !s.Complete {
					c += `<br><span class="bad rng">incomplete: see the notes</span>`
				}
			}
			fmt.Fprintf(&b, "<%s>%s</%s>", tag, c, tag)
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table></div>\n")
	if r.Push != nil {
		b.WriteString(r.pushHelpHTML())
	} else {
		b.WriteString(r.helpHTML())
	}

	b.WriteString("<h2>Completion</h2>\n")
	b.WriteString(r.cdfPlot().svg())
	if r.Push != nil {
		b.WriteString("<figcaption>Fraction of the hosts done against their completion time, per system. Dashed: the topology bound.</figcaption>\n")
	} else {
		b.WriteString("<figcaption>Fraction of the peers done against their completion time, per system. Dashed: T<sub>KR</sub> (black) and the HTTP bound (grey); dotted: T<sub>KR</sub>(B) (black) and T<sub>KR</sub>(R) of each system where they exceed T<sub>KR</sub>.</figcaption>\n")
	}

	b.WriteString("<h2>Origin</h2>\n")
	b.WriteString(r.originRatePlot().svg())
	b.WriteString("<figcaption>The origin's egress (Mbit/s, averaged over 1 s, or 0.5 s for runs under 20 s), from its byte counter polled every 0.5 s. Dashed: its cap; dotted: when each system's last peer was done.</figcaption>\n")
	b.WriteString(r.originCopiesPlot().svg())
	b.WriteString("<figcaption>The origin's bytes so far, in copies of the file (R at the end).</figcaption>\n")
	if p := r.cpuPlot(); p != nil {
		b.WriteString("<h2>Machine</h2>\n")
		b.WriteString(p.svg())
		b.WriteString("<figcaption>The share of the machine's CPU time that was busy in each half second (/proc/stat: all but idle and iowait), during each system's run. Every emulated host shares these CPUs: above the dotted line they were saturated, and may have set the pace as much as the links did.</figcaption>\n")
	}

	if r.Push != nil {
		b.WriteString(r.pushLinksHTML())
		b.WriteString("<h2>Hosts</h2>\n")
	} else {
		b.WriteString("<h2>Peers</h2>\n")
		b.WriteString(r.peerUploadPlot().svg())
		b.WriteString("<figcaption>What the peers uploaded to each other (Mbit/s, over 1 s, or 0.5 s for runs under 20 s), as the peers count it (stampede get reports its bytes sent to peers every 0.5 s). Systems marked derived have clients that do not count it (aria2c, curl): their curve is the peers' verified bytes minus the origin's bytes, per interval, which lags and catches up in bursts, so it is clipped at the peers' total upload cap (dashed).</figcaption>\n")
	}
	for _, s := range r.Systems {
		if len(s.Runs) == 0 {
			continue
		}
		b.WriteString(r.progressPlot(s).svg())
		fmt.Fprintf(&b, "<figcaption>%s, run %d: each line is one peer's download progress. These charts share their time axis.</figcaption>\n",
			esc(s.Label), s.Runs[s.Shown].Rep)
	}

	if len(r.Notes) > 0 || r.hasRunNotes() {
		b.WriteString("<h2>Notes</h2>\n<ul class=\"notes\">\n")
		for _, s := range r.Systems {
			for _, run := range s.Runs {
				for _, n := range run.Notes {
					fmt.Fprintf(&b, "<li>%s, run %d: %s</li>\n", esc(s.Label), run.Rep, esc(n))
				}
			}
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "<li>%s</li>\n", esc(n))
		}
		b.WriteString("</ul>\n")
	}

	b.WriteString("<h2>Peers, run by run</h2>\n")
	for _, s := range r.Systems {
		for _, run := range s.Runs {
			fmt.Fprintf(&b, "<details><summary>%s, run %d: %d/%d finished, last %s, origin %s</summary>\n<table>\n",
				esc(s.Label), run.Rep, run.Finished, run.Arrived-run.Killed, esc(secs(run.Last)), esc(units.Bytes(run.OriginBytes)))
			b.WriteString("<tr><th>peer</th><th>class</th><th>state</th><th>start</th><th>whole file</th><th>done</th><th>seconds</th><th>uploaded</th><th>exit</th><th>error</th></tr>\n")
			for _, p := range run.Peers {
				state := esc(p.State)
				if p.Corrupting {
					state += ` <span class="bad">(corrupting)</span>`
				}
				up := "-"
				if run.PeerBytesCounted {
					up = units.Bytes(p.Uploaded)
				}
				fmt.Fprintf(&b, "<tr><td>%d</td><td>%s</td><td>%s</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%s</td><td>%d</td><td style=\"text-align:left;white-space:normal\">%s</td></tr>\n",
					p.ID, esc(p.Class), state, p.Start, p.Full, p.Done, p.Seconds, esc(up), p.Exit, esc(firstLine(p.Error, 400)))
			}
			b.WriteString("</table></details>\n")
		}
	}

	b.WriteString("<h2>Setup</h2>\n")
	fmt.Fprintf(&b, "<p>Backend %s; measured %s to %s on %s (%d CPUs, %s, %s); stampede binary %s (%s).</p>\n",
		esc(r.Backend), esc(r.Started.Format("2006-01-02 15:04:05Z")), esc(r.Finished.Format("15:04:05Z")),
		esc(r.Machine.Hostname), r.Machine.CPUs, esc(r.Machine.OS), esc(r.Machine.Go), esc(r.Bin), esc(r.Features.Version))
	if r.Command != "" {
		fmt.Fprintf(&b, "<p>Command: <code>%s</code></p>\n", esc(r.Command))
	}
	if sc.Source != "" {
		fmt.Fprintf(&b, "<p>Scenario file:</p>\n<pre>%s</pre>\n", esc(sc.Source))
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) hasRunNotes() bool {
	for _, s := range r.Systems {
		for _, run := range s.Runs {
			if len(run.Notes) > 0 {
				return true
			}
		}
	}
	return false
}

func (r *Report) cdfPlot() *plot {
	p := &plot{Title: "Completion times (CDF)", XLabel: "completion time (s)", YLabel: "fraction of peers done", YMax: 1}
	for _, s := range r.Systems {
		if len(s.Runs) == 0 {
			continue
		}
		run := s.Runs[s.Shown]
		var xs []float64
		for _, pr := range run.Peers {
			if pr.Finished {
				xs = append(xs, pr.Seconds)
			}
		}
		slices.Sort(xs)
		total := float64(max(run.Arrived-run.Killed, 1))
		pts := []Point{{T: 0, V: 0}}
		for i, x := range xs {
			pts = append(pts, Point{T: x, V: float64(i+1) / total})
		}
		p.Lines = append(p.Lines, plotLine{Name: s.Label, Color: colorOf(s.System), Pts: pts, Step: true, Width: 2.2})
		if run.TKRR > run.TKR*1.01 {
			p.VLines = append(p.VLines, marker{At: run.TKRR, Label: "T_KR(R)", Color: colorOf(s.System), Dash: "2,3"})
		}
	}
	if r.TKRB > r.TKR*1.01 {
		p.VLines = append(p.VLines, marker{At: r.TKRB, Label: "T_KR(B)", Color: "#000", Dash: "2,3"})
	}
	if r.Push != nil {
		p.VLines = append(p.VLines, marker{At: r.Push.BoundSeconds, Label: "bound", Color: "#000", Dash: "6,4"})
	} else {
		p.VLines = append(p.VLines, marker{At: r.TKR, Label: "T_KR", Color: "#000", Dash: "6,4"},
			marker{At: r.HTTPBound, Label: "HTTP bound", Color: "#888", Dash: "6,4"})
	}
	// Times an order of magnitude apart (a swarm and plain HTTP) share a
	// logarithmic axis, where both can be read.
	lo, hi := math.Inf(1), 0.0
	for _, l := range p.Lines {
		for _, pt := range l.Pts[1:] {
			lo, hi = min(lo, pt.T), max(hi, pt.T)
		}
	}
	for _, m := range p.VLines {
		lo, hi = min(lo, m.At), max(hi, m.At)
	}
	if lo > 0 && hi/lo > 8 {
		p.LogX = true
		p.XLabel = "completion time (s, logarithmic)"
	}
	return p
}

func (r *Report) originRatePlot() *plot {
	p := &plot{Title: "Origin egress", XLabel: "time (s)", YLabel: "Mbit/s", XMax: r.timeAxis(), VLines: r.doneMarkers()}
	for _, s := range r.Systems {
		if len(s.Runs) == 0 {
			continue
		}
		p.Lines = append(p.Lines, plotLine{Name: s.Label, Color: colorOf(s.System), Pts: mbits(rates(s.Runs[s.Shown].Origin, rateWindow(s))), Width: 1.8})
	}
	if r.Scenario.OriginUp > 0 {
		p.HLines = append(p.HLines, marker{At: float64(r.Scenario.OriginUp) * 8 / 1e6, Label: "cap", Color: "#888", Dash: "6,4"})
	}
	return p
}

func (r *Report) originCopiesPlot() *plot {
	p := &plot{Title: "Origin bytes so far", XLabel: "time (s)", YLabel: "copies of the file", XMax: r.timeAxis(), VLines: r.doneMarkers()}
	f := float64(r.Scenario.Size)
	for _, s := range r.Systems {
		if len(s.Runs) == 0 {
			continue
		}
		var pts []Point
		for _, pt := range s.Runs[s.Shown].Origin {
			pts = append(pts, Point{T: pt.T, V: pt.V / f})
		}
		p.Lines = append(p.Lines, plotLine{Name: s.Label, Color: colorOf(s.System), Pts: pts, Width: 1.8})
	}
	p.HLines = append(p.HLines, marker{At: 1, Label: "1 copy", Color: "#888", Dash: "2,3"})
	return p
}

// cpuPlot is the machine's busy share of CPU time during each system's
// shown run, in percent; nil when no run has samples (not Linux, or a
// report from before they were taken).
func (r *Report) cpuPlot() *plot {
	p := &plot{Title: "Machine CPU", XLabel: "time (s)", YLabel: "% busy", XMax: r.timeAxis(), YMax: 100, VLines: r.doneMarkers()}
	for _, s := range r.Systems {
		if len(s.Runs) == 0 || len(s.Runs[s.Shown].CPU) == 0 {
			continue
		}
		var pts []Point
		for _, pt := range s.Runs[s.Shown].CPU {
			pts = append(pts, Point{T: pt.T, V: 100 * pt.V})
		}
		p.Lines = append(p.Lines, plotLine{Name: s.Label, Color: colorOf(s.System), Pts: pts, Width: 1.8})
	}
	if len(p.Lines) == 0 {
		return nil
	}
	p.HLines = append(p.HLines, marker{At: 100 * saturatedShare, Label: "saturated", Color: "#888", Dash: "2,3"})
	return p
}

func (r *Report) peerUploadPlot() *plot {
	p := &plot{Title: "Peer upload", XLabel: "time (s)", YLabel: "Mbit/s", XMax: r.timeAxis(), VLines: r.doneMarkers()}
	for _, s := range r.Systems {
		if len(s.Runs) == 0 {
			continue
		}
		run := s.Runs[s.Shown]
		name := s.Label
		var pts []Point
		if run.PeerBytesCounted {
			pts = rates(run.Uploaded, rateWindow(s))
		} else {
			name += " (derived)"
			pts = peerUpload(run, rateWindow(s))
			if sum, ok := sumCapped(CrowdOf(r.Scenario).Up); ok {
				// Progress is reported every 0.5 s, so the derived rate
				// lags and catches up in bursts; the caps (checked by
				// the shaping tests) bound what really passed.
				for i := range pts {
					pts[i].V = min(pts[i].V, sum)
				}
			}
		}
		p.Lines = append(p.Lines, plotLine{Name: name, Color: colorOf(s.System), Pts: mbits(pts), Width: 1.8})
	}
	if sum, ok := sumCapped(CrowdOf(r.Scenario).Up); ok {
		p.HLines = append(p.HLines, marker{At: sum * 8 / 1e6, Label: "peers' cap", Color: "#888", Dash: "6,4"})
	}
	return p
}

// peerUpload derives the peers' upload rate from a run: the growth of the
// peers' verified bytes minus the origin's, per second over at least 1 s.
func peerUpload(run *RunResult, window float64) []Point {
	n := min(len(run.Origin), len(run.Done))
	cum := make([]Point, 0, n)
	for i := range n {
		cum = append(cum, Point{T: run.Origin[i].T, V: max(run.Done[i].V-run.Origin[i].V, 0)})
	}
	return rates(cum, window)
}

// rateWindow is the interval a system's rates are averaged over: a
// second, or half of one (the sampling period) when its run shown lasts
// under 20 s, so that a short run still has a shape.
func rateWindow(s *SystemResult) float64 {
	if shownEnd(s) < 20 {
		return 0.5
	}
	return 1
}

func (r *Report) progressPlot(s *SystemResult) *plot {
	run := s.Runs[s.Shown]
	p := &plot{Title: "Download progress: " + s.Label, XLabel: "time (s)", YLabel: "fraction of the file", YMax: 1, H: 230, XMax: r.timeAxis()}
	for _, pr := range run.Peers {
		if len(pr.Progress) == 0 {
			continue
		}
		var pts []Point
		for _, pt := range thin(pr.Progress, 300) {
			pts = append(pts, Point{T: pt.T, V: pt.V / float64(r.Scenario.Size)})
		}
		p.Lines = append(p.Lines, plotLine{Color: colorOf(s.System), Pts: pts, Width: 1, Opacity: 0.55})
	}
	if r.Push != nil {
		p.VLines = append(p.VLines, marker{At: r.Push.BoundSeconds, Label: "bound", Color: "#000", Dash: "6,4"})
	} else {
		p.VLines = append(p.VLines, marker{At: r.TKR, Label: "T_KR", Color: "#000", Dash: "6,4"})
	}
	return p
}

// shownEnd is when a system's plotted run ended (its last completion, or
// its last sample).
func shownEnd(s *SystemResult) float64 {
	run := s.Runs[s.Shown]
	t := run.Last
	if n := len(run.Origin); n > 0 {
		t = max(t, run.Origin[n-1].T)
	}
	return t
}

// timeAxis is where the charts over time end: the end of the longest run
// shown, so that every chart covers all of every system's run, and charts
// side by side compare at a glance (a swarm's seconds beside plain HTTP's
// minutes).
func (r *Report) timeAxis() float64 {
	t := 0.0
	for _, s := range r.Systems {
		if len(s.Runs) > 0 {
			t = max(t, shownEnd(s))
		}
	}
	return t
}

// doneMarkers mark when each system's last peer was done: a short run
// ends early on the shared time axis, and its lines stop there.
func (r *Report) doneMarkers() []marker {
	var ms []marker
	for _, s := range r.Systems {
		if len(s.Runs) > 0 && s.Runs[s.Shown].Finished > 0 {
			ms = append(ms, marker{At: s.Runs[s.Shown].Last, Label: "last peer done", Color: colorOf(s.System), Dash: "2,3"})
		}
	}
	return ms
}

// thin keeps about n of pts, evenly spaced, and always the last: a long run
// reports progress thousands of times, more than a chart can show.
func thin(pts []Point, n int) []Point {
	if len(pts) <= n {
		return pts
	}
	step := (len(pts) + n - 1) / n
	var out []Point
	for i := 0; i < len(pts); i += step {
		out = append(out, pts[i])
	}
	if out[len(out)-1] != pts[len(pts)-1] {
		out = append(out, pts[len(pts)-1])
	}
	return out
}

func mbits(pts []Point) []Point {
	out := make([]Point, len(pts))
	for i, p := range pts {
		out[i] = Point{T: p.T, V: p.V * 8 / 1e6}
	}
	return out
}

// plot is a line chart drawn as inline SVG.
type plot struct {
	Title, XLabel, YLabel string
	XMax, YMax            float64 // 0: from the data
	LogX                  bool    // a logarithmic time axis
	W, H                  int     // default 960 x 300
	Lines                 []plotLine
	VLines, HLines        []marker
}

type plotLine struct {
	Name    string // "" keeps it out of the legend
	Color   string
	Pts     []Point
	Step    bool // a step function (a CDF)
	Width   float64
	Opacity float64 // 0: opaque
}

type marker struct {
	At                 float64
	Label, Color, Dash string
}

func (p *plot) svg() string {
	w, h := p.W, p.H
	if w == 0 {
		w = 960
	}
	if h == 0 {
		h = 300
	}
	const ml, mr, mt, mb = 62, 24, 50, 44
	pw, ph := float64(w-ml-mr), float64(h-mt-mb)
	xmax, ymax := p.XMax, p.YMax
	xlo := math.Inf(1) // least positive time, for a logarithmic axis
	for _, l := range p.Lines {
		for _, pt := range l.Pts {
			if p.XMax == 0 {
				xmax = max(xmax, pt.T)
			}
			if pt.T > 0 {
				xlo = min(xlo, pt.T)
			}
			if p.YMax == 0 && (p.XMax == 0 || pt.T <= p.XMax) {
				ymax = max(ymax, pt.V) // what is off the chart does not set its scale
			}
		}
	}
	for _, m := range p.VLines {
		if m.At > 0 && (p.LogX || m.At < 4*max(xmax, 1)) { // a far-off bound would squash the data
			xmax = max(xmax, m.At)
			xlo = min(xlo, m.At)
		}
	}
	for _, m := range p.HLines {
		if p.YMax == 0 {
			ymax = max(ymax, m.At)
		}
	}
	xstep := niceStep(xmax)
	xmax = math.Max(xstep, math.Ceil(xmax*1.02/xstep)*xstep)
	var xticks []float64
	for t := 0.0; t <= xmax+xstep/2; t += xstep {
		xticks = append(xticks, t)
	}
	X := func(t float64) float64 { return float64(ml) + t/xmax*pw }
	if p.LogX && xlo > 0 && !math.IsInf(xlo, 1) {
		xticks = logTicks(xlo, xmax)
		lo, hi := math.Log10(xticks[0]), math.Log10(xticks[len(xticks)-1])
		xmax = xticks[len(xticks)-1]
		X = func(t float64) float64 {
			return float64(ml) + (math.Log10(max(t, xticks[0]))-lo)/(hi-lo)*pw
		}
	}
	ystep := niceStep(ymax)
	if p.YMax == 0 {
		ymax = math.Max(ystep, math.Ceil(ymax*1.05/ystep)*ystep)
	}
	Y := func(v float64) float64 { return float64(mt) + ph - v/ymax*ph }

	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, `<figure><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="system-ui,sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14" font-weight="600">%s</text>`+"\n", ml, esc(p.Title))
	// Legend, in a row under the title.
	lx := float64(ml)
	for _, l := range p.Lines {
		if l.Name == "" {
			continue
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="27" width="14" height="4" fill="%s"/><text x="%.1f" y="33">%s</text>`+"\n",
			lx, l.Color, lx+19, esc(l.Name))
		lx += 19 + 7.2*float64(len(l.Name)) + 22
	}
	// Grid and axes.
	for _, t := range xticks {
		x := X(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#eee"/>`, x, mt, x, float64(mt)+ph)
		label := tickLabel(t, xstep)
		if p.LogX {
			label = strconv.FormatFloat(t, 'g', 4, 64)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%s</text>`+"\n", x, float64(mt)+ph+16, label)
	}
	for v := 0.0; v <= ymax+ystep/2; v += ystep {
		y := Y(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, ml, y, float64(ml)+pw, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", ml-6, y+4, tickLabel(v, ystep))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", ml, mt, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%s</text>`+"\n", float64(ml)+pw/2, h-6, esc(p.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(15 %.1f) rotate(-90)" text-anchor="middle" fill="#333">%s</text>`+"\n", float64(mt)+ph/2, esc(p.YLabel))
	// Data, clipped to the plot area.
	fh := fnv.New32a()
	fh.Write([]byte(p.Title)) // each chart of a page has its own title
	clip := fmt.Sprintf("clip%08x", fh.Sum32())
	fmt.Fprintf(&b, `<clipPath id="%s"><rect x="%d" y="%d" width="%.1f" height="%.1f"/></clipPath><g clip-path="url(#%s)">`+"\n",
		clip, ml, mt-2, pw, ph+4, clip)
	// Lines that end sooner go on top: where a swarm's first seconds and
	// plain HTTP's overlap, the swarm's would be hidden.
	drawn := slices.Clone(p.Lines)
	end := func(l plotLine) float64 {
		if len(l.Pts) == 0 {
			return 0
		}
		return l.Pts[len(l.Pts)-1].T
	}
	slices.SortStableFunc(drawn, func(a, b plotLine) int { return compareFloat(end(b), end(a)) })
	for _, l := range drawn {
		if len(l.Pts) == 0 {
			continue
		}
		var pts strings.Builder
		for i, pt := range l.Pts {
			if l.Step && i > 0 {
				fmt.Fprintf(&pts, "%.1f,%.1f ", X(pt.T), Y(l.Pts[i-1].V))
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", X(pt.T), Y(pt.V))
		}
		op := ""
		if l.Opacity > 0 {
			op = fmt.Sprintf(` stroke-opacity="%.2f"`, l.Opacity)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f"%s stroke-linejoin="round" points="%s"/>`+"\n",
			l.Color, l.Width, op, strings.TrimSpace(pts.String()))
	}
	b.WriteString("</g>\n")
	// Markers, labelled at the top (vertical) or the right (horizontal);
	// labels of close markers are staggered.
	lastX, row := -1e9, 0
	for _, m := range p.VLines {
		if m.At <= 0 || m.At > xmax {
			if m.At > xmax {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="end" fill="%s">%s = %.1f s &#8594;</text>`+"\n",
					float64(ml)+pw-4, mt+14, m.Color, esc(m.Label), m.At)
			}
			continue
		}
		x := X(m.At)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.4" stroke-dasharray="%s"/>`+"\n",
			x, mt, x, float64(mt)+ph, m.Color, m.Dash)
		if x-lastX < 90 {
			row++
		} else {
			row = 0
		}
		lastX = x
		// Near the right edge the label goes on the line's left.
		lxp, anchor := x+4, "start"
		if x > float64(ml)+0.85*pw {
			lxp, anchor = x-4, "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="%s" fill="%s">%s</text>`+"\n", lxp, mt+14+14*row, anchor, m.Color, esc(m.Label))
	}
	for _, m := range p.HLines {
		if m.At > ymax {
			continue
		}
		y := Y(m.At)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2" stroke-dasharray="%s"/>`+"\n",
			ml, y, float64(ml)+pw, y, m.Color, m.Dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", float64(ml)+pw-4, y-4, m.Color, esc(m.Label))
	}
	b.WriteString("</svg></figure>\n")
	return b.String()
}

// logTicks are the ticks of a logarithmic axis covering lo to hi: 1, 2 and
// 5 times powers of ten, from the one at or below lo to the one at or above
// hi.
func logTicks(lo, hi float64) []float64 {
	var ticks []float64
	for e := math.Floor(math.Log10(lo)); ; e++ {
		for _, m := range []float64{1, 2, 5} {
			t := m * math.Pow(10, e)
			if t <= lo {
				ticks = ticks[:0] // keep only the last tick at or below lo
			}
			ticks = append(ticks, t)
			if t >= hi {
				return ticks
			}
		}
	}
}

// niceStep is a tick step of 1, 2 or 5 times a power of ten giving about
// five to ten ticks up to max.
func niceStep(max float64) float64 {
	if max <= 0 || math.IsNaN(max) || math.IsInf(max, 0) {
		return 1
	}
	raw := max / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

func tickLabel(v, step float64) string {
	if step >= 1 {
		return fmt.Sprintf("%.0f", v)
	}
	decimals := int(math.Ceil(-math.Log10(step)))
	return fmt.Sprintf("%.*f", decimals, v)
}

// budgetHTML is the paragraph on the bounds with the origin's egress
// budget, under the other bounds.
func (r *Report) budgetHTML() string {
	var b strings.Builder
	esc := html.EscapeString
	if r.Budget > 0 {
		fmt.Fprintf(&b, "<p>The origin's egress budget: it sends swarm clients at most <b>B = %s %s</b> of the file a window "+
			"(<code>serve --max-copies</code>), so the peers carry the other N&minus;B between them: "+
			"<b>T<sub>KR</sub>(B) = %s</b> = max(T<sub>KR</sub>, (N&minus;B)&middot;F/&Sigma;u), the bound stampede is held to.",
			esc(formatFloat(r.Budget)), copies(r.Budget), esc(secs(r.TKRB)))
	} else {
		fmt.Fprintf(&b, "<p>The origin has no egress budget (<code>serve --max-copies off</code>): T<sub>KR</sub>(B) = T<sub>KR</sub> = %s.",
			esc(secs(r.TKRB)))
	}
	if r.MeanBound > 0 {
		fmt.Fprintf(&b, " With the peers arriving at once and leaving when done, the <b>mean</b> completion is at least <b>%s</b>: "+
			"no peer is done before the origin sent a copy (F/u<sub>s</sub>) or before it received one (F/d), and the peers upload "+
			"only while they are there, so the N&minus;B copies they carry take &Sigma; u<sub>i</sub>t<sub>i</sub> &ge; (N&minus;B)&middot;F "+
			"(for a uniform crowd: mean &ge; max(F/u<sub>s</sub>, F/d, (N&minus;B)&middot;F/&Sigma;u)).", esc(secs(r.MeanBound)))
	}
	b.WriteString("</p>\n")
	return b.String()
}
