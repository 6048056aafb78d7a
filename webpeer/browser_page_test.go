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
  return {via: r.headers.get('stampede-via') || '', len: b.byteLength, stats: self.stampede ? stampede.page.stats() : {}};
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
