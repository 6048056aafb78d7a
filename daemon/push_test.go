package daemon_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/daemon"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/sign"
)

// testCluster is racks × hosts daemons with the push service on loopback,
// hosts named r<rack>h<n>, each with its own destination prefix.
type testCluster struct {
	c      *cluster.Cluster
	priv   ed25519.PrivateKey
	hosts  []string
	agents map[string]*pushAgent
}

type pushAgent struct {
	name   string
	cfg    daemon.Config
	srv    *daemon.Server
	prefix string
	agent  string // the push service's address
}

// listenLoopback opens a TCP listener on loopback.
func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startCluster writes the cluster file (uplinks of uplink, "" for none)
// and starts a daemon per host. configure, if set, adjusts each one's
// push settings.
func startCluster(t *testing.T, racks, hosts int, uplink string, configure func(host string, p *daemon.PushConfig)) *testCluster {
	t.Helper()
	tc := &testCluster{priv: sign.GenerateKey(), agents: map[string]*pushAgent{}}
	var b strings.Builder
	peers, pushes := map[string]net.Listener{}, map[string]net.Listener{}
	for r := range racks {
		var names []string
		for h := range hosts {
			n := fmt.Sprintf("r%dh%d", r, h)
			names = append(names, `"`+n+`"`)
			peers[n], pushes[n] = listenLoopback(t), listenLoopback(t)
			fmt.Fprintf(&b, "[host.%s]\nagent = %q\npeer = %q\n", n, pushes[n].Addr(), peers[n].Addr())
			tc.hosts = append(tc.hosts, n)
		}
		fmt.Fprintf(&b, "[rack.r%d]\nhosts = [%s]\n", r, strings.Join(names, ", "))
		if uplink != "" {
			fmt.Fprintf(&b, "uplink = %q\n", uplink)
		}
	}
	var err error
	if tc.c, err = cluster.Parse([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	for _, n := range tc.hosts {
		a := &pushAgent{name: n, prefix: filepath.Join(t.TempDir(), "srv"), agent: pushes[n].Addr().String()}
		a.cfg = daemon.Config{
			StateDir: t.TempDir(), PeerListener: peers[n], NoAPI: true, Logger: testLogger(t),
			Push: daemon.PushConfig{
				Cluster: tc.c, Key: tc.priv.Public().(ed25519.PublicKey), Host: n, Listener: pushes[n],
				DestPrefixes: []string{a.prefix}, Fallback: time.Minute,
			},
		}
		if configure != nil {
			configure(n, &a.cfg.Push)
		}
		a.start(t)
		tc.agents[n] = a
	}
	return tc
}

func (a *pushAgent) start(t *testing.T) {
	t.Helper()
	srv, err := daemon.Start(t.Context(), a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.srv = srv
	t.Cleanup(func() { srv.Close() })
}

// restart stops the agent and starts it again on the same ports and
// state; between, if set, runs while it is stopped.
func (a *pushAgent) restart(t *testing.T, between func()) {
	t.Helper()
	a.stop(t)
	if between != nil {
		between()
	}
	a.cfg.PeerListener, a.cfg.Push.Listener = relisten(t, a.srv.PeerAddr()), relisten(t, a.srv.PushAddr())
	a.start(t)
}

func (a *pushAgent) stop(t *testing.T) {
	t.Helper()
	if err := a.srv.Close(); err != nil {
		t.Error(err)
	}
}

// relisten listens again on addr, just closed.
func relisten(t *testing.T, addr net.Addr) net.Listener {
	t.Helper()
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr.String()); err == nil {
			return ln
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}

// request is a signed push of o's file name to every host's prefix.
func (tc *testCluster) request(o *testOrigin, name string, hosts []string, then string) cluster.Request {
	data := o.files[name]
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), name)
	if err != nil {
		panic(err)
	}
	r := cluster.Request{Root: m.Root.String(), Size: m.Size, URL: o.url + "/" + name, Dest: "DEST/" + name, Then: then, Hosts: hosts}
	r.Sign(tc.priv, time.Now(), time.Minute)
	return r
}

// send posts req, its destination under agent's prefix (re-signed if
// priv is set), and returns the status code and the body.
func send(t *testing.T, a *pushAgent, req cluster.Request) (int, string) {
	t.Helper()
	return postJSON(t, "http://"+a.agent+"/v1/push", req)
}

// postJSON posts v and returns the status code and the body.
func postJSON(t *testing.T, url string, v any) (int, string) {
	t.Helper()
	body, _ := json.Marshal(v)
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// forAgent is req with its destination under a's prefix, signed.
func (tc *testCluster) forAgent(a *pushAgent, req cluster.Request) cluster.Request {
	r := req
	r.Dest = filepath.Join(a.prefix, strings.TrimPrefix(req.Dest, "DEST/"))
	r.Sign(tc.priv, time.Now(), time.Minute)
	return r
}

func status(t *testing.T, a *pushAgent, id string) (daemon.PushStatus, error) {
	resp, err := http.Get("http://" + a.agent + "/v1/push/" + id)
	if err != nil {
		return daemon.PushStatus{}, err
	}
	defer resp.Body.Close()
	var st daemon.PushStatus
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status %d", resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// waitPushes polls the pushes (host -> id) until every one has ended.
func waitPushes(t *testing.T, tc *testCluster, ids map[string]string, limit time.Duration) map[string]daemon.PushStatus {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		out := map[string]daemon.PushStatus{}
		for h, id := range ids {
			st, err := status(t, tc.agents[h], id)
			if err == nil && (st.State == daemon.PushDone || st.State == daemon.PushFailed) {
				out[h] = st
			}
		}
		if len(out) == len(ids) {
			return out
		}
		if time.Now().After(deadline) {
			for h, id := range ids {
				st, err := status(t, tc.agents[h], id)
				t.Logf("%s: %+v %v", h, st, err)
			}
			t.Fatalf("pushes not ended after %v", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pushAll sends req to every host in it, each with its own destination,
// and returns the ids.
func pushAll(t *testing.T, tc *testCluster, req cluster.Request) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, h := range req.Hosts {
		r := tc.forAgent(tc.agents[h], req)
		if code, body := send(t, tc.agents[h], r); code != http.StatusAccepted {
			t.Fatalf("%s: %d %s", h, code, body)
		}
		ids[h] = r.ID()
	}
	return ids
}

// TestPushTwoRacks: a push to 2 racks of 3 hosts reaches every one, the
// origin sends about one copy, the hosts that are not representatives
// take nothing from the origin nor from the other rack, and the command
// runs after the install.
func TestPushTwoRacks(t *testing.T) {
	data := randomBytes(3*MiB+123, 31)
	o := startOrigin(t, 4*MiB, map[string][]byte{"app.bin": data})
	tc := startCluster(t, 2, 3, "", nil)
	req := tc.request(o, "app.bin", tc.hosts, `test "$(wc -c < app.bin)" = `+fmt.Sprint(len(data))+` && echo "installed $STAMPEDE_PUSH_ROOT"`)
	ids := pushAll(t, tc, req)
	sts := waitPushes(t, tc, ids, 60*time.Second)
	var fromOrigin int64
	for _, h := range tc.hosts {
		st := sts[h]
		if st.State != daemon.PushDone {
			t.Fatalf("%s: %+v", h, st)
		}
		checkFile(t, filepath.Join(tc.agents[h].prefix, "app.bin"), data)
		if st.Then == nil || st.Then.Exit != 0 || !strings.Contains(st.Then.Output, "installed "+req.Root) {
			t.Errorf("%s: the command: %+v", h, st.Then)
		}
		if st.Installed.IsZero() || st.Done != int64(len(data)) {
			t.Errorf("%s: installed %v, done %d", h, st.Installed, st.Done)
		}
		t.Logf("%s %s: rack %d, other racks %d, origin %d", h, st.Role, st.FromRack, st.FromRacks, st.FromOrigin)
		fromOrigin += st.FromOrigin
		if !strings.Contains(st.Role, "representative") {
			if st.FromOrigin != 0 || st.FromRacks != 0 {
				t.Errorf("%s, a member, got %d bytes from the origin and %d from the other rack", h, st.FromOrigin, st.FromRacks)
			}
			if st.FromRack < int64(len(data)) {
				t.Errorf("%s got %d bytes from its rack, less than the file", h, st.FromRack)
			}
		}
		if _, err := os.Stat(filepath.Join(tc.agents[h].prefix, "app.bin.part")); err == nil {
			t.Errorf("%s: the part file is left", h)
		}
	}
	copies := float64(fromOrigin) / float64(len(data))
	t.Logf("origin: %.2f copies by the agents' count, %.2f by the origin's", copies, float64(o.sent.Load())/float64(len(data)))
	if copies < 0.99 || copies > 1.6 {
		t.Errorf("the origin sent %.2f copies, want about one", copies)
	}
}

// TestPushRefused: unsigned, foreign-signed, replayed, expired, rolled
// back, out-of-prefix pushes and pushes not naming the host are refused.
func TestPushRefused(t *testing.T) {
	o := startOrigin(t, 0, map[string][]byte{"app.bin": randomBytes(64*KiB, 32)})
	tc := startCluster(t, 1, 2, "", nil)
	a := tc.agents["r0h0"]
	good := tc.forAgent(a, tc.request(o, "app.bin", tc.hosts, ""))
	other := sign.GenerateKey()
	for _, c := range []struct {
		name string
		req  func() cluster.Request
		code int
		says string
	}{
		{"unsigned", func() cluster.Request { r := good; r.Sig = ""; return r }, 401, "not signed"},
		{"changed after signing", func() cluster.Request { r := good; r.Then = "rm -rf /"; return r }, 401, "not signed"},
		{"another key", func() cluster.Request { r := good; r.Sign(other, time.Now(), time.Minute); return r }, 401, "not signed"},
		{"expired", func() cluster.Request { r := good; r.Sign(tc.priv, time.Now().Add(-time.Hour), time.Minute); return r }, 410, "expired"},
		{"outside the prefixes", func() cluster.Request {
			r := good
			r.Dest = filepath.Join(t.TempDir(), "x.bin")
			r.Sign(tc.priv, time.Now(), time.Minute)
			return r
		}, 403, "outside"},
		{"escaping by ..", func() cluster.Request {
			r := good
			r.Dest = a.prefix + "/../x.bin"
			r.Sign(tc.priv, time.Now(), time.Minute)
			return r
		}, 403, "outside"},
		{"not this host", func() cluster.Request {
			r := good
			r.Hosts = []string{"r0h1"}
			r.Sign(tc.priv, time.Now(), time.Minute)
			return r
		}, 403, "does not name this host"},
		{"accepted", func() cluster.Request { return good }, 202, ""},
		// Refused by the destination's newest issued time, before its
		// nonce is looked at (below).
		{"replayed", func() cluster.Request { return good }, 409, "was accepted already"},
		{"rolled back", func() cluster.Request {
			r := good
			r.Sign(tc.priv, time.Now().Add(-10*time.Second), time.Minute)
			return r
		}, 409, "was accepted already"},
	} {
		code, body := send(t, a, c.req())
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: %d %s; want %d saying %q", c.name, code, body, c.code, c.says)
		}
	}
	// The exact replay above never reaches the nonce: the destination's
	// newest issued time refuses it first. One whose destination now
	// resolves elsewhere (a link in its path turned) passes that check,
	// and its nonce, seen, refuses it.
	dest, turn := turnableDest(t, a.prefix)
	r := good
	r.Dest = dest
	r.Sign(tc.priv, time.Now(), time.Minute)
	if code, body := send(t, a, r); code != 202 {
		t.Fatalf("through a link: %d %s", code, body)
	}
	turn()
	checkNonceRefused(t, "replayed after the link turned", a, r)
	// A symbolic link out of the prefix is refused too.
	if err := os.Symlink(t.TempDir(), filepath.Join(a.prefix, "out")); err != nil {
		t.Fatal(err)
	}
	r = good
	r.Dest = filepath.Join(a.prefix, "out", "x.bin")
	r.Sign(tc.priv, time.Now(), time.Minute)
	if code, body := send(t, a, r); code != 403 {
		t.Errorf("through a link: %d %s", code, body)
	}
	// Refused destinations made no directory; one inside the prefix is
	// made.
	r.Dest = filepath.Join(a.prefix, "out", "new", "x.bin")
	r.Sign(tc.priv, time.Now(), time.Minute)
	if code, body := send(t, a, r); code != 403 {
		t.Errorf("through a link to a new directory: %d %s", code, body)
	}
	if ents, _ := os.ReadDir(filepath.Join(a.prefix, "out")); len(ents) != 0 {
		t.Errorf("a refused push made %v", ents)
	}
	r.Dest = filepath.Join(a.prefix, "new", "dir", "x.bin")
	r.Sign(tc.priv, time.Now(), time.Minute)
	if code, body := send(t, a, r); code != 202 {
		t.Errorf("a new directory in the prefix: %d %s", code, body)
	}
}

// turnableDest returns a destination under prefix through a link,
// prefix/cur -> v1, and turn, which points the link at v2: the same
// destination then resolves to another file.
func turnableDest(t *testing.T, prefix string) (dest string, turn func()) {
	t.Helper()
	link := filepath.Join(prefix, "cur")
	for _, d := range []string{"v1", "v2"} {
		if err := os.MkdirAll(filepath.Join(prefix, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("v1", link); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(link, "app.bin"), func() {
		if err := os.Remove(link); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("v2", link); err != nil {
			t.Fatal(err)
		}
	}
}

// checkNonceRefused sends req, accepted before, to a and wants it refused
// by its nonce (409, "seen before"), not by another check.
func checkNonceRefused(t *testing.T, what string, a *pushAgent, req cluster.Request) {
	t.Helper()
	code, body := send(t, a, req)
	if code != http.StatusConflict || !strings.Contains(body, "seen before") || strings.Contains(body, "accepted already") || strings.Contains(body, "installing") {
		t.Errorf("%s: %d %s; want 409, its nonce seen before", what, code, body)
	}
}

// TestPushVersions: the same root again moves nothing; a new version
// with a few pieces changed moves only those.
func TestPushVersions(t *testing.T) {
	v1 := randomBytes(2*MiB, 33)
	v2 := bytes.Clone(v1)
	copy(v2[MiB:], randomBytes(100*KiB, 34)) // a few pieces in the middle
	o := startOrigin(t, 0, map[string][]byte{"v1.bin": v1, "v2.bin": v2})
	tc := startCluster(t, 1, 2, "", nil)
	a := tc.agents["r0h0"]
	one := func(name string) daemon.PushStatus {
		r := tc.request(o, name, []string{"r0h0"}, "")
		r.Dest = filepath.Join(a.prefix, "app.bin")
		r.Sign(tc.priv, time.Now(), time.Minute)
		if code, body := send(t, a, r); code != 202 {
			t.Fatalf("%d %s", code, body)
		}
		st := waitPushes(t, tc, map[string]string{"r0h0": r.ID()}, 30*time.Second)["r0h0"]
		if st.State != daemon.PushDone {
			t.Fatalf("%+v", st)
		}
		return st
	}
	st := one("v1.bin")
	checkFile(t, filepath.Join(a.prefix, "app.bin"), v1)
	if st.FromOrigin < int64(len(v1)) {
		t.Errorf("first push: %d bytes from the origin", st.FromOrigin)
	}
	st = one("v1.bin")
	if st.FromOrigin != 0 || st.Reused != int64(len(v1)) {
		t.Errorf("the same root again: %d bytes from the origin, %d reused", st.FromOrigin, st.Reused)
	}
	st = one("v2.bin")
	checkFile(t, filepath.Join(a.prefix, "app.bin"), v2)
	t.Logf("v2: %d from the origin, %d reused", st.FromOrigin, st.Reused)
	if st.FromOrigin == 0 || st.FromOrigin > 400*KiB || st.Reused < int64(len(v2))-400*KiB {
		t.Errorf("a new version: %d bytes from the origin, %d reused; want only the changed pieces", st.FromOrigin, st.Reused)
	}
}

// waitDonePush polls push id on a until it has at least n bytes.
func waitDonePush(t *testing.T, a *pushAgent, id string, n int64) daemon.PushStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := status(t, a, id)
		if err == nil && st.Done >= n {
			return st
		}
		if err == nil && st.State == daemon.PushFailed {
			t.Fatalf("%s failed: %s", a.name, st.Error)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %+v %v after 30s, want %d bytes done", a.name, st, err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPushRestartResumes: an agent stopped mid-push resumes it when it
// starts again, from its part file (its pieces verified again), and the
// request cannot be replayed to it after the restart.
func TestPushRestartResumes(t *testing.T) {
	data := randomBytes(3*MiB, 35)
	o := startOrigin(t, 2*MiB, map[string][]byte{"app.bin": data})
	tc := startCluster(t, 1, 1, "", nil)
	a := tc.agents["r0h0"]
	// Through a link, so that the replay below reaches the nonce check.
	dest, turn := turnableDest(t, a.prefix)
	req := tc.request(o, "app.bin", tc.hosts, "echo ok")
	req.Dest = dest
	req.Sign(tc.priv, time.Now(), time.Minute)
	if code, body := send(t, a, req); code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	waitDonePush(t, a, req.ID(), MiB)
	a.restart(t, nil)
	sentBefore := o.sent.Load()
	st := waitPushes(t, tc, map[string]string{"r0h0": req.ID()}, 30*time.Second)["r0h0"]
	if st.State != daemon.PushDone || st.Resumed != 1 || st.Then == nil || st.Then.Exit != 0 {
		t.Fatalf("after the restart: %+v", st)
	}
	checkFile(t, filepath.Join(a.prefix, "v1", "app.bin"), data)
	if again := o.sent.Load() - sentBefore; again > int64(len(data))-MiB/2 {
		t.Errorf("after the restart the origin sent %d of %d bytes: not resumed", again, len(data))
	}
	// The nonce is remembered across the restart: refused even where the
	// destination's issued time does not refuse it.
	turn()
	checkNonceRefused(t, "replayed after the restart", a, req)
}

// TestPushRestartCorruptPart: an agent restarted mid-push whose part
// file was damaged while it was down verifies the part file's pieces
// again: the damaged ones are fetched again and the file installed is
// the pushed one.
func TestPushRestartCorruptPart(t *testing.T) {
	data := randomBytes(2*MiB, 39)
	o := startOrigin(t, 2*MiB, map[string][]byte{"app.bin": data})
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "app.bin")
	if err != nil {
		t.Fatal(err)
	}
	tc := startCluster(t, 1, 1, "", nil)
	a := tc.agents["r0h0"]
	req := tc.forAgent(a, tc.request(o, "app.bin", tc.hosts, ""))
	if code, body := send(t, a, req); code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	waitDonePush(t, a, req.ID(), MiB)
	var verified, damaged int64
	a.restart(t, func() {
		part, err := os.OpenFile(filepath.Join(a.prefix, "app.bin.part"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer part.Close()
		// Damage every other piece that verifies: one byte in each.
		for i := range m.NumPieces() {
			buf := make([]byte, m.PieceLen(i))
			if n, _ := part.ReadAt(buf, m.PieceOffset(i)); n != len(buf) || m.VerifyPiece(i, buf) != nil {
				continue
			}
			verified += m.PieceLen(i)
			if i%2 == 0 {
				if _, err := part.WriteAt([]byte{^buf[len(buf)/2]}, m.PieceOffset(i)+int64(len(buf)/2)); err != nil {
					t.Fatal(err)
				}
				damaged += m.PieceLen(i)
			}
		}
	})
	if damaged == 0 {
		t.Fatalf("no even piece of the part file verified (%d bytes did)", verified)
	}
	sentBefore := o.sent.Load()
	st := waitPushes(t, tc, map[string]string{"r0h0": req.ID()}, 30*time.Second)["r0h0"]
	if st.State != daemon.PushDone || st.Resumed != 1 {
		t.Fatalf("after the restart: %+v", st)
	}
	checkFile(t, filepath.Join(a.prefix, "app.bin"), data)
	// What was missing and what was damaged came again; what verified
	// did not.
	again, want := o.sent.Load()-sentBefore, int64(len(data))-verified+damaged
	t.Logf("%d bytes verified in the part file, %d of them damaged; the origin sent %d after the restart", verified, damaged, again)
	if again < want || again > want+int64(len(data))/4 {
		t.Errorf("after the restart the origin sent %d bytes, want about %d (the missing and damaged pieces)", again, want)
	}
}

// TestPushNoRollbackAfterRestart: a destination's newest issued time
// outlives its push's record: once the newer push has expired (its
// record with it) and the agent restarted, an older request, unexpired,
// is still refused, and the file stays the newer one.
func TestPushNoRollbackAfterRestart(t *testing.T) {
	v1, v2 := randomBytes(64*KiB, 40), randomBytes(64*KiB, 41)
	o := startOrigin(t, 0, map[string][]byte{"v1.bin": v1, "v2.bin": v2})
	tc := startCluster(t, 1, 1, "", nil)
	a := tc.agents["r0h0"]
	dest := filepath.Join(a.prefix, "app.bin")
	older := tc.request(o, "v1.bin", tc.hosts, "")
	older.Dest = dest
	older.Sign(tc.priv, time.Now().Add(-time.Second), 10*time.Minute)
	newer := tc.request(o, "v2.bin", tc.hosts, "")
	newer.Dest = dest
	newer.Sign(tc.priv, time.Now(), 2*time.Second)
	if code, body := send(t, a, newer); code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	if st := waitPushes(t, tc, map[string]string{"r0h0": newer.ID()}, 10*time.Second)["r0h0"]; st.State != daemon.PushDone {
		t.Fatalf("%+v", st)
	}
	time.Sleep(time.Until(newer.Expires)) // the clock must pass the expiry
	a.restart(t, nil)
	if st, err := status(t, a, newer.ID()); err == nil {
		t.Fatalf("the expired push is still kept: %+v", st)
	}
	code, body := send(t, a, older)
	if code != http.StatusConflict || !strings.Contains(body, "accepted already") {
		t.Errorf("an older request after the restart: %d %s; want 409", code, body)
	}
	checkFile(t, dest, v2)
	// A damaged file of issued times stops the push service, rather than
	// let the older request through.
	a.stop(t)
	if err := os.WriteFile(filepath.Join(a.cfg.StateDir, "push-issued.json"), []byte("{\"/srv"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.cfg.PeerListener, a.cfg.Push.Listener = relisten(t, a.srv.PeerAddr()), relisten(t, a.srv.PushAddr())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if srv, err := daemon.Start(ctx, a.cfg); err == nil || !strings.Contains(err.Error(), "push-issued.json") {
		t.Errorf("started with a damaged push-issued.json: %v", err)
		if err == nil {
			srv.Close()
		}
	}
}

// TestPushHostDiesMidPush: a host stopped mid-push does not stop the
// others of its rack, which finish from the rest.
func TestPushHostDiesMidPush(t *testing.T) {
	data := randomBytes(4*MiB, 36)
	o := startOrigin(t, 4*MiB, map[string][]byte{"app.bin": data})
	tc := startCluster(t, 1, 4, "", nil)
	req := tc.request(o, "app.bin", tc.hosts, "")
	ids := pushAll(t, tc, req)
	// One of the representatives: the one the others lean on most.
	var victim string
	for _, h := range tc.hosts {
		if st, err := status(t, tc.agents[h], ids[h]); err == nil && strings.Contains(st.Role, "representative") {
			victim = h
			break
		}
	}
	if victim == "" {
		t.Fatal("no representative")
	}
	waitDonePush(t, tc.agents[victim], ids[victim], MiB/2)
	tc.agents[victim].stop(t)
	delete(ids, victim)
	sts := waitPushes(t, tc, ids, 60*time.Second)
	for h, st := range sts {
		if st.State != daemon.PushDone {
			t.Errorf("%s: %+v", h, st)
		}
		checkFile(t, filepath.Join(tc.agents[h].prefix, "app.bin"), data)
	}
}

// loadKnob is a load source a test turns.
type loadKnob struct{ cpu atomic.Int64 } // load per CPU, in hundredths

func (k *loadKnob) Load() (cluster.HostLoad, error) {
	return cluster.HostLoad{CPU: float64(k.cpu.Load()) / 100}, nil
}

// TestPushThrottled: while the host's load is past --max-load the push
// crawls at the throttle's floor and says so; once the load falls it
// finishes.
func TestPushThrottled(t *testing.T) {
	data := randomBytes(4*MiB, 37)
	o := startOrigin(t, 0, map[string][]byte{"app.bin": data})
	knob := &loadKnob{}
	knob.cpu.Store(500)
	tc := startCluster(t, 1, 1, "", func(_ string, p *daemon.PushConfig) { p.MaxLoad, p.LoadSource = 2, knob })
	a := tc.agents["r0h0"]
	req := tc.forAgent(a, tc.request(o, "app.bin", tc.hosts, ""))
	if code, body := send(t, a, req); code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	time.Sleep(1500 * time.Millisecond)
	st, err := status(t, a, req.ID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded: %d bytes in 1.5 s, throttled %v", st.Done, st.Throttled)
	if !st.Throttled || st.Done > int64(len(data))/2 || st.State != daemon.PushFetching {
		t.Errorf("under load: %+v", st)
	}
	knob.cpu.Store(10)
	st = waitPushes(t, tc, map[string]string{"r0h0": req.ID()}, 30*time.Second)["r0h0"]
	if st.State != daemon.PushDone || st.Throttled {
		t.Errorf("load gone: %+v", st)
	}
	checkFile(t, filepath.Join(a.prefix, "app.bin"), data)
}

// TestPushStandbyTakesOver: behind a limited uplink one representative
// per rack is active and the other stands by, fetching only inside its
// rack; when the active one dies, the standby takes over across the
// uplink and its rack finishes.
func TestPushStandbyTakesOver(t *testing.T) {
	data := randomBytes(2*MiB, 38)
	o := startOrigin(t, 2*MiB, map[string][]byte{"app.bin": data})
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "app.bin")
	if err != nil {
		t.Fatal(err)
	}
	// The standbys give up on their active representatives after 2 s
	// without a piece, the members only after a minute: the rack's
	// pieces must come through its standby.
	tc := startCluster(t, 2, 3, "400Mbit", func(host string, p *daemon.PushConfig) {
		plan, err := cluster.NewPlan(p.Cluster, p.Cluster.HostNames(), m.Root[:])
		if err != nil {
			t.Fatal(err)
		}
		p.Fallback = time.Minute
		if plan.Roles[host].Standby {
			p.Fallback = 2 * time.Second
		}
	})
	req := tc.request(o, "app.bin", tc.hosts, "")
	ids := pushAll(t, tc, req)
	var active, standby string
	for _, h := range []string{"r1h0", "r1h1", "r1h2"} {
		st, err := status(t, tc.agents[h], ids[h])
		if err != nil {
			t.Fatal(err)
		}
		switch st.Role {
		case "rack+dc representative":
			active = h
		case "standby representative":
			standby = h
		}
	}
	if active == "" || standby == "" {
		t.Fatal("rack r1 has no active and standby representatives")
	}
	waitDonePush(t, tc.agents[active], ids[active], MiB/4)
	if st, _ := status(t, tc.agents[standby], ids[standby]); st.FromRacks != 0 || st.FromOrigin != 0 {
		t.Errorf("the standby fetched across the uplink while the active one ran: %+v", st)
	}
	tc.agents[active].stop(t)
	delete(ids, active)
	sts := waitPushes(t, tc, ids, 60*time.Second)
	for h, st := range sts {
		if st.State != daemon.PushDone {
			t.Errorf("%s: %+v", h, st)
		}
	}
	st := sts[standby]
	t.Logf("standby %s: rack %d, other racks %d, origin %d", standby, st.FromRack, st.FromRacks, st.FromOrigin)
	if st.FromRacks+st.FromOrigin == 0 {
		t.Errorf("the standby never took over: %+v", st)
	}
	checkFile(t, filepath.Join(tc.agents[standby].prefix, "app.bin"), data)
}

// takeover posts a takeover of push id (for host, signed by priv, valid
// for ttl) to a and returns the status code and the body.
func takeover(t *testing.T, a *pushAgent, priv ed25519.PrivateKey, id, host string, ttl time.Duration) (int, string, cluster.Takeover) {
	t.Helper()
	to := cluster.Takeover{Push: id, Host: host}
	to.Sign(priv, time.Now(), ttl)
	code, body := postTakeover(t, a, id, to)
	return code, body, to
}

func postTakeover(t *testing.T, a *pushAgent, id string, to cluster.Takeover) (int, string) {
	t.Helper()
	return postJSON(t, "http://"+a.agent+"/v1/push/"+id+"/takeover", to)
}

// TestPushSlowRepresentative: a rack's active representative is held
// near the throttle's floor by its load, slow but not stopped, so its
// rack never falls back on its own; told to take over (signed by the
// cluster's key, and nothing else accepted), the standby fetches across
// the uplink and its rack finishes long before the slow one could have
// brought the file in.
func TestPushSlowRepresentative(t *testing.T) {
	data := randomBytes(2*MiB, 39)
	o := startOrigin(t, 2*MiB, map[string][]byte{"app.bin": data})
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "app.bin")
	if err != nil {
		t.Fatal(err)
	}
	knob := &loadKnob{}
	knob.cpu.Store(500)
	var slow, standby string
	tc := startCluster(t, 2, 3, "400Mbit", func(host string, p *daemon.PushConfig) {
		plan, err := cluster.NewPlan(p.Cluster, p.Cluster.HostNames(), m.Root[:])
		if err != nil {
			t.Fatal(err)
		}
		r := plan.Roles[host]
		switch {
		case r.Rack != "r1":
		case r.RackRep && !r.Standby:
			slow, p.MaxLoad, p.LoadSource = host, 2, knob
		case r.Standby:
			standby = host
		}
	})
	if slow == "" || standby == "" {
		t.Fatal("rack r1 has no active and standby representatives")
	}
	start := time.Now()
	req := tc.request(o, "app.bin", tc.hosts, "")
	ids := pushAll(t, tc, req)
	a := tc.agents[standby]
	id := ids[standby]

	// Refused: another key, another host, a host that is no standby, no
	// such push, expired, a push's id in the path that is not the
	// takeover's.
	for _, c := range []struct {
		what     string
		to       *pushAgent
		priv     ed25519.PrivateKey
		id, host string
		ttl      time.Duration
		want     int
	}{
		{"another key", a, sign.GenerateKey(), id, standby, time.Minute, http.StatusUnauthorized},
		{"another host", a, tc.priv, id, slow, time.Minute, http.StatusForbidden},
		{"no standby", tc.agents[slow], tc.priv, ids[slow], slow, time.Minute, http.StatusConflict},
		{"no such push", a, tc.priv, strings.Repeat("0", 32), standby, time.Minute, http.StatusNotFound},
		{"expired", a, tc.priv, id, standby, -time.Second, http.StatusGone},
		{"too long", a, tc.priv, id, standby, time.Hour, http.StatusBadRequest},
	} {
		if code, body, _ := takeover(t, c.to, c.priv, c.id, c.host, c.ttl); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.what, code, body, c.want)
		}
	}
	other := cluster.Takeover{Push: ids[slow], Host: standby}
	other.Sign(tc.priv, time.Now(), time.Minute)
	if code, body := postTakeover(t, a, id, other); code != http.StatusBadRequest {
		t.Errorf("another push's takeover: %d %s", code, body)
	}

	// The slow one trickles pieces in; the standby fetches nothing across
	// the uplink, and would not for the whole push.
	waitDonePush(t, a, id, 64<<10)
	st, _ := status(t, a, id)
	if st.FromRacks+st.FromOrigin != 0 || st.Role != "standby representative" {
		t.Errorf("the standby before the takeover: %+v", st)
	}
	code, body, to := takeover(t, a, tc.priv, id, standby, time.Minute)
	if json.Unmarshal([]byte(body), &st); code != http.StatusOK || st.Role != "standby representative (took over)" {
		t.Fatalf("takeover: %d %s", code, body)
	}
	if code, body := postTakeover(t, a, id, to); code != http.StatusConflict {
		t.Errorf("the takeover replayed: %d %s", code, body)
	}
	rest := map[string]string{}
	for _, h := range tc.hosts {
		if h != slow {
			rest[h] = ids[h]
		}
	}
	sts := waitPushes(t, tc, rest, 60*time.Second)
	took := time.Since(start)
	floor := time.Duration(len(data)/(64<<10)) * time.Second
	for h, st := range sts {
		if st.State != daemon.PushDone {
			t.Errorf("%s: %+v", h, st)
		}
		checkFile(t, filepath.Join(tc.agents[h].prefix, "app.bin"), data)
	}
	st = sts[standby]
	t.Logf("rack r1 but %s done in %v (%v at the slow one's floor); standby %s: rack %d, other racks %d, origin %d",
		slow, took.Round(time.Millisecond), floor, standby, st.FromRack, st.FromRacks, st.FromOrigin)
	if st.Role != "standby representative (took over)" || st.FromRacks+st.FromOrigin == 0 {
		t.Errorf("the standby did not take over: %+v", st)
	}
	if took > floor/2 {
		t.Errorf("rack r1 took %v: not much faster than the slow representative alone (%v)", took, floor)
	}
	if st, _ := status(t, tc.agents[slow], ids[slow]); st.State == daemon.PushDone {
		t.Logf("the slow one is done too: %+v", st)
	}
	knob.cpu.Store(10)
}

// TestPushStartFails: a push service that cannot start closes the
// listeners it was given, and the daemon closes its own.
func TestPushStartFails(t *testing.T) {
	peers, pushes := listenLoopback(t), listenLoopback(t)
	c, err := cluster.Parse(fmt.Appendf(nil, "[host.a]\nagent = %q\npeer = %q\n[rack.r]\nhosts = [\"a\"]\n", pushes.Addr(), peers.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = daemon.Start(t.Context(), daemon.Config{
		StateDir: t.TempDir(), PeerListener: peers, NoAPI: true, Logger: testLogger(t),
		Push: daemon.PushConfig{Cluster: c, Key: sign.GenerateKey().Public().(ed25519.PublicKey), Host: "a", Listener: pushes},
	})
	if err == nil || !strings.Contains(err.Error(), "push-dest-prefix") {
		t.Fatalf("no destination prefix: %v", err)
	}
	for name, ln := range map[string]net.Listener{"peer": peers, "push": pushes} {
		// Open, it would wait for the deadline; closed, it says so at once.
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(200 * time.Millisecond))
		if c, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
			if c != nil {
				c.Close()
			}
			t.Errorf("the %s listener is still open (%v)", name, err)
		}
	}
}
