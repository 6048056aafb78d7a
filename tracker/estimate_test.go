package tracker

import (
	"hash/maphash"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestHLLError measures the estimator over many random sets of each size and
// checks its worst error. The standard error at 1024 registers is 3.3 %.
func TestHLLError(t *testing.T) {
	trials := 100
	if testing.Short() {
		trials = 10
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 10, 30, 100, 300, 1000, 2500, 5000, 10000, 100000} {
		var worst, sumSq float64
		for range trials {
			var s hll
			for range n {
				s.add(rng.Uint64())
			}
			var counts [hllRankBits + 2]int
			for _, r := range s {
				counts[r]++
			}
			est := estimateHLL(&counts)
			if n == 0 {
				if est != 0 {
					t.Fatalf("empty sketch estimates %v", est)
				}
				continue
			}
			e := (est - float64(n)) / float64(n)
			worst = max(worst, math.Abs(e))
			sumSq += e * e
		}
		rms := math.Sqrt(sumSq / float64(trials))
		t.Logf("n=%6d: rms error %5.2f%%, worst of %d %5.2f%%", n, 100*rms, trials, 100*worst)
		if limit := max(0.15, 1.5/float64(max(n, 1))); worst > limit {
			t.Errorf("n=%d: worst error %.1f%%, want within %.1f%%", n, 100*worst, 100*limit)
		}
	}
}

func TestHLLRankBounds(t *testing.T) {
	var s hll
	s.add(0) // register 0, the longest run of zeros there is
	if s[0] != hllRankBits+1 {
		t.Errorf("rank of 0 = %d, want %d", s[0], hllRankBits+1)
	}
	s.add(1<<hllRankBits | 1<<(hllRankBits-1)) // register 1, a 1 right away
	if s[1] != 1 {
		t.Errorf("rank = %d, want 1", s[1])
	}
	if s.add(1<<hllRankBits | 1<<(hllRankBits-1)) {
		t.Error("adding the same hash again changed a register")
	}
}

func TestWindowSlides(t *testing.T) {
	const interval = 10 * time.Second
	now := time.Unix(1000, 0)
	w := newWindow(interval, now)
	seed := maphash.MakeSeed()
	hash := func(i int) uint64 { return maphash.Comparable(seed, i) }
	near := func(got float64, want int) bool { return math.Abs(got-float64(want)) <= 0.1*float64(want)+0.5 }

	// 500 peers announcing every interval, at phases spread over it.
	const n = 500
	for round := range 4 {
		for i := range n {
			w.add(hash(i), now.Add(time.Duration(round)*interval+time.Duration(i)*interval/n))
		}
		if got := w.estimate(now.Add(time.Duration(round+1) * interval)); !near(got, n) {
			t.Fatalf("round %d: estimate %.1f, want about %d", round, got, n)
		}
	}
	now = now.Add(4 * interval)
	// Half of them go silent: they drop out within two intervals.
	for round := range 2 {
		for i := range n / 2 {
			w.add(hash(i), now.Add(time.Duration(round)*interval+time.Duration(i)*interval/n))
		}
	}
	now = now.Add(2 * interval)
	if got := w.estimate(now); !near(got, n/2) {
		t.Errorf("after half left: estimate %.1f, want about %d", got, n/2)
	}
	// Ten say they leave.
	for range 10 {
		w.stop(now)
	}
	if got := w.estimate(now); !near(got, n/2-10) {
		t.Errorf("after ten stopped: estimate %.1f, want about %d", got, n/2-10)
	}
	// Everyone gone.
	if got := w.estimate(now.Add(2 * interval)); got != 0 {
		t.Errorf("after two silent intervals: estimate %.1f, want 0", got)
	}
	// A clock going back changes nothing.
	w.add(hash(-1), now)
	if got := w.estimate(now.Add(-time.Hour)); math.Round(got) != 1 {
		t.Errorf("estimate %v after the clock went back, want 1", got)
	}
}

func BenchmarkWindowEstimate(b *testing.B) {
	now := time.Unix(0, 0)
	w := newWindow(15*time.Second, now)
	rng := rand.New(rand.NewPCG(1, 1))
	for range 10000 {
		w.add(rng.Uint64(), now)
	}
	for b.Loop() {
		w.dirty = true
		w.estimate(now)
	}
}
