package node_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/tracker"
)

// TestLayerFromNeighbours: peers that join with the manifest's head alone
// and have no origin to fetch the layer from get it from a neighbour (one
// that knows it, or one that learns it later and answers then), verify
// it, and complete.
func TestLayerFromNeighbours(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nw := memnet.New()
	data, m := testFile(t, 256*KiB, 16*KiB, 21)
	m.Trackers = []string{serveHTTP(t, nw, tracker.New(tracker.Config{})) + tracker.WellKnownPath}
	seed := openStore(t, m, data, func(int) bool { return true })
	startNode(t, ctx, nw, node.Config{Manifest: m, Store: seed, Trackers: m.Trackers, SeedTime: -1})
	var joiners []*testNode
	for range 3 {
		head := m.Head()
		if head.HasLayer() {
			t.Fatal("the head has the layer")
		}
		st := openStore(t, head, data, func(int) bool { return false })
		joiners = append(joiners, startNode(t, ctx, nw, node.Config{Manifest: head, Store: st, Trackers: m.Trackers, SeedTime: -1}))
	}
	for i, tn := range joiners {
		tn.wait(t, ctx)
		if from := tn.nd.Stats().LayerFrom; from != "peer" {
			t.Errorf("joiner %d: layer from %q, want peer", i, from)
		}
	}
}

// TestLayerLiar: a neighbour whose layer does not hash to the root is
// dropped, and the layer comes from the origin; nothing it said is used.
func TestLayerLiar(t *testing.T) {
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
	tn := startNode(t, ctx, nw, node.Config{Manifest: head, Store: st, Origin: origin, FetchLayer: fetchLayer, Trackers: m.Trackers, SeedTime: -1})
	tn.wait(t, ctx)
	t.Logf("the liar's connection ended with %q after %d GETLAYERs", how, f.getLayer.Load())
	if f.getLayer.Load() == 0 {
		t.Error("the liar was never asked for the layer")
	}
	if from := tn.nd.Stats().LayerFrom; from != "origin" {
		t.Errorf("layer from %q, want origin", from)
	}
}

// TestLayerAskedOnce: a neighbour gets the layer once a connection; asking
// again (a 13-byte frame for a 16 KiB answer, outside the upload limit)
// ends the connection.
func TestLayerAskedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nw := memnet.New()
	data, m := testFile(t, 256*KiB, 16*KiB, 23)
	f := startFake(t, ctx, nw, m, layerGreedy, func(f *fakePeer) { f.layer = true })
	st := openStore(t, m, data, func(int) bool { return false })
	origin := storeOrigin(m, st, data)
	startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, Origin: origin, Trackers: m.Trackers, SeedTime: -1})
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
}

// TestLayerGrace: a joiner that draws an origin fetch of the layer while
// the tracker names a neighbour gives the neighbour layerGrace to answer
// and never asks the origin; one the tracker names nobody to fetches from
// the origin at once, without waiting for layerWait.
func TestLayerGrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nw := memnet.New()
	data, m := testFile(t, 256*KiB, 16*KiB, 24)
	m.Trackers = []string{serveHTTP(t, nw, tracker.New(tracker.Config{})) + tracker.WellKnownPath}
	var fetches atomic.Int32
	fetchLayer := func(context.Context) ([]manifest.Hash, error) {
		fetches.Add(1)
		return m.Pieces, nil
	}
	joiner := func() (*testNode, time.Time) {
		head := m.Head()
		st := openStore(t, head, data, func(int) bool { return false })
		origin := storeOrigin(m, st, data)
		start := time.Now()
		return startNode(t, ctx, nw, node.Config{Manifest: head, Store: st, Origin: origin, FetchLayer: fetchLayer, Trackers: m.Trackers, SeedTime: -1}), start
	}

	// Alone: the swarm of one is under k, so it draws, and nobody could answer.
	first, start := joiner()
	first.wait(t, ctx)
	if from := first.nd.Stats().LayerFrom; from != "origin" || fetches.Load() != 1 {
		t.Fatalf("the first joiner, alone: layer from %q after %d origin fetches, want origin after 1", from, fetches.Load())
	}
	if took := time.Since(start); took >= 1500*time.Millisecond {
		t.Errorf("the first joiner, alone, had the file after %v: it waited for layerWait", took)
	}
	// The second draws too (a swarm of two) but has the first to ask.
	second, _ := joiner()
	second.wait(t, ctx)
	if from := second.nd.Stats().LayerFrom; from != "peer" {
		t.Errorf("the second joiner: layer from %q, want peer", from)
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("%d origin fetches of the layer, want 1: the second joiner did not wait for its neighbour", n)
	}
}
