package webpeer_test

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/host"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/rtcpeer"
)

// native runs a native download of the object (stampede get --webrtc,
// in process) into dir, seeding until ctx ends when seed is set.
func native(t *testing.T, ctx context.Context, o *testOrigin, dir string, seed bool) (*fetch.Result, error) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ln, err := net.Listen("tcp", bridgeIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := rtcpeer.NewHost(ctx, ln, rtcpeer.Config{}, host.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	d, err := fetch.New(fetch.Config{URL: o.url + "/obj.bin", Output: filepath.Join(dir, "obj.bin"), SHA256: o.sha, Logger: log,
		Swarm: fetch.SwarmConfig{SeedForever: seed, Node: node.Config{Host: h}}})
	if err != nil {
		t.Fatal(err)
	}
	return d.Run(ctx)
}

// TestBrowserNative: browsers and native peers in one swarm, both ways: a
// native download gets the object from a browser while the origin refuses
// it, and a browser gets it from a native seed while the origin refuses
// it.
func TestBrowserNative(t *testing.T) {
	needBrowser(t)
	nss := setupNet(t, 2)
	o := startOrigin(t)
	size := int64(len(o.obj))

	a := openBrowser(t, nss[0], "A", o)
	a.fetch(o)
	o.blocked.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), waitPage)
	res, err := native(t, ctx, o, t.TempDir(), false)
	cancel()
	if err != nil {
		t.Fatalf("native download from a browser: %v", err)
	}
	t.Logf("native: %d bytes from peers, %d from the origin", res.BytesFromPeers, res.BytesReceived)
	if res.BytesFromPeers != size {
		t.Errorf("native download, the origin blocked: %d bytes from peers, want %d", res.BytesFromPeers, size)
	}
	if s := a.stats(); s.Uploaded < size {
		t.Errorf("A uploaded %d bytes, want %d", s.Uploaded, size)
	}
	a.cancel()

	// A native seed serves a browser.
	o.blocked.Store(false)
	sctx, stop := context.WithCancel(t.Context())
	seeded := make(chan error, 1)
	go func() {
		_, err := native(t, sctx, o, t.TempDir(), true)
		seeded <- err
	}()
	defer func() {
		stop()
		<-seeded
	}()
	// The seed has the object once the origin sent it whole.
	deadline := time.Now().Add(waitPage)
	for o.bodies.Load() < 2*size {
		if time.Now().After(deadline) {
			t.Fatal("the native seed did not get the object")
		}
		time.Sleep(50 * time.Millisecond) // the origin's count is all there is to watch
	}
	o.blocked.Store(true)
	b := openBrowser(t, nss[1], "B", o)
	if f := b.fetch(o); f.Stats.FromPeers != size || f.Stats.FromOrigin != 0 {
		t.Errorf("B, from a native seed, the origin blocked: %+v, want everything from peers", f.Stats)
	}
}
