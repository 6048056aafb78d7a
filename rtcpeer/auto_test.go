package rtcpeer

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
)

// logWatch is a log's writer that says when a line holding want comes.
type logWatch struct {
	want string
	once sync.Once
	seen chan struct{}
}

func (w *logWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// TestAuto: with Config.Auto, a peer whose site names no STUN server (no
// peer.json: it cannot tell it is behind a NAT) keeps to TCP and never
// joins the tracker's signalling; without it, the same peer joins.
// (A NATed peer with Auto joins: TestNATTraversal.)
func TestAuto(t *testing.T) {
	tr, announce := startTracker(t)
	root, size := manifest.Hash{7}, int64(1<<20)
	left := func() int64 { return size }
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	w := &logWatch{want: "webrtc: not needed", seen: make(chan struct{})}
	auto := New(Config{Auto: true, Logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	auto.Join(ctx, announce, root, size, left)
	select {
	case <-w.seen:
	case <-ctx.Done():
		t.Fatal("the auto peer did not decide")
	}
	if n := tr.WSPeers(root, size); n != 0 {
		t.Errorf("the auto peer joined the signalling: %d WebRTC peers", n)
	}

	New(Config{}).Join(ctx, announce, root, size, left)
	waitPeers(t, tr, root, size, 1)
}
