package gateway

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
)

// Pages (Overhaul's INFO, Flashback's "a web page is a set of objects"):
// an origin may publish, for an HTML page, a bundle of the page and its
// same-origin assets, so that a gateway gets them all through one swarm
// download. The page's response links the bundle (contract.BundleRel);
// its index (contract.BundleIndex) says where each member is in it
// (contract/bundle.go, docs/gateway.md).
//
// The page is revalidated like any request; its assets are then answered
// from the bundle, without asking the origin, until the cache evicts it.

// maxPageRefs bounds the URLs remembered as members of cached bundles.
const maxPageRefs = 1 << 16

// bundleRef is a URL answered from a member of a cached bundle.
type bundleRef struct {
	key    string // the bundle's object
	member contract.BundleMember
	page   bool // the page itself, which is revalidated before use
}

// refKey names a URL in g.pages: scheme, host and path (unescaped, as the
// index gives members' paths). The query is not part of it: the origin
// builds a bundle from the files its page names, queries dropped
// (docs/architecture.md), so /style.css?v=3 is the member /style.css.
func refKey(scheme, host, path string) string {
	return strings.ToLower(scheme) + "://" + strings.ToLower(host) + path
}

// serveFromBundle answers a request for an asset of a cached bundle.
func (g *Gateway) serveFromBundle(req *request) bool {
	key := refKey(req.target.Scheme, req.target.Host, req.target.Path)
	g.mu.Lock()
	ref := g.pages[key]
	g.mu.Unlock()
	if ref == nil || ref.page {
		return false
	}
	o, err := g.cache.lookup(ref.key)
	if o == nil || err != nil {
		g.forgetBundle(ref.key)
		return false
	}
	defer g.cache.release(o)
	g.serveMember(req, o, ref.member, http.Header{})
	return true
}

// servePage answers a page whose origin publishes a bundle from the
// bundle, starting its download; false when there is no usable bundle
// (the page is then served as a file).
func (g *Gateway) servePage(req *request, probe *http.Response) bool {
	link := httphdr.LinkTarget(probe.Header.Values("Link"), contract.BundleRel)
	if link == "" {
		return false
	}
	h := g.responseHeader(probe)
	if !needsBody(req.r, h, lastModified(probe.Header), probe.ContentLength) {
		return false // HEAD, 304...: no reason to fetch the bundle now
	}
	ref, o, err := g.pageBundle(req, probe, link)
	if err != nil {
		if req.r.Context().Err() == nil {
			g.log.Info("ignoring a page's bundle", "url", req.target.Redacted(), "err", err)
		}
		return false
	}
	defer g.cache.release(o)
	g.serveMember(req, o, ref.member, h)
	return true
}

// serveMember answers from a member of a bundle, with the member's type
// and validators over the header h.
func (g *Gateway) serveMember(req *request, o *object, m contract.BundleMember, h http.Header) {
	h.Del("Content-Type")
	h["Content-Type"] = nil
	if m.ContentType != "" {
		h.Set("Content-Type", m.ContentType)
	}
	h.Del("ETag")
	if m.ETag != "" {
		h.Set("ETag", m.ETag)
	}
	h.Del("Last-Modified")
	if m.LastModified != "" {
		h.Set("Last-Modified", m.LastModified)
	}
	h.Set(Header, "bundle")
	if len(h.Values("Via")) == 0 {
		h.Add("Via", viaValue(req.r, g.via))
	}
	copyHeader(req.w.Header(), h)
	g.serveSection(req, o, m.Offset, m.Size, lastModified(h))
}

// pageBundle returns the page's member and the bundle's object (pinned),
// from the cache when the page is unchanged, else by fetching the index
// and opening the bundle's download.
func (g *Gateway) pageBundle(req *request, probe *http.Response, link string) (*bundleRef, *object, error) {
	t := req.target
	pageKey := refKey(t.Scheme, t.Host, t.Path)
	etag := probe.Header.Get("ETag")
	g.mu.Lock()
	ref := g.pages[pageKey]
	g.mu.Unlock()
	if ref != nil && ref.page && ref.member.ETag == etag && ref.member.Size == probe.ContentLength {
		if o, err := g.cache.lookup(ref.key); o != nil && err == nil {
			return ref, o, nil
		}
	}

	bu, err := t.Parse(link)
	var ip string
	ok := err == nil
	if ok {
		ip, ok = contract.BundleIndexPath(bu.EscapedPath())
	}
	if !ok || !strings.EqualFold(bu.Scheme, t.Scheme) || !strings.EqualFold(bu.Host, t.Host) {
		return nil, nil, fmt.Errorf("bundle link %q: want %s/... on the page's origin", link, contract.BundlePrefix)
	}
	bu.RawQuery, bu.Fragment = "", ""
	iu, err := url.Parse(t.Scheme + "://" + t.Host + ip)
	if err != nil {
		return nil, nil, err
	}
	idx, idxETag, err := g.fetchIndex(req.r.Context(), iu)
	if err != nil {
		return nil, nil, err
	}
	if err := idx.Check(iu, bu); err != nil {
		return nil, nil, fmt.Errorf("bundle index %s: %w", iu, err)
	}
	page := idx.Members[0]
	if page.Size != probe.ContentLength || (etag != "" && page.ETag != "" && page.ETag != etag) {
		return nil, nil, fmt.Errorf("bundle index %s describes another version of the page", iu)
	}
	src, err := g.origins.Open(req.r.Context(), bu)
	if err != nil {
		return nil, nil, fmt.Errorf("bundle %s: %w", bu, err)
	}
	if bm := src.Manifest(); bm.Size != idx.Size || (idxETag != "" && bm.ETag != "" && bm.ETag != idxETag) {
		return nil, nil, fmt.Errorf("bundle %s (%d bytes, ETag %s) is not the one its index describes (%d bytes, ETag %s)",
			bu, bm.Size, bm.ETag, idx.Size, idxETag)
	}
	o, err := g.cache.acquire(src.Manifest(), src)
	if err != nil {
		return nil, nil, err
	}
	ref = g.rememberBundle(t, pageKey, o.key, idx)
	return ref, o, nil
}

// fetchIndex downloads and decodes a bundle index, and returns it with
// its ETag (the bundle's, at a stampede origin).
func (g *Gateway) fetchIndex(ctx context.Context, u *url.URL) (*contract.BundleIndex, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Add("Via", "1.1 "+g.via)
	resp, err := g.fetches.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("bundle index %s: %s", u, resp.Status)
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "application/json" {
		return nil, "", fmt.Errorf("bundle index %s has content type %q, want application/json", u, ct)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, contract.MaxBundleIndexBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("bundle index %s: %w", u, err)
	}
	idx, err := contract.DecodeBundleIndex(body)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", u, err)
	}
	return idx, resp.Header.Get("ETag"), nil
}

// rememberBundle records the URLs of a bundle's members and returns the
// page's reference.
func (g *Gateway) rememberBundle(page *url.URL, pageKey, key string, idx *contract.BundleIndex) *bundleRef {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pages)+len(idx.Members)+1 > maxPageRefs {
		g.prunePagesLocked()
	}
	pageRef := &bundleRef{key: key, member: idx.Members[0], page: true}
	for k, m := range idx.Members {
		ref := &bundleRef{key: key, member: m, page: k == 0}
		if k == 0 {
			ref = pageRef
		}
		g.pages[refKey(page.Scheme, page.Host, m.Path)] = ref
	}
	g.pages[pageKey] = pageRef
	return pageRef
}

// prunePagesLocked drops references to bundles no longer cached, and all
// of them if that is not enough.
func (g *Gateway) prunePagesLocked() {
	for k, ref := range g.pages {
		if !g.cache.has(ref.key) {
			delete(g.pages, k)
		}
	}
	if len(g.pages) > maxPageRefs/2 {
		clear(g.pages)
	}
}

// forgetBundle drops the references to an evicted bundle.
func (g *Gateway) forgetBundle(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, ref := range g.pages {
		if ref.key == key {
			delete(g.pages, k)
		}
	}
}
