package origin

import (
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/contract"
)

// TestDirectoryIndexHTML: a directory with an index.html answers with it, as
// nginx, Go's FileServer and python's http.server do, and as the file itself:
// its manifest and page bundle are linked, so a site's front page is
// delivered by the swarm like any other file. Without one, the listing.
func TestDirectoryIndexHTML(t *testing.T) {
	dir := t.TempDir()
	page := "<!doctype html><title>front</title><img src=logo.png>"
	writeFile(t, dir, "index.html", []byte(page), t0)
	writeFile(t, dir, "logo.png", []byte("png"), t0)
	writeFile(t, dir, "docs/index.html", []byte("docs page"), t0)
	writeFile(t, dir, "files/a.bin", []byte("a"), t0)
	writeFile(t, dir, "odd/index.html/x", []byte("x"), t0) // an index.html that is a directory
	ts := start(t, Config{Dir: dir})

	res, body := ts.do(t, "GET", "/")
	if res.StatusCode != 200 || string(body) != page {
		t.Fatalf("GET /: %s %q", res.Status, body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("GET /: Content-Type %q", ct)
	}
	links := strings.Join(res.Header.Values("Link"), ", ")
	if want := contract.ManifestPath("/index.html"); !strings.Contains(links, want) {
		t.Errorf("GET /: Link %q lacks the index's manifest %s", links, want)
	}
	if !strings.Contains(links, "stampede-bundle") {
		t.Errorf("GET /: Link %q lacks the page bundle", links)
	}
	if direct, _ := ts.do(t, "GET", "/index.html"); direct.Header.Get("Etag") != res.Header.Get("Etag") {
		t.Errorf("/ and /index.html differ: Etag %q and %q", res.Header.Get("Etag"), direct.Header.Get("Etag"))
	}
	if res, body := ts.do(t, "GET", "/docs/"); res.StatusCode != 200 || string(body) != "docs page" {
		t.Errorf("GET /docs/: %s %q", res.Status, body)
	}
	// Without the slash, the redirect comes first, so relative links resolve.
	if res, body := ts.do(t, "GET", "/docs"); res.Request.URL.Path != "/docs/" || string(body) != "docs page" {
		t.Errorf("GET /docs: %s, ended at %s: %q", res.Status, res.Request.URL, body)
	}
	if res, body := ts.do(t, "GET", "/files/"); res.StatusCode != 200 || !strings.Contains(string(body), `<a href="a.bin">a.bin</a>`) {
		t.Errorf("GET /files/ (no index.html): %s %q", res.Status, body)
	}
	if res, body := ts.do(t, "GET", "/odd/"); res.StatusCode != 200 || !strings.Contains(string(body), `<a href="index.html/">`) {
		t.Errorf("GET /odd/ (index.html is a directory): %s %q", res.Status, body)
	}
}
