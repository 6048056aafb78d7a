package origin

import (
	"bytes"
	"crypto/sha256"
	"testing"
	"testing/iotest"

	"github.com/stampede-dev/stampede/manifest"
)

// hashStream, fed by short reads, must agree with hashFile and the
// manifest package at every size that matters: empty, within a block, on
// block and piece boundaries, across hashStream's chunks.
func TestHashStreamMatchesHashFile(t *testing.T) {
	for _, size := range []int{0, 1, manifest.BlockSize - 1, manifest.BlockSize, manifest.BlockSize + 1,
		fileSize, streamChunk, streamChunk + 1, 3*streamChunk + 12345} {
		data := randomBytes(size, uint64(size))
		want, err := manifest.FromReader(bytes.NewReader(data), int64(size), "f")
		if err != nil {
			t.Fatal(err)
		}
		m1, sum1, err := hashStream(iotest.HalfReader(bytes.NewReader(data)), int64(size), "f")
		if err != nil {
			t.Fatalf("size %d: hashStream: %v", size, err)
		}
		m2, sum2, err := hashFile(t.Context(), bytes.NewReader(data), int64(size), "f")
		if err != nil {
			t.Fatalf("size %d: hashFile: %v", size, err)
		}
		if sum1 != sha256.Sum256(data) || sum2 != sum1 {
			t.Errorf("size %d: SHA-256 differs", size)
		}
		if m1.Root != want.Root || m2.Root != want.Root {
			t.Errorf("size %d: roots %s, %s, want %s", size, m1.Root, m2.Root, want.Root)
		}
	}
	data := randomBytes(1000, 1)
	if _, _, err := hashStream(bytes.NewReader(data[:999]), 1000, "f"); err == nil {
		t.Error("hashStream accepted a short stream")
	}
	if _, _, err := hashFile(t.Context(), bytes.NewReader(data[:999]), 1000, "f"); err == nil {
		t.Error("hashFile accepted a short file")
	}
}

func testEntry(t testing.TB, data []byte) *entry {
	m, sum, err := hashStream(bytes.NewReader(data), int64(len(data)), "f")
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEntry(validators{etag: `"e"`, lastModified: "Sat, 01 Mar 2025 12:00:00 GMT", size: int64(len(data))}, m, sum)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEntryRoundTrip(t *testing.T) {
	e := testEntry(t, randomBytes(fileSize, 40))
	data, err := encodeEntry("key", e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeEntry(data, "key")
	if err != nil {
		t.Fatal(err)
	}
	if got.v != e.v || got.sum != e.sum || !bytes.Equal(got.body, e.body) {
		t.Errorf("round trip changed the entry")
	}
	if _, err := decodeEntry(data, "other key"); err == nil {
		t.Error("decoded an entry under another key")
	}
	tampered := bytes.Replace(data, []byte(`"etag":"\"e\""`), []byte(`"etag":"\"f\""`), 1)
	if bytes.Equal(tampered, data) {
		t.Fatal("test did not tamper")
	}
	if _, err := decodeEntry(tampered, "key"); err == nil {
		t.Error("decoded an entry whose validators disagree with its manifest")
	}
}

func TestValidatorsMatch(t *testing.T) {
	v := validators{etag: `"a"`, lastModified: "d", size: 10}
	for _, tt := range []struct {
		o    validators
		want bool
	}{
		{v, true},
		{validators{etag: `"a"`, lastModified: "d", size: -1}, true},
		{validators{etag: `"a"`, lastModified: "d", size: 11}, false},
		{validators{etag: `"b"`, lastModified: "d", size: 10}, false},
		{validators{etag: `"a"`, size: 10}, false},
	} {
		if got := v.matches(tt.o); got != tt.want {
			t.Errorf("%v matches %v: %v", v, tt.o, got)
		}
	}
	if (validators{size: 3}).matches(validators{size: 3}) {
		t.Error("versions without validators matched")
	}
}

// FuzzDecodeEntry feeds cache files of any shape to decodeEntry: it must
// not panic, and what it accepts must encode back to an entry it accepts
// again unchanged.
func FuzzDecodeEntry(f *testing.F) {
	for _, data := range [][]byte{nil, randomBytes(100, 1), randomBytes(fileSize, 2)} {
		enc, err := encodeEntry("key", testEntry(f, data))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Add([]byte(`{"version":1,"key":"key","etag":"x","size":0,"sha256":"00","manifest":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := decodeEntry(data, "key")
		if err != nil {
			return
		}
		enc, err := encodeEntry("key", e)
		if err != nil {
			t.Fatal(err)
		}
		e2, err := decodeEntry(enc, "key")
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if e2.v != e.v || e2.sum != e.sum || !bytes.Equal(e2.body, e.body) {
			t.Fatal("entry changed on a round trip")
		}
	})
}
