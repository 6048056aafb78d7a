package contract

import (
	"encoding/base64"
	"fmt"
	"net/url"

	"github.com/stampede-dev/stampede/manifest"
)

// MaxInlineHead bounds the encoded length of ManifestHeadHeader: an origin
// sends no head longer than this, and a client reads none. A head is a few hundred
// bytes, its trackers' URLs most of it, and a proxy in front of the origin
// may refuse an answer whose header outgrows its buffer (nginx's
// proxy_buffer_size is 4 KiB by default), which would fail the probe
// itself.
const MaxInlineHead = 2 << 10

// EncodeManifestHead is the value of ManifestHeadHeader for head, the JSON
// its manifest URL serves with ManifestHeadQuery=0: standard base64,
// padded. It reports false when the value would be longer than
// MaxInlineHead; the header is left out then, and the client asks the
// manifest URL as it would without it.
func EncodeManifestHead(head []byte) (string, bool) {
	v := base64.StdEncoding.EncodeToString(head)
	return v, len(v) <= MaxInlineHead
}

// DecodeManifestHead decodes and validates a ManifestHeadHeader value. The
// head still has to be checked against the file, as if fetched.
func DecodeManifestHead(v string) (*manifest.Manifest, error) {
	if len(v) > MaxInlineHead {
		return nil, fmt.Errorf("%s of %d bytes, more than %d", ManifestHeadHeader, len(v), MaxInlineHead)
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestHeadHeader, err)
	}
	m, err := manifest.UnmarshalHead(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestHeadHeader, err)
	}
	return m, nil
}

// ManifestHeadURL is the URL of the head of the manifest at u. The query is
// added to, not re-encoded: an origin in front of another forwards the rest
// of it upstream as it is.
func ManifestHeadURL(u *url.URL) *url.URL {
	h := *u
	if h.RawQuery != "" {
		h.RawQuery += "&"
	}
	h.RawQuery += ManifestHeadQuery + "=0"
	return &h
}
