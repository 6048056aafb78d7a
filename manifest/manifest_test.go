package manifest_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stampede-dev/stampede/manifest"
)

func TestPieceSizeFor(t *testing.T) {
	const GiB = 1 << 30
	for _, c := range []struct {
		size, want int64
	}{
		{0, 16 * KiB},
		{1, 16 * KiB},
		{16 * KiB, 16 * KiB},
		{5 * MiB, 16 * KiB},   // 320 pieces
		{8 * MiB, 16 * KiB},   // 512 pieces: the most before pieces grow
		{8*MiB + 1, 32 * KiB}, // 513 would be too many
		{32 * MiB, 64 * KiB},  // 512 pieces
		{32*MiB + 1, 128 * KiB},
		{GiB, 2 * MiB},       // 512 pieces
		{2 * GiB, 4 * MiB},   // 512 pieces of the largest size
		{2*GiB + 1, 4 * MiB}, // capped: 513 pieces
		{1 << 40, 4 * MiB},   // 1 TiB: 262144 pieces, capped
		{manifest.MaxSize, 4 * MiB},
	} {
		if got := manifest.PieceSizeFor(c.size); got != c.want {
			t.Errorf("PieceSizeFor(%d) = %d, want %d", c.size, got, c.want)
		}
	}

	// Properties over sizes around every power of two: the piece size is a
	// power of two in range, the piece count stays at most 512 unless the
	// size is capped, and it is the smallest such size.
	for shift := 0; shift <= 50; shift++ {
		for _, size := range []int64{1<<shift - 1, 1 << shift, 1<<shift + 1} {
			ps := manifest.PieceSizeFor(size)
			if ps < manifest.MinPieceSize || ps > manifest.MaxPieceSize || bits.OnesCount64(uint64(ps)) != 1 {
				t.Fatalf("PieceSizeFor(%d) = %d: not a power of two in [%d, %d]", size, ps, manifest.MinPieceSize, manifest.MaxPieceSize)
			}
			count := (size + ps - 1) / ps
			if count > 512 && ps != manifest.MaxPieceSize {
				t.Errorf("PieceSizeFor(%d) = %d gives %d pieces", size, ps, count)
			}
			if half := ps / 2; half >= manifest.MinPieceSize && (size+half-1)/half <= 512 {
				t.Errorf("PieceSizeFor(%d) = %d, but %d already gives %d pieces", size, ps, half, (size+half-1)/half)
			}
		}
	}
	if n := GiB / manifest.PieceSizeFor(GiB); n < 256 || n > 512 {
		t.Errorf("1 GiB is cut into %d pieces, want 256..512", n)
	}
}

func TestPieceGeometry(t *testing.T) {
	for _, c := range []struct {
		size, pieceSize int64
		n               int
		last            int64
	}{
		{0, 16 * KiB, 0, 0},
		{1, 16 * KiB, 1, 1},
		{16 * KiB, 16 * KiB, 1, 16 * KiB},
		{16*KiB + 1, 16 * KiB, 2, 1},
		{5*16*KiB + 3, 16 * KiB, 6, 3},
		{1 << 30, 512 * KiB, 2048, 512 * KiB},
		{1<<30 + 1, 1 * MiB, 1025, 1},
		{3 * MiB, 4 * MiB, 1, 3 * MiB},
		{manifest.MaxSize, 4 * MiB, 1 << 28, 4 * MiB},
	} {
		m := &manifest.Manifest{Size: c.size, PieceSize: c.pieceSize}
		if got := m.NumPieces(); got != c.n {
			t.Errorf("size %d piece size %d: NumPieces = %d, want %d", c.size, c.pieceSize, got, c.n)
			continue
		}
		if c.n == 0 {
			continue
		}
		if got := m.PieceLen(c.n - 1); got != c.last {
			t.Errorf("size %d piece size %d: last PieceLen = %d, want %d", c.size, c.pieceSize, got, c.last)
		}
		// Pieces tile the file: each starts where the previous ended, all
		// but the last are full.
		if c.n > 4096 {
			continue
		}
		var end int64
		for i := range c.n {
			if off := m.PieceOffset(i); off != end {
				t.Fatalf("size %d: piece %d starts at %d, previous ended at %d", c.size, i, off, end)
			}
			if l := m.PieceLen(i); i < c.n-1 && l != c.pieceSize || l <= 0 {
				t.Fatalf("size %d: piece %d of %d has length %d", c.size, i, c.n, l)
			}
			end += m.PieceLen(i)
		}
		if end != c.size {
			t.Errorf("size %d: pieces cover %d bytes", c.size, end)
		}
	}
}

// verifyCases are files whose every piece VerifyPiece is checked on: several
// piece sizes, short last pieces and single-piece files.
var verifyCases = []struct {
	size, pieceSize int64
}{
	{1, 16 * KiB},
	{16 * KiB, 16 * KiB},
	{5*16*KiB + 100, 16 * KiB}, // 6 pieces, piece layer padded to 8
	{200000, 64 * KiB},         // 4 pieces, the last ending mid-block
	{40000, 64 * KiB},          // one piece of 3 blocks (2 full, 1 short)
	{3*MiB + 7, 1 * MiB},       // 4 pieces of 64 blocks, the last of 1 short block
	{2*MiB + 16*KiB, 4 * MiB},  // one piece of 129 blocks, padded to 256
	{16385, 64 * KiB},          // one piece of 2 blocks: padded to 2 leaves, not to the 4 of a piece
	{1*MiB + 1, 4 * MiB},       // one piece of 65 blocks: padded to 128 leaves, not 256
}

func TestVerifyPieceAcceptsEveryPiece(t *testing.T) {
	for _, c := range verifyCases {
		data := pattern(c.size)
		m := mustBuild(t, data, c.pieceSize)
		for i := range m.NumPieces() {
			piece := data[m.PieceOffset(i) : m.PieceOffset(i)+m.PieceLen(i)]
			if err := m.VerifyPiece(i, piece); err != nil {
				t.Errorf("size %d piece size %d: VerifyPiece(%d): %v", c.size, c.pieceSize, i, err)
			}
		}
	}
}

// checkCorrupt fails unless err reports piece i as corrupt.
func checkCorrupt(t *testing.T, err error, i int, what string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: VerifyPiece(%d) accepted it", what, i)
		return
	}
	if !errors.Is(err, manifest.ErrCorruptPiece) {
		t.Errorf("%s: VerifyPiece(%d) = %v, not ErrCorruptPiece", what, i, err)
	}
	var pe *manifest.PieceError
	if !errors.As(err, &pe) {
		t.Errorf("%s: VerifyPiece(%d) = %v, not a *PieceError", what, i, err)
	} else if pe.Index != i {
		t.Errorf("%s: VerifyPiece(%d) blames piece %d", what, i, pe.Index)
	}
}

func TestVerifyPieceRejectsCorruption(t *testing.T) {
	for _, c := range verifyCases {
		data := pattern(c.size)
		m := mustBuild(t, data, c.pieceSize)
		for i := range m.NumPieces() {
			piece := data[m.PieceOffset(i) : m.PieceOffset(i)+m.PieceLen(i)]
			what := func(s string) string {
				return fmt.Sprintf("size %d piece size %d piece %d: %s", c.size, c.pieceSize, i, s)
			}
			// The untouched piece verifies, so every rejection below is due
			// to the change made.
			if err := m.VerifyPiece(i, piece); err != nil {
				t.Fatalf("%s", what(err.Error()))
			}
			for _, off := range []int{0, len(piece) / 2, len(piece) - 1} {
				for _, bit := range []byte{0x01, 0x80} {
					bad := bytes.Clone(piece)
					bad[off] ^= bit
					checkCorrupt(t, m.VerifyPiece(i, bad), i, what(fmt.Sprintf("bit %#x of byte %d flipped", bit, off)))
				}
			}
			checkCorrupt(t, m.VerifyPiece(i, piece[:len(piece)-1]), i, what("one byte short"))
			checkCorrupt(t, m.VerifyPiece(i, append(bytes.Clone(piece), 0)), i, what("one zero byte too many"))
			checkCorrupt(t, m.VerifyPiece(i, nil), i, what("empty"))
			if len(piece)%manifest.BlockSize != 0 {
				// Zero-padding a short block to a whole one must not pass:
				// BEP 52 hashes the short block as is.
				padded := append(bytes.Clone(piece), make([]byte, manifest.BlockSize-len(piece)%manifest.BlockSize)...)
				checkCorrupt(t, m.VerifyPiece(i, padded), i, what("last block zero-padded"))
			}
			// The right bytes for another piece are the wrong bytes for this one.
			if j := i + 1; j < m.NumPieces() && m.PieceLen(j) == m.PieceLen(i) {
				other := data[m.PieceOffset(j) : m.PieceOffset(j)+m.PieceLen(j)]
				checkCorrupt(t, m.VerifyPiece(i, other), i, what(fmt.Sprintf("bytes of piece %d", j)))
			}
		}
	}
}

// TestVerifyPieceDoesNotModify checks VerifyPiece leaves the caller's bytes
// alone: they are about to be written or served.
func TestVerifyPieceDoesNotModify(t *testing.T) {
	data := pattern(200000)
	m := mustBuild(t, data, 64*KiB)
	orig := bytes.Clone(data)
	for i := range m.NumPieces() {
		_ = m.VerifyPiece(i, data[m.PieceOffset(i):m.PieceOffset(i)+m.PieceLen(i)])
	}
	if !bytes.Equal(data, orig) {
		t.Fatal("VerifyPiece modified the piece data")
	}
}

func TestVerifyPieceOutOfRange(t *testing.T) {
	m := mustBuild(t, pattern(5*16*KiB+100), 16*KiB)
	empty := mustFromReaderAt(t, nil, 1)
	for _, c := range []struct {
		m    *manifest.Manifest
		i    int
		what string
	}{
		{m, -1, "index -1"},
		{m, m.NumPieces(), "index NumPieces"},
		{m, 1 << 40, "huge index"},
		{empty, 0, "any index of an empty file"},
	} {
		// A piece a peer sends under an index the file does not have is as
		// unusable as a corrupt one: reject it the same way, naming the index.
		checkCorrupt(t, c.m.VerifyPiece(c.i, pattern(16*KiB)), c.i, c.what)
	}
}

// validManifest is a multi-piece manifest with every optional field set.
func validManifest(t testing.TB) *manifest.Manifest {
	t.Helper()
	m := mustBuild(t, pattern(5*16*KiB+100), 16*KiB)
	m.Name = "ubuntu-24.04.iso ünïcode"
	m.ETag = `"abc-123"`
	m.LastModified = "Wed, 21 Oct 2015 07:28:00 GMT"
	m.Trackers = []string{"http://tracker.example/announce", "http://t2.example/a"}
	return m
}

func TestJSONRoundTrip(t *testing.T) {
	for _, m := range []*manifest.Manifest{
		validManifest(t),
		mustFromReaderAt(t, nil, 0),            // empty file
		mustFromReaderAt(t, pattern(1), 0),     // one byte, one piece
		mustFromReaderAt(t, pattern(65537), 0), // several pieces, no optional fields
	} {
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := manifest.Unmarshal(data)
		if err != nil {
			t.Fatalf("size %d: Unmarshal(Marshal) = %v\n%s", m.Size, err, data)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("size %d: round trip changed the manifest:\n got %+v\nwant %+v", m.Size, got, m)
		}
		got, err = manifest.Decode(bytes.NewReader(data))
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("size %d: Decode = %+v, %v", m.Size, got, err)
		}
	}
}

// TestWireFormat pins the JSON layout other implementations read: field
// names, the version, the root in hex and the piece layer as one base64
// string of concatenated hashes.
func TestWireFormat(t *testing.T) {
	m := validManifest(t)
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var w map[string]any
	if err := json.Unmarshal(data, &w); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"version":       float64(1),
		"name":          m.Name,
		"size":          float64(m.Size),
		"piece_size":    float64(m.PieceSize),
		"root":          m.Root.String(),
		"etag":          m.ETag,
		"last_modified": m.LastModified,
		"trackers":      []any{m.Trackers[0], m.Trackers[1]},
	}
	var layer []byte
	for _, h := range m.Pieces {
		layer = append(layer, h[:]...)
	}
	want["piece_layer"] = base64.StdEncoding.EncodeToString(layer)
	if !reflect.DeepEqual(w, want) {
		t.Errorf("wire form\n got %v\nwant %v", w, want)
	}
}

func TestUnmarshalIgnoresUnknownFields(t *testing.T) {
	m := validManifest(t)
	data := mutateWire(t, m, func(w map[string]json.RawMessage) {
		w["added_in_v1_5"] = json.RawMessage(`{"x":[1,2,3]}`)
	})
	got, err := manifest.Unmarshal(data)
	if err != nil {
		t.Fatalf("Unmarshal with an unknown field: %v", err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("got %+v, want %+v", got, m)
	}
}

// mutateWire returns m's JSON form after edit.
func mutateWire(t testing.TB, m *manifest.Manifest, edit func(map[string]json.RawMessage)) []byte {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var w map[string]json.RawMessage
	if err := json.Unmarshal(data, &w); err != nil {
		t.Fatal(err)
	}
	edit(w)
	out, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func setLayer(m *manifest.Manifest, edit func([]byte) []byte) func(map[string]json.RawMessage) {
	return func(w map[string]json.RawMessage) {
		var layer []byte
		for _, h := range m.Pieces {
			layer = append(layer, h[:]...)
		}
		w["piece_layer"], _ = json.Marshal(base64.StdEncoding.EncodeToString(edit(layer)))
	}
}

func set(key, raw string) func(map[string]json.RawMessage) {
	return func(w map[string]json.RawMessage) { w[key] = json.RawMessage(raw) }
}

func TestUnmarshalRejects(t *testing.T) {
	m := validManifest(t)
	if _, err := manifest.Unmarshal(mutateWire(t, m, func(map[string]json.RawMessage) {})); err != nil {
		t.Fatalf("the unmodified manifest is rejected: %v", err)
	}
	flipped := m.Root
	flipped[31] ^= 1
	one := mustFromReaderAt(t, pattern(1000), 0)
	for _, c := range []struct {
		name  string
		base  *manifest.Manifest
		edit  func(map[string]json.RawMessage)
		error string // a word the error must contain
	}{
		{"tampered piece layer", m, setLayer(m, func(l []byte) []byte { l[40] ^= 0x10; return l }), "root"},
		{"piece hashes swapped", m, setLayer(m, func(l []byte) []byte {
			a := bytes.Clone(l[:32])
			copy(l[:32], l[32:64])
			copy(l[32:64], a)
			return l
		}), "root"},
		{"tampered root", m, set("root", strconv.Quote(flipped.String())), "root"},
		{"tampered root of a one-piece file", one, set("root", strconv.Quote(flipped.String())), "root"},
		{"tampered piece hash of a one-piece file", one, setLayer(one, func(l []byte) []byte { l[0] ^= 1; return l }), "root"},
		{"root of an empty file not zero", mustFromReaderAt(t, nil, 0), set("root", strconv.Quote(flipped.String())), "root"},
		{"piece hash missing", m, setLayer(m, func(l []byte) []byte { return l[:len(l)-32] }), "piece"},
		{"piece hash extra", m, setLayer(m, func(l []byte) []byte { return append(l, l[:32]...) }), "piece"},
		{"size for fewer pieces", m, set("size", strconv.FormatInt(m.Size-200, 10)), "piece"},
		{"size for more pieces", m, set("size", strconv.FormatInt(m.Size+16*KiB, 10)), "piece"},
		{"piece layer not whole hashes", m, setLayer(m, func(l []byte) []byte { return l[:len(l)-1] }), "hash"},
		{"piece size 0", m, set("piece_size", "0"), "piece size"},
		{"piece size 8 KiB", m, set("piece_size", "8192"), "piece size"},
		{"piece size 48 KiB", m, set("piece_size", "49152"), "piece size"},
		{"piece size 8 MiB", m, set("piece_size", "8388608"), "piece size"},
		{"piece size negative", m, set("piece_size", "-16384"), "piece size"},
		{"piece size over int64", m, set("piece_size", "9223372036854775808"), "decode"},
		{"size -1", m, set("size", "-1"), "size"},
		{"size over MaxSize", m, set("size", strconv.FormatInt(manifest.MaxSize+1, 10)), "size"},
		{"size 2^62", m, set("size", strconv.FormatInt(1<<62, 10)), "size"},
		{"size max int64", m, set("size", "9223372036854775807"), "size"},
		{"size fractional", m, set("size", "82020.5"), "decode"},
		{"size a string", m, set("size", `"82020"`), "decode"},
		{"version 0", m, set("version", "0"), "version"},
		{"version 2", m, set("version", "2"), "version"},
		{"version missing", m, func(w map[string]json.RawMessage) { delete(w, "version") }, "version"},
		{"bad base64", m, set("piece_layer", `"!!!not base64!!!"`), "piece layer"},
		{"base64url", m, set("piece_layer", strconv.Quote(base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32*6)))), "piece layer"},
		{"root not hex", m, set("root", strconv.Quote(strings.Repeat("zz", 32))), "decode"},
		{"root too short", m, set("root", strconv.Quote(m.Root.String()[:62])), "decode"},
		{"root a number", m, set("root", "12"), "decode"},
		{"name with /", m, set("name", `"../etc/passwd"`), "name"},
		{"name with \\", m, set("name", `"..\\boot.ini"`), "name"},
		{"name with NUL", m, set("name", `"a\u0000b"`), "name"},
		{"trackers not strings", m, set("trackers", `[1]`), "decode"},
	} {
		data := mutateWire(t, c.base, c.edit)
		got, err := manifest.Unmarshal(data)
		if err == nil {
			t.Errorf("%s: accepted %+v", c.name, got)
			continue
		}
		if got != nil {
			t.Errorf("%s: returned a manifest with the error", c.name)
		}
		if !strings.Contains(err.Error(), c.error) {
			t.Errorf("%s: error %q does not mention %q", c.name, err, c.error)
		}
		if _, err := manifest.Decode(bytes.NewReader(data)); err == nil {
			t.Errorf("%s: Decode accepted it", c.name)
		}
	}
	for _, s := range []string{"", "null", "[]", "{", `{"version":1`, "\x00"} {
		if got, err := manifest.Unmarshal([]byte(s)); err == nil {
			t.Errorf("Unmarshal(%q) = %+v, want an error", s, got)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := validManifest(t).Validate(); err != nil {
		t.Fatalf("valid manifest: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*manifest.Manifest)
	}{
		{"root flipped", func(m *manifest.Manifest) { m.Root[0] ^= 1 }},
		{"root zero", func(m *manifest.Manifest) { m.Root = manifest.Hash{} }},
		{"piece flipped", func(m *manifest.Manifest) { m.Pieces[3][7] ^= 0x40 }},
		{"last piece flipped", func(m *manifest.Manifest) { m.Pieces[len(m.Pieces)-1][0] ^= 1 }},
		{"pieces nil", func(m *manifest.Manifest) { m.Pieces = nil }},
		{"piece dropped", func(m *manifest.Manifest) { m.Pieces = m.Pieces[:len(m.Pieces)-1] }},
		{"padding piece appended", func(m *manifest.Manifest) { m.Pieces = append(m.Pieces, manifest.Hash{}) }},
		{"piece size doubled", func(m *manifest.Manifest) { m.PieceSize *= 2 }},
		{"piece size not a power of two", func(m *manifest.Manifest) { m.PieceSize = 3 * 16 * KiB }},
		{"size negative", func(m *manifest.Manifest) { m.Size = -1 }},
		{"name with /", func(m *manifest.Manifest) { m.Name = "a/b" }},
	} {
		m := validManifest(t)
		c.edit(m)
		if err := m.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", c.name)
		}
	}
}

func TestDecodeSizeLimit(t *testing.T) {
	data, err := json.Marshal(validManifest(t))
	if err != nil {
		t.Fatal(err)
	}
	// Trailing spaces keep the JSON valid, so only the length decides.
	pad := func(total int) io.Reader {
		return io.MultiReader(bytes.NewReader(data), io.LimitReader(spaces{}, int64(total-len(data))))
	}
	if _, err := manifest.Decode(pad(manifest.MaxEncodedSize)); err != nil {
		t.Errorf("Decode of exactly MaxEncodedSize bytes: %v", err)
	}
	if _, err := manifest.Decode(pad(manifest.MaxEncodedSize + 1)); err == nil {
		t.Error("Decode of MaxEncodedSize+1 bytes succeeded")
	}
}

// spaces is an endless source of JSON whitespace.
type spaces struct{}

var spaceBuf = bytes.Repeat([]byte{' '}, 64<<10)

func (spaces) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		n += copy(p[n:], spaceBuf)
	}
	return n, nil
}

func TestDecodeReadError(t *testing.T) {
	errBoom := errors.New("boom")
	_, err := manifest.Decode(io.MultiReader(strings.NewReader(`{"version":1,`), iotest.ErrReader(errBoom)))
	if !errors.Is(err, errBoom) {
		t.Errorf("Decode = %v, want it to wrap %v", err, errBoom)
	}
}

func TestParseHash(t *testing.T) {
	const s = "ca358758f6d27e6cf45272937977a748fd88391db679ceda7dc7bf1f005ee879"
	h, err := manifest.ParseHash(s)
	if err != nil || h.String() != s || h[0] != 0xca || h[31] != 0x79 {
		t.Fatalf("ParseHash(%s) = %s, %v", s, h, err)
	}
	if h2, err := manifest.ParseHash(strings.ToUpper(s)); err != nil || h2 != h {
		t.Errorf("ParseHash(upper case) = %s, %v", h2, err)
	}
	for _, bad := range []string{"", s[:63], s + "0", "g" + s[1:], s[:62] + " 9"} {
		if _, err := manifest.ParseHash(bad); err == nil {
			t.Errorf("ParseHash(%q) succeeded", bad)
		}
	}
	if !(manifest.Hash{}).IsZero() || h.IsZero() {
		t.Error("IsZero wrong")
	}
	text, _ := h.MarshalText()
	var h3 manifest.Hash
	if err := h3.UnmarshalText(text); err != nil || h3 != h {
		t.Errorf("text round trip: %s, %v", h3, err)
	}
}

// TestHead: a head is the manifest without its piece layer; it decodes
// with UnmarshalHead only, and SetLayer takes the true layer and nothing
// else. Files of one piece or none keep their layer in the head.
func TestHead(t *testing.T) {
	m := validManifest(t)
	head, err := json.Marshal(m.Head())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(head, []byte("piece_layer")) {
		t.Fatalf("head carries the layer: %s", head)
	}
	if _, err := manifest.Unmarshal(head); err == nil {
		t.Fatal("Unmarshal accepted a head as a manifest")
	}
	h, err := manifest.DecodeHead(bytes.NewReader(head))
	if err != nil {
		t.Fatal(err)
	}
	if h.HasLayer() || h.Root != m.Root || h.Size != m.Size || h.PieceSize != m.PieceSize || !reflect.DeepEqual(h.Trackers, m.Trackers) {
		t.Fatalf("head decodes to %+v", h)
	}
	bad := slices.Clone(m.Pieces)
	bad[2][0] ^= 1
	for _, layer := range [][]manifest.Hash{nil, m.Pieces[1:], bad} {
		if err := h.SetLayer(layer); err == nil || h.HasLayer() {
			t.Errorf("SetLayer accepted a layer of %d hashes that is not the file's", len(layer))
		}
	}
	if err := h.SetLayer(slices.Clone(m.Pieces)); err != nil || !reflect.DeepEqual(h, m) {
		t.Fatalf("SetLayer(true layer) = %v; manifest %+v", err, h)
	}
	// A whole manifest decodes as a head too, layer and all.
	full, _ := json.Marshal(m)
	if got, err := manifest.UnmarshalHead(full); err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("UnmarshalHead(manifest) = %+v, %v", got, err)
	}
	for _, small := range []*manifest.Manifest{mustFromReaderAt(t, nil, 0), mustFromReaderAt(t, pattern(1), 0)} {
		data, _ := json.Marshal(small.Head())
		got, err := manifest.UnmarshalHead(data)
		if err != nil || !got.HasLayer() || !reflect.DeepEqual(got, small) {
			t.Errorf("size %d: head round trip = %+v, %v", small.Size, got, err)
		}
	}
	// A head still has its geometry checked.
	if _, err := manifest.UnmarshalHead(mutateWire(t, m.Head(), set("piece_size", "1000"))); err == nil {
		t.Error("UnmarshalHead accepted a piece size of 1000")
	}
	// A head leaves "piece_layer" out; an empty one is a manifest whose
	// layer is missing.
	if _, err := manifest.UnmarshalHead(mutateWire(t, m, set("piece_layer", `""`))); err == nil {
		t.Error(`UnmarshalHead accepted "piece_layer": "" for a file of several pieces`)
	}
}
