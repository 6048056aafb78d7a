package tracker_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

// TestSeededMemoryStoreRepeats: a crowd's announces get the same answers
// (peers handed out, swarm size estimates) from two stores of one seed,
// and other answers from a store of another seed; the estimate, past the
// table's 256 peers, stays within 30% of the crowd with the seeded id
// hash.
func TestSeededMemoryStoreRepeats(t *testing.T) {
	answers := func(seed uint64) string {
		st := tracker.NewSeededMemoryStore(tracker.Limits{}, nil, seed)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		root := manifest.Hash{1}
		var out strings.Builder
		const n = 2000
		for i := range n {
			var id tracker.PeerID
			id[0], id[1], id[15] = byte(i), byte(i>>8), 0x5a
			addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 7000)
			o, err := st.Announce(t.Context(), tracker.AnnounceRequest{Root: root, Size: 1 << 20, ID: id, Port: 7000,
				Left: 1 << 20, Event: tracker.EventStarted, NumWant: 30}, addr, now)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&out, "%d %d %v\n", o.SwarmSize, o.Complete, o.Peers)
			if i == n-1 && (o.SwarmSize < n*7/10 || o.SwarmSize > n*13/10) {
				t.Errorf("seed %d: swarm size %d estimated for %d peers", seed, o.SwarmSize, n)
			}
			now = now.Add(10 * time.Millisecond)
		}
		return out.String()
	}
	a, b, c := answers(7), answers(7), answers(8)
	if a != b {
		t.Error("two stores of one seed answered differently")
	}
	if a == c {
		t.Error("stores of seeds 7 and 8 answered alike")
	}
}
