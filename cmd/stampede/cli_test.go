package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
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

// TestCompletion: each shell's script completes every command, and get's
// flags after get; the shells that are installed parse it, and bash and
// fish complete with it.
func TestCompletion(t *testing.T) {
	get := describe(lookup("get"))
	for _, shell := range completionShells {
		code, script, stderr := runCmd(t, "completion", shell)
		if code != exitOK || stderr != "" {
			t.Fatalf("completion %s: exit %d: %s", shell, code, stderr)
		}
		for _, c := range commands {
			if !strings.Contains(script, c.name) {
				t.Errorf("%s: no command %s", shell, c.name)
			}
		}
		get.VisitAll(func(f *pflag.Flag) {
			long, short := "--"+f.Name, "-"+f.Shorthand
			if shell == "fish" {
				long, short = "-l "+f.Name, "-s "+f.Shorthand
			}
			if !strings.Contains(script, long) || f.Shorthand != "" && !strings.Contains(script, short) {
				t.Errorf("%s: get's %s missing", shell, f.Name)
			}
		})
		if _, err := exec.LookPath(shell); err != nil {
			t.Logf("%s not installed: its script's syntax is not checked", shell)
			continue
		}
		cmd := exec.Command(shell, "-n")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", shell, err, out)
		}
	}
	if code, _, _ := runCmd(t, "completion", "tcsh"); code != exitUsage {
		t.Errorf("completion tcsh: exit %d, want %d", code, exitUsage)
	}

	// What a user pressing Tab after each line is offered.
	cases := []struct{ line, want string }{
		{"stampede se", "serve seed"},
		{"stampede get --cont", "--continue"},
		{"stampede help se", "serve seed"},
		{"stampede completion ", "bash zsh fish"},
	}
	_, bash, _ := runCmd(t, "completion", "bash")
	for _, tc := range cases {
		words := strings.Fields(tc.line)
		if strings.HasSuffix(tc.line, " ") {
			words = append(words, "''")
		}
		script := fmt.Sprintf("%s\nCOMP_WORDS=(%s)\nCOMP_CWORD=%d\n_stampede\necho \"${COMPREPLY[*]}\"\n", bash, strings.Join(words, " "), len(words)-1)
		out, err := exec.Command("bash", "-c", script).Output()
		if got := strings.TrimSpace(string(out)); err != nil || got != tc.want {
			t.Errorf("bash: %q: %q (%v), want %q", tc.line, got, err, tc.want)
		}
	}
	if _, err := exec.LookPath("fish"); err == nil {
		_, fish, _ := runCmd(t, "completion", "fish")
		for _, tc := range cases {
			out, err := exec.Command("fish", "-c", fish+"\ncomplete -C '"+tc.line+"'").Output()
			var got []string
			for l := range strings.Lines(string(out)) {
				got = append(got, strings.Fields(l)[0])
			}
			slices.Sort(got)
			want := strings.Fields(tc.want)
			slices.Sort(want)
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("fish: %q: %q (%v), want %q", tc.line, got, err, want)
			}
		}
	}
}

// TestManPage: docs/stampede.1 is what "stampede help --man" prints ("make
// man" writes it), it has every command and get's flags, and groff, where
// installed, reads it without a warning.
func TestManPage(t *testing.T) {
	code, page, stderr := runCmd(t, "help", "--man")
	if code != exitOK || stderr != "" {
		t.Fatalf("help --man: exit %d: %s", code, stderr)
	}
	committed, err := os.ReadFile("../../docs/stampede.1")
	if err != nil || string(committed) != page {
		t.Errorf("docs/stampede.1 is not what 'stampede help --man' prints (%v): run 'make man'", err)
	}
	for _, c := range commands {
		if !strings.Contains(page, `.SS "stampede `+c.name) {
			t.Errorf("no section for %s", c.name)
		}
	}
	if !strings.Contains(page, `\fB\-c\fR, \fB\-\-continue\fR`) || !strings.Contains(page, `\fB\-\-limit\-rate\fR \fIRATE\fR`) {
		t.Errorf("get's flags are missing")
	}
	if _, err := exec.LookPath("groff"); err != nil {
		t.Skip("groff not installed")
	}
	cmd := exec.Command("groff", "-man", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	var warnings bytes.Buffer
	cmd.Stderr = &warnings
	if err := cmd.Run(); err != nil || warnings.Len() > 0 {
		t.Errorf("groff: %v\n%s", err, warnings.String())
	}
}
