package origin

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/contract"
)

// hiddenDir is a directory with dotfiles in every place a request can
// name: at the top, below a dot directory, below a plain one, in
// .well-known, and as the asset of a page.
func hiddenDir(t *testing.T) string {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"ok.bin":                 "fine",
		".secret":                "SECRET",
		".git/config":            "SECRET",
		".git/index.html":        "SECRET",
		"sub/.env":               "SECRET",
		"sub/ok.bin":             "fine",
		".hidden.html":           "<img src=ok.bin>SECRET",
		"page.html":              `<img src="/.secret"><img src=sub/.env><link rel=stylesheet href=.git/config><img src=ok.bin>`,
		".well-known/thing.txt":  "well known",
		".well-known/.secret":    "SECRET",
		"sub/.well-known/x.txt":  "SECRET", // .well-known is a top-level name only
		".well-known/sub/ok.txt": "well known",
	} {
		writeFile(t, dir, name, []byte(body), t0)
	}
	return dir
}

// TestDotfilesHidden: a name with a segment that starts with a dot is not
// served, by any route, nor listed, nor part of a bundle; /.well-known/ is
// exempt. Config.Dotfiles serves them.
func TestDotfilesHidden(t *testing.T) {
	dir := hiddenDir(t)
	ts := start(t, Config{Dir: dir})

	hidden := []string{"/.secret", "/%2esecret", "/.git/config", "/.git/", "/.git", "/sub/.env", "/sub/./.env",
		"/.hidden.html", "/.well-known/.secret", "/sub/.well-known/x.txt"}
	var paths []string
	for _, p := range hidden {
		paths = append(paths, p, contract.ManifestPrefix+p, contract.BundlePrefix+p, contract.BundleIndexPrefix+p,
			contract.ManifestPrefix+contract.BundlePrefix+p)
	}
	for _, p := range paths {
		for _, h := range [][]string{nil, {"Range", "bytes=0-3"}} {
			for _, method := range []string{"GET", "HEAD"} {
				res, body := ts.do(t, method, p, h...)
				if res.StatusCode != http.StatusNotFound || strings.Contains(string(body), "SECRET") {
					t.Errorf("%s %s %q: %s %q, want 404", method, p, h, res.Status, body)
				}
			}
		}
	}

	for _, p := range []string{"/ok.bin", "/sub/ok.bin", "/.well-known/thing.txt", "/.well-known/sub/ok.txt",
		contract.ManifestPrefix + "/.well-known/thing.txt"} {
		if res, _ := ts.do(t, "GET", p); res.StatusCode != 200 {
			t.Errorf("GET %s: %s, want 200", p, res.Status)
		}
	}

	_, body := ts.do(t, "GET", "/")
	for _, name := range []string{".secret", ".git", ".hidden.html"} {
		if strings.Contains(string(body), name) {
			t.Errorf("the listing of / shows %s: %q", name, body)
		}
	}
	if !strings.Contains(string(body), `<a href=".well-known/">`) || !strings.Contains(string(body), `<a href="ok.bin">`) {
		t.Errorf("the listing of / lacks .well-known/ or ok.bin: %q", body)
	}
	if _, body := ts.do(t, "GET", "/sub/"); strings.Contains(string(body), ".env") || strings.Contains(string(body), ".well-known") {
		t.Errorf("the listing of /sub/ shows a dotfile: %q", body)
	}
	if _, body := ts.do(t, "GET", "/.well-known/"); strings.Contains(string(body), ".secret") || !strings.Contains(string(body), "thing.txt") {
		t.Errorf("the listing of /.well-known/: %q", body)
	}

	// A page's dot assets stay out of its bundle and its index.
	res, body := ts.do(t, "GET", contract.BundleIndexPrefix+"/page.html")
	if res.StatusCode != 200 {
		t.Fatalf("bundle index of page.html: %s %q", res.Status, body)
	}
	idx, err := contract.DecodeBundleIndex(body)
	if err != nil {
		t.Fatal(err)
	}
	var members []string
	for _, m := range idx.Members {
		members = append(members, m.Path)
	}
	if got := strings.Join(members, " "); got != "/page.html /ok.bin" {
		t.Errorf("bundle members %q, want /page.html /ok.bin", got)
	}
	if _, body := ts.do(t, "GET", contract.BundlePrefix+"/page.html"); strings.Contains(string(body), "SECRET") {
		t.Errorf("the bundle of page.html holds a dotfile: %q", body)
	}

	// Warming hashes nothing that is not served.
	if err := ts.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".secret", ".git/config", "sub/.env"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if e, _ := ts.cache.lookup(ts.dirKey+name, fileValidators(fi)); e != nil {
			t.Errorf("Warm hashed %s", name)
		}
	}

	open := start(t, Config{Dir: dir, Dotfiles: true})
	for _, p := range []string{"/.secret", "/.git/config", "/sub/.env", contract.ManifestPrefix + "/.secret",
		contract.BundleIndexPrefix + "/.hidden.html"} {
		if res, _ := open.do(t, "GET", p); res.StatusCode != 200 {
			t.Errorf("Dotfiles: GET %s: %s, want 200", p, res.Status)
		}
	}
	if _, body := open.do(t, "GET", "/"); !strings.Contains(string(body), `<a href=".secret">`) {
		t.Errorf("Dotfiles: the listing of / lacks .secret: %q", body)
	}
}

// TestNoListing: with Config.NoListing a directory without an index.html
// is not found, with or without its slash; one with an index.html still
// answers with it.
func TestNoListing(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "files/a.bin", []byte("a"), t0)
	writeFile(t, dir, "docs/index.html", []byte("docs page"), t0)
	ts := start(t, Config{Dir: dir, NoListing: true})
	for _, p := range []string{"/", "/files/", "/files"} {
		for _, method := range []string{"GET", "HEAD"} {
			if res, body := ts.do(t, method, p); res.StatusCode != http.StatusNotFound || strings.Contains(string(body), "a.bin") {
				t.Errorf("%s %s: %s %q, want 404", method, p, res.Status, body)
			}
		}
	}
	if res, body := ts.do(t, "GET", "/docs"); res.StatusCode != 200 || string(body) != "docs page" {
		t.Errorf("GET /docs: %s %q", res.Status, body)
	}
	if res, _ := ts.do(t, "GET", "/files/a.bin"); res.StatusCode != 200 {
		t.Errorf("GET /files/a.bin: %s", res.Status)
	}
}

// TestErrorBodiesRevealNothing: an error answer names no path and no
// error of the system's; the log has them.
func TestErrorBodiesRevealNothing(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "served")
	writeFile(t, dir, "page.html", []byte("<p>page"), t0)
	writeFile(t, parent, "outside.html", []byte("SECRET"), t0)
	if err := os.Symlink("../outside.html", filepath.Join(dir, "up.html")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.html"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := start(t, Config{Dir: dir})
	// Opening a FIFO blocks until a writer comes: a request must not.
	client := *ts.client
	client.Timeout = 10 * time.Second
	for _, p := range []string{"/up.html", "/missing/up.html", "/pipe.html", "/page.html/x"} {
		for _, u := range []string{p, contract.ManifestPrefix + p, contract.BundlePrefix + p, contract.BundleIndexPrefix + p,
			contract.ManifestPrefix + contract.BundlePrefix + p} {
			res, err := client.Get(ts.url + u)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode < 400 {
				t.Errorf("GET %s: %s", u, res.Status)
			}
			for _, leak := range []string{"up.html", "pipe", "page.html", "missing", "escape", "served", "SECRET", "regular", "no such", "directory", dir} {
				if strings.Contains(string(body), leak) {
					t.Errorf("GET %s: %s, the body %q reveals %q", u, res.Status, body, leak)
				}
			}
		}
	}
}
