package manifest_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/manifest"
)

// The libtorrent oracle: scripts under testdata that build v2 torrents with
// python3-libtorrent. CI installs the package and sets requireLibtorrentEnv so
// a missing oracle fails the run instead of skipping it.
const (
	python               = "/usr/bin/python3"
	requireLibtorrentEnv = "STAMPEDETEST_REQUIRE_LIBTORRENT"
)

// oracle runs a testdata script and returns the fields of each output line.
// Exit status 2 (libtorrent cannot be imported) or a missing interpreter
// skips the test, or fails it when requireLibtorrentEnv=1.
func oracle(t *testing.T, script string, args ...string) [][]string {
	t.Helper()
	unavailable := func(why string) {
		t.Helper()
		if os.Getenv(requireLibtorrentEnv) == "1" {
			t.Fatalf("libtorrent oracle unavailable and %s=1: %s", requireLibtorrentEnv, why)
		}
		t.Skipf("libtorrent oracle unavailable (set %s=1 to fail instead): %s", requireLibtorrentEnv, why)
	}
	if _, err := os.Stat(python); errors.Is(err, fs.ErrNotExist) {
		unavailable(python + " not found")
	}
	cmd := exec.Command(python, append([]string{filepath.Join("testdata", script)}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 2 {
		unavailable(strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, stderr.Bytes())
	}
	var lines [][]string
	for l := range strings.Lines(string(out)) {
		lines = append(lines, strings.Fields(l))
	}
	return lines
}

const (
	KiB = 1 << 10
	MiB = 1 << 20
)

// libtorrentSizes are the file sizes checked against libtorrent, each with the
// reason it is there. Piece sizes are PieceSizeFor's.
var libtorrentSizes = []struct {
	size int64
	why  string
}{
	{0, "empty file: all-zero root"},
	{1, "one byte"},
	{16383, "one byte short of a block"},
	{16384, "exactly one block"},
	{16385, "one byte over a block and a 16 KiB piece: 2 pieces"},
	{32768, "2 whole pieces"},
	{32769, "3 pieces, the last of one byte"},
	{49152, "3 whole pieces"},
	{65537, "5 pieces, piece layer padded to 8"},
	{5242887, "321 pieces of 16 KiB"},
	{512 * 16 * KiB, "512 pieces of 16 KiB, the most before pieces grow"},
	{512*16*KiB + 1, "one byte over: 257 pieces of 32 KiB, the last of one byte"},
	{2048 * 16 * KiB, "512 pieces of 64 KiB"},
	{2048*16*KiB + 1, "257 pieces of 128 KiB, the last of one byte"},
	{2047*32*KiB + 1, "512 pieces of 128 KiB, the last of one byte"},
	{2048*32*KiB + 1, "257 pieces of 256 KiB, the last of one byte"},
}

// explicitPieceSizes are files built with a piece size other than
// PieceSizeFor's, to reach big pieces with few of them (2 and 3 pieces of up
// to 4 MiB) without multi-gigabyte files.
var explicitPieceSizes = []struct {
	size, pieceSize int64
	why             string
}{
	{65536, 32 * KiB, "2 whole pieces of 32 KiB"},
	{65537, 32 * KiB, "3 pieces of 32 KiB, the last of one byte"},
	{100000, 64 * KiB, "2 pieces of 64 KiB, the last ending mid-block"},
	{3*16*KiB + 1, 64 * KiB, "one piece of 4 blocks, padded to 4 leaves"},
	{4*MiB + 1, 4 * MiB, "2 pieces of 4 MiB, the last of one byte"},
	{8*MiB + 16385, 4 * MiB, "3 pieces of 4 MiB, the last of 2 blocks padded to 256 leaves"},
	{3 * MiB, 4 * MiB, "one 4 MiB piece, file of 192 blocks padded to 256"},
	{16385, 64 * KiB, "one piece of 2 blocks: the tree has 2 leaves, not a piece's 4"},
	{1*MiB + 1, 4 * MiB, "one piece of 65 blocks: the tree has 128 leaves, not a piece's 256"},
}

// TestLibtorrent checks that roots and piece layers equal libtorrent's for the
// same file in a v2 torrent.
func TestLibtorrent(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, c := range libtorrentSizes {
		p := filepath.Join(dir, fmt.Sprintf("f%d", c.size))
		writePattern(t, p, c.size)
		paths = append(paths, p)
	}

	// Roots through libtorrent_root.py, libtorrent choosing its own piece
	// size: the pieces root does not depend on it.
	lines := oracle(t, "libtorrent_root.py", paths...)
	if len(lines) != len(paths) {
		t.Fatalf("libtorrent_root.py printed %d lines for %d files", len(lines), len(paths))
	}
	got := make(map[int64]*manifest.Manifest)
	for i, c := range libtorrentSizes {
		fromAt, fromStream := manifestsOfFile(t, paths[i], c.size)
		got[c.size] = fromAt
		want := parseOracleLine(t, lines[i], c.size)
		if fromAt.Root != want {
			t.Errorf("size %d (%s): FromReaderAt root %s, libtorrent %s", c.size, c.why, fromAt.Root, want)
		}
		if fromStream.Root != want {
			t.Errorf("size %d (%s): FromReader root %s, libtorrent %s", c.size, c.why, fromStream.Root, want)
		}
		if c.size == 0 && !want.IsZero() {
			t.Errorf("libtorrent root of an empty file is %s, want all zeros", want)
		}
	}

	// Piece layers through libtorrent_layers.py with stampede's piece size.
	byPieceSize := make(map[int64][]int)
	for i, c := range libtorrentSizes {
		if c.size > 0 {
			ps := manifest.PieceSizeFor(c.size)
			byPieceSize[ps] = append(byPieceSize[ps], i)
		}
	}
	for ps, idx := range byPieceSize {
		var files []string
		for _, i := range idx {
			files = append(files, paths[i])
		}
		lines := oracle(t, "libtorrent_layers.py", append([]string{"--piece-size", strconv.FormatInt(ps, 10)}, files...)...)
		if len(lines) != len(files) {
			t.Fatalf("libtorrent_layers.py printed %d lines for %d files", len(lines), len(files))
		}
		for j, i := range idx {
			c := libtorrentSizes[i]
			checkLayer(t, got[c.size], lines[j], fmt.Sprintf("size %d (%s)", c.size, c.why))
		}
	}

	// Builder with explicit piece sizes.
	for _, c := range explicitPieceSizes {
		p := filepath.Join(dir, fmt.Sprintf("b%d-%d", c.size, c.pieceSize))
		writePattern(t, p, c.size)
		lines := oracle(t, "libtorrent_layers.py", "--piece-size", strconv.FormatInt(c.pieceSize, 10), p)
		if len(lines) != 1 {
			t.Fatalf("libtorrent_layers.py printed %d lines for 1 file", len(lines))
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m := mustBuild(t, data, c.pieceSize)
		what := fmt.Sprintf("size %d piece size %d (%s)", c.size, c.pieceSize, c.why)
		checkLayer(t, m, lines[0], what)
		// The piece hashes libtorrent agrees with must verify the file's pieces.
		for i := range m.NumPieces() {
			off := m.PieceOffset(i)
			if err := m.VerifyPiece(i, data[off:off+m.PieceLen(i)]); err != nil {
				t.Errorf("%s: VerifyPiece(%d): %v", what, i, err)
			}
		}
	}
}

// manifestsOfFile computes the manifest of the file at path with FromReaderAt
// and with FromReader, and fails unless they agree.
func manifestsOfFile(t *testing.T, path string, size int64) (fromAt, fromStream *manifest.Manifest) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fromAt, err = manifest.FromReaderAt(f, size, filepath.Base(path), 0)
	if err != nil {
		t.Fatalf("FromReaderAt(%s): %v", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	fromStream, err = manifest.FromReader(f, size, filepath.Base(path))
	if err != nil {
		t.Fatalf("FromReader(%s): %v", path, err)
	}
	if fromAt.Root != fromStream.Root || fromAt.PieceSize != fromStream.PieceSize || !equalHashes(fromAt.Pieces, fromStream.Pieces) {
		t.Errorf("size %d: FromReaderAt and FromReader disagree: root %s vs %s, piece size %d vs %d",
			size, fromAt.Root, fromStream.Root, fromAt.PieceSize, fromStream.PieceSize)
	}
	return fromAt, fromStream
}

// parseOracleLine checks the size field of "<root> <size> <piece len> ..." and
// returns the root.
func parseOracleLine(t *testing.T, fields []string, size int64) manifest.Hash {
	t.Helper()
	if len(fields) < 3 {
		t.Fatalf("oracle line %q: want at least 3 fields", fields)
	}
	if fields[1] != strconv.FormatInt(size, 10) {
		t.Fatalf("oracle line %q: size %s, want %d", fields, fields[1], size)
	}
	return mustHash(t, fields[0])
}

// checkLayer compares m with a libtorrent_layers.py line.
func checkLayer(t *testing.T, m *manifest.Manifest, fields []string, what string) {
	t.Helper()
	if len(fields) != 4 {
		t.Fatalf("%s: oracle line %q: want 4 fields", what, fields)
	}
	if root := parseOracleLine(t, fields, m.Size); m.Root != root {
		t.Errorf("%s: root %s, libtorrent %s", what, m.Root, root)
	}
	if fields[2] != strconv.FormatInt(m.PieceSize, 10) {
		t.Fatalf("%s: libtorrent used piece length %s, want %d", what, fields[2], m.PieceSize)
	}
	var want []manifest.Hash
	if fields[3] == "-" {
		// BEP 52: no piece layer for a file of one piece; the manifest
		// carries the root as its single piece hash.
		want = []manifest.Hash{m.Root}
		if m.NumPieces() != 1 {
			t.Errorf("%s: libtorrent has no piece layer but the manifest has %d pieces", what, m.NumPieces())
		}
	} else {
		if len(fields[3])%64 != 0 {
			t.Fatalf("%s: piece layer of %d hex digits", what, len(fields[3]))
		}
		for s := fields[3]; s != ""; s = s[64:] {
			want = append(want, mustHash(t, s[:64]))
		}
	}
	if !equalHashes(m.Pieces, want) {
		t.Errorf("%s: piece layer differs from libtorrent's: %d hashes vs %d, first difference at %d",
			what, len(m.Pieces), len(want), firstDiff(m.Pieces, want))
	}
}

func equalHashes(a, b []manifest.Hash) bool {
	return len(a) == len(b) && firstDiff(a, b) == len(a)
}

func firstDiff(a, b []manifest.Hash) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestGoldenRoots pins roots libtorrent computed for pattern content, so the
// check runs where libtorrent is not installed.
func TestGoldenRoots(t *testing.T) {
	for _, c := range []struct {
		size int64
		root string
	}{
		{0, "0000000000000000000000000000000000000000000000000000000000000000"},
		{1, "ca358758f6d27e6cf45272937977a748fd88391db679ceda7dc7bf1f005ee879"},
		{16384, "e6494c86814963a758f59bf832e78df26f8415657cdf64bd2eb1a3e18721bcc9"},
		{16385, "4cfab4c81a38928437280fa27f6956592e9d5ecac29e7d318434d70e5a64b1c0"},
		{65537, "324f7cb88742062ba04b6df0ffeba764d7aee25da9b954bb3e36591901fc7f79"},
		{5242887, "42cc8086fad32027efd180f2dfa290dd928ac8987a29f9623ea5a539efc029f7"},
	} {
		data := pattern(c.size)
		want := mustHash(t, c.root)
		for _, workers := range []int{1, 0} {
			if m := mustFromReaderAt(t, data, workers); m.Root != want {
				t.Errorf("size %d: FromReaderAt(workers=%d) root %s, libtorrent %s", c.size, workers, m.Root, want)
			}
		}
		m, err := manifest.FromReader(bytes.NewReader(data), c.size, "f")
		if err != nil {
			t.Fatal(err)
		}
		if m.Root != want {
			t.Errorf("size %d: FromReader root %s, libtorrent %s", c.size, m.Root, want)
		}
		if root, _ := refTree(data, int(m.PieceSize)); root != want {
			t.Errorf("size %d: the test's reference tree gives %s, libtorrent %s", c.size, root, want)
		}
	}
}

// TestGoldenPieceLayer pins libtorrent's piece layer of the smallest
// two-piece file: the hashes of its two blocks.
func TestGoldenPieceLayer(t *testing.T) {
	m := mustFromReaderAt(t, pattern(16385), 0)
	want := []manifest.Hash{
		mustHash(t, "e6494c86814963a758f59bf832e78df26f8415657cdf64bd2eb1a3e18721bcc9"),
		mustHash(t, "2d3193691934124461809fb9bc7e671215099fc7d961bfbe31943d40d477c890"),
	}
	if m.PieceSize != 16384 || !equalHashes(m.Pieces, want) {
		t.Errorf("piece size %d, piece layer %v; want 16384, %v", m.PieceSize, m.Pieces, want)
	}
}
