package origin

import (
	"bytes"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/memnet"
)

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// fakeUpstream is a web server that knows nothing of stampede: it serves
// files from a map, with an ETag and a Last-Modified unless told not to,
// and counts the requests it gets.
type fakeUpstream struct {
	URL string

	mu    sync.Mutex // guards the following
	files map[string]upstreamFile
	count map[string]int // "METHOD /path"
}

type upstreamFile struct {
	data    []byte
	etag    string
	modTime time.Time // zero: no Last-Modified
	status  int       // 0: serve the file
	// ignoreIfRange: answer a Range as if If-Range had matched, as some
	// servers do.
	ignoreIfRange bool
	// head: a manifest head to send as a stampede origin would, to any
	// request (a stampede origin answers only those that ask).
	head string
}

// newFakeUpstream serves a fakeUpstream on loopback until the test ends.
func newFakeUpstream(t *testing.T) *fakeUpstream {
	u := &fakeUpstream{files: make(map[string]upstreamFile), count: make(map[string]int)}
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	u.URL = srv.URL
	return u
}

// newMemUpstream is newFakeUpstream on nw (startMem).
func newMemUpstream(t *testing.T, nw *memnet.Network) *fakeUpstream {
	u := &fakeUpstream{files: make(map[string]upstreamFile), count: make(map[string]int)}
	u.URL = serveMem(t, nw, u)
	return u
}

func (u *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	f, ok := u.files[r.URL.RequestURI()]
	u.count[r.Method+" "+r.URL.RequestURI()]++
	u.mu.Unlock()
	switch {
	case !ok:
		http.NotFound(w, r)
	case f.status != 0:
		http.Error(w, "upstream says no", f.status)
	default:
		if f.etag != "" {
			w.Header().Set("Etag", f.etag)
		}
		if f.ignoreIfRange {
			r.Header.Del("If-Range")
		}
		if f.head != "" {
			w.Header().Set(contract.ManifestHeadHeader, f.head)
		}
		if r.Header.Get(contract.WantHeader) != "" {
			u.mu.Lock()
			u.count["asked for a head"]++
			u.mu.Unlock()
		}
		http.ServeContent(w, r, "", f.modTime, bytes.NewReader(f.data))
	}
}

func (u *fakeUpstream) set(uri string, f upstreamFile) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.files[uri] = f
}

func (u *fakeUpstream) requests(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.count[key]
}

func TestUpstreamProxiesWithLinkAndDigest(t *testing.T) {
	up := newFakeUpstream(t)
	data := randomBytes(fileSize, 30)
	up.set("/base/pub/f.iso", upstreamFile{data: data, etag: `"v1"`, modTime: t0})
	ts := start(t, Config{Upstream: mustParse(t, up.URL+"/base/")})

	res, body := ts.do(t, "GET", "/pub/f.iso")
	if res.StatusCode != 200 || !bytes.Equal(body, data) {
		t.Fatalf("GET: %s, %d bytes", res.Status, len(body))
	}
	link := `</.well-known/stampede/manifest/pub/f.iso>; rel="stampede-manifest"`
	if res.Header.Get("Etag") != `"v1"` || res.Header.Get("Link") != link {
		t.Errorf("ETag %q, Link %q", res.Header.Get("Etag"), res.Header.Get("Link"))
	}
	if d := res.Header.Get("Repr-Digest"); d != "" {
		t.Errorf("Repr-Digest %q before the manifest was computed", d)
	}

	m := ts.manifest(t, "/pub/f.iso")
	verify(t, m, data)
	if m.ETag != `"v1"` || m.LastModified != t0.Format(http.TimeFormat) || m.Name != "f.iso" {
		t.Errorf("manifest validators %q %q, name %q", m.ETag, m.LastModified, m.Name)
	}

	// Once the manifest is known, full responses carry the digest.
	for _, method := range []string{"GET", "HEAD"} {
		res, _ = ts.do(t, method, "/pub/f.iso")
		if got := res.Header.Get("Repr-Digest"); got != reprDigest(data) {
			t.Errorf("%s: Repr-Digest %q, want %q", method, got, reprDigest(data))
		}
	}
	res, body = ts.do(t, "GET", "/pub/f.iso", "Range", "bytes=10-19")
	if res.StatusCode != 206 || !bytes.Equal(body, data[10:20]) || res.Header.Get("Repr-Digest") != "" || res.Header.Get("Link") != link {
		t.Errorf("range: %s, Repr-Digest %q, Link %q", res.Status, res.Header.Get("Repr-Digest"), res.Header.Get("Link"))
	}
	res, _ = ts.do(t, "GET", "/pub/f.iso", "If-None-Match", `"v1"`)
	if res.StatusCode != 304 || res.Header.Get("Link") != link {
		t.Errorf("conditional: %s, Link %q", res.Status, res.Header.Get("Link"))
	}

	// A second manifest request revalidates with a HEAD and hashes nothing.
	ts.manifest(t, "/pub/f.iso")
	if got := up.requests("HEAD /base/pub/f.iso"); got != 3 { // 2 manifests + 1 proxied HEAD
		t.Errorf("upstream HEADs %d, want 3", got)
	}
	if got := ts.metric(t, "stampede_origin_manifests_computed_total"); got != 1 {
		t.Errorf("computed %d manifests, want 1", got)
	}
	if got := ts.metric(t, `stampede_origin_upstream_requests_total{purpose="manifest"}`); got != 1 {
		t.Errorf("upstream GETs for manifests %d, want 1", got)
	}
}

// TestUpstreamInlineManifestHead: in front of a server, a HEAD that asks
// for the manifest's head carries it once the manifest is known, as in
// TestInlineManifestHead; before, the proxied answer goes without. The
// upstream is never asked for a head, and one it sends (as a stampede
// origin upstream would, naming its own trackers) never reaches the client.
func TestUpstreamInlineManifestHead(t *testing.T) {
	up := newFakeUpstream(t)
	up.set("/pub/f.iso", upstreamFile{data: randomBytes(fileSize, 31), etag: `"v1"`, modTime: t0, head: "dXBzdHJlYW0="})
	ts := start(t, Config{Upstream: mustParse(t, up.URL+"/")})
	head := func() string {
		t.Helper()
		res, _ := ts.do(t, "HEAD", "/pub/f.iso", contract.WantHeader, contract.WantManifestHead)
		if res.StatusCode != http.StatusOK || res.Header.Get("Link") == "" {
			t.Fatalf("HEAD: %s, Link %q", res.Status, res.Header.Get("Link"))
		}
		return res.Header.Get(contract.ManifestHeadHeader)
	}
	if got := head(); got != "" {
		t.Errorf("a head before the manifest was computed: %q", got)
	}
	ts.manifest(t, "/pub/f.iso")
	_, served := ts.do(t, "GET", contract.ManifestPrefix+"/pub/f.iso?"+contract.ManifestHeadQuery+"=0")
	if b, err := base64.StdEncoding.DecodeString(head()); err != nil || !bytes.Equal(b, served) {
		t.Errorf("HEAD carries a head decoding to %q (%v); the head's URL serves %q", b, err, served)
	}
	if n := up.requests("asked for a head"); n != 0 {
		t.Errorf("the upstream was asked for a head %d times", n)
	}
}

// A 206 answering If-Range drops the fields the client has already
// (trimPartial), but only when the upstream's answer carries the validator
// the client sent.
func TestUpstreamTrimsPartialAnswers(t *testing.T) {
	up := newFakeUpstream(t)
	data := randomBytes(fileSize, 31)
	up.set("/a", upstreamFile{data: data, etag: `"v1"`, modTime: t0})
	up.set("/b", upstreamFile{data: data, modTime: t0, ignoreIfRange: true})
	ts := start(t, Config{Upstream: mustParse(t, up.URL+"/")})

	res, body := ts.do(t, "GET", "/a", "Range", "bytes=10-19", "If-Range", `"v1"`)
	if res.StatusCode != 206 || !bytes.Equal(body, data[10:20]) || res.Header.Get("Etag") != `"v1"` {
		t.Fatalf("If-Range matching: %s, ETag %q", res.Status, res.Header.Get("Etag"))
	}
	for _, k := range []string{"Link", "Last-Modified", "Content-Type", "Accept-Ranges"} {
		if v, ok := res.Header[k]; ok {
			t.Errorf("%s %q in a 206 answering If-Range", k, v)
		}
	}

	// The upstream ignores If-Range and answers from a version whose date
	// is not the one asked: that Last-Modified must reach the client.
	old := t0.Add(-time.Hour).Format(http.TimeFormat)
	res, _ = ts.do(t, "GET", "/b", "Range", "bytes=10-19", "If-Range", old)
	if res.StatusCode != 206 || res.Header.Get("Last-Modified") != t0.Format(http.TimeFormat) || res.Header.Get("Link") == "" {
		t.Errorf("If-Range ignored upstream: %s, Last-Modified %q, Link %q", res.Status, res.Header.Get("Last-Modified"), res.Header.Get("Link"))
	}
	// Asked with the date it has, the same upstream's answer is trimmed.
	res, _ = ts.do(t, "GET", "/b", "Range", "bytes=10-19", "If-Range", t0.Format(http.TimeFormat))
	if _, ok := res.Header["Last-Modified"]; res.StatusCode != 206 || ok {
		t.Errorf("If-Range date matching: %s, Last-Modified %q", res.Status, res.Header.Get("Last-Modified"))
	}
}

func TestUpstreamChangeGivesNewManifest(t *testing.T) {
	up := newFakeUpstream(t)
	v1, v2 := randomBytes(fileSize, 31), randomBytes(fileSize+1, 32)
	up.set("/f?x=1", upstreamFile{data: v1, etag: `"a"`})
	cacheDir := t.TempDir()
	ts := start(t, Config{Upstream: mustParse(t, up.URL), CacheDir: cacheDir})

	res, _ := ts.do(t, "GET", "/f?x=1")
	if link := res.Header.Get("Link"); link != `</.well-known/stampede/manifest/f?x=1>; rel="stampede-manifest"` {
		t.Fatalf("Link %q", link)
	}
	verify(t, ts.manifest(t, "/f?x=1"), v1)
	up.set("/f?x=1", upstreamFile{data: v2, etag: `"b"`})
	m := ts.manifest(t, "/f?x=1")
	verify(t, m, v2)
	if m.ETag != `"b"` {
		t.Errorf("manifest ETag %q, want the new one", m.ETag)
	}
	res, _ = ts.do(t, "GET", "/f?x=1")
	if got := res.Header.Get("Repr-Digest"); got != reprDigest(v2) {
		t.Errorf("Repr-Digest %q, want the new content's", got)
	}
	if got := ts.metric(t, "stampede_origin_manifests_computed_total"); got != 2 {
		t.Errorf("computed %d manifests, want 2", got)
	}

	// A restarted origin finds the manifest on disk, after a HEAD.
	ts2 := start(t, Config{Upstream: mustParse(t, up.URL), CacheDir: cacheDir})
	verify(t, ts2.manifest(t, "/f?x=1"), v2)
	if got := ts2.metric(t, "stampede_origin_manifests_computed_total"); got != 0 {
		t.Errorf("restarted origin computed %d manifests, want 0", got)
	}
}

func TestUpstreamWithoutValidatorsGetsNoManifest(t *testing.T) {
	up := newFakeUpstream(t)
	up.set("/plain", upstreamFile{data: []byte("no validators here")})
	up.set("/lm-only", upstreamFile{data: []byte("only a date"), modTime: t0})
	ts := start(t, Config{Upstream: mustParse(t, up.URL)})

	res, body := ts.do(t, "GET", "/plain")
	if res.StatusCode != 200 || string(body) != "no validators here" || res.Header.Get("Link") != "" {
		t.Errorf("GET: %s %q, Link %q", res.Status, body, res.Header.Get("Link"))
	}
	res, body = ts.do(t, "GET", contract.ManifestPrefix+"/plain")
	if res.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "neither ETag nor Last-Modified") {
		t.Errorf("manifest: %s %q", res.Status, body)
	}
	if got := up.requests("GET /plain"); got != 1 {
		t.Errorf("upstream GETs %d: the body should not be fetched without validators", got)
	}
	verify(t, ts.manifest(t, "/lm-only"), []byte("only a date"))
}

func TestUpstreamErrors(t *testing.T) {
	up := newFakeUpstream(t)
	up.set("/gone", upstreamFile{status: http.StatusGone})
	up.set("/broken", upstreamFile{status: http.StatusInternalServerError})
	ts := start(t, Config{Upstream: mustParse(t, up.URL)})
	for path, want := range map[string]int{"/missing": 404, "/gone": 410, "/broken": 502} {
		if res, body := ts.do(t, "GET", contract.ManifestPrefix+path); res.StatusCode != want {
			t.Errorf("manifest of %s: %s %q, want %d", path, res.Status, body, want)
		}
	}
	if res, _ := ts.do(t, "GET", "/broken"); res.StatusCode != 500 {
		t.Errorf("proxied error: %s, want the upstream's 500", res.Status)
	}

	// An upstream that is not there at all.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	ts = start(t, Config{Upstream: mustParse(t, dead)})
	for _, p := range []string{"/f", contract.ManifestPrefix + "/f"} {
		if res, _ := ts.do(t, "GET", p); res.StatusCode != http.StatusBadGateway {
			t.Errorf("GET %s from a dead upstream: %s", p, res.Status)
		}
	}
}

func TestUpstreamOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		up := newMemUpstream(t, nw)
		up.set("/f", upstreamFile{data: randomBytes(1<<20, 33), etag: `"x"`})
		done := make(chan struct{}, 10)
		ts := startMem(t, nw, Config{Upstream: mustParse(t, up.URL), MaxTransfers: 1, Rate: 256 << 10}, func(s *Server) {
			s.testHookTransferDone = func() { done <- struct{}{} }
		})
		held := holdTransfer(t, ts, "/f")
		res, _ := ts.do(t, "GET", "/f")
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
			t.Errorf("past the limit: %s, Retry-After %q", res.Status, res.Header.Get("Retry-After"))
		}
		if res, _ := ts.do(t, "HEAD", "/f"); res.StatusCode != 200 {
			t.Errorf("HEAD past the limit: %s", res.Status)
		}
		held.Body.Close()
		<-done
		if res, _ := ts.do(t, "GET", "/f", "Range", "bytes=0-9"); res.StatusCode != 206 {
			t.Errorf("after the transfer ended: %s", res.Status)
		}
	})
}

func TestTarget(t *testing.T) {
	for _, tt := range []struct{ upstream, in, want string }{
		{"http://u", "/a/b", "http://u/a/b"},
		{"http://u/", "/a/b", "http://u/a/b"},
		{"http://u/base", "/a%20b", "http://u/base/a%20b"},
		{"http://u/base/", "/a%2Fb?q=1", "http://u/base/a%2Fb?q=1"},
		{"http://u/base?key=k", "/a?q=1", "http://u/base/a?key=k&q=1"},
	} {
		s := &Server{upstream: mustParse(t, tt.upstream)}
		if got := s.target(mustParse(t, tt.in)).String(); got != tt.want {
			t.Errorf("target(%s, %s) = %s, want %s", tt.upstream, tt.in, got, tt.want)
		}
	}
}

// TestWithoutHeadQuery: the head's parameter is stampede's, never the
// upstream's; the rest of the query goes on as it came.
func TestWithoutHeadQuery(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "",
		"piece_layer=0":              "",
		"sig=a%2Fb&piece_layer=0&x=": "sig=a%2Fb&x=",
		"piece_layerx=1":             "piece_layerx=1",
	} {
		if got := withoutHeadQuery(in); got != want {
			t.Errorf("withoutHeadQuery(%q) = %q, want %q", in, got, want)
		}
	}
}
