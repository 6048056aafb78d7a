package webpeer_test

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// fetchJSOf is fetchJS for another path.
func fetchJSOf(path string) string {
	return `(async () => {
  const r = await fetch('` + path + `');
  const b = await r.arrayBuffer();
  return {via: r.headers.get('stampede-via') || '', len: b.byteLength, stats: self.stampede && stampede.page ? stampede.page.stats() : {}};
})()`
}

// TestBrowserNoTag: the worker's scope is the whole site, but a page
// without the tag pays nothing for it: its requests go through untouched,
// not even a manifest asked; the next page with the tag swarms again.
func TestBrowserNoTag(t *testing.T) {
	needBrowser(t)
	nss := setupNet(t, 1)
	o := startOrigin(t)
	os.WriteFile(filepath.Join(o.www, "plain.html"), []byte(`<!doctype html><title>plain</title><p>no tag`), 0o644)
	a := openBrowser(t, nss[0], "A", o) // the worker installed, for the whole site

	a.do(chromedp.Navigate(o.url + "/plain.html"))
	var controlled bool
	a.eval(`!!navigator.serviceWorker.controller`, &controlled)
	if !controlled {
		t.Fatal("the page without the tag is not under the worker: nothing is tested")
	}
	var f fetched
	a.eval(fetchJSOf("/obj.bin"), &f)
	if f.Len != len(o.obj) || f.Via != "" {
		t.Errorf("a page without the tag: %d bytes via %q, want %d from the origin", f.Len, f.Via, len(o.obj))
	}
	if n := o.manifestAsks("/obj.bin"); n != 0 {
		t.Errorf("a page without the tag: the worker asked for the manifest %d times, want 0", n)
	}

	// The same object from a page with the tag goes through the swarm.
	a.do(chromedp.Navigate(o.url + "/index.html"))
	var ready string
	a.eval(`stampede.ready`, &ready)
	a.fetch(o)
	if n := o.manifestAsks("/obj.bin"); n == 0 {
		t.Error("a page with the tag: no manifest asked")
	}
}

// TestBrowserMemory: a page holds at most max_memory of objects: it drops
// the one used least recently to make room for the next, and leaves an
// object larger than the bound to the origin.
func TestBrowserMemory(t *testing.T) {
	needBrowser(t)
	nss := setupNet(t, 1)
	cfg := testPeerConfig
	cfg.MaxMemory = 3 << 19 // 1.5 MiB: one 1 MiB object, not two
	o := startOriginRate(t, 0, cfg)
	for name, size := range map[string]int{"two.bin": 1 << 20, "big.bin": 2 << 20} {
		b := make([]byte, size)
		rand.Read(b)
		os.WriteFile(filepath.Join(o.www, name), b, 0o644)
	}
	a := openBrowser(t, nss[0], "A", o)
	a.fetch(o)
	var f struct {
		fetched
		Stats struct {
			stats
			Held int64 `json:"held"`
		} `json:"stats"`
	}
	a.eval(fetchJSOf("/two.bin"), &f)
	if f.Via != "swarm" || f.Len != 1<<20 {
		t.Fatalf("two.bin: %d bytes via %q, want 1 MiB through the swarm", f.Len, f.Via)
	}
	var swarms int
	a.eval(`stampede.page.swarms.size`, &swarms)
	if f.Stats.Held != 1<<20 || swarms != 1 {
		t.Errorf("after two 1 MiB objects under a 1.5 MiB bound: the page holds %d bytes in %d swarms, want one object's", f.Stats.Held, swarms)
	}
	if f.Stats.FromOrigin != 2<<20 {
		t.Errorf("the dropped swarm's counts are lost: %+v", f.Stats)
	}
	a.eval(fetchJSOf("/big.bin"), &f)
	if f.Via != "" || f.Len != 2<<20 {
		t.Errorf("big.bin, over the bound: %d bytes via %q, want 2 MiB from the origin", f.Len, f.Via)
	}
	if f.Stats.Held > cfg.MaxMemory {
		t.Errorf("the page holds %d bytes, over its bound of %d", f.Stats.Held, cfg.MaxMemory)
	}
}

// TestBrowserBundle: the assets of a page, each too small to swarm, come
// through the swarm of the page's bundle (origin/bundle.go): the first
// visitor's from the origin, the next one's from the first, every byte
// the asset's.
func TestBrowserBundle(t *testing.T) {
	needBrowser(t)
	nss := setupNet(t, 2)
	o := startOrigin(t)
	assets := map[string][]byte{}
	for _, name := range []string{"a.png", "b.png"} {
		b := make([]byte, 40<<10) // under min_size: no swarm of its own
		rand.Read(b)
		assets[name] = b
		os.WriteFile(filepath.Join(o.www, name), b, 0o644)
	}
	os.WriteFile(filepath.Join(o.www, "gallery.html"), []byte(`<!doctype html><title>gallery</title>
<script type="module" src="/.well-known/stampede/peer.js"></script><img src="a.png"><img src="/b.png">`), 0o644)
	get := func(b *browser, name string) fetched {
		var f struct {
			fetched
			Same bool `json:"same"`
		}
		b.eval(`(async () => {
  const r = await fetch('/`+name+`');
  const got = new Uint8Array(await r.arrayBuffer());
  const want = new Uint8Array(await (await fetch('/`+name+`?plain')).arrayBuffer());
  return {via: r.headers.get('stampede-via') || '', len: got.length, same: got.length === want.length && got.every((x, i) => x === want[i]), stats: stampede.page.stats()};
})()`, &f)
		if f.Via != "swarm" || f.Len != len(assets[name]) || !f.Same {
			t.Fatalf("%s: %s: %d bytes via %q, the file's: %v; want its %d through the swarm", b.name, name, f.Len, f.Via, f.Same, len(assets[name]))
		}
		return f.fetched
	}
	a := openPage(t, nss[0], "A", o, "/gallery.html")
	get(a, "a.png")
	f := get(a, "b.png")
	bundle := f.Stats.FromOrigin
	if bundle < 80<<10 || f.Stats.FromPeers != 0 {
		t.Errorf("A, alone: %+v, want the bundle (the page and both assets) from the origin", f.Stats)
	}
	b := openPage(t, nss[1], "B", o, "/gallery.html")
	get(b, "b.png")
	if f := get(b, "a.png"); f.Stats.FromPeers != bundle || f.Stats.FromOrigin != 0 {
		t.Errorf("B: %+v, want the %d-byte bundle from A", f.Stats, bundle)
	}
}
