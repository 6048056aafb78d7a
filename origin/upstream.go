package origin

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
)

// Fronting an upstream web server that knows nothing of stampede. Every
// request is proxied, under the same transfer limit and rate as files from
// a directory, and responses that carry validators get the Link to their
// manifest and, once it is known, their Repr-Digest.
//
// A manifest request first asks the upstream for the resource's current
// validators with a HEAD (concurrent ones coalesced); if the cache holds the
// manifest of that version it is served, otherwise the resource is streamed
// through the manifest builder and SHA-256, never held in memory whole. A
// resource with neither ETag nor Last-Modified gets no manifest: nothing
// could tell when it went stale.

func (s *Server) initUpstream() error {
	u := s.cfg.Upstream
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("origin: upstream %q: want an http:// or https:// URL with a host", u.Redacted())
	}
	s.upstream = u
	tr := s.cfg.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Keep a connection per transfer: the default two per host would
		// open and close connections under load.
		t.MaxIdleConnsPerHost = s.cfg.MaxTransfers + concurrentHashes
		tr = t
	}
	s.client = &http.Client{
		Transport: tr,
		// A redirect leads away from what this origin serves: the manifest
		// would not describe the file clients get through it.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	s.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = s.target(pr.In.URL)
			pr.Out.Host = ""
			pr.SetXForwarded()
			// The manifest's head is ours to give (addManifestHead): an
			// upstream that is a stampede origin too would give its own,
			// naming its trackers.
			pr.Out.Header.Del(contract.WantHeader)
		},
		Transport:      tr,
		ModifyResponse: s.modifyResponse,
		ErrorHandler:   s.proxyError,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.probes = newGroup[validators](s.bg)
	return nil
}

// target is the upstream URL of a request for in: the upstream's path
// joined with in's, and both queries.
func (s *Server) target(in *url.URL) *url.URL {
	u := *s.upstream
	u.Path = strings.TrimSuffix(s.upstream.Path, "/") + in.Path
	u.RawPath = ""
	if s.upstream.RawPath != "" || in.RawPath != "" {
		u.RawPath = strings.TrimSuffix(s.upstream.EscapedPath(), "/") + in.EscapedPath()
	}
	switch {
	case u.RawQuery == "":
		u.RawQuery = in.RawQuery
	case in.RawQuery != "":
		u.RawQuery += "&" + in.RawQuery
	}
	u.Fragment, u.RawFragment = "", ""
	return &u
}

// rwKey carries the respWriter to modifyResponse through the request
// context: ReverseProxy gives it only the upstream's response.
type rwKey struct{}

func (s *Server) serveProxy(w *respWriter, r *http.Request) {
	// Already full: turn a GET away before it costs the upstream a request
	// (the crowd must not pass through to the server we protect).
	if r.Method == http.MethodGet && s.gate.activeCount() >= s.cfg.MaxTransfers && !w.admit(http.StatusOK, -1) {
		w.overloaded()
		return
	}
	s.metrics.upstreamRequests[upstreamProxy].Add(1)
	s.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), rwKey{}, w)))
}

// modifyResponse runs once the upstream has answered, before anything is
// sent to the client: the moment to ask the gate, as the status and the
// length are known.
func (s *Server) modifyResponse(res *http.Response) error {
	res.Header.Del(contract.ManifestHeadHeader) // only ours goes out (see Rewrite)
	w := res.Request.Context().Value(rwKey{}).(*respWriter)
	if !w.admit(res.StatusCode, res.ContentLength) {
		return errOverloaded
	}
	if v := responseValidators(res.Header, -1); v.known() && identity(res.Header) {
		// The resource's budget (budget.go), keyed as its manifest is.
		key := res.Request.URL.String()
		w.version = &version{key: versionKey{key, v}, entry: func() *entry {
			e, _ := s.cache.lookup(key, v)
			return e
		}}
		if !w.spend(res.StatusCode, res.Header, res.ContentLength) {
			return errBudgetSpent
		}
	}
	if m := w.req.Method; m != http.MethodGet && m != http.MethodHead {
		return nil
	}
	switch res.StatusCode {
	case http.StatusOK, http.StatusPartialContent, http.StatusNotModified:
	default:
		return nil
	}
	v := responseValidators(res.Header, res.ContentLength)
	if !v.known() || !identity(res.Header) || (res.StatusCode == http.StatusOK && res.ContentLength < 0) {
		return nil // no manifest we could build to point at
	}
	mp := contract.ManifestPrefix + w.req.URL.EscapedPath()
	if q := w.req.URL.RawQuery; q != "" {
		mp += "?" + q
	}
	res.Header.Add("Link", linkHeader(mp))
	if res.StatusCode == http.StatusOK && res.Header.Get("Repr-Digest") == "" && identity(res.Header) {
		if e, _ := s.cache.lookup(res.Request.URL.String(), v); e != nil {
			res.Header.Set("Repr-Digest", e.reprDigest())
		}
	}
	if res.StatusCode == http.StatusOK {
		s.addManifestHead(res.Header, w.req, func() *entry {
			e, _ := s.cache.lookup(res.Request.URL.String(), v)
			return e
		})
	}
	return nil
}

func (s *Server) proxyError(rw http.ResponseWriter, r *http.Request, err error) {
	w := rw.(*respWriter)
	switch {
	case errors.Is(err, errOverloaded):
		w.overloaded()
	case errors.Is(err, errBudgetSpent):
		w.budgetSpent()
	case r.Context().Err() != nil:
		s.log.Debug("proxied request abandoned by the client", "path", r.URL.Path, "err", err)
	default:
		s.log.Warn("upstream request failed", "url", r.URL.Redacted(), "err", err)
		http.Error(w, "stampede: the upstream server did not answer", http.StatusBadGateway)
	}
}

// upstreamManifest returns the manifest of the upstream resource that the
// manifest request r names.
func (s *Server) upstreamManifest(ctx context.Context, r *http.Request) (*entry, error) {
	esc := strings.TrimPrefix(r.URL.EscapedPath(), contract.ManifestPrefix)
	p, err := url.PathUnescape(esc)
	if err != nil {
		return nil, statusErrorf(http.StatusBadRequest, "%w", err)
	}
	// The head's parameter is ours, not the upstream's: the head and the
	// manifest are one resource upstream.
	target := s.target(&url.URL{Path: p, RawPath: esc, RawQuery: withoutHeadQuery(r.URL.RawQuery)})
	key := target.String()
	v, err := s.probes.do(ctx, key, func(ctx context.Context) (validators, error) {
		return s.probe(ctx, target)
	})
	if err != nil {
		return nil, err
	}
	if !v.known() {
		return nil, errNoValidators
	}
	return s.cache.get(ctx, key, v, func(ctx context.Context) (*entry, error) {
		return s.hashUpstream(ctx, target, v, manifestName(p))
	})
}

var errNoValidators = publicErrorf(http.StatusNotFound,
	"the upstream sends neither ETag nor Last-Modified for it, so a manifest could not be kept current")

// probeTimeout bounds a HEAD to the upstream: every manifest request for
// the resource waits on it.
const probeTimeout = 30 * time.Second

// probe learns the current validators of target with a HEAD.
func (s *Server) probe(ctx context.Context, target *url.URL) (validators, error) {
	s.metrics.upstreamRequests[upstreamRevalidate].Add(1)
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	res, err := s.upstreamRequest(ctx, http.MethodHead, target)
	if err != nil {
		return validators{}, err
	}
	res.Body.Close()
	return responseValidators(res.Header, res.ContentLength), nil
}

// hashUpstream computes the manifest of target by streaming it. The
// manifest describes the bytes received, under the validators they came with.
func (s *Server) hashUpstream(ctx context.Context, target *url.URL, probed validators, name string) (*entry, error) {
	release, err := s.acquireHash(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	s.metrics.upstreamRequests[upstreamManifest].Add(1)
	res, err := s.upstreamRequest(ctx, http.MethodGet, target)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	v := responseValidators(res.Header, res.ContentLength)
	switch {
	case !identity(res.Header):
		return nil, statusErrorf(http.StatusBadGateway, "the upstream sent Content-Encoding %q to a request for identity",
			res.Header.Get("Content-Encoding"))
	case !v.known():
		return nil, errNoValidators
	case res.ContentLength < 0:
		return nil, publicErrorf(http.StatusNotFound, "the upstream sends no Content-Length for it, and a manifest needs the size first")
	}
	if !v.matches(probed) {
		s.log.Info("upstream resource changed between HEAD and GET; using the version received",
			"url", target.Redacted(), "etag", v.etag, "last_modified", v.lastModified)
	}
	start := time.Now()
	m, sum, err := hashStream(res.Body, res.ContentLength, name)
	if err != nil {
		return nil, statusErrorf(http.StatusBadGateway, "reading %s from the upstream: %w", target.Redacted(), err)
	}
	s.log.Info("computed a manifest", "url", target.Redacted(), "size", m.Size, "pieces", m.NumPieces(),
		"root", m.Root.String(), "took", time.Since(start).Round(time.Millisecond))
	return newEntry(v, m, sum)
}

// upstreamRequest sends a request of its own to the upstream and checks the
// status: 200 passes, client errors and redirects are passed on as such,
// anything else is a bad gateway.
func (s *Server) upstreamRequest(ctx context.Context, method string, target *url.URL) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, target.String(), nil)
	if err != nil {
		return nil, statusErrorf(http.StatusBadRequest, "%w", err)
	}
	// Setting it ourselves also stops the transport from decompressing.
	req.Header.Set("Accept-Encoding", "identity")
	res, err := s.client.Do(req)
	if err != nil {
		return nil, statusErrorf(http.StatusBadGateway, "upstream %s: %w", method, err)
	}
	if res.StatusCode == http.StatusOK {
		return res, nil
	}
	res.Body.Close()
	switch {
	case res.StatusCode >= 300 && res.StatusCode < 400:
		return nil, statusErrorf(http.StatusNotFound, "the upstream redirects it (%s) to %q", res.Status, res.Header.Get("Location"))
	case res.StatusCode >= 400 && res.StatusCode < 500:
		return nil, statusErrorf(res.StatusCode, "the upstream answered %s", res.Status)
	default:
		return nil, statusErrorf(http.StatusBadGateway, "the upstream answered %s", res.Status)
	}
}

func responseValidators(h http.Header, length int64) validators {
	return validators{etag: h.Get("Etag"), lastModified: h.Get("Last-Modified"), size: length}
}

// identity reports whether a response carries the resource's bytes as they
// are, which is what a manifest and a Repr-Digest describe here.
func identity(h http.Header) bool {
	ce := h.Get("Content-Encoding")
	return ce == "" || strings.EqualFold(ce, "identity")
}

// streamChunk is the unit hashStream reads and hashes.
const streamChunk = 1 << 20

// hashStream computes the manifest and the SHA-256 of the size bytes of r.
// The two hashes of a chunk run side by side while the next chunk is read.
func hashStream(r io.Reader, size int64, name string) (*manifest.Manifest, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	b, err := manifest.NewBuilder(size, 0)
	if err != nil {
		return nil, sum, err
	}
	h := sha256.New()
	var (
		bufs     = [2][]byte{make([]byte, streamChunk), make([]byte, streamChunk)}
		hashing  sync.WaitGroup
		buildErr error
	)
	for i := 0; ; i ^= 1 {
		n, err := io.ReadFull(r, bufs[i])
		hashing.Wait() // the other buffer is free again
		if buildErr != nil {
			return nil, sum, buildErr
		}
		if n > 0 {
			chunk := bufs[i][:n]
			hashing.Go(func() {
				if _, err := b.Write(chunk); err != nil {
					buildErr = err
				}
			})
			hashing.Go(func() { h.Write(chunk) })
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break // the end; b.Manifest tells whether it came early
		}
		if err != nil {
			hashing.Wait()
			return nil, sum, err
		}
	}
	hashing.Wait()
	if buildErr != nil {
		return nil, sum, buildErr
	}
	m, err := b.Manifest(name)
	if err != nil {
		return nil, sum, err
	}
	h.Sum(sum[:0])
	return m, sum, nil
}

// withoutHeadQuery is raw, a query, without contract.ManifestHeadQuery's
// parameters; the others stay as they were sent.
func withoutHeadQuery(raw string) string {
	var kept []string
	for kv := range strings.SplitSeq(raw, "&") {
		if k, _, _ := strings.Cut(kv, "="); k != contract.ManifestHeadQuery && kv != "" {
			kept = append(kept, kv)
		}
	}
	return strings.Join(kept, "&")
}
