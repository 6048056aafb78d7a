package cluster

import (
	"slices"
	"time"
)

// Work divides a file's pieces among the representatives that fetch from
// the origin, so that the origin sends each piece about once, and lets a
// representative that has fetched its share take pieces from one that is
// behind (work stealing). Before fetching a piece a representative claims
// it, as the thesis's START message does, so no other fetches it too; a
// claim not done within the timeout (its holder died or stalls) is open
// to all again.
//
// Work is pure: the caller passes the time and applies what it returns.
type Work struct {
	reps    []string
	share   []int // piece -> index in reps of the owner of its share
	state   []pieceState
	dead    []bool // by index in reps
	timeout time.Duration
}

type pieceState struct {
	done    bool
	by      int // claimed by reps[by]; -1: not claimed
	claimed time.Time
}

// NewWork divides pieces among reps in contiguous parts, so each one
// reads the file in order, and lets claims last timeout.
func NewWork(reps []string, pieces int, timeout time.Duration) *Work {
	w := &Work{reps: slices.Clone(reps), share: make([]int, pieces), state: make([]pieceState, pieces), dead: make([]bool, len(reps)), timeout: timeout}
	for i := range w.share {
		w.share[i] = i * len(reps) / max(pieces, 1)
		w.state[i].by = -1
	}
	return w
}

// Share returns the first piece and the end (exclusive) of rep's share;
// 0, 0 for one that is not a representative.
func (w *Work) Share(rep string) (from, to int) {
	r := slices.Index(w.reps, rep)
	if r < 0 {
		return 0, 0
	}
	from = slices.Index(w.share, r)
	if from < 0 {
		return 0, 0
	}
	to = from
	for to < len(w.share) && w.share[to] == r {
		to++
	}
	return from, to
}

// free reports whether piece i may be claimed at now.
func (w *Work) free(i int, now time.Time) bool {
	s := w.state[i]
	return !s.done && (s.by < 0 || now.Sub(s.claimed) >= w.timeout)
}

// Claim returns the piece rep fetches next from the origin, claimed for
// it at now: the first free piece of its own share; when its share is all
// done or claimed, the last free piece of the representative with the
// most free pieces left (stealing from the far end, where the owner
// would come last); -1 when no piece is free.
func (w *Work) Claim(rep string, now time.Time) int {
	r := slices.Index(w.reps, rep)
	if r < 0 {
		return -1
	}
	pick := -1
	from, to := w.Share(rep)
	for i := from; i < to; i++ {
		if w.free(i, now) {
			pick = i
			break
		}
	}
	if pick < 0 {
		// The one most behind: the most free pieces in its share; a
		// dead representative's share before any.
		most := 0
		for o := range w.reps {
			if o == r {
				continue
			}
			f, t := w.Share(w.reps[o])
			n, last := 0, -1
			for i := f; i < t; i++ {
				if w.free(i, now) {
					n, last = n+1, i
				}
			}
			if w.dead[o] && n > 0 {
				n += len(w.state) // ahead of any living one
			}
			if n > most {
				most, pick = n, last
			}
		}
	}
	if pick >= 0 {
		w.state[pick] = pieceState{by: r, claimed: now}
	}
	return pick
}

// Done records that piece i is fetched (by anyone: a representative, or
// the swarm), so nobody claims it again.
func (w *Work) Done(i int) {
	if i >= 0 && i < len(w.state) {
		w.state[i].done = true
	}
}

// Dead releases rep's claims at once: it is known to be gone, and its
// pieces need not wait for the timeout.
func (w *Work) Dead(rep string) {
	r := slices.Index(w.reps, rep)
	if r < 0 {
		return
	}
	w.dead[r] = true
	for i := range w.state {
		if w.state[i].by == r && !w.state[i].done {
			w.state[i].by = -1
		}
	}
}

// Left counts the pieces not done.
func (w *Work) Left() int {
	n := 0
	for _, s := range w.state {
		if !s.done {
			n++
		}
	}
	return n
}
