package node_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/wire"
)

// errGone ends a fake peer's session as if its host had gone.
var errGone = errors.New("gone")

// TestHandOverProbe: a peer that leaves at once, once complete, waits for
// a neighbour lacking its pieces, for up to handOverQuiet (1 s) without an
// upload. A neighbour that went without a word (its GOODBYE and the end of
// its stream lost, as when a leaving host's reset is dropped at a full
// queue) must not hold it that long: the peer writes to the neighbours it
// waits for, and the write brings the end to light. The fake neighbour
// lacks every piece, never asks for one, and closes the connection when it
// reads a KEEPALIVE, as a host answers a write to a socket already gone.
func TestHandOverProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const handOverQuiet = time.Second // node's, not exported
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 64*KiB, 16*KiB, 25)
		// heard: the node's have-set came, so the node has registered the
		// neighbour (its writer starts after that) before anything completes.
		heard := make(chan struct{})
		probed := make(chan time.Time, 1)
		gone := func(s *fakeSession) error {
			if err := s.startEmpty(); err != nil {
				return err
			}
			if _, err := await[*wire.HaveSet](s); err != nil {
				return err
			}
			close(heard)
			if _, err := await[*wire.KeepAlive](s); err != nil {
				return err
			}
			select {
			case probed <- time.Now():
			default:
			}
			s.c.Close()
			return errGone
		}
		startFake(t, ctx, nw, m, gone, func(f *fakePeer) { f.leecher = true })
		st := openStore(t, m, data, func(int) bool { return false })
		fetch := storeOrigin(m, st, data)
		// The origin answers once the neighbour is connected, so that the peer
		// completes with a neighbour to hand over to.
		origin := func(ctx context.Context, fo swarm.FetchOrigin) (int, time.Duration, error) {
			select {
			case <-heard:
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			}
			return fetch(ctx, fo)
		}
		tn := startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, Origin: origin, Trackers: m.Trackers, SeedTime: 0,
			Swarm: swarm.Config{SmallDeadline: -1}}) // the rules of any file, not a small object's
		tn.wait(t, ctx)
		select {
		case <-tn.ended:
		case <-ctx.Done():
			t.Fatal("the peer did not leave")
		}
		if tn.runErr != nil {
			t.Fatalf("Run: %v", tn.runErr)
		}
		left := time.Since(tn.complete)
		select {
		case at := <-probed:
			t.Logf("probed %v after completion; left after %v", at.Sub(tn.complete), left)
		default:
			t.Fatalf("the peer left %v after completion without writing to the neighbour it waited for", left)
		}
		if left >= handOverQuiet {
			t.Errorf("the peer left %v after completion: it waited handOverQuiet for a neighbour that was gone", left)
		}
	})
}
