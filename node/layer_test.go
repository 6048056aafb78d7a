package node_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/wire"
)

// TestLayerFromNeighbours: peers that join with the manifest's head alone
// and have no origin to fetch the layer from get it from a neighbour (one
// that knows it, or one that learns it later and answers then), verify
// it, and complete.
func TestLayerFromNeighbours(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 256*KiB, 16*KiB, 21)
		m.Trackers = []string{serveTracker(t, nw)}
		seed := openStore(t, m, data, func(int) bool { return true })
		startNode(t, ctx, nw, node.Config{Manifest: m, Store: seed, Trackers: m.Trackers, SeedForever: true})
		var joiners []*testNode
		for range 3 {
			head := m.Head()
			if head.HasLayer() {
				t.Fatal("the head has the layer")
			}
			st := openStore(t, head, data, func(int) bool { return false })
			joiners = append(joiners, startNode(t, ctx, nw, node.Config{Manifest: head, Store: st, Trackers: m.Trackers, SeedForever: true}))
		}
		for i, tn := range joiners {
			tn.wait(t, ctx)
			if from := tn.nd.Stats().LayerFrom; from != "peer" {
				t.Errorf("joiner %d: layer from %q, want peer", i, from)
			}
		}
	})
}

// TestLayerLiar: a neighbour whose layer does not hash to the root is
// dropped and banned, as for a corrupt piece, and the layer comes from the
// origin; nothing it said is used.
func TestLayerLiar(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 256*KiB, 16*KiB, 22)
		f := startFake(t, ctx, nw, m, layerLiar, func(f *fakePeer) { f.leecher, f.layer = true, true })
		head := m.Head()
		st := openStore(t, head, data, func(int) bool { return false })
		origin := storeOrigin(m, st, data)
		// The origin's layer comes only once the liar's connection has
		// ended, so the node must have judged the liar's answer first.
		var how string
		fetchLayer := func(ctx context.Context) ([]manifest.Hash, error) {
			select {
			case how = <-f.ended:
				return m.Pieces, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Second):
				return nil, errors.New("the liar's connection is still up")
			}
		}
		tn := startNode(t, ctx, nw, node.Config{Manifest: head, Store: st, Origin: origin, FetchLayer: fetchLayer, Trackers: m.Trackers, SeedForever: true})
		tn.wait(t, ctx)
		t.Logf("the liar's connection ended with %q after %d GETLAYERs", how, f.getLayer.Load())
		if how != "corrupt" {
			t.Errorf("the liar's connection ended with %q, want the GOODBYE of a ban (corrupt)", how)
		}
		if r := wire.GoodbyeReason(f.byeReason.Load()); r != wire.GoodbyeCorrupt {
			t.Errorf("the ban's GOODBYE has reason %d, want %d (corrupt data)", r, wire.GoodbyeCorrupt)
		}
		if f.getLayer.Load() == 0 {
			t.Error("the liar was never asked for the layer")
		}
		ns := tn.nd.Stats()
		if ns.LayerFrom != "origin" {
			t.Errorf("layer from %q, want origin", ns.LayerFrom)
		}
		if ns.PeersBanned != 1 {
			t.Errorf("%d peers banned, want 1 (the liar)", ns.PeersBanned)
		}
	})
}

// TestLayerAskedOnce: a neighbour gets the layer once a connection; asking
// again (a 13-byte frame for a 16 KiB answer, outside the upload limit)
// ends the connection.
func TestLayerAskedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 256*KiB, 16*KiB, 23)
		f := startFake(t, ctx, nw, m, layerGreedy, func(f *fakePeer) { f.layer = true })
		st := openStore(t, m, data, func(int) bool { return false })
		origin := storeOrigin(m, st, data)
		startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, Origin: origin, Trackers: m.Trackers, SeedForever: true})
		select {
		case how := <-f.ended:
			t.Logf("the connection ended with %q", how)
		case <-ctx.Done():
			t.Fatal("the connection asking twice is still up")
		}
		// The first answer may be cut off by the close; a second must not come.
		if got := f.layers.Load(); got > 1 {
			t.Errorf("%d LAYER answers on one connection, want at most 1", got)
		}
	})
}

// TestLayerGrace: a joiner that draws an origin fetch of the layer while
// the tracker names a neighbour gives the neighbour layerGrace to answer
// before it asks the origin; one the tracker names nobody to fetches from
// the origin at once, not after layerWait.
func TestLayerGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 256*KiB, 16*KiB, 24)
		m.Trackers = []string{serveTracker(t, nw)}
		joiner := func() (tn *testNode, start time.Time, fetched <-chan time.Duration) {
			head := m.Head()
			st := openStore(t, head, data, func(int) bool { return false })
			calls := make(chan time.Duration, 1)
			fetchLayer := func(context.Context) ([]manifest.Hash, error) {
				select {
				case calls <- time.Since(start):
				default:
				}
				return m.Pieces, nil
			}
			start = time.Now()
			tn = startNode(t, ctx, nw, node.Config{Manifest: head, Store: st, Origin: storeOrigin(m, st, data), FetchLayer: fetchLayer, Trackers: m.Trackers, SeedForever: true})
			return tn, start, calls
		}

		// Alone: a swarm of one is under k, so it draws, and nobody could answer.
		first, _, fetched := joiner()
		first.wait(t, ctx)
		select {
		case after := <-fetched:
			t.Logf("the first joiner asked the origin for the layer after %v", after)
			if after >= 1500*time.Millisecond {
				t.Errorf("the first joiner, alone, asked the origin for the layer after %v: it waited for layerWait", after)
			}
		default:
			t.Fatalf("the first joiner, alone, has the file (layer from %q) without asking the origin for the layer", first.nd.Stats().LayerFrom)
		}
		// The second draws too (a swarm of two) but has the first to ask: the
		// origin may be asked only once the grace is over (never, unless the
		// neighbour is slow to answer).
		second, _, fetched := joiner()
		second.wait(t, ctx)
		select {
		case after := <-fetched:
			if after < 300*time.Millisecond {
				t.Errorf("the second joiner asked the origin for the layer after %v, within the grace its neighbour had", after)
			}
			t.Logf("the second joiner asked the origin after %v; layer from %q", after, second.nd.Stats().LayerFrom)
		default:
			t.Logf("the second joiner had the layer from %q", second.nd.Stats().LayerFrom)
		}
	})
}
