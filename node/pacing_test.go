package node_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/internal/uplink"
)

// TestUplinkRead: in a flash crowd whose uplinks are the bottleneck, the
// peers' pacers read their uplink's capacity (package uplink).
func TestUplinkRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const peers, size, up = 12, 8 * MiB, 1 * MiB
		ctx := testContext(t)
		nw := memNetwork{memnet.New()}
		o := startOrigin(t, originConfig{size: size, seed: 5, rate: 2 * MiB, net: nw})
		link := memnet.HostConfig{Up: up, Down: 4 * MiB, Latency: 5 * time.Millisecond}
		results := runSwarm(ctx, t, o, nw, peers, func(int) peerConfig { return peerConfig{link: link} })
		checkAll(t, o, results)
		read := 0
		for _, r := range results {
			sw := r.res.Swarm
			t.Logf("peer %2d: %v, sent %.1f MiB, capacity read %.0f KiB/s, pace %.0f KiB/s, the scheduler's %.0f KiB/s", r.idx, r.took.Round(time.Millisecond),
				float64(sw.BytesToPeers)/MiB, sw.UplinkCapacity/KiB, sw.UploadPace/KiB, sw.UploadCapacity/KiB)
			if sw.UplinkCapacity == 0 {
				continue
			}
			read++
			// The scheduler, which tells it to the neighbours (RATE),
			// knows the same uplink: the node's reading reaches it.
			if c := sw.UploadCapacity; c < 0.5*up || c > 2*up {
				t.Errorf("peer %d: the scheduler's upload capacity is %.0f KiB/s on a %d KiB/s uplink", r.idx, c/KiB, up/KiB)
			}
			// memnet's links let a tenth of a second's burst through,
			// and a memnet connection has no send buffer to count as
			// unacknowledged: up to 1.2 × read.
			if c := sw.UplinkCapacity; c < 0.7*up || c > 1.2*up {
				t.Errorf("peer %d read a capacity of %.0f KiB/s on a %d KiB/s uplink", r.idx, c/KiB, up/KiB)
			}
			// At the end a peer downloads little: unpaced (0), or paced.
			if p, c := sw.UploadPace, sw.UplinkCapacity; p != 0 && p != uplink.Fraction*c && p != uplink.ProbeGain*c {
				t.Errorf("peer %d: pace %.0f KiB/s, capacity %.0f KiB/s: want %v of it (or a probe's %v, or none)", r.idx, p/KiB, c/KiB, uplink.Fraction, uplink.ProbeGain)
			}
		}
		if read < peers/2 {
			t.Errorf("%d of %d peers read their uplink's capacity, want at least half", read, peers)
		}
	})
}
