package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

func TestTrackerCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	addrc := make(chan string, 1)
	e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr, ready: func(a string) { addrc <- a }}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"tracker", "--listen", "127.0.0.1:0", "--interval", "7s", "-q"}, e)
	}()
	var addr string
	select {
	case addr = <-addrc:
	case code := <-done:
		t.Fatalf("tracker exited %d: %s", code, stderr.String())
	}
	base := "http://" + addr
	if want := "tracker on " + base + "/announce\n"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q, want it to say %q", stderr.String(), want)
	}

	// Announces work at /announce and at the well-known path alike.
	root := manifest.Hash{9}
	a := tracker.AnnounceRequest{Root: root, Size: 1000, ID: tracker.NewPeerID(), Port: 6881, Left: 0, Event: tracker.EventStarted}
	res, err := tracker.Announce(t.Context(), nil, base+"/announce", a)
	if err != nil {
		t.Fatal(err)
	}
	if res.Interval != 7*time.Second || res.SwarmSize != 1 {
		t.Errorf("first answer %+v", res)
	}
	b := tracker.AnnounceRequest{Root: root, Size: 1000, ID: tracker.NewPeerID(), Port: 6882, Left: 1000}
	if res, err = tracker.Announce(t.Context(), nil, base+tracker.WellKnownPath, b); err != nil {
		t.Fatal(err)
	}
	if res.SwarmSize != 2 || res.Complete != 1 || len(res.Peers) != 1 || res.Peers[0].ID != a.ID || res.Peers[0].Addr.String() != "127.0.0.1:6881" {
		t.Errorf("second answer %+v", res)
	}
	bad := b
	bad.Left = 2000
	if _, err := tracker.Announce(t.Context(), nil, base+"/announce", bad); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("bad announce: %v", err)
	}
	if got := metric(t, base, `stampede_tracker_announces_total{event="started"}`); got != 1 {
		t.Errorf("started announces %v, want 1", got)
	}
	if got := metric(t, base, "stampede_tracker_swarms"); got != 1 {
		t.Errorf("swarms %v, want 1", got)
	}
	if res, err := http.Get(base + "/elsewhere"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /elsewhere: %v %v", res.Status, err)
	} else {
		res.Body.Close()
	}

	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("tracker exited %d after its context ended: %s", code, stderr.String())
	}
}

func TestTrackerFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"extra"},
		{"--interval", "0"},
		{"--interval", "500ms"},
		{"--interval", "soon"},
		{"--max-peers", "0"},
		{"--max-swarms", "-1"},
		{"--max-peers-per-address", "0"},
		{"--max-peers-per-address", "257"},
		{"--announce-rate", "-1"},
		{"--announce-rate", "fast"},
		{"--announce-burst", "0"},
		{"--no-such-flag"},
		{"--store", "http://127.0.0.1:6379"},
		{"--store", "redis://127.0.0.1:port/0"},
		{"--store", "redis://127.0.0.1:6379/zero"},
		{"--store", "memory"},
	} {
		var stderr strings.Builder
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr,
			ready: func(string) { t.Errorf("tracker %q started", args) }}
		if code := run(t.Context(), append([]string{"tracker", "--listen", "127.0.0.1:0"}, args...), e); code != exitUsage {
			t.Errorf("tracker %q: exit %d, want %d: %s", args, code, exitUsage, stderr.String())
		}
	}
}

// TestStoreURLRedacted: a bad --store URL is named without its password.
func TestStoreURLRedacted(t *testing.T) {
	for _, bad := range []string{"http://u:s3cret@127.0.0.1:6379/0", "redis://u:s3cret@127.0.0.1:port/0"} {
		code, _, stderr := runCmd(t, "tracker", "--listen", "127.0.0.1:0", "--store", bad)
		if code != exitUsage || strings.Contains(stderr, "s3cret") {
			t.Errorf("%s: exit %d, %s: want a usage error without the password", bad, code, stderr)
		}
	}
}

func TestTrackerHelp(t *testing.T) {
	code, stdout, _ := runCmd(t, "help", "tracker")
	if code != exitOK {
		t.Fatalf("help tracker: exit %d", code)
	}
	for _, flag := range []string{"--listen", "--interval", "--max-peers", "--max-swarms", "--max-peers-per-address",
		"--announce-rate", "--announce-burst", "--store", "-q, --quiet"} {
		if !strings.Contains(stdout, flag) {
			t.Errorf("help tracker does not mention %s:\n%s", flag, stdout)
		}
	}
}

// TestTrackerReplicasShareRedis runs two trackers on one Redis: peers
// announcing to either find each other, a tracker restarted loses no
// swarm, and one whose Redis goes away answers a tracker failure and
// comes back with it.
func TestTrackerReplicasShareRedis(t *testing.T) {
	mr := miniredis.RunT(t)
	store := "redis://" + mr.Addr() + "/2"
	args := []string{"tracker", "--listen", "127.0.0.1:0", "--store", store, "-q"}
	a, _ := startDaemon(t, args...)
	b, _ := startDaemon(t, args...)
	announce := func(addr string, port uint16, left int64, event tracker.Event) (*tracker.AnnounceResponse, error) {
		t.Helper()
		var id tracker.PeerID
		id[0], id[1] = byte(port>>8), byte(port)
		req := tracker.AnnounceRequest{Root: manifest.Hash{3}, Size: 1000, ID: id, Port: port, Left: left, Event: event}
		return tracker.Announce(t.Context(), nil, "http://"+addr+"/announce", req)
	}
	mustAnnounce := func(addr string, port uint16, left int64, event tracker.Event) *tracker.AnnounceResponse {
		t.Helper()
		res, err := announce(addr, port, left, event)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	mustAnnounce(a, 7001, 0, tracker.EventStarted)
	if res := mustAnnounce(b, 7002, 1000, tracker.EventStarted); res.SwarmSize != 2 || res.Complete != 1 || len(res.Peers) != 1 || res.Peers[0].Addr.Port() != 7001 {
		t.Errorf("a peer announcing to the second tracker: %+v", res)
	}

	// A third tracker comes and goes; the swarm stays.
	ctx, cancel := context.WithCancel(context.Background())
	r := startCmd(t, ctx, args...)
	c := r.listening(t, "tracker")
	if res := mustAnnounce(c, 7003, 1000, tracker.EventStarted); res.SwarmSize != 3 || len(res.Peers) != 2 {
		t.Errorf("a peer announcing to the third tracker: %+v", res)
	}
	cancel()
	if res := r.wait(t, "tracker"); res.code != exitOK {
		t.Fatalf("tracker exited %d: %s", res.code, r.stderr.String())
	}
	r = startCmd(t, context.Background(), args...)
	c = r.listening(t, "restarted tracker")
	if res := mustAnnounce(c, 7004, 1000, tracker.EventStarted); res.SwarmSize != 4 || len(res.Peers) != 3 || res.Peers[0].Addr.Port() != 7001 {
		t.Errorf("after a restart: %+v", res)
	}
	if got := metric(t, "http://"+a, "stampede_tracker_peers"); got != 4 {
		t.Errorf("the first tracker's metrics count %v peers, want 4", got)
	}

	// Redis goes away: a tracker failure, and the trackers keep running.
	addr := mr.Addr()
	mr.Close()
	_, err := announce(b, 7002, 1000, tracker.EventNone)
	if se, ok := errors.AsType[*tracker.StatusError](err); !ok || se.Code != http.StatusServiceUnavailable ||
		!strings.Contains(se.Message, "tracker failure") || strings.Contains(se.Message, addr) {
		t.Errorf("announce with Redis gone: %v", err)
	}
	if err := mr.StartAddr(addr); err != nil {
		t.Fatal(err)
	}
	// Back, with its data: the trackers answer again, from the same swarm.
	if res := mustAnnounce(b, 7002, 1000, tracker.EventNone); res.SwarmSize != 4 {
		t.Errorf("after Redis came back: %+v", res)
	}
}

// TestTrackerStoreUnreachable: a --store that does not answer at start is
// a clear failure, exit 1.
func TestTrackerStoreUnreachable(t *testing.T) {
	mr := miniredis.RunT(t)
	addr := mr.Addr()
	mr.Close()
	code, _, stderr := runCmd(t, "tracker", "--listen", "127.0.0.1:0", "--store", "redis://"+addr+"/0")
	if code != exitFailure || !strings.Contains(stderr, "--store") || !strings.Contains(stderr, addr) {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

func TestServeStoreFlag(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--store", "redis://127.0.0.1:6379/x"},
		{"--store", "redis://127.0.0.1:6379/0", "--no-tracker"},
		{"--store", "redis://127.0.0.1:6379/0", "--tracker", "http://tracker.example/announce"},
	} {
		code, _, stderr := runCmd(t, append([]string{"serve", "--listen", "127.0.0.1:0", dir}, args...)...)
		if code != exitUsage {
			t.Errorf("serve %q: exit %d, want %d: %s", args, code, exitUsage, stderr)
		}
	}
	// Two origins on one Redis share their tracker's swarms: the file
	// whose manifest A served, B's tracker tracks too.
	writeFile(t, dir, "f.bin", randomBytes(1000, 4))
	mr := miniredis.RunT(t)
	store := "redis://" + mr.Addr() + "/0"
	a, _ := startDaemon(t, "serve", "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(), "--store", store, "-q", dir)
	b, _ := startDaemon(t, "serve", "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(), "--store", store, "-q", dir)
	m := serveManifest(t, "http://"+a, "/f.bin")
	for i, addr := range []string{a, b} {
		req := tracker.AnnounceRequest{Root: m.Root, Size: m.Size, ID: tracker.PeerID{byte(i + 1)}, Port: uint16(7000 + i), Left: m.Size, Event: tracker.EventStarted}
		res, err := tracker.Announce(t.Context(), nil, "http://"+addr+tracker.WellKnownPath, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.SwarmSize != i+1 {
			t.Errorf("origin %d: swarm_size %d, want %d", i, res.SwarmSize, i+1)
		}
	}
}
