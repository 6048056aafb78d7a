package main

import (
	"crypto/ed25519"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/sign"
	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/wire"
)

// writeKey makes a key pair in dir and returns the private key and the
// paths of its files.
func writeKey(t *testing.T, dir, name string) (priv ed25519.PrivateKey, keyPath, pubPath string) {
	t.Helper()
	priv = sign.GenerateKey()
	keyPath, pubPath = filepath.Join(dir, name), filepath.Join(dir, name+".pub")
	if err := os.WriteFile(keyPath, sign.MarshalPrivateKey(priv), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubPath, sign.MarshalPublicKey(priv.Public().(ed25519.PublicKey)), 0o644); err != nil {
		t.Fatal(err)
	}
	return priv, keyPath, pubPath
}

// TestPrivateSwarm: an origin with --sign-key --private. get --trust-key
// takes its signed manifest and trades with the other peers, which its
// tokens admit; its tracker refuses an announce without a token, and a
// peer refuses a handshake without one.
func TestPrivateSwarm(t *testing.T) {
	keys := t.TempDir()
	priv, key, pub := writeKey(t, keys, "origin.key")
	_, _, otherPub := writeKey(t, keys, "other.key")
	www := t.TempDir()
	data := randomBytes(3<<20+5, 31)
	writeFile(t, www, "f.bin", data)
	base := startServe(t, www, "--sign-key", key, "--private")
	m, err := manifest.FromReaderAt(strings.NewReader(string(data)), int64(len(data)), "f.bin", 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	outA, outB := filepath.Join(dir, "a.bin"), filepath.Join(dir, "b.bin")

	// A seeds for a while; B, started once A is complete, trades with it.
	a := startCmd(t, t.Context(), "get", base+"/f.bin", "-o", outA, "-q", "--json", "--trust-key", pub,
		"--peer-listen", "127.0.0.1:0", "--seed-time", "8s")
	waitFor(t, "the first download to complete", func() bool { _, err := os.Stat(outA); return err == nil })
	sameFile(t, outA, data)

	// The tracker: no token, 403; a token of ours (the test holds the
	// origin's key), A's address.
	announceURL := base + tracker.WellKnownPath
	me := sign.GenerateKey()
	myID := sign.PeerIDOf(me.Public().(ed25519.PublicKey))
	myToken := sign.Issue(priv, m.Root, m.Size, myID, time.Now().Add(time.Minute))
	req := tracker.AnnounceRequest{Root: m.Root, Size: m.Size, ID: tracker.PeerID(myID), Left: m.Size, NumWant: 50}
	if _, err := tracker.Announce(t.Context(), http.DefaultClient, announceURL, req); err == nil || !strings.Contains(err.Error(), "private") {
		t.Errorf("an announce without a token: %v, want refused as private", err)
	}
	req.Sign(me, myToken, time.Now())
	resp, err := tracker.Announce(t.Context(), http.DefaultClient, announceURL, req)
	if err != nil || len(resp.Peers) != 1 {
		t.Fatalf("an announce with a token: %v, %+v; want A", err, resp)
	}

	// A's peer port: without a proof, GOODBYE unauthorized and nothing
	// else; with our token but another key (a token seen on the wire),
	// the same; with ours, in.
	g, _ := wire.NewGeometry(m.Size, m.PieceSize)
	dialA := func(p wire.Private) (wire.Message, error) {
		t.Helper()
		c, err := net.Dial("tcp", resp.Peers[0].Addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hello := wire.Handshake{Root: m.Root, Size: uint64(m.Size), PeerID: wire.PeerID(myID), Private: p}
		if _, err := wire.Exchange(t.Context(), c, hello); err != nil {
			return nil, err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		return wire.NewReader(c, g).Read()
	}
	for name, p := range map[string]wire.Private{
		"no proof":         nil,
		"a stolen token":   testPrivate{key: sign.GenerateKey(), token: myToken, m: m},
		"an expired token": testPrivate{key: me, token: sign.Issue(priv, m.Root, m.Size, myID, time.Now()), m: m},
		"another's origin": testPrivate{key: me, token: sign.Issue(sign.GenerateKey(), m.Root, m.Size, myID, time.Now().Add(time.Minute)), m: m},
	} {
		msg, err := dialA(p)
		bye, ok := msg.(*wire.Goodbye)
		if !(ok && bye.Reason == wire.GoodbyeUnauthorized) && !(err != nil && strings.Contains(err.Error(), "unauthorized")) {
			t.Errorf("%s: A answered %#v, %v; want GOODBYE unauthorized", name, msg, err)
		}
	}
	if msg, err := dialA(testPrivate{key: me, token: myToken, m: m}); err != nil {
		t.Errorf("a peer with its token: %v", err)
	} else if _, ok := msg.(*wire.HaveSet); !ok {
		t.Errorf("a peer with its token was first sent %#v, want A's HAVESET", msg)
	}

	b := startCmd(t, t.Context(), "get", base+"/f.bin", "-o", outB, "-q", "--json", "--peer-listen", "127.0.0.1:0")
	resB, _ := b.result(t, "the second get")
	sameFile(t, outB, data)
	if resB.BytesFromPeers == 0 {
		t.Errorf("B took nothing from A: %+v", resB)
	}
	if c := a.wait(t, "the first get"); c.code != 0 {
		t.Errorf("the first get: exit %d", c.code)
	}

	// A seed of the file joins with a token of its own; C takes from it.
	seed := startCmd(t, t.Context(), "seed", outA, "--url", base+"/f.bin", "--peer-listen", "127.0.0.1:0")
	waitFor(t, "the seed to announce", func() bool {
		req.Sign(me, myToken, time.Now())
		resp, err := tracker.Announce(t.Context(), http.DefaultClient, announceURL, req)
		return err == nil && len(resp.Peers) > 0
	})
	outC := filepath.Join(dir, "c.bin")
	c := startCmd(t, t.Context(), "get", base+"/f.bin", "-o", outC, "-q", "--json", "--peer-listen", "127.0.0.1:0")
	resC, _ := c.result(t, "the third get")
	sameFile(t, outC, data)
	if resC.BytesFromPeers == 0 {
		t.Errorf("C took nothing from the seed: %+v (seed: %s)", resC, seed.stderr.String())
	}

	// The wrong key, and an origin that does not sign: exit 9.
	if code, _, stderr := runCmd(t, "get", base+"/f.bin", "-o", filepath.Join(dir, "x.bin"), "-q", "--trust-key", otherPub); code != exitVerify || !strings.Contains(stderr, "signature") {
		t.Errorf("get --trust-key of another key: exit %d, %s", code, stderr)
	}
	plain := startServe(t, www)
	if code, _, stderr := runCmd(t, "get", plain+"/f.bin", "-o", filepath.Join(dir, "d.bin"), "-q", "--trust-key", pub); code != exitVerify || !strings.Contains(stderr, "not signed") {
		t.Errorf("get --trust-key from an origin that does not sign: exit %d, %s", code, stderr)
	}
	for _, p := range []string{"x.bin", "d.bin", "x.bin.part", "d.bin.part"} {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind after a refused manifest: %v", p, err)
		}
	}
}

// TestPrivateFlags: serve's and get's key flags refuse what cannot work.
func TestPrivateFlags(t *testing.T) {
	dir := t.TempDir()
	_, key, pub := writeKey(t, dir, "k")
	open := filepath.Join(dir, "open.key")
	os.WriteFile(open, sign.MarshalPrivateKey(sign.GenerateKey()), 0o644)
	for _, args := range [][]string{
		{"serve", dir, "--private"},
		{"serve", dir, "--sign-key", open},
		{"serve", dir, "--sign-key", pub},
		{"serve", dir, "--sign-key", key, "--token-ttl", "0s"},
		{"get", "http://127.0.0.1:1/f", "--trust-key", filepath.Join(dir, "missing")},
		{"get", "http://127.0.0.1:1/f", "--trust-key", "ed25519:short"},
		{"tracker", "--trust-key", "nonsense"},
	} {
		if code, _, stderr := runCmd(t, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d: %s", args, code, exitUsage, stderr)
		}
	}
}

// testPrivate is a private swarm's side of a handshake as node's, for a
// test that holds the keys.
type testPrivate struct {
	key   ed25519.PrivateKey
	token sign.Token
	m     *manifest.Manifest
}

func (p testPrivate) Prove(mine, theirs wire.Handshake) ([]byte, error) {
	return sign.Prove(p.key, p.token, sign.ProofContext{Root: p.m.Root, Size: p.m.Size, Prover: mine.PeerID, Hearer: theirs.PeerID, Challenge: theirs.Challenge}), nil
}

func (p testPrivate) Admit(mine, theirs wire.Handshake, auth []byte) error { return nil }

// TestPrivateSwarmDaemon: the daemon downloads from a private swarm's
// origin and seeds it on its one peer port (the host reads a handshake
// before it routes it), where a get with a token takes pieces from it.
func TestPrivateSwarmDaemon(t *testing.T) {
	_, key, _ := writeKey(t, t.TempDir(), "origin.key")
	www := t.TempDir()
	data := randomBytes(2<<20+9, 33)
	writeFile(t, www, "d.bin", data)
	base := startServe(t, www, "--sign-key", key, "--private")
	state, dl := t.TempDir(), t.TempDir()
	sock, _ := startDaemon(t, "daemon", "--state-dir", state, "--peer-listen", "127.0.0.1:0", "--allow-dir", dl, "-q")
	out := filepath.Join(dl, "got.bin")
	if code, _, stderr := runCmd(t, "get", "--daemon", "--api", sock, "-q", base+"/d.bin", "-o", out); code != 0 {
		t.Fatalf("get --daemon: exit %d: %s", code, stderr)
	}
	sameFile(t, out, data)
	mine := filepath.Join(t.TempDir(), "mine.bin")
	r := startCmd(t, t.Context(), "get", base+"/d.bin", "-o", mine, "-q", "--json", "--peer-listen", "127.0.0.1:0")
	res, _ := r.result(t, "the get")
	sameFile(t, mine, data)
	if res.BytesFromPeers == 0 {
		t.Errorf("the get took nothing from the daemon's seed: %+v", res)
	}
}
