package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/cdn"
)

func TestCDNUsageErrors(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	os.WriteFile(key, []byte("not a key"), 0o600)
	base := []string{"cdn", "--listen", "127.0.0.1:0", "--cache-dir", dir}
	for _, args := range [][]string{
		{"extra"},
		{"--origin", "www.example.com"},
		{"--origin", "www.example.com=ftp://10.0.0.5"},
		{"--origin", "www.example.com=http://10.0.0.5/path"},
		{"--origin", "a=http://x", "--origin", "a=http://y"},
		{"--origin", "host:80=http://x"},
		{"--allow-origin", "http://x/"},
		{"--allow-origin", "x:99999"},
		{"--allow", "10.0.0.0/33"},
		{"--allow", "somewhere"},
		{"--nodes", "10.0.0.1"},
		{"--nodes", "10.0.0.1:0"},
		{"--nodes", "127.0.0.1:1,:2"},
		{"--key", key},
		{"--key", filepath.Join(dir, "missing")},
		{"--cache-size", "0"},
		{"--chunk-size", "1KiB"},
		{"--max-peers", "-1"},
		{"--listen", "nowhere"},
		{"--no-such-flag"},
	} {
		var stderr bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr,
			ready: func(string) { t.Errorf("cdn %q started", args) }}
		if code := run(t.Context(), append(base, args...), e); code != exitUsage {
			t.Errorf("cdn %q: exit %d, want %d: %s", args, code, exitUsage, stderr.String())
		}
	}
	var stderr bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr}
	if code := run(t.Context(), []string{"cdn", "--listen", "127.0.0.1:0"}, e); code != exitUsage || !strings.Contains(stderr.String(), "--cache-dir") {
		t.Errorf("cdn without --cache-dir: exit %d: %s", code, stderr.String())
	}
}

// TestCDNFrontsServe: a node in front of "stampede serve" answers by URL
// prefix in chunks checked against the origin's manifest, and refuses
// what it must.
func TestCDNFrontsServe(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("stampede cdn "), 100_000)
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := func(args ...string) string {
		t.Helper()
		var stderr lockedBuffer
		addrc := make(chan string, 1)
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr, ready: func(a string) { addrc <- a }}
		done := make(chan int, 1)
		go func() { done <- run(ctx, args, e) }()
		select {
		case a := <-addrc:
			return a
		case code := <-done:
			t.Fatalf("%q exited %d: %s", args, code, stderr.String())
		}
		return ""
	}
	origin := start("serve", dir, "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(), "--no-tracker")
	node := start("cdn", "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(), "--allow-origin", origin, "-q")

	res, err := http.Get("http://" + node + "/http://" + origin + "/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || !bytes.Equal(body, data) {
		t.Fatalf("GET through the node: %s, %d bytes, %v", res.Status, len(body), err)
	}
	if res.Header.Get(cdn.Header) != "chunks" || res.Header.Get(cdn.CheckHeader) != "manifest" {
		t.Errorf("answered %q, checked by %q; want chunks, manifest", res.Header.Get(cdn.Header), res.Header.Get(cdn.CheckHeader))
	}
	res, err = http.Get("http://" + node + "/http://example.com/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("an origin not allowed: %s", res.Status)
	}
	c, err := net.Dial("tcp", node)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT "+origin+" HTTP/1.1\r\nHost: "+origin+"\r\n\r\n")
	cr, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || cr.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("CONNECT: %v %v", cr, err)
	}
}
