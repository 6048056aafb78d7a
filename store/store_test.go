package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/store"
)

// content returns size random bytes (so every block differs) and their
// manifest. Files up to 32 MiB get 16 KiB pieces.
func content(t *testing.T, size int64, seed uint64) ([]byte, *manifest.Manifest) {
	t.Helper()
	data := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(data)
	m, err := manifest.FromReader(bytes.NewReader(data), size, "file")
	if err != nil {
		t.Fatal(err)
	}
	return data, m
}

// sixPieces is five whole 16 KiB pieces and a short last one.
const sixPieces = 5*manifest.BlockSize + 1234

func piece(data []byte, m *manifest.Manifest, i int) []byte {
	off := m.PieceOffset(i)
	return data[off : off+m.PieceLen(i)]
}

func open(t *testing.T, final string, m *manifest.Manifest, resume bool) *store.File {
	t.Helper()
	f, err := store.Open(final, m, resume, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func write(t *testing.T, f *store.File, data []byte, pieces ...int) {
	t.Helper()
	for _, i := range pieces {
		if err := f.WritePiece(i, piece(data, f.Manifest(), i)); err != nil {
			t.Fatalf("WritePiece(%d): %v", i, err)
		}
	}
}

// present returns the pieces f has, checking Has, Count and Missing agree.
func present(t *testing.T, f *store.File) []int {
	t.Helper()
	var have []int
	for i := range f.Manifest().NumPieces() {
		if f.Has(i) {
			have = append(have, i)
		}
	}
	if f.Count() != len(have) {
		t.Errorf("Count() = %d, but Has is true for %v", f.Count(), have)
	}
	var missing []int
	for i := range f.Manifest().NumPieces() {
		if !slices.Contains(have, i) {
			missing = append(missing, i)
		}
	}
	if got := f.Missing(); !slices.Equal(got, missing) {
		t.Errorf("Missing() = %v, want %v", got, missing)
	}
	return have
}

// readPart reads n bytes at off from the part file, independently of the
// store.
func readPart(t *testing.T, final string, off, n int64) []byte {
	t.Helper()
	b, err := os.ReadFile(final + store.PartSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) < off+n {
		t.Fatalf("part file has %d bytes, want at least %d", len(b), off+n)
	}
	return b[off : off+n]
}

// damage flips one byte of piece i in the part file, behind the store's back.
func damage(t *testing.T, final string, m *manifest.Manifest, i int) {
	t.Helper()
	f, err := os.OpenFile(final+store.PartSuffix, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	off := m.PieceOffset(i) + m.PieceLen(i)/2
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func partSize(t *testing.T, final string) int64 {
	t.Helper()
	fi, err := os.Stat(final + store.PartSuffix)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: Stat error %v, want it not to exist", path, err)
	}
}

func TestOpenFresh(t *testing.T) {
	_, m := content(t, sixPieces, 1)
	if m.NumPieces() != 6 {
		t.Fatalf("test file has %d pieces, want 6", m.NumPieces())
	}
	final := filepath.Join(t.TempDir(), "file")
	f := open(t, final, m, false)
	defer f.Close()

	if f.Manifest() != m {
		t.Error("Manifest() is not the manifest given to Open")
	}
	if have := present(t, f); len(have) != 0 {
		t.Errorf("fresh store has pieces %v", have)
	}
	if got := partSize(t, final); got != m.Size {
		t.Errorf("part file of %d bytes, want it reserved at %d", got, m.Size)
	}
	mustNotExist(t, final)
}

func TestOpenFailsInMissingDirectory(t *testing.T) {
	_, m := content(t, sixPieces, 1)
	_, err := store.Open(filepath.Join(t.TempDir(), "no", "such", "dir", "file"), m, false, nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open in a missing directory: %v, want fs.ErrNotExist", err)
	}
}

func TestWritePieceHasCountMissing(t *testing.T) {
	data, m := content(t, sixPieces, 2)
	final := filepath.Join(t.TempDir(), "file")
	f := open(t, final, m, false)
	defer f.Close()

	write(t, f, data, 3, 1, 5) // 5 is the short last piece
	if have := present(t, f); !slices.Equal(have, []int{1, 3, 5}) {
		t.Errorf("have %v, want [1 3 5]", have)
	}
	for _, i := range []int{1, 3, 5} {
		if got := readPart(t, final, m.PieceOffset(i), m.PieceLen(i)); !bytes.Equal(got, piece(data, m, i)) {
			t.Errorf("piece %d on disk differs from what was written", i)
		}
	}
	// Writing a piece again is a no-op, and still verified.
	write(t, f, data, 3)
	if f.Count() != 3 {
		t.Errorf("Count() = %d after rewriting a piece, want 3", f.Count())
	}
	bad := bytes.Clone(piece(data, m, 3))
	bad[0] ^= 1
	if err := f.WritePiece(3, bad); !errors.Is(err, manifest.ErrCorruptPiece) {
		t.Errorf("WritePiece of a corrupt copy of a present piece: %v, want ErrCorruptPiece", err)
	}
	if got := readPart(t, final, m.PieceOffset(3), m.PieceLen(3)); !bytes.Equal(got, piece(data, m, 3)) {
		t.Error("a corrupt rewrite of a present piece reached the disk")
	}
}

func TestWritePieceRejectsCorrupt(t *testing.T) {
	data, m := content(t, sixPieces, 3)
	final := filepath.Join(t.TempDir(), "file")
	f := open(t, final, m, false)
	defer f.Close()

	flipped := bytes.Clone(piece(data, m, 2))
	flipped[len(flipped)-1] ^= 0x80
	tests := []struct {
		name string
		i    int
		data []byte
	}{
		{"one bit flipped", 2, flipped},
		{"another piece's bytes", 2, piece(data, m, 1)},
		{"short", 2, piece(data, m, 2)[:100]},
		{"long", 5, data[m.PieceOffset(5)-1:]},
		{"empty", 4, nil},
	}
	for _, tt := range tests {
		err := f.WritePiece(tt.i, tt.data)
		if !errors.Is(err, manifest.ErrCorruptPiece) {
			t.Errorf("%s: WritePiece(%d) = %v, want ErrCorruptPiece", tt.name, tt.i, err)
		}
		if f.Has(tt.i) {
			t.Errorf("%s: piece %d counted as present", tt.name, tt.i)
		}
		got := readPart(t, final, m.PieceOffset(tt.i), m.PieceLen(tt.i))
		if !bytes.Equal(got, make([]byte, len(got))) {
			t.Errorf("%s: rejected piece %d was written to disk", tt.name, tt.i)
		}
	}
	for _, i := range []int{-1, m.NumPieces(), 1 << 40} {
		if err := f.WritePiece(i, piece(data, m, 0)); err == nil {
			t.Errorf("WritePiece(%d) out of range succeeded", i)
		}
	}
	if have := present(t, f); len(have) != 0 {
		t.Errorf("have %v after only rejected writes", have)
	}
}

func TestReadPiece(t *testing.T) {
	data, m := content(t, sixPieces, 4)
	final := filepath.Join(t.TempDir(), "file")
	f := open(t, final, m, false)
	defer f.Close()
	write(t, f, data, 0, 2, 5)

	buf := make([]byte, m.PieceSize)
	for _, i := range []int{0, 2, 5} {
		got, err := f.ReadPiece(i, buf)
		if err != nil || !bytes.Equal(got, piece(data, m, i)) {
			t.Errorf("ReadPiece(%d) = %d bytes, %v; want the piece", i, len(got), err)
		}
	}
	if got, err := f.ReadPiece(1, buf); err == nil {
		t.Errorf("ReadPiece of a missing piece = %d bytes, nil; want an error", len(got))
	}

	damage(t, final, m, 2)
	if got, err := f.ReadPiece(2, buf); !errors.Is(err, manifest.ErrCorruptPiece) {
		t.Errorf("ReadPiece of a piece damaged on disk = %d bytes, %v; want ErrCorruptPiece", len(got), err)
	}
	if _, err := f.ReadPiece(0, buf); err != nil {
		t.Errorf("ReadPiece(0) next to a damaged piece: %v", err)
	}
}

func TestCommitIncomplete(t *testing.T) {
	data, m := content(t, sixPieces, 5)
	final := filepath.Join(t.TempDir(), "file")
	f := open(t, final, m, false)
	defer f.Close()

	write(t, f, data, 0, 1, 2, 3, 4) // all but the last
	if err := f.Commit(); !errors.Is(err, store.ErrIncomplete) {
		t.Fatalf("Commit with a piece missing: %v, want ErrIncomplete", err)
	}
	mustNotExist(t, final)
	if got := partSize(t, final); got != m.Size {
		t.Errorf("part file of %d bytes after a refused Commit, want %d", got, m.Size)
	}
	// The store is still usable: finish and commit.
	write(t, f, data, 5)
	if err := f.Commit(); err != nil {
		t.Fatalf("Commit once complete: %v", err)
	}
	got, err := os.ReadFile(final)
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("final file: %d bytes, %v; want the content", len(got), err)
	}
}

func TestCommit(t *testing.T) {
	data, m := content(t, sixPieces, 6)
	final := filepath.Join(t.TempDir(), "file")
	f := open(t, final, m, false)
	write(t, f, data, 4, 0, 5, 2, 1, 3)
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(final)
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("final file: %d bytes, %v; want the content", len(got), err)
	}
	mustNotExist(t, final+store.PartSuffix)
}

func TestResume(t *testing.T) {
	data, m := content(t, sixPieces, 7)
	final := filepath.Join(t.TempDir(), "file")
	f := open(t, final, m, false)
	write(t, f, data, 0, 2, 3, 5)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	damage(t, final, m, 3)

	var calls [][2]int
	f, err := store.Open(final, m, true, func(done, total int) { calls = append(calls, [2]int{done, total}) })
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if have := present(t, f); !slices.Equal(have, []int{0, 2, 5}) {
		t.Errorf("resumed with %v, want [0 2 5] (3 was damaged)", have)
	}
	if len(calls) != m.NumPieces() {
		t.Errorf("onVerify called %d times, want %d", len(calls), m.NumPieces())
	}
	for k, c := range calls {
		if c != [2]int{k + 1, m.NumPieces()} {
			t.Errorf("onVerify call %d: (%d, %d), want (%d, %d)", k, c[0], c[1], k+1, m.NumPieces())
		}
	}

	write(t, f, data, 1, 3, 4)
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(final); err != nil || !bytes.Equal(got, data) {
		t.Errorf("final file after resume: %d bytes, %v; want the content", len(got), err)
	}
}

func TestResumeWithoutPartFile(t *testing.T) {
	_, m := content(t, sixPieces, 8)
	final := filepath.Join(t.TempDir(), "file")
	n := 0
	f, err := store.Open(final, m, true, func(int, int) { n++ })
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if have := present(t, f); len(have) != 0 {
		t.Errorf("resume with no part file found %v", have)
	}
	if n != m.NumPieces() {
		t.Errorf("onVerify called %d times, want %d", n, m.NumPieces())
	}
	if got := partSize(t, final); got != m.Size {
		t.Errorf("part file of %d bytes, want %d", got, m.Size)
	}
}

// A part file cut short (a crash before the reservation, a copy) keeps the
// whole pieces it holds; a piece cut in the middle is missing.
func TestResumeShortPartFile(t *testing.T) {
	data, m := content(t, sixPieces, 9)
	final := filepath.Join(t.TempDir(), "file")
	cut := m.PieceOffset(3) + 100
	if err := os.WriteFile(final+store.PartSuffix, data[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	f := open(t, final, m, true)
	defer f.Close()
	if have := present(t, f); !slices.Equal(have, []int{0, 1, 2}) {
		t.Errorf("resumed with %v, want [0 1 2]", have)
	}
	if got := partSize(t, final); got != m.Size {
		t.Errorf("part file of %d bytes, want it grown to %d", got, m.Size)
	}
}

func TestResumeTruncatesLongPartFile(t *testing.T) {
	data, m := content(t, sixPieces, 10)
	final := filepath.Join(t.TempDir(), "file")
	long := append(bytes.Clone(data), bytes.Repeat([]byte("junk"), 5000)...)
	if err := os.WriteFile(final+store.PartSuffix, long, 0o644); err != nil {
		t.Fatal(err)
	}
	f := open(t, final, m, true)
	if have := present(t, f); len(have) != m.NumPieces() {
		t.Errorf("resumed with %v, want every piece", have)
	}
	if got := partSize(t, final); got != m.Size {
		t.Errorf("part file of %d bytes after resume, want it truncated to %d", got, m.Size)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(final); err != nil || !bytes.Equal(got, data) {
		t.Errorf("final file: %d bytes, %v; want exactly the content", len(got), err)
	}
}

func TestOpenWithoutResumeTruncates(t *testing.T) {
	data, m := content(t, sixPieces, 11)
	final := filepath.Join(t.TempDir(), "file")
	f := open(t, final, m, false)
	write(t, f, data, 0, 1, 2, 3, 4, 5)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	f = open(t, final, m, false)
	defer f.Close()
	if have := present(t, f); len(have) != 0 {
		t.Errorf("reopened without resume with %v, want none", have)
	}
	if got := partSize(t, final); got != m.Size {
		t.Errorf("part file of %d bytes, want %d", got, m.Size)
	}
	if got := readPart(t, final, 0, m.Size); !bytes.Equal(got, make([]byte, m.Size)) {
		t.Error("old content survived Open without resume")
	}
}

func TestEmptyFile(t *testing.T) {
	_, m := content(t, 0, 12)
	if m.NumPieces() != 0 {
		t.Fatalf("empty file has %d pieces", m.NumPieces())
	}
	for _, resume := range []bool{false, true} {
		final := filepath.Join(t.TempDir(), "empty")
		f := open(t, final, m, resume)
		if have := present(t, f); len(have) != 0 {
			t.Errorf("resume=%v: have %v", resume, have)
		}
		if err := f.Commit(); err != nil {
			t.Fatalf("resume=%v: Commit: %v", resume, err)
		}
		fi, err := os.Stat(final)
		if err != nil || fi.Size() != 0 || !fi.Mode().IsRegular() {
			t.Errorf("resume=%v: final file %v, %v; want an empty regular file", resume, fi, err)
		}
		mustNotExist(t, final+store.PartSuffix)
	}
}

// Many goroutines write, re-write and read pieces at once: run with -race.
func TestConcurrentWritePiece(t *testing.T) {
	data, m := content(t, 64*manifest.BlockSize+5, 13) // 65 pieces
	final := filepath.Join(t.TempDir(), "file")
	f := open(t, final, m, false)
	n := m.NumPieces()

	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 0))
			buf := make([]byte, m.PieceSize)
			for _, i := range r.Perm(n) {
				if err := f.WritePiece(i, piece(data, m, i)); err != nil {
					errs <- err
					return
				}
				if !f.Has(i) {
					errs <- errors.New("piece not present right after WritePiece")
					return
				}
				if _, err := f.ReadPiece(i, buf); err != nil {
					errs <- err
					return
				}
				if bad := bytes.Clone(piece(data, m, i)); len(bad) > 0 {
					bad[0]++
					if err := f.WritePiece(i, bad); !errors.Is(err, manifest.ErrCorruptPiece) {
						errs <- fmt.Errorf("corrupt rewrite of piece %d: %v, want ErrCorruptPiece", i, err)
						return
					}
				}
				_ = f.Missing()
				_ = f.Count()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if f.Count() != n || len(f.Missing()) != 0 {
		t.Fatalf("Count() = %d, Missing() = %v after every piece was written", f.Count(), f.Missing())
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(final); err != nil || !bytes.Equal(got, data) {
		t.Errorf("final file: %d bytes, %v; want the content", len(got), err)
	}
}
