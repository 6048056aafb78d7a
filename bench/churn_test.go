package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

const churnText = `# A churn scenario.
name      = c
mode      = churn
object    = 64KiB
rates     = 1,2/s,0.5
duration  = 30s
origin_up = 8Mbit
class     = pub count=2 up=8Mbit down=20Mbit
class     = fc count=1 up=8Mbit down=20Mbit nat=full-cone hosts=3
class     = sym count=1 up=8Mbit down=20Mbit nat=symmetric hosts=2
`

func TestParseChurnScenario(t *testing.T) {
	sc, err := ParseScenario("c.txt", strings.NewReader(churnText))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Mode != ModeChurn || sc.Size != 64<<10 || sc.Backend != BackendNetns || sc.Churn == nil {
		t.Fatalf("scenario = %+v", sc)
	}
	if got := sc.Churn.Rates; len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 0.5 || sc.Churn.Duration != 30*time.Second {
		t.Errorf("churn = %+v", sc.Churn)
	}
	if strings.Join(sc.Systems, ",") != "stampede,aria2,http" {
		t.Errorf("default systems = %v", sc.Systems)
	}
	want := []struct {
		nat   string
		hosts int
	}{{"", 2}, {NATFullCone, 1}, {NATSymmetric, 2}}
	for i, w := range want {
		c := sc.Classes[i]
		if c.NAT != w.nat || c.churnHosts() != w.hosts {
			t.Errorf("class %s: nat %q, %d hosts; want %q, %d", c.Name, c.NAT, c.churnHosts(), w.nat, w.hosts)
		}
	}
	if !sc.hasNAT() || !strings.Contains(sc.Summary(), "behind a symmetric NAT") {
		t.Errorf("summary %q", sc.Summary())
	}
	for _, name := range []string{"churn-64k", "churn-nat"} {
		sc, err := LoadScenario(name)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Mode != ModeChurn || sc.Size != 64<<10 || len(sc.Systems) != 3 {
			t.Errorf("%s: %+v", name, sc)
		}
	}
	nat, _ := LoadScenario("churn-nat")
	kinds := map[string]bool{}
	for _, c := range nat.Classes {
		kinds[natName(c.NAT)] = true
	}
	if len(kinds) != 4 {
		t.Errorf("churn-nat covers %v, want every kind and public", kinds)
	}
	flash, err := LoadScenario("flash-128k")
	if err != nil || flash.Peers() != 64 || flash.Size != 128<<10 || flash.Arrivals.Kind != ArriveAll {
		t.Errorf("flash-128k: %+v %v", flash, err)
	}
}

func TestParseChurnScenarioErrors(t *testing.T) {
	base := "mode = churn\nobject = 64KiB\norigin_up = 8Mbit\npeers = 2\npeer_up = 1Mbit\npeer_down = 1Mbit\n"
	tests := []struct {
		name, text string
		want       []string
	}{
		{"missing rates", base + "duration = 5s\n", []string{"missing rates"}},
		{"missing duration", base + "rates = 1\n", []string{"missing duration"}},
		{"size", base + "rates = 1\nduration = 5s\nsize = 1MiB\n", []string{"bad.txt:9: size: not a key of mode = churn (object gives the size)"}},
		{"arrivals", base + "rates = 1\nduration = 5s\narrivals = all\n", []string{"arrivals: not a key of mode = churn"}},
		{"bad rate", base + "rates = 1,x\nduration = 5s\n", []string{"bad.txt:7: rates"}},
		{"bad duration", base + "rates = 1\nduration = -1s\n", []string{"bad.txt:8: duration"}},
		{"loopback", base + "rates = 1\nduration = 5s\nbackend = loopback\n", []string{"netns backend only"}},
		{"push system", base + "rates = 1\nduration = 5s\nsystems = push\n", []string{"not a system of mode = churn"}},
		{"bad nat", "mode = churn\nobject = 1KiB\norigin_up = 1Mbit\nrates = 1\nduration = 1s\nclass = a count=1 up=1Mbit down=1Mbit nat=cone\n",
			[]string{"nat \"cone\""}},
		{"churn key in crowd", "size = 1MiB\norigin_up = 1Mbit\npeers = 1\npeer_up = 1Mbit\npeer_down = 1Mbit\nrates = 1\n",
			[]string{"rates: a key of mode = churn only"}},
		{"nat in crowd", "size = 1MiB\norigin_up = 1Mbit\nclass = a count=1 up=1Mbit down=1Mbit nat=symmetric\n",
			[]string{"nat= and hosts= are for mode = churn only"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseErrors(t, tt.text, tt.want) })
	}
}

// TestChurnSchedule: the arrivals are a Poisson process at the rate (the
// count within a few standard deviations), the same for the same draws,
// spread over the classes by their counts and round robin over their hosts.
func TestChurnSchedule(t *testing.T) {
	classes := []Class{{Name: "a", Count: 3, Hosts: 2}, {Name: "b", Count: 1, Hosts: 3}}
	draw := func(seed uint64) []churnArrival {
		rng := rand.New(rand.NewPCG(seed, 7))
		return churnSchedule(16, 100*time.Second, classes, make([]int, 2), rng.ExpFloat64, rng.Float64)
	}
	s := draw(1)
	if n := float64(len(s)); math.Abs(n-1600) > 5*40 {
		t.Errorf("%d arrivals at 16/s for 100 s, want about 1600", len(s))
	}
	if s[0].At != 0 {
		t.Errorf("first arrival at %v", s[0].At)
	}
	perClass := [2]int{}
	lastHost := [2]int{-1, -1}
	for i, a := range s {
		if i > 0 && a.At < s[i-1].At || a.At >= 100*time.Second {
			t.Fatalf("arrival %d at %v out of order or late", i, a.At)
		}
		if want := (lastHost[a.Class] + 1) % classes[a.Class].Hosts; a.Host != want {
			t.Fatalf("arrival %d: host %d of class %d, want %d (round robin)", i, a.Host, a.Class, want)
		}
		lastHost[a.Class] = a.Host
		perClass[a.Class]++
	}
	if share := float64(perClass[0]) / float64(len(s)); math.Abs(share-0.75) > 0.05 {
		t.Errorf("class a has %.2f of the arrivals, want 0.75", share)
	}
	again := draw(1)
	if len(again) != len(s) || again[10] != s[10] {
		t.Error("the same draws gave another schedule")
	}
}

func TestPoolSeries(t *testing.T) {
	got := poolSeries([]float64{0, 0.2, 1.1}, []float64{0.6, -1, 1.3}, 1.5, 0.5, 0)
	want := []float64{1, 2, 1, 1} // t = 0, 0.5, 1, 1.5
	if len(got) != len(want) {
		t.Fatalf("pool = %v", got)
	}
	for i, p := range got {
		if p.V != want[i] || p.T != float64(i)*0.5 {
			t.Errorf("pool[%d] = %+v, want %v at %v", i, p, want[i], float64(i)*0.5)
		}
	}
}

func TestChurnAims(t *testing.T) {
	sc, err := ParseScenario("c.txt", strings.NewReader(strings.Replace(churnText, "rates     = 1,2/s,0.5", "rates = 1,16", 1)))
	if err != nil {
		t.Fatal(err)
	}
	f := float64(sc.Size)
	rep := &Report{Scenario: sc, Systems: []*SystemResult{
		{System: SysStampede, ChurnRuns: []*ChurnRun{{Rep: 1, Rates: []ChurnRate{
			{Rate: 1, Arrivals: 10, Completed: 10, Mean: 0.2, P99: 0.4, OriginBytesPerArrival: f},
			{Rate: 16, Arrivals: 160, Completed: 160, Mean: 0.3, P99: 0.8, OriginBytesPerArrival: 0.05 * f}}}}},
		{System: SysAria2, ChurnRuns: []*ChurnRun{{Rep: 1, Rates: []ChurnRate{
			{Rate: 1, Arrivals: 10, Completed: 10, Mean: 1, StartLagP99: 0.1},
			{Rate: 16, Arrivals: 160, Completed: 160, Mean: 0.4, StartLagP99: 2}}}}},
	}}
	rep.summarizeChurn()
	got := map[string]PushAim{}
	for _, a := range rep.ChurnAims {
		got[a.Aim] = a
	}
	for aim, want := range map[string]struct {
		v   float64
		met bool
	}{
		"p99 latency at 16/s ≤ 2.5 × at 1/s":                  {2, true},
		"origin bytes per arrival at 16/s ≤ 0.1 × the object": {0.05, true},
		"mean latency at 1/s ≤ 0.6 × aria2's":                 {0.2, true},
	} {
		a, ok := got[aim]
		if !ok || math.Abs(a.Value-want.v) > 1e-9 || a.Met != want.met {
			t.Errorf("aim %q = %+v (present %v), want %v", aim, a, ok, want)
		}
	}
	if len(rep.ChurnAims) != 3 {
		t.Errorf("aims %+v: the rate where aria2 is CPU-bound must be left out", rep.ChurnAims)
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil || !strings.Contains(buf.String(), "16/s") {
		t.Errorf("table: %v\n%s", err, buf.String())
	}
	buf.Reset()
	if err := rep.WriteHTML(&buf); err != nil || !strings.Contains(buf.String(), "Unfinished peers") {
		t.Errorf("html: %v", err)
	}
}

// TestChurnSmoke runs a tiny churn scenario (two rates of 3 s, public
// peers and port-restricted ones behind a NAT) with every system on the
// netns backend, checks the report, and that nothing is left behind,
// also when the run is interrupted. Root, with nft, aria2c, opentracker
// and mktorrent (scripts/install-test-deps.sh); about 40 s.
func TestChurnSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the churn testbed needs root (network namespaces)")
	}
	if testing.Short() {
		t.Skip("runs real processes for about 40 s")
	}
	for _, tool := range []string{"ip", "tc", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the churn testbed needs %s", tool)
		}
	}
	skipUnlessInstalled(t, SysAria2)
	text := "name = churn-smoke\nmode = churn\nobject = 64KiB\nrates = 2,4\nduration = 3s\norigin_up = 8Mbit\n" +
		"class = pub count=1 up=8Mbit down=20Mbit hosts=2\nclass = home count=1 up=8Mbit down=20Mbit nat=port-restricted\n" +
		"seed = 3\n"
	sc, err := ParseScenario("smoke.txt", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	rep, err := Run(t.Context(), Config{Scenario: sc, Bin: stampedeBin(t), WorkDir: work, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkChurnClean(t, work)
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Systems []struct {
			System string             `json:"system"`
			Rates  []map[string]any   `json:"rates"`
			Pool   []Point            `json:"pool"`
			NAT    []map[string]any   `json:"nat"`
			Runs   []*json.RawMessage `json:"churn_runs"`
		} `json:"systems"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Systems) != 3 {
		t.Fatalf("%d systems in the report, want 3", len(doc.Systems))
	}
	for _, s := range doc.Systems {
		if len(s.Rates) != 2 || len(s.Pool) == 0 {
			t.Errorf("%s: %d rates, %d pool samples", s.System, len(s.Rates), len(s.Pool))
		}
		for _, r := range s.Rates {
			for _, k := range []string{"rate", "arrivals", "completed", "mean", "p90", "p99", "origin_bytes_per_arrival"} {
				if _, ok := r[k]; !ok {
					t.Errorf("%s: rate without %s: %v", s.System, k, r)
				}
			}
			arr, done := r["arrivals"].(float64), r["completed"].(float64)
			mean, p99 := r["mean"].(float64), r["p99"].(float64)
			perArrival := r["origin_bytes_per_arrival"].(float64)
			if arr < 1 || done != arr {
				t.Errorf("%s at %v/s: %v of %v arrivals verified", s.System, r["rate"], done, arr)
			}
			if !(mean > 0 && mean <= p99 && p99 < 60) {
				t.Errorf("%s at %v/s: mean %v, p99 %v", s.System, r["rate"], mean, p99)
			}
			// Every arrival took the object from someone; the origin's
			// bytes per arrival are below a few copies (HTTP: one copy
			// and its headers).
			if perArrival <= 0 || perArrival > 4*float64(sc.Size) {
				t.Errorf("%s at %v/s: origin bytes per arrival %v", s.System, r["rate"], perArrival)
			}
			if s.System == SysHTTP && perArrival < float64(sc.Size) {
				t.Errorf("http at %v/s: %v origin bytes per arrival, less than the object", r["rate"], perArrival)
			}
		}
		if s.System == SysStampede {
			if len(s.NAT) != 2 {
				t.Errorf("stampede: NAT counts %v, want one per class", s.NAT)
			}
			for _, n := range s.NAT {
				for _, k := range []string{"direct", "punched", "relayed"} {
					if _, ok := n[k]; !ok {
						t.Errorf("stampede: NAT counts without %s: %v", k, n)
					}
				}
			}
		}
	}
	t.Logf("\n%s", tableOf(rep))

	// Interrupted mid-run: Run returns the context's error, and nothing
	// is left.
	sc.Systems = []string{SysStampede}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(2500*time.Millisecond, cancel)
	work2 := t.TempDir()
	_, err = Run(ctx, Config{Scenario: sc, Bin: stampedeBin(t), WorkDir: work2, Logger: testLogger(t)})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("interrupted Run = %v, want context.Canceled", err)
	}
	checkChurnClean(t, work2)
}

func tableOf(rep *Report) string {
	var b bytes.Buffer
	rep.WriteTable(&b)
	return b.String()
}

// checkChurnClean is checkClean, for the churn network's namespaces too.
func checkChurnClean(t *testing.T, work string) {
	t.Helper()
	checkClean(t, work)
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	prefix := churnPrefix + strconv.Itoa(os.Getpid()) + "x"
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, prefix) {
			t.Errorf("network namespace left: %s", strings.TrimSpace(line))
		}
	}
}

func TestPoolStable(t *testing.T) {
	var growing, steady []Point
	for i := range 61 { // 30 s of samples every 0.5 s, from 10 s
		t := 10 + float64(i)*0.5
		growing = append(growing, Point{T: t, V: float64(i)})
		steady = append(steady, Point{T: t, V: float64(4 + i%3)})
	}
	steady = append(steady, Point{T: 41, V: 50}) // after the arrivals: not counted
	if n, ok := poolStable(growing, 10, 30*time.Second); ok || n != 60 {
		t.Errorf("growing pool: %d, stable %v", n, ok)
	}
	if n, ok := poolStable(steady, 10, 30*time.Second); !ok || n != 6 {
		t.Errorf("steady pool: %d, stable %v", n, ok)
	}
}
