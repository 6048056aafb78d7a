package tracker

import (
	"slices"
	"testing"
	"time"
)

// TestSmallObjectRecentFirst: the swarm of a small object is answered in
// the order its peers last announced, most recent first, so an arrival
// meets the peers still there (those that just arrived, those that just
// completed and hand over); a larger file's answer puts seeds first.
func TestSmallObjectRecentFirst(t *testing.T) {
	for _, c := range []struct {
		name string
		size int64
		want []int // peers, in the answer's order
	}{
		{"small", 64 << 10, []int{3, 2, 1}},
		{"large", testSize, []int{1, 3, 2}},
	} {
		h := newHarness(t, Config{})
		announce := func(i int, ev Event, left int64) []Peer {
			t.Helper()
			h.clock.now = h.clock.now.Add(time.Second)
			res, err := h.tr.Announce(AnnounceRequest{Root: testRoot, Size: c.size, ID: peer(i).id, Port: 7000, Left: left, Event: ev, NumWant: 10}, peer(i).addr())
			if err != nil {
				t.Fatalf("%s: announce of peer %d: %v", c.name, i, err)
			}
			return res.Peers
		}
		// Peer 1 completed first (a seed that may be gone), then 2 and 3
		// arrived.
		announce(1, EventStarted, 1)
		announce(1, EventCompleted, 0)
		announce(2, EventStarted, 1)
		announce(3, EventStarted, 1)
		var got []int
		for _, p := range announce(4, EventStarted, 1) {
			got = append(got, slices.IndexFunc([]int{0, 1, 2, 3}, func(i int) bool { return peer(i).id == p.ID }))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: peers answered %v, want %v", c.name, got, c.want)
		}
	}
}
