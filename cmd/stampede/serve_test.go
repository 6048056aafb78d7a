package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
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
		{dir, "--rate", "fast"},
		{dir, "--rate", "8Zbit"},
		{dir, "--max-transfers", "0"},
		{dir, "--retry-after", "-1s"},
		{dir, "--retry-after", "soon"},
		{dir, "--no-such-flag"},
		{dir, "--cache-dir", filepath.Join(dir, "cache")}, // never write into DIR
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
	for _, want := range []string{"stampede_origin_transfers_max 4\n", "stampede_origin_rate_limit_bytes 1000000\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("serve exited %d after its context ended: %s", code, stderr.String())
	}
}

func TestServeHelp(t *testing.T) {
	var stdout bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: io.Discard}
	if code := run(t.Context(), []string{"help", "serve"}, e); code != exitOK {
		t.Fatalf("help serve: exit %d", code)
	}
	for _, flag := range []string{"-listen", "-upstream", "-rate", "-max-transfers", "-retry-after", "-cache-dir", "-warm"} {
		if !strings.Contains(stdout.String(), flag) {
			t.Errorf("help serve does not mention %s:\n%s", flag, stdout.String())
		}
	}
}
