package origin

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stampede-dev/stampede/contract"
)

// fakeInfo is a file as planSweep sees it.
type fakeInfo struct {
	fs.FileInfo
	size  int64
	mtime time.Time
}

func (f fakeInfo) Size() int64        { return f.size }
func (f fakeInfo) ModTime() time.Time { return f.mtime }

func TestPlanSweep(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	file := func(name string, size int64, used time.Time, st fileState, reason int) cacheFile {
		return cacheFile{name: name, info: fakeInfo{size: size, mtime: used}, state: st, reason: reason}
	}
	files := []cacheFile{
		file("gone", 1000, ago(time.Second), stateDead, removedGone),
		file("old", 100, ago(5*time.Hour), stateLive, 0),
		file("older-in-use", 100, ago(9*time.Hour), stateInUse, 0),
		file("oldest", 100, ago(8*time.Hour), stateLive, 0),
		file("mid", 100, ago(time.Hour), stateLive, 0),
		file("b-tie", 100, ago(3*time.Hour), stateLive, 0),
		file("a-tie", 100, ago(3*time.Hour), stateLive, 0),
		file("recent", 100, ago(recentUse/2), stateLive, 0),
		file("temp", 10, ago(2*tempMaxAge), stateDead, removedTemp),
	}
	names := func(rs []removal) []string {
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s:%s", files[r.file].name, cacheRemovedNames[r.reason]))
		}
		return out
	}
	for _, tt := range []struct {
		max  int64
		want []string
		kept int64
	}{
		// Dead files go whatever the bound; the rest fit.
		{1 << 20, []string{"gone:gone", "temp:temp"}, 700},
		{700, []string{"gone:gone", "temp:temp"}, 700},
		// Past the bound, least recently used first, the in-use one
		// skipped, ties broken by name.
		{650, []string{"gone:gone", "temp:temp", "oldest:evicted"}, 600},
		{400, []string{"gone:gone", "temp:temp", "oldest:evicted", "old:evicted", "a-tie:evicted"}, 400},
		// Never the one in use or the one used just now, even if the
		// bound cannot be met without them.
		{0, []string{"gone:gone", "temp:temp", "oldest:evicted", "old:evicted", "a-tie:evicted", "b-tie:evicted", "mid:evicted"}, 200},
	} {
		got, kept := planSweep(files, tt.max, now)
		if !slices.Equal(names(got), tt.want) || kept != tt.kept {
			t.Errorf("bound %d: remove %v, keep %d bytes; want %v, %d", tt.max, names(got), kept, tt.want, tt.kept)
		}
	}
}

// testCache returns a cache in a directory of its own, without a sweeper:
// the tests sweep when they choose.
func testCache(t *testing.T, maxBytes int64) (*cache, *series) {
	t.Helper()
	m := newSeries()
	bg := newBackground()
	t.Cleanup(bg.close)
	return newCache(t.TempDir(), DefaultMemoryManifests, maxBytes, bg, m, testLogger(t)), m
}

// cacheFiles lists the files in dir, sorted.
func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

func setMtime(t *testing.T, p string, mt time.Time) {
	t.Helper()
	if err := os.Chtimes(p, mt, mt); err != nil {
		t.Fatal(err)
	}
}

func (c *cache) forget() {
	c.mu.Lock()
	clear(c.mem)
	c.mu.Unlock()
}

// Files of Dir deleted, changed or replaced by a directory, and pages gone,
// lose their manifests at the next sweep; the others keep theirs, and so do
// the manifests a running server holds in memory.
func TestSweepRemovesManifestsOfFilesGoneOrChanged(t *testing.T) {
	dir, cacheDir := t.TempDir(), t.TempDir()
	site(t, dir)
	for _, name := range []string{"keep", "delete", "change", "become-dir"} {
		writeFile(t, dir, name, randomBytes(5000, 3), t0)
	}
	ts := start(t, Config{Dir: dir, CacheDir: cacheDir})
	for _, name := range []string{"/keep", "/delete", "/change", "/become-dir", contract.BundlePrefix + "/index.html"} {
		ts.manifest(t, name)
	}
	if n := len(cacheFiles(t, cacheDir)); n != 5 {
		t.Fatalf("%d cache files, want 5", n)
	}
	remove := func(name string) {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	remove("delete")
	remove("become-dir")
	if err := os.Mkdir(filepath.Join(dir, "become-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "change", randomBytes(5000, 4), t0.Add(time.Hour))
	remove("index.html")

	// In use: this server has them all in memory.
	if err := ts.cache.sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(cacheFiles(t, cacheDir)); n != 5 {
		t.Errorf("a sweep removed manifests in use: %d files left", n)
	}
	// As after a restart, or for another server sharing the directory.
	ts.cache.forget()
	if err := ts.cache.sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, want := cacheFiles(t, cacheDir), []string{cacheName(ts.dirKey + "keep")}; !slices.Equal(got, want) {
		t.Errorf("cache files %v, want only keep's %v", got, want)
	}
	for series, want := range map[string]int64{
		`stampede_origin_manifest_cache_removed_total{reason="gone"}`:    3,
		`stampede_origin_manifest_cache_removed_total{reason="changed"}`: 1,
		`stampede_origin_manifest_cache_removed_total{reason="evicted"}`: 0,
	} {
		if got := ts.metric(t, series); got != want {
			t.Errorf("%s = %d, want %d", series, got, want)
		}
	}
	if got, want := ts.metric(t, "stampede_origin_manifest_cache_bytes"), fileSizeOf(t, cacheDir, cacheName(ts.dirKey+"keep")); got != want {
		t.Errorf("cache bytes %d, want %d", got, want)
	}
	// The file kept is still served from the cache, the changed one is
	// hashed again.
	computed := ts.metric(t, "stampede_origin_manifests_computed_total")
	ts.manifest(t, "/keep")
	ts.manifest(t, "/change")
	if got := ts.metric(t, "stampede_origin_manifests_computed_total"); got != computed+1 {
		t.Errorf("%d manifests computed, want 1", got-computed)
	}
}

func fileSizeOf(t *testing.T, dir, name string) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Past the bound, the manifests used longest ago go first; using one (a
// hit, in memory or on disk) moves it to the front.
func TestSweepEvictsLeastRecentlyUsed(t *testing.T) {
	c, m := testCache(t, 0)
	e := testEntry(t, randomBytes(fileSize, 5))
	now := time.Now()
	keys := []string{"http://up/a", "http://up/b", "http://up/c", "http://up/d", "http://up/e"}
	for i, k := range keys {
		c.store(k, e)
		setMtime(t, c.path(k), now.Add(-time.Duration(10-i)*time.Hour)) // a oldest
	}
	size := fileSizeOf(t, c.dir, cacheName(keys[0]))
	c.maxBytes = 3*size + size/2
	c.forget()
	// a, the oldest, is used: from disk, then again from memory.
	for range 2 {
		if got, _ := c.lookup(keys[0], e.v); got == nil {
			t.Fatal("lookup missed")
		}
	}
	c.forget()
	if err := c.sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := []string{cacheName(keys[0]), cacheName(keys[3]), cacheName(keys[4])}
	slices.Sort(want)
	if got := cacheFiles(t, c.dir); !slices.Equal(got, want) {
		t.Errorf("kept %v, want a, d and e: %v", got, want)
	}
	if got := int64(testutil.ToFloat64(m.cacheRemoved[removedEvicted])); got != 2 {
		t.Errorf("%d evicted, want 2", got)
	}
	if got := int64(testutil.ToFloat64(m.cacheBytes)); got != 3*size {
		t.Errorf("cache bytes %d, want %d", got, 3*size)
	}
}

// What the cache did not write is left alone; what it wrote and cannot
// read, and temporary files of dead writers, go; a file of another format
// version stays (a newer stampede may share the directory).
func TestSweepLeavesForeignFilesAlone(t *testing.T) {
	c, m := testCache(t, DefaultCacheMaxBytes)
	put := func(name, data string, mtime time.Time) {
		p := filepath.Join(c.dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		setMtime(t, p, mtime)
	}
	now := time.Now()
	good, err := encodeEntry("http://up/good", testEntry(t, randomBytes(100, 6)))
	if err != nil {
		t.Fatal(err)
	}
	hexName := func(b byte) string { return strings.Repeat(string(b), keyHexLen) + cacheExt }
	put(cacheName("http://up/good"), string(good), now)
	put(hexName('1'), string(good), now)                      // under another key's name
	put(hexName('2'), `{"version":1,"key":`, now)             // truncated
	put(hexName('3'), `not json`, now)                        // garbage
	put(hexName('4'), `{"version":2,"future":"format"}`, now) // another version
	put(hexName('5'), `{"version":1,"key":"k"}`, now)         // fields missing
	put(tempPrefix+"old", "partial", now.Add(-2*tempMaxAge))
	put(tempPrefix+"new", "partial", now)
	put("README", "mine", now.Add(-48*time.Hour))
	put(strings.Repeat("A", keyHexLen)+cacheExt, "upper case: not a name the cache writes", now)
	if err := os.Mkdir(filepath.Join(c.dir, hexName('6')), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := []string{tempPrefix + "new", cacheName("http://up/good"), hexName('4'), hexName('6'), strings.Repeat("A", keyHexLen) + cacheExt, "README"}
	slices.Sort(want)
	if got := cacheFiles(t, c.dir); !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	if got := int64(testutil.ToFloat64(m.cacheRemoved[removedUnreadable])); got != 4 {
		t.Errorf("%d unreadable removed, want 4", got)
	}
	if got := int64(testutil.ToFloat64(m.cacheRemoved[removedTemp])); got != 1 {
		t.Errorf("%d temporary files removed, want 1", got)
	}
}

// A use touches the cache file, at most once per touchEvery.
func TestLookupTouchesCacheFile(t *testing.T) {
	c, _ := testCache(t, DefaultCacheMaxBytes)
	e := testEntry(t, randomBytes(100, 7))
	c.store("k", e)
	long := time.Now().Add(-time.Hour)
	setMtime(t, c.path("k"), long)
	c.forget()
	mtime := func() time.Time {
		fi, err := os.Stat(c.path("k"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime()
	}
	got, _ := c.lookup("k", e.v) // from disk
	if got == nil || !mtime().After(long) {
		t.Fatalf("a disk hit did not touch the file (entry %v, mtime %v)", got, mtime())
	}
	setMtime(t, c.path("k"), long)
	c.lookup("k", e.v) // from memory, just touched
	if !mtime().Equal(long) {
		t.Error("touched twice within touchEvery")
	}
	got.touched.Add(-int64(touchEvery))
	c.lookup("k", e.v)
	if !mtime().After(long) {
		t.Error("a memory hit after touchEvery did not touch the file")
	}
}

func TestWroteAsksForSweepPastBound(t *testing.T) {
	c, _ := testCache(t, 1000)
	c.wrote(600)
	if len(c.kick) != 0 {
		t.Fatal("asked for a sweep below the bound")
	}
	c.wrote(600)
	c.wrote(600) // asked already: does not block
	if len(c.kick) != 1 {
		t.Fatal("no sweep asked for past the bound")
	}
	<-c.kick
	c.diskBytes.Store(0) // as a sweep does
	c.wrote(600)
	if len(c.kick) != 0 {
		t.Fatal("asked for a sweep below the bound after a sweep")
	}
}

// Servers sharing a cache directory, storing, touching and sweeping at
// once, while files change under them, never leave a cache file that does
// not decode, nor a manifest of a version that is not current.
func TestSharedCacheDirStaysConsistent(t *testing.T) {
	dir, cacheDir := t.TempDir(), t.TempDir()
	const nfiles = 6
	data := make([][]byte, nfiles)
	for i := range data {
		data[i] = randomBytes(20_000+i, uint64(i))
		writeFile(t, dir, fmt.Sprint(i), data[i], t0)
	}
	// A bound of a few manifests keeps the servers' own sweepers busy too
	// (every manifest is in use or just written, so none is evicted).
	servers := []*testServer{
		start(t, Config{Dir: dir, CacheDir: cacheDir, CacheMaxBytes: 3 * 1200, MemoryManifests: 2}),
		start(t, Config{Dir: dir, CacheDir: cacheDir, CacheMaxBytes: 3 * 1200, MemoryManifests: 2}),
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, ts := range servers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := ts.cache.sweep(ctx); err != nil && ctx.Err() == nil {
					t.Error(err)
				}
			}
		})
	}
	var mu sync.Mutex // guards data against the writer below
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			mu.Lock()
			k := i % nfiles
			data[k] = randomBytes(20_000+k, uint64(100+i))
			writeFile(t, dir, fmt.Sprint(k), data[k], t0.Add(time.Duration(i+1)*time.Second))
			mu.Unlock()
			time.Sleep(time.Millisecond) // pacing: let the readers in between
		}
	})
	for round := range 30 {
		for i, ts := range servers {
			// A 500 is allowed: the file changed each time it was hashed.
			ts.do(t, "GET", contract.ManifestPrefix+"/"+fmt.Sprint((round+i)%nfiles))
		}
	}
	cancel()
	wg.Wait()
	for _, ts := range servers {
		ts.cache.forget()
	}
	// Every cache file left decodes, and is of the version on disk or
	// an older one the next sweep removes.
	for _, name := range cacheFiles(t, cacheDir) {
		if strings.HasPrefix(name, tempPrefix) {
			t.Errorf("temporary file %s left behind", name)
			continue
		}
		b, err := os.ReadFile(filepath.Join(cacheDir, name))
		if err != nil {
			t.Fatal(err)
		}
		h, err := readHeader(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := decodeEntry(b, h.Key); err != nil {
			t.Errorf("%s does not decode: %v", name, err)
		}
	}
	// And each server serves every file's current manifest.
	for _, ts := range servers {
		for i := range nfiles {
			m := ts.manifest(t, "/"+fmt.Sprint(i))
			verify(t, m, data[i])
		}
	}
}
