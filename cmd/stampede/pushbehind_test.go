package main

import (
	"slices"
	"testing"
	"time"
)

// watchRun feeds a rackWatch every 500 ms for dur: rate(rack, t) is each
// rack's bytes/s at t since the start. It returns when each rack was
// found behind.
func watchRun(size int64, racks []string, dur time.Duration, rate func(rack string, t time.Duration) float64) map[string][]time.Duration {
	start := time.Unix(1_700_000_000, 0)
	w := newRackWatch(size, 10*time.Second, start)
	got := map[string]float64{}
	found := map[string][]time.Duration{}
	const step = 500 * time.Millisecond
	for t := step; t <= dur; t += step {
		progress := map[string]int64{}
		for _, r := range racks {
			got[r] = min(float64(size), got[r]+rate(r, t)*step.Seconds())
			progress[r] = int64(got[r])
		}
		for _, r := range w.observe(start.Add(t), progress) {
			found[r] = append(found[r], t)
		}
	}
	return found
}

func TestRackWatch(t *testing.T) {
	const MB = 1e6
	racks := []string{"a", "b", "c"}
	for _, c := range []struct {
		name string
		size int64
		rate func(rack string, t time.Duration) float64
		// want: the rack found behind, and when (between from and to).
		want     string
		from, to time.Duration
	}{
		{"all alike", 1e9, func(string, time.Duration) float64 { return MB }, "", 0, 0},
		{"slow for a moment", 1e9, func(r string, t time.Duration) float64 {
			if r == "c" && t > 5*time.Second && t < 13*time.Second {
				return 0.05 * MB
			}
			return MB
		}, "", 0, 0},
		{"stays far behind", 1e9, func(r string, t time.Duration) float64 {
			if r == "c" {
				return 0.1 * MB
			}
			return MB
		}, "c", 10 * time.Second, 11 * time.Second},
		{"falls behind later", 1e9, func(r string, t time.Duration) float64 {
			if r == "b" && t > 20*time.Second {
				return 0.2 * MB
			}
			return MB
		}, "b", 30 * time.Second, 34 * time.Second},
		// The origin is the bottleneck: every rack is slow.
		{"all slow together", 1e9, func(r string, t time.Duration) float64 {
			if t > 5*time.Second {
				return 0.01 * MB
			}
			return MB
		}, "", 0, 0},
		{"all stalled", 1e9, func(r string, t time.Duration) float64 {
			if t > 5*time.Second {
				return 0
			}
			return MB
		}, "", 0, 0},
		// Racks done count at their average rate: the one left is behind.
		{"the others done", 10 * MB, func(r string, t time.Duration) float64 {
			if r == "a" {
				return 0.05 * MB
			}
			return 4 * MB
		}, "a", 10 * time.Second, 11 * time.Second},
		// Slower than the others, but not three times: not behind.
		{"somewhat slower", 1e9, func(r string, t time.Duration) float64 {
			if r == "c" {
				return 0.4 * MB
			}
			return MB
		}, "", 0, 0},
		// Ahead of the others, slowing for its last pieces: not behind.
		{"ahead, then slow", 60 * MB, func(r string, t time.Duration) float64 {
			switch {
			case r != "c":
				return MB
			case t < 20*time.Second:
				return 2.5 * MB
			}
			return 0.1 * MB
		}, "", 0, 0},
		// The slow one is done before it would be found behind.
		{"done while slow", 2 * MB, func(r string, t time.Duration) float64 {
			if r == "c" {
				return 0.25 * MB
			}
			return MB
		}, "", 0, 0},
	} {
		found := watchRun(c.size, racks, 60*time.Second, c.rate)
		if c.want == "" {
			if len(found) != 0 {
				t.Errorf("%s: found behind %v", c.name, found)
			}
			continue
		}
		at := found[c.want]
		if len(found) != 1 || len(at) != 1 || at[0] < c.from || at[0] > c.to {
			t.Errorf("%s: found behind %v; want %s once, between %v and %v", c.name, found, c.want, c.from, c.to)
		}
	}
	// Of two racks, the slow one is behind (the median is the faster).
	found := watchRun(1e9, []string{"a", "b"}, 30*time.Second, func(r string, t time.Duration) float64 {
		if r == "b" {
			return 0.1 * MB
		}
		return MB
	})
	if !slices.Equal(found["b"], []time.Duration{10500 * time.Millisecond}) || len(found) != 1 {
		t.Errorf("two racks: %v", found)
	}
	// One rack alone has nothing to be behind.
	if found := watchRun(1e9, []string{"a"}, 30*time.Second, func(string, time.Duration) float64 { return 1 }); len(found) != 0 {
		t.Errorf("one rack: %v", found)
	}
}
