package main

import (
	"strings"
	"testing"
)

// TestHelpAndFlagErrors: help goes to stdout and exits 0, for every form of
// asking; a bad flag gets one line on stderr naming the flag as given, with
// where to look, and no wall of help.
func TestHelpAndFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"get", "--help"}, {"get", "-h"}, {"help", "get"}, {"serve", "--help"}} {
		code, stdout, stderr := runCmd(t, args...)
		if code != exitOK || !strings.HasPrefix(stdout, "Usage: stampede "+args[0]) && !strings.HasPrefix(stdout, "Usage: stampede "+args[1]) || stderr != "" {
			t.Errorf("%v: exit %d, stdout %.40q, stderr %q", args, code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"help", "help"}, {"help", "--help"}} {
		if code, stdout, _ := runCmd(t, args...); code != exitOK || !strings.HasPrefix(stdout, "Usage: stampede help [COMMAND]") {
			t.Errorf("%v: exit %d, stdout %q", args, code, stdout)
		}
	}
	code, stdout, stderr := runCmd(t, "get", "--no-such-flag", "http://x/")
	if code != exitUsage || stdout != "" || strings.Count(stderr, "\n") != 1 ||
		!strings.Contains(stderr, "-no-such-flag") || !strings.Contains(stderr, "stampede help get") {
		t.Errorf("bad flag: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := runCmd(t, "help", "nope"); code != exitUsage || !strings.Contains(stderr, `"nope"`) {
		t.Errorf("help nope: exit %d, %q", code, stderr)
	}
}
