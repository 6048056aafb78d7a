package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGetOriginDiesInSwarm: the origin of a swarm `get` (the default
// mode) is stopped mid-download. The get backs off, and gives up after
// its --origin-patience with exit 4 (network), its partial file kept. It
// used to try the dead origin about 1,160 times a second until the 3
// minute stall timeout, and exit 1.
func TestGetOriginDiesInSwarm(t *testing.T) {
	const patience = 2 * time.Second
	www := t.TempDir()
	data := randomBytes(4<<20, 38)
	writeFile(t, www, "f.bin", data)
	sctx, stop := context.WithCancel(context.Background())
	srv := startCmd(t, sctx, "serve", "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(), "--rate", "1MB", www)
	base := "http://" + srv.listening(t, "serve")

	out := filepath.Join(t.TempDir(), "f.bin")
	get := startCmd(t, t.Context(), "get", base+"/f.bin", "-o", out, "--origin-patience", patience.String(), "--progress-json")
	waitFor(t, "a quarter of the file", func() bool { return progressDone(get.stderr.String()) >= int64(len(data)/4) })
	stop()
	// The patience counts from the last piece, which may come before the
	// origin stops or, from a transfer it lets finish, after: watch the
	// progress lines (one each 0.5 s) for when it last moved.
	lastMoved, done := time.Now(), progressDone(get.stderr.String())
	for ended := false; !ended; {
		select {
		case <-get.done:
			ended = true
		case <-time.After(20 * time.Millisecond):
		}
		if d := progressDone(get.stderr.String()); d > done {
			lastMoved, done = time.Now(), d
		}
	}
	res := get.wait(t, "get")
	<-srv.done
	took := res.ended.Sub(lastMoved)
	t.Logf("get exited %d %v after its last progress, %d of %d bytes done: %s", res.code, took.Round(time.Millisecond),
		done, len(data), lastLine(get.stderr.String()))
	if res.code != exitNetwork {
		t.Errorf("get exited %d, want %d (network): %s", res.code, exitNetwork, get.stderr.String())
	}
	// A piece lands up to a progress line (0.5 s) before its line shows,
	// later on a loaded machine.
	if took < patience-time.Second || took > patience+10*time.Second {
		t.Errorf("get gave up %v after its last progress, want its patience (%v) and a little more", took, patience)
	}
	if _, err := os.Stat(out + ".part"); err != nil {
		t.Errorf("the partial file is gone: %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s exists: a file that was never completed", out)
	}
}

// progressDone is the "done" of the last --progress-json line in stderr.
func progressDone(stderr string) int64 {
	var done int64
	for line := range strings.SplitSeq(stderr, "\n") {
		var p struct{ Done int64 }
		if json.Unmarshal([]byte(line), &p) == nil {
			done = p.Done
		}
	}
	return done
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}
