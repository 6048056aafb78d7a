package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/originclient"
)

// Answering GET and HEAD. Every request is revalidated with the origin by
// a HEAD (cheap, and a stampede origin answers HEAD even when overloaded);
// when the answer links a manifest, the body comes from the cache, the
// download into it shared by every client of the same content.

// errNoSwarm: the file cannot go through the swarm; proxy it straight.
var errNoSwarm = errors.New("not swarmable")

// urlEntry remembers which content a URL had at given validators, so that
// a revalidated request for a cached file needs no manifest.
type urlEntry struct {
	etag, lastModified string
	size               int64
	key                string // the object
}

// maxURLs bounds the urlEntry map; past it an arbitrary entry goes.
const maxURLs = 4096

func (g *Gateway) serveSwarmable(req *request) {
	if g.serveFromBundle(req) {
		return
	}
	probe, err := g.probe(req)
	if err != nil {
		if req.r.Context().Err() == nil {
			g.log.Info("origin probe failed", "url", req.target.Redacted(), "err", err)
			originError(req.w, req.target, err)
		}
		return
	}
	// A page with a bundle goes through the swarm with its bundle, even if
	// the page itself has no manifest.
	if probe.StatusCode == http.StatusOK && probe.ContentLength >= 0 && g.servePage(req, probe) {
		return
	}
	if !swarmable(probe) {
		g.passThrough(req)
		return
	}
	g.serveFile(req, probe)
}

// probe asks the origin for the headers of the target with HEAD: the
// client's end-to-end headers without those about ranges, conditions and
// encodings, which the gateway answers itself.
func (g *Gateway) probe(req *request) (*http.Response, error) {
	out, err := http.NewRequestWithContext(req.r.Context(), http.MethodHead, req.target.String(), nil)
	if err != nil {
		return nil, err
	}
	out.Header = req.r.Header.Clone()
	removeHopHeaders(out.Header)
	for _, k := range []string{"Range", "If-Range", "If-Match", "If-None-Match", "If-Modified-Since",
		"If-Unmodified-Since", "Accept-Encoding"} {
		out.Header.Del(k)
	}
	out.Header.Add("Via", viaValue(req.r, g.via))
	g.fixReferer(req, out.Header)
	resp, err := g.probes.Do(out)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

// swarmable reports whether a HEAD answer describes a file the swarm can
// deliver: 200 with a size, byte ranges and a manifest link.
func swarmable(resp *http.Response) bool {
	return resp.StatusCode == http.StatusOK && resp.ContentLength >= 0 &&
		strings.Contains(strings.ToLower(resp.Header.Get("Accept-Ranges")), "bytes") &&
		httphdr.LinkTarget(resp.Header.Values("Link"), contract.ManifestRel) != ""
}

// responseHeader is the header of our answer: the origin's end-to-end
// headers, less what ServeContent computes for each answer.
func (g *Gateway) responseHeader(probe *http.Response) http.Header {
	h := probe.Header.Clone()
	removeHopHeaders(h)
	for _, k := range []string{"Content-Length", "Content-Range", "Accept-Ranges", "Date", "Age", "Content-Digest"} {
		h.Del(k)
	}
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // never sniff: the origin said nothing
	}
	h.Add("Via", viaValue(probe.Request, g.via))
	return h
}

// serveFile answers a request for a file with a manifest.
func (g *Gateway) serveFile(req *request, probe *http.Response) {
	h := g.responseHeader(probe)
	h.Set(Header, "swarm")
	modtime := lastModified(probe.Header)
	size := probe.ContentLength
	if size == 0 || !needsBody(req.r, h, modtime, size) {
		copyHeader(req.w.Header(), h)
		http.ServeContent(req.w, req.r, "", modtime, sizeOnly(size))
		return
	}
	o, err := g.objectFor(req, probe)
	switch {
	case errors.Is(err, errNoSwarm), errors.Is(err, errCacheFull), errors.Is(err, errLocal):
		g.log.Info("proxying straight through", "url", req.target.Redacted(), "why", err)
		g.passThrough(req)
		return
	case err != nil:
		if req.r.Context().Err() == nil {
			g.log.Warn("cannot get the file", "url", req.target.Redacted(), "err", err)
			originError(req.w, req.target, err)
		}
		return
	}
	defer g.cache.release(o)
	copyHeader(req.w.Header(), h)
	g.serveSection(req, o, 0, o.m.Size, modtime)
}

// serveSection answers from bytes [base, base+size) of o with
// ServeContent; the header is set. A body that cannot be completed
// (a piece that cannot be had) aborts the response: the client sees a
// broken transfer, never a short body that looks whole.
func (g *Gateway) serveSection(req *request, o *object, base, size int64, modtime time.Time) {
	rd := newReader(req.r.Context(), o, base, size)
	defer rd.close()
	http.ServeContent(bodyWriter{req.w, rd}, req.r, "", modtime, rd)
	if err := rd.failure(); err != nil {
		if req.r.Context().Err() == nil {
			g.log.Warn("response aborted", "url", req.target.Redacted(), "err", err)
		}
		panic(http.ErrAbortHandler)
	}
}

// needsBody reports whether ServeContent would send a body for r (a GET
// answered 200 or 206, not 304, 412 or 416), by a dry run as HEAD.
func needsBody(r *http.Request, h http.Header, modtime time.Time, size int64) bool {
	if r.Method != http.MethodGet {
		return false
	}
	rec := &statusRecorder{h: h.Clone()}
	hr := r.Clone(r.Context())
	hr.Method = http.MethodHead
	http.ServeContent(rec, hr, "", modtime, sizeOnly(size))
	return rec.code == http.StatusOK || rec.code == http.StatusPartialContent
}

// statusRecorder is a ResponseWriter that keeps only the status.
type statusRecorder struct {
	h    http.Header
	code int
}

func (s *statusRecorder) Header() http.Header { return s.h }
func (s *statusRecorder) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return len(p), nil
}
func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
}

func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = v
	}
}

// lastModified parses Last-Modified (zero when absent or unparsable).
func lastModified(h http.Header) time.Time {
	t, err := http.ParseTime(h.Get("Last-Modified"))
	if err != nil {
		return time.Time{}
	}
	return t
}

// objectFor returns the cached object for the file probe describes,
// pinned (release it): known from an earlier request with the same
// validators, or found by its manifest, or a new download.
func (g *Gateway) objectFor(req *request, probe *http.Response) (*object, error) {
	key := req.target.String()
	etag, lm, size := probe.Header.Get("ETag"), probe.Header.Get("Last-Modified"), probe.ContentLength
	g.mu.Lock()
	e := g.urls[key]
	g.mu.Unlock()
	// Without a strong ETag or a Last-Modified, the validators cannot tell
	// a changed file: ask for its manifest every time.
	validated := (etag != "" && !strings.HasPrefix(etag, "W/")) || lm != ""
	if e != nil && validated && e.etag == etag && e.lastModified == lm && e.size == size {
		if o, err := g.cache.lookup(e.key); o != nil && err == nil {
			return o, nil
		}
	}
	src, err := g.origins.Open(req.r.Context(), req.target)
	var se *originclient.StatusError
	switch {
	case errors.Is(err, originclient.ErrNoManifest), errors.As(err, &se):
		// No manifest after all, one linked but not served, or an error
		// status the client had better see from the origin itself.
		return nil, fmt.Errorf("%w: %v", errNoSwarm, err)
	case err != nil:
		return nil, err
	}
	if src.Vouch().Private {
		// A private swarm admits its origin's chosen peers: the gateway
		// asks for no token (it would hand the file to whoever asks it).
		return nil, fmt.Errorf("%w: the swarm is private", errNoSwarm)
	}
	m := src.Manifest()
	if m.Size != size || (etag != "" && m.ETag != "" && m.ETag != etag) {
		return nil, fmt.Errorf("%w: the file changed between two requests", errNoSwarm)
	}
	o, err := g.cache.acquire(m, src)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	if len(g.urls) >= maxURLs {
		for k := range g.urls {
			delete(g.urls, k)
			break
		}
	}
	g.urls[key] = &urlEntry{etag: etag, lastModified: lm, size: size, key: o.key}
	g.mu.Unlock()
	return o, nil
}
