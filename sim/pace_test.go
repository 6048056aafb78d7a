package sim

import "testing"

// TestPacedUplinks: in a mixed crowd with the testbed's queues, the slow
// peers (1 Mbit/s up, 10 down) download at twice their uplink or more,
// and their uploads are paced, as node paces them: the pacer reads their
// uplink's capacity for payload and sends below it. With NoPacing nobody
// is paced.
func TestPacedUplinks(t *testing.T) {
	for _, noPacing := range []bool{false, true} {
		cfg, _, err := FromScenario(mixedCrowd(), Options{Queue: 80 << 10})
		if err != nil {
			t.Fatal(err)
		}
		cfg.NoPacing = noPacing
		s, r := run(t, cfg)
		slow := 0
		for _, c := range r.Classes {
			if c.Name == "slow" {
				slow = c.Paced
			}
		}
		t.Logf("NoPacing %v: %d paced, %d of them slow; last %.2f s", noPacing, r.Paced, slow, r.Last)
		if noPacing {
			if r.Paced != 0 {
				t.Errorf("NoPacing: %d peers paced", r.Paced)
			}
			continue
		}
		if slow < 5 {
			t.Errorf("%d of the 10 slow peers paced, want most", slow)
		}
		for _, n := range s.nodes {
			if n.firstRead == 0 {
				continue
			}
			if n.paceLink == nil || n.paceLink.bytes == 0 {
				t.Errorf("%v: paced, but no upload crossed its pace", n)
			}
			link := float64(payload(cfg.Peers[n.idx].Up))
			// What it read when it started pacing: later, as the
			// crowd thins out and the uploads no longer fill the
			// uplink, the reading decays, as it should.
			if c := n.firstRead; c < 0.7*link || c > 1.15*link {
				t.Errorf("%v: the pacer read %.0f B/s of an uplink carrying %.0f", n, c, link)
			}
		}
	}
}
