package cluster

import (
	"slices"
)

// Work divides a file's pieces among the representatives that fetch from
// the origin, so that the origin sends each piece about once, and steers
// a representative that has fetched its share to the share of the one
// most behind (work stealing, the thesis's START and steal).
//
// The claims are the swarm's: before it asks the origin for a piece a
// peer tells its neighbours with a START, and a peer offers the origin
// only pieces it lacks that no neighbour has or has claimed. So the
// pieces a representative would fetch (the piece its scheduler asks and
// the candidates it offers with it: contract.CandidatesHeader) are the
// free ones as it sees them, and Pick chooses among those alone. A
// representative that dies takes its claims with it: its neighbours
// forget its STARTs when its connection goes, and its pieces are free
// again.
//
// Work is pure and read-only once made: the caller asks, and rewrites its
// request to the origin with what Pick returns.
type Work struct {
	reps  []string
	share []int // piece -> index in reps of the owner of its share
}

// NewWork divides pieces among reps in contiguous parts, so each one
// reads the file in order.
func NewWork(reps []string, pieces int) *Work {
	w := &Work{reps: slices.Clone(reps), share: make([]int, pieces)}
	for i := range w.share {
		w.share[i] = i * len(reps) / max(pieces, 1)
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

// Pick chooses what rep asks the origin for, given the piece its
// scheduler asks (asked, or -1) and the other pieces it would take
// (cands): the free pieces. Within its own share: the piece asked if it
// is there, else the first free one (the share is read in order), offered
// with the share's other free pieces. Its share done or claimed by others,
// it steals from the share with the most free pieces (the representative
// most behind), from its far end, where the owner, reading in order,
// comes last. ok is false when rep is not a representative or nothing it
// could fetch is known: the request goes as it is.
func (w *Work) Pick(rep string, asked int, cands []int) (piece int, offer []int, ok bool) {
	r := slices.Index(w.reps, rep)
	if r < 0 {
		return -1, nil, false
	}
	free := make([][]int, len(w.reps))
	for _, i := range append([]int{asked}, cands...) {
		if i >= 0 && i < len(w.share) && !slices.Contains(free[w.share[i]], i) {
			free[w.share[i]] = append(free[w.share[i]], i)
		}
	}
	for _, f := range free {
		slices.Sort(f)
	}
	if mine := free[r]; len(mine) > 0 {
		if slices.Contains(mine, asked) {
			return asked, mine, true
		}
		return mine[0], mine, true
	}
	most := -1
	for o, f := range free {
		if len(f) > 0 && (most < 0 || len(f) > len(free[most])) {
			most = o
		}
	}
	if most < 0 {
		return -1, nil, false
	}
	f := free[most]
	return f[len(f)-1], f, true
}
