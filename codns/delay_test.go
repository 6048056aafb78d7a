package codns

import (
	"testing"
	"time"
)

func TestDelayInitialUntilEnoughSamples(t *testing.T) {
	d := NewDelay(DelayConfig{Window: 64})
	if got := d.Current(); got != 200*time.Millisecond {
		t.Fatalf("initial delay %v, want 200ms", got)
	}
	for range 15 {
		d.ObserveLocal(time.Millisecond)
	}
	if got := d.Current(); got != 200*time.Millisecond {
		t.Errorf("after 15 of 64 samples: %v, want still 200ms", got)
	}
	d.ObserveLocal(time.Millisecond)
	if got := d.Current(); got != 50*time.Millisecond {
		t.Errorf("after 16 fast samples: %v, want the 50ms floor", got)
	}
}

func TestDelayFollowsPercentile(t *testing.T) {
	d := NewDelay(DelayConfig{})
	// 100 ms for most, 1 ms for some: the median is 100 ms, three
	// times that 300 ms.
	for i := range 64 {
		rtt := 100 * time.Millisecond
		if i%4 == 0 {
			rtt = time.Millisecond
		}
		d.ObserveLocal(rtt)
	}
	if got := d.Current(); got != 300*time.Millisecond {
		t.Errorf("delay %v, want 3 × the median = 300ms", got)
	}
	// Slower still: capped.
	for range 64 {
		d.ObserveLocal(time.Second)
	}
	if got := d.Current(); got != 500*time.Millisecond {
		t.Errorf("delay %v, want the 500ms cap", got)
	}
}

// A resolver that stalls a fifth of its queries for 5 s does not drag the
// delay up: the percentile sits below the stalls.
func TestDelayIgnoresMinorityOfStalls(t *testing.T) {
	d := NewDelay(DelayConfig{})
	for i := range 200 {
		rtt := 40 * time.Millisecond
		if i%5 == 0 {
			rtt = 5 * time.Second
		}
		d.ObserveLocal(rtt)
	}
	if got := d.Current(); got != 120*time.Millisecond {
		t.Errorf("delay %v with 20%% stalls, want 120ms", got)
	}
	// Half stalled: the delay goes to its cap.
	for i := range 64 {
		rtt := 20 * time.Millisecond
		if i%2 == 0 {
			rtt = 5 * time.Second
		}
		d.ObserveLocal(rtt)
	}
	if got := d.Current(); got != 500*time.Millisecond {
		t.Errorf("delay %v with 50%% stalls, want the 500ms cap", got)
	}
}

// When peers won most recent lookups, peers are asked at once; when they
// stop winning, the delay comes back.
func TestDelayZeroWhilePeersWin(t *testing.T) {
	d := NewDelay(DelayConfig{Initial: 300 * time.Millisecond, Max: 300 * time.Millisecond})
	for range 8 {
		d.ObserveOutcome(true)
	}
	if got := d.Current(); got != 300*time.Millisecond {
		t.Errorf("8 of 16 won: %v, want 300ms (not more than half)", got)
	}
	d.ObserveOutcome(true)
	if got := d.Current(); got != 0 {
		t.Errorf("9 of 16 won: %v, want 0", got)
	}
	for range 8 {
		d.ObserveOutcome(false)
	}
	if got := d.Current(); got != 300*time.Millisecond {
		t.Errorf("after 8 local wins: %v, want 300ms", got)
	}
}

// Peers winning while the local resolver is slow but answering (the
// delay below Max) leave the delay where it is.
func TestDelayNotZeroWhileLocalAnswers(t *testing.T) {
	d := NewDelay(DelayConfig{})
	for range 64 {
		d.ObserveLocal(100 * time.Millisecond)
	}
	for range 16 {
		d.ObserveOutcome(true)
	}
	if got := d.Current(); got != 300*time.Millisecond {
		t.Errorf("delay %v, want 300ms", got)
	}
}
