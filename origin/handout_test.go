package origin

import (
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
)

func TestHandoutSpreadsAndPrefersTheAskedPiece(t *testing.T) {
	const n, window = 8, time.Minute
	now := t0
	h := newHandout(n, now)
	pick := func(asked int) int {
		t.Helper()
		p, _, ok := h.pick(asked, now, 1, window, nil)
		if !ok {
			t.Fatalf("pick(%d): exhausted", asked)
		}
		return p
	}
	// The asked piece while it has not gone out; then the next one not
	// given after the last one chosen that way, wrapping around.
	for _, c := range []struct{ asked, want int }{
		{5, 5}, {5, 0}, {-1, 1}, {2, 2}, {2, 3}, {99, 4}, {0, 6}, {-1, 7},
	} {
		if got := pick(c.asked); got != c.want {
			t.Fatalf("asked %d: got piece %d, want %d", c.asked, got, c.want)
		}
	}
	// Every piece went out once: with one copy per window, nothing more.
	if p, retry, ok := h.pick(3, now.Add(time.Second), 1, window, nil); ok || !retry.Equal(t0.Add(window)) {
		t.Fatalf("after a whole round: piece %d, ok %v, retry %v; want none until %v", p, ok, retry, t0.Add(window))
	}
	// A new window starts over.
	now = t0.Add(window)
	if got := pick(3); got != 3 {
		t.Errorf("in a new window: got %d, want the asked 3", got)
	}
}

func TestHandoutCopies(t *testing.T) {
	const n, copies = 5, 3
	h := newHandout(n, t0)
	count := make([]int, n)
	for k := range n * copies {
		p, _, ok := h.pick(0, t0, copies, time.Minute, nil) // everyone asks for piece 0
		if !ok {
			t.Fatalf("answer %d: exhausted before %d copies", k, copies)
		}
		count[p]++
		// Least handed out first: no piece is ahead of another by two.
		lo, hi := count[0], count[0]
		for _, c := range count {
			lo, hi = min(lo, c), max(hi, c)
		}
		if hi-lo > 1 {
			t.Fatalf("after %d answers the counts are %v", k+1, count)
		}
	}
	for i, c := range count {
		if c != copies {
			t.Errorf("piece %d went out %d times, want %d", i, c, copies)
		}
	}
	if _, _, ok := h.pick(0, t0, copies, time.Minute, nil); ok {
		t.Error("a piece went out more than copies times in a window")
	}
}

func TestHandoutsBounded(t *testing.T) {
	hs := newHandouts(1, time.Minute)
	for i := range maxMemoFiles + 10 {
		m := &manifest.Manifest{Size: int64(i + 1), PieceSize: manifest.MinPieceSize}
		m.Root[0], m.Root[1] = byte(i), byte(i>>8)
		if _, _, ok := hs.pick(m, 0, t0.Add(time.Duration(i)), nil); !ok {
			t.Fatalf("file %d: exhausted", i)
		}
	}
	if len(hs.files.files) != maxMemoFiles {
		t.Errorf("%d files remembered, want at most %d", len(hs.files.files), maxMemoFiles)
	}
}

// TestHandoutAllowed: past the budget the handout gives only the pieces the
// budget still lets go, and records nothing when there is none.
func TestHandoutAllowed(t *testing.T) {
	const n = 6
	h := newHandout(n, t0)
	allowed := func(i int) bool { return i == 2 || i == 4 }
	for _, c := range []struct{ asked, want int }{{0, 2}, {4, 4}} {
		if p, _, ok := h.pick(c.asked, t0, 1, time.Minute, allowed); !ok || p != c.want {
			t.Fatalf("asked %d: piece %d, ok %v; want %d", c.asked, p, ok, c.want)
		}
	}
	if p, retry, ok := h.pick(0, t0, 1, time.Minute, allowed); ok || !retry.IsZero() {
		t.Fatalf("nothing allowed left: piece %d, ok %v, retry %v; want none and a zero retry", p, ok, retry)
	}
	// Nothing was recorded: without the filter the round goes on where it was.
	for _, want := range []int{3, 5, 0, 1} {
		if p, _, ok := h.pick(-1, t0, 1, time.Minute, nil); !ok || p != want {
			t.Fatalf("after the filter: piece %d, ok %v; want %d", p, ok, want)
		}
	}
}
