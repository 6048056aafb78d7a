package origin

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/internal/metrics/metricstest"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testServer struct {
	*Server
	url    string
	client *http.Client
	// dial is what the test's clients dial with (http.Transport's
	// DialContext); nil on loopback.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// start runs a Server for cfg on a loopback listener until the test ends.
// setup, if given, runs before the server accepts connections (test hooks).
func start(t *testing.T, cfg Config, setup ...func(*Server)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startOn(t, ln, nil, cfg, setup...)
}

// startMem is start on nw, an in-memory network, for tests inside a
// testing/synctest bubble: there time is virtual, so a test can say how
// long a shaped transfer or a timeout took and get the same answer on
// every run. The server gets a host of nw, and so does the test's client;
// an Upstream is reached from the server's host unless cfg has a Transport.
// Everything is shut down before the bubble ends, which it requires.
func startMem(t *testing.T, nw *memnet.Network, cfg Config, setup ...func(*Server)) *testServer {
	t.Helper()
	srv := nw.Host(memnet.HostConfig{})
	if cfg.Upstream != nil && cfg.Transport == nil {
		tr := &http.Transport{DialContext: srv.DialContext}
		t.Cleanup(tr.CloseIdleConnections)
		cfg.Transport = tr
	}
	ln, err := srv.Listen(80)
	if err != nil {
		t.Fatal(err)
	}
	return startOn(t, ln, nw.Host(memnet.HostConfig{}).DialContext, cfg, setup...)
}

// serveMem serves h on a host of nw until the test ends and returns its
// URL: an upstream for startMem.
func serveMem(t *testing.T, nw *memnet.Network, h http.Handler) string {
	t.Helper()
	ln, err := nw.Host(memnet.HostConfig{}).Listen(80)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		hs.Serve(ln)
		close(done)
	}()
	t.Cleanup(func() {
		hs.Close()
		<-done
	})
	return "http://" + ln.String()
}

// startOn is start on the listener ln, with clients that dial with dial
// (nil: the default dialer).
func startOn(t *testing.T, ln net.Listener, dial func(context.Context, string, string) (net.Conn, error), cfg Config, setup ...func(*Server)) *testServer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = t.TempDir()
	}
	s, err := New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	for _, f := range setup {
		f(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	tr := &http.Transport{DialContext: dial}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		s.Close()
	})
	return &testServer{Server: s, url: "http://" + ln.Addr().String(), client: &http.Client{Transport: tr}, dial: dial}
}

// do sends a request and returns the response with its body read.
func (ts *testServer) do(t *testing.T, method, path string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, body
}

// metrics returns the samples on /metrics by series ("name" or
// `name{label="v"}`).
func (ts *testServer) metrics(t *testing.T) map[string]int64 {
	t.Helper()
	_, body := ts.do(t, "GET", "/metrics")
	samples := make(map[string]int64)
	for series, v := range metricstest.Samples(t, body) {
		samples[series] = int64(v)
	}
	return samples
}

// metric returns one sample on /metrics, or -1 if absent.
func (ts *testServer) metric(t *testing.T, series string) int64 {
	t.Helper()
	if v, ok := ts.metrics(t)[series]; ok {
		return v
	}
	return -1
}

func (ts *testServer) manifest(t *testing.T, path string) *manifest.Manifest {
	t.Helper()
	res, body := ts.do(t, "GET", contract.ManifestPrefix+path)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("manifest %s: %s: %s", path, res.Status, body)
	}
	if ct := res.Header.Get("Content-Type"); ct != ManifestContentType {
		t.Errorf("manifest Content-Type %q, want %q", ct, ManifestContentType)
	}
	m, err := manifest.Decode(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Header.Get("Stampede-Root"); got != m.Root.String() {
		t.Errorf("Stampede-Root %q, manifest root %s", got, m.Root)
	}
	return m
}

// verify checks that m describes data, piece by piece.
func verify(t *testing.T, m *manifest.Manifest, data []byte) {
	t.Helper()
	if m.Size != int64(len(data)) {
		t.Fatalf("manifest size %d, file %d", m.Size, len(data))
	}
	for i := range m.NumPieces() {
		off := m.PieceOffset(i)
		if err := m.VerifyPiece(i, data[off:off+m.PieceLen(i)]); err != nil {
			t.Fatal(err)
		}
	}
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func reprDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
}

// writeFile writes data at dir/name with a modification time of its own, so
// that every write is a new version even within a clock tick.
func writeFile(t *testing.T, dir, name string, data []byte, mtime time.Time) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

// A file of 19 pieces of 16 KiB, the last one short.
const fileSize = 300<<10 + 123

func TestFileResponses(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(fileSize, 1)
	writeFile(t, dir, "sub/file.bin", data, t0)
	ts := start(t, Config{Dir: dir})

	full, _ := ts.do(t, "GET", "/sub/file.bin")
	etag, lastMod := full.Header.Get("Etag"), full.Header.Get("Last-Modified")
	if !regexp.MustCompile(`^"[0-9a-f]+-[0-9a-f]+"$`).MatchString(etag) {
		t.Fatalf("ETag %q is not a strong stat-based tag", etag)
	}
	if lastMod != t0.Format(http.TimeFormat) {
		t.Fatalf("Last-Modified %q, want %q", lastMod, t0.Format(http.TimeFormat))
	}
	link := `</.well-known/stampede/manifest/sub/file.bin>; rel="stampede-manifest"`
	digest := reprDigest(data)

	tests := []struct {
		name         string
		method       string
		header       []string
		status       int
		body         []byte // nil: empty
		contentRange string
		digest       bool
		// trimmed: a 206 answering If-Range, without the fields the
		// client has already (trimPartial).
		trimmed bool
	}{
		{"full", "GET", nil, 200, data, "", true, false},
		{"head", "HEAD", nil, 200, nil, "", true, false},
		{"range", "GET", []string{"Range", "bytes=100-199"}, 206, data[100:200], "bytes 100-199/" + strconv.Itoa(fileSize), false, false},
		{"suffix range", "GET", []string{"Range", "bytes=-10"}, 206, data[fileSize-10:], fmt.Sprintf("bytes %d-%d/%d", fileSize-10, fileSize-1, fileSize), false, false},
		{"if-range match", "GET", []string{"Range", "bytes=0-9", "If-Range", etag}, 206, data[:10], "bytes 0-9/" + strconv.Itoa(fileSize), false, true},
		{"if-range mismatch", "GET", []string{"Range", "bytes=0-9", "If-Range", `"other"`}, 200, data, "", true, false},
		{"if-range date", "GET", []string{"Range", "bytes=0-9", "If-Range", lastMod}, 206, data[:10], "bytes 0-9/" + strconv.Itoa(fileSize), false, true},
		{"if-none-match", "GET", []string{"If-None-Match", etag}, 304, nil, "", false, false},
		{"if-none-match other", "GET", []string{"If-None-Match", `"other"`}, 200, data, "", true, false},
		{"if-modified-since", "GET", []string{"If-Modified-Since", t0.Add(time.Hour).Format(http.TimeFormat)}, 304, nil, "", false, false},
		{"if-match fails", "GET", []string{"If-Match", `"other"`}, 412, nil, "", false, false},
		{"unsatisfiable", "GET", []string{"Range", fmt.Sprintf("bytes=%d-", fileSize+10)}, 416, nil, "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := ts.do(t, tt.method, "/sub/file.bin", tt.header...)
			if res.StatusCode != tt.status {
				t.Fatalf("status %s, want %d", res.Status, tt.status)
			}
			if tt.status == 416 || tt.status == 412 {
				return
			}
			if tt.body != nil && string(body) != string(tt.body) {
				t.Errorf("body of %d bytes differs from the %d expected", len(body), len(tt.body))
			}
			if tt.body == nil && len(body) != 0 {
				t.Errorf("unexpected body of %d bytes", len(body))
			}
			if got := res.Header.Get("Content-Range"); got != tt.contentRange {
				t.Errorf("Content-Range %q, want %q", got, tt.contentRange)
			}
			if got := res.Header.Get("Etag"); got != etag {
				t.Errorf("ETag %q, want %q", got, etag)
			}
			if tt.trimmed {
				for _, k := range []string{"Link", "Last-Modified", "Content-Type", "Accept-Ranges", "Repr-Digest"} {
					if v, ok := res.Header[k]; ok {
						t.Errorf("%s %q in a 206 answering If-Range", k, v)
					}
				}
				if res.Header.Get("Date") == "" || res.ContentLength != int64(len(tt.body)) {
					t.Errorf("Date %q, Content-Length %d: a 206 needs both", res.Header.Get("Date"), res.ContentLength)
				}
				return
			}
			if got := res.Header.Get("Link"); got != link {
				t.Errorf("Link %q, want %q", got, link)
			}
			want := ""
			if tt.digest {
				want = digest
			}
			if got := res.Header.Get("Repr-Digest"); got != want {
				t.Errorf("Repr-Digest %q, want %q", got, want)
			}
			if tt.method == "HEAD" && res.ContentLength != fileSize {
				t.Errorf("HEAD Content-Length %d, want %d", res.ContentLength, fileSize)
			}
			if tt.status != 304 && res.Header.Get("Last-Modified") != lastMod {
				t.Errorf("Last-Modified %q, want %q", res.Header.Get("Last-Modified"), lastMod)
			}
		})
	}
	// A multipart 206 keeps its Content-Type, which names the boundary.
	res, _ := ts.do(t, "GET", "/sub/file.bin", "Range", "bytes=0-9,20-29", "If-Range", etag)
	if ct := res.Header.Get("Content-Type"); res.StatusCode != 206 || !strings.HasPrefix(ct, "multipart/byteranges; boundary=") {
		t.Errorf("multipart range with If-Range: %s, Content-Type %q", res.Status, ct)
	}
}

func TestValidatorsStableAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", randomBytes(1000, 2), t0)
	a, _ := start(t, Config{Dir: dir}).do(t, "HEAD", "/f")
	b, _ := start(t, Config{Dir: dir}).do(t, "HEAD", "/f")
	for _, h := range []string{"Etag", "Last-Modified", "Repr-Digest"} {
		if a.Header.Get(h) == "" || a.Header.Get(h) != b.Header.Get(h) {
			t.Errorf("%s: %q, then %q after a restart", h, a.Header.Get(h), b.Header.Get(h))
		}
	}
}

func TestManifest(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(fileSize, 3)
	writeFile(t, dir, "dir/a b%.iso", data, t0)
	writeFile(t, dir, "empty", nil, t0)
	ts := start(t, Config{Dir: dir})

	res, _ := ts.do(t, "HEAD", "/dir/a%20b%25.iso")
	link := res.Header.Get("Link")
	want := `</.well-known/stampede/manifest/dir/a%20b%25.iso>; rel="stampede-manifest"`
	if link != want {
		t.Fatalf("Link %q, want %q", link, want)
	}
	// Found the way the downloader finds it.
	mpath := strings.TrimPrefix(httphdr.LinkTarget(res.Header.Values("Link"), "stampede-manifest"), contract.ManifestPrefix)
	if sum, err := httphdr.ReprDigestSHA256(res.Header.Values("Repr-Digest")); err != nil || len(sum) != sha256.Size || [sha256.Size]byte(sum) != sha256.Sum256(data) {
		t.Errorf("Repr-Digest %q does not parse to the file's SHA-256 (%v)", res.Header.Get("Repr-Digest"), err)
	}
	m := ts.manifest(t, mpath)
	verify(t, m, data)
	if m.NumPieces() < 2 {
		t.Fatalf("want a file of several pieces, got %d", m.NumPieces())
	}
	if m.Name != "a b%.iso" {
		t.Errorf("manifest name %q", m.Name)
	}
	if m.ETag != res.Header.Get("Etag") || m.LastModified != res.Header.Get("Last-Modified") {
		t.Errorf("manifest validators %q, %q; file served with %q, %q",
			m.ETag, m.LastModified, res.Header.Get("Etag"), res.Header.Get("Last-Modified"))
	}

	verify(t, ts.manifest(t, "/empty"), nil)

	head, body := ts.do(t, "HEAD", contract.ManifestPrefix+mpath)
	if head.StatusCode != 200 || len(body) != 0 || head.ContentLength <= 0 {
		t.Errorf("HEAD manifest: %s, %d bytes, Content-Length %d", head.Status, len(body), head.ContentLength)
	}
	for _, p := range []string{"/missing", "/dir", "/dir/", "/dir/a%20b%25.iso/x"} {
		if res, body := ts.do(t, "GET", contract.ManifestPrefix+p); res.StatusCode != http.StatusNotFound {
			t.Errorf("manifest of %q: %s: %s", p, res.Status, body)
		}
	}
	if got := ts.metric(t, "stampede_origin_manifests_computed_total"); got != 2 {
		t.Errorf("computed %d manifests, want 2", got)
	}
}

// TestManifestGzip: a client that accepts gzip gets the manifest
// compressed, the same JSON as the others get plain.
func TestManifestGzip(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", randomBytes(8<<20, 5), t0) // 512 pieces: hashes make most of the manifest
	ts := start(t, Config{Dir: dir})
	plainRes, plain := ts.do(t, "GET", contract.ManifestPrefix+"/f", "Accept-Encoding", "identity")
	zipRes, zipped := ts.do(t, "GET", contract.ManifestPrefix+"/f", "Accept-Encoding", "br, gzip;q=0.5")
	if ce := plainRes.Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("Content-Encoding %q for a client that does not accept gzip", ce)
	}
	if ce := zipRes.Header.Get("Content-Encoding"); ce != "gzip" {
		t.Fatalf("Content-Encoding %q for a client that accepts gzip, want gzip", ce)
	}
	for _, res := range []*http.Response{plainRes, zipRes} {
		if v := res.Header.Get("Vary"); v != "Accept-Encoding" {
			t.Errorf("Vary %q, want Accept-Encoding", v)
		}
	}
	if len(zipped) >= len(plain)*4/5 {
		t.Errorf("gzip manifest is %d bytes, plain %d: not a fifth smaller", len(zipped), len(plain))
	}
	zr, err := gzip.NewReader(bytes.NewReader(zipped))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(unzipped, plain) {
		t.Error("the gzip manifest decompresses to other bytes than the plain one")
	}
	head, _ := ts.do(t, "HEAD", contract.ManifestPrefix+"/f", "Accept-Encoding", "gzip")
	if head.Header.Get("Content-Encoding") != "gzip" || head.ContentLength != int64(len(zipped)) {
		t.Errorf("HEAD with gzip: Content-Encoding %q, Content-Length %d; GET sends %d bytes", head.Header.Get("Content-Encoding"), head.ContentLength, len(zipped))
	}
}

// TestManifestHead: ?piece_layer=0 gets the manifest without its piece
// hashes, with the trackers, a few hundred bytes however large the file,
// plain even to a client that accepts gzip.
func TestManifestHead(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", randomBytes(8<<20, 5), t0) // 512 pieces
	ts := start(t, Config{Dir: dir, Tracker: tracker.New(tracker.Config{Logger: testLogger(t)})})
	full := ts.manifest(t, "/f")
	res, body := ts.do(t, "GET", contract.ManifestPrefix+"/f?"+contract.ManifestHeadQuery+"=0", "Accept-Encoding", "gzip")
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Encoding") != "" {
		t.Fatalf("head: %s, Content-Encoding %q", res.Status, res.Header.Get("Content-Encoding"))
	}
	if len(body) > 1024 {
		t.Errorf("head of %d bytes", len(body))
	}
	h, err := manifest.UnmarshalHead(body)
	if err != nil {
		t.Fatal(err)
	}
	if h.HasLayer() || h.Root != full.Root || h.Size != full.Size || h.ETag != full.ETag || len(h.Trackers) == 0 {
		t.Fatalf("head %+v for manifest %+v", h, full)
	}
	if err := h.SetLayer(full.Pieces); err != nil {
		t.Fatal(err)
	}
}

// TestInlineManifestHead: a HEAD that asks for it carries the manifest's
// head, byte for byte what the head's URL serves (the first HEAD of a file
// this small has its manifest computed for Repr-Digest); not unasked, nor
// on a GET; and once the file changes, the new version's head.
func TestInlineManifestHead(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", randomBytes(8<<20, 5), t0)
	ts := start(t, Config{Dir: dir, Tracker: tracker.New(tracker.Config{Logger: testLogger(t)})})
	want := []string{contract.WantHeader, "other, " + contract.WantManifestHead}
	inline := func(method string, header ...string) string {
		t.Helper()
		res, _ := ts.do(t, method, "/f", header...)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", method, res.Status)
		}
		return res.Header.Get(contract.ManifestHeadHeader)
	}
	got := inline("HEAD", want...)
	_, served := ts.do(t, "GET", contract.ManifestPrefix+"/f?"+contract.ManifestHeadQuery+"=0")
	served1, err := manifest.UnmarshalHead(served)
	if err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(got)
	if err != nil || !bytes.Equal(b, served) {
		t.Fatalf("HEAD carries %q (%v), decoding to %q; the head's URL serves %q", got, err, b, served)
	}
	if got := inline("HEAD"); got != "" {
		t.Errorf("HEAD without %s carries a head", contract.WantHeader)
	}
	if got := inline("GET", want...); got != "" {
		t.Errorf("GET carries a head")
	}
	writeFile(t, dir, "f", randomBytes(8<<20, 6), t0.Add(time.Second))
	b, err = base64.StdEncoding.DecodeString(inline("HEAD", want...))
	h, err2 := manifest.UnmarshalHead(b)
	if err != nil || err2 != nil || h.Root != ts.manifest(t, "/f").Root || h.Root == served1.Root {
		t.Errorf("HEAD of the changed file: head %q (%v, %v), not the new version's", b, err, err2)
	}
}

// TestInlineManifestHeadTooLong: a head longer than contract.MaxInlineHead
// (many trackers) is left to the head's URL.
func TestInlineManifestHeadTooLong(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", randomBytes(fileSize, 7), t0)
	var trackers []string
	for i := range 20 {
		trackers = append(trackers, fmt.Sprintf("https://tracker-%02d.example.net/%s/announce", i, strings.Repeat("p", 60)))
	}
	ts := start(t, Config{Dir: dir, Trackers: trackers})
	ts.manifest(t, "/f")
	res, _ := ts.do(t, "HEAD", "/f", contract.WantHeader, contract.WantManifestHead)
	if got := res.Header.Get(contract.ManifestHeadHeader); res.StatusCode != http.StatusOK || got != "" {
		t.Errorf("HEAD: %s, a head of %d bytes", res.Status, len(got))
	}
}

func TestManifestRecomputedAfterChange(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := randomBytes(fileSize, 4), randomBytes(fileSize+5000, 5)
	writeFile(t, dir, "f", v1, t0)
	ts := start(t, Config{Dir: dir})

	m1 := ts.manifest(t, "/f")
	verify(t, m1, v1)
	ts.manifest(t, "/f") // from memory
	writeFile(t, dir, "f", v2, t0.Add(time.Second))
	m2 := ts.manifest(t, "/f")
	verify(t, m2, v2)
	res, _ := ts.do(t, "HEAD", "/f")
	if m2.ETag == m1.ETag || m2.ETag != res.Header.Get("Etag") {
		t.Errorf("after the change: manifest ETag %q (was %q), file ETag %q", m2.ETag, m1.ETag, res.Header.Get("Etag"))
	}
	if got, want := res.Header.Get("Repr-Digest"), reprDigest(v2); got != want {
		t.Errorf("Repr-Digest %q, want %q", got, want)
	}

	// The same size: the mtime tells the versions apart.
	v3 := randomBytes(len(v2), 6)
	writeFile(t, dir, "f", v3, t0.Add(2*time.Second))
	verify(t, ts.manifest(t, "/f"), v3)
	if got := ts.metric(t, "stampede_origin_manifests_computed_total"); got != 3 {
		t.Errorf("computed %d manifests, want 3", got)
	}
	if got := ts.metric(t, `stampede_origin_manifest_cache_hits_total{where="memory"}`); got < 1 {
		t.Errorf("memory hits %d, want at least 1", got)
	}
}

func TestManifestDiskCacheSharedAcrossServers(t *testing.T) {
	dir, cacheDir := t.TempDir(), t.TempDir()
	data := randomBytes(fileSize, 6)
	writeFile(t, dir, "f", data, t0)

	a := start(t, Config{Dir: dir, CacheDir: cacheDir})
	verify(t, a.manifest(t, "/f"), data)
	if got := a.metric(t, "stampede_origin_manifests_computed_total"); got != 1 {
		t.Fatalf("first server computed %d manifests, want 1", got)
	}

	b := start(t, Config{Dir: dir, CacheDir: cacheDir})
	verify(t, b.manifest(t, "/f"), data)
	res, _ := b.do(t, "GET", "/f")
	if got, want := res.Header.Get("Repr-Digest"), reprDigest(data); got != want {
		t.Errorf("Repr-Digest from the disk cache %q, want %q", got, want)
	}
	if got := b.metric(t, "stampede_origin_manifests_computed_total"); got != 0 {
		t.Errorf("second server computed %d manifests, want 0", got)
	}
	if got := b.metric(t, `stampede_origin_manifest_cache_hits_total{where="disk"}`); got != 1 {
		t.Errorf("disk hits %d, want 1", got)
	}

	// A file changed while no server ran: the disk entry is stale.
	v2 := randomBytes(fileSize, 7)
	writeFile(t, dir, "f", v2, t0.Add(time.Minute))
	c := start(t, Config{Dir: dir, CacheDir: cacheDir})
	verify(t, c.manifest(t, "/f"), v2)
	if got := c.metric(t, "stampede_origin_manifests_computed_total"); got != 1 {
		t.Errorf("third server computed %d manifests, want 1", got)
	}

	// A damaged cache file is ignored and rewritten.
	files, _ := filepath.Glob(filepath.Join(cacheDir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one", files)
	}
	os.WriteFile(files[0], []byte(`{"version":1,"key":`), 0o644)
	d := start(t, Config{Dir: dir, CacheDir: cacheDir})
	verify(t, d.manifest(t, "/f"), v2)
	if got := d.metric(t, "stampede_origin_manifests_computed_total"); got != 1 {
		t.Errorf("after damage: computed %d manifests, want 1", got)
	}
}

func TestManifestComputedOnceForConcurrentRequests(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(4<<20, 8)
	writeFile(t, dir, "big", data, t0)
	ts := start(t, Config{Dir: dir})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			res, body := ts.do(t, "GET", contract.ManifestPrefix+"/big")
			if res.StatusCode != 200 {
				t.Errorf("%s: %s", res.Status, body)
			}
		})
		wg.Go(func() {
			res, _ := ts.do(t, "HEAD", "/big")
			if res.Header.Get("Repr-Digest") != reprDigest(data) {
				t.Errorf("Repr-Digest %q", res.Header.Get("Repr-Digest"))
			}
		})
	}
	wg.Wait()
	if got := ts.metric(t, "stampede_origin_manifests_computed_total"); got != 1 {
		t.Errorf("computed %d manifests for 32 concurrent requests, want 1", got)
	}
}

func TestManifestOfFileChangingWhileHashed(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := randomBytes(fileSize, 9), randomBytes(fileSize, 10)
	writeFile(t, dir, "f", v1, t0)
	var once sync.Once
	ts := start(t, Config{Dir: dir}, func(s *Server) {
		s.testHookHashed = func(string) {
			once.Do(func() { writeFile(t, dir, "f", v2, t0.Add(time.Second)) })
		}
	})
	m := ts.manifest(t, "/f")
	verify(t, m, v2)
	res, _ := ts.do(t, "HEAD", "/f")
	if m.ETag != res.Header.Get("Etag") {
		t.Errorf("manifest ETag %q, file %q", m.ETag, res.Header.Get("Etag"))
	}
}

func TestPathTraversalRefused(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "served")
	writeFile(t, dir, "ok", []byte("fine"), t0)
	writeFile(t, parent, "secret", []byte("SECRET"), t0)
	if err := os.Symlink("../secret", filepath.Join(dir, "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(parent, "secret"), filepath.Join(dir, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ok", filepath.Join(dir, "inside")); err != nil {
		t.Fatal(err)
	}
	ts := start(t, Config{Dir: dir})

	for _, p := range []string{
		"/../secret", "/%2e%2e/secret", "/..%2fsecret", "/ok/../../secret", "/up", "/abs",
		contract.ManifestPrefix + "/../secret", contract.ManifestPrefix + "/%2e%2e/secret", contract.ManifestPrefix + "/..%2f..%2fsecret",
		contract.ManifestPrefix + "/up", contract.ManifestPrefix + "/abs", "/./../secret", "//../secret",
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", p)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		body, _ := io.ReadAll(res.Body)
		conn.Close()
		if res.StatusCode == 200 || strings.Contains(string(body), "SECRET") {
			t.Errorf("GET %s: %s: %q", p, res.Status, body)
		}
	}
	if res, body := ts.do(t, "GET", "/inside"); res.StatusCode != 200 || string(body) != "fine" {
		t.Errorf("symlink inside the directory: %s %q", res.Status, body)
	}
}

func TestIndexAndMethods(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "sub/x<y>.bin", []byte("x"), t0)
	ts := start(t, Config{Dir: dir})
	res, body := ts.do(t, "GET", "/")
	if res.StatusCode != 200 || !strings.Contains(string(body), `<a href="sub/">sub/</a>`) {
		t.Errorf("index of /: %s %q", res.Status, body)
	}
	res, body = ts.do(t, "GET", "/sub/")
	if res.StatusCode != 200 || !strings.Contains(string(body), `<a href="x%3Cy%3E.bin">x&lt;y&gt;.bin</a>`) {
		t.Errorf("index of /sub/: %s %q", res.Status, body)
	}
	if res, _ := ts.do(t, "POST", "/sub/x%3Cy%3E.bin"); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %s", res.Status)
	}
	if res, _ := ts.do(t, "GET", "/nothing"); res.StatusCode != http.StatusNotFound {
		t.Errorf("missing file: %s", res.Status)
	}
}

func TestMetricsFormat(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(5000, 11)
	writeFile(t, dir, "f", data, t0)
	ts := start(t, Config{Dir: dir, Rate: 1 << 30})
	ts.do(t, "GET", "/f")
	ts.do(t, "GET", "/f", "Range", "bytes=0-99")
	ts.do(t, "GET", "/missing")
	ts.manifest(t, "/f")
	ts.do(t, "DELETE", "/f")

	res, body := ts.do(t, "GET", "/metrics")
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	metricstest.Check(t, body)
	// The /metrics request above counts once it is answered.
	samples := ts.metrics(t)
	for series, want := range map[string]int64{
		`stampede_origin_requests_total{kind="file"}`:       3,
		`stampede_origin_requests_total{kind="manifest"}`:   1,
		`stampede_origin_requests_total{kind="other"}`:      1,
		`stampede_origin_requests_total{kind="metrics"}`:    1,
		`stampede_origin_responses_total{code="200"}`:       3,
		`stampede_origin_responses_total{code="206"}`:       1,
		`stampede_origin_responses_total{code="404"}`:       1,
		`stampede_origin_responses_total{code="405"}`:       1,
		`stampede_origin_rejected_total{reason="overload"}`: 0,
		`stampede_origin_transfers_active`:                  0,
		`stampede_origin_manifests_computed_total`:          1,
		`stampede_origin_rate_limit_bytes_per_second`:       1 << 30,
		`stampede_origin_rate_limit_bytes`:                  1 << 30,
	} {
		if got, ok := samples[series]; !ok || got != want {
			t.Errorf("%s = %d, want %d", series, got, want)
		}
	}
	if got := samples["stampede_origin_bytes_sent_total"]; got < int64(len(data))+100 {
		t.Errorf("bytes sent %d, want at least %d", got, len(data)+100)
	}
}

// readFromRecorder is a ResponseWriter with a ReadFrom, as net/http's is.
type readFromRecorder struct {
	*httptest.ResponseRecorder
	readFroms int
}

func (r *readFromRecorder) ReadFrom(src io.Reader) (int64, error) {
	r.readFroms++
	return io.Copy(r.ResponseRecorder, src)
}

// Without a rate, the body must reach the connection's ReadFrom, which is
// where net/http uses sendfile; with one, it must not.
func TestUnshapedBodyKeepsReadFrom(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(fileSize, 12)
	writeFile(t, dir, "f", data, t0)
	for _, rate := range []int64{0, 1 << 30} {
		s, err := New(Config{Dir: dir, CacheDir: t.TempDir(), Rate: rate, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		w := &readFromRecorder{ResponseRecorder: httptest.NewRecorder()}
		s.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/f", nil))
		s.Close()
		if w.Code != 200 || w.Body.Len() != len(data) {
			t.Fatalf("rate %d: %d, %d bytes", rate, w.Code, w.Body.Len())
		}
		if want := rate == 0; (w.readFroms > 0) != want {
			t.Errorf("rate %d: ReadFrom called %d times", rate, w.readFroms)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	for name, cfg := range map[string]Config{
		"neither":          {CacheDir: t.TempDir()},
		"both":             {Dir: dir, Upstream: mustParse(t, "http://x/"), CacheDir: t.TempDir()},
		"missing dir":      {Dir: filepath.Join(dir, "nope"), CacheDir: t.TempDir()},
		"cache inside dir": {Dir: dir, CacheDir: filepath.Join(dir, "cache")},
		"cache is dir":     {Dir: dir, CacheDir: dir},
		"negative rate":    {Dir: dir, CacheDir: t.TempDir(), Rate: -1},
		"ftp upstream":     {Upstream: mustParse(t, "ftp://x/"), CacheDir: t.TempDir()},
	} {
		if s, err := New(cfg); err == nil {
			s.Close()
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

func TestWarm(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{"a": randomBytes(100, 50), "sub/b": randomBytes(fileSize, 51), "sub/deeper/c": nil}
	for name, data := range files {
		writeFile(t, dir, name, data, t0)
	}
	if err := os.Symlink("a", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	ts := start(t, Config{Dir: dir})
	if err := ts.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := ts.metric(t, "stampede_origin_manifests_computed_total"); got != int64(len(files)) {
		t.Errorf("warming computed %d manifests, want %d", got, len(files))
	}
	for name, data := range files {
		verify(t, ts.manifest(t, "/"+name), data)
	}
	if got := ts.metric(t, `stampede_origin_manifest_cache_hits_total{where="memory"}`); got != int64(len(files)) {
		t.Errorf("memory hits after warming %d, want %d", got, len(files))
	}

	up := start(t, Config{Upstream: mustParse(t, "http://127.0.0.1:1/")})
	if err := up.Warm(t.Context()); err == nil {
		t.Error("warming an upstream front succeeded")
	}
}

// Serve stops waiting for transfers after ShutdownGrace and closes them.
func TestServeShutdownCutsLongTransfers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 50 * time.Millisecond
		dir := t.TempDir()
		writeFile(t, dir, "f", randomBytes(1<<20, 52), t0)
		s, err := New(Config{Dir: dir, CacheDir: t.TempDir(), Rate: 64 << 10, ShutdownGrace: grace, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		nw := memnet.New()
		ln, err := nw.Host(memnet.HostConfig{}).Listen(80)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, ln) }()
		client := &http.Client{Transport: &http.Transport{DialContext: nw.Host(memnet.HostConfig{}).DialContext}}
		res, err := client.Get("http://" + ln.String() + "/f")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		cancel()
		stopping := time.Now()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if took := time.Since(stopping); took != grace {
			t.Errorf("Serve returned %v after it was told to stop, want the grace (%v)", took, grace)
		}
		if body, err := io.ReadAll(res.Body); err == nil {
			t.Errorf("the transfer completed (%d bytes) although the server shut down", len(body))
		}
	})
}

// FuzzCleanName checks that a URL path never becomes a name that climbs out
// of Dir or is absolute, whatever it holds.
func FuzzCleanName(f *testing.F) {
	for _, p := range []string{"/", "/a/b", "/../x", "/a/../../x", "//x", "/a/./b/", "/.../x", "/a\x00b", "/..\\x"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		name, err := cleanName(p)
		if err != nil {
			return
		}
		if name == "" || strings.HasPrefix(name, "/") || strings.ContainsRune(name, 0) {
			t.Fatalf("cleanName(%q) = %q", p, name)
		}
		for seg := range strings.SplitSeq(name, "/") {
			if seg == ".." || seg == "" || (seg == "." && name != ".") {
				t.Fatalf("cleanName(%q) = %q", p, name)
			}
		}
		if !filepath.IsLocal(name) {
			t.Fatalf("cleanName(%q) = %q, not local", p, name)
		}
	})
}
