package manifest_test

import (
	"bytes"
	"crypto/sha256"
	"os"
	"testing"

	"github.com/stampede-dev/stampede/manifest"
)

// patternPeriod is the period of pattern's content: byte i is (i*31+7)%251.
const patternPeriod = 251

// pattern returns n bytes of the test content shared with the libtorrent
// oracle: byte i is (i*31+7)%251. Its blocks all differ, so a test mixing up
// blocks or pieces sees different hashes.
func pattern(n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((i*31 + 7) % patternPeriod)
	}
	return b
}

// writePattern writes a file of size bytes of pattern content without holding
// it all in memory.
func writePattern(t testing.TB, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	chunk := pattern(patternPeriod * 4096) // a whole number of periods, so chunks line up
	for left := size; left > 0; {
		n := min(left, int64(len(chunk)))
		if _, err := f.Write(chunk[:n]); err != nil {
			t.Fatal(err)
		}
		left -= n
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// refTree computes the pieces root of data and its piece layer for pieceSize
// straight from BEP 52, independently of the package: hash every 16 KiB block
// (the last one short), pad the leaves with zero hashes to a power of two,
// hash pairs level by level, and take the piece layer from the level whose
// nodes each cover one piece. A file of at most one piece has no piece layer
// in BEP 52; the manifest then holds the root as its only piece hash, and so
// does refTree.
func refTree(data []byte, pieceSize int) (root manifest.Hash, layer []manifest.Hash) {
	const B = manifest.BlockSize
	if len(data) == 0 {
		return manifest.Hash{}, nil
	}
	nblocks := (len(data) + B - 1) / B
	width := 1
	for width < nblocks {
		width *= 2
	}
	level := make([]manifest.Hash, width) // zero hashes beyond the file
	for i := range nblocks {
		level[i] = sha256.Sum256(data[i*B : min((i+1)*B, len(data))])
	}
	npieces := (len(data) + pieceSize - 1) / pieceSize
	span := 1 // blocks under one node of level
	for {
		if npieces > 1 && span == pieceSize/B {
			layer = append([]manifest.Hash(nil), level[:npieces]...)
		}
		if len(level) == 1 {
			break
		}
		next := make([]manifest.Hash, len(level)/2)
		for i := range next {
			next[i] = sha256.Sum256(append(level[2*i][:], level[2*i+1][:]...))
		}
		level, span = next, span*2
	}
	if npieces == 1 {
		layer = []manifest.Hash{level[0]}
	}
	return level[0], layer
}

// mustFromReaderAt is the manifest of data with the default piece size.
func mustFromReaderAt(t testing.TB, data []byte, workers int) *manifest.Manifest {
	t.Helper()
	m, err := manifest.FromReaderAt(bytes.NewReader(data), int64(len(data)), "f", workers)
	if err != nil {
		t.Fatalf("FromReaderAt(%d bytes): %v", len(data), err)
	}
	return m
}

// mustBuild is the manifest of data with an explicit piece size.
func mustBuild(t testing.TB, data []byte, pieceSize int64) *manifest.Manifest {
	t.Helper()
	b, err := manifest.NewBuilder(int64(len(data)), pieceSize)
	if err != nil {
		t.Fatalf("NewBuilder(%d, %d): %v", len(data), pieceSize, err)
	}
	if _, err := b.Write(data); err != nil {
		t.Fatal(err)
	}
	m, err := b.Manifest("f")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkAgainstRef fails unless m is the manifest refTree computes for data.
func checkAgainstRef(t testing.TB, m *manifest.Manifest, data []byte) {
	t.Helper()
	root, layer := refTree(data, int(m.PieceSize))
	if m.Size != int64(len(data)) {
		t.Fatalf("Size = %d, want %d", m.Size, len(data))
	}
	if m.Root != root {
		t.Errorf("size %d piece size %d: Root = %s, reference %s", len(data), m.PieceSize, m.Root, root)
	}
	if len(m.Pieces) != len(layer) {
		t.Fatalf("size %d piece size %d: %d piece hashes, reference %d", len(data), m.PieceSize, len(m.Pieces), len(layer))
	}
	for i := range layer {
		if m.Pieces[i] != layer[i] {
			t.Errorf("size %d piece size %d: piece %d = %s, reference %s", len(data), m.PieceSize, i, m.Pieces[i], layer[i])
		}
	}
}

func mustHash(t testing.TB, s string) manifest.Hash {
	t.Helper()
	h, err := manifest.ParseHash(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
