package origin

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Keeping the on-disk manifest cache bounded. Each key (a file of a Dir,
// a bundle, an upstream URL) has one file in CacheDir, rewritten when a
// new version is computed, so what grows without bound is the keys: files
// deleted or renamed, bundles of pages gone, and every URL an upstream
// ever served. The sweeper goes through CacheDir every sweepEvery, and as
// soon as the files written since the last sweep may have pushed it past
// Config.CacheMaxBytes, and removes:
//
//   - manifests of files (and bundles of pages) that no longer exist, and
//     of files whose version has changed: the origin never serves those;
//   - cache files it cannot read (a file of a future format is kept) and
//     temporary files older than tempMaxAge, left by a writer that died;
//   - past CacheMaxBytes, the least recently used manifests, oldest first.
//
// Use is recorded in the files' modification times (touchEvery at most),
// so servers sharing a CacheDir see each other's. Never removed: the
// manifests in this server's memory (in use), and, for the cap, those any
// server used in the last recentUse; so the cap may be exceeded by what
// is in use right now. A file is removed only if it is still the one that
// was looked at (same inode, same modification time): one that another
// server has rewritten or touched since is left alone. What can still
// race, in the microseconds between that check and the removal, costs a
// hash, never a wrong manifest: every cache file is validated when read.

// Bounds of the sweeps.
const (
	sweepEvery = 10 * time.Minute
	touchEvery = time.Minute     // least time between two touches of a cache file
	recentUse  = 2 * touchEvery  // cache files used this recently are not evicted
	tempMaxAge = 1 * time.Hour   // a temporary file lives milliseconds; this one's writer died
	tempPrefix = ".tmp-"         // of the temporary files save writes
	cacheExt   = ".json"         // of cache files; the name is a hash of the key
	keyHexLen  = 2 * sha256.Size // characters of a cache file's name before cacheExt
)

// Why the sweeper removed a file, for the metrics.
const (
	removedGone       = iota // the file or page the manifest is of no longer exists
	removedChanged           // the file is of another version now
	removedUnreadable        // not a cache file that can be read
	removedTemp              // a temporary file whose writer died
	removedEvicted           // least recently used, past CacheMaxBytes
	numCacheRemoved
)

var cacheRemovedNames = [numCacheRemoved]string{"gone", "changed", "unreadable", "temp", "evicted"}

// fileState is what a sweep makes of a file in CacheDir.
type fileState int

const (
	stateLive  fileState = iota // may be used: evicted past the cap, least recently used first
	stateInUse                  // in this server's memory: never removed
	stateDead                   // of no use: removed, for the reason in cacheFile.reason
)

// cacheFile is a file in CacheDir as a sweep found it.
type cacheFile struct {
	name   string
	info   fs.FileInfo // as read, to check it is still the same file before removing it
	state  fileState
	reason int // removed* when stateDead
}

func (f *cacheFile) size() int64        { return f.info.Size() }
func (f *cacheFile) modTime() time.Time { return f.info.ModTime() }

// removal is a file a sweep removes, and why.
type removal struct {
	file   int // index in the files planned
	reason int // removed*
}

// planSweep decides which of files to remove: the dead ones, then, while
// the rest add up to more than maxBytes, the live ones used longest ago,
// except those used since now minus recentUse. It also returns the bytes
// kept. It is pure: files are as inspect found them.
func planSweep(files []cacheFile, maxBytes int64, now time.Time) ([]removal, int64) {
	var (
		out  []removal
		kept int64
		live []int
	)
	for i := range files {
		switch files[i].state {
		case stateDead:
			out = append(out, removal{i, files[i].reason})
			continue
		case stateLive:
			live = append(live, i)
		}
		kept += files[i].size()
	}
	// Least recently used first; the name breaks ties, so a plan does not
	// depend on the order of the directory.
	slices.SortFunc(live, func(a, b int) int {
		return cmp.Or(files[a].modTime().Compare(files[b].modTime()), strings.Compare(files[a].name, files[b].name))
	})
	for _, i := range live {
		if kept <= maxBytes {
			break
		}
		if files[i].modTime().After(now.Add(-recentUse)) {
			break // this one and all after it are in use
		}
		out = append(out, removal{i, removedEvicted})
		kept -= files[i].size()
	}
	return out, kept
}

// sweeper runs the sweeps until ctx is done: one at once, one every
// sweepEvery, and one whenever kick says the cache may have grown past its
// bound.
func (c *cache) sweeper(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		if err := c.sweep(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("could not sweep the manifest cache", "dir", c.dir, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// wrote records that save wrote n bytes, and asks for a sweep if the
// cache may now be past its bound.
func (c *cache) wrote(n int64) {
	if c.diskBytes.Add(n) > c.maxBytes {
		select {
		case c.kick <- struct{}{}:
		default: // a sweep is asked for already
		}
	}
}

// sweep goes through CacheDir once and removes what planSweep says.
func (c *cache) sweep(ctx context.Context) error {
	start := time.Now()
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return err
	}
	files := make([]cacheFile, 0, len(des))
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return err
		}
		if f, ok := c.inspect(de, start); ok {
			files = append(files, f)
		}
	}
	plan, kept := planSweep(files, c.maxBytes, start)
	var removed [numCacheRemoved]int
	for _, r := range plan {
		f := &files[r.file]
		if !c.remove(f) {
			kept += f.size()
			continue
		}
		removed[r.reason]++
		c.metrics.cacheRemoved[r.reason].Add(1)
	}
	c.diskBytes.Store(kept)
	c.metrics.cacheBytes.Set(float64(kept))
	if len(plan) > 0 {
		c.log.Info("swept the manifest cache", "dir", c.dir, "gone", removed[removedGone],
			"changed", removed[removedChanged], "unreadable", removed[removedUnreadable], "temp", removed[removedTemp],
			"evicted", removed[removedEvicted], "kept_bytes", kept, "max_bytes", c.maxBytes,
			"took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// inspect looks at one entry of CacheDir; ok is false for what the cache
// did not write (left alone) and for what cannot be looked at now.
func (c *cache) inspect(de fs.DirEntry, now time.Time) (f cacheFile, ok bool) {
	name := de.Name()
	isTemp := strings.HasPrefix(name, tempPrefix)
	if !de.Type().IsRegular() || !isTemp && !isCacheName(name) {
		return f, false
	}
	file, err := os.Open(filepath.Join(c.dir, name))
	if err != nil {
		return f, false // gone meanwhile, or not ours to read
	}
	defer file.Close()
	if f.info, err = file.Stat(); err != nil {
		return f, false
	}
	f.name = name
	if isTemp {
		// A live writer's is not counted against the bound: it becomes a
		// cache file or goes within milliseconds.
		if now.Sub(f.modTime()) <= tempMaxAge {
			return f, false
		}
		f.state, f.reason = stateDead, removedTemp
		return f, true
	}
	h, err := readHeader(file)
	switch {
	case err != nil:
		f.state, f.reason = stateDead, removedUnreadable
	case h.Version != diskVersion:
		// Written by another version of stampede sharing the directory: it
		// knows what the entry is of; only its size and age count here.
	case name != cacheName(h.Key):
		f.state, f.reason = stateDead, removedUnreadable
	case c.inMemory(h.Key):
		f.state = stateInUse
	default:
		if gone, changed := staleKey(h); gone {
			f.state, f.reason = stateDead, removedGone
		} else if changed {
			f.state, f.reason = stateDead, removedChanged
		}
	}
	return f, true
}

// staleKey reports whether the file or page a cache entry's key names is
// gone or of another version now. Upstream URLs are never known stale
// here (that takes a request): the bound takes care of them.
func staleKey(h diskHeader) (gone, changed bool) {
	if page, ok := strings.CutPrefix(h.Key, "bundle:"); ok {
		// A bundle's version is its members'; the cap takes care of old ones.
		_, err := os.Stat(page)
		return notExist(err), false
	}
	p, ok := strings.CutPrefix(h.Key, "file:")
	if !ok {
		return false, false
	}
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return notExist(err), false // any other error: cannot tell, keep it
	case !fi.Mode().IsRegular():
		return true, false
	}
	v := validators{etag: h.ETag, lastModified: h.LastModified, size: h.Size}
	return false, !fileValidators(fi).matches(v)
}

func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

func (c *cache) inMemory(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.mem[key]
	return ok
}

// remove removes f if it is still the file inspect looked at: not
// replaced (another inode) nor touched (another modification time) since.
func (c *cache) remove(f *cacheFile) bool {
	p := filepath.Join(c.dir, f.name)
	now, err := os.Lstat(p)
	if err != nil || !os.SameFile(now, f.info) || !now.ModTime().Equal(f.modTime()) {
		return false
	}
	if err := os.Remove(p); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("could not remove a manifest cache file", "file", p, "err", err)
		}
		return false
	}
	return true
}

// touch records that e, key's entry, was used, in its file's modification
// time, at most once per touchEvery.
func (c *cache) touch(key string, e *entry) {
	now := time.Now()
	last := e.touched.Load()
	if now.UnixNano()-last < int64(touchEvery) || !e.touched.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	// The file may be gone (another server evicted it): it is written
	// again only when computed again, which this server does not need.
	if err := os.Chtimes(c.path(key), now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Debug("could not touch a manifest cache file", "key", key, "err", err)
	}
}

// cacheName is the name of key's file in CacheDir: a hash of the key, so
// any path or URL makes a safe, fixed-length file name.
func cacheName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:]) + cacheExt
}

// isCacheName reports whether name has the shape of a cacheName.
func isCacheName(name string) bool {
	h, ok := strings.CutSuffix(name, cacheExt)
	if !ok || len(h) != keyHexLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// diskHeader is what a sweep needs of a diskEntry: which version of what.
type diskHeader struct {
	Version      int
	Key          string
	ETag         string
	LastModified string
	Size         int64
}

// readHeader reads a cache file's header fields, stopping as soon as it
// has them: encodeEntry writes them before the manifest, so a sweep does
// not read whole manifests. A file of another format version is returned
// as soon as its version is read: only the version is known of it.
func readHeader(r io.Reader) (diskHeader, error) {
	var h diskHeader
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return h, fmt.Errorf("origin: cache entry: not a JSON object (%v)", err)
	}
	const all = 1<<5 - 1 // a bit per field
	seen := 0
	for seen != all && dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return h, fmt.Errorf("origin: cache entry: %w", err)
		}
		var (
			dst any = new(json.RawMessage)
			bit int
		)
		switch tok {
		case "version":
			dst, bit = &h.Version, 1<<0
		case "key":
			dst, bit = &h.Key, 1<<1
		case "etag":
			dst, bit = &h.ETag, 1<<2
		case "last_modified":
			dst, bit = &h.LastModified, 1<<3
		case "size":
			dst, bit = &h.Size, 1<<4
		}
		if err := dec.Decode(dst); err != nil {
			return h, fmt.Errorf("origin: cache entry: field %v: %w", tok, err)
		}
		seen |= bit
		if bit == 1<<0 && h.Version != diskVersion {
			return h, nil
		}
	}
	if seen != all {
		return h, errors.New("origin: cache entry: fields missing")
	}
	return h, nil
}
