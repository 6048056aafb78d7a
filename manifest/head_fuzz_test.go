package manifest_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/stampede-dev/stampede/manifest"
)

// FuzzUnmarshalHead: a head comes from an origin's header
// (Stampede-Manifest-Head) or its ?piece_layer=0 answer. Whatever
// UnmarshalHead accepts is a valid manifest, or a valid head of more than
// one piece without a layer; it encodes back to itself; a manifest
// Unmarshal accepts is accepted alike; and a full manifest's Head decodes
// to a head that its own layer completes.
func FuzzUnmarshalHead(f *testing.F) {
	for _, m := range []*manifest.Manifest{
		validManifest(f),
		mustFromReaderAt(f, nil, 0),
		mustFromReaderAt(f, pattern(1), 0),
		mustFromReaderAt(f, pattern(16385), 0),
		mustBuild(f, pattern(100000), 64*KiB),
	} {
		for _, v := range []*manifest.Manifest{m, m.Head()} {
			data, err := json.Marshal(v)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
			f.Add(bytes.Replace(data, []byte(`"size":`), []byte(`"size":1`), 1))
		}
	}
	f.Add([]byte(`{"version":1,"size":40000,"piece_size":16384,"root":"0000000000000000000000000000000000000000000000000000000000000000"}`))
	f.Add([]byte(`{"version":1,"size":40000,"piece_size":16384,"piece_layer":""}`))
	f.Add([]byte(`{"version":1,"size":40000,"piece_size":16384,"piece_layer":null}`))
	f.Add([]byte(`{"version":1,"size":16384,"piece_size":16384}`))
	f.Add([]byte(`{"version":1,"name":"a/b","size":40000,"piece_size":16384}`))
	f.Add([]byte(`{"version":1,"size":1125899906842624,"piece_size":1024}`))
	f.Add([]byte(`null`))

	f.Fuzz(func(t *testing.T, data []byte) {
		full, ferr := manifest.Unmarshal(data)
		m, err := manifest.UnmarshalHead(data)
		if err != nil {
			if m != nil {
				t.Fatalf("UnmarshalHead returned a manifest with error %v", err)
			}
			if ferr == nil {
				t.Fatalf("Unmarshal accepts what UnmarshalHead rejects: %v", err)
			}
			return
		}
		if m.HasLayer() {
			if err := m.Validate(); err != nil {
				t.Fatalf("accepted a manifest Validate rejects: %v", err)
			}
			if ferr != nil || !sameManifest(m, full) {
				t.Fatalf("Unmarshal disagrees with UnmarshalHead on a full manifest: %v", ferr)
			}
		} else {
			if m.Pieces != nil || m.NumPieces() < 2 {
				t.Fatalf("a head of %d pieces with %d hashes", m.NumPieces(), len(m.Pieces))
			}
			if ferr == nil {
				t.Fatal("Unmarshal accepted a head without its layer")
			}
			if m.SetLayer(nil) == nil || m.SetLayer(make([]manifest.Hash, m.NumPieces()-1)) == nil {
				t.Fatal("SetLayer took a layer of the wrong length")
			}
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("Marshal of an accepted head: %v", err)
		}
		again, err := manifest.UnmarshalHead(out)
		if err != nil || !sameManifest(m, again) || again.HasLayer() != m.HasLayer() {
			t.Fatalf("round trip of %s: %+v, %v", out, again, err)
		}
		if !m.HasLayer() || m.NumPieces() < 2 {
			return
		}
		hout, err := json.Marshal(m.Head())
		if err != nil {
			t.Fatal(err)
		}
		h, err := manifest.UnmarshalHead(hout)
		if err != nil || h.HasLayer() {
			t.Fatalf("the head %s of an accepted manifest: %v", hout, err)
		}
		if err := h.SetLayer(slices.Clone(m.Pieces)); err != nil || !sameManifest(h, m) {
			t.Fatalf("the head completed with its own layer: %v", err)
		}
	})
}
