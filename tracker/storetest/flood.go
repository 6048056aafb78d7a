package storetest

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

// Attacks over HTTP, at the tracker's defaults, with the time simulated:
// the figures docs/tracker.md quotes come from these tests' logs
// (go test ./tracker -run 'MemoryStore/(RandomRootFlood|SybilFlood|SwarmHoardFlood)' -v).

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

// testSwarmHoardFlood: four addresses hold every swarm slot (a review's
// attack on an open tracker). They announce together to 1,024 random
// roots, so that every swarm has peers of the four and is never lone,
// then keep each alive from two of them, each address announcing 18
// times a second (under the rate limit) and spending what that leaves on
// new random roots. Honest peers then start swarms, two of other
// addresses each, the second 2 s after the first, one swarm every 1.5 s
// for three intervals: every one is kept, and neither those nor 8 swarms
// live since before the attack ever lose a peer to it.
func testSwarmHoardFlood(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore, tracker.Config{Logger: slog.New(slog.DiscardHandler)})
	rng := rand.New(rand.NewPCG(13, 14))
	const (
		attackers = 4
		perSecond = 18               // each attacker's announces
		keepEvery = 40 * time.Second // under the 45 s a peer stays
	)
	interval := tracker.DefaultInterval
	roots := make([]manifest.Hash, tracker.DefaultMaxSwarms)
	for k := range roots {
		roots[k] = randomHash(rng)
	}
	attacker := func(s, k int) testPeer {
		p := peerAt(fmt.Sprintf("198.51.100.%d", s+1), 0)
		p.id = tracker.PeerID{0xa7, byte(s), byte(k >> 8), byte(k)}
		return p
	}
	var (
		joined         [attackers]int // roots joined, in order
		keep           [attackers][]keepAlive
		ok, throttled  int
		spare          int
		start          = h.clock.Now()
		honestFrom     time.Time // zero until every root is joined
		nextHonest     time.Time
		honest         []*honestSwarm
		kept, lostLive int
	)
	send := func(root manifest.Hash, p testPeer, ev tracker.Event) {
		switch rec := serve(h.tr, query(root, p, ev, 1000, 50), netip.AddrPortFrom(p.ip, 40000).String()); rec.Code {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			throttled++
		default:
			t.Fatalf("attacker: %d %s", rec.Code, rec.Body)
		}
	}
	// Swarms live since before the attack.
	for i := range 8 {
		hs := &honestSwarm{root: randomHash(rng), live: true}
		for j := range hs.peers {
			hs.peers[j] = peerAt(fmt.Sprintf("10.1.%d.%d", i, j+1), 0)
			hs.peers[j].id = tracker.PeerID{0x11, byte(i), byte(j)}
			hs.next[j] = start
		}
		honest = append(honest, hs)
	}
	tick := time.Second / perSecond
	for n := 0; ; n++ {
		now := h.clock.Now()
		if !honestFrom.IsZero() && now.Sub(honestFrom) >= 4*interval {
			break
		}
		for r := range attackers {
			s := (n + r) % attackers
			switch {
			case len(keep[s]) > 0 && !keep[s][0].at.After(now):
				k := keep[s][0].k
				keep[s] = append(keep[s][1:], keepAlive{k, now.Add(keepEvery)})
				send(roots[k], attacker(s, k), tracker.EventNone)
			case joined[s] < len(roots):
				k := joined[s]
				joined[s]++
				send(roots[k], attacker(s, k), tracker.EventStarted)
				if k%attackers == s || (k+1)%attackers == s {
					keep[s] = append(keep[s], keepAlive{k, now.Add(keepEvery)})
				}
			default:
				spare++
				send(randomHash(rng), randomPeer(rng, fmt.Sprintf("198.51.100.%d", s+1), 7000), tracker.EventStarted)
			}
		}
		if honestFrom.IsZero() && min(joined[0], joined[1], joined[2], joined[3]) == len(roots) {
			honestFrom = now.Add(5 * time.Second)
			nextHonest = honestFrom
		}
		// A new honest swarm every 1.5 s for three intervals, its second
		// peer 2 s after its first.
		if !honestFrom.IsZero() && !now.Before(nextHonest) && now.Sub(honestFrom) < 3*interval {
			i := len(honest)
			hs := &honestSwarm{root: randomHash(rng)}
			for j := range hs.peers {
				hs.peers[j] = peerAt(fmt.Sprintf("10.2.%d.%d", i, j+1), 0)
				hs.peers[j].id = tracker.PeerID{0x22, byte(i), byte(j)}
				hs.next[j] = now.Add(time.Duration(j) * 2 * time.Second)
			}
			honest = append(honest, hs)
			nextHonest = nextHonest.Add(1500 * time.Millisecond)
		}
		for _, hs := range honest {
			for j, p := range hs.peers {
				if now.Before(hs.next[j]) {
					continue
				}
				ev := tracker.EventNone
				if !hs.joined[j] {
					ev = tracker.EventStarted
				}
				res := h.announceTo(hs.root, p, ev, 1000, 50)
				hs.next[j] = now.Add(interval)
				if partner := hs.peers[1-j]; hs.joined[1-j] && !hs.lost {
					if res.SwarmSize == 2 && containsID(res.Peers, partner.id) {
						if !hs.kept && !hs.live {
							kept++
						}
						hs.kept = true
					} else {
						hs.lost = true
						if hs.live {
							lostLive++
						}
						t.Errorf("%v into the attack: honest swarm %d (live before it: %v) answered swarm_size %d and %d peers, want 2 and its other peer",
							now.Sub(start).Round(time.Second), slices.Index(honest, hs), hs.live, res.SwarmSize, len(res.Peers))
					}
				}
				hs.joined[j] = true
			}
		}
		h.clock.Advance(tick)
	}
	m := h.metrics()
	t.Logf("4 addresses, %d/s each for %v (every root joined after %v): %d answered, %d throttled (429), %d of them to new random roots; "+
		"%d swarms kept, %d pushed out, %d new ones not kept; %d of %d honest swarms started under the attack kept, %d of 8 live before it lost",
		perSecond, h.clock.Now().Sub(start).Round(time.Second), honestFrom.Add(-5*time.Second).Sub(start).Round(time.Second), ok, throttled, spare,
		m["stampede_tracker_swarms"], m[`stampede_tracker_swarms_removed_total{reason="limit"}`], m["stampede_tracker_announces_swarms_full_total"],
		kept, len(honest)-8, lostLive)
	if throttled != 0 {
		t.Errorf("%d of the attack's announces throttled: it should stay under the rate limit", throttled)
	}
	if m["stampede_tracker_swarms"] > int64(tracker.DefaultMaxSwarms) {
		t.Errorf("%d swarms kept", m["stampede_tracker_swarms"])
	}
}

// keepAlive is an attacker's next announce to keep root k's swarm alive.
type keepAlive struct {
	k  int
	at time.Time
}

// honestSwarm is a swarm of two honest peers of two addresses.
type honestSwarm struct {
	root   manifest.Hash
	peers  [2]testPeer
	joined [2]bool      // announced started
	next   [2]time.Time // next announce
	live   bool         // made before the attack
	kept   bool         // a peer was handed the other
	lost   bool         // a peer was not handed the other, after it joined
}
