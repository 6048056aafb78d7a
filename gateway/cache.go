package gateway

import (
	"bytes"
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/originclient"
	"github.com/stampede-dev/stampede/store"
)

// The cache: files by content (manifest root and size), on disk in one
// directory as NAME (complete), NAME.part (downloading) and NAME.manifest
// (the manifest, written first), NAME being ROOT-SIZE~ID with ID random
// per download, so that a download never shares a path with an earlier
// one of the same content still being removed. It is bounded in bytes; the
// least recently used complete file nobody reads is evicted first. The
// most recently used complete files (MaxSeeds of them) keep a node running
// that seeds them.

// errCacheFull: no room for a file even after evicting every file that
// may be evicted.
var errCacheFull = errors.New("the cache has no room for this file")

const (
	manifestSuffix = ".manifest"
	idSep          = "~"
)

type cache struct {
	g   *Gateway
	dir string
	max int64

	mu      sync.Mutex // guards the following, and every object's c-fields
	objects map[string]*object
	lru     *list.List // of *object, most recently used first
	used    int64      // bytes of the files in objects
	seeds   int        // objects whose seeding node runs

	// testHookComplete, set before any request, is called when a
	// download completes, after the seeding decision.
	testHookComplete func(key string)

	// verified is closed when the pass over the files found at start
	// (verifyAll) is over; dropped counts the files it dropped.
	verified chan struct{}
	dropped  int
}

// openCache loads the index of dir: complete files with their manifests.
// Partial downloads from an earlier run are removed (their swarm session
// is gone with the process; a new request starts afresh).
func openCache(g *Gateway, dir string, max int64) (*cache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("gateway: cache: %w", err)
	}
	c := &cache{g: g, dir: dir, max: max, objects: map[string]*object{}, lru: list.New(), verified: make(chan struct{})}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("gateway: cache: %w", err)
	}
	type found struct {
		o   *object
		use time.Time
	}
	var keep []found
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.Contains(name, idSep) && !strings.Contains(name, ".") && !names[name+manifestSuffix]:
			c.remove(name) // a file of ours without its manifest
		case strings.HasSuffix(name, store.PartSuffix):
			c.remove(name)
		case strings.HasSuffix(name, manifestSuffix):
			base := strings.TrimSuffix(name, manifestSuffix)
			o, use, err := c.load(base)
			if err != nil {
				g.log.Warn("cache: dropping a file", "name", base, "err", err)
				c.remove(base)
				c.remove(name)
				continue
			}
			keep = append(keep, found{o, use})
		}
	}
	slices.SortFunc(keep, func(a, b found) int { return b.use.Compare(a.use) })
	for _, f := range keep {
		if c.objects[f.o.key] != nil { // the same content twice: keep the newer
			c.remove(filepath.Base(f.o.path))
			c.remove(filepath.Base(f.o.path) + manifestSuffix)
			continue
		}
		c.objects[f.o.key] = f.o
		f.o.elem = c.lru.PushBack(f.o)
		c.used += f.o.m.Size
	}
	c.mu.Lock()
	var gone []*object
	for c.used > c.max {
		o := c.evictOneLocked()
		if o == nil {
			break
		}
		gone = append(gone, o)
	}
	c.mu.Unlock()
	for _, o := range gone {
		o.destroy()
	}
	g.log.Info("cache loaded", "dir", dir, "files", len(c.objects), "bytes", c.used)
	return c, nil
}

// verifyAll checks every complete file found at start against its
// manifest, the whole file hashed again, and drops those that differ (a
// disk's damage, an edit by hand), so that no reader ever starts on one.
// It runs once, in the background, on one core: meanwhile every piece read is still
// verified as it is read (object.go), so a damaged file is never passed
// on either way; this pass only finds the damage before a reader does.
func (c *cache) verifyAll(ctx context.Context) {
	defer close(c.verified)
	c.mu.Lock()
	var objs []*object
	var bytes int64
	for _, o := range c.objects {
		if o.done {
			objs = append(objs, o)
			bytes += o.m.Size
		}
	}
	c.mu.Unlock()
	if len(objs) == 0 {
		return
	}
	c.g.log.Info("cache: verifying the files found at start", "files", len(objs), "bytes", bytes)
	start := time.Now()
	dropped := 0
	for _, o := range objs {
		if ctx.Err() != nil {
			return
		}
		if err := verifyFile(ctx, o.path, o.m); err != nil {
			if ctx.Err() != nil {
				return
			}
			c.g.log.Warn("cache: dropping a damaged file", "root", o.m.Root, "err", err)
			c.drop(o)
			dropped++
		}
	}
	c.mu.Lock()
	c.dropped = dropped
	c.mu.Unlock()
	c.g.log.Info("cache: verified", "files", len(objs), "dropped", dropped, "took", time.Since(start).Round(time.Millisecond))
}

// verifyFile hashes the file at path and checks its root and size against
// m's.
func verifyFile(ctx context.Context, path string, m *manifest.Manifest) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != m.Size {
		return fmt.Errorf("%d bytes, the manifest says %d", fi.Size(), m.Size)
	}
	got, err := manifest.FromReaderAt(ctxReaderAt{ctx, f}, m.Size, m.Name, 1)
	if err != nil {
		return err
	}
	if got.Root != m.Root {
		return fmt.Errorf("root %s, the manifest says %s", got.Root, m.Root)
	}
	return nil
}

// ctxReaderAt stops a hash pass when ctx ends (the gateway closing).
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

// load reads the manifest of the complete file base and checks the file's
// size; its pieces are verified as they are first read, and the whole file
// again by verifyAll.
func (c *cache) load(base string) (*object, time.Time, error) {
	path := filepath.Join(c.dir, base)
	data, err := os.ReadFile(path + manifestSuffix)
	if err != nil {
		return nil, time.Time{}, err
	}
	m, err := manifest.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, time.Time{}, err
	}
	key, _, _ := strings.Cut(base, idSep)
	if key != objectKey(m) {
		return nil, time.Time{}, fmt.Errorf("name does not match the manifest (root %s, %d bytes)", m.Root, m.Size)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, time.Time{}, err
	}
	if fi.Size() != m.Size {
		return nil, time.Time{}, fmt.Errorf("%d bytes, the manifest says %d", fi.Size(), m.Size)
	}
	o := newObject(c, m, path)
	o.done = true
	o.complete = true
	close(o.ready)
	return o, fi.ModTime(), nil
}

func (c *cache) remove(name string) {
	if err := os.Remove(filepath.Join(c.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.g.log.Warn("cache: cannot remove a file", "name", name, "err", err)
	}
}

func objectKey(m *manifest.Manifest) string { return fmt.Sprintf("%s-%d", m.Root, m.Size) }

// lookup returns the cached object of key, pinned for one reader (release
// it), or nil.
func (c *cache) lookup(key string) (*object, error) {
	c.mu.Lock()
	o := c.objects[key]
	if o == nil {
		c.mu.Unlock()
		return nil, nil
	}
	c.pinLocked(o)
	c.mu.Unlock()
	return c.ready(o)
}

// acquire returns the object for m, pinned for one reader (release it):
// the cached one, or a new one whose download from src starts now.
func (c *cache) acquire(m *manifest.Manifest, src *originclient.Source) (*object, error) {
	key := objectKey(m)
	c.mu.Lock()
	if o := c.objects[key]; o != nil {
		c.pinLocked(o)
		c.mu.Unlock()
		return c.ready(o)
	}
	if m.Size > c.max {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: the file has %d bytes, the cache holds %d", errCacheFull, m.Size, c.max)
	}
	var gone []*object
	for c.used+m.Size > c.max {
		o := c.evictOneLocked()
		if o == nil {
			break
		}
		gone = append(gone, o)
	}
	if c.used+m.Size > c.max {
		c.mu.Unlock()
		c.destroyLater(gone)
		return nil, fmt.Errorf("%w: %d bytes in use by files being read or downloaded, %d more wanted, %d allowed", errCacheFull, c.used, m.Size, c.max)
	}
	var id [4]byte
	rand.Read(id[:])
	o := newObject(c, m, filepath.Join(c.dir, key+idSep+hex.EncodeToString(id[:])))
	c.objects[key] = o
	o.elem = c.lru.PushFront(o)
	c.used += m.Size
	o.readers = 1
	c.mu.Unlock()
	c.destroyLater(gone)

	err := o.startDownload(src)
	if err != nil {
		c.g.log.Warn("cannot start a download", "root", m.Root, "err", err)
		o.fail(err)
	}
	close(o.ready)
	if err != nil {
		c.release(o)
		return nil, err
	}
	return o, nil
}

// has reports whether key is in the index.
func (c *cache) has(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.objects[key] != nil
}

func (c *cache) pinLocked(o *object) {
	o.readers++
	c.lru.MoveToFront(o.elem)
}

// ready waits until o's download has started (or failed to), and for a
// complete file makes sure it is open and, within the bound, seeding.
func (c *cache) ready(o *object) (*object, error) {
	<-o.ready
	if err := o.failed(); err != nil {
		c.release(o)
		return nil, err
	}
	if err := o.open(); err != nil {
		c.release(o)
		return nil, err
	}
	return o, nil
}

// release unpins o; a file removed from the cache goes once unread.
func (c *cache) release(o *object) {
	c.mu.Lock()
	o.readers--
	destroy := o.gone && o.readers == 0
	idle := !o.gone && o.readers == 0 && o.done
	c.mu.Unlock()
	switch {
	case destroy:
		c.destroyLater([]*object{o})
	case idle:
		o.closeIfIdle()
	}
}

// evictOneLocked removes the least recently used evictable object from
// the index and returns it (the caller destroys it), or returns nil.
func (c *cache) evictOneLocked() *object {
	for e := c.lru.Back(); e != nil; e = e.Prev() {
		o := e.Value.(*object)
		if o.readers == 0 && o.done {
			c.g.log.Info("cache: evicting", "root", o.m.Root, "size", o.m.Size)
			c.dropLocked(o)
			return o
		}
	}
	return nil
}

// dropLocked takes o out of the index.
func (c *cache) dropLocked(o *object) {
	if o.gone {
		return
	}
	o.gone = true
	if c.objects[o.key] == o {
		delete(c.objects, o.key)
	}
	c.lru.Remove(o.elem)
	c.used -= o.m.Size
	if o.seeding {
		o.seeding = false
		c.seeds--
	}
}

// drop takes a failed object out of the index; it is destroyed once
// unread.
func (c *cache) drop(o *object) {
	c.mu.Lock()
	destroy := !o.gone && o.readers == 0
	c.dropLocked(o)
	c.mu.Unlock()
	if destroy {
		c.destroyLater([]*object{o})
	}
}

func (c *cache) destroyLater(objs []*object) {
	for _, o := range objs {
		if !c.g.spawn(o.destroy) {
			o.destroy() // closing: nodes are stopping anyway
		}
	}
}

// completed records that o is complete and decides whether it seeds.
func (c *cache) completed(o *object) {
	c.mu.Lock()
	o.done = true
	if !o.gone {
		c.startSeedingLocked(o)
	}
	c.mu.Unlock()
	if c.testHookComplete != nil {
		c.testHookComplete(o.key)
	}
}

// wantsSeed reports whether a complete o without a node should get one.
func (c *cache) wantsSeed(o *object) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o.gone || o.seeding || c.g.cfg.MaxSeeds == 0 || len(o.m.Trackers) == 0 || o.hasNode() {
		return false
	}
	c.startSeedingLocked(o)
	return true
}

// startSeedingLocked counts o as seeding and stops the least recently
// used seeders past MaxSeeds; o, just used, is the most recent.
func (c *cache) startSeedingLocked(o *object) {
	if c.g.cfg.MaxSeeds == 0 || len(o.m.Trackers) == 0 {
		o.stopNode()
		return
	}
	if !o.seeding {
		o.seeding = true
		c.seeds++
	}
	for e := c.lru.Back(); e != nil && c.seeds > c.g.cfg.MaxSeeds; e = e.Prev() {
		old := e.Value.(*object)
		if old != o && old.seeding {
			old.seeding = false
			c.seeds--
			old.stopNode()
		}
	}
}

// seedingStopped records that o's node ended.
func (c *cache) seedingStopped(o *object) {
	c.mu.Lock()
	if o.seeding {
		o.seeding = false
		c.seeds--
	}
	idle := o.readers == 0 && !o.gone
	c.mu.Unlock()
	if idle {
		o.closeIfIdle()
	}
}

// Stats describes the cache, for tests and logs.
type Stats struct {
	// Dropped counts the files found damaged by the pass at start.
	Dropped  int
	Files    int   // complete or downloading
	Bytes    int64 // their sizes
	Seeding  int   // files whose node seeds
	Reading  int   // files with readers
	Complete int
}

func (c *cache) stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Files: len(c.objects), Bytes: c.used, Seeding: c.seeds, Dropped: c.dropped}
	for _, o := range c.objects {
		if o.readers > 0 {
			st.Reading++
		}
		if o.done {
			st.Complete++
		}
	}
	return st
}

// close stops using every file (the nodes are already stopped).
func (c *cache) close() {
	c.mu.Lock()
	objs := make([]*object, 0, len(c.objects))
	for _, o := range c.objects {
		objs = append(objs, o)
	}
	c.mu.Unlock()
	for _, o := range objs {
		o.closeStore()
	}
}
