package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/wire"
)

// startGateway runs `stampede gateway` in-process until the test ends and
// returns its base URL.
func startGateway(t *testing.T, args ...string) string {
	t.Helper()
	addr, _ := startDaemon(t, append([]string{"gateway", "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(),
		"--peer-listen", "127.0.0.1:0", "-q"}, args...)...)
	return "http://" + addr
}

func TestGatewayCommand(t *testing.T) {
	www := t.TempDir()
	data := randomBytes(1<<20+3, 17)
	writeFile(t, www, "f.bin", data)
	base := startServe(t, www)
	gw := startGateway(t, "--cache-size", "64MiB", "--window", "4MiB", "--max-seeds", "2")

	proxy, _ := url.Parse(gw)
	for _, c := range []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"as a proxy", &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}, base + "/f.bin"},
		{"by prefix", &http.Client{Transport: &http.Transport{Proxy: nil}}, gw + "/" + base + "/f.bin"},
	} {
		resp, err := c.client.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != string(data) {
			t.Fatalf("%s: %d bytes (err %v), want the %d-byte file", c.name, len(body), err, len(data))
		}
		if got := resp.Header.Get("Stampede-Gateway"); got != "swarm" {
			t.Errorf("%s: answered %q, want swarm", c.name, got)
		}
	}
}

func TestGatewayFlags(t *testing.T) {
	for _, args := range [][]string{
		{"gateway", "--cache-size", "lots"},
		{"gateway", "--window", "0"},
		{"gateway", "--max-seeds", "-1"},
		{"gateway", "extra"},
		{"gateway", "--connect-ports", "https"},
		{"gateway", "--connect-ports", "443,0"},
		{"gateway", "--connect-ports", "70000"},
		{"gateway", "--allow-host", "http://gateway.lan"},
		{"gateway", "--allow-host", "gateway.lan:8642"},
		{"daemon", "--connect-ports", ""},
	} {
		if code, _, stderr := runCmd(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, stderr)
		}
	}
	code, stdout, _ := runCmd(t, "help", "gateway")
	if code != 0 || !strings.Contains(stdout, "--cache-size") {
		t.Errorf("help gateway: exit %d:\n%s", code, stdout)
	}
}

// TestGatewayTwoFilesOnePeerPort is the regression test of a gateway given
// a fixed --peer-listen: it used to fail the second file ("address already
// in use"), the first file's node holding the port. Now every file's swarm
// is on that one port: both files come through the swarm, and a peer that
// dials the port with either file's root is taken into that swarm.
func TestGatewayTwoFilesOnePeerPort(t *testing.T) {
	www := t.TempDir()
	files := map[string][]byte{"a.bin": randomBytes(600<<10+1, 21), "b.bin": randomBytes(300<<10+2, 22)}
	for name, data := range files {
		writeFile(t, www, name, data)
	}
	base := startServe(t, www)
	// A fixed port is the point of the test: take one the kernel gives and
	// hand it over (a port is not reused at once).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peerAddr := ln.Addr().String()
	ln.Close()
	addr, _ := startDaemon(t, "gateway", "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(), "--peer-listen", peerAddr, "-q")
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	for name, data := range files {
		resp, err := client.Get("http://" + addr + "/" + base + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(body, data) || resp.Header.Get("Stampede-Gateway") != "swarm" {
			t.Fatalf("%s: %s, %d bytes (err %v), answered %q; want the %d-byte file from the swarm",
				name, resp.Status, len(body), err, resp.Header.Get("Stampede-Gateway"), len(data))
		}
	}
	for name := range files {
		m, err := fetch.Manifest(t.Context(), http.DefaultClient, base+"/"+name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", peerAddr)
		if err != nil {
			t.Fatalf("%s: the peer port: %v", name, err)
		}
		hs := wire.Handshake{Root: m.Root, Size: uint64(m.Size), PeerID: wire.NewPeerID()}
		theirs, err := wire.Exchange(t.Context(), c, hs)
		c.Close()
		if err != nil || theirs.Root != m.Root {
			t.Errorf("%s: handshake on the peer port: %v", name, err)
		}
	}
	// A root it does not hold gets a handshake of no swarm: nothing about
	// what the gateway holds (docs/gateway.md, What the gateway exposes).
	c, err := net.Dial("tcp", peerAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hs := wire.Handshake{Size: 1 << 20, PeerID: wire.NewPeerID()}
	hs.Root[0] = 1
	theirs, err := wire.Exchange(t.Context(), c, hs)
	if !errors.Is(err, wire.ErrWrongSwarm) || theirs.Root != (wire.Handshake{}).Root || theirs.Size != 0 {
		t.Errorf("an unknown root: answered root %x size %d (%v); want a handshake of no swarm", theirs.Root[:8], theirs.Size, err)
	}
}

// TestGatewayAccessFlags: by default the gateway refuses a rebinding Host
// and CONNECT to a port other than 443; --allow-host and --connect-ports
// allow them.
func TestGatewayAccessFlags(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(target.Addr().String())
	connect := func(gw string) (int, string) {
		c, err := net.Dial("tcp", strings.TrimPrefix(gw, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "CONNECT "+target.Addr().String()+" HTTP/1.1\r\nHost: "+target.Addr().String()+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		return resp.StatusCode, string(body)
	}
	withHost := func(gw, host string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, gw+"/metrics", nil)
		req.Host = host
		resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		return resp.StatusCode, string(body)
	}

	gw := startGateway(t)
	if code, body := connect(gw); code != http.StatusForbidden || !strings.Contains(body, "--connect-ports 443,"+port) {
		t.Errorf("CONNECT to port %s: %d %q; want 403 naming --connect-ports", port, code, body)
	}
	if code, body := withHost(gw, "gateway.test"); code != http.StatusForbidden || !strings.Contains(body, "--allow-host gateway.test") {
		t.Errorf("Host gateway.test: %d %q; want 403 naming --allow-host", code, body)
	}

	gw = startGateway(t, "--connect-ports", "443,"+port, "--allow-host", "gateway.test")
	if code, body := connect(gw); code != http.StatusOK {
		t.Errorf("CONNECT to port %s with --connect-ports: %d %q", port, code, body)
	}
	if code, body := withHost(gw, "gateway.test"); code != http.StatusOK {
		t.Errorf("Host gateway.test with --allow-host: %d %q", code, body)
	}
}

// TestGatewayUpstreamProxyFlag: --upstream-proxy takes an http(s) URL, on
// the gateway and on the daemon.
func TestGatewayUpstreamProxyFlag(t *testing.T) {
	for _, args := range [][]string{{"gateway", "--cache-dir", t.TempDir()}, {"daemon", "--state-dir", t.TempDir()}} {
		code, _, stderr := runCmd(t, append(args, "--upstream-proxy", "ftp://proxy:21")...)
		if code != exitUsage || !strings.Contains(stderr, "--upstream-proxy") {
			t.Errorf("%s --upstream-proxy ftp://: exit %d: %s", args[0], code, stderr)
		}
	}
}
