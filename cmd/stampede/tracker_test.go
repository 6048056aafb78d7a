package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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
		{"--no-such-flag"},
	} {
		var stderr strings.Builder
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr,
			ready: func(string) { t.Errorf("tracker %q started", args) }}
		if code := run(t.Context(), append([]string{"tracker", "--listen", "127.0.0.1:0"}, args...), e); code != exitUsage {
			t.Errorf("tracker %q: exit %d, want %d: %s", args, code, exitUsage, stderr.String())
		}
	}
}

func TestTrackerHelp(t *testing.T) {
	code, stdout, _ := runCmd(t, "help", "tracker")
	if code != exitOK {
		t.Fatalf("help tracker: exit %d", code)
	}
	for _, flag := range []string{"-listen", "-interval", "-max-peers", "-max-swarms"} {
		if !strings.Contains(stdout, flag) {
			t.Errorf("help tracker does not mention %s:\n%s", flag, stdout)
		}
	}
}
