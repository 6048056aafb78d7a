package node_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/wire"
)

// TestAdoptNotRunning: a node that is not running, before Run or after it,
// refuses a connection offered to Adopt and leaves it untouched: it is
// still the caller's, to answer and to close.
func TestAdoptNotRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data, m := testFile(t, 64*KiB, 16*KiB, 40)
		st := openStore(t, m, data, func(int) bool { return true })
		ln, err := memnet.New().Host(memnet.HostConfig{}).Listen(0)
		if err != nil {
			t.Fatal(err)
		}
		nd, err := node.New(node.Config{Manifest: m, Store: st, Listener: ln, SeedForever: true, Logger: testLogger(t, slog.LevelWarn)})
		if err != nil {
			t.Fatal(err)
		}
		theirs := wire.Handshake{Root: m.Root, Size: uint64(m.Size), PeerID: wire.NewPeerID()}
		check := func(when string) {
			t.Helper()
			c, peer := memnet.Pipe(memnet.Shape{}, memnet.Shape{})
			defer c.Close()
			defer peer.Close()
			if nd.Adopt(c, theirs) {
				t.Errorf("%s: Adopt took the connection", when)
			}
			buf := make([]byte, 1)
			peer.SetReadDeadline(time.Now().Add(wire.HandshakeTimeout + time.Second))
			if n, err := peer.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s: the peer read %d bytes (%v), want none", when, n, err)
			}
			if _, err := c.Write([]byte("x")); err != nil {
				t.Errorf("%s: the connection is closed: %v", when, err)
			}
			peer.SetReadDeadline(time.Time{})
			if _, err := peer.Read(buf); err != nil || buf[0] != 'x' {
				t.Errorf("%s: the peer read %q, %v; want what we wrote", when, buf, err)
			}
		}
		check("before Run")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- nd.Run(ctx) }()
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		check("after Run")
	})
}
