package manifest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/stampede-dev/stampede/manifest"
)

// sameManifest reports whether a and b describe the same thing. A decoded
// empty tracker list and a missing one are the same: both encode to nothing.
func sameManifest(a, b *manifest.Manifest) bool {
	return a.Name == b.Name && a.Size == b.Size && a.PieceSize == b.PieceSize && a.Root == b.Root &&
		slices.Equal(a.Pieces, b.Pieces) && a.ETag == b.ETag && a.LastModified == b.LastModified &&
		slices.Equal(a.Trackers, b.Trackers)
}

func FuzzUnmarshal(f *testing.F) {
	for _, m := range []*manifest.Manifest{
		validManifest(f),
		mustFromReaderAt(f, nil, 0),
		mustFromReaderAt(f, pattern(1), 0),
		mustFromReaderAt(f, pattern(16385), 0),
		mustFromReaderAt(f, pattern(65537), 0),
		mustBuild(f, pattern(100000), 64*KiB),
	} {
		data, err := json.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		// Near misses: the fuzzer starts close to the checks.
		f.Add(bytes.Replace(data, []byte(`"version":1`), []byte(`"version":2`), 1))
		f.Add(bytes.Replace(data, []byte(`"piece_size":16384`), []byte(`"piece_size":32768`), 1))
		f.Add(bytes.Replace(data, []byte(`"size":`), []byte(`"size":1`), 1))
	}
	f.Add([]byte(`{"version":1,"size":0,"piece_size":16384,"root":"0000000000000000000000000000000000000000000000000000000000000000","piece_layer":"","trackers":[]}`))
	f.Add([]byte(`{"version":1,"size":-1,"piece_size":16384}`))
	f.Add([]byte(`{"version":1,"size":1125899906842624,"piece_size":16384}`))
	f.Add([]byte(`{"version":1,"name":"a/b","size":0,"piece_size":16384}`))
	f.Add([]byte(`{"version":1,"size":0,"piece_size":16384,"piece_layer":"AAAA"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))

	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := manifest.Unmarshal(data)
		if err != nil {
			if m != nil {
				t.Fatalf("Unmarshal returned a manifest with error %v", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("Unmarshal accepted a manifest Validate rejects: %v", err)
		}
		if len(m.Pieces) != m.NumPieces() {
			t.Fatalf("%d piece hashes for %d pieces", len(m.Pieces), m.NumPieces())
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("Marshal of an accepted manifest: %v", err)
		}
		m2, err := manifest.Unmarshal(out)
		if err != nil {
			t.Fatalf("re-decoding an accepted manifest: %v\n%s", err, out)
		}
		if !sameManifest(m, m2) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, m2)
		}
		out2, err := json.Marshal(m2)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", out, out2)
		}
		if m3, err := manifest.Decode(bytes.NewReader(data)); err != nil || !sameManifest(m, m3) {
			t.Fatalf("Decode disagrees with Unmarshal: %v", err)
		}
		// An accepted manifest is safe to verify against, whatever it
		// claims: no panic, and a rejection names the piece.
		if n := m.NumPieces(); n > 0 {
			for _, i := range []int{0, n - 1} {
				if err := m.VerifyPiece(i, make([]byte, m.PieceLen(i))); err != nil {
					var pe *manifest.PieceError
					if !errors.As(err, &pe) || pe.Index != i || !errors.Is(err, manifest.ErrCorruptPiece) {
						t.Fatalf("VerifyPiece(%d) = %v: not a *PieceError for piece %d", i, err, i)
					}
				}
			}
		}
	})
}

// expand returns n bytes made from seed: seed repeated, each block also
// marked with its index so blocks differ; pattern content for an empty seed.
func expand(seed []byte, n int64) []byte {
	if len(seed) == 0 {
		return pattern(n)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = seed[i%len(seed)] ^ byte(i/manifest.BlockSize)
	}
	return b
}

func FuzzVerifyPiece(f *testing.F) {
	// seed, size, piece size shift, piece index, offset, xor, length change
	f.Add([]byte(nil), uint32(16385), uint8(0), uint16(1), uint32(0), byte(1), int16(0))
	f.Add([]byte(nil), uint32(200000), uint8(2), uint16(3), uint32(3391), byte(0x80), int16(0))
	f.Add([]byte("abc"), uint32(100000), uint8(1), uint16(0), uint32(5), byte(0), int16(0))
	f.Add([]byte("abc"), uint32(100000), uint8(1), uint16(2), uint32(5), byte(0), int16(-1))
	f.Add([]byte("x"), uint32(40000), uint8(3), uint16(0), uint32(39999), byte(0), int16(1))
	f.Add([]byte{0}, uint32(1), uint8(0), uint16(0), uint32(0), byte(0xff), int16(0))
	f.Add([]byte(nil), uint32(65537), uint8(0), uint16(4), uint32(0), byte(0), int16(16383))

	f.Fuzz(func(t *testing.T, seed []byte, sizeRaw uint32, psShift uint8, index uint16, off uint32, xor byte, cut int16) {
		size := int64(sizeRaw % (300 * KiB))
		ps := int64(manifest.BlockSize) << (psShift % 4)
		data := expand(seed, size)
		m := mustBuild(t, data, ps)
		if m.NumPieces() == 0 {
			if err := m.VerifyPiece(int(index), data); err == nil {
				t.Fatal("VerifyPiece on an empty file accepted a piece")
			}
			return
		}
		i := int(index) % m.NumPieces()
		orig := data[m.PieceOffset(i) : m.PieceOffset(i)+m.PieceLen(i)]
		piece := bytes.Clone(orig)
		piece[int(off)%len(piece)] ^= xor
		switch {
		case cut < 0:
			piece = piece[:len(piece)-min(len(piece), -int(cut))]
		case cut > 0:
			piece = append(piece, expand(seed, int64(cut))...)
		}
		err := m.VerifyPiece(i, piece)
		if want := bytes.Equal(piece, orig); want != (err == nil) {
			t.Fatalf("piece %d of %d (size %d, piece size %d), xor %#x at %d, length change %d: VerifyPiece = %v",
				i, m.NumPieces(), size, ps, xor, int(off)%len(orig), cut, err)
		}
		if err != nil {
			var pe *manifest.PieceError
			if !errors.Is(err, manifest.ErrCorruptPiece) || !errors.As(err, &pe) || pe.Index != i {
				t.Fatalf("VerifyPiece(%d) = %v: not a *PieceError for piece %d wrapping ErrCorruptPiece", i, err, i)
			}
		}
		if !bytes.Equal(orig, data[m.PieceOffset(i):m.PieceOffset(i)+m.PieceLen(i)]) {
			t.Fatal("VerifyPiece modified the data")
		}
		// An index past the end never verifies (and never panics).
		if err := m.VerifyPiece(m.NumPieces()+int(index), orig); err == nil {
			t.Fatalf("VerifyPiece(%d) of %d pieces succeeded", m.NumPieces()+int(index), m.NumPieces())
		}
	})
}

func FuzzBuilder(f *testing.F) {
	// seed, size, piece size (0: default, else 16 KiB << (n-1)), chunk lengths
	f.Add([]byte(nil), uint32(16385), uint8(0), []byte{1, 0, 0, 0})
	f.Add([]byte(nil), uint32(65537), uint8(1), []byte{0xff, 0x3f, 0x01, 0x40, 0x00, 0x00})
	f.Add([]byte("stampede"), uint32(300000), uint8(3), []byte{0x00, 0x40, 0x01, 0x40, 0xff, 0x3f})
	f.Add([]byte{7}, uint32(0), uint8(0), []byte(nil))
	f.Add([]byte{7}, uint32(1), uint8(0), []byte{1, 0})
	f.Add([]byte(nil), uint32(2*MiB+5), uint8(5), []byte{0xff, 0xff, 0x03, 0x00})

	f.Fuzz(func(t *testing.T, seed []byte, sizeRaw uint32, psSel uint8, chunks []byte) {
		size := int64(sizeRaw % (3 * MiB))
		var ps int64
		if k := psSel % 8; k > 0 {
			ps = int64(manifest.BlockSize) << (k - 1) // 16 KiB to 1 MiB
		}
		data := expand(seed, size)
		b, err := manifest.NewBuilder(size, ps)
		if err != nil {
			t.Fatal(err)
		}
		// Chunk lengths come from chunks, two bytes each, up to 4 blocks.
		rest := data
		for k := 0; len(rest) > 0; k += 2 {
			n := len(rest)
			if len(chunks) >= 2 {
				j := k % (len(chunks) &^ 1)
				n = min(n, (int(chunks[j])|int(chunks[j+1])<<8)%(4*manifest.BlockSize+1))
				if k > 1<<20 { // no progress for too long: finish
					n = len(rest)
				}
			}
			if w, err := b.Write(rest[:n]); w != n || err != nil {
				t.Fatalf("Write(%d bytes) = %d, %v", n, w, err)
			}
			rest = rest[n:]
		}
		got, err := b.Manifest("f")
		if err != nil {
			t.Fatal(err)
		}
		checkAgainstRef(t, got, data)
		if ps == 0 || ps == manifest.PieceSizeFor(size) {
			want := mustFromReaderAt(t, data, 0)
			if !sameManifest(got, want) {
				t.Fatalf("size %d: Builder root %s, FromReaderAt %s", size, got.Root, want.Root)
			}
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("built manifest fails Validate: %v", err)
		}
	})
}
