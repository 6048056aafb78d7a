package swarm

import (
	"testing"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
)

// TestLayerPendingRequestsNothing: a peer that joined with the root alone
// connects and learns have-sets, but asks neither peers nor the origin for
// a piece until LayerReady; then it asks at once.
func TestLayerPendingRequestsNothing(t *testing.T) {
	s := New(Config{NumPieces: 16, Seed: 1, LayerPending: true}, nil, t0)
	s.Start(t0)
	now := t0
	asked := func(acts []Action) (peer, origin int) {
		for _, a := range acts {
			switch a.(type) {
			case Request:
				peer++
			case FetchOrigin:
				origin++
			}
		}
		return peer, origin
	}
	var acts []Action
	acts = append(acts, s.Step(TrackerPeers{SwarmSize: 1}, now)...)
	acts = append(acts, s.Step(PeerUp{Peer: 1, Addr: "192.0.2.1:1"}, now)...)
	acts = append(acts, s.Step(HaveSet{Peer: 1, Set: pieceset.Full(16)}, now)...)
	acts = append(acts, s.Step(Unchoked{Peer: 1}, now)...)
	for range 20 {
		now = now.Add(250 * time.Millisecond)
		acts = append(acts, s.Step(Tick{}, now)...)
	}
	if p, o := asked(acts); p+o > 0 {
		t.Fatalf("with the layer pending: %d requests to peers, %d origin fetches", p, o)
	}
	p, o := asked(s.Step(LayerReady{}, now))
	if p == 0 {
		t.Fatalf("after LayerReady: no request to the unchoking seed (%d origin fetches)", o)
	}
}
