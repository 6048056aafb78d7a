package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/manifest"
)

func keyOf(t *testing.T, data []byte, name string) string {
	t.Helper()
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), name)
	if err != nil {
		t.Fatal(err)
	}
	return objectKey(m)
}

func (g *testGateway) cachedKeys() []string {
	g.cache.mu.Lock()
	defer g.cache.mu.Unlock()
	var keys []string
	for k := range g.cache.objects {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fetchWhole downloads u through the gateway as a proxy and checks the
// body.
func (g *testGateway) fetchWhole(t *testing.T, u string, want []byte) *http.Response {
	t.Helper()
	resp, body := get(t, g.proxyClient(), "GET", u, nil)
	mustEqual(t, u, body, want)
	return resp
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	files := map[string][]byte{
		"a": randomBytes(1<<20, 20), "b": randomBytes(1<<20, 21),
		"c": randomBytes(1<<20, 22), "d": randomBytes(1<<20, 23),
		"big": randomBytes(3<<20, 24),
	}
	o := startOrigin(t, files, originOpts{})
	g := startGateway(t, Config{CacheSize: 2<<20 + 1<<19}) // room for two
	key := func(n string) string { return keyOf(t, files[n], n) }
	fetchNew := func(n string) {
		t.Helper()
		g.fetchWhole(t, o.base+"/"+n, files[n])
		if got := g.awaitComplete(t); got != key(n) {
			t.Fatalf("completed %s, want %s", got, key(n))
		}
	}
	fetchNew("a")
	fetchNew("b")
	g.fetchWhole(t, o.base+"/a", files["a"]) // a is now the most recent
	fetchNew("c")                            // b goes
	if got, want := g.cachedKeys(), sorted(key("a"), key("c")); !slices.Equal(got, want) {
		t.Fatalf("cache holds %v, want a and c %v", got, want)
	}
	before := o.count("RANGE /b")
	fetchNew("b") // from the origin again; a goes
	if o.count("RANGE /b") == before {
		t.Error("b was served after its eviction without asking the origin")
	}

	// A file being read is not evicted: pin c as a reader does, then
	// bring in two more files.
	pinned, err := g.cache.lookup(key("c"))
	if err != nil || pinned == nil {
		t.Fatalf("c not cached: %v", err)
	}
	fetchNew("d") // b goes, not c
	fetchNew("a") // d goes, not c
	if got, want := g.cachedKeys(), sorted(key("a"), key("c")); !slices.Equal(got, want) {
		t.Fatalf("cache holds %v, want a and c %v", got, want)
	}
	// With c pinned and a pinned too, nothing can make room: the next
	// file goes straight through, whole and correct.
	pinnedA, _ := g.cache.lookup(key("a"))
	resp := g.fetchWhole(t, o.base+"/b", files["b"])
	if resp.Header.Get(Header) != "direct" {
		t.Errorf("b with a full cache: answered %q, want direct", resp.Header.Get(Header))
	}
	g.cache.release(pinnedA)
	g.cache.release(pinned)

	// Larger than the whole cache: straight through.
	resp = g.fetchWhole(t, o.base+"/big", files["big"])
	if resp.Header.Get(Header) != "direct" {
		t.Errorf("a file larger than the cache: answered %q, want direct", resp.Header.Get(Header))
	}
	if st := g.cache.stats(); st.Bytes > 2<<20+1<<19 {
		t.Errorf("cache holds %d bytes, more than its bound", st.Bytes)
	}
	// Evicted files leave the disk.
	waitRemoved(t, g)
}

// waitRemoved checks that the cache directory holds only the files of the
// index (removals run in the background: Close waits for them).
func waitRemoved(t *testing.T, g *testGateway) {
	t.Helper()
	dir := g.cfg.CacheDir
	keys := g.cachedKeys()
	g.stop()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		k, _, _ := strings.Cut(e.Name(), idSep)
		if !slices.Contains(keys, k) {
			t.Errorf("%s left in the cache directory", e.Name())
		}
	}
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

func TestRestartServesFromCache(t *testing.T) {
	data := randomBytes(2<<20+5, 30)
	o := startOrigin(t, map[string][]byte{"f.bin": data}, originOpts{})
	dir := t.TempDir()
	g1 := startGateway(t, Config{CacheDir: dir})
	g1.fetchWhole(t, o.base+"/f.bin", data)
	g1.awaitComplete(t)
	g1.stop()
	pieces := o.count("RANGE /f.bin")

	g2 := startGateway(t, Config{CacheDir: dir})
	resp := g2.fetchWhole(t, o.base+"/f.bin", data)
	if resp.Header.Get(Header) != "swarm" || o.count("RANGE /f.bin") != pieces {
		t.Fatalf("after a restart: answered %q, %d more pieces from the origin", resp.Header.Get(Header), o.count("RANGE /f.bin")-pieces)
	}
	g2.stop()

	// Damage the cached copy while no gateway runs: the pass over the
	// cache at start finds it and drops it, and the next request
	// downloads the file again, whole.
	damage := func() {
		t.Helper()
		ents, _ := os.ReadDir(dir)
		var cached string
		for _, e := range ents {
			if !strings.Contains(e.Name(), ".") {
				cached = filepath.Join(dir, e.Name())
			}
		}
		f, err := os.OpenFile(cached, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte{data[damagedAt] ^ 0xff}, damagedAt); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	damage()
	g3 := startGateway(t, Config{CacheDir: dir})
	<-g3.cache.verified
	if st := g3.cache.stats(); st.Dropped != 1 || st.Files != 0 {
		t.Fatalf("after the pass at start: %+v, want the damaged file dropped", st)
	}
	g3.fetchWhole(t, o.base+"/f.bin", data)
	g3.awaitComplete(t)
	if o.count("RANGE /f.bin") == pieces {
		t.Error("the damaged file was not downloaded again")
	}
	pieces = o.count("RANGE /f.bin")
	g3.stop()

	// Damage it again after the pass at start: the damaged piece is never
	// sent; the response breaks off before it, and the next request
	// downloads the file again.
	g4 := startGateway(t, Config{CacheDir: dir})
	<-g4.cache.verified
	damage()
	r, err := g4.proxyClient().Get(o.base + "/f.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err == nil || len(got) >= len(data) {
		t.Fatalf("a damaged cache file was served whole (%d bytes, err %v)", len(got), err)
	}
	if len(got) > damagedAt || !bytes.Equal(got, data[:len(got)]) {
		t.Fatalf("got %d bytes before the break; they must be the file's first bytes, none past the damage at %d", len(got), damagedAt)
	}
	g4.fetchWhole(t, o.base+"/f.bin", data)
	if o.count("RANGE /f.bin") == pieces {
		t.Error("the damaged file was not downloaded again")
	}
}

// damagedAt is where TestRestartServesFromCache damages the cached copy.
const damagedAt = 1 << 20

// A piece the origin keeps sending corrupt ends the response before it:
// the client sees a broken transfer, never bad bytes or a short body that
// looks whole.
func TestCorruptOriginAborts(t *testing.T) {
	data := randomBytes(2<<20, 31)
	o := startOrigin(t, map[string][]byte{"f.bin": data}, originOpts{})
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "f.bin")
	if err != nil {
		t.Fatal(err)
	}
	bad := m.NumPieces() / 2
	o.setWrap(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		want := "bytes=" + strconv.FormatInt(m.PieceOffset(bad), 10) + "-"
		if !strings.HasPrefix(r.Header.Get("Range"), want) {
			return false
		}
		next.ServeHTTP(&corruptingWriter{ResponseWriter: w}, r)
		return true
	})
	g := startGateway(t, Config{})
	resp, err := g.proxyClient().Get(o.base + "/f.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("the transfer ended cleanly with %d of %d bytes", len(got), len(data))
	}
	if int64(len(got)) > m.PieceOffset(bad) || !bytes.Equal(got, data[:len(got)]) {
		t.Fatalf("%d bytes before the break: must be the file's, none from piece %d at %d", len(got), bad, m.PieceOffset(bad))
	}
	if n := o.count("RANGE /f.bin"); n < m.NumPieces()/2 {
		t.Errorf("only %d pieces asked of the origin", n)
	}
}

// corruptingWriter flips the first byte of the body.
type corruptingWriter struct {
	http.ResponseWriter
	done bool
}

func (c *corruptingWriter) Write(p []byte) (int, error) {
	if !c.done && len(p) > 0 {
		c.done = true
		q := append([]byte{p[0] ^ 0x55}, p[1:]...)
		return c.ResponseWriter.Write(q)
	}
	return c.ResponseWriter.Write(p)
}

// The gateway seeds what it downloaded: a downloader of the same file
// gets it from the gateway's node, not from the origin.
func TestSeedsToTheSwarm(t *testing.T) {
	data := randomBytes(2<<20, 40)
	other := randomBytes(1<<20, 41)
	o := startOrigin(t, map[string][]byte{"f.bin": data, "g.bin": other}, originOpts{})
	g := startGateway(t, Config{MaxSeeds: 1})
	g.fetchWhole(t, o.base+"/f.bin", data)
	g.awaitComplete(t)
	if st := g.cache.stats(); st.Seeding != 1 {
		t.Fatalf("seeding %d files, want 1", st.Seeding)
	}
	pieces := o.count("RANGE /f.bin")

	out := filepath.Join(t.TempDir(), "copy.bin")
	d, err := fetch.New(fetch.Config{URL: o.base + "/f.bin", Output: out, Logger: testLogger(t),
		Swarm: fetch.SwarmConfig{ListenAddr: "127.0.0.1:0", Node: fastNode()}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	copyData, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "downloader's copy", copyData, data)
	if res.Swarm == nil || res.Swarm.BytesFromPeers < int64(len(data))/2 {
		t.Fatalf("the downloader got %+v from peers; want most of the file from the gateway", res.Swarm)
	}
	t.Logf("downloader: %d bytes from peers, %d pieces from the origin", res.Swarm.BytesFromPeers, o.count("RANGE /f.bin")-pieces)

	// MaxSeeds 1: a second file takes the seeding slot.
	g.fetchWhole(t, o.base+"/g.bin", other)
	g.awaitComplete(t)
	if st := g.cache.stats(); st.Seeding != 1 {
		t.Fatalf("seeding %d files, want 1 (MaxSeeds)", st.Seeding)
	}
}
