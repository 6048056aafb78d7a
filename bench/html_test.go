package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"strings"
	"testing"
	"time"
)

// Completion times (seconds since the run started) and origin bytes of
// crowdReport's two runs: stampede in seconds, plain HTTP in tens of them.
var (
	swarmDone = []float64{2, 2.5, 3, 3.1}
	httpDone  = []float64{20, 30, 40, 50.2}
)

const (
	peerStart   = 0.1
	swarmOrigin = 11 * MiB / 2
	httpOrigin  = 20 * MiB
)

// crowdReport is a demo's report made by hand: four peers, stampede and
// plain HTTP, one run each.
func crowdReport(demo bool) *Report {
	sc := &Scenario{Name: "demo", Size: 5 * MiB, OriginUp: 2e6, Classes: []Class{{Name: "peer", Count: 4, Up: 2e6, Down: 5e6}},
		Arrivals: Arrivals{Kind: ArriveAll}, Systems: []string{SysStampede, SysHTTP}, Backend: BackendLoopback}
	crowd := CrowdOf(sc)
	run := func(system string, done []float64, origin int64) *RunResult {
		r := &RunResult{System: system, Label: system, Rep: 1, Arrived: len(done), Finished: len(done), Complete: true,
			OriginBytes: origin, R: float64(origin) / float64(sc.Size), PeerBytesCounted: true}
		var secs []float64
		for i, d := range done {
			p := &PeerResult{ID: i, State: string(PeerDone), Start: peerStart, Done: d, Seconds: d - peerStart, Finished: true, Verified: true,
				Progress: []Point{{peerStart, 0}, {d / 2, float64(sc.Size / 2)}, {d, float64(sc.Size)}}}
			r.Peers = append(r.Peers, p)
			secs = append(secs, p.Seconds)
			r.Last = max(r.Last, d)
		}
		r.Completion = distOf(secs)
		r.TKR, r.TKRR, r.HTTPBound = crowd.TKR(), crowd.TKRR(r.R), crowd.HTTP()
		r.LastOverTKR, r.LastOverTKRR = r.Last/r.TKR, r.Last/r.TKRR
		for i := range 21 {
			f := float64(i) / 20
			t := r.Last * f
			r.Origin = append(r.Origin, Point{t, float64(origin) * f})
			r.Done = append(r.Done, Point{t, float64(len(done)) * float64(sc.Size) * f})
			r.Uploaded = append(r.Uploaded, Point{t, max(0, float64(len(done))*float64(sc.Size)-float64(origin)) * f})
		}
		return r
	}
	rep := &Report{Scenario: sc, Backend: BackendLoopback, Demo: demo, TKR: crowd.TKR(), HTTPBound: crowd.HTTP(),
		Started: time.Unix(1.7e9, 0).UTC(), Finished: time.Unix(1.7e9+60, 0).UTC()}
	rep.Systems = []*SystemResult{
		{System: SysStampede, Label: "stampede", Runs: []*RunResult{run(SysStampede, swarmDone, swarmOrigin)}},
		{System: SysHTTP, Label: "HTTP", Runs: []*RunResult{run(SysHTTP, httpDone, httpOrigin)}},
	}
	rep.summarize()
	return rep
}

func page(t *testing.T, rep *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	checkHTML(t, b.String())
	return b.String()
}

func mean(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x - peerStart
	}
	return sum / float64(len(xs))
}

// TestHeadline checks the headline's figures against the runs' data, in the
// page and in the terminal table.
func TestHeadline(t *testing.T) {
	rep := crowdReport(true)
	h, ok := rep.Headline()
	if !ok {
		t.Fatal("no headline for a report with stampede and HTTP, both complete")
	}
	wantLast := httpDone[len(httpDone)-1] / swarmDone[len(swarmDone)-1]
	wantMean := mean(httpDone) / mean(swarmDone)
	wantOrigin := float64(httpOrigin) / swarmOrigin
	if !near(h.Last, wantLast) || !near(h.Mean, wantMean) || !near(h.Origin, wantOrigin) {
		t.Errorf("headline last %v, mean %v, origin %v; want %v, %v, %v", h.Last, h.Mean, h.Origin, wantLast, wantMean, wantOrigin)
	}
	want := []string{
		fmt.Sprintf("%.1f times faster", wantLast), // 16.2
		fmt.Sprintf("%.1f times faster", wantMean), // 13.7
		fmt.Sprintf("%.1f times fewer bytes", wantOrigin),
		"50.2 s", "14.5 MiB less",
	}
	p := page(t, rep)
	i := strings.Index(p, `<div class="headline">`)
	if i < 0 || i > strings.Index(p, "<h2>") {
		t.Fatal("no headline above the first section")
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(p[i:strings.Index(p, "<h2>")], w) {
			t.Errorf("the page's headline lacks %q", w)
		}
		if !strings.Contains(table.String(), w) {
			t.Errorf("the terminal table lacks %q:\n%s", w, table.String())
		}
	}

	// A system that left peers without the file has no fair time to
	// compare: no headline.
	rep.Systems[1].Complete = false
	if _, ok := rep.Headline(); ok {
		t.Error("headline with HTTP incomplete")
	}
	if strings.Contains(page(t, rep), `class="headline"`) {
		t.Error("headline on the page with HTTP incomplete")
	}
}

func TestTimes(t *testing.T) {
	for _, tt := range []struct {
		x    float64
		want string
	}{{15.62, "15.6 times faster"}, {1.04, "about as fast"}, {0.97, "about as fast"}, {0.5, "2.0 times slower"}} {
		if got := faster(tt.x); got != tt.want {
			t.Errorf("faster(%v) = %q, want %q", tt.x, got, tt.want)
		}
	}
}

// TestChartsSpanLongestRun checks every chart over time ends after the
// longest run: the HTTP run, ten times the swarm's.
func TestChartsSpanLongestRun(t *testing.T) {
	rep := crowdReport(true)
	longest := httpDone[len(httpDone)-1]
	for _, p := range []*plot{rep.originRatePlot(), rep.originCopiesPlot(), rep.peerUploadPlot(),
		rep.progressPlot(rep.Systems[0]), rep.progressPlot(rep.Systems[1])} {
		if p.XMax < longest {
			t.Errorf("chart %q: time axis ends at %v s, the HTTP run at %v s", p.Title, p.XMax, longest)
		}
	}
	// The per-peer charts draw the same axis.
	var axes []string
	for _, s := range rep.Systems {
		svg := rep.progressPlot(s).svg()
		axes = append(axes, svg[strings.Index(svg, "<line"):strings.Index(svg, "<clipPath")])
	}
	if axes[0] != axes[1] {
		t.Errorf("the per-peer charts' axes differ:\n%s\n%s", axes[0], axes[1])
	}
}

// TestCPUChart: a report whose runs sampled the machine's CPU draws it, in
// percent over the runs' time axis; one without samples draws nothing.
func TestCPUChart(t *testing.T) {
	rep := crowdReport(false)
	if rep.cpuPlot() != nil || strings.Contains(page(t, rep), "Machine CPU") {
		t.Fatal("a CPU chart without samples")
	}
	run := rep.Systems[0].Runs[rep.Systems[0].Shown]
	run.CPU = []Point{{T: 0.5, V: 0.5}, {T: 1, V: 0.97}, {T: 1.5, V: 1}}
	p := rep.cpuPlot()
	if p == nil {
		t.Fatal("no CPU chart with samples")
	}
	if len(p.Lines) != 1 || !near(p.Lines[0].Pts[1].V, 97) || p.XMax < httpDone[len(httpDone)-1] {
		t.Errorf("CPU chart: %d lines, points %v, time axis to %v s", len(p.Lines), p.Lines[0].Pts, p.XMax)
	}
	if !strings.Contains(page(t, rep), "Machine CPU") {
		t.Error("the page lacks the CPU chart")
	}
}

// TestReportTitle checks the demo's page is titled as the demo, and a
// benchmark's as before.
func TestReportTitle(t *testing.T) {
	demo := page(t, crowdReport(true))
	for _, w := range []string{"<title>stampede demo: a flash crowd of 4 peers on loopback</title>", "<h1>stampede demo: "} {
		if !strings.Contains(demo, w) {
			t.Errorf("the demo's page lacks %q", w)
		}
	}
	if strings.Contains(demo, "stampede bench") {
		t.Error(`the demo's page says "stampede bench"`)
	}
	bench := page(t, crowdReport(false))
	for _, w := range []string{"<title>stampede bench: demo on loopback</title>", "<h1>stampede bench: demo on loopback</h1>"} {
		if !strings.Contains(bench, w) {
			t.Errorf("the benchmark's page lacks %q", w)
		}
	}
	// report.json keeps which it was.
	var js bytes.Buffer
	if err := crowdReport(true).WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || !back.Demo {
		t.Errorf("report.json lost the demo mark (%v)", err)
	}
}

// TestReportExplains checks the page says what every column and T_KR mean,
// with the scenario's figures.
func TestReportExplains(t *testing.T) {
	rep := crowdReport(true)
	p := page(t, rep)
	for _, col := range rep.tableRows()[0] {
		dt := "<dt>" + html.EscapeString(col) + "</dt><dd>"
		i := strings.Index(p, dt)
		if i < 0 {
			t.Errorf("column %q is not explained", col)
			continue
		}
		if dd, _, _ := strings.Cut(p[i+len(dt):], "</dd>"); len(dd) < 20 {
			t.Errorf("column %q: explanation %q", col, dd)
		}
	}
	for _, s := range rep.Systems {
		if !strings.Contains(p, html.EscapeString(systemHelp[s.System])) {
			t.Errorf("system %s is not explained", s.System)
		}
	}
	origin, download, crowd := CrowdOf(rep.Scenario).TKRTerms()
	for _, w := range []string{"T_KR is the least time in which every peer could have the file",
		"one copy of the file (" + secs(origin), "downloading one (" + secs(download), "together (" + secs(crowd),
		"Here T_KR = " + secs(rep.TKR), "at least " + secs(rep.HTTPBound), "T_KR(R) is T_KR when the origin sends R copies"} {
		if !strings.Contains(p, html.EscapeString(w)) {
			t.Errorf("the page lacks %q", w)
		}
	}
}
