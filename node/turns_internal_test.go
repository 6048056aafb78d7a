package node

import (
	"testing"
	"time"
)

// TestSlowAfter: a turn goes back past 1.25 times its piece's time at its share
// of the most upload measured, never sooner than turnSlowMin, and is held
// as long as it progresses before any upload was measured.
func TestSlowAfter(t *testing.T) {
	for _, c := range []struct {
		turns int
		piece int64
		peak  float64
		want  time.Duration
	}{
		{3, 64 << 10, 0, 0},                              // nothing measured
		{3, 64 << 10, 1e6, 245760 * time.Microsecond},    // 8 Mbit/s: 1.25 × 3 × 65.5 ms
		{3, 64 << 10, 2.5e6, 98304 * time.Microsecond},   // 20 Mbit/s
		{1, 64 << 10, 1e9, turnSlowMin},                  // a fast uplink: the floor
		{3, 1 << 20, 125e3, 31457280 * time.Microsecond}, // 1 Mbit/s, 1 MiB pieces
	} {
		if got := slowAfter(c.turns, c.piece, c.peak); got != c.want {
			t.Errorf("slowAfter(%d, %d, %g) = %v, want %v", c.turns, c.piece, c.peak, got, c.want)
		}
	}
}
