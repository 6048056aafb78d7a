package origin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
)

// validators identify a version of a file: the ETag and Last-Modified it is
// served with, and its size.
type validators struct {
	etag         string
	lastModified string
	size         int64 // -1 unknown
}

// known reports whether v can tell versions apart at all.
func (v validators) known() bool { return v.etag != "" || v.lastModified != "" }

// matches reports whether v and o are known to be the same version. A size
// only one side knows does not count against it.
func (v validators) matches(o validators) bool {
	return v.known() && v.etag == o.etag && v.lastModified == o.lastModified &&
		(v.size < 0 || o.size < 0 || v.size == o.size)
}

func (v validators) String() string {
	return v.etag + "\x00" + v.lastModified + "\x00" + strconv.FormatInt(v.size, 10)
}

// entry is a computed manifest and what goes with it.
type entry struct {
	v    validators
	m    *manifest.Manifest // m.ETag and m.LastModified are v's
	body []byte             // m's JSON, without trackers
	sum  [sha256.Size]byte  // SHA-256 of the whole file
	// published is the last body served, with its trackers and gzipped
	// (see bodyWith).
	published atomic.Pointer[publishedBody]
	// touched is when the entry's cache file was last marked used, in Unix
	// nanoseconds (cachegc.go).
	touched atomic.Int64
}

func newEntry(v validators, m *manifest.Manifest, sum [sha256.Size]byte) (*entry, error) {
	m.ETag, m.LastModified = v.etag, v.lastModified
	m.Trackers = nil // filled in per request (trackers.go), never cached
	body, err := m.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("origin: encode manifest: %w", err)
	}
	return &entry{v: v, m: m, body: body, sum: sum}, nil
}

// reprDigest is the value of the Repr-Digest header (RFC 9530).
func (e *entry) reprDigest() string { return httphdr.FormatReprDigestSHA256(e.sum[:]) }

// cache holds the manifests computed, in memory and on disk, each under a
// key naming its file (an absolute path or an upstream URL) and checked
// against the validators the caller sees now: a manifest of another version
// is never returned. Computations of the same version are shared. The
// disk is kept within maxBytes by a sweeper (cachegc.go).
type cache struct {
	dir      string
	maxMem   int
	maxBytes int64
	flights  *group[*entry]
	metrics  *series
	log      *slog.Logger
	// diskBytes is the size of the cache files as of the last sweep plus
	// what was written since; kick asks the sweeper for a sweep.
	diskBytes atomic.Int64
	kick      chan struct{}

	mu  sync.Mutex // guards mem
	mem map[string]*entry
}

// newCache returns the cache of dir; its sweeper is the caller's to run.
func newCache(dir string, maxMem int, maxBytes int64, bg *background, m *series, log *slog.Logger) *cache {
	return &cache{
		dir:      dir,
		maxMem:   maxMem,
		maxBytes: maxBytes,
		flights:  newGroup[*entry](bg),
		metrics:  m,
		log:      log,
		kick:     make(chan struct{}, 1),
		mem:      make(map[string]*entry),
	}
}

// get returns the manifest of key's version v, computing it if it is
// neither in memory nor on disk. The entry returned may be of a newer
// version than v if the file changed before compute looked at it: compute
// checks that what it returns is current.
func (c *cache) get(ctx context.Context, key string, v validators, compute func(context.Context) (*entry, error)) (*entry, error) {
	if e, where := c.lookup(key, v); e != nil {
		c.metrics.manifestHits[where].Add(1)
		return e, nil
	}
	return c.flights.do(ctx, key+"\x00"+v.String(), func(ctx context.Context) (*entry, error) {
		if e, where := c.lookup(key, v); e != nil {
			c.metrics.manifestHits[where].Add(1)
			return e, nil // computed by a flight that just ended
		}
		e, err := compute(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.metrics.manifestFailures.Add(1)
			}
			return nil, err
		}
		c.metrics.manifestsComputed.Add(1)
		c.store(key, e)
		return e, nil
	})
}

// lookup returns the entry of key's version v if memory or disk has it,
// and where it was found (hitMemory or hitDisk).
func (c *cache) lookup(key string, v validators) (*entry, int) {
	c.mu.Lock()
	e, inMem := c.mem[key]
	c.mu.Unlock()
	if inMem {
		// The disk holds the same entry, or an older one.
		if e.v.matches(v) {
			c.touch(key, e)
			return e, hitMemory
		}
		return nil, 0
	}
	e, err := c.load(key)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, 0
	case err != nil:
		c.log.Warn("ignoring an unreadable manifest cache file; the manifest will be computed again",
			"file", c.path(key), "err", err)
		return nil, 0
	}
	c.remember(key, e)
	if !e.v.matches(v) {
		return nil, 0
	}
	c.touch(key, e)
	return e, hitDisk
}

func (c *cache) remember(key string, e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mem[key]; !ok && len(c.mem) >= c.maxMem {
		for k := range c.mem { // map order is random enough for a cache this simple
			delete(c.mem, k)
			break
		}
	}
	c.mem[key] = e
}

func (c *cache) store(key string, e *entry) {
	e.touched.Store(time.Now().UnixNano()) // the file is about to be written
	c.remember(key, e)
	if err := c.save(key, e); err != nil {
		c.log.Warn("could not write the manifest cache; the manifest stays in memory only", "err", err)
	}
}

// path is key's file in the cache.
func (c *cache) path(key string) string { return filepath.Join(c.dir, cacheName(key)) }

func (c *cache) load(key string) (*entry, error) {
	data, err := os.ReadFile(c.path(key))
	if err != nil {
		return nil, err
	}
	return decodeEntry(data, key)
}

// save writes e atomically: readers see the old file or the new one.
func (c *cache) save(key string, e *entry) error {
	data, err := encodeEntry(key, e)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, tempPrefix+"*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.path(key))
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	c.wrote(int64(len(data)))
	return nil
}

// diskVersion is the version of the cache file format.
const diskVersion = 1

// diskEntry is an entry on disk. The key guards against the (theoretical)
// collision of two keys' file names; the validators are checked against the
// file's current ones before the entry is used.
type diskEntry struct {
	Version      int             `json:"version"`
	Key          string          `json:"key"`
	ETag         string          `json:"etag"`
	LastModified string          `json:"last_modified"`
	Size         int64           `json:"size"`
	SHA256       string          `json:"sha256"`
	Manifest     json.RawMessage `json:"manifest"`
}

func encodeEntry(key string, e *entry) ([]byte, error) {
	return json.Marshal(diskEntry{
		Version:      diskVersion,
		Key:          key,
		ETag:         e.v.etag,
		LastModified: e.v.lastModified,
		Size:         e.v.size,
		SHA256:       hex.EncodeToString(e.sum[:]),
		Manifest:     e.body,
	})
}

// decodeEntry parses a cache file written by encodeEntry for key. It
// trusts nothing: the manifest is validated, and must agree with the
// validators stored beside it.
func decodeEntry(data []byte, key string) (*entry, error) {
	var d diskEntry
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("origin: cache entry: %w", err)
	}
	switch {
	case d.Version != diskVersion:
		return nil, fmt.Errorf("origin: cache entry version %d, want %d", d.Version, diskVersion)
	case d.Key != key:
		return nil, fmt.Errorf("origin: cache entry is for %q, not %q", d.Key, key)
	}
	var sum [sha256.Size]byte
	if n, err := hex.Decode(sum[:], []byte(d.SHA256)); err != nil || n != len(sum) || len(d.SHA256) != 2*len(sum) {
		return nil, fmt.Errorf("origin: cache entry: bad sha256 %q", d.SHA256)
	}
	m, err := manifest.Unmarshal(d.Manifest)
	if err != nil {
		return nil, fmt.Errorf("origin: cache entry: %w", err)
	}
	v := validators{etag: d.ETag, lastModified: d.LastModified, size: d.Size}
	if !v.known() || m.Size != v.size || m.ETag != v.etag || m.LastModified != v.lastModified {
		return nil, errors.New("origin: cache entry: manifest disagrees with the validators stored beside it")
	}
	return newEntry(v, m, sum)
}

// group runs one call per key at a time and hands its result to everyone
// asking for that key meanwhile (a singleflight). The call runs in the
// background, so a caller that gives up does not cancel the work the others
// wait for, and a finished computation still fills the cache.
type group[T any] struct {
	bg *background

	mu    sync.Mutex // guards calls
	calls map[string]*call[T]
}

type call[T any] struct {
	done chan struct{}
	val  T
	err  error
}

func newGroup[T any](bg *background) *group[T] {
	return &group[T]{bg: bg, calls: make(map[string]*call[T])}
}

func (g *group[T]) do(ctx context.Context, key string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	g.mu.Lock()
	c, ok := g.calls[key]
	if !ok {
		c = &call[T]{done: make(chan struct{})}
		err := g.bg.spawn(func(ctx context.Context) {
			c.val, c.err = fn(ctx)
			g.mu.Lock()
			delete(g.calls, key)
			g.mu.Unlock()
			close(c.done)
		})
		if err != nil {
			g.mu.Unlock()
			return zero, err
		}
		g.calls[key] = c
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		return zero, context.Cause(ctx)
	}
}
