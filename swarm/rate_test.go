package swarm

import (
	"math"
	"testing"
	"time"
)

// TestSampleRate: how a delivery moves a peer's rate estimate (sample).
// The estimate starts at 100,000 B/s; a sample moves it a quarter of the
// way, a sample capped at 4× the estimate.
func TestSampleRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const b = 100_000 // bytes per piece
	for _, tc := range []struct {
		name     string
		pathRTT  time.Duration
		sent     time.Duration // request sent, after t0
		lastRecv time.Duration // previous delivery, after t0
		at       time.Duration // this delivery, after t0
		want     float64
	}{
		// Not queued, path RTT known: the transfer took the request-to-
		// delivery time less the RTT: 100,000 B in 0.4 s, 250,000 B/s.
		{"not queued, path known", 100 * time.Millisecond, 0, -time.Second, 500 * time.Millisecond, 100_000 + (250_000-100_000)/4.0},
		// Without a path RTT, a piece not queued is no rate sample.
		{"not queued, path unknown", 0, 0, -time.Second, 500 * time.Millisecond, 100_000},
		// Delivered within the path RTT: no sample (the clocks say nothing).
		{"within the RTT", 600 * time.Millisecond, 0, -time.Second, 500 * time.Millisecond, 100_000},
		// Asked before the previous piece came, but too late after it to
		// count as queued (over 1.5 transfer times at 100,000 B/s): the
		// bytes came after the previous piece, 100,000 B in 2 s.
		{"asked before the previous", 100 * time.Millisecond, 0, time.Second, 3 * time.Second, 100_000 + (50_000-100_000)/4.0},
		// Queued behind the previous piece: the time since it, 0.5 s.
		{"queued", 100 * time.Millisecond, 0, time.Second, 1500 * time.Millisecond, 100_000 + (200_000-100_000)/4.0},
		// A sample far above the estimate counts as 4× it.
		{"capped", 10 * time.Millisecond, 0, -time.Second, 20 * time.Millisecond, 100_000 + (400_000-100_000)/4.0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &peer{rate: 100_000, samples: 1, lat: 50 * time.Millisecond, pathRTT: tc.pathRTT, lastRecv: t0.Add(tc.lastRecv)}
			p.sample(outReq{sent: t0.Add(tc.sent)}, b, t0.Add(tc.at))
			if math.Abs(p.rate-tc.want) > 1 {
				t.Fatalf("rate %.0f B/s, want %.0f", p.rate, tc.want)
			}
		})
	}
}
