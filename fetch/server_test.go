package fetch

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
)

// testServer is an origin whose misbehaviour each test scripts: it serves one
// file at /file with Range support and a manifest, and lets a hook take over
// any request.
type testServer struct {
	t   *testing.T
	srv *httptest.Server
	// client reaches srv; nil for a server on loopback, which the
	// download's default client reaches.
	client *http.Client

	mu   sync.Mutex // guards the following
	data []byte
	etag string
	// noValidators: no ETag, no Last-Modified, as some plain servers.
	noValidators bool
	m            *manifest.Manifest
	noManifest   bool
	noRange      bool
	reprDigest   bool
	// hook sees every GET of the file first (n counts them from 0);
	// returning true means it answered. It may change the server's state.
	hook     func(w http.ResponseWriter, r *http.Request, n int) bool
	requests int // file requests so far (GET only)
	ranges   []string
	// open is the client connections not closed yet (connState).
	open map[net.Conn]bool
}

func newTestServer(t *testing.T, data []byte) *testServer {
	s := newUnstartedTestServer(t, data)
	s.srv.Start()
	return s
}

// newUnstartedTestServer is newTestServer before Start, for tests that put
// something in front of its handler or choose its listener.
func newUnstartedTestServer(t *testing.T, data []byte) *testServer {
	s := &testServer{t: t, open: map[net.Conn]bool{}}
	s.setData(data)
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ConnState = s.connState
	t.Cleanup(s.srv.Close)
	return s
}

// connState tracks the client connections, for quiesce.
func (s *testServer) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.open[c] = true
	case http.StateClosed, http.StateHijacked:
		delete(s.open, c)
	}
}

// quiesce closes every client connection and waits until each is done,
// its handler included: a request a stopped download had already sent is
// then counted, or never served, before the test reads stats.
func (s *testServer) quiesce() {
	s.t.Helper()
	s.srv.CloseClientConnections()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := len(s.open)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%d client connections still open", n)
		}
	}
}

// newMemTestServer is newTestServer on an in-memory network, for a test
// inside a synctest bubble: there the pauses and timeouts of a download
// take exactly their virtual time, so a test can assert how long it
// waited. get sends the download's requests through s.client.
func newMemTestServer(t *testing.T, data []byte) *testServer {
	s := newUnstartedTestServer(t, data)
	s.srv.Listener.Close() // httptest's, on loopback
	nw := memnet.New()
	ln, err := nw.Host(memnet.HostConfig{}).Listen(80)
	if err != nil {
		t.Fatal(err)
	}
	s.srv.Listener = ln
	s.srv.Start()
	s.client = memClient(t, nw.Host(memnet.HostConfig{}), 16)
	return s
}

// memClient is NewClient(parallel) dialing from h. Its idle connections
// are closed at the test's end, so that no connection's goroutine
// outlives a synctest bubble.
func memClient(t *testing.T, h *memnet.Host, parallel int) *http.Client {
	c := NewClient(parallel)
	tr := c.Transport.(*http.Transport)
	tr.DialContext = h.DialContext
	tr.Proxy = nil // memnet's addresses are not to be sent to a proxy from the environment
	t.Cleanup(tr.CloseIdleConnections)
	return c
}

func (s *testServer) url() string { return s.srv.URL + "/file" }

// setData replaces the file, as an operator editing it in place would.
func (s *testServer) setData(data []byte) {
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "file")
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data = data
	sum := sha256.Sum256(data)
	s.etag = fmt.Sprintf(`"%x"`, sum[:8])
	m.ETag = s.etag
	s.m = m
}

func (s *testServer) setHook(h func(w http.ResponseWriter, r *http.Request, n int) bool) {
	s.mu.Lock()
	s.hook = h
	s.mu.Unlock()
}

func (s *testServer) stats() (requests int, ranges []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, append([]string(nil), s.ranges...)
}

func (s *testServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	hook, n := s.hook, s.requests
	if r.Method == http.MethodGet && r.URL.Path == "/file" {
		s.requests++
		s.ranges = append(s.ranges, r.Header.Get("Range"))
	}
	s.mu.Unlock()
	if r.Method == http.MethodGet && r.URL.Path == "/file" && hook != nil && hook(w, r, n) {
		return
	}
	s.mu.Lock()
	data, etag, m := s.data, s.etag, s.m
	noManifest, noRange, digest := s.noManifest, s.noRange, s.reprDigest
	modTime := time.Unix(1e9, 0)
	if s.noValidators {
		etag, modTime = "", time.Time{} // ServeContent sends no Last-Modified for a zero time
	}
	s.mu.Unlock()

	switch r.URL.Path {
	case "/.well-known/stampede/manifest/file":
		if noManifest {
			http.NotFound(w, r)
			return
		}
		b, _ := m.MarshalJSON()
		w.Header().Set("Content-Type", "application/vnd.stampede.manifest+json")
		w.Write(b)
		return
	case "/file":
	default:
		http.NotFound(w, r)
		return
	}
	if !noManifest {
		w.Header().Set("Link", `</.well-known/stampede/manifest/file>; rel="stampede-manifest"`)
	}
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	if noRange {
		r.Header.Del("Range")
		w.Header().Set("Accept-Ranges", "none")
	}
	if digest && r.Header.Get("Range") == "" {
		sum := sha256.Sum256(data)
		w.Header().Set("Repr-Digest", httphdr.FormatReprDigestSHA256(sum[:]))
	}
	http.ServeContent(w, r, "file", modTime, bytes.NewReader(data))
}

// serveRange answers r's single range from data, letting the test alter the
// body (corrupt it, cut it short) or the Content-Range header.
func serveRange(w http.ResponseWriter, r *http.Request, data []byte, body func([]byte) []byte, contentRange func(string) string) {
	rs, err := httphdr.ParseRange(r.Header.Get("Range"), int64(len(data)))
	if err != nil || len(rs) != 1 {
		http.Error(w, "test server: want one range", http.StatusBadRequest)
		return
	}
	part := append([]byte(nil), data[rs[0].Start:rs[0].Start+rs[0].Length]...)
	cr := httphdr.FormatContentRange(rs[0], int64(len(data)))
	if contentRange != nil {
		cr = contentRange(cr)
	}
	if body != nil {
		part = body(part)
	}
	w.Header().Set("Content-Range", cr)
	w.Header().Set("Content-Length", fmt.Sprint(rs[0].Length))
	w.WriteHeader(http.StatusPartialContent)
	w.Write(part)
}

// rangeStart returns the first byte of a "bytes=a-b" request, or -1.
func rangeStart(r *http.Request) int64 {
	var a, b int64
	if _, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &a, &b); err != nil {
		return -1
	}
	return a
}

func randomData(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
