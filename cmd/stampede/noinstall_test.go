package main

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/bench"
)

// lookPathOf finds exactly the programs installed.
func lookPathOf(installed ...string) func(string) (string, error) {
	return func(name string) (string, error) {
		if slices.Contains(installed, name) {
			return "/usr/bin/" + name, nil
		}
		return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
	}
}

func benchScenarios(t *testing.T, names ...string) []*bench.Scenario {
	t.Helper()
	var out []*bench.Scenario
	for _, n := range names {
		sc, err := bench.LoadScenario(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sc)
	}
	return out
}

// TestBenchMissingProgramFails: a scenario listing a system whose programs
// are not installed fails before anything runs, with one message naming
// the scenario, the program and the command that installs it.
func TestBenchMissingProgramFails(t *testing.T) {
	scs := benchScenarios(t, "ci", "staggered") // staggered lists http-nginx and aria2
	var notes bytes.Buffer
	_, err := checkScenarios(&notes, scs, "", nil, false, lookPathOf("curl", "nginx", "aria2c", "opentracker"), false)
	if err == nil {
		t.Fatal("no error with mktorrent missing")
	}
	msg := err.Error()
	if strings.Count(msg, "\n") != 0 {
		t.Errorf("one problem, several lines: %q", msg)
	}
	for _, want := range []string{"staggered:", "aria2", "mktorrent", bench.InstallCommand, "--skip-unavailable"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if notes.Len() > 0 {
		t.Errorf("notes without --skip-unavailable: %q", notes.String())
	}

	// --systems leaves aria2 out of the question.
	if _, err := checkScenarios(&notes, scs, "", []string{bench.SysStampede, bench.SysNginx}, false,
		lookPathOf("nginx"), false); err != nil {
		t.Errorf("--systems stampede,http-nginx with nginx installed: %v", err)
	}
}

// TestBenchNetnsNeedsRoot: a netns scenario without root fails, saying so
// and naming the way out.
func TestBenchNetnsNeedsRoot(t *testing.T) {
	scs := benchScenarios(t, "flash50")
	all := lookPathOf("ip", "tc", "curl", "nginx", "aria2c", "opentracker", "mktorrent")
	_, err := checkScenarios(&bytes.Buffer{}, scs, "", nil, false, all, false)
	if !errors.Is(err, bench.ErrNeedRoot) {
		t.Fatalf("checkScenarios = %v, want ErrNeedRoot", err)
	}
	for _, want := range []string{"flash50:", "needs root", "--backend loopback"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if _, err := checkScenarios(&bytes.Buffer{}, scs, "", nil, false, all, true); err != nil {
		t.Errorf("as root: %v", err)
	}
	if _, err := checkScenarios(&bytes.Buffer{}, scs, bench.BackendLoopback, nil, false, all, false); err != nil {
		t.Errorf("--backend loopback: %v", err)
	}
}

// TestBenchSkipUnavailable: with --skip-unavailable a scenario whose
// backend cannot run is skipped, one with a missing system runs without
// it, each with a note.
func TestBenchSkipUnavailable(t *testing.T) {
	scs := benchScenarios(t, "ci", "flash50", "staggered", "faults")
	var notes bytes.Buffer
	runs, err := checkScenarios(&notes, scs, "", nil, true, lookPathOf("curl", "ip", "tc"), false)
	if err != nil {
		t.Fatal(err)
	}
	// ci: runs; flash50: netns without root; staggered: runs without
	// nginx and aria2; faults: runs without nginx (stampede is left).
	if want := []bool{true, false, true, true}; !slices.Equal(runs, want) {
		t.Errorf("runs = %v, want %v", runs, want)
	}
	for _, want := range []string{"skipping flash50:", "needs root", "staggered: leaving out http-nginx, aria2:",
		"needs aria2c, opentracker, mktorrent", "faults: leaving out http-nginx:", bench.InstallCommand} {
		if !strings.Contains(notes.String(), want) {
			t.Errorf("notes lack %q:\n%s", want, notes.String())
		}
	}
	// Every system of a scenario missing: the scenario is skipped.
	runs, _ = checkScenarios(&notes, scs[2:3], "", []string{bench.SysAria2}, true, lookPathOf(), true)
	if runs[0] {
		t.Error("a scenario with no system left runs")
	}
}

// TestNoPackageInstalls: the product installs nothing. No Go file outside
// the tests names a package manager as a program to run or writes
// policy-rc.d; scripts/install-deps.sh does that. A program is named as
// a whole string literal (exec.Command("apt-get", ...)), so text that
// mentions one in a sentence (help about apt-get through the gateway)
// passes.
func TestNoPackageInstalls(t *testing.T) {
	managers := []string{"apt-get", "apt", "aptitude", "dpkg", "yum", "dnf", "apk", "pip", "pip3", "brew", "snap"}
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if slices.Contains(managers, strings.TrimSpace(s)) || strings.Contains(s, "policy-rc.d") ||
				strings.Contains(s, "apt-get install") || strings.Contains(s, "apt install") {
				t.Errorf("%s: %q: the product binary must not install packages (scripts/install-deps.sh does)",
					fset.Position(lit.Pos()), s)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 20 {
		t.Fatalf("scanned %d Go files under %s: the walk is wrong", files, root)
	}
}
