package bench

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSpliceMarkdown(t *testing.T) {
	hand := "# Benchmarks\n\n## Foundation\n\nhand-written figures\n"
	intro := "## Testbed\n\nintro\n\n"
	doc, err := SpliceMarkdown(hand, intro, "ci", "### ci\none\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc, hand) || !strings.Contains(doc, intro+MarkBegin+"\n") || !strings.Contains(doc, "### ci\none\n") {
		t.Fatalf("first splice:\n%s", doc)
	}
	// A second scenario goes after the first; hand-written text after the
	// generated part stays.
	doc, err = SpliceMarkdown(doc+"\ntrailing hand-written text\n", intro, "flash20", "### flash20\n")
	if err != nil {
		t.Fatal(err)
	}
	// Rerunning the first replaces its section only.
	doc, err = SpliceMarkdown(doc, intro, "ci", "### ci\ntwo\n")
	if err != nil {
		t.Fatal(err)
	}
	want := hand + "\n" + intro + MarkBegin + "\n" +
		"<!-- bench:scenario ci -->\n### ci\ntwo\n<!-- bench:/scenario ci -->\n" +
		"<!-- bench:scenario flash20 -->\n### flash20\n<!-- bench:/scenario flash20 -->\n" +
		MarkEnd + "\n\ntrailing hand-written text\n"
	if doc != want {
		t.Fatalf("after three splices:\n%s\nwant:\n%s", doc, want)
	}
	if strings.Count(doc, intro) != 1 {
		t.Errorf("intro repeated")
	}
	for _, bad := range []string{"x " + MarkEnd, MarkBegin + " no end", MarkBegin + "<!-- bench:scenario ci -->" + MarkEnd} {
		if _, err := SpliceMarkdown(bad, intro, "ci", "s"); err == nil {
			t.Errorf("SpliceMarkdown(%q) succeeded", bad)
		}
	}
}

// fakeReport is a report with two systems, one of them with a failed peer
// and one with no runs.
func fakeReport() *Report {
	sc := &Scenario{Name: "fake", Size: 4 * MiB, OriginUp: 1e6, Classes: []Class{{Name: "peer", Count: 3, Up: 1e6, Down: 2e6}},
		Arrivals: Arrivals{Kind: ArriveAll}, Systems: []string{SysStampede, SysHTTP, SysAria2}, Backend: BackendLoopback,
		Source: "size = 4MiB <&>\n"}
	run := func(last float64, origin int64, failed bool) *RunResult {
		r := &RunResult{System: SysHTTP, Label: "HTTP", Rep: 1, Arrived: 3, Finished: 3, Complete: !failed, Last: last,
			OriginBytes: origin, R: float64(origin) / float64(sc.Size), TKR: 4.2, TKRR: 4.2, HTTPBound: 12.6,
			LastOverTKR: last / 4.2, LastOverTKRR: last / 4.2}
		for i := range 3 {
			p := &PeerResult{ID: i, State: string(PeerDone), Start: 0.01, Done: last * float64(i+1) / 3, Finished: true, Verified: true,
				Progress: []Point{{0.01, 0}, {last / 2, float64(sc.Size / 2)}, {last, float64(sc.Size)}}}
			p.Seconds = p.Done - p.Start
			if failed && i == 2 {
				p.State, p.Finished, p.Error, p.Exit = string(PeerFailed), false, "peer 2: exit status 4: connection <refused>", 4
				r.Finished, r.Complete = 2, false
			}
			r.Peers = append(r.Peers, p)
		}
		for i := range 10 {
			tt := last * float64(i) / 9
			r.Origin = append(r.Origin, Point{tt, float64(origin) * float64(i) / 9})
			r.Done = append(r.Done, Point{tt, float64(3*sc.Size) * float64(i) / 9})
		}
		return r
	}
	rep := &Report{Scenario: sc, Backend: BackendLoopback, Started: time.Unix(1.7e9, 0).UTC(), Finished: time.Unix(1.7e9+60, 0).UTC(),
		TKR: 4.2, HTTPBound: 12.6, Notes: []string{"a note with <markup>"}}
	rep.Systems = []*SystemResult{
		{System: SysHTTP, Label: "HTTP", Runs: []*RunResult{run(13, 3*4*MiB, false), run(14, 3*4*MiB, true), run(12.8, 3*4*MiB, false)}},
		{System: SysStampede, Label: "stampede", Runs: []*RunResult{run(6, 5*MiB, false)}},
		{System: SysAria2, Label: "aria2 (left out)"},
	}
	rep.summarize()
	return rep
}

func TestReportSummary(t *testing.T) {
	rep := fakeReport()
	h := rep.Systems[0]
	if h.Complete || h.Last.Median != 13 || h.Last.Min != 12.8 || h.Last.Max != 14 {
		t.Errorf("summary of three runs: %+v", h)
	}
	if h.Shown != 0 { // last = 13 is the median run
		t.Errorf("shown run %d, want 0", h.Shown)
	}
	if !rep.Systems[1].Complete || rep.Systems[2].Complete || !math.IsNaN(rep.Systems[2].Last.Median) {
		t.Errorf("complete flags or empty system: %+v %+v", rep.Systems[1], rep.Systems[2])
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"13.0 s (12.8 s-14.0 s)", "8/9", "peer 2: exit status 4", "note: a note with <markup>", "HTTP 12.6 s"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := rep.WriteMarkdown(&b, "bench/scenarios/fake.txt"); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	if !strings.Contains(md, "| system | runs |") || !strings.Contains(md, "`bench/scenarios/fake.txt`") {
		t.Errorf("markdown:\n%s", md)
	}
}

func TestReportHTML(t *testing.T) {
	rep := fakeReport()
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	checkHTML(t, page)
	for _, want := range []string{"&lt;markup&gt;", "size = 4MiB &lt;&amp;&gt;", "connection &lt;refused&gt;", "incomplete: see the notes", "T_KR"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<markup>") {
		t.Error("unescaped text in the page")
	}
}

func TestNiceStep(t *testing.T) {
	for _, tt := range []struct{ max, want float64 }{{60, 10}, {8, 2}, {1, 0.2}, {671, 200}, {0, 1}, {math.NaN(), 1}, {33.5, 10}} {
		if got := niceStep(tt.max); !near(got, tt.want) {
			t.Errorf("niceStep(%v) = %v, want %v", tt.max, got, tt.want)
		}
	}
}

// TestPeerCommands checks the command lines the harness builds, today and
// once get has the swarm flags.
func TestPeerCommands(t *testing.T) {
	sc := &Scenario{Name: "t", Size: MiB, OriginUp: 1e6, Departure: Departure{Linger: 3 * time.Second},
		GetArgs: []string{"--parallel", "4"}}
	c := Class{Name: "peer", Count: 1, Up: 1e6, Down: 2.5e6}
	h := &Host{Name: "p", IP: "127.0.0.1"}
	env := func(nw Network, f Features) *runEnv {
		return &runEnv{sc: sc, net: nw, origin: h, bin: "/bin/stampede", feats: f, dir: "/d", www: "/d/www", file: "t.bin"}
	}
	o := func(e *runEnv) *stampedeOrigin { return &stampedeOrigin{env: e, addr: "127.0.0.1:8080"} }
	tests := []struct {
		name string
		sys  func() system
		want string
	}{
		{"stampede without swarm", func() system {
			e := env(loopback{}, Features{})
			return &stampedeSys{env: e, origin: o(e)}
		}, "/bin/stampede get http://127.0.0.1:8080/t.bin -o /p/t.bin -q --json --progress-json --limit-rate 2500000 --parallel 4"},
		{"stampede with swarm", func() system {
			e := env(loopback{}, Features{Swarm: true, NoSwarm: true})
			return &stampedeSys{env: e, origin: o(e)}
		}, "/bin/stampede get http://127.0.0.1:8080/t.bin -o /p/t.bin -q --json --progress-json --limit-rate 2500000 --max-upload-rate 1000000 --seed-time 3s --parallel 4"},
		{"http with --no-swarm", func() system {
			e := env(loopback{}, Features{Swarm: true, NoSwarm: true})
			return &stampedeSys{env: e, origin: o(e), http: true}
		}, "/bin/stampede get http://127.0.0.1:8080/t.bin -o /p/t.bin -q --json --progress-json --limit-rate 2500000 --no-swarm"},
		{"curl", func() system {
			e := env(loopback{}, Features{})
			return &curlSys{env: e, origin: o(e)}
		}, "curl -sSf --retry 5 --retry-all-errors -o /p/t.bin --limit-rate 2500000 http://127.0.0.1:8080/t.bin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(tt.sys().peer(0, h, c, "/p").argv, " ")
			if got != tt.want {
				t.Errorf("argv\n got %s\nwant %s", got, tt.want)
			}
		})
	}
	// On netns the network caps, so no rate flags; commands run in the
	// host's namespace.
	e := env(&netns{}, Features{Swarm: true})
	nh := &Host{Name: "p", IP: "198.18.0.2", ns: "stb1x1-h1"}
	got := (&stampedeSys{env: e, origin: o(e)}).peer(0, nh, c, "/p").argv
	if strings.Join(got[:4], " ") != "ip netns exec stb1x1-h1" || slices.Contains(got, "--limit-rate") || slices.Contains(got, "--max-upload-rate") {
		t.Errorf("netns argv %q", got)
	}
	// The HTTP baseline falls back to curl when get has the swarm but no
	// way to turn it off.
	s, _ := newSystem(SysHTTP, env(loopback{}, Features{Swarm: true}))
	if _, ok := s.(*curlSys); !ok || s.name() != SysHTTP {
		t.Errorf("http system with swarm and no --no-swarm: %T", s)
	}
	s, _ = newSystem(SysStampede, env(loopback{}, Features{}))
	if s.label() != "stampede (no swarm yet)" || len(s.notes()) == 0 {
		t.Errorf("label %q", s.label())
	}
}

func TestThin(t *testing.T) {
	var pts []Point
	for i := range 1000 {
		pts = append(pts, Point{T: float64(i), V: float64(i)})
	}
	got := thin(pts, 300)
	if len(got) > 301 || len(got) < 250 || got[0] != pts[0] || got[len(got)-1] != pts[999] {
		t.Errorf("thin: %d points, first %v last %v", len(got), got[0], got[len(got)-1])
	}
	if got := thin(pts[:10], 300); len(got) != 10 {
		t.Errorf("thin of a short series changed it")
	}
}

func TestLogTicks(t *testing.T) {
	for _, tt := range []struct {
		lo, hi float64
		want   string
	}{
		{33.5, 746, "[20 50 100 200 500 1000]"},
		{2.4, 53, "[2 5 10 20 50 100]"},
		{10, 10, "[10]"},
		{0.3, 4, "[0.2 0.5 1 2 5]"},
	} {
		if got := fmt.Sprint(logTicks(tt.lo, tt.hi)); got != tt.want {
			t.Errorf("logTicks(%v, %v) = %s, want %s", tt.lo, tt.hi, got, tt.want)
		}
	}
}

// TestReportBudgetBounds: the report knows the scenario's origin budget
// (serve's default, or serve_args'), and shows T_KR(B) and the mean's
// bound beside the other bounds; the mean's only for a crowd that arrives
// at once and leaves when done.
func TestReportBudgetBounds(t *testing.T) {
	// fakeReport: N = 3, F = 4 MiB, u_s = u = 1e6 B/s, d = 2e6 B/s.
	// B = 1.5 (serve's default): (N-B)*F/sum u = 1.5*4194304/3e6 = 2.097152 s,
	// under F/u_s = 4.194304 s, which binds both bounds.
	rep := fakeReport()
	if rep.Budget != DefaultBudget || !near(rep.TKRB, 4.194304) || !near(rep.MeanBound, 4.194304) {
		t.Errorf("default budget: B %v, T_KR(B) %v, mean bound %v", rep.Budget, rep.TKRB, rep.MeanBound)
	}
	// A fast origin (u_s = 1e7 B/s) and B = 1: 2*4194304/3e6 = 2.796203 s binds
	// T_KR(B) (T_KR: 3*4194304/1.3e7 = 0.967916 s; F/d = 2.097152 s) and the mean's.
	rep.Scenario.OriginUp = 1e7
	rep.Scenario.ServeArgs = []string{"--rate", "80Mbit", "--max-copies", "1"}
	rep.summarize()
	if rep.Budget != 1 || !near(rep.TKRB, 2*4194304.0/3e6) || !near(rep.MeanBound, 2*4194304.0/3e6) {
		t.Errorf("--max-copies 1: B %v, T_KR(B) %v, mean bound %v", rep.Budget, rep.TKRB, rep.MeanBound)
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if want := "B = 1 copy a window (serve --max-copies), T_KR(B) = 2.8 s and the mean completion is at least 2.8 s"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	if err := rep.WriteMarkdown(&b, "bench/scenarios/fake.txt"); err != nil {
		t.Fatal(err)
	}
	if want := "Bounds: T_KR = 4.2 s; plain HTTP needs at least 12.6 s; with the origin's budget of B = 1 copy"; !strings.Contains(b.String(), want) {
		t.Errorf("markdown lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<b>B = 1 copy</b>", "<b>T<sub>KR</sub>(B) = 2.8 s</b>", "the <b>mean</b> completion is at least <b>2.8 s</b>"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("page lacks %q", want)
		}
	}

	// No budget: T_KR(B) is T_KR; peers arriving over time: no mean bound.
	rep.Scenario.ServeArgs = []string{"--max-copies=off"}
	rep.Scenario.Arrivals = Arrivals{Kind: ArrivePoisson, Rate: 3}
	rep.summarize()
	if rep.Budget != 0 || !near(rep.TKRB, CrowdOf(rep.Scenario).TKR()) || rep.MeanBound != 0 {
		t.Errorf("no budget, Poisson arrivals: B %v, T_KR(B) %v, mean bound %v", rep.Budget, rep.TKRB, rep.MeanBound)
	}
	if l := rep.budgetLine(); !strings.Contains(l, "no origin budget") || strings.Contains(l, "mean") {
		t.Errorf("no budget, Poisson arrivals: %q", l)
	}
	// A report written before these bounds says nothing of them.
	old := fakeReport()
	old.TKRB, old.MeanBound, old.Budget = 0, 0, 0
	var page bytes.Buffer
	if err := old.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if old.budgetLine() != "" || strings.Contains(page.String(), "egress budget") {
		t.Errorf("an old report speaks of a budget: %q", old.budgetLine())
	}
}
