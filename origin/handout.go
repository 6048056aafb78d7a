package origin

import (
	"sync"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/pieceset"
)

// Which piece an overload answer carries. Successive capable clients must
// get different pieces, so that the swarm holds as much of the file as
// possible after as few answers as possible, and the origin must not hand
// out the same piece again and again when its holder is merely unknown to
// the asker. So, per file, the pieces are handed out in rounds: a piece
// goes out a second time only once every piece has gone out once (the one
// handed out least often goes first), and after Copies rounds within one
// Window nothing more goes out until the window ends. Within a round the
// asked piece (the one the client's scheduler wanted: nobody it knows has
// it) wins if it has not gone out yet in this round; otherwise the next
// one not handed out after the last one given, so that answers walk the
// file instead of piling up at its start.
//
// That bounds the bytes overload mode costs: at most Copies times the file
// per Window per file, whatever the crowd does. A piece whose every holder
// left before passing it on is handed out again at the latest one window
// later.

// handout is the pure state of one file's overload answers.
type handout struct {
	start  time.Time     // of the current window
	round  int           // rounds completed in this window
	given  *pieceset.Set // pieces handed out in the current round
	cursor int           // where the search for a piece not given starts
}

func newHandout(n int, now time.Time) *handout {
	return &handout{start: now, given: pieceset.New(n)}
}

// pick returns the piece to hand out at now, preferring asked (-1: no
// preference), and records it; with ok false, every piece has gone out
// copies times in this window, which ends at retry. allowed, if set,
// narrows the choice (the pieces the file's egress budget still lets go,
// budget.go): ok false with a zero retry says no piece not handed out in
// this round is allowed, and nothing is recorded.
func (h *handout) pick(asked int, now time.Time, copies int, window time.Duration, allowed func(int) bool) (piece int, retry time.Time, ok bool) {
	if now.Sub(h.start) >= window || now.Before(h.start) {
		h.start, h.round, h.cursor = now, 0, 0
		h.given = pieceset.New(h.given.Len())
	}
	if h.round >= copies {
		return -1, h.start.Add(window), false
	}
	n := h.given.Len()
	may := func(i int) bool { return allowed == nil || allowed(i) }
	// next is the first piece from i on not given in this round and allowed.
	next := func(i int) int {
		for i = h.given.NextMissing(i); i >= 0 && !may(i); i = h.given.NextMissing(i + 1) {
		}
		return i
	}
	switch {
	case asked >= 0 && asked < n && !h.given.Has(asked) && may(asked):
		piece = asked
	default:
		if piece = next(h.cursor); piece < 0 {
			piece = next(0)
		}
		if piece < 0 {
			return -1, time.Time{}, false
		}
		h.cursor = piece + 1
	}
	h.given.Add(piece)
	if h.given.Complete() {
		h.round++
		h.given = pieceset.New(n)
		h.cursor = 0
	}
	return piece, time.Time{}, true
}

// handouts holds the handout of every file answered in overload mode.
type handouts struct {
	copies int
	window time.Duration
	files  perFile[fileKey, *handout]
}

func newHandouts(copies int, window time.Duration) *handouts {
	return &handouts{copies: copies, window: window}
}

// pick chooses the piece of m to hand out now (see handout.pick).
func (hs *handouts) pick(m *manifest.Manifest, asked int, now time.Time, allowed func(int) bool) (piece int, retry time.Time, ok bool) {
	hs.files.with(keyOf(m), now, func() *handout { return newHandout(m.NumPieces(), now) }, func(h *handout) {
		piece, retry, ok = h.pick(asked, now, hs.copies, hs.window, allowed)
	})
	return piece, retry, ok
}

// fileKey names a file version: its manifest's root and size.
type fileKey struct {
	root manifest.Hash
	size int64
}

func keyOf(m *manifest.Manifest) fileKey { return fileKey{m.Root, m.Size} }

// maxMemoFiles bounds the files a perFile remembers (a few bytes per piece
// each); past it the one used least recently is forgotten, which only lets
// the origin treat its pieces as never sent.
const maxMemoFiles = 1024

// perFile is per-file-version state of the origin's piece choices (the
// overload handouts, the piece picks, the egress budgets), bounded to
// maxMemoFiles files. K names a version.
type perFile[K comparable, V any] struct {
	mu    sync.Mutex // guards files and every V in it
	files map[K]*memoSlot[V]
}

type memoSlot[V any] struct {
	v    V
	used time.Time
}

// with calls f with key's state, made by fresh if key has none, under the
// lock.
func (pf *perFile[K, V]) with(key K, now time.Time, fresh func() V, f func(V)) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.files == nil {
		pf.files = make(map[K]*memoSlot[V])
	}
	s := pf.files[key]
	if s == nil {
		if len(pf.files) >= maxMemoFiles {
			var oldest K
			first := true
			for k, v := range pf.files {
				if first || v.used.Before(pf.files[oldest].used) {
					oldest, first = k, false
				}
			}
			delete(pf.files, oldest)
		}
		s = &memoSlot[V]{v: fresh()}
		pf.files[key] = s
	}
	s.used = now
	f(s.v)
}
