package bench

import (
	"strings"
	"testing"
	"time"
)

func TestStandardScenariosParse(t *testing.T) {
	names := StandardScenarios()
	for _, want := range []string{"ci", "faults", "flash20", "flash50", "staggered", "poisson", "pool", "mixed", "adsl", "fast-origin", "big", "tiny", "churn", "push-4x6", "push-2dc"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("standard scenario %s missing (have %v)", want, names)
		}
	}
	for _, name := range names {
		sc, err := LoadScenario(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if sc.Name != name || sc.Description == "" || sc.Source == "" {
			t.Errorf("%s: name %q, description %q", name, sc.Name, sc.Description)
		}
	}
}

func TestParseScenario(t *testing.T) {
	sc, err := ParseScenario("hetero.txt", strings.NewReader(`
# A heterogeneous crowd.
# Two lines of description.
name      = hetero   # trailing comment
size      = 16MiB
origin_up = 8Mbit
class     = fast count=4 up=20Mbit down=50Mbit
class     = slow count=6 up=2Mbit down=8Mbit
arrivals  = pool=4/s window=3s
departure = linger=2.5s
fault     = kill 2 at 10s
fault     = restart origin at 5s
fault     = restart tracker at 6s
fault     = corrupt 1
systems   = stampede, http, aria2
reps      = 3
reps.http = 1
backend   = netns
timeout   = 90s
seed      = 42
serve_args = --max-transfers 256
get_args  = --parallel 8 -v
`))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "hetero" || sc.Size != 16*MiB || sc.OriginUp != 1e6 || sc.Peers() != 10 {
		t.Errorf("basics: %+v", sc)
	}
	if sc.Description != "A heterogeneous crowd. Two lines of description." {
		t.Errorf("description %q", sc.Description)
	}
	if c := sc.Classes[1]; c.Name != "slow" || c.Count != 6 || c.Up != 250000 || c.Down != 1e6 {
		t.Errorf("class slow = %+v", c)
	}
	if a := sc.Arrivals; a.Kind != ArrivePool || a.Rate != 4 || a.Window != 3*time.Second {
		t.Errorf("arrivals %+v", a)
	}
	if sc.Departure.Linger != 2500*time.Millisecond {
		t.Errorf("departure %+v", sc.Departure)
	}
	wantFaults := []Fault{{FaultKill, 2, 10 * time.Second}, {FaultRestartOrigin, 0, 5 * time.Second},
		{FaultRestartTracker, 0, 6 * time.Second}, {FaultCorrupt, 1, 0}}
	if len(sc.Faults) != len(wantFaults) {
		t.Fatalf("faults %+v", sc.Faults)
	}
	for i, f := range wantFaults {
		if sc.Faults[i] != f {
			t.Errorf("fault %d = %+v, want %+v", i, sc.Faults[i], f)
		}
	}
	if strings.Join(sc.Systems, ",") != "stampede,http,aria2" || sc.RepsFor("http") != 1 || sc.RepsFor("aria2") != 3 {
		t.Errorf("systems %v reps %d %v", sc.Systems, sc.Reps, sc.RepsBy)
	}
	if sc.Backend != BackendNetns || sc.Timeout != 90*time.Second || sc.Seed != 42 {
		t.Errorf("backend %s timeout %v seed %d", sc.Backend, sc.Timeout, sc.Seed)
	}
	if strings.Join(sc.ServeArgs, " ") != "--max-transfers 256" || strings.Join(sc.GetArgs, " ") != "--parallel 8 -v" {
		t.Errorf("args %q %q", sc.ServeArgs, sc.GetArgs)
	}
}

func TestParseScenarioDefaults(t *testing.T) {
	sc, err := ParseScenario("dir/min.txt", strings.NewReader("size=1MiB\norigin_up=1MB\npeers=3\npeer_up=0\npeer_down=0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "min" || sc.Arrivals.Kind != ArriveAll || sc.Departure.Linger != 0 || sc.Reps != 1 ||
		sc.Backend != BackendLoopback || strings.Join(sc.Systems, ",") != "stampede,http" {
		t.Errorf("defaults: %+v", sc)
	}
}

func TestParseScenarioErrors(t *testing.T) {
	const base = "size = 1MiB\norigin_up = 8Mbit\npeers = 2\npeer_up = 1Mbit\npeer_down = 2Mbit\n"
	tests := []struct {
		name, text string
		want       []string // substrings of the error
	}{
		{"unknown key", base + "pers = 3\n", []string{"bad.txt:6: pers: unknown key"}},
		{"no equals", base + "arrivals all\n", []string{"bad.txt:6: want key = value"}},
		{"empty value", base + "seed =\n", []string{"bad.txt:6: seed: empty value"}},
		{"duplicate", base + "size = 2MiB\n", []string{"bad.txt:6: size given twice (first on line 1)"}},
		{"bad size", strings.Replace(base, "1MiB", "1 parsec", 1), []string{"bad.txt:1: size:", "unknown unit"}},
		{"bad rate", strings.Replace(base, "8Mbit", "fast", 1), []string{"bad.txt:2: origin_up:"}},
		{"missing size", "origin_up = 1MB\npeers = 1\npeer_up=0\npeer_down=0\n", []string{"bad.txt: missing size"}},
		{"missing peers", "size = 1MiB\norigin_up = 1MB\n", []string{"missing peers"}},
		{"peers without caps", "size = 1MiB\norigin_up = 1MB\npeers = 3\n", []string{"peers needs peer_up and peer_down"}},
		{"peers and classes", base + "class = a count=1 up=1MB down=1MB\n", []string{"either peers, peer_up and peer_down, or class lines"}},
		{"zero peers", strings.Replace(base, "peers = 2", "peers = 0", 1), []string{"bad.txt:3: peers: want at least 1"}},
		{"bad class", "size=1MiB\norigin_up=1MB\nclass = a count=2 up=1MB\n", []string{"bad.txt:3: class: class a: needs count=, up= and down="}},
		{"class field", "size=1MiB\norigin_up=1MB\nclass = a count=2 up=1MB down=1MB speed=3\n", []string{`unknown field "speed"`}},
		{"class twice", "size=1MiB\norigin_up=1MB\nclass = a count=1 up=1 down=1\nclass = a count=1 up=1 down=1\n", []string{"class a defined twice"}},
		{"bad arrivals", base + "arrivals = sometimes\n", []string{"bad.txt:6: arrivals:", "want all, every=D, poisson=R/s or pool=R/s"}},
		{"every without duration", base + "arrivals = every=soon\n", []string{"bad.txt:6: arrivals:"}},
		{"poisson zero", base + "arrivals = poisson=0/s\n", []string{"positive rate"}},
		{"poisson unit", base + "arrivals = poisson=2/h\n", []string{"unit must be /s or /m"}},
		{"all with argument", base + "arrivals = all=3\n", []string{"all takes no argument"}},
		{"bad departure", base + "departure = stay\n", []string{"bad.txt:6: departure:", "want leave or linger=D"}},
		{"bad fault", base + "fault = explode 3\n", []string{"bad.txt:6: fault:", "want kill K at T"}},
		{"fault time", base + "fault = kill 1 at soon\n", []string{`bad time "soon"`}},
		{"kill too many", base + "fault = kill 3 at 1s\n", []string{`fault "kill 3 at 1s": only 2 peers`}},
		{"no honest peer", base + "fault = corrupt 1\nfault = corrupt 1\n", []string{"2 corrupting peers leave no honest one among 2 peers"}},
		{"unknown system", base + "systems = stampede,ftp\n", []string{`unknown system "ftp"`}},
		{"system twice", base + "systems = http,http\n", []string{`system "http" listed twice`}},
		{"reps of unknown", base + "reps.ftp = 2\n", []string{`unknown system "ftp"`}},
		{"bad reps", base + "reps = 0\n", []string{"want a positive integer"}},
		{"bad backend", base + "backend = docker\n", []string{"want loopback or netns"}},
		{"several errors", "size = x\norigin_up = y\npeers = 2\npeer_up = 1\npeer_down = 1\n", []string{"bad.txt:1: size", "bad.txt:2: origin_up"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseErrors(t, tt.text, tt.want) })
	}
}

func TestLoadScenarioErrors(t *testing.T) {
	if _, err := LoadScenario("nosuch"); err == nil || !strings.Contains(err.Error(), "standard: adsl, big, churn, churn-64k, churn-nat, ci, fast-origin, faults, flash-128k, flash20") {
		t.Errorf("LoadScenario(nosuch) = %v", err)
	}
	if _, err := LoadScenario("./nosuch.txt"); err == nil {
		t.Errorf("LoadScenario of a missing file succeeded")
	}
}

func TestArrivalStrings(t *testing.T) {
	for _, s := range []string{"all", "every=1.5s", "poisson=2/s", "pool=4/s window=5s"} {
		a, err := ParseArrivals(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if a.String() != s {
			t.Errorf("ParseArrivals(%q).String() = %q", s, a.String())
		}
	}
	if a, _ := ParseArrivals("poisson=30/m"); a.Rate != 0.5 {
		t.Errorf("30/m = %v/s", a.Rate)
	}
	for _, s := range []string{"leave", "linger=3s"} {
		d, err := ParseDeparture(s)
		if err != nil || d.String() != s {
			t.Errorf("ParseDeparture(%q) = %v, %v", s, d, err)
		}
	}
}

func TestParsePushScenario(t *testing.T) {
	sc, err := ParseScenario("cluster.txt", strings.NewReader(`
# Two datacenters.
mode           = push
size           = 8MiB
origin_up      = 40Mbit
datacenters    = 2
dc_uplink      = 80Mbit
racks          = 3
hosts_per_rack = 5
host_up        = 100Mbit
host_down      = 50Mbit
rack_uplink    = 40Mbit
reserve        = 25%
rack_representatives = 1
reps           = 2
reps.http      = 1
`))
	if err != nil {
		t.Fatal(err)
	}
	want := PushTopology{Racks: 3, HostsPerRack: 5, HostUp: 12.5e6, HostDown: 6.25e6, RackUplink: 5e6, Reserve: 0.25,
		Datacenters: 2, DCUplink: 10e6, RackRepresentatives: 1}
	if sc.Mode != ModePush || sc.Push == nil || *sc.Push != want {
		t.Fatalf("mode %q topology %+v, want %+v", sc.Mode, sc.Push, want)
	}
	if sc.Backend != BackendNetns || strings.Join(sc.Systems, ",") != "push,aria2,tree,http" ||
		sc.RepsFor(SysHTTP) != 1 || sc.RepsFor(SysPush) != 2 {
		t.Errorf("defaults: backend %s systems %v reps %d %v", sc.Backend, sc.Systems, sc.Reps, sc.RepsBy)
	}
	if sc.Peers() != 30 || sc.Push.RackCount() != 6 {
		t.Errorf("%d hosts in %d racks, want 30 in 6", sc.Peers(), sc.Push.RackCount())
	}
	if s := sc.Summary(); !strings.Contains(s, "2 datacenters × 3 racks × 5 hosts") || !strings.Contains(s, "reserve 25%") {
		t.Errorf("summary %q", s)
	}
	sc, err = ParseScenario("min.txt", strings.NewReader("mode=push\nsize=1MiB\norigin_up=1MB\nracks=2\nhosts_per_rack=2\n"+
		"host_up=1MB\nhost_down=1MB\nrack_uplink=1MB\nreserve=0.1\nsystems=push,tree\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Push.Reserve != 0.1 || strings.Join(sc.Systems, ",") != "push,tree" {
		t.Errorf("reserve %g systems %v", sc.Push.Reserve, sc.Systems)
	}
}

func TestParsePushScenarioErrors(t *testing.T) {
	const base = "mode = push\nsize = 1MiB\norigin_up = 8Mbit\nracks = 2\nhosts_per_rack = 3\nhost_up = 100Mbit\n" +
		"host_down = 100Mbit\nrack_uplink = 40Mbit\n"
	tests := []struct {
		name, text string
		want       []string
	}{
		{"misspelt key", base + "rack_uplnk = 40Mbit\n", []string{"bad.txt:9: rack_uplnk: unknown key", "with mode = push: racks, hosts_per_rack"}},
		{"bad mode", strings.Replace(base, "mode = push", "mode = pull", 1), []string{"bad.txt:1: mode: want crowd or push"}},
		{"crowd key", base + "peers = 3\n", []string{"bad.txt:9: peers: not a key of mode = push"}},
		{"fault", base + "fault = kill 1 at 2s\n", []string{"bad.txt:9: fault: not a key of mode = push"}},
		{"push key without mode", "size = 1MiB\norigin_up = 1MB\npeers = 2\npeer_up = 1MB\npeer_down = 1MB\nracks = 2\n",
			[]string{"bad.txt:6: racks: a key of mode = push only"}},
		{"push system in a crowd", "size = 1MiB\norigin_up = 1MB\npeers = 2\npeer_up = 1MB\npeer_down = 1MB\nsystems = stampede,tree\n",
			[]string{`bad.txt:6: systems: "tree" is a system of mode = push only`}},
		{"crowd system", base + "systems = push,stampede\n", []string{`bad.txt:9: systems: "stampede" is not a system of mode = push`}},
		{"unknown system", base + "systems = push,ftp\n", []string{`bad.txt:9: systems: unknown system "ftp"`}},
		{"reps of a crowd system", base + "reps.stampede = 2\n", []string{`bad.txt:9: reps.stampede: "stampede" is not a system of mode = push`}},
		{"loopback", base + "backend = loopback\n", []string{"bad.txt:9: backend: mode = push runs on the netns backend only"}},
		{"zero racks", strings.Replace(base, "racks = 2", "racks = 0", 1), []string{"bad.txt:4: racks: want a positive integer"}},
		{"bad rate", strings.Replace(base, "rack_uplink = 40Mbit", "rack_uplink = wide", 1), []string{"bad.txt:8: rack_uplink:"}},
		{"zero rate", strings.Replace(base, "host_up = 100Mbit", "host_up = 0", 1), []string{"bad.txt:6: host_up: want a positive rate"}},
		{"bad reserve", base + "reserve = 120%\n", []string{"bad.txt:9: reserve: want a share in [0, 100%)"}},
		{"dc_uplink alone", base + "dc_uplink = 80Mbit\n", []string{"bad.txt:9: dc_uplink: needs datacenters"}},
		{"datacenters alone", base + "datacenters = 2\n", []string{"bad.txt:9: datacenters: needs dc_uplink"}},
		{"missing uplink", strings.Replace(base, "rack_uplink = 40Mbit\n", "", 1), []string{"bad.txt: missing rack_uplink (e.g. rack_uplink = 40Mbit)"}},
		{"missing origin", strings.Replace(base, "origin_up = 8Mbit\n", "", 1), []string{"bad.txt: missing origin_up"}},
		{"too many representatives", base + "rack_representatives = 4\n", []string{"rack_representatives 4: a rack has only 3 hosts"}},
		{"twice", base + "racks = 3\n", []string{"bad.txt:9: racks given twice (first on line 4)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseErrors(t, tt.text, tt.want) })
	}
}

// wantParseErrors checks that text fails to parse with an error holding
// every string of want.
func wantParseErrors(t *testing.T, text string, want []string) {
	t.Helper()
	_, err := ParseScenario("bad.txt", strings.NewReader(text))
	if err == nil {
		t.Fatalf("no error for:\n%s", text)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\ndoes not contain %q", err, w)
		}
	}
}
