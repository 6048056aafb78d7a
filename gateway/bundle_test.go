package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/contract"
)

// bundleSite is a fake of the origin side of the page contract: an
// origin.Server over a directory holding a page, its assets and a
// prebuilt bundle of them, wrapped by a handler that adds the page's
// bundle Link and serves the bundle index.
type bundleSite struct {
	*testOrigin
	files     map[string][]byte
	members   []contract.BundleMember
	index     []byte
	indexETag string // the bundle's, as a stampede origin sends it
}

var sitePaths = []string{"/index.html", "/style.css", "/app.js", "/img/logo.png"}

func startBundleSite(t *testing.T) *bundleSite {
	t.Helper()
	files := map[string][]byte{
		"/index.html":   []byte(`<!doctype html><link rel=stylesheet href=/style.css><script src=app.js></script><img src="img/logo.png">`),
		"/style.css":    []byte("body { color: #222 }\n"),
		"/app.js":       []byte("console.log('hi')\n"),
		"/img/logo.png": randomBytes(40<<10, 50),
	}
	var bundle []byte
	dirFiles := map[string][]byte{}
	for _, p := range sitePaths {
		dirFiles[strings.TrimPrefix(p, "/")] = files[p]
		bundle = append(bundle, files[p]...)
	}
	dirFiles[".well-known/stampede/bundle/index.html"] = bundle
	o := startOrigin(t, dirFiles, originOpts{})
	s := &bundleSite{testOrigin: o, files: files}
	// The index carries each member's type and validators as the origin
	// serves them.
	var off int64
	for _, p := range sitePaths {
		rec := httptest.NewRecorder()
		o.srv.Handler().ServeHTTP(rec, httptest.NewRequest("HEAD", p, nil))
		h := rec.Result().Header
		s.members = append(s.members, contract.BundleMember{Path: p, Offset: off, Size: int64(len(files[p])),
			ContentType: h.Get("Content-Type"), ETag: h.Get("ETag"), LastModified: h.Get("Last-Modified")})
		off += int64(len(files[p]))
	}
	rec := httptest.NewRecorder()
	o.srv.Handler().ServeHTTP(rec, httptest.NewRequest("HEAD", contract.BundlePrefix+"/index.html", nil))
	s.indexETag = rec.Result().Header.Get("ETag")
	s.setIndex(t, s.members)
	o.setWrap(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		switch r.URL.Path {
		case "/index.html":
			w.Header().Add("Link", `</.well-known/stampede/bundle/index.html>; rel="stampede-bundle"`)
		case contract.BundleIndexPrefix + "/index.html":
			w.Header().Set("Content-Type", "application/json")
			o.mu.Lock()
			w.Header().Set("ETag", s.indexETag)
			w.Write(s.index)
			o.mu.Unlock()
			return true
		}
		return false
	})
	return s
}

func (s *bundleSite) setIndex(t *testing.T, members []contract.BundleMember) {
	t.Helper()
	var size int64
	for _, m := range s.members {
		size += m.Size
	}
	js, err := json.Marshal(contract.BundleIndex{Version: 1, Bundle: contract.BundlePrefix + "/index.html", Size: size, Members: members})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.index = js
	s.mu.Unlock()
}

func TestPageBundle(t *testing.T) {
	s := startBundleSite(t)
	g := startGateway(t, Config{})
	c := g.proxyClient()

	resp, body := get(t, c, "GET", s.base+"/index.html", nil)
	if resp.StatusCode != 200 || resp.Header.Get(Header) != "bundle" {
		t.Fatalf("page: %s, answered %q", resp.Status, resp.Header.Get(Header))
	}
	mustEqual(t, "page", body, s.files["/index.html"])
	if resp.Header.Get("ETag") != s.members[0].ETag || resp.Header.Get("Content-Type") != s.members[0].ContentType {
		t.Errorf("page headers: %v", resp.Header)
	}
	if s.count("RANGE "+contract.BundlePrefix+"/index.html") == 0 {
		t.Error("the bundle did not come in pieces through the swarm path")
	}

	// The assets come from the bundle: the origin is not asked for them.
	for k, p := range sitePaths[1:] {
		resp, body := get(t, c, "GET", s.base+p, nil)
		m := s.members[k+1]
		if resp.StatusCode != 200 || resp.Header.Get(Header) != "bundle" {
			t.Fatalf("%s: %s, answered %q", p, resp.Status, resp.Header.Get(Header))
		}
		mustEqual(t, p, body, s.files[p])
		if resp.Header.Get("Content-Type") != m.ContentType || resp.Header.Get("ETag") != m.ETag ||
			resp.Header.Get("Last-Modified") != m.LastModified {
			t.Errorf("%s headers: %v, want %+v", p, resp.Header, m)
		}
		if n := s.count("GET "+p) + s.count("HEAD "+p) + s.count("RANGE "+p); n != 0 {
			t.Errorf("%s: the origin was asked %d times", p, n)
		}
	}
	// A query does not change the member (the origin drops queries when it
	// builds a bundle).
	resp, body = get(t, c, "GET", s.base+"/style.css?v=3", nil)
	if resp.Header.Get(Header) != "bundle" {
		t.Errorf("/style.css?v=3: answered %q", resp.Header.Get(Header))
	}
	mustEqual(t, "/style.css?v=3", body, s.files["/style.css"])

	// Conditional and range requests on an asset.
	logo := s.members[3]
	resp, _ = get(t, c, "GET", s.base+logo.Path, http.Header{"If-None-Match": {logo.ETag}})
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("asset If-None-Match: %s", resp.Status)
	}
	resp, body = get(t, c, "GET", s.base+logo.Path, http.Header{"Range": {"bytes=100-199"}})
	if resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("asset range: %s", resp.Status)
	}
	mustEqual(t, "asset range", body, s.files[logo.Path][100:200])

	// The page again: revalidated with HEAD, answered from the same bundle.
	pieces := s.count("RANGE " + contract.BundlePrefix + "/index.html")
	resp, body = get(t, c, "GET", s.base+"/index.html", nil)
	mustEqual(t, "page again", body, s.files["/index.html"])
	if resp.Header.Get(Header) != "bundle" || s.count("RANGE "+contract.BundlePrefix+"/index.html") != pieces {
		t.Errorf("page again: answered %q, %d more bundle pieces", resp.Header.Get(Header), s.count("RANGE "+contract.BundlePrefix+"/index.html")-pieces)
	}
}

// In prefix form, a page's root-relative asset URLs reach the gateway as
// plain paths; the Referer leads them back to the page's origin.
func TestPageBundlePrefixForm(t *testing.T) {
	s := startBundleSite(t)
	g := startGateway(t, Config{})
	page := g.prefixed(s.base + "/index.html")
	resp, body := get(t, plainClient(), "GET", page, nil)
	if resp.Header.Get(Header) != "bundle" {
		t.Fatalf("page: answered %q", resp.Header.Get(Header))
	}
	mustEqual(t, "page", body, s.files["/index.html"])
	resp, body = get(t, plainClient(), "GET", g.base+"/style.css", http.Header{"Referer": {page}})
	if resp.Header.Get(Header) != "bundle" {
		t.Fatalf("/style.css with a prefixed Referer: %s, answered %q", resp.Status, resp.Header.Get(Header))
	}
	mustEqual(t, "/style.css", body, s.files["/style.css"])
}

// An index that describes another version of the page, or of the bundle,
// is ignored: the page is served as a file, its assets from the origin.
func TestPageBundleStaleIndex(t *testing.T) {
	t.Run("page", func(t *testing.T) {
		s := startBundleSite(t)
		stale := append([]contract.BundleMember(nil), s.members...)
		stale[0].ETag = `"an-older-page"`
		s.setIndex(t, stale)
		checkNoBundle(t, s)
	})
	t.Run("bundle", func(t *testing.T) {
		s := startBundleSite(t)
		s.mu.Lock()
		s.indexETag = `"an-older-bundle"`
		s.mu.Unlock()
		checkNoBundle(t, s)
	})
}

func checkNoBundle(t *testing.T, s *bundleSite) {
	g := startGateway(t, Config{})
	resp, body := get(t, g.proxyClient(), "GET", s.base+"/index.html", nil)
	mustEqual(t, "page", body, s.files["/index.html"])
	if resp.Header.Get(Header) != "swarm" {
		t.Errorf("page with a stale index: answered %q, want swarm", resp.Header.Get(Header))
	}
	resp, body = get(t, g.proxyClient(), "GET", s.base+"/style.css", nil)
	mustEqual(t, "asset", body, s.files["/style.css"])
	if resp.Header.Get(Header) == "bundle" {
		t.Error("an asset was answered from a bundle whose index did not match the page")
	}
}

// A page that has a bundle but no manifest of its own still comes through
// the swarm, with its bundle.
func TestPageBundleWithoutPageManifest(t *testing.T) {
	s := startBundleSite(t)
	inner := s.wrap
	s.setWrap(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.URL.Path != "/index.html" {
			return inner(w, r, next)
		}
		dw := &dropManifestLink{ResponseWriter: w}
		inner(dw, r, next) // adds the bundle Link
		next.ServeHTTP(dw, r)
		return true
	})
	g := startGateway(t, Config{})
	resp, body := get(t, g.proxyClient(), "GET", s.base+"/index.html", nil)
	mustEqual(t, "page", body, s.files["/index.html"])
	if resp.Header.Get(Header) != "bundle" {
		t.Fatalf("page without a manifest: answered %q, want bundle", resp.Header.Get(Header))
	}
	if links := strings.Join(resp.Header.Values("Link"), ", "); strings.Contains(links, "stampede-manifest") {
		t.Fatalf("the page still links a manifest: %s", links)
	}
	resp, body = get(t, g.proxyClient(), "GET", s.base+"/app.js", nil)
	mustEqual(t, "asset", body, s.files["/app.js"])
	if resp.Header.Get(Header) != "bundle" {
		t.Errorf("asset: answered %q, want bundle", resp.Header.Get(Header))
	}
}

// dropManifestLink removes the manifest Link from a response's header.
type dropManifestLink struct {
	http.ResponseWriter
	wrote bool
}

func (d *dropManifestLink) WriteHeader(code int) {
	if d.wrote {
		return
	}
	d.wrote = true
	h := d.Header()
	var keep []string
	for _, v := range h.Values("Link") {
		if !strings.Contains(v, `rel="stampede-manifest"`) {
			keep = append(keep, v)
		}
	}
	h["Link"] = keep
	d.ResponseWriter.WriteHeader(code)
}

func (d *dropManifestLink) Write(p []byte) (int, error) {
	d.WriteHeader(http.StatusOK)
	return d.ResponseWriter.Write(p)
}

// Against the real origin side (origin.Server publishes bundles of HTML
// pages in directory mode).
func TestPageBundleFromStampedeServe(t *testing.T) {
	files := map[string][]byte{
		"index.html": []byte(`<!doctype html><link rel=stylesheet href="/style.css?v=2">` +
			`<script src="js/app.js"></script><img src="a%20b.png"><img src="img/logo.png">`),
		"style.css":    []byte("p { margin: 0 }\n"),
		"js/app.js":    []byte("let x = 1\n"),
		"a b.png":      randomBytes(3000, 70),
		"img/logo.png": randomBytes(50<<10, 71),
	}
	o := startOrigin(t, files, originOpts{})
	g := startGateway(t, Config{})
	c := g.proxyClient()
	resp, body := get(t, c, "GET", o.base+"/index.html", nil)
	if resp.Header.Get(Header) != "bundle" {
		t.Fatalf("page: %s, answered %q (Link %v)", resp.Status, resp.Header.Get(Header), resp.Header.Values("Link"))
	}
	mustEqual(t, "page", body, files["index.html"])
	for _, p := range []string{"/style.css?v=2", "/js/app.js", "/a%20b.png", "/img/logo.png"} {
		direct, want := get(t, plainClient(), "GET", o.base+p, nil)
		before := o.count("GET "+direct.Request.URL.Path) + o.count("HEAD "+direct.Request.URL.Path)
		resp, body := get(t, c, "GET", o.base+p, nil)
		if resp.Header.Get(Header) != "bundle" {
			t.Errorf("%s: answered %q", p, resp.Header.Get(Header))
		}
		mustEqual(t, p, body, want)
		if resp.Header.Get("Content-Type") != direct.Header.Get("Content-Type") || resp.Header.Get("ETag") != direct.Header.Get("ETag") {
			t.Errorf("%s: type %q ETag %q, the origin says %q %q", p, resp.Header.Get("Content-Type"), resp.Header.Get("ETag"),
				direct.Header.Get("Content-Type"), direct.Header.Get("ETag"))
		}
		if after := o.count("GET "+direct.Request.URL.Path) + o.count("HEAD "+direct.Request.URL.Path); after != before {
			t.Errorf("%s: the gateway asked the origin", p)
		}
	}
}
