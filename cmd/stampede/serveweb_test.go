package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/stun/v3"

	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/webpeer"
)

// TestServeWebPeer: serve answers the browser peer's paths, its
// peer.json names its STUN server, the kill switch turns it off, and the
// tracker takes WebSocket announces through the origin's handler.
func TestServeWebPeer(t *testing.T) {
	www := t.TempDir()
	writeFile(t, www, "big.bin", []byte(strings.Repeat("x", 100<<10)))
	stunPort := freeUDPPort(t)
	base := startServe(t, www, "--stun", "127.0.0.1:"+stunPort)
	get := func(path string) (*http.Response, string) {
		t.Helper()
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res, string(b)
	}
	if res, body := get(webpeer.WorkerPath); res.StatusCode != 200 || res.Header.Get("Service-Worker-Allowed") != "/" || !strings.Contains(body, "addEventListener('fetch'") {
		t.Errorf("worker: %s %v", res.Status, res.Header)
	}
	if res, _ := get(webpeer.PeerPath); res.StatusCode != 200 {
		t.Errorf("peer.js: %s", res.Status)
	}
	_, body := get(webpeer.ConfigPath)
	var doc struct {
		Enabled bool     `json:"enabled"`
		ICE     []string `json:"ice_servers"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || !doc.Enabled || len(doc.ICE) != 1 || doc.ICE[0] != "stun:127.0.0.1:"+stunPort {
		t.Errorf("peer.json: %s, %v", body, err)
	}
	// The STUN server peer.json names answers there.
	if err := stunBinding("127.0.0.1:" + stunPort); err != nil {
		t.Errorf("STUN at peer.json's port: %v", err)
	}

	// The tracker's WebSocket, through the origin's handler.
	_, mbody := get("/.well-known/stampede/manifest/big.bin")
	var m struct {
		Root string `json:"root"`
		Size int64  `json:"size"`
	}
	json.Unmarshal([]byte(mbody), &m)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+tracker.WellKnownPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	msg := `{"action":"announce","root":"` + m.Root + `","size":` + strings.TrimSpace(jsonNumber(m.Size)) + `,"peer_id":"0123456789abcdef0123456789abcdef","left":0,"event":"started"}`
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	_, b, err := c.Read(ctx)
	if err != nil || !strings.Contains(string(b), `"swarm_size":1`) {
		t.Errorf("announce over WebSocket: %s, %v", b, err)
	}

	secret := filepath.Join(t.TempDir(), "turn-secret")
	os.WriteFile(secret, []byte("s3cret\n"), 0o600)
	turnPort := freeUDPPort(t)
	turn := startServe(t, www, "--turn", "127.0.0.1:"+turnPort, "--turn-secret-file", secret)
	res, err := http.Get(turn + webpeer.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), `"urls":"turn:127.0.0.1:`+turnPort+`"`) || !strings.Contains(string(b), `"credential":`) {
		t.Errorf("peer.json with --turn: %s", b)
	}

	off := startServe(t, www, "--web-peers", "off")
	res, err = http.Get(off + webpeer.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != `{"enabled":false}` {
		t.Errorf("peer.json with --web-peers off: %s", b)
	}
}

// TestServeWebPortZero: --stun and --turn want fixed ports, since
// peer.json names them to the visitors: port 0 is a usage error.
func TestServeWebPortZero(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("s3cret\n"), 0o600)
	for _, args := range [][]string{
		{"--stun", ":0"},
		{"--turn", "192.0.2.1:0", "--turn-secret-file", secret},
	} {
		var stderr strings.Builder
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr,
			ready: func(string) { t.Errorf("serve %q started", args) }}
		if code := run(t.Context(), append([]string{"serve", "--cache-dir", t.TempDir(), dir}, args...), e); code != exitUsage || !strings.Contains(stderr.String(), "fixed port") {
			t.Errorf("serve %q: exit %d, want %d: %s", args, code, exitUsage, stderr.String())
		}
	}
}

func jsonNumber(v int64) string { b, _ := json.Marshal(v); return string(b) }

// freeUDPPort is a UDP port of loopback free a moment ago: --stun and
// --turn take fixed ports, since peer.json names them.
func freeUDPPort(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
	return port
}

// stunBinding sends a STUN binding request to addr and checks that a
// success answers it.
func stunBinding(addr string) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	req := stun.MustBuild(stun.TransactionID, stun.BindingRequest)
	var res stun.Message
	for range 20 { // the server starts beside serve's HTTP listener: a few tries
		c.SetDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Write(req.Raw); err != nil {
			return err
		}
		b := make([]byte, 1500)
		n, err := c.Read(b)
		if err != nil {
			continue
		}
		res.Raw = b[:n]
		if err := res.Decode(); err != nil {
			return err
		}
		if res.Type != stun.BindingSuccess {
			return fmt.Errorf("answered %v", res.Type)
		}
		return nil
	}
	return errors.New("no answer")
}
