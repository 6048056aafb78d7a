package tracker

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// checkTable verifies the table's invariants: the index and the list agree
// with the rows, the list runs from the most to the least recently seen,
// and the seed count is right.
func checkTable(t *testing.T, tb *table) {
	t.Helper()
	if tb.len() > tb.capacity {
		t.Fatalf("%d rows, capacity %d", tb.len(), tb.capacity)
	}
	if len(tb.index) != tb.len() {
		t.Fatalf("index of %d, %d rows", len(tb.index), tb.len())
	}
	seeds := 0
	for i, p := range tb.rows {
		if j, ok := tb.index[p.id]; !ok || j != int32(i) {
			t.Fatalf("row %d (%s) indexed at %d, %v", i, p.id, j, ok)
		}
		if p.complete {
			seeds++
		}
	}
	if seeds != tb.seeds {
		t.Fatalf("seeds %d, counted %d", tb.seeds, seeds)
	}
	n, prev := 0, int32(-1)
	for i := tb.head; i >= 0; i = tb.rows[i].next {
		if tb.rows[i].prev != prev {
			t.Fatalf("row %d: prev %d, want %d", i, tb.rows[i].prev, prev)
		}
		if prev >= 0 && tb.rows[prev].seen.Before(tb.rows[i].seen) {
			t.Fatalf("row %d seen after row %d, yet listed behind it", i, prev)
		}
		prev = i
		if n++; n > tb.len() {
			t.Fatal("the list loops")
		}
	}
	if n != tb.len() || tb.tail != prev {
		t.Fatalf("list of %d rows ending at %d; %d rows, tail %d", n, prev, tb.len(), tb.tail)
	}
}

// TestSwarmRandomAnnounces drives one swarm with random announces of a
// population larger than its table and checks the table after each.
func TestSwarmRandomAnnounces(t *testing.T) {
	const interval = 10 * time.Second
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Unix(1e6, 0)
	s := newSwarm(interval, 16, DefaultMaxPeersPerAddress, 1, now)
	events := []Event{EventNone, EventNone, EventNone, EventStarted, EventCompleted, EventStopped}
	for step := range 20000 {
		now = now.Add(time.Duration(rng.IntN(int(300 * time.Millisecond))))
		p := peer(rng.IntN(40))
		a := announce{AnnounceRequest: AnnounceRequest{ID: p.id, Port: uint16(rng.IntN(3)), Left: int64(rng.IntN(2)),
			Event: events[rng.IntN(len(events))], NumWant: 1 + rng.IntN(MaxNumWant)}, hash: rng.Uint64()}
		if a.Event == EventCompleted {
			a.Left = 0
		}
		a.addr = netip.AddrPortFrom(p.ip, a.Port)
		res := s.announce(a, now)
		checkTable(t, &s.peers)
		if len(res.peers) > a.NumWant {
			t.Fatalf("step %d: %d peers for numwant %d", step, len(res.peers), a.NumWant)
		}
		seen := make(map[PeerID]bool)
		seeding := true
		for _, q := range res.peers {
			if q.ID == a.ID || q.Addr.Port() == 0 || seen[q.ID] {
				t.Fatalf("step %d: %+v handed %+v", step, a, res.peers)
			}
			if q.Complete && !seeding && !res.rateLimited {
				t.Fatalf("step %d: a seed after a leecher: %+v", step, res.peers)
			}
			seeding = seeding && q.Complete
			seen[q.ID] = true
		}
		if res.swarmSize < s.peers.len() || res.complete > res.swarmSize {
			t.Fatalf("step %d: swarm_size %d, complete %d, table %d", step, res.swarmSize, res.complete, s.peers.len())
		}
		if rng.IntN(500) == 0 {
			now = now.Add(expiryIntervals * interval)
		}
	}
}
