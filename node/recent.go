package node

import "sync"

// recentBytes bounds the memory of the recent pieces (recentPieces): in a
// crowd the pieces neighbours ask for are the ones that just arrived (the
// rarest), and 4 MiB holds the last 64 pieces of 64 KiB, about four
// seconds of what a peer of the testbed receives.
const recentBytes = 4 << 20

// recentPieces keeps the last pieces received from peers, verified and
// stored, in memory, so their uploads need not read them back from the file
// and verify them again. Without it, in a perf profile of a flash crowd of
// 50 (two cores, saturated), reading pieces back for upload was 7.4% of all
// CPU time (half of it the page-cache copy) and their second SHA-256 about
// 2%. A piece read from the store is still verified: only bytes checked in
// this process since they left the network are served from memory.
//
// The buffers come from the node's pieceBufs and go back there once evicted
// and no upload holds them. Safe for concurrent use.
type recentPieces struct {
	put func([]byte) // gives an evicted, released buffer back

	mu     sync.Mutex
	max    int // pieces kept at most
	order  []int
	pieces map[int]*recentPiece
	hits   int64 // uploads served from memory (counted by get)
	misses int64
}

type recentPiece struct {
	data    []byte
	refs    int  // uploads using data
	evicted bool // no longer in pieces: put back at the last release
}

// newRecentPieces keeps up to keep bytes of pieces of pieceSize (at least
// one piece, unless keep is 0: then none).
func newRecentPieces(pieceSize, keep int64, put func([]byte)) *recentPieces {
	n := 0
	if keep > 0 {
		n = int(max(1, keep/max(pieceSize, 1)))
	}
	return &recentPieces{put: put, max: n, pieces: map[int]*recentPiece{}}
}

// add keeps data, the verified and stored bytes of piece i, taking
// ownership of the buffer; the oldest piece goes if there are too many.
func (r *recentPieces) add(i int, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pieces[i]; ok || r.max == 0 {
		r.put(data)
		return
	}
	if len(r.order) >= r.max {
		old := r.order[0]
		r.order = r.order[1:]
		if e := r.pieces[old]; e != nil {
			delete(r.pieces, old)
			e.evicted = true
			if e.refs == 0 {
				r.put(e.data)
			}
		}
	}
	r.order = append(r.order, i)
	r.pieces[i] = &recentPiece{data: data}
}

// get returns piece i's bytes if kept; the caller must release them when
// done and must not modify them.
func (r *recentPieces) get(i int) (*recentPiece, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.pieces[i]
	if !ok {
		r.misses++
		return nil, false
	}
	r.hits++
	e.refs++
	return e, true
}

func (r *recentPieces) release(e *recentPiece) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.refs--; e.refs == 0 && e.evicted {
		r.put(e.data)
	}
}

// counts returns the uploads served from memory and from the store.
func (r *recentPieces) counts() (hits, misses int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits, r.misses
}
