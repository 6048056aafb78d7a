package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGetViaDaemon: "get --daemon" hands the download to a running daemon
// (its API on a unix socket) and returns once the file is complete and
// verified; bad combinations of flags, a path outside the daemon's
// allowed directories and a daemon that is not there get clear errors.
func TestGetViaDaemon(t *testing.T) {
	www := t.TempDir()
	data := randomBytes(2<<20+9, 31)
	writeFile(t, www, "d.bin", data)
	base := startServe(t, www)
	state, dl := t.TempDir(), t.TempDir()
	sock, _ := startDaemon(t, "daemon", "--state-dir", state, "--peer-listen", "127.0.0.1:0", "--allow-dir", dl, "-q")
	if sock != filepath.Join(state, "api.sock") {
		t.Errorf("API on %s, want the state directory's api.sock", sock)
	}

	out := filepath.Join(dl, "got.bin")
	code, stdout, stderr := runCmd(t, "get", "--daemon", "--api", sock, "--json", base+"/d.bin", "-o", out)
	if code != 0 {
		t.Fatalf("get --daemon: exit %d: %s", code, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the file: %d bytes (err %v), want the origin's %d", len(got), err, len(data))
	}
	if !strings.Contains(stdout, `"state": "seeding"`) || !strings.Contains(stderr, "the daemon seeds it") {
		t.Errorf("stdout %s\nstderr %s", stdout, stderr)
	}

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--limit-rate", "1MB"}, exitUsage, "not with --daemon"},
		{[]string{"-c"}, exitUsage, "not with --daemon"},
		{[]string{"-o", "-"}, exitUsage, "stdout"},
		{[]string{"-o", filepath.Join(t.TempDir(), "x")}, exitUsage, "outside the allowed"},
		{[]string{"--api", filepath.Join(t.TempDir(), "none.sock")}, exitNetwork, "is 'stampede daemon' running"},
	} {
		args := append([]string{"get", "--daemon", "-q", base + "/d.bin"}, tc.args...)
		if !slices.Contains(tc.args, "--api") {
			args = append(args, "--api", sock)
		}
		code, _, stderr := runCmd(t, args...)
		if code != tc.code || !strings.Contains(stderr, tc.says) {
			t.Errorf("%v: exit %d, %s; want %d saying %q", tc.args, code, stderr, tc.code, tc.says)
		}
	}
	if code, _, stderr := runCmd(t, "get", "--api", sock, base+"/d.bin"); code != exitUsage {
		t.Errorf("--api without --daemon: exit %d, %s", code, stderr)
	}
}

// TestDaemonFlags: bad flags exit 2.
func TestDaemonFlags(t *testing.T) {
	for _, args := range [][]string{
		{"daemon", "--cache-size", "lots"},
		{"daemon", "--max-upload-rate", "fast"},
		{"daemon", "--max-seeds", "-1"},
		{"daemon", "extra"},
	} {
		if code, _, stderr := runCmd(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, stderr)
		}
	}
}
