package manifest_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stampede-dev/stampede/manifest"
)

// TestReference checks FromReaderAt and the Builder against the test's own
// straight-from-BEP-52 tree (refTree) on sizes around block and piece
// boundaries and several piece sizes.
func TestReference(t *testing.T) {
	for _, ps := range []int64{16 * KiB, 32 * KiB, 64 * KiB, 256 * KiB} {
		for _, pieces := range []int64{1, 2, 3, 4, 5, 8, 9} {
			for _, delta := range []int64{-16*KiB - 1, -16 * KiB, -1, 0, 1, 16 * KiB, 16*KiB + 1} {
				size := pieces*ps + delta
				if size < 0 {
					continue
				}
				data := pattern(size)
				checkAgainstRef(t, mustBuild(t, data, ps), data)
			}
		}
	}
	for _, size := range []int64{0, 1, 100, 16383, 16384, 16385, 32769, 65537, 1<<20 + 1, 5242887} {
		data := pattern(size)
		checkAgainstRef(t, mustFromReaderAt(t, data, 0), data)
	}
}

func TestBuilderOddWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		size, pieceSize int64
		oneByte         bool
	}{
		{0, 0, true},
		{1, 0, true},
		{16383, 0, true},
		{16384, 0, true},
		{16385, 0, true},
		{3*16*KiB + 5, 0, true},
		{3*16*KiB + 5, 64 * KiB, true},
		{200000, 0, false},
		{200000, 64 * KiB, false},
		{5*64*KiB + 1, 64 * KiB, false},
		{2*MiB + 3, 1 * MiB, false},
	} {
		data := pattern(c.size)
		want := mustBuild(t, data, c.pieceSize) // one Write of everything
		if c.pieceSize == 0 {
			if m := mustFromReaderAt(t, data, 0); !reflect.DeepEqual(m, want) {
				t.Fatalf("size %d: one-write Builder %+v, FromReaderAt %+v", c.size, want, m)
			}
		}
		var chunkings [][]int
		if c.oneByte {
			ones := make([]int, c.size)
			for i := range ones {
				ones[i] = 1
			}
			chunkings = append(chunkings, ones)
		}
		for range 5 {
			var chunks []int
			for left := int(c.size); left > 0; {
				n := min(left, rng.IntN(3*manifest.BlockSize+2)) // 0 to over two blocks
				chunks = append(chunks, n)
				left -= n
			}
			chunkings = append(chunkings, chunks)
		}
		for _, chunks := range chunkings {
			b, err := manifest.NewBuilder(c.size, c.pieceSize)
			if err != nil {
				t.Fatal(err)
			}
			rest := data
			for _, n := range chunks {
				if k, err := b.Write(rest[:n]); k != n || err != nil {
					t.Fatalf("size %d: Write(%d bytes) = %d, %v", c.size, n, k, err)
				}
				rest = rest[n:]
			}
			got, err := b.Manifest("f")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("size %d piece size %d: %d writes give root %s, one write %s",
					c.size, c.pieceSize, len(chunks), got.Root, want.Root)
			}
		}
	}
}

func TestBuilderTooMuch(t *testing.T) {
	data := pattern(40000)
	want := mustFromReaderAt(t, data, 1)
	b, err := manifest.NewBuilder(int64(len(data)), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(data[:30000]); err != nil {
		t.Fatal(err)
	}
	// A write that would pass the declared size is refused whole...
	if n, err := b.Write(pattern(10001)); err == nil || n != 0 {
		t.Fatalf("Write past the declared size = %d, %v; want 0 and an error", n, err)
	}
	// ...and leaves the builder as it was.
	if _, err := b.Write(data[30000:]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write([]byte{0}); err == nil {
		t.Error("Write of one byte after the declared size succeeded")
	}
	got, err := b.Manifest("f")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after a refused write: root %s, want %s", got.Root, want.Root)
	}
}

func TestBuilderTooLittle(t *testing.T) {
	b, err := manifest.NewBuilder(40000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(pattern(39999)); err != nil {
		t.Fatal(err)
	}
	if m, err := b.Manifest("f"); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Manifest after 39999 of 40000 bytes = %+v, %v; want io.ErrUnexpectedEOF", m, err)
	}
}

func TestNewBuilderGeometry(t *testing.T) {
	for _, c := range []struct{ size, pieceSize int64 }{
		{-1, 0},
		{manifest.MaxSize + 1, 0},
		{100, 8 * KiB},
		{100, 48 * KiB},
		{100, 8 * MiB},
		{100, -16 * KiB},
	} {
		if _, err := manifest.NewBuilder(c.size, c.pieceSize); err == nil {
			t.Errorf("NewBuilder(%d, %d) succeeded", c.size, c.pieceSize)
		}
	}
	for _, size := range []int64{0, 1, 64*MiB + 1} {
		b, err := manifest.NewBuilder(size, 0)
		if err != nil {
			t.Fatal(err)
		}
		if size > 0 {
			b.Write(pattern(size))
		}
		m, err := b.Manifest("f")
		if err != nil {
			t.Fatal(err)
		}
		if m.PieceSize != manifest.PieceSizeFor(size) {
			t.Errorf("NewBuilder(%d, 0) uses piece size %d, want PieceSizeFor's %d", size, m.PieceSize, manifest.PieceSizeFor(size))
		}
	}
}

func TestFromReader(t *testing.T) {
	for _, size := range []int64{0, 1, 16384, 16385, 65537, 1<<20 + 1, 2*MiB + 3} {
		data := pattern(size)
		want := mustFromReaderAt(t, data, 0)
		for name, r := range map[string]func() io.Reader{
			"plain":   func() io.Reader { return bytes.NewReader(data) },
			"onebyte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) },
			"half":    func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) },
			"dataerr": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) },
		} {
			if name == "onebyte" && size > 100000 {
				continue
			}
			got, err := manifest.FromReader(r(), size, "f")
			if err != nil {
				t.Fatalf("size %d %s: %v", size, name, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("size %d %s: root %s, FromReaderAt %s", size, name, got.Root, want.Root)
			}
		}
	}
}

func TestFromReaderShort(t *testing.T) {
	for _, size := range []int64{1, 16384, 16385, 65537} {
		data := pattern(size - 1)
		if m, err := manifest.FromReader(bytes.NewReader(data), size, "f"); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("FromReader of %d bytes declared %d = %+v, %v; want io.ErrUnexpectedEOF", len(data), size, m, err)
		}
	}
}

func TestFromReaderLong(t *testing.T) {
	for _, size := range []int64{0, 1, 16384, 16385, 65537} {
		data := pattern(size + 1)
		if m, err := manifest.FromReader(bytes.NewReader(data), size, "f"); err == nil {
			t.Errorf("FromReader of %d bytes declared %d = %+v; want an error", len(data), size, m)
		}
	}
}

func TestFromReaderError(t *testing.T) {
	errBoom := errors.New("boom")
	r := io.MultiReader(bytes.NewReader(pattern(20000)), iotest.ErrReader(errBoom))
	if _, err := manifest.FromReader(r, 40000, "f"); !errors.Is(err, errBoom) {
		t.Errorf("FromReader = %v, want it to wrap %v", err, errBoom)
	}
	if _, err := manifest.FromReader(strings.NewReader(""), -1, "f"); err == nil {
		t.Error("FromReader of size -1 succeeded")
	}
}

func TestFromReaderAtWorkers(t *testing.T) {
	for _, size := range []int64{0, 1, 16385, 1<<20 + 1, 2048*32*KiB + 1} {
		data := pattern(size)
		want := mustFromReaderAt(t, data, 1)
		checkAgainstRef(t, want, data)
		for _, w := range []int{-1, 0, 2, 3, 7, 64, 5000} {
			if got := mustFromReaderAt(t, data, w); !reflect.DeepEqual(got, want) {
				t.Errorf("size %d: workers=%d gives root %s, workers=1 %s", size, w, got.Root, want.Root)
			}
		}
	}
}

// failingReaderAt fails every read that touches bytes at or past failAt.
type failingReaderAt struct {
	r      io.ReaderAt
	failAt int64
	err    error
}

func (f failingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.failAt {
		return 0, f.err
	}
	return f.r.ReadAt(p, off)
}

func TestFromReaderAtReadError(t *testing.T) {
	errBoom := errors.New("boom")
	data := pattern(1<<20 + 1)
	for _, failAt := range []int64{0, 16384, 500000, int64(len(data)) - 1} {
		for _, w := range []int{1, 4} {
			r := failingReaderAt{bytes.NewReader(data), failAt, errBoom}
			if m, err := manifest.FromReaderAt(r, int64(len(data)), "f", w); !errors.Is(err, errBoom) {
				t.Errorf("fail at %d, workers=%d: FromReaderAt = %+v, %v; want %v", failAt, w, m, err, errBoom)
			}
		}
	}
	// A source shorter than the declared size.
	if m, err := manifest.FromReaderAt(bytes.NewReader(data[:len(data)-1]), int64(len(data)), "f", 0); err == nil {
		t.Errorf("FromReaderAt of a short source = %+v; want an error", m)
	}
	if _, err := manifest.FromReaderAt(bytes.NewReader(nil), -1, "f", 0); err == nil {
		t.Error("FromReaderAt of size -1 succeeded")
	}
}

// eofAtEndReaderAt returns io.EOF together with a full read that reaches the
// end of its data, which io.ReaderAt allows ("If the n = len(p) bytes
// returned by ReadAt are at the end of the input source, ReadAt may return
// either err == EOF or err == nil").
type eofAtEndReaderAt struct{ data []byte }

func (r eofAtEndReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(r.data)) {
		return 0, io.EOF
	}
	n := copy(p, r.data[off:])
	if off+int64(n) == int64(len(r.data)) {
		return n, io.EOF
	}
	return n, nil
}

func TestFromReaderAtEOFWithFullRead(t *testing.T) {
	for _, size := range []int64{1, 16384, 16385, 65537} {
		data := pattern(size)
		m, err := manifest.FromReaderAt(eofAtEndReaderAt{data}, size, "f", 0)
		if err != nil {
			t.Errorf("size %d: FromReaderAt over a ReaderAt returning (len(p), io.EOF) at the end: %v", size, err)
			continue
		}
		checkAgainstRef(t, m, data)
	}
}
