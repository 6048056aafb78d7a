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
	<-srv.done
	stoppedAt := time.Now()
	res := get.wait(t, "get")
	took := res.ended.Sub(stoppedAt)
	t.Logf("get exited %d %v after the origin stopped, %d of %d bytes done: %s", res.code, took.Round(time.Millisecond),
		progressDone(get.stderr.String()), len(data), lastLine(get.stderr.String()))
	if res.code != exitNetwork {
		t.Errorf("get exited %d, want %d (network): %s", res.code, exitNetwork, get.stderr.String())
	}
	if took < patience || took > patience+10*time.Second {
		t.Errorf("get gave up %v after the origin stopped, want its patience (%v) and a little more", took, patience)
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
