package origin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stampede-dev/stampede/contract"
)

// Pages, not just files (Overhaul's INFO, Flashback's "a web page is a set
// of objects"). For an HTML page P of Dir (a name ending in .html or .htm),
// the origin publishes a bundle: the page and its same-origin assets
// (assets.go) concatenated into one resource, so that a gateway fetches a
// page and everything it shows through one swarm. The paths, the Link and
// the index's format are package contract's (contract/bundle.go).
//
//   - Every response for P carries, beside its manifest's Link, the Link
//     to its bundle (contract.BundleRel).
//   - The index (contract.BundleIndex, ETag the bundle's) lists the page
//     first, then its assets in document order: files of Dir only, each
//     once, at most BundleMaxAssets of them and BundleMaxBytes in all (an
//     asset that does not fit is left out, the next ones may still fit).
//   - The bundle is served like any file: Range, If-Range, HEAD,
//     conditional requests, a strong ETag derived from the members' paths
//     and validators (so it changes when any member does), Last-Modified
//     the newest member's, Repr-Digest on full responses, overload mode,
//     and a Link to its manifest at
//     /.well-known/stampede/manifest/.well-known/stampede/bundle/P, computed
//     and cached like any other.
//
// Nothing is stored: the index is rebuilt from a stat of each member on
// every request (the parse of the page is cached per page version), and the
// bundle is read from the members' files. A member that changes while a
// bundle is read ends the response early, as a changed file would.

// isPage reports whether the file name is an HTML page, which gets a bundle.
func isPage(name string) bool {
	ext := strings.ToLower(path.Ext(name))
	return ext == ".html" || ext == ".htm"
}

func bundleLinkHeader(name string) string {
	return contract.Link(contract.BundlePath("/"+name), contract.BundleRel)
}

// bundleMember is one file of a bundle: what the index shows and the file.
type bundleMember struct {
	contract.BundleMember
	name string      // in Dir
	fi   fs.FileInfo // the version described
}

// bundle is the bundle of one page as its members are now.
type bundle struct {
	page    string // name of the page in Dir
	members []bundleMember
	size    int64
	v       validators
	modTime time.Time // the newest member's
}

var errNotPage = publicErrorf(http.StatusNotFound, "not an HTML page (a name ending in .html or .htm)")

// buildBundle describes the bundle of the page name as its files are now.
func (s *Server) buildBundle(ctx context.Context, name string) (*bundle, error) {
	if !isPage(name) {
		return nil, errNotPage
	}
	if s.hidden(name) {
		return nil, statusErrorf(http.StatusNotFound, "a dot name")
	}
	f, fi, err := s.openRegular(name)
	if err != nil {
		return nil, err
	}
	assets, err := s.pages.assets(name, f, fi)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	b := &bundle{page: name}
	if err := b.add(s, "/"+name, name, fi); err != nil {
		return nil, err
	}
	seen := map[string]bool{name: true}
	for _, p := range assets {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if len(b.members) > s.cfg.BundleMaxAssets {
			break
		}
		an, err := cleanName(p)
		if err != nil || an == "." || seen[an] || s.hidden(an) {
			continue
		}
		seen[an] = true
		afi, err := s.root.Stat(an) // follows links only while inside Dir
		if err != nil || !afi.Mode().IsRegular() || b.size+afi.Size() > s.cfg.BundleMaxBytes {
			continue
		}
		if err := b.add(s, "/"+an, an, afi); err != nil {
			s.log.Debug("leaving an asset out of a bundle", "page", name, "asset", an, "err", err)
		}
	}
	b.seal()
	return b, nil
}

// openRegular opens the regular file name of Dir and stats it.
func (s *Server) openRegular(name string) (*os.File, fs.FileInfo, error) {
	// Stat before opening: opening a FIFO would block.
	fi, err := s.root.Stat(name)
	if err == nil && !fi.Mode().IsRegular() {
		return nil, nil, statusErrorf(http.StatusNotFound, "not a regular file")
	}
	f, err := s.root.Open(name)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return nil, nil, statusErrorf(http.StatusNotFound, "no such file")
	case err != nil:
		return nil, nil, statusErrorf(http.StatusNotFound, "%w", err)
	}
	fi, err = f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = statusErrorf(http.StatusNotFound, "not a regular file")
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// add appends the file name, at URL path p, as the next member.
func (b *bundle) add(s *Server, p, name string, fi fs.FileInfo) error {
	ct, err := s.contentType(name)
	if err != nil {
		return err
	}
	v := fileValidators(fi)
	b.members = append(b.members, bundleMember{
		BundleMember: contract.BundleMember{Path: p, Offset: b.size, Size: fi.Size(), ContentType: ct,
			ETag: v.etag, LastModified: v.lastModified},
		name: name, fi: fi,
	})
	b.size += fi.Size()
	if mt := fi.ModTime(); mt.After(b.modTime) {
		b.modTime = mt
	}
	return nil
}

// seal derives the bundle's validators from its members'.
func (b *bundle) seal() {
	h := sha256.New()
	for _, m := range b.members {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%s\n", m.Path, m.ETag, m.LastModified, m.Size, m.ContentType)
	}
	b.v = validators{etag: `"sb-` + hex.EncodeToString(h.Sum(nil)[:16]) + `"`, size: b.size}
	if !b.modTime.IsZero() && !b.modTime.Equal(time.Unix(0, 0)) {
		b.v.lastModified = b.modTime.UTC().Format(http.TimeFormat)
	}
}

// contentType is the Content-Type a GET of the file name answers with, as
// http.ServeContent chooses it: by extension, else by sniffing.
func (s *Server) contentType(name string) (string, error) {
	if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
		return ct, nil
	}
	f, err := s.root.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var buf [512]byte
	n, err := io.ReadFull(f, buf[:])
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return "", err
	}
	return http.DetectContentType(buf[:n]), nil
}

// bundleName is the page a bundle or bundle-index request names.
func bundleName(urlPath, prefix string) (string, error) {
	name, err := cleanName(strings.TrimPrefix(urlPath, prefix))
	if err != nil {
		return "", statusErrorf(http.StatusBadRequest, "%w", err)
	}
	return name, nil
}

func (s *Server) serveBundleIndex(w *respWriter, r *http.Request) {
	name, err := bundleName(r.URL.Path, contract.BundleIndexPrefix)
	if err == nil {
		var b *bundle
		if b, err = s.buildBundle(r.Context(), name); err == nil {
			s.writeBundleIndex(w, r, b)
			return
		}
	}
	s.bundleError(w, r, err)
}

func (s *Server) writeBundleIndex(w *respWriter, r *http.Request, b *bundle) {
	idx := contract.BundleIndex{Version: contract.BundleIndexVersion, Bundle: contract.BundlePath("/" + b.page), Size: b.size}
	for _, m := range b.members {
		idx.Members = append(idx.Members, m.BundleMember)
	}
	body, err := idx.Encode()
	if err != nil {
		s.bundleError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Etag", b.v.etag)
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", b.modTime, strings.NewReader(string(body)))
}

func (s *Server) serveBundle(w *respWriter, r *http.Request) {
	name, err := bundleName(r.URL.Path, contract.BundlePrefix)
	var b *bundle
	if err == nil {
		b, err = s.buildBundle(r.Context(), name)
	}
	if err != nil {
		w.kind = kindOther
		s.bundleError(w, r, err)
		return
	}
	br := s.bundleReader(b)
	defer br.Close()
	h := w.Header()
	h.Set("Etag", b.v.etag)
	h.Set("Content-Type", contract.BundleContentType)
	h.Add("Link", linkHeader(contract.ManifestPath(contract.BundlePrefix+"/"+name)))
	w.onFull = func(h http.Header) {
		s.addDigest(r.Context(), h, s.bundleKey(name), b.v, func(ctx context.Context) (*entry, error) { return s.bundleEntry(ctx, b) })
	}
	w.source = &pieceSource{r: br, entry: func() *entry {
		e, _ := s.cache.lookup(s.bundleKey(name), b.v)
		return e
	}}
	w.version = &version{key: versionKey{s.bundleKey(name), b.v}, entry: w.source.entry}
	http.ServeContent(w, r, "", b.modTime, br)
}

func (s *Server) bundleError(w *respWriter, r *http.Request, err error) {
	code, body := errorAnswer(err)
	switch {
	case r.Context().Err() != nil:
	case code >= 500:
		s.log.Warn("no bundle", "path", r.URL.Path, "status", code, "err", err)
	default:
		s.log.Debug("no bundle", "path", r.URL.Path, "status", code, "err", err)
	}
	http.Error(w, "stampede: no bundle: "+body, code)
}

// bundleKey is the manifest cache key of the bundle of page name; "bundle:"
// keeps it apart from the key of any file.
func (s *Server) bundleKey(name string) string {
	return "bundle:" + strings.TrimPrefix(s.dirKey, "file:") + name
}

// bundleManifest returns the manifest of the bundle of the page at URL path
// p (relative to contract.BundlePrefix).
func (s *Server) bundleManifest(ctx context.Context, p string) (*entry, error) {
	name, err := bundleName(p, "")
	if err != nil {
		return nil, err
	}
	b, err := s.buildBundle(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.bundleEntry(ctx, b)
}

// bundleEntry returns the manifest of bundle b's version.
func (s *Server) bundleEntry(ctx context.Context, b *bundle) (*entry, error) {
	return s.cache.get(ctx, s.bundleKey(b.page), b.v, func(ctx context.Context) (*entry, error) {
		return s.hashBundle(ctx, b)
	})
}

// hashBundle computes the manifest of b, and checks afterwards that no
// member changed meanwhile; if one did, the bundle as it is now is hashed
// instead, up to hashAttempts times.
func (s *Server) hashBundle(ctx context.Context, b *bundle) (*entry, error) {
	release, err := s.acquireHash(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	for attempt := 1; ; attempt++ {
		start := time.Now()
		br := s.bundleReader(b)
		m, sum, hashErr := hashFile(ctx, br, b.size, manifestName(b.page)+".bundle")
		br.Close()
		now, err := s.buildBundle(ctx, b.page)
		if err != nil {
			return nil, err
		}
		if now.v.matches(b.v) {
			if hashErr != nil {
				return nil, fmt.Errorf("hash the bundle of %s: %w", b.page, hashErr)
			}
			s.log.Info("computed a bundle manifest", "page", b.page, "members", len(b.members), "size", b.size,
				"root", m.Root.String(), "took", time.Since(start).Round(time.Millisecond))
			return newEntry(b.v, m, sum)
		}
		if attempt == hashAttempts {
			return nil, fmt.Errorf("the bundle of %s changed each of the %d times it was hashed", b.page, attempt)
		}
		s.log.Info("a bundle member changed while the bundle was hashed; hashing it again", "page", b.page, "attempt", attempt)
		b = now
	}
}

// errMemberChanged ends the reading of a bundle whose member changed since
// the bundle was described.
var errMemberChanged = errors.New("origin: a bundle member changed while the bundle was read")

// memberReader reads a bundle's bytes from its members' files: ReadAt from
// any goroutine (each call opens what it needs), Read and Seek from one (a
// sequential reader keeps the member it is in open). Every file opened is
// checked to be the version described.
type memberReader struct {
	root *os.Root
	b    *bundle

	// For Read and Seek.
	pos int64
	cur int      // member f belongs to
	f   *os.File // nil: none open
}

func (s *Server) bundleReader(b *bundle) *memberReader {
	return &memberReader{root: s.root, b: b, cur: -1}
}

func (r *memberReader) open(i int) (*os.File, error) {
	m := &r.b.members[i]
	f, err := r.root.Open(m.name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errMemberChanged, m.name, err)
	}
	if fi, err := f.Stat(); err != nil || !sameVersion(fi, m.fi) {
		f.Close()
		return nil, fmt.Errorf("%w: %s", errMemberChanged, m.name)
	}
	return f, nil
}

// member returns the index of the member holding byte off (< size).
func (r *memberReader) member(off int64) int {
	ms := r.b.members
	lo, hi := 0, len(ms)
	for lo < hi { // the first member ending after off
		mid := (lo + hi) / 2
		if ms[mid].Offset+ms[mid].Size > off {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// readMember reads p from member i at off (inside it), through f.
func readMember(f *os.File, m *bundleMember, p []byte, off int64) (int, error) {
	rel := off - m.Offset
	p = p[:min(int64(len(p)), m.Size-rel)]
	n, err := f.ReadAt(p, rel)
	if n == len(p) {
		return n, nil
	}
	if err == nil || err == io.EOF {
		err = fmt.Errorf("%w: %s is shorter than it was", errMemberChanged, m.name)
	}
	return n, err
}

func (r *memberReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("origin: negative offset")
	}
	n := 0
	for n < len(p) && off < r.b.size {
		i := r.member(off)
		f, err := r.open(i)
		if err != nil {
			return n, err
		}
		k, err := readMember(f, &r.b.members[i], p[n:], off)
		f.Close()
		n, off = n+k, off+int64(k)
		if err != nil {
			return n, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (r *memberReader) Read(p []byte) (int, error) {
	if r.pos >= r.b.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	i := r.member(r.pos)
	if i != r.cur {
		r.Close()
		f, err := r.open(i)
		if err != nil {
			return 0, err
		}
		r.f, r.cur = f, i
	}
	n, err := readMember(r.f, &r.b.members[i], p, r.pos)
	r.pos += int64(n)
	return n, err
}

func (r *memberReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.b.size
	default:
		return 0, errors.New("origin: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("origin: seek before the start")
	}
	r.pos = offset
	return offset, nil
}

// Close closes the file a sequential read left open.
func (r *memberReader) Close() error {
	if r.f != nil {
		r.f.Close()
		r.f, r.cur = nil, -1
	}
	return nil
}

// pageCache keeps the asset references of the pages parsed, per version,
// so that the crowd on a page does not parse it again and again.
type pageCache struct {
	mu    sync.Mutex // guards pages
	pages map[string]pageEntry
}

type pageEntry struct {
	v      validators
	assets []string
}

// maxPages bounds the pages whose assets are kept (a few KB each).
const maxPages = 256

func newPageCache() *pageCache { return &pageCache{pages: make(map[string]pageEntry)} }

// assets returns the asset references of the page name, read from f (whose
// stat is fi) unless this version was parsed already.
func (c *pageCache) assets(name string, f *os.File, fi fs.FileInfo) ([]string, error) {
	v := fileValidators(fi)
	c.mu.Lock()
	e, ok := c.pages[name]
	c.mu.Unlock()
	if ok && e.v.matches(v) {
		return e.assets, nil
	}
	assets, err := pageAssets(f, "/"+name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pages[name]; !ok && len(c.pages) >= maxPages {
		for k := range c.pages { // any one: map order is random enough here
			delete(c.pages, k)
			break
		}
	}
	c.pages[name] = pageEntry{v: v, assets: assets}
	return assets, nil
}
