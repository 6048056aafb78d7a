package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

func TestServeFlagErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := "--cache-dir=" + t.TempDir()
	for _, args := range [][]string{
		{},
		{dir, dir},
		{filepath.Join(dir, "missing")},
		{file},
		{dir, "--upstream", "http://example.com/"},
		{"--upstream", "ftp://example.com/"},
		{"--upstream", "example.com"},
		{"--upstream", "http://example.com/", "--warm"},
		{"--upstream", "http://example.com/", "--dotfiles"},
		{"--upstream", "http://example.com/", "--no-listing"},
		{dir, "--rate", "fast"},
		{dir, "--rate", "8Zbit"},
		{dir, "--max-transfers", "0"},
		{dir, "--retry-after", "-1s"},
		{dir, "--retry-after", "soon"},
		{dir, "--overload-transfers", "-1"},
		{dir, "--overload-copies", "0"},
		{dir, "--overload-window", "0s"},
		{dir, "--max-copies", "0.5"},
		{dir, "--max-copies", "-1"},
		{dir, "--max-copies", "0"},
		{dir, "--max-copies", "abc"},
		{dir, "--max-copies", "NaN"},
		{dir, "--max-copies", "inf"},
		{dir, "--max-copies", ""},
		{dir, "--budget-window", "0s"},
		{dir, "--budget-window", "-5m"},
		{dir, "--write-idle-timeout", "-1s"},
		{dir, "--resend-after", "-1s"},
		{dir, "--no-such-flag"},
		{dir, "--web-peers", "maybe"},
		{dir, "--stun", "3478"},
		{dir, "--turn", ":3479"},
		{dir, "--turn", "192.0.2.1:3479"},
		{dir, "--turn", "192.0.2.1:3479", "--turn-secret-file", filepath.Join(dir, "missing")},
		{dir, "--turn-secret-file", file},
		{dir, "--cache-dir", filepath.Join(dir, "cache")}, // never write into DIR
		{dir, "--tracker", "udp://tracker.example:6969"},
		{dir, "--tracker", "tracker.example/announce"},
		{dir, "--tracker", "http://tracker.example/announce", "--no-tracker"},
	} {
		var stderr bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr,
			ready: func(string) { t.Errorf("serve %q started", args) }}
		if code := run(t.Context(), append([]string{"serve", cache}, args...), e); code != exitUsage {
			t.Errorf("serve %q: exit %d, want %d: %s", args, code, exitUsage, stderr.String())
		}
	}
}

// lockedBuffer is a bytes.Buffer the server may write while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestServeRunsUntilCancelled(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	addrc := make(chan string, 1)
	e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr, ready: func(a string) { addrc <- a }}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", dir, "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(),
			"--rate", "8Mbit", "--max-transfers", "4", "--retry-after", "3s", "--warm"}, e)
	}()
	var addr string
	select {
	case addr = <-addrc:
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, stderr.String())
	}
	if want := "serving " + dir + " on http://" + addr + "/\n"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q, want it to say %q", stderr.String(), want)
	}

	res, err := http.Get("http://" + addr + "/hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "hello" || res.Header.Get("Link") == "" || res.Header.Get("Repr-Digest") == "" {
		t.Errorf("GET: %s %q, header %v", res.Status, body, res.Header)
	}
	res, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	// Values are floats in the exposition format (1e+06 is 1,000,000).
	for _, want := range []string{"stampede_origin_transfers_max 4\n", "stampede_origin_rate_limit_bytes_per_second 1e+06\n",
		"stampede_origin_rate_limit_bytes 1e+06\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("serve exited %d after its context ended: %s", code, stderr.String())
	}
}

// With -v serve logs every request, with its Range and Stampede-Reason;
// without it, none.
func TestServeVerbose(t *testing.T) {
	www := t.TempDir()
	writeFile(t, www, "hello.txt", []byte("hello"))
	for _, verbose := range []bool{false, true} {
		args := []string{www}
		if verbose {
			args = append(args, "-v")
		}
		base, stderr := startServeLog(t, args...)
		req, _ := http.NewRequest(http.MethodGet, base+"/hello.txt", nil)
		req.Header.Set("Range", "bytes=1-2")
		req.Header.Set(contract.ReasonHeader, "retry-late")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		var line string
		for l := range strings.Lines(stderr.String()) {
			if strings.Contains(l, "msg=request method=GET path=/hello.txt ") {
				line = l
			}
		}
		if !verbose {
			if line != "" {
				t.Errorf("without -v: logged %q", line)
			}
			continue
		}
		for _, w := range []string{"status=206", "bytes=2", `range="bytes=1-2"`, "reason=retry-late"} {
			if !strings.Contains(line, w) {
				t.Errorf("-v: request line %q lacks %q; stderr:\n%s", line, w, stderr.String())
			}
		}
	}
}

func TestServeHelp(t *testing.T) {
	var stdout bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: io.Discard}
	if code := run(t.Context(), []string{"help", "serve"}, e); code != exitOK {
		t.Fatalf("help serve: exit %d", code)
	}
	for _, flag := range []string{"--listen", "--upstream", "--rate", "--max-transfers", "--retry-after", "--cache-dir", "--warm", "--tracker", "--no-tracker",
		"--overload-transfers", "--overload-copies", "--overload-window", "--max-copies", "--budget-window", "Stampede-Budget", "--write-idle-timeout", "--resend-after", "--dotfiles", "--no-listing", "-q, --quiet", "-v, --verbose", "stampede-bundle"} {
		if !strings.Contains(stdout.String(), flag) {
			t.Errorf("help serve does not mention %s:\n%s", flag, stdout.String())
		}
	}
}

// serveManifest fetches and decodes the manifest of path from the origin at base.
func serveManifest(t *testing.T, base, path string) *manifest.Manifest {
	t.Helper()
	res, err := http.Get(base + contract.ManifestPrefix + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("manifest: %s", res.Status)
	}
	m, err := manifest.Decode(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestServeRunsTracker(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f.bin", randomBytes(100_000, 7))
	base := startServe(t, dir)
	m := serveManifest(t, base, "/f.bin")
	announceURL := base + tracker.WellKnownPath
	if len(m.Trackers) != 1 || m.Trackers[0] != announceURL {
		t.Fatalf("manifest trackers %q, want [%s]", m.Trackers, announceURL)
	}
	var last *tracker.AnnounceResponse
	for port := range uint16(2) {
		a := tracker.AnnounceRequest{Root: m.Root, Size: m.Size, ID: tracker.NewPeerID(), Port: 7000 + port, Left: m.Size, Event: tracker.EventStarted}
		res, err := tracker.Announce(t.Context(), nil, m.Trackers[0], a)
		if err != nil {
			t.Fatal(err)
		}
		last = res
	}
	if last.SwarmSize != 2 || len(last.Peers) != 1 || last.Peers[0].Addr.Port() != 7000 {
		t.Errorf("second peer got %+v", last)
	}
	if got := metric(t, base, "stampede_tracker_peers"); got != 2 {
		t.Errorf("stampede_tracker_peers = %v, want 2", got)
	}
}

func TestServeTrackerFlags(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f.bin", randomBytes(10_000, 8))
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--no-tracker"}, nil},
		{[]string{"--tracker", "http://t.example/announce", "--tracker", "https://u.example/a?k=1"},
			[]string{"http://t.example/announce", "https://u.example/a?k=1"}},
	} {
		base := startServe(t, append([]string{dir}, tc.args...)...)
		if m := serveManifest(t, base, "/f.bin"); !slices.Equal(m.Trackers, tc.want) {
			t.Errorf("%q: trackers %q, want %q", tc.args, m.Trackers, tc.want)
		}
		res, err := http.Get(base + tracker.WellKnownPath)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("%q: the tracker path answers %s, want 404", tc.args, res.Status)
		}
	}
}

// By default serve hides dotfiles and lists directories; --dotfiles and
// --no-listing turn each around.
func TestServeDotfilesAndListing(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, ".env", []byte("SECRET"))
	writeFile(t, dir, "a.txt", []byte("a"))
	for _, tc := range []struct {
		args          []string
		env, listing  int
		listsDotfiles bool
	}{
		{nil, http.StatusNotFound, http.StatusOK, false},
		{[]string{"--dotfiles"}, http.StatusOK, http.StatusOK, true},
		{[]string{"--no-listing"}, http.StatusNotFound, http.StatusNotFound, false},
	} {
		base := startServe(t, append([]string{dir}, tc.args...)...)
		get := func(p string) (int, string) {
			res, err := http.Get(base + p)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			return res.StatusCode, string(body)
		}
		if code, _ := get("/.env"); code != tc.env {
			t.Errorf("%q: GET /.env: %d, want %d", tc.args, code, tc.env)
		}
		code, body := get("/")
		if code != tc.listing {
			t.Errorf("%q: GET /: %d, want %d", tc.args, code, tc.listing)
		}
		if code == http.StatusOK && strings.Contains(body, ".env") != tc.listsDotfiles {
			t.Errorf("%q: the listing of / %q: shows .env %v, want %v", tc.args, body, !tc.listsDotfiles, tc.listsDotfiles)
		}
	}
}

// TestServeOpenTracker: serve's tracker tracks the files it serves (once
// their manifest went out) and refuses others with 403, unless
// --open-tracker.
func TestServeOpenTracker(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f.bin", randomBytes(10_000, 9))
	other := tracker.AnnounceRequest{Root: manifest.Hash{1, 2, 3}, Size: 1000, ID: tracker.NewPeerID(), Port: 7000, Left: 1000}
	for _, open := range []bool{false, true} {
		args := []string{dir}
		if open {
			args = append(args, "--open-tracker")
		}
		base := startServe(t, args...)
		announceURL := base + tracker.WellKnownPath
		_, err := tracker.Announce(t.Context(), nil, announceURL, other)
		if open != (err == nil) {
			t.Errorf("--open-tracker %v: an announce for a file not served: %v", open, err)
		}
		m := serveManifest(t, base, "/f.bin") // a GET of the manifest admits it
		served := tracker.AnnounceRequest{Root: m.Root, Size: m.Size, ID: tracker.NewPeerID(), Port: 7000, Left: m.Size}
		if _, err := tracker.Announce(t.Context(), nil, announceURL, served); err != nil {
			t.Errorf("--open-tracker %v: an announce for the file served: %v", open, err)
		}
	}
	if code, _, stderr := runCmd(t, "serve", dir, "--no-tracker", "--open-tracker"); code != exitUsage {
		t.Errorf("--open-tracker with --no-tracker: exit %d, %s", code, stderr)
	}
}

// TestServeMaxCopies: --max-copies and --budget-window reach the origin
// (its /metrics say so), "off" turns the budget off, and a bad value is
// refused with a word on what is wanted.
func TestServeMaxCopies(t *testing.T) {
	www := t.TempDir()
	writeFile(t, www, "hello.txt", []byte("hello"))
	for _, c := range []struct {
		args   []string
		copies string
		window string
	}{
		{nil, "0", "300"}, // off by default
		{[]string{"--max-copies", "3", "--budget-window", "10m"}, "3", "600"},
		{[]string{"--max-copies", "OFF"}, "0", "300"},
	} {
		base := startServe(t, append([]string{www}, c.args...)...)
		res, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		for _, want := range []string{"stampede_origin_budget_copies " + c.copies + "\n", "stampede_origin_budget_window_seconds " + c.window + "\n"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("serve %q: /metrics lacks %q", c.args, want)
			}
		}
	}
	for arg, want := range map[string]string{"0.5": "at least 1", "abc": "want a number", "0": "off turns the budget off"} {
		var stderr bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr}
		if code := run(t.Context(), []string{"serve", www, "--cache-dir", t.TempDir(), "--max-copies", arg}, e); code != exitUsage || !strings.Contains(stderr.String(), want) {
			t.Errorf("--max-copies %s: exit %d, %q; want %d and %q", arg, code, stderr.String(), exitUsage, want)
		}
	}
}
