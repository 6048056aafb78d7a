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
	"time"

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

	res := getThrough(t, "http://"+node+"/http://"+origin+"/big.bin", data)
	if res.Header.Get(cdn.Header) != "chunks" || res.Header.Get(cdn.CheckHeader) != "manifest" {
		t.Errorf("answered %q, checked by %q; want chunks, manifest", res.Header.Get(cdn.Header), res.Header.Get(cdn.CheckHeader))
	}
	res, err := http.Get("http://" + node + "/http://example.com/big.bin")
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

// TestCDNOriginNameThroughDNS: with --dns, a node looks its origin's name
// up through its own forwarder; its resolver stalls, so the answer is the
// peer's (stampede dns), and the file comes through. The name is one no
// system resolver knows.
func TestCDNOriginNameThroughDNS(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("stampede cdn dns "), 20_000)
	if err := os.WriteFile(filepath.Join(dir, "f.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	origin, _ := startDaemon(t, "serve", dir, "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(), "--no-tracker", "-q")
	_, port, _ := net.SplitHostPort(origin)
	const name = "origin.stampede.test"
	healthy := startResolver(t, answerEvery(net.IPv4(127, 0, 0, 1)))
	sick := startDNSUpstream(t, true)
	peer := startDNSCommand(t, 1, "--listen", "127.0.0.2:0", "--upstream", healthy, "-q")[0]
	node, _ := startDaemon(t, "cdn", "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(), "--allow-origin", name+":"+port,
		"--dns", "127.0.0.3:0", "--dns-upstream", sick, "--dns-peers", peer, "-q")

	getThrough(t, "http://"+node+"/http://"+name+":"+port+"/f.bin", data)
	base := "http://" + node
	if got := metric(t, base, `stampede_dns_lookups_total{by="peer"}`); got < 1 {
		t.Errorf("origin name lookups won by the peer: %v, want at least 1", got)
	}
	if got := metric(t, base, `stampede_dns_lookups_total{by="local"}`); got != 0 {
		t.Errorf("lookups answered by the stalled resolver: %v", got)
	}
}

func TestCDNDNSUsageErrors(t *testing.T) {
	dir := t.TempDir()
	base := []string{"cdn", "--listen", "127.0.0.1:0", "--cache-dir", dir}
	for _, args := range [][]string{
		{"--dns-peers", "127.0.0.1:5353"},
		{"--dns-upstream", "127.0.0.1"},
		{"--dns", "nowhere", "--dns-upstream", "127.0.0.1"},
		{"--dns", "127.0.0.1:0", "--dns-upstream", "host:port"},
		{"--dns", "127.0.0.1:0", "--dns-upstream", "127.0.0.1", "--dns-peers", "nowhere"},
		{"--dns", "127.0.0.1:0", "--dns-upstream", "127.0.0.1", "--nodes", "127.0.0.1:8480,127.0.0.2:8480"},
	} {
		var stderr bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr,
			ready: func(string) { t.Errorf("cdn %q started", args) }}
		if code := run(t.Context(), append(base, args...), e); code != exitUsage {
			t.Errorf("cdn %q: exit %d, want %d: %s", args, code, exitUsage, stderr.String())
		}
	}
}

// getThrough gets u, which must answer 200 with want.
func getThrough(t *testing.T, u string, want []byte) *http.Response {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || !bytes.Equal(body, want) {
		t.Fatalf("GET %s: %s, %d bytes, %v", u, res.Status, len(body), err)
	}
	return res
}

// TestCDNSelfName: a node finds its own entry on a --nodes list that
// names every node, by its --listen address or, listening on every
// address, by its port on one of this machine's addresses.
func TestCDNSelfName(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8480}
	wild := &net.TCPAddr{IP: net.IPv4zero, Port: 8480}
	for _, tt := range []struct {
		listen string
		bound  *net.TCPAddr
		nodes  []string
		want   string // "" for a usage error
	}{
		{"127.0.0.1:8480", bound, []string{"192.0.2.1:8480", "127.0.0.1:8480"}, "127.0.0.1:8480"},
		{"127.0.0.1:8480", bound, nil, "127.0.0.1:8480"},
		{"127.0.0.1:8480", bound, []string{"192.0.2.1:8480"}, "127.0.0.1:8480"}, // not on the list: warned
		{":8480", wild, []string{"192.0.2.1:8480", "127.0.0.1:8480"}, "127.0.0.1:8480"},
		{":8480", wild, []string{"192.0.2.1:8480", "127.0.0.1:9999"}, ""},
		{":8480", wild, nil, "127.0.0.1:8480"},
	} {
		got, err := selfName(tt.listen, tt.bound, tt.nodes)
		if tt.want == "" {
			if err == nil {
				t.Errorf("selfName(%s, %v): %q, want a usage error", tt.listen, tt.nodes, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("selfName(%s, %v) = %q, %v; want %q", tt.listen, tt.nodes, got, err, tt.want)
		}
	}
}
