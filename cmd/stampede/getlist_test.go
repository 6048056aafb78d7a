package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// jsonLines decodes --json's output for several URLs: one object a line.
func jsonLines(t *testing.T, stdout string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for line := range strings.Lines(stdout) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("--json line %q: %v\nall: %s", line, err, stdout)
		}
		objs = append(objs, m)
	}
	return objs
}

// TestGetSeveralURLs: URLs from the command line and -i are downloaded
// one after another into --output-dir (made if missing); a failure does
// not stop the rest, the exit code is the first failure's, each URL has
// its line on stderr and its object, one per line, with --json.
func TestGetSeveralURLs(t *testing.T) {
	www := t.TempDir()
	a, b := randomBytes(1<<20, 31), randomBytes(1<<20+1, 32)
	writeFile(t, www, "a", a)
	writeFile(t, www, "b", b)
	base := startServe(t, www)
	dir := filepath.Join(t.TempDir(), "new", "dir")
	list := filepath.Join(t.TempDir(), "list")
	os.WriteFile(list, []byte("# the rest\n\n"+base+"/b\r\n   # indented comment\n"+"http://"+closedAddr()+"/c\n"), 0o644)
	code, stdout, stderr := runCmd(t, "get", "--json", "--retries", "0", "-P", dir, base+"/a", base+"/missing", "-i", list)
	if code != exitServer {
		t.Errorf("exit %d, want %d (the 404, the first failure, not the refused connection after it): %s", code, exitServer, stderr)
	}
	sameFile(t, filepath.Join(dir, "a"), a)
	sameFile(t, filepath.Join(dir, "b"), b)
	objs := jsonLines(t, stdout)
	if len(objs) != 4 {
		t.Fatalf("%d --json objects, want one per URL: %s", len(objs), stdout)
	}
	for i, want := range []struct {
		url  string
		exit float64
	}{{base + "/a", 0}, {base + "/missing", exitServer}, {base + "/b", 0}, {"/c", exitNetwork}} {
		o := objs[i]
		if !strings.HasSuffix(o["url"].(string), want.url) || o["exit_code"] != nil && o["exit_code"] != want.exit ||
			want.exit == 0 && o["verified"] != "merkle" || want.exit != 0 && (o["exit_code"] != want.exit || o["error"] == nil) {
			t.Errorf("object %d: %v, want url %s, exit %v", i, o, want.url, want.exit)
		}
	}
	for _, want := range []string{"a: 1.0 MiB in", "b: 1.0 MiB in", "stampede get: missing: ", "stampede get: c: ", "2 of 4 downloads failed"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr has no %q:\n%s", want, stderr)
		}
	}
	if strings.Index(stderr, "a: 1.0 MiB") > strings.Index(stderr, "b: 1.0 MiB") {
		t.Errorf("b was done before a: %s", stderr)
	}
}

// TestGetInputStdin: -i - reads the list from standard input, and a list
// of one URL still prints --json as lines, so that a script's parsing does
// not depend on the list's length.
func TestGetInputStdin(t *testing.T) {
	www := t.TempDir()
	writeFile(t, www, "f", []byte("from a list"))
	base := startServe(t, www)
	dir := t.TempDir()
	code, stdout, stderr := runGetEnv(t, "#list\n"+base+"/f\n", nil, "-q", "--json", "-i", "-", "--output-dir", dir)
	if code != 0 {
		t.Fatalf("-i -: exit %d: %s", code, stderr)
	}
	sameFile(t, filepath.Join(dir, "f"), []byte("from a list"))
	if objs := jsonLines(t, stdout); len(objs) != 1 || strings.Count(stdout, "\n") != 1 {
		t.Errorf("--json with -i: %q, want one line", stdout)
	}
}

// TestGetOutputDirAndCreateDirs: --output-dir holds a relative -o, not an
// absolute one; --create-dirs makes -o's missing directories.
func TestGetOutputDirAndCreateDirs(t *testing.T) {
	www := t.TempDir()
	data := []byte("placed")
	writeFile(t, www, "f", data)
	base := startServe(t, www)
	dir, abs := t.TempDir(), filepath.Join(t.TempDir(), "abs")
	for _, tc := range []struct {
		args []string
		path string
	}{
		{[]string{"-P", dir, "-o", "rel"}, filepath.Join(dir, "rel")},
		{[]string{"-P", dir, "-o", abs}, abs},
		{[]string{"-o", filepath.Join(dir, "x/y/z"), "--create-dirs"}, filepath.Join(dir, "x/y/z")},
		{[]string{"-P", dir, "-o", "p/q", "--create-dirs"}, filepath.Join(dir, "p/q")},
	} {
		code, _, stderr := runCmd(t, append([]string{"get", "-q", base + "/f"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("get %v: exit %d: %s", tc.args, code, stderr)
		}
		sameFile(t, tc.path, data)
	}
	if code, _, _ := runCmd(t, "get", "-q", base+"/f", "-o", filepath.Join(dir, "no/such/f")); code != exitIO {
		t.Errorf("a missing directory without --create-dirs: exit %d, want %d", code, exitIO)
	}
}

// TestGetNoClobber: an existing file is left alone, said so, and counted
// a success, without a request to the server; a missing one is downloaded.
func TestGetNoClobber(t *testing.T) {
	base, rc := startRecorded(t, []byte("the server's"))
	dir := t.TempDir()
	mine := filepath.Join(dir, "f")
	os.WriteFile(mine, []byte("mine"), 0o644)
	code, stdout, stderr := runCmd(t, "get", "--no-clobber", "--json", base+"/f", "-o", mine)
	if code != 0 || !strings.Contains(stderr, "already there; not downloaded") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	sameFile(t, mine, []byte("mine"))
	if n := len(rc.all()); n != 0 {
		t.Errorf("%d requests to the server for a file left alone", n)
	}
	var o map[string]any
	if err := json.Unmarshal([]byte(stdout), &o); err != nil || o["skipped"] != "exists" || o["path"] != mine {
		t.Errorf("--json: %s (%v)", stdout, err)
	}
	code, _, stderr = runCmd(t, "get", "-q", "--no-clobber", "-P", dir, base+"/f", base+"/g")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	sameFile(t, mine, []byte("mine"))
	sameFile(t, filepath.Join(dir, "g"), []byte("the server's"))
}

// TestGetMaxTime: --max-time ends a download that takes longer with exit
// 28, keeping FILE.part, which the next run resumes.
func TestGetMaxTime(t *testing.T) {
	www := t.TempDir()
	data := randomBytes(3<<20, 33)
	writeFile(t, www, "f", data)
	base := startServe(t, www, "--rate", "2MB")
	out := filepath.Join(t.TempDir(), "f")
	code, _, stderr := runCmd(t, "get", "--max-time", "700ms", base+"/f", "-o", out)
	if code != exitMaxTime || !strings.Contains(stderr, "--max-time 700ms reached; "+out+".part is kept") {
		t.Fatalf("exit %d, want %d: %s", code, exitMaxTime, stderr)
	}
	if _, err := os.Stat(out + ".part"); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCmd(t, "get", base+"/f", "-o", out, "--max-time", "1m")
	if code != 0 || !strings.Contains(stderr, "resumed from f.part") {
		t.Fatalf("the resume: exit %d: %s", code, stderr)
	}
	sameFile(t, out, data)
}

// TestGetBadInputs: each is a usage error (exit 2), found before any
// request is sent, and none prints a credential.
func TestGetBadInputs(t *testing.T) {
	base, rc := startRecorded(t, []byte("x"))
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o644)
	badNetrc := filepath.Join(dir, "netrc")
	os.WriteFile(badNetrc, []byte("machine"), 0o600)
	list := func(body string) string {
		p := filepath.Join(t.TempDir(), "list")
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	f := base + "/f"
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{f, "-H", "Authorization Bearer s3cret"}, "no colon"},
		{[]string{f, "-H", "Bad Name: s3cret"}, "not a header name"},
		{[]string{f, "-H", "Range: bytes=0-1"}, "stampede sets Range itself"},
		{[]string{f, "-u", "s3cret"}, "does not prompt"},
		{[]string{f, "--cacert", filepath.Join(dir, "none.pem")}, "no such file"},
		{[]string{f, "--cacert", notPEM}, "no PEM certificate"},
		{[]string{f, "--proxy", "http://"}, "not a URL"},
		{[]string{f, "--proxy", "ftp://proxy:21"}, "want an http://"},
		{[]string{f, "--proxy", "http://u:s3cret@[::1"}, "not a URL"},
		{[]string{f, "--max-time", "-1s"}, "must not be negative"},
		{[]string{f, "--connect-timeout", "-1s"}, "must not be negative"},
		{[]string{f, f + "2", "-o", filepath.Join(dir, "o")}, "-o names one file"},
		{[]string{f, "-i", list(f + "2\n"), "-o", filepath.Join(dir, "o")}, "-o names one file"},
		{[]string{f, f + "2", "--sha256", strings.Repeat("0", 64)}, "one file's digest"},
		{[]string{f, base + "/d/f", "-P", dir}, "would both be saved as"},
		{[]string{"-i", filepath.Join(dir, "no-list")}, "no such file"},
		{[]string{"-i", list("# nothing\n\n")}, "no URL in"},
		{[]string{"-i", list(f + "\n  out=x\n")}, ":2: an indented line is an aria2 option"},
		{[]string{"-i", list(f + "\t" + f + "2\n")}, ":1: one URL per line"},
		{[]string{"-i", list(f + "\nftp://x/y\n")}, ":2: invalid request: URL \"ftp://x/y\": scheme must be http or https"},
		{[]string{f, "--netrc-file", filepath.Join(dir, "none")}, "no such file"},
		{[]string{f, "--netrc-file", badNetrc}, "malformed"},
		{[]string{f, "--netrc"}, "no HOME"},
		{[]string{f, f + "2", "--daemon"}, "--daemon takes one URL"},
		{[]string{strings.Replace(f, "http://", "http://u:s3cret@", 1), "--daemon"}, "no user:password@"},
		{nil, "no URL"},
	} {
		code, _, stderr := runCmd(t, append([]string{"get", "-q", "-P", dir}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.says) {
			t.Errorf("get %q: exit %d, %q; want %d saying %q", tc.args, code, stderr, exitUsage, tc.says)
		}
		if strings.Contains(stderr, "s3cret") {
			t.Errorf("get %q printed the secret: %s", tc.args, stderr)
		}
	}
	if n := len(rc.all()); n != 0 {
		t.Errorf("%d requests sent despite the errors", n)
	}
}

// TestURLParseErrorsHidePasswords: a URL that does not parse is named in
// the error without its password, on the command line and in -i lists.
func TestURLParseErrorsHidePasswords(t *testing.T) {
	list := filepath.Join(t.TempDir(), "list")
	os.WriteFile(list, []byte("http://bob:hunter2@[::1/\n"), 0o600)
	for _, args := range [][]string{{"get", "http://user:hunter2@host:bad/x"}, {"get", "-i", list}} {
		code, _, stderr := runCmd(t, args...)
		if code != exitUsage || strings.Contains(stderr, "hunter2") || !strings.Contains(stderr, "***@") {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
}

// TestControlCharactersNotPrinted: a remote name with a terminal's escape
// sequences is saved and shown escaped.
func TestControlCharactersNotPrinted(t *testing.T) {
	www := t.TempDir()
	writeFile(t, www, "evil\x1b]0;x\x07z", []byte("data"))
	base := startServe(t, www)
	t.Chdir(t.TempDir())
	code, _, stderr := runCmd(t, "get", base+"/evil%1B]0;x%07z")
	if code != 0 || strings.ContainsAny(stderr, "\x1b\x07") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat("evil%1B]0;x%07z"); err != nil {
		t.Errorf("saved as: %v", err)
	}
}
