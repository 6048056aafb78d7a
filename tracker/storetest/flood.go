package storetest

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

// Attacks over HTTP, at the tracker's defaults, with the time simulated:
// the figures docs/tracker.md quotes come from these tests' logs
// (go test ./tracker -run 'MemoryStore/(RandomRootFlood|SybilFlood)' -v).

// flood sends the attacker's announces over HTTP for d at perSecond,
// from the addresses given in turn, with next making each query, and
// calls every(elapsed) once a second; it returns how many were answered
// 200 and 429.
func (h *harness) flood(d time.Duration, perSecond int, from []string, next func(rng *rand.Rand) string, every func(elapsed time.Duration)) (ok, throttled int) {
	h.t.Helper()
	rng := rand.New(rand.NewPCG(11, 12))
	step := time.Second / time.Duration(perSecond)
	for i := range int(d / step) {
		h.clock.Advance(step)
		rec := serve(h.tr, next(rng), from[i%len(from)])
		switch rec.Code {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			throttled++
		default:
			h.t.Fatalf("flood: %d %s", rec.Code, rec.Body)
		}
		if (i+1)%perSecond == 0 {
			every(time.Duration(i+1) * step)
		}
	}
	return ok, throttled
}

func randomHash(rng *rand.Rand) manifest.Hash {
	var h manifest.Hash
	for i := range h {
		h[i] = byte(rng.Uint32())
	}
	return h
}

// testRandomRootFlood: 4,000 announces a second to random roots from 16
// addresses for three intervals, at the default limits: a live swarm's
// peers are handed out all along, to its peers and to a newcomer.
func testRandomRootFlood(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{Logger: slog.New(slog.DiscardHandler)})
	live := []testPeer{peer(1), peer(2), peer(3)}
	for _, p := range live {
		h.announce(p, tracker.EventStarted, 1000, 0)
	}
	var attackers []string
	for i := range 16 {
		attackers = append(attackers, fmt.Sprintf("198.51.100.%d:40000", i+1))
	}
	newcomers, handed := 0, 0
	ok, throttled := h.flood(3*tracker.DefaultInterval, 4000, attackers, func(rng *rand.Rand) string {
		return query(randomHash(rng), randomPeer(rng, "198.51.100.1", 7000), tracker.EventStarted, 1000, 50)
	}, func(elapsed time.Duration) {
		// The live peers announce once an interval, each at its own
		// second; a newcomer arrives every second.
		if s := int(elapsed / time.Second); s%int(tracker.DefaultInterval/time.Second) < len(live) {
			p := live[s%int(tracker.DefaultInterval/time.Second)]
			if res := h.announce(p, tracker.EventNone, 1000, 50); len(res.Peers) != len(live)-1+newcomers {
				t.Fatalf("%v into the flood: live peer %s handed %d peers, want %d", elapsed, p.id, len(res.Peers), len(live)-1+newcomers)
			}
		}
		res := h.announce(peer(100+newcomers), tracker.EventStarted, 1000, 50)
		for _, p := range live {
			if !containsID(res.Peers, p.id) {
				t.Fatalf("%v into the flood: the newcomer was not handed live peer %s (got %d peers)", elapsed, p.id, len(res.Peers))
			}
		}
		newcomers++
		handed++
	})
	m := h.metrics()
	t.Logf("random-root flood, 4,000/s from 16 addresses for %v: %d answered, %d throttled (429); %d swarms kept, %d pushed out; "+
		"the live swarm handed its peers to %d newcomers of %d, and to its own peers at every announce",
		3*tracker.DefaultInterval, ok, throttled, m["stampede_tracker_swarms"], m[`stampede_tracker_swarms_removed_total{reason="limit"}`], handed, newcomers)
	if m["stampede_tracker_swarms"] > int64(tracker.DefaultMaxSwarms) {
		t.Errorf("%d swarms kept", m["stampede_tracker_swarms"])
	}
}

func containsID(peers []tracker.Peer, id tracker.PeerID) bool {
	for _, p := range peers {
		if p.ID == id {
			return true
		}
	}
	return false
}

// testSybilFlood: 1,000 announces a second with random ids (port 0, as
// behind a NAT) from one address into a swarm, for four intervals, at
// the default limits: swarm_size stays within MaxPeersPerAddress of the
// honest count, with a swarm within its table (4 peers) and one past it
// (300 peers, the estimator counting).
func testSybilFlood(t *testing.T, newStore NewStore) {
	for _, honest := range []int{4, 300} {
		t.Run(fmt.Sprint(honest), func(t *testing.T) {
			h := newHarness(t, newStore, tracker.Config{Logger: slog.New(slog.DiscardHandler)})
			for i := range honest {
				h.announce(peer(i), tracker.EventStarted, 1000, 0)
			}
			lo, hi := 1<<30, 0
			ok, throttled := h.flood(4*tracker.DefaultInterval, 1000, []string{"198.51.100.7:40000"}, func(rng *rand.Rand) string {
				return query(testRoot, randomPeer(rng, "198.51.100.7", 0), tracker.EventStarted, 1000, 0)
			}, func(elapsed time.Duration) {
				// The honest peers announce once an interval, spread over it.
				per := max(1, honest/int(tracker.DefaultInterval/time.Second))
				s := int(elapsed / time.Second)
				for k := range per {
					i := (s*per + k) % honest
					if k > 0 && i == (s*per)%honest {
						break
					}
					res := h.announce(peer(i), tracker.EventNone, 1000, 0)
					if elapsed > tracker.DefaultInterval { // all have announced once under the flood
						lo, hi = min(lo, res.SwarmSize), max(hi, res.SwarmSize)
					}
				}
			})
			t.Logf("%d honest peers, 1,000 fake ids/s from one address for %v (%d answered, %d throttled): swarm_size %d to %d",
				honest, 4*tracker.DefaultInterval, ok, throttled, lo, hi)
			if float64(hi) > 1.1*float64(honest)+float64(tracker.DefaultMaxPeersPerAddress) || float64(lo) < 0.9*float64(honest) {
				t.Errorf("swarm_size %d to %d, want %d plus at most %d", lo, hi, honest, tracker.DefaultMaxPeersPerAddress)
			}
		})
	}
}
