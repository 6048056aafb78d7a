package cdn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
)

// The tests run a cluster of nodes on loopback listeners in one process,
// in front of a test origin that counts the body bytes it sends.

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func randomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// testOrigin serves files at /NAME, each optionally with a manifest at
// /NAME.manifest, and counts what it sends.
type testOrigin struct {
	t   testing.TB
	URL string // http://127.0.0.1:PORT
	srv *http.Server

	mu    sync.Mutex
	files map[string]*originFile

	bodyBytes atomic.Int64
	heads     atomic.Int64
	gets      atomic.Int64
	// delay, if set, is slept before each GET of a file's bytes.
	delay atomic.Int64
}

type originFile struct {
	data     []byte
	etag     string
	header   http.Header // extra response headers
	manifest []byte      // encoded, or nil
	// variants, if set, answers by the Accept-Language of the request.
	variants map[string][]byte
}

func newTestOrigin(t testing.TB) *testOrigin {
	o := &testOrigin{t: t, files: make(map[string]*originFile)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.URL = "http://" + ln.Addr().String()
	o.srv = &http.Server{Handler: o}
	go o.srv.Serve(ln)
	t.Cleanup(func() { o.srv.Close() })
	return o
}

// add publishes data at /name with extra headers, and with a manifest
// when withManifest.
func (o *testOrigin) add(name string, data []byte, withManifest bool, hdr http.Header) *originFile {
	f := &originFile{data: data, etag: fmt.Sprintf(`"%x"`, sha256.Sum256(data))[:18] + `"`, header: hdr}
	if withManifest {
		m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), name)
		if err != nil {
			o.t.Fatal(err)
		}
		m.ETag = f.etag
		if f.manifest, err = m.MarshalJSON(); err != nil {
			o.t.Fatal(err)
		}
	}
	o.mu.Lock()
	o.files[name] = f
	o.mu.Unlock()
	return f
}

var modTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (o *testOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	isManifest := strings.HasSuffix(name, ".manifest")
	name = strings.TrimSuffix(name, ".manifest")
	o.mu.Lock()
	f := o.files[name]
	o.mu.Unlock()
	if f == nil || (isManifest && f.manifest == nil) {
		http.NotFound(w, r)
		return
	}
	if isManifest {
		w.Header().Set("Content-Type", "application/json")
		w.Write(f.manifest)
		return
	}
	data := f.data
	if f.variants != nil {
		data = f.variants[r.Header.Get("Accept-Language")]
	}
	for k, v := range f.header {
		w.Header()[k] = v
	}
	w.Header().Set("ETag", f.etag)
	if f.manifest != nil {
		w.Header().Set("Link", "</"+name+`.manifest>; rel="stampede-manifest"`)
	}
	if r.Method == http.MethodHead {
		o.heads.Add(1)
	} else {
		o.gets.Add(1)
		if d := o.delay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
	}
	http.ServeContent(countingWriter{w, &o.bodyBytes}, r, "", modTime, bytes.NewReader(data))
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	k, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(k))
	return k, err
}

// testNode is one node of a test cluster and its server.
type testNode struct {
	*Node
	addr string
	srv  *http.Server
	ln   net.Listener
	dead atomic.Bool
}

func (tn *testNode) url(target string) string { return "http://" + tn.addr + "/" + target }

// kill stops the node as a crash would: its listener and connections
// closed, its heartbeats stopped.
func (tn *testNode) kill() {
	if tn.dead.Swap(true) {
		return
	}
	tn.srv.Close()
	tn.Node.Close()
}

// startCluster starts n nodes, each told of all, in front of o.
func startCluster(t testing.TB, n int, o *testOrigin, tune func(i int, c *Config)) []*testNode {
	t.Helper()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	nodes := make([]*testNode, n)
	for i := range nodes {
		cfg := Config{Self: addrs[i], Nodes: addrs, CacheDir: t.TempDir(), ChunkSize: 64 << 10,
			BeatInterval: 200 * time.Millisecond, MinDeadline: 500 * time.Millisecond, MaxDeadline: 3 * time.Second,
			Logger: testLogger(t).With("node", i)}
		if o != nil {
			cfg.AllowOrigins = []string{strings.TrimPrefix(o.URL, "http://")}
		}
		cfg.Members.DownAfter = 2 * time.Second
		if tune != nil {
			tune(i, &cfg)
		}
		nd, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		tn := &testNode{Node: nd, addr: addrs[i], ln: lns[i]}
		tn.srv = &http.Server{Handler: nd, ErrorLog: slog.NewLogLogger(testLogger(t).Handler(), slog.LevelDebug)}
		go tn.srv.Serve(lns[i])
		nd.Start(context.Background())
		nodes[i] = tn
		t.Cleanup(tn.kill)
	}
	return nodes
}

// get fetches u with the headers given and returns the response and its
// whole body, or the error of reading it.
func get(t testing.TB, u string, hdr ...string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// mustGet is get that fails the test on an error or an unexpected status.
func mustGet(t testing.TB, u string, status int, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	resp, body, err := get(t, u, hdr...)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	if resp.StatusCode != status {
		t.Fatalf("GET %s: status %d, want %d: %s", u, resp.StatusCode, status, body)
	}
	return resp, body
}
