package origin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/internal/memnet"
)

// site writes a page with assets into dir and returns the page's HTML.
func site(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, dir, "index.html", []byte(`<!doctype html><title>t</title>
<link rel=stylesheet href="css/site.css"><script src="/js/app.js"></script>
<img src="img/logo.png" srcset="img/logo.png 1x, img/logo@2x.png 2x"><img src="missing.png">
<img src="../../outside.png"><img src="link-out.png"><img src="https://elsewhere.example/x.png">
<img src="blob"><img src="dir">`), t0)
	writeFile(t, dir, "css/site.css", []byte("body{color:red}"), t0.Add(time.Second))
	writeFile(t, dir, "js/app.js", []byte("console.log(1)"), t0)
	writeFile(t, dir, "img/logo.png", randomBytes(40_000, 30), t0)
	writeFile(t, dir, "img/logo@2x.png", randomBytes(70_000, 31), t0)
	writeFile(t, dir, "blob", []byte("%PDF-1.4 no extension"), t0)
	if err := os.MkdirAll(filepath.Join(dir, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret.png")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link-out.png")); err != nil {
		t.Fatal(err)
	}
}

func (ts *testServer) bundleIndex(t *testing.T, page string) (contract.BundleIndex, *http.Response) {
	t.Helper()
	res, body := ts.do(t, "GET", contract.BundleIndexPrefix+page)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("bundle index of %s: %s %q: %s", page, res.Status, res.Header.Get("Content-Type"), body)
	}
	var idx contract.BundleIndex
	if err := json.Unmarshal(body, &idx); err != nil {
		t.Fatal(err)
	}
	return idx, res
}

func TestBundle(t *testing.T) {
	dir := t.TempDir()
	site(t, dir)
	ts := start(t, Config{Dir: dir})

	// The page links its bundle, on GET and HEAD.
	for _, method := range []string{"GET", "HEAD"} {
		res, _ := ts.do(t, method, "/index.html")
		if got := httphdr.LinkTarget(res.Header.Values("Link"), contract.BundleRel); got != contract.BundlePrefix+"/index.html" {
			t.Errorf("%s /index.html: bundle link %q in %q", method, got, res.Header.Values("Link"))
		}
		if httphdr.LinkTarget(res.Header.Values("Link"), "stampede-manifest") == "" {
			t.Errorf("%s /index.html: no manifest link", method)
		}
	}
	if res, _ := ts.do(t, "GET", "/css/site.css"); httphdr.LinkTarget(res.Header.Values("Link"), contract.BundleRel) != "" {
		t.Error("a stylesheet links a bundle")
	}

	idx, ires := ts.bundleIndex(t, "/index.html")
	var paths []string
	for _, m := range idx.Members {
		paths = append(paths, m.Path)
	}
	wantPaths := []string{"/index.html", "/css/site.css", "/js/app.js", "/img/logo.png", "/img/logo@2x.png", "/blob"}
	if strings.Join(paths, " ") != strings.Join(wantPaths, " ") {
		t.Fatalf("members %q, want %q (missing files, directories, links out of DIR and other origins left out)", paths, wantPaths)
	}
	if idx.Version != 1 || idx.Bundle != contract.BundlePrefix+"/index.html" {
		t.Errorf("index %+v", idx)
	}

	// Offsets, sizes, types and validators are those of the members, and
	// the bundle is their concatenation.
	var want bytes.Buffer
	for _, m := range idx.Members {
		res, body := ts.do(t, "GET", m.Path)
		if m.Offset != int64(want.Len()) || m.Size != int64(len(body)) {
			t.Errorf("%s at %d, %d bytes; want at %d, %d bytes", m.Path, m.Offset, m.Size, want.Len(), len(body))
		}
		if m.ContentType != res.Header.Get("Content-Type") || m.ETag != res.Header.Get("Etag") || m.LastModified != res.Header.Get("Last-Modified") {
			t.Errorf("%s: index says %q %q %q, a GET answers %q %q %q", m.Path, m.ContentType, m.ETag, m.LastModified,
				res.Header.Get("Content-Type"), res.Header.Get("Etag"), res.Header.Get("Last-Modified"))
		}
		want.Write(body)
	}
	if idx.Size != int64(want.Len()) {
		t.Errorf("index size %d, members add up to %d", idx.Size, want.Len())
	}
	res, body := ts.do(t, "GET", idx.Bundle)
	etag := res.Header.Get("Etag")
	if res.StatusCode != http.StatusOK || !bytes.Equal(body, want.Bytes()) {
		t.Fatalf("bundle: %s, %d bytes; want the %d bytes of the members", res.Status, len(body), want.Len())
	}
	if !strings.HasPrefix(etag, `"`) || etag != ires.Header.Get("Etag") || res.Header.Get("Repr-Digest") != reprDigest(want.Bytes()) ||
		res.Header.Get("Last-Modified") != t0.Add(time.Second).UTC().Format(http.TimeFormat) || res.Header.Get("Accept-Ranges") != "bytes" {
		t.Errorf("bundle headers %v (index ETag %q)", res.Header, ires.Header.Get("Etag"))
	}

	// Range, across members; If-Range; HEAD; a conditional GET.
	res, body = ts.do(t, "GET", idx.Bundle, "Range", "bytes=100-50000", "If-Range", etag)
	if res.StatusCode != http.StatusPartialContent || !bytes.Equal(body, want.Bytes()[100:50001]) {
		t.Errorf("Range: %s, %d bytes", res.Status, len(body))
	}
	if res, body = ts.do(t, "HEAD", idx.Bundle); res.StatusCode != 200 || len(body) != 0 || res.ContentLength != int64(want.Len()) {
		t.Errorf("HEAD: %s, length %d", res.Status, res.ContentLength)
	}
	if res, _ = ts.do(t, "GET", idx.Bundle, "If-None-Match", etag); res.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: %s", res.Status)
	}

	// Its manifest is linked, served like any other and describes it.
	link := httphdr.LinkTarget(res.Header.Values("Link"), "stampede-manifest")
	if link != contract.ManifestPrefix+contract.BundlePrefix+"/index.html" {
		t.Fatalf("bundle manifest link %q", link)
	}
	m := ts.manifest(t, strings.TrimPrefix(link, contract.ManifestPrefix))
	verify(t, m, want.Bytes())
	if m.ETag != etag {
		t.Errorf("manifest ETag %q, bundle %q", m.ETag, etag)
	}

	// A changed asset changes the bundle's ETag and manifest.
	writeFile(t, dir, "js/app.js", []byte("console.log(2)"), t0.Add(2*time.Second))
	idx2, _ := ts.bundleIndex(t, "/index.html")
	res, body = ts.do(t, "GET", idx2.Bundle)
	if res.Header.Get("Etag") == etag || bytes.Equal(body, want.Bytes()) {
		t.Errorf("after an asset changed: ETag %q (was %q)", res.Header.Get("Etag"), etag)
	}
	m2 := ts.manifest(t, contract.BundlePrefix+"/index.html")
	verify(t, m2, body)
	if m2.Root == m.Root || m2.ETag != res.Header.Get("Etag") {
		t.Errorf("after an asset changed: manifest root %s ETag %q (was %s)", m2.Root, m2.ETag, m.Root)
	}

	// Not a page, not there, a bad path.
	for path, code := range map[string]int{
		contract.BundlePrefix + "/css/site.css":                        404,
		contract.BundleIndexPrefix + "/missing.html":                   404,
		contract.BundleIndexPrefix + "/blob":                           404,
		contract.ManifestPrefix + contract.BundlePrefix + "/js/app.js": 404,
	} {
		if res, _ := ts.do(t, "GET", path); res.StatusCode != code {
			t.Errorf("GET %s: %s, want %d", path, res.Status, code)
		}
	}
}

func TestBundleBounds(t *testing.T) {
	dir := t.TempDir()
	var page strings.Builder
	for i := range 10 {
		fmt.Fprintf(&page, `<img src="%d.png">`, i)
		size := 1000
		if i == 2 {
			size = 5000 // does not fit; the next ones still may
		}
		writeFile(t, dir, fmt.Sprintf("%d.png", i), randomBytes(size, uint64(i)), t0)
	}
	writeFile(t, dir, "p.htm", []byte(page.String()), t0)
	ts := start(t, Config{Dir: dir, BundleMaxAssets: 4, BundleMaxBytes: int64(page.Len()) + 4500})
	idx, _ := ts.bundleIndex(t, "/p.htm")
	var paths []string
	for _, m := range idx.Members {
		paths = append(paths, m.Path)
	}
	if got, want := strings.Join(paths, " "), "/p.htm /0.png /1.png /3.png /4.png"; got != want {
		t.Errorf("members %q, want %q", got, want)
	}
}

func TestBundleMemberChangingWhileRead(t *testing.T) {
	dir := t.TempDir()
	site(t, dir)
	ts := start(t, Config{Dir: dir})
	b, err := ts.buildBundle(t.Context(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "img/logo.png", randomBytes(40_000, 99), t0.Add(time.Minute))
	r := ts.bundleReader(b)
	defer r.Close()
	buf := make([]byte, b.size)
	if _, err := r.ReadAt(buf, 0); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("reading a bundle whose member changed: %v", err)
	}
}

func TestBundleOverloadAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		site(t, dir)
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxTransfers: 1})
		m := ts.manifest(t, contract.BundlePrefix+"/index.html")
		_, want := ts.do(t, "GET", contract.BundlePrefix+"/index.html")
		holdHog(t, ts, dir)
		res, body := ts.do(t, "GET", contract.BundlePrefix+"/index.html", contract.CapabilitiesHeader, contract.CapabilityOverload, "Range", "bytes=16384-32767")
		if res.StatusCode != http.StatusPartialContent || res.Header.Get(contract.PieceHeader) != "1" {
			t.Fatalf("capable GET of a bundle past the limit: %s, piece %q", res.Status, res.Header.Get(contract.PieceHeader))
		}
		if err := m.VerifyPiece(1, body); err != nil || !bytes.Equal(body, want[16384:32768]) {
			t.Errorf("piece 1 of the bundle: %v", err)
		}
	})
}
