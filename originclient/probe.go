package originclient

import (
	"compress/gzip"
	"context"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
)

// Resource is what the probe learned about a file.
type Resource struct {
	URL          *url.URL // after redirects
	Size         int64    // -1 if unknown
	ETag         string
	LastModified string
	AcceptRanges bool
	ManifestURL  *url.URL           // nil: the server links no manifest
	ReprDigest   []byte             // the SHA-256 of Repr-Digest, if sent
	Head         *manifest.Manifest // the manifest's head, if the answer carried it
	// Vouch is what a signing origin said of the manifest, with the head
	// the probe got or with the manifest Client.Manifest fetched.
	Vouch Vouch
}

// Vouch is what a signing origin sends with a manifest or its head
// (docs/security.md): each field empty when not sent.
type Vouch struct {
	Signature string // contract.SignatureHeader: of the file's root and size
	Key       string // contract.KeyHeader: the origin's public key
	Token     string // contract.TokenHeader: a private swarm's token for our peer key
	Private   bool   // contract.PrivateHeader: the swarm is private
}

func vouchOf(h http.Header) Vouch {
	return Vouch{
		Signature: h.Get(contract.SignatureHeader),
		Key:       h.Get(contract.KeyHeader),
		Token:     h.Get(contract.TokenHeader),
		Private:   h.Get(contract.PrivateHeader) == "1",
	}
}

// Probe sends HEAD and reads size, validators, range support, the manifest
// link and any Repr-Digest, and with wantHead asks for the manifest's head
// too (contract.WantHeader), which a stampede origin sends when it knows
// the manifest already. A server that refuses HEAD leaves everything
// unknown (a caller downloads as one stream). The probe is retried after
// transient failures.
func (c *Client) Probe(ctx context.Context, u *url.URL, wantHead bool) (*Resource, error) {
	in := &Resource{URL: u, Size: -1}
	var hdr http.Header
	if wantHead {
		hdr = http.Header{contract.WantHeader: {contract.WantManifestHead}}
	}
	resp, err := c.doRetrying(ctx, http.MethodHead, u, hdr, "probe", new(time.Duration))
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented:
		return in, nil
	case resp.StatusCode != http.StatusOK:
		return nil, &StatusError{URL: u.String(), Code: resp.StatusCode, Status: resp.Status}
	}
	in.URL = resp.Request.URL
	in.Size = resp.ContentLength
	in.ETag = resp.Header.Get("ETag")
	in.LastModified = resp.Header.Get("Last-Modified")
	in.AcceptRanges = strings.Contains(strings.ToLower(resp.Header.Get("Accept-Ranges")), "bytes")
	if link := httphdr.LinkTarget(resp.Header.Values("Link"), contract.ManifestRel); link != "" {
		if in.ManifestURL, err = in.URL.Parse(link); err != nil {
			return nil, fmt.Errorf("%w: manifest link %q: %v", ErrProtocol, link, err)
		}
	}
	if in.ReprDigest, err = httphdr.ReprDigestSHA256(resp.Header.Values("Repr-Digest")); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if v := resp.Header.Get(contract.ManifestHeadHeader); wantHead && v != "" && in.ManifestURL != nil {
		// Nothing is lost with a head we cannot read: the manifest URL
		// serves it too.
		if in.Head, err = contract.DecodeManifestHead(v); err != nil {
			c.cfg.Logger.Info("the server's answer carried a manifest head we cannot read; asking for it", "err", err)
		} else {
			in.Vouch = vouchOf(resp.Header)
		}
	}
	return in, nil
}

// Manifest downloads and validates the manifest of in (which must have a
// ManifestURL), or only its head (without the piece layer, from a stampede
// origin; another server sends the whole manifest), and checks it
// describes the file the server serves now. A head the probe's answer
// carried (in.Head) is taken instead of asked for, and checked the same. A
// mismatch is retried once, since the file may have changed between the
// two requests, after probing again without asking for the head (which
// updates *in), so the retry asks the manifest URL.
func (c *Client) Manifest(ctx context.Context, in *Resource, head bool) (*manifest.Manifest, error) {
	var busyWaited time.Duration
	for attempt := 0; ; attempt++ {
		var m *manifest.Manifest
		u := in.ManifestURL
		if head {
			u = contract.ManifestHeadURL(u)
		}
		if head && in.Head != nil {
			m = in.Head // checked below as if fetched
		} else if err := c.retrying(ctx, "GET "+u.String(), func() (hint time.Duration, err error) {
			m, hint, err = c.getManifest(ctx, u, head, &busyWaited, &in.Vouch)
			return hint, err
		}); err != nil {
			return nil, err
		}
		mismatch := ""
		switch {
		case in.Size >= 0 && m.Size != in.Size:
			mismatch = fmt.Sprintf("manifest says %d bytes, server serves %d", m.Size, in.Size)
		case m.ETag != "" && in.ETag != "" && m.ETag != in.ETag:
			mismatch = fmt.Sprintf("manifest is for ETag %s, server serves %s", m.ETag, in.ETag)
		}
		if mismatch == "" {
			return m, nil
		}
		if attempt > 0 {
			return nil, fmt.Errorf("%w: %s", ErrChanged, mismatch)
		}
		c.cfg.Logger.Info("manifest does not match the file; probing again", "why", mismatch)
		fresh, err := c.Probe(ctx, in.URL, false)
		if err != nil {
			return nil, err
		}
		*in = *fresh
	}
}

// getManifest sends one GET for the manifest at u and decodes it, as a
// manifest or (head) a manifest head. hint is the server's Retry-After on
// a transient status, if it sent one.
func (c *Client) getManifest(ctx context.Context, u *url.URL, head bool, busyWaited *time.Duration, vouch *Vouch) (m *manifest.Manifest, hint time.Duration, err error) {
	// A stampede origin sends the manifest a quarter smaller with gzip.
	// Asking ourselves (the client may decompress transparently only when
	// it asked) means decoding it ourselves, whatever the client.
	hdr := http.Header{"Accept-Encoding": {"gzip"}}
	resp, err := c.DoPatiently(ctx, http.MethodGet, u, hdr, "manifest", busyWaited)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, retryHint(resp), &StatusError{URL: u.String(), Code: resp.StatusCode, Status: resp.Status}
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "" && !strings.Contains(ct, "json") {
		return nil, 0, fmt.Errorf("%w: manifest %s has content type %q", ErrProtocol, u, ct)
	}
	body := c.cfg.Limiter.Reader(ctx, resp.Body)
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: manifest %s: gzip: %w", ErrProtocol, u, err)
		}
		body = zr
	default:
		return nil, 0, fmt.Errorf("%w: manifest %s has content encoding %q, which was not asked for", ErrProtocol, u, enc)
	}
	// %w keeps a body cut by the network recognisable as transient.
	decode := manifest.Decode
	if head {
		decode = manifest.DecodeHead
	}
	if m, err = decode(body); err != nil {
		return nil, 0, fmt.Errorf("%w: manifest %s: %w", ErrProtocol, u, err)
	}
	*vouch = vouchOf(resp.Header)
	return m, 0, nil
}

// Source is a file on an origin that publishes a manifest, probed and with
// its manifest checked, from which a swarm node fetches pieces with every
// check of a download (Source.Fetcher).
type Source struct {
	c  *Client
	in *Resource
	m  *manifest.Manifest

	mu       sync.Mutex // guards the following
	rejected int
	budget   contract.Budget // the latest an answer told (Budget)
	budgetAt time.Time
}

// Open probes u with HEAD, fetches the manifest its Link names and checks
// that the manifest describes the file served now, as a download does
// before its first piece. A server that links no manifest gives
// ErrNoManifest; one that links a manifest it does not serve gives the
// *StatusError of that request.
func (c *Client) Open(ctx context.Context, u *url.URL) (*Source, error) {
	in, err := c.Probe(ctx, u, false)
	if err != nil {
		return nil, err
	}
	if in.ManifestURL == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoManifest, in.URL)
	}
	m, err := c.Manifest(ctx, in, false)
	if err != nil {
		return nil, err
	}
	return &Source{c: c, in: in, m: m}, nil
}

// NewSource is the Source of a file already probed (in) whose manifest m
// was checked against it (Client.Manifest).
func (c *Client) NewSource(in *Resource, m *manifest.Manifest) *Source {
	return &Source{c: c, in: in, m: m}
}

// Manifest is the file's manifest.
func (s *Source) Manifest() *manifest.Manifest { return s.m }

// Vouch is what the origin said of the manifest (Resource.Vouch).
func (s *Source) Vouch() Vouch { return s.in.Vouch }

// URL is the file's URL after the probe's redirects.
func (s *Source) URL() *url.URL { return s.in.URL }

// PiecesRejected counts pieces from the origin that failed verification.
func (s *Source) PiecesRejected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rejected
}
