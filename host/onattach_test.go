package host_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stampede-dev/stampede/host"
	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/node"
)

// TestOnAttach: OnAttach hears of every node attached, and what it returns
// is called when the node is detached. It is called without the host's
// lock: it may ask the host for its Stats (under the lock, a deadlock).
func TestOnAttach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var attached []*node.Node
		left := 0
		var h *host.Host
		swarms := -1
		h = startHost(t, ctx, memnet.New(), host.Config{OnAttach: func(n *node.Node) func() {
			attached = append(attached, n)
			swarms = h.Stats().Swarms
			return func() { left++ }
		}})
		f := newFile(t, 64*KiB, 16*KiB, 12)
		n, err := node.New(node.Config{Manifest: f.m, Store: f.open(t, t.TempDir(), true), Host: h, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		detach, err := h.Attach(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(attached) != 1 || attached[0] != n || left != 0 || swarms != 1 {
			t.Fatalf("after Attach: %d attached, %d left, %d swarms seen from OnAttach", len(attached), left, swarms)
		}
		detach()
		if left != 1 {
			t.Errorf("after detach: %d left, want 1", left)
		}
	})
}
