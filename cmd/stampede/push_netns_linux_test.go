//go:build linux

package main

import (
	"cmp"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/bench"
)

// TestPushNetns is the push's topology bench, a scenario of stampede bench
// (mode = push, bench/push*.go) run with this checkout's binary:
// STAMPEDETEST_PUSH_SCENARIO names a scenario file or a standard scenario
// (default push-4x6), STAMPEDETEST_PUSH_SYSTEMS and STAMPEDETEST_PUSH_REPS
// override its systems ("push,aria2,tree") and reps, and
// STAMPEDETEST_PUSH_OUT names a file for the JSON report. The same as
//
//	stampede bench push-4x6 --systems push,aria2,tree --reps 1
//
// Off unless STAMPEDETEST_PUSH_NETNS=1: it needs root and minutes. The
// bench package's TestPushSmoke runs a small cluster in every test run.
func TestPushNetns(t *testing.T) {
	if os.Getenv("STAMPEDETEST_PUSH_NETNS") != "1" {
		t.Skip("the push topology bench runs with STAMPEDETEST_PUSH_NETNS=1")
	}
	if os.Geteuid() != 0 {
		t.Skip("the push topology bench needs root")
	}
	sc, err := bench.LoadScenario(cmp.Or(os.Getenv("STAMPEDETEST_PUSH_SCENARIO"), "push-4x6"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := bench.Config{Scenario: sc, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)), SkipUnavailable: true}
	if s := os.Getenv("STAMPEDETEST_PUSH_SYSTEMS"); s != "" {
		if cfg.Systems, err = bench.ParseSystems(s); err != nil {
			t.Fatal(err)
		}
	}
	if s := os.Getenv("STAMPEDETEST_PUSH_REPS"); s != "" {
		if cfg.Reps, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Bin = filepath.Join(t.TempDir(), "stampede")
	if out, err := exec.Command("go", "build", "-o", cfg.Bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rep, err := bench.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	rep.WriteTable(&table)
	t.Logf("report:\n%s", table.String())
	if f := os.Getenv("STAMPEDETEST_PUSH_OUT"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		if err := rep.WriteJSON(out); err != nil {
			t.Error(err)
		}
	}
}
