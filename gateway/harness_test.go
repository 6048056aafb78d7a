package gateway

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/sign"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
)

// The tests run real origins (origin.Server over a directory, with its
// tracker) and the gateway on loopback listeners, and clients that use
// the gateway as a proxy or by prefix.

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func randomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// serveOn serves h on a new loopback listener until the test ends and
// returns its base URL.
func serveOn(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ErrorLog: slog.NewLogLogger(testLogger(t).Handler(), slog.LevelDebug)}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String()
}

// testOrigin is a stampede origin over a directory, counting what it is
// asked for.
type testOrigin struct {
	base string
	dir  string
	srv  *origin.Server

	mu       sync.Mutex     // guards the following
	requests map[string]int // "METHOD PATH" (ranged GETs as "RANGE PATH")
	// wrap, if set, may answer a request instead of the origin.
	wrap func(w http.ResponseWriter, r *http.Request, next http.Handler) bool
}

type originOpts struct {
	rate      int64 // bytes/s of file bodies (0: unlimited)
	noTracker bool
	private   bool // a private swarm's origin (a key of its own)
}

func startOrigin(t testing.TB, files map[string][]byte, opts originOpts) *testOrigin {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := origin.Config{Dir: dir, CacheDir: t.TempDir(), Rate: opts.rate, Logger: testLogger(t)}
	if opts.private {
		cfg.SignKey, cfg.Private = sign.GenerateKey(), true
	}
	if !opts.noTracker {
		cfg.Tracker = tracker.New(tracker.Config{Logger: testLogger(t)})
	}
	srv, err := origin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	o := &testOrigin{dir: dir, srv: srv, requests: map[string]int{}}
	o.base = serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		what := r.Method
		if r.Header.Get("Range") != "" {
			what = "RANGE"
		}
		o.mu.Lock()
		o.requests[what+" "+r.URL.Path]++
		wrap := o.wrap
		o.mu.Unlock()
		if wrap != nil && wrap(w, r, srv.Handler()) {
			return
		}
		srv.Handler().ServeHTTP(w, r)
	}))
	return o
}

func (o *testOrigin) count(what string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests[what]
}

func (o *testOrigin) setWrap(f func(w http.ResponseWriter, r *http.Request, next http.Handler) bool) {
	o.mu.Lock()
	o.wrap = f
	o.mu.Unlock()
}

// testGateway is a Gateway serving on loopback.
type testGateway struct {
	*Gateway
	addr     string      // host:port
	base     string      // http://host:port
	stop     func()      // stops serving and closes the gateway (idempotent)
	complete chan string // keys of completed downloads
}

// fastNode makes the scheduler's origin slices short, so that tests of
// retries do not wait whole seconds.
func fastNode() node.Config {
	return node.Config{Swarm: swarm.Config{OriginSlice: 50 * time.Millisecond, TrackerWait: 200 * time.Millisecond}}
}

func startGateway(t testing.TB, cfg Config) *testGateway {
	t.Helper()
	return startGatewayOpts(t, cfg, gatewayOpts{})
}

// gatewayOpts are what some tests change in startGatewayOpts.
type gatewayOpts struct {
	// wide serves on a loopback listener that reports 0.0.0.0:PORT, as a
	// gateway listening on every interface would.
	wide bool
	// kindOf, if set, replaces addrKind (which addresses are refused).
	kindOf func(netip.Addr) string
}

// wideListener is a loopback listener that says it listens on every
// interface: tests listen on loopback only.
type wideListener struct{ net.Listener }

func (l wideListener) Addr() net.Addr {
	a := *l.Listener.Addr().(*net.TCPAddr)
	a.IP = net.IPv4zero
	return &a
}

func startGatewayOpts(t testing.TB, cfg Config, opts gatewayOpts) *testGateway {
	t.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Node.Swarm.OriginSlice == 0 {
		cfg.Node.Swarm = fastNode().Swarm
	}
	if cfg.PeerListen == "" {
		cfg.PeerListen = "127.0.0.1:0"
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	complete := make(chan string, 100)
	g.cache.testHookComplete = func(key string) {
		select {
		case complete <- key:
		default:
		}
	}
	if opts.kindOf != nil {
		g.kindOf = opts.kindOf
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if opts.wide {
		ln = wideListener{ln}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
			g.Close()
		})
	}
	t.Cleanup(stop)
	return &testGateway{Gateway: g, addr: addr, base: "http://" + addr, stop: stop, complete: complete}
}

// awaitComplete waits for the next download to complete and returns its key.
func (g *testGateway) awaitComplete(t testing.TB) string {
	t.Helper()
	select {
	case key := <-g.complete:
		return key
	case <-time.After(30 * time.Second):
		t.Fatal("no download completed within 30s")
	}
	return ""
}

// proxyClient uses the gateway as a forward proxy.
func (g *testGateway) proxyClient() *http.Client {
	u, _ := url.Parse(g.base)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableCompression: true}}
}

// prefixed is target's URL in prefix form.
func (g *testGateway) prefixed(target string) string { return g.base + "/" + target }

// plainClient talks to the gateway (or anything) directly.
func plainClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}
}

// get fetches u with hdr and returns the response with its body read.
func get(t testing.TB, c *http.Client, method, u string, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, u, err)
	}
	return resp, body
}

func mustEqual(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: got %d bytes, want %d; first difference at byte %d", what, len(got), len(want), i)
	}
}

// portOf is the port of a listener's address.
func portOf(t testing.TB, a net.Addr) uint16 {
	t.Helper()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	return ap.Port()
}
