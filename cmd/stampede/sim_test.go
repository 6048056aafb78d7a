package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSim: stampede sim runs a standard scenario with its crowd scaled by
// --peers and prints the times against T_KR, the origin's load, the
// control frames and the tracker; --json prints the same as JSON.
func TestSim(t *testing.T) {
	code, stdout, stderr := runCmd(t, "sim", "-q", "--peers", "8", "ci")
	if code != exitOK || stderr != "" {
		t.Fatalf("sim --peers 8 ci: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"scenario         ci: 8 peers", "8 arrived, 8 finished", "× T_KR", "copies", "fetches", "per peer", "tracker", "wall time"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runCmd(t, "sim", "-q", "--json", "--rack-size", "2", "--rack-link", "50Mbit", "ci")
	if code != exitOK {
		t.Fatalf("sim --json ci: exit %d: %s", code, stderr)
	}
	var rep struct {
		Scenario string
		Result   struct {
			Finished     int     `json:"finished"`
			LastOverTKR  float64 `json:"last_over_tkr"`
			OriginCopies float64 `json:"origin_copies"`
			Tracker      struct {
				Announces int64 `json:"announces"`
			} `json:"tracker"`
		}
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	r := rep.Result
	if rep.Scenario != "ci" || r.Finished != 5 || r.LastOverTKR < 1 || r.OriginCopies < 1 || r.Tracker.Announces < 5 {
		t.Errorf("--json: %+v", rep)
	}
}

// TestSimPush: a push scenario, scaled down by --racks and
// --hosts-per-rack, simulates the push agents and reports the last host
// against the topology bound and the bytes into the racks.
func TestSimPush(t *testing.T) {
	code, stdout, stderr := runCmd(t, "sim", "-q", "--json", "--racks", "2", "--hosts-per-rack", "2", "--max-time", "10m", "push-4x6")
	if code != exitOK {
		t.Fatalf("sim push-4x6: exit %d: %s", code, stderr)
	}
	var rep struct {
		Result struct {
			Finished     int     `json:"finished"`
			OriginCopies float64 `json:"origin_copies"`
			Push         *struct {
				Bound         float64        `json:"bound"`
				LastOverBound float64        `json:"last_over_bound"`
				RackInCopies  float64        `json:"rack_in_copies"`
				Roles         map[string]int `json:"roles"`
			} `json:"push"`
		}
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	r := rep.Result
	if p := r.Push; r.Finished != 4 || p == nil || p.Bound <= 0 || p.LastOverBound < 1 || p.RackInCopies < 1 || p.Roles["dc_representative"] != 2 {
		t.Errorf("push: %+v, %+v", r, r.Push)
	}
}

// TestSimErrors: bad arguments get a clear error and exit 2.
func TestSimErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim"}, "want one SCENARIO (a file, or one of: "},
		{[]string{"sim", "ci", "flash50"}, "want one SCENARIO"},
		{[]string{"sim", "--peers", "0", "ci"}, "--peers 0: want at least 1"},
		{[]string{"sim", "--peers", "-5", "ci"}, "--peers -5: want at least 1"},
		{[]string{"sim", "no-such-scenario"}, "no scenario file no-such-scenario and no standard scenario of that name"},
		{[]string{"sim", "--rack-link", "1Gbit", "ci"}, "--rack-link needs --rack-size"},
		{[]string{"sim", "--rack-link", "fast", "--rack-size", "4", "ci"}, `--rack-link: rate "fast"`},
		{[]string{"sim", "--step-time", "-1s", "ci"}, "--step-time must not be negative"},
		{[]string{"sim", "--racks", "3", "ci"}, "racks and hosts per rack are a push scenario's"},
		{[]string{"sim", "--peers", "30", "push-4x6"}, "a push scenario's hosts are its racks'"},
		{[]string{"sim", "--racks", "-1", "push-4x6"}, "--racks and --hosts-per-rack must not be negative"},
	} {
		code, stdout, stderr := runCmd(t, tc.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, stdout, stderr, exitUsage, tc.want)
		}
	}
}
