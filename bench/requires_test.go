package bench

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// lookPathOf finds exactly the programs installed, as exec.LookPath would
// on a machine that has those.
func lookPathOf(installed ...string) func(string) (string, error) {
	return func(name string) (string, error) {
		if slices.Contains(installed, name) {
			return "/usr/bin/" + name, nil
		}
		return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
	}
}

func TestCheckMissingPrograms(t *testing.T) {
	sc := &Scenario{Name: "flash20", Backend: BackendNetns, Systems: []string{SysStampede, SysHTTP, SysNginx, SysAria2}}
	all := lookPathOf("aria2c", "opentracker", "mktorrent", "nginx", "curl", "ip", "tc")
	if got := Check(sc, "", nil, all, true); len(got) != 0 {
		t.Fatalf("everything installed, as root: %v", got)
	}

	got := Check(sc, "", nil, lookPathOf("aria2c", "nginx", "ip", "tc"), true)
	if len(got) != 1 {
		t.Fatalf("Check = %v, want aria2 only", got)
	}
	u := got[0]
	if u.System != SysAria2 || !slices.Equal(u.Missing, []Program{{"opentracker", "opentracker"}, {"mktorrent", "mktorrent"}}) {
		t.Errorf("Check = %+v", u)
	}
	msg := u.Error()
	for _, want := range []string{"flash20:", "system aria2", "opentracker, mktorrent", "Debian packages opentracker, mktorrent",
		InstallCommand} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if ok, leaveOut := Runnable(got); !ok || !slices.Equal(leaveOut, []string{SysAria2}) {
		t.Errorf("Runnable = %v %v, want true [aria2]", ok, leaveOut)
	}

	// --systems narrows the check to the systems asked for.
	if got := Check(sc, "", []string{SysStampede, SysNginx}, lookPathOf("nginx", "ip", "tc"), true); len(got) != 0 {
		t.Errorf("stampede and nginx with nginx installed: %v", got)
	}
	// curl is a system's program only for the curl system.
	got = Check(&Scenario{Name: "c", Backend: BackendLoopback, Systems: []string{SysHTTP, SysCurl}}, "", nil, lookPathOf(), false)
	if len(got) != 1 || got[0].System != SysCurl || !strings.Contains(got[0].Error(), "needs curl") {
		t.Errorf("curl system without curl: %v", got)
	}
}

func TestCheckNetnsNeedsRoot(t *testing.T) {
	sc := &Scenario{Name: "flash50", Backend: BackendNetns, Systems: []string{SysStampede, SysHTTP}}
	got := Check(sc, "", nil, lookPathOf("ip", "tc"), false)
	if len(got) != 1 || got[0].System != "" || !got[0].NeedRoot {
		t.Fatalf("netns without root: %v", got)
	}
	msg := got[0].Error()
	for _, want := range []string{"flash50:", "netns backend needs root", "--backend loopback"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if !errors.Is(got[0], ErrNeedRoot) {
		t.Errorf("%v is not ErrNeedRoot", got[0])
	}
	if ok, _ := Runnable(got); ok {
		t.Error("Runnable says a netns scenario without root can run")
	}
	// The backend flag overrides the scenario's: loopback needs neither.
	if got := Check(sc, BackendLoopback, nil, lookPathOf(), false); len(got) != 0 {
		t.Errorf("loopback: %v", got)
	}
	// As root without iproute2: the programs are named.
	got = Check(sc, "", nil, lookPathOf(), true)
	if len(got) != 1 || got[0].NeedRoot || !strings.Contains(got[0].Error(), "needs ip, tc, not installed (Debian package iproute2)") {
		t.Errorf("netns without ip and tc: %v", got)
	}
}

// TestRunFailsOnMissingSystem: without SkipUnavailable a system that
// cannot run fails the run before anything starts, naming the program;
// with it, the system is left out with a note.
func TestRunFailsOnMissingSystem(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the stampede binary")
	}
	sc, err := ParseScenario("gone.txt", strings.NewReader("size = 256KiB\norigin_up = 32Mbit\npeers = 1\npeer_up = 16Mbit\npeer_down = 32Mbit\nsystems = http,aria2\n"))
	if err != nil {
		t.Fatal(err)
	}
	noAria2 := func(name string) (string, error) {
		if name == "aria2c" {
			return "", exec.ErrNotFound
		}
		return exec.LookPath(name)
	}
	cfg := Config{Scenario: sc, Bin: stampedeBin(t), WorkDir: t.TempDir(), Logger: testLogger(t), LookPath: noAria2}
	_, err = Run(t.Context(), cfg)
	var u *Unavailable
	if !errors.As(err, &u) || u.System != SysAria2 || !strings.Contains(err.Error(), "aria2c") {
		t.Fatalf("Run = %v, want aria2 unavailable", err)
	}
	cfg.SkipUnavailable = true
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Systems) != 1 || !strings.Contains(strings.Join(rep.Notes, "\n"), "Left out: system aria2 needs aria2c") {
		t.Errorf("systems %d, notes %q", len(rep.Systems), rep.Notes)
	}
}
