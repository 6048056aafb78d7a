package main

import (
	"slices"
	"strings"
	"testing"
)

// TestHelpAndFlagErrors: help goes to stdout and exits 0, for every form of
// asking; a bad flag gets one line on stderr naming the flag as given, with
// where to look, and no wall of help.
func TestHelpAndFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"get", "--help"}, {"get", "-h"}, {"get", "-help"}, {"help", "get"}, {"serve", "--help"}} {
		code, stdout, stderr := runCmd(t, args...)
		if code != exitOK || !strings.HasPrefix(stdout, "Usage: stampede "+args[0]) && !strings.HasPrefix(stdout, "Usage: stampede "+args[1]) || stderr != "" {
			t.Errorf("%v: exit %d, stdout %.40q, stderr %q", args, code, stdout, stderr)
		}
	}
	if _, stdout, _ := runCmd(t, "help", "get"); !strings.Contains(stdout, "\n  -c, --continue ") || !strings.Contains(stdout, "\n  -o, --output FILE ") {
		t.Errorf("help get: a short and a long name are not one line:\n%s", stdout)
	}
	for _, args := range [][]string{{"help", "help"}, {"help", "--help"}} {
		if code, stdout, _ := runCmd(t, args...); code != exitOK || !strings.HasPrefix(stdout, "Usage: stampede help [COMMAND") {
			t.Errorf("%v: exit %d, stdout %q", args, code, stdout)
		}
	}
	for _, tc := range []struct{ flag, want string }{
		{"--no-such-flag", "unknown flag: --no-such-flag"},
		{"-x", `unknown shorthand flag: 'x' in -x`},
		{"-qx", `unknown shorthand flag: 'x'`},
		{"--parallel=many", `"many" for "--parallel"`},
		// GNU syntax would read -continue as -c -o ntinue.
		{"-continue", "-continue: a long flag takes two dashes: --continue"},
		{"-output=f", "-output: a long flag takes two dashes: --output"},
	} {
		code, stdout, stderr := runCmd(t, "get", tc.flag, "http://x/")
		if code != exitUsage || stdout != "" || strings.Count(stderr, "\n") != 1 ||
			!strings.Contains(stderr, tc.want) || !strings.HasSuffix(stderr, "(run 'stampede help get')\n") {
			t.Errorf("get %s: exit %d, stdout %q, stderr %q", tc.flag, code, stdout, stderr)
		}
	}
	if code, _, stderr := runCmd(t, "help", "nope"); code != exitUsage || !strings.Contains(stderr, `"nope"`) {
		t.Errorf("help nope: exit %d, %q", code, stderr)
	}
}

// TestGNUFlags: short flags combine, a value may be attached or follow,
// flags go anywhere among the arguments, "--" ends them, and a value may
// start with a dash.
func TestGNUFlags(t *testing.T) {
	fs := describe(lookup("get"))
	pos, err := fs.parse([]string{"http://x/f", "-qc", "--seed-time", "-1s", "-o", "-", "--limit-rate=2MB", "-Ov", "--", "--json"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pos, []string{"http://x/f", "--json"}) {
		t.Errorf("positional arguments %q", pos)
	}
	for name, want := range map[string]string{"quiet": "true", "continue": "true", "seed-time": "-1s", "output": "-",
		"limit-rate": "2MB", "remote-name": "true", "verbose": "true", "json": "false"} {
		if got := fs.Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
	fs = describe(lookup("get"))
	if _, err := fs.parse([]string{"-ofile", "http://x/f"}); err != nil || fs.Lookup("output").Value.String() != "file" {
		t.Errorf("-ofile: %v, output %q", err, fs.Lookup("output").Value)
	}
}
