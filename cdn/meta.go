package cdn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/originclient"
)

// meta is what a node knows of one file (one variant of a URL): whether it
// may be cached and shared, how long that knowledge stays fresh, its
// validators and size, and how it is cut into chunks. The meta of a URL is
// asked of the origin (HEAD) by the URL's owner only, collapsed, and
// handed to the other nodes, which keep it until it goes stale.
type meta struct {
	// ID names the file's content: its manifest's root and size, or the
	// hash of its URL, variant, validators and size. A chunk's key is the
	// ID and its index, so a changed file never meets the old one's chunks.
	ID        string `json:"id"`
	URL       string `json:"url"`
	Cacheable bool   `json:"cacheable"`
	// Why says why not, when not.
	Why          string `json:"why,omitempty"`
	Size         int64  `json:"size"`
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// Header holds the origin's end-to-end headers for clients.
	Header http.Header `json:"header,omitempty"`
	// Vary is the origin's Vary, names canonical, and ReqHeader the values
	// of those request headers this variant was fetched with (sent again
	// with each chunk's request).
	Vary       []string        `json:"vary,omitempty"`
	ReqHeader  http.Header     `json:"req_header,omitempty"`
	ReprDigest []byte          `json:"repr_digest,omitempty"`
	Manifest   json.RawMessage `json:"manifest,omitempty"`
	ChunkSize  int64           `json:"chunk_size,omitempty"`
	FreshUntil time.Time       `json:"fresh_until"`

	m *manifest.Manifest // decoded Manifest
}

func (m *meta) numChunks() int {
	if m.Size == 0 {
		return 0
	}
	return int((m.Size + m.ChunkSize - 1) / m.ChunkSize)
}

func (m *meta) chunkRange(i int) (off, n int64) {
	off = int64(i) * m.ChunkSize
	return off, min(m.ChunkSize, m.Size-off)
}

func (m *meta) chunkKey(i int) string { return m.ID + "/" + strconv.Itoa(i) }

// verify checks that data is chunk i: its length, and with a manifest its
// hash.
func (m *meta) verify(i int, data []byte) error {
	if _, n := m.chunkRange(i); int64(len(data)) != n {
		return fmt.Errorf("chunk %d: %d bytes, want %d: %w", i, len(data), n, manifest.ErrCorruptPiece)
	}
	if m.m != nil {
		return m.m.VerifyPiece(i, data)
	}
	return nil
}

// checks says what a client's body is checked against.
func (m *meta) checks() string {
	switch {
	case m.m != nil:
		return "manifest"
	case m.ReprDigest != nil:
		return "repr-digest"
	}
	return "validators-only"
}

// Request headers never passed to the origin by a cached fetch: hop-by-hop
// ones, credentials (a request with them is not cached at all), what the
// node sets per chunk (Range, If-Range, Accept-Encoding), and the client's
// conditionals, which the node answers itself.
var dropRequest = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Content-Length",
	"Authorization", "Cookie", "Range", "If-Range", "If-None-Match", "If-Modified-Since",
	"If-Match", "If-Unmodified-Since", "Accept-Encoding", "Via", "X-Forwarded-For", authHeader,
}

// forwardHeader is the client's headers a cached fetch may pass on.
func forwardHeader(h http.Header) http.Header {
	out := h.Clone()
	for _, c := range out.Values("Connection") {
		for f := range strings.SplitSeq(c, ",") {
			out.Del(strings.TrimSpace(f))
		}
	}
	for _, k := range dropRequest {
		out.Del(k)
	}
	return out
}

// Response headers not passed to clients as the origin sent them: hop-by-hop
// ones, and those ServeContent computes for each answer.
var dropResponse = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Connection", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Content-Length", "Content-Range", "Accept-Ranges",
	"Date", "Age", "Content-Digest", "Set-Cookie",
}

// variantKey names the variant of rawURL that a request with hdr gets,
// when the origin varies on names. Accept-Encoding is left out: the node
// always asks for the identity encoding.
func variantKey(rawURL string, names []string, hdr http.Header) string {
	var b strings.Builder
	b.WriteString(rawURL)
	for _, n := range names {
		if n == "Accept-Encoding" {
			continue
		}
		b.WriteString("\x00" + n + "=" + strings.Join(hdr.Values(n), ","))
	}
	return b.String()
}

// cacheControl is the directives of Cache-Control a shared cache obeys.
type cacheControl struct {
	noStore, private, noCache bool
	maxAge, sMaxAge           int64 // -1 when absent
}

func parseCacheControl(values []string) cacheControl {
	cc := cacheControl{maxAge: -1, sMaxAge: -1}
	for _, v := range values {
		for d := range strings.SplitSeq(v, ",") {
			name, arg, _ := strings.Cut(strings.TrimSpace(d), "=")
			arg = strings.Trim(arg, `"`)
			secs := func() int64 {
				n, err := strconv.ParseInt(arg, 10, 64)
				if err != nil || n < 0 {
					return 0 // a malformed age is stale (RFC 9111 4.2.1)
				}
				return n
			}
			switch strings.ToLower(name) {
			case "no-store":
				cc.noStore = true
			case "private":
				cc.private = true
			case "no-cache":
				cc.noCache = true
			case "max-age":
				cc.maxAge = secs()
			case "s-maxage":
				cc.sMaxAge = secs()
			}
		}
	}
	return cc
}

// freshness is how long a shared cache may use the response h without
// asking the origin again (RFC 9111 4.2.1): s-maxage, else max-age, else
// Expires less Date; zero with no-cache or none of these (the node does
// not guess a heuristic lifetime: it revalidates, one HEAD).
func freshness(h http.Header, cc cacheControl) time.Duration {
	switch {
	case cc.noCache:
		return 0
	case cc.sMaxAge >= 0:
		return time.Duration(cc.sMaxAge) * time.Second
	case cc.maxAge >= 0:
		return time.Duration(cc.maxAge) * time.Second
	}
	exp, err := http.ParseTime(h.Get("Expires"))
	if err != nil {
		return 0
	}
	date, err := http.ParseTime(h.Get("Date"))
	if err != nil {
		date = time.Now()
	}
	return max(0, exp.Sub(date))
}

// uncacheable says why a response may not be cached and shared, or "".
func uncacheable(resp *http.Response, cc cacheControl, vary []string) string {
	switch {
	case resp.StatusCode != http.StatusOK:
		return "status " + strconv.Itoa(resp.StatusCode)
	case cc.noStore:
		return "Cache-Control: no-store"
	case cc.private:
		return "Cache-Control: private"
	case len(resp.Header.Values("Set-Cookie")) > 0:
		return "Set-Cookie"
	case slices.Contains(vary, "*"):
		return "Vary: *"
	case resp.ContentLength < 0:
		return "no Content-Length"
	}
	return ""
}

func parseVary(values []string) []string {
	var out []string
	for _, v := range values {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, http.CanonicalHeaderKey(f))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// originMeta asks the origin about u (HEAD, then the manifest it links)
// and makes the file's meta.
func (n *Node) originMeta(ctx context.Context, u *url.URL, fwd http.Header) (*meta, error) {
	req, err := n.originRequest(ctx, http.MethodHead, u, fwd)
	if err != nil {
		return nil, err
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking %s: %w", u.Redacted(), err)
	}
	resp.Body.Close()
	n.met.originRequests.Add(1)
	h := resp.Header
	cc := parseCacheControl(h.Values("Cache-Control"))
	vary := parseVary(h.Values("Vary"))
	m := &meta{URL: u.String(), Size: resp.ContentLength, ETag: h.Get("ETag"), LastModified: h.Get("Last-Modified"),
		Vary: vary, FreshUntil: n.now().Add(freshness(h, cc))}
	m.Header = h.Clone()
	for _, c := range h.Values("Connection") {
		for f := range strings.SplitSeq(c, ",") {
			m.Header.Del(strings.TrimSpace(f))
		}
	}
	for _, k := range dropResponse {
		m.Header.Del(k)
	}
	m.ReqHeader = make(http.Header)
	for _, v := range vary {
		if vs := fwd.Values(v); len(vs) > 0 {
			m.ReqHeader[v] = slices.Clone(vs)
		}
	}
	if m.Why = uncacheable(resp, cc, vary); m.Why != "" {
		return m, nil
	}
	if d, err := httphdr.ReprDigestSHA256(h.Values("Repr-Digest")); err == nil {
		m.ReprDigest = d
	}
	if link := httphdr.LinkTarget(h.Values("Link"), contract.ManifestRel); link != "" && m.Size > 0 {
		if err := n.attachManifest(ctx, m, u, link); err != nil {
			n.log.Warn("the origin's manifest is unusable: chunking by byte ranges", "url", u.Redacted(), "err", err)
		}
	}
	if m.m == nil {
		if !strings.EqualFold(h.Get("Accept-Ranges"), "bytes") && m.Size > 0 {
			m.Why = "the origin serves no byte ranges"
			return m, nil
		}
		if m.ETag == "" && m.LastModified == "" {
			m.Why = "no validators (ETag, Last-Modified) to keep the chunks of one version"
			return m, nil
		}
		m.ChunkSize = n.cfg.ChunkSize
		sum := sha256.Sum256([]byte(strings.Join([]string{variantKey(m.URL, vary, fwd), m.ETag, m.LastModified,
			strconv.FormatInt(m.Size, 10), strconv.FormatInt(m.ChunkSize, 10)}, "\x00")))
		m.ID = "r" + hex.EncodeToString(sum[:16])
	}
	m.Cacheable = true
	return m, nil
}

// attachManifest fetches and checks the manifest at link (relative to u)
// and makes its pieces m's chunks. The manifest of the same URL and
// validators is asked once.
func (n *Node) attachManifest(ctx context.Context, m *meta, u *url.URL, link string) error {
	mu, err := u.Parse(link)
	if err != nil {
		return fmt.Errorf("manifest link: %w", err)
	}
	n.mu.Lock()
	prev := n.manifests[m.URL]
	n.mu.Unlock()
	var man *manifest.Manifest
	if prev != nil && prev.Size == m.Size && prev.ETag == m.ETag && prev.LastModified == m.LastModified {
		man = prev
	} else {
		res := &originclient.Resource{URL: u, Size: m.Size, ETag: m.ETag, LastModified: m.LastModified,
			AcceptRanges: true, ManifestURL: mu, ReprDigest: m.ReprDigest}
		if man, err = n.oc.Manifest(ctx, res, false); err != nil {
			return err
		}
		n.met.originRequests.Add(1)
		n.mu.Lock()
		if len(n.manifests) >= maxMetas {
			clear(n.manifests)
		}
		n.manifests[m.URL] = man
		n.mu.Unlock()
	}
	raw, err := man.MarshalJSON()
	if err != nil {
		return err
	}
	if man.PieceSize > maxChunkSize {
		return fmt.Errorf("manifest pieces of %d bytes, more than a chunk may be", man.PieceSize)
	}
	m.m, m.Manifest = man, raw
	m.ChunkSize = man.PieceSize
	m.ID = "m" + hex.EncodeToString(man.Root[:]) + "-" + strconv.FormatInt(man.Size, 10)
	return nil
}

// decodeMeta reads a meta another node sent, checking its manifest.
func decodeMeta(data []byte) (*meta, error) {
	m := new(meta)
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("a node's meta: %w", err)
	}
	if !m.Cacheable {
		return m, nil
	}
	if len(m.Manifest) > 0 {
		man, err := manifest.Unmarshal(m.Manifest)
		if err != nil {
			return nil, fmt.Errorf("a node's meta: %w", err)
		}
		if man.Size != m.Size || m.ID != "m"+hex.EncodeToString(man.Root[:])+"-"+strconv.FormatInt(man.Size, 10) {
			return nil, errors.New("a node's meta does not match its manifest")
		}
		m.m = man
		m.ChunkSize = man.PieceSize
	}
	if m.ChunkSize <= 0 || m.ChunkSize > maxChunkSize || m.Size < 0 {
		return nil, fmt.Errorf("a node's meta has chunks of %d bytes, file of %d", m.ChunkSize, m.Size)
	}
	return m, nil
}

// getMeta returns the meta of u for a request with header hdr: the one
// this node holds while fresh, else the URL's owner's (asked once however
// many wait), else the origin's. A node's own request (internal) is never
// forwarded again. With id, the meta of that ID is taken stale or not: a
// node's request for a chunk is part of a client's request that was
// already revalidated, and every origin answer is checked against the
// validators the ID stands for.
func (n *Node) getMeta(ctx context.Context, u *url.URL, hdr http.Header, internal bool, id string) (*meta, error) {
	fwd := forwardHeader(hdr)
	raw := u.String()
	n.mu.Lock()
	vkey := variantKey(raw, n.varyNames[raw], fwd)
	m := n.metas[vkey]
	if byID := n.byID[id]; id != "" && byID != nil && byID.URL == raw {
		m = byID
	}
	n.mu.Unlock()
	if m != nil && (n.now().Before(m.FreshUntil) || (id != "" && m.ID == id)) {
		return m, nil
	}
	m, _, err := n.metaFlights.do(ctx, vkey, func() (*meta, error) {
		fctx, cancel := context.WithTimeout(n.life, n.cfg.FetchTimeout)
		defer cancel()
		if owner := n.ring().Owner("meta " + raw); !internal && owner != n.self {
			m, err := n.remoteMeta(fctx, owner, u, fwd, id)
			if err == nil && m.m != nil {
				err = n.checkNodeManifest(fctx, m, u)
			} else if err == nil {
				m, err = n.checkNodeMeta(fctx, m, u, fwd)
			}
			if err == nil {
				return m, nil
			}
			n.log.Debug("the URL's owner did not answer: asking the origin", "owner", owner, "err", err)
		}
		return n.originMeta(fctx, u, fwd)
	})
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.varyNames[raw] = m.Vary
	if len(n.metas) >= maxMetas {
		now := n.now()
		for k, v := range n.metas {
			if !now.Before(v.FreshUntil) || len(n.metas) >= maxMetas {
				delete(n.metas, k)
			}
		}
	}
	n.metas[variantKey(raw, m.Vary, fwd)] = m
	if m.Cacheable {
		if len(n.byID) >= maxMetas {
			clear(n.byID)
		}
		n.byID[m.ID] = m
	}
	n.mu.Unlock()
	return m, nil
}

// maxMetas bounds the metas a node holds in memory.
const maxMetas = 10000

// maxChunkSize bounds a chunk, which a node holds in memory whole: a
// manifest with larger pieces is chunked by byte ranges instead.
const maxChunkSize = 64 << 20

// checkNodeMeta checks a meta without a manifest that another node handed
// over against the origin, with a HEAD of this node's own, once per
// version of the file (its ID) and variant: a node's word is not taken
// for a file's validators, size or cacheability. When they differ, the
// origin's meta is used, and the node's counted as rejected. A meta
// already checked is taken, its freshness bounded by its own
// Cache-Control and Expires.
func (n *Node) checkNodeMeta(ctx context.Context, m *meta, u *url.URL, fwd http.Header) (*meta, error) {
	token := m.ID
	if !m.Cacheable {
		token = "uncacheable"
	}
	key := variantKey(m.URL, m.Vary, fwd)
	n.mu.Lock()
	seen := n.checked[key] == token
	n.mu.Unlock()
	if seen {
		if limit := n.now().Add(freshness(m.Header, parseCacheControl(m.Header.Values("Cache-Control")))); m.FreshUntil.After(limit) {
			m.FreshUntil = limit
		}
		return m, nil
	}
	own, err := n.originMeta(ctx, u, fwd)
	if err != nil {
		return nil, err
	}
	ownToken := own.ID
	if !own.Cacheable {
		ownToken = "uncacheable"
	}
	if ownToken != token {
		n.met.rejected[fromNode].Inc()
		n.log.Warn("a node's description of a file is not the origin's", "url", u.Redacted(), "node", m.ID, "origin", own.ID, "why", own.Why)
	}
	n.mu.Lock()
	if len(n.checked) >= maxMetas {
		clear(n.checked)
	}
	n.checked[variantKey(own.URL, own.Vary, fwd)] = ownToken
	n.mu.Unlock()
	return own, nil
}

// checkNodeManifest makes sure the manifest another node's meta carries is
// the origin's: a node's word decides which chunks are whose, never what
// their bytes are. The origin's manifest is asked once per version of the
// file (a few bytes per piece), then kept.
func (n *Node) checkNodeManifest(ctx context.Context, m *meta, u *url.URL) error {
	link := httphdr.LinkTarget(m.Header.Values("Link"), contract.ManifestRel)
	if link == "" {
		return errors.New("a node's meta has a manifest the origin does not link")
	}
	own := &meta{URL: m.URL, Size: m.Size, ETag: m.ETag, LastModified: m.LastModified, ReprDigest: m.ReprDigest}
	if err := n.attachManifest(ctx, own, u, link); err != nil {
		return err
	}
	if own.ID != m.ID {
		n.met.rejected[fromNode].Inc()
		return fmt.Errorf("a node's manifest (%s) is not the origin's (%s)", m.ID, own.ID)
	}
	m.m, m.Manifest = own.m, own.Manifest
	return nil
}
