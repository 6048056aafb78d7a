package origin

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
)

// Serving a directory. Files are opened through an os.Root, which refuses
// any path, ".." or symbolic link, that leads outside Dir, and served with
// http.ServeContent, which gets Range, If-Range, conditional requests and
// HEAD right.

// serveDir serves the file or directory at r's path.
func (s *Server) serveDir(w *respWriter, r *http.Request) {
	name, err := cleanName(r.URL.Path)
	if err != nil {
		w.kind = kindOther
		s.log.Warn("refused a request", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
		http.Error(w, "stampede: bad path", http.StatusBadRequest)
		return
	}
	if s.hidden(name) {
		s.log.Debug("refused a dot name", "file", name, "remote", r.RemoteAddr)
		http.Error(w, "stampede: not found", http.StatusNotFound)
		return
	}
	// Stat before opening: opening a FIFO would block.
	fi, err := s.root.Stat(name)
	if err != nil {
		s.openError(w, r, name, err)
		return
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		s.log.Debug("refused a file that is not regular", "file", name, "mode", fi.Mode())
		http.Error(w, "stampede: not found", http.StatusNotFound)
		return
	}
	f, err := s.root.Open(name)
	if err != nil {
		s.openError(w, r, name, err)
		return
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		s.openError(w, r, name, err)
		return
	}
	if fi.IsDir() {
		s.serveDirPath(w, r, name, f)
		return
	}
	s.serveFile(w, r, name, f, fi)
}

// serveDirPath answers for a directory as nginx and Go's FileServer do: with
// its index.html when it has one (the site's front page, served as the file
// with its manifest and page bundle), otherwise with a listing, or 404
// with NoListing (without the redirect to the slash, which would tell that
// the directory exists).
func (s *Server) serveDirPath(w *respWriter, r *http.Request, name string, d *os.File) {
	index := path.Join(name, "index.html")
	f, fi := s.openIndex(index)
	if f != nil {
		defer f.Close()
	}
	if f == nil && s.cfg.NoListing {
		w.kind = kindOther
		s.log.Debug("refused to list a directory", "path", r.URL.Path)
		http.Error(w, "stampede: not found", http.StatusNotFound)
		return
	}
	if !strings.HasSuffix(r.URL.Path, "/") {
		w.kind = kindOther
		http.Redirect(w, r, (&url.URL{Path: r.URL.Path + "/", RawQuery: r.URL.RawQuery}).String(), http.StatusMovedPermanently)
		return
	}
	if f != nil {
		s.serveFile(w, r, index, f, fi)
		return
	}
	w.kind = kindOther
	s.serveIndex(w, r, name, d)
}

// openIndex opens the file index if it is a regular file, or returns nil.
func (s *Server) openIndex(index string) (*os.File, fs.FileInfo) {
	if fi, err := s.root.Stat(index); err != nil || !fi.Mode().IsRegular() {
		return nil, nil
	}
	f, err := s.root.Open(index)
	if err != nil {
		return nil, nil
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil
	}
	return f, fi
}

// hidden reports whether the name in Dir is one not served (Config.Dotfiles).
func (s *Server) hidden(name string) bool { return !s.cfg.Dotfiles && dotName(name) }

// dotName reports whether a segment of name, as cleanName returns it,
// starts with a dot, a leading ".well-known" aside (RFC 8615 reserves the
// name at the top only).
func dotName(name string) bool {
	if name == "." {
		return false
	}
	if rest, ok := strings.CutPrefix(name, ".well-known"); ok && (rest == "" || rest[0] == '/') {
		name = strings.TrimPrefix(rest, "/")
	}
	for seg := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(seg, ".") {
			return true
		}
	}
	return false
}

// serveFile serves the regular file f, opened as name.
func (s *Server) serveFile(w *respWriter, r *http.Request, name string, f *os.File, fi fs.FileInfo) {
	v := fileValidators(fi)
	h := w.Header()
	h.Set("Etag", v.etag)
	h.Add("Link", linkHeader(contract.ManifestPath("/"+name)))
	if isPage(name) {
		h.Add("Link", bundleLinkHeader(name))
	}
	w.source = &pieceSource{r: f, entry: func() *entry {
		e, _ := s.cache.lookup(s.dirKey+name, v)
		return e
	}}
	w.version = &version{key: versionKey{s.dirKey + name, v}, entry: w.source.entry}
	w.onFull = func(h http.Header) {
		s.addDirDigest(r.Context(), h, name, v) // may compute the manifest
		s.addManifestHead(h, r, w.source.entry)
	}
	if s.pickPiece(w, r, w.source.entry()) {
		return
	}
	// ServeContent sets Last-Modified from fi.ModTime() exactly as
	// fileValidators formats it.
	http.ServeContent(w, r, path.Base(name), fi.ModTime(), f)
}

// syncDigestMax is the largest file whose digest a full response waits for
// when it is not cached yet (hashing 64 MiB takes tens of milliseconds).
// Larger files are hashed in the background and their first full responses
// go out without Repr-Digest rather than hold the client (and a transfer
// slot) for seconds.
const syncDigestMax = 64 << 20

// addDirDigest adds Repr-Digest to a full response of the file name.
func (s *Server) addDirDigest(ctx context.Context, h http.Header, name string, v validators) {
	s.addDigest(ctx, h, s.dirKey+name, v, func(ctx context.Context) (*entry, error) { return s.dirEntry(ctx, name, v) })
}

// addDigest adds Repr-Digest to a full response of version v of what key
// names in the cache, computing its manifest and digest with get first if
// it is small or cached.
func (s *Server) addDigest(ctx context.Context, h http.Header, key string, v validators, get func(context.Context) (*entry, error)) {
	if v.size > syncDigestMax {
		if e, _ := s.cache.lookup(key, v); e != nil {
			h.Set("Repr-Digest", e.reprDigest())
			return
		}
		s.bg.spawn(func(ctx context.Context) {
			if _, err := get(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("hashing failed", "key", key, "err", err)
			}
		})
		return
	}
	e, err := get(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return // the client is gone
	case err != nil:
		s.log.Warn("sending a response without Repr-Digest: hashing failed", "key", key, "err", err)
	case !e.v.matches(v):
		s.log.Info("sending a response without Repr-Digest: it changed while being sent", "key", key)
	default:
		h.Set("Repr-Digest", e.reprDigest())
	}
}

// linkHeader is the Link to the manifest at target (an escaped URL path).
func linkHeader(target string) string {
	return contract.Link(target, contract.ManifestRel)
}

func (s *Server) openError(w *respWriter, r *http.Request, name string, err error) {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		s.log.Debug("no such file", "file", name)
		http.Error(w, "stampede: not found", http.StatusNotFound)
	case errors.Is(err, fs.ErrPermission):
		s.log.Warn("cannot open a file", "file", name, "err", err)
		http.Error(w, "stampede: forbidden", http.StatusForbidden)
	default:
		// Among others, a symbolic link out of Dir. Say no more than 404.
		s.log.Warn("refused a file", "file", name, "remote", r.RemoteAddr, "err", err)
		http.Error(w, "stampede: not found", http.StatusNotFound)
	}
}

// cleanName turns a URL path into a name for os.Root. It refuses ".."
// elements outright rather than resolving them (net/http's ServeMux
// redirects such paths anyway), and NUL.
func cleanName(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", errors.New("NUL in path")
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return "", errors.New(`".." in path`)
		}
	}
	name := strings.TrimPrefix(path.Clean("/"+p), "/")
	if name == "" {
		name = "."
	}
	return name, nil
}

// fileValidators returns a file's validators. The ETag is strong and derived
// from the size and the modification time in nanoseconds, so it survives
// restarts and changes whenever the content does (short of a deliberate
// mtime reset). Last-Modified is left out, as by http.ServeContent, for a
// zero or Unix-epoch mtime.
func fileValidators(fi fs.FileInfo) validators {
	mt := fi.ModTime()
	v := validators{
		etag: fmt.Sprintf(`"%x-%x"`, fi.Size(), mt.UnixNano()),
		size: fi.Size(),
	}
	if !mt.IsZero() && !mt.Equal(time.Unix(0, 0)) {
		v.lastModified = mt.UTC().Format(http.TimeFormat)
	}
	return v
}

// sameVersion reports whether two stats of a file show the same version.
func sameVersion(a, b fs.FileInfo) bool {
	return a.Size() == b.Size() && a.ModTime().Equal(b.ModTime()) && os.SameFile(a, b)
}

// dirManifest returns the manifest of the file at URL path p.
func (s *Server) dirManifest(ctx context.Context, p string) (*entry, error) {
	name, err := cleanName(p)
	if err != nil {
		return nil, statusErrorf(http.StatusBadRequest, "%w", err)
	}
	if s.hidden(name) {
		return nil, statusErrorf(http.StatusNotFound, "a dot name")
	}
	fi, err := s.root.Stat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return nil, statusErrorf(http.StatusNotFound, "no such file")
	case err != nil:
		return nil, statusErrorf(http.StatusNotFound, "%w", err)
	case !fi.Mode().IsRegular():
		return nil, statusErrorf(http.StatusNotFound, "not a regular file")
	}
	return s.dirEntry(ctx, name, fileValidators(fi))
}

// dirEntry returns the manifest of version v of the file name.
func (s *Server) dirEntry(ctx context.Context, name string, v validators) (*entry, error) {
	return s.cache.get(ctx, s.dirKey+name, v, func(ctx context.Context) (*entry, error) {
		return s.hashDirFile(ctx, name)
	})
}

// hashAttempts is how many times a file that keeps changing is hashed before
// giving up for this request.
const hashAttempts = 3

// hashDirFile computes the manifest of the file name as it is now: it stats
// the file before and after hashing, and hashes again if it changed.
func (s *Server) hashDirFile(ctx context.Context, name string) (*entry, error) {
	release, err := s.acquireHash(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	for attempt := 1; ; attempt++ {
		e, changed, err := s.hashDirFileOnce(ctx, name)
		if !changed {
			return e, err
		}
		if attempt == hashAttempts {
			return nil, fmt.Errorf("%s changed each of the %d times it was hashed", name, attempt)
		}
		s.log.Info("file changed while being hashed; hashing it again", "file", name, "attempt", attempt)
	}
}

func (s *Server) hashDirFileOnce(ctx context.Context, name string) (e *entry, changed bool, err error) {
	f, err := s.root.Open(name)
	if err != nil {
		return nil, false, statusErrorf(http.StatusNotFound, "%w", err)
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if !before.Mode().IsRegular() {
		return nil, false, statusErrorf(http.StatusNotFound, "not a regular file")
	}
	start := time.Now()
	m, sum, hashErr := hashFile(ctx, f, before.Size(), manifestName(name))
	if hook := s.testHookHashed; hook != nil {
		hook(name)
	}
	// The open file must be unchanged, and still be the one at name.
	after, err1 := f.Stat()
	now, err2 := s.root.Stat(name)
	if err1 != nil || err2 != nil || !sameVersion(before, after) || !sameVersion(before, now) {
		if ctx.Err() != nil {
			return nil, false, context.Cause(ctx)
		}
		return nil, true, nil
	}
	if hashErr != nil {
		return nil, false, fmt.Errorf("hash %s: %w", name, hashErr)
	}
	s.log.Info("computed a manifest", "file", name, "size", before.Size(), "pieces", m.NumPieces(),
		"root", m.Root.String(), "took", time.Since(start).Round(time.Millisecond))
	e, err = newEntry(fileValidators(before), m, sum)
	return e, false, err
}

// hashFile computes the manifest (on hashWorkers goroutines) and the
// whole-file SHA-256 (on one more) of f at once.
func hashFile(ctx context.Context, f io.ReaderAt, size int64, name string) (*manifest.Manifest, [sha256.Size]byte, error) {
	r := ctxReaderAt{ctx, f}
	var (
		sum    [sha256.Size]byte
		sumErr error
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		h := sha256.New()
		n, err := io.CopyBuffer(h, io.NewSectionReader(r, 0, size), make([]byte, 1<<20))
		switch {
		case err != nil:
			sumErr = err
		case n != size:
			sumErr = fmt.Errorf("read %d of %d bytes: %w", n, size, io.ErrUnexpectedEOF)
		}
		h.Sum(sum[:0])
	})
	m, err := manifest.FromReaderAt(r, size, name, hashWorkers())
	wg.Wait()
	if err == nil {
		err = sumErr
	}
	return m, sum, err
}

// ctxReaderAt stops reading once ctx is done.
type ctxReaderAt struct {
	ctx context.Context
	r   io.ReaderAt
}

func (c ctxReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.ReadAt(p, off)
}

// manifestName is the Name a manifest gets for the file at path p: its base
// name, without what a manifest name may not hold.
func manifestName(p string) string {
	base := path.Base(p)
	if base == "/" || base == "." {
		return ""
	}
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 {
			return '_'
		}
		return r
	}, base)
}

// serveIndex lists the directory name, open as d: enough to browse,
// nothing more, and nothing hidden.
func (s *Server) serveIndex(w *respWriter, r *http.Request, name string, d *os.File) {
	entries, err := d.ReadDir(-1)
	if err != nil {
		s.log.Warn("cannot list a directory", "path", r.URL.Path, "err", err)
		http.Error(w, "stampede: internal error", http.StatusInternalServerError)
		return
	}
	entries = slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return s.hidden(path.Join(name, e.Name())) })
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	fmt.Fprintf(&b, "<!doctype html>\n<meta charset=utf-8>\n<title>%s</title>\n<pre>\n", html.EscapeString(r.URL.Path))
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		fmt.Fprintf(&b, "<a href=\"%s\">%s</a>\n", html.EscapeString((&url.URL{Path: n}).String()), html.EscapeString(n))
	}
	b.WriteString("</pre>\n")
	io.WriteString(w, b.String())
}

// Warm computes the manifest of every file under Dir not cached yet, one
// at a time, and returns when done or when ctx ends. Config.Warm runs it in
// the background.
func (s *Server) Warm(ctx context.Context) error {
	if s.root == nil {
		return errors.New("origin: only a Dir can be warmed")
	}
	start, n := time.Now(), 0
	err := fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if err != nil {
			s.log.Warn("warming the manifest cache: skipping", "path", p, "err", err)
			return nil
		}
		if s.hidden(p) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err == nil {
			_, err = s.dirEntry(ctx, p, fileValidators(fi))
		}
		if err != nil {
			s.log.Warn("warming the manifest cache: skipping", "path", p, "err", err)
			return nil
		}
		n++
		return nil
	})
	if err != nil {
		s.log.Info("stopped warming the manifest cache", "files", n, "err", err)
		return err
	}
	s.log.Info("warmed the manifest cache", "files", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
