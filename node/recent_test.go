package node

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/wire"
)

// TestRecentPiecesEviction: the oldest piece goes first, and an evicted
// buffer an upload still holds goes back to the pool only when released,
// unchanged until then.
func TestRecentPiecesEviction(t *testing.T) {
	var back [][]byte
	none := newRecentPieces(4, 0, func(b []byte) { back = append(back, b) })
	none.add(0, []byte{9})
	if _, ok := none.get(0); ok || len(back) != 1 {
		t.Fatalf("a cache of 0 bytes kept a piece (given back: %v)", back)
	}
	back = nil
	r := newRecentPieces(recentBytes/2, recentBytes, func(b []byte) { back = append(back, b) })
	if r.max != 2 {
		t.Fatalf("max = %d pieces, want 2", r.max)
	}
	buf := func(v byte) []byte { return bytes.Repeat([]byte{v}, 4) }
	r.add(0, buf(0))
	r.add(1, buf(1))
	held, ok := r.get(0)
	if !ok {
		t.Fatal("piece 0 not kept")
	}
	r.add(2, buf(2)) // evicts 0, which is held
	if len(back) != 0 {
		t.Fatalf("held buffer given back: %v", back)
	}
	if _, ok := r.get(0); ok {
		t.Fatal("evicted piece 0 still served")
	}
	if !bytes.Equal(held.data, buf(0)) {
		t.Fatalf("held piece changed: %v", held.data)
	}
	r.release(held)
	if len(back) != 1 || !bytes.Equal(back[0], buf(0)) {
		t.Fatalf("released evicted buffer not given back: %v", back)
	}
	r.add(3, buf(3)) // evicts 1, not held: back at once
	if len(back) != 2 || !bytes.Equal(back[1], buf(1)) {
		t.Fatalf("unheld evicted buffer not given back: %v", back)
	}
	r.add(3, buf(9)) // a second copy: the kept one stays, the new buffer goes back
	if e, _ := r.get(3); !bytes.Equal(e.data, buf(3)) || !bytes.Equal(back[2], buf(9)) {
		t.Fatalf("second copy: kept %v, given back %v", e.data, back)
	}
	if hits, misses := r.counts(); hits != 2 || misses != 1 {
		t.Fatalf("counts = %d hits, %d misses; want 2, 1", hits, misses)
	}
}

// TestUploadFromMemory: a piece received from a peer is uploaded from
// memory, one stored otherwise from the store (verified), and a piece
// damaged on disk after it was kept in memory is still served as received.
func TestUploadFromMemory(t *testing.T) {
	f := testConn(t, 300_000, 2)
	data, m, st, n, p := f.data, f.m, f.st, f.n, f.p
	piece := func(i int) []byte { return data[m.PieceOffset(i) : m.PieceOffset(i)+m.PieceLen(i)] }

	p.request(0, m.PieceLen(0))
	if ev, err := p.data(&wire.Data{Piece: 0, Bytes: piece(0)}); err != nil {
		t.Fatal(err)
	} else if _, ok := ev.(swarm.Received); !ok {
		t.Fatalf("piece 0: event %#v", ev)
	}
	if err := st.WritePiece(1, piece(1)); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		buf := make([]byte, m.PieceSize)
		got, release, err := n.readPiece(i, buf)
		if err != nil || !bytes.Equal(got, piece(i)) {
			t.Fatalf("piece %d: %v, equal %v", i, err, bytes.Equal(got, piece(i)))
		}
		release()
	}
	if hits, misses := n.recent.counts(); hits != 1 || misses != 1 {
		t.Fatalf("counts = %d from memory, %d from store; want 1, 1", hits, misses)
	}

	// Damage both pieces on disk: the kept one is served as it came,
	// the other is refused.
	bad := slices.Clone(piece(0))
	bad[0] ^= 1
	overwrite(t, f.part, bad, 0)
	bad = slices.Clone(piece(1))
	bad[0] ^= 1
	overwrite(t, f.part, bad, m.PieceOffset(1))
	got, release, err := n.readPiece(0, make([]byte, m.PieceSize))
	if err != nil || !bytes.Equal(got, piece(0)) {
		t.Fatalf("kept piece 0 after damage on disk: %v", err)
	}
	release()
	if _, release, err := n.readPiece(1, make([]byte, m.PieceSize)); err == nil {
		t.Fatal("piece 1 damaged on disk was served")
	} else {
		release()
	}
}

func overwrite(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
