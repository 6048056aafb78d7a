package fetch

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/origin"
)

// TestInlineManifestHead: a swarm download takes the manifest's head from
// the origin's answer to its HEAD and does not ask the head's URL. A head it
// cannot read, or one of another version of the file, costs it that
// request, never the download. (Alone in its swarm, it fetches the whole
// manifest for the piece layer in every case.)
func TestInlineManifestHead(t *testing.T) {
	o := startOverloadOrigin(t, nil, 1<<20, origin.Config{})
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, head string) string // the header as the client gets it
		want []string                               // the manifest URLs asked for, but the layer's
	}{
		{name: "inline", edit: func(_ *testing.T, h string) string { return h }},
		{name: "garbled", edit: func(_ *testing.T, h string) string { return "!" + h },
			want: []string{"?" + contract.ManifestHeadQuery + "=0"}},
		{name: "too long", edit: func(t *testing.T, h string) string {
			return editHead(t, h, func(m *manifest.Manifest) { m.Name = strings.Repeat("n", contract.MaxInlineHead) })
		}, want: []string{"?" + contract.ManifestHeadQuery + "=0"}},
		{name: "other version", edit: func(t *testing.T, h string) string {
			return editHead(t, h, func(m *manifest.Manifest) { m.ETag = `"another"` })
		}, want: []string{"?" + contract.ManifestHeadQuery + "=0"}}, // after probing again
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var asked []string // manifest URLs
			inline := 0        // HEADs answered with a head
			c := NewClient(4)
			inner := c.Transport
			c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if p, ok := strings.CutPrefix(r.URL.Path, contract.ManifestPrefix+"/"); ok {
					mu.Lock()
					asked = append(asked, strings.TrimPrefix(r.URL.String(), o.base+contract.ManifestPrefix+"/"+p))
					mu.Unlock()
				}
				res, err := inner.RoundTrip(r)
				if err == nil && r.Method == http.MethodHead {
					if h := res.Header.Get(contract.ManifestHeadHeader); h != "" {
						mu.Lock()
						inline++
						mu.Unlock()
						res.Header.Set(contract.ManifestHeadHeader, tc.edit(t, h))
					}
				}
				return res, err
			})
			out := filepath.Join(t.TempDir(), "file.bin")
			d, err := New(Config{URL: o.url, Output: out, Client: c, Logger: logTo(t, new(logBuffer)),
				Swarm: SwarmConfig{ListenAddr: "127.0.0.1:0"}})
			if err != nil {
				t.Fatal(err)
			}
			res, err := d.Run(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, o.data) {
				t.Fatalf("download differs from the file (err %v)", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if inline == 0 {
				t.Fatal("no HEAD was answered with the manifest's head")
			}
			want := append(tc.want, "") // the layer
			if !slices.Equal(asked, want) || res.OriginRequests["manifest"] != len(want) {
				t.Errorf("manifest URLs asked %q (counted %d), want %q", asked, res.OriginRequests["manifest"], want)
			}
		})
	}
}

// editHead decodes the manifest head h (HeadHeader), applies edit and
// encodes the result.
func editHead(t *testing.T, h string, edit func(*manifest.Manifest)) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.UnmarshalHead(b)
	if err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = m.MarshalJSON(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}
