package contract

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// Bundles. For an HTML page P, an origin may publish a bundle: the page and
// its same-origin assets concatenated into one resource, so that a gateway
// gets a page and everything it shows through one swarm download.
//
//   - Every response for P carries, beside its manifest's Link,
//     Link: </.well-known/stampede/bundle/P>; rel="stampede-bundle".
//   - GET /.well-known/stampede/bundle-index/P is the bundle's index
//     (BundleIndex as JSON, application/json, ETag the bundle's):
//     {"version":1,"bundle":"/.well-known/stampede/bundle/P","size":N,
//     "members":[{"path":"/P","offset":0,"size":123,"content_type":"text/html; charset=utf-8",
//     "etag":"\"...\"","last_modified":"Mon, 02 Jan 2006 15:04:05 GMT"}, ...]}
//     The page comes first, then its assets.
//   - GET /.well-known/stampede/bundle/P is the members' bytes at those
//     offsets (BundleContentType), served like any file, with a manifest.

// BundleContentType is the media type of a bundle: bytes whose layout only
// the index tells.
const BundleContentType = "application/vnd.stampede.bundle"

// BundleIndexVersion is the version of the index's JSON.
const BundleIndexVersion = 1

// Bounds a client puts on an index (DecodeBundleIndex, BundleIndex.Check).
const (
	MaxBundleIndexBytes = 4 << 20
	MaxBundleMembers    = 10000
)

// BundleIndex is the table of contents of a bundle.
type BundleIndex struct {
	Version int    `json:"version"` // BundleIndexVersion
	Bundle  string `json:"bundle"`  // the bundle's URL, a reference relative to the index
	Size    int64  `json:"size"`    // the bundle's bytes
	// Members are the page, then its assets.
	Members []BundleMember `json:"members"`
}

// BundleMember is one file of a bundle.
type BundleMember struct {
	// Path is the member's URL path on the origin (not escaped).
	Path string `json:"path"`
	// Offset and Size are where its bytes are in the bundle.
	Offset int64 `json:"offset"`
	Size   int64 `json:"size"`
	// ContentType, ETag and LastModified are what a GET of the member
	// itself answers (LastModified is left out when the file has none).
	ContentType  string `json:"content_type"`
	ETag         string `json:"etag"`
	LastModified string `json:"last_modified,omitempty"`
}

// Encode is the index as an origin serves it.
func (idx *BundleIndex) Encode() ([]byte, error) { return json.Marshal(idx) }

// DecodeBundleIndex decodes an index of at most MaxBundleIndexBytes. It
// checks only that it is JSON: BundleIndex.Check says whether it can be
// used.
func DecodeBundleIndex(b []byte) (*BundleIndex, error) {
	if len(b) > MaxBundleIndexBytes {
		return nil, fmt.Errorf("bundle index of %d bytes, more than %d", len(b), MaxBundleIndexBytes)
	}
	idx := &BundleIndex{}
	if err := json.Unmarshal(b, idx); err != nil {
		return nil, fmt.Errorf("bundle index: %w", err)
	}
	return idx, nil
}

// Check validates an index fetched from the URL index against the bundle
// URL the page links: the version, the bundle it names, and members with
// distinct absolute paths, each inside the bundle.
func (idx *BundleIndex) Check(index, bundle *url.URL) error {
	named, err := index.Parse(idx.Bundle)
	switch {
	case idx.Version != BundleIndexVersion:
		return fmt.Errorf("version %d, want %d", idx.Version, BundleIndexVersion)
	case err != nil || named.String() != bundle.String():
		return fmt.Errorf("names bundle %q, the page links %s", idx.Bundle, bundle)
	case idx.Size <= 0:
		return fmt.Errorf("bundle size %d", idx.Size)
	case len(idx.Members) == 0 || len(idx.Members) > MaxBundleMembers:
		return fmt.Errorf("%d members, want 1 to %d", len(idx.Members), MaxBundleMembers)
	}
	seen := make(map[string]bool, len(idx.Members))
	for k, m := range idx.Members {
		switch {
		case !strings.HasPrefix(m.Path, "/") || strings.HasPrefix(m.Path, "//") ||
			strings.ContainsFunc(m.Path, func(r rune) bool { return r < ' ' || r == 0x7f }):
			return fmt.Errorf("member %d: bad path %q", k, m.Path)
		case seen[m.Path]:
			return fmt.Errorf("member %d: path %q twice", k, m.Path)
		case m.Offset < 0 || m.Size < 0 || m.Offset > idx.Size-m.Size:
			return fmt.Errorf("member %d (%s): bytes %d+%d outside the %d-byte bundle", k, m.Path, m.Offset, m.Size, idx.Size)
		}
		seen[m.Path] = true
	}
	return nil
}
