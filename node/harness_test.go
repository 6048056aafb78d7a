package node_test

// The harness of the swarm tests: an origin (the real origin.Server with its
// embedded tracker, behind an instrumented handler), a network (real
// loopback with listeners we create, or internal/memnet), and peers that are
// whole downloads (fetch.Download in swarm mode, one goroutine each), or
// hand-built misbehaving peers speaking the wire protocol directly.

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
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
)

func randomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := n - n%8; i < n; i++ {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// testLogger writes to the test's output at level, or at debug level for
// every logger when STAMPEDETEST_DEBUG is set (for one test at a time:
// go test -run TestX -v ./node).
func testLogger(t *testing.T, level slog.Level) *slog.Logger {
	if testDebug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

var testDebug = os.Getenv("STAMPEDETEST_DEBUG") != ""

// network is where a test's components listen and dial: real loopback or a
// memnet.Network.
type network interface {
	// listen returns a listener for one component, and the functions that
	// component dials with.
	listen(t *testing.T, cfg memnet.HostConfig) (net.Listener, func(context.Context, string) (net.Conn, error))
}

type loopback struct{}

func (loopback) listen(t *testing.T, _ memnet.HostConfig) (net.Listener, func(context.Context, string) (net.Conn, error)) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	d := &net.Dialer{Timeout: 5 * time.Second}
	return ln, func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

type memNetwork struct{ n *memnet.Network }

// memListener is a memnet listener that can listen on its address again.
type memListener struct {
	*memnet.Listener
	t *testing.T
	h *memnet.Host
}

func (l memListener) Relisten() (net.Listener, error) {
	ln, err := l.h.Listen(uint16(l.Addr().(*net.TCPAddr).Port))
	if err != nil {
		return nil, err
	}
	l.t.Cleanup(func() { ln.Close() })
	return memListener{ln, l.t, l.h}, nil
}

func (m memNetwork) listen(t *testing.T, cfg memnet.HostConfig) (net.Listener, func(context.Context, string) (net.Conn, error)) {
	h := m.n.Host(cfg)
	ml, err := h.Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	ln := memListener{ml, t, h}
	t.Cleanup(func() { ln.Close() })
	return ln, h.Dial
}

func httpClient(dial func(context.Context, string) (net.Conn, error)) *http.Client {
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) },
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr}
}

// testOrigin is an origin.Server with its tracker, serving one file, behind
// a handler that counts what the swarm asks of it.
type testOrigin struct {
	t    *testing.T
	srv  *origin.Server
	ln   net.Listener
	base string // http://host:port
	url  string // of the file
	data []byte
	m    *manifest.Manifest
	http *http.Client // on the origin's own host, for /metrics
	// relisten listens again on ln's address (restart).
	relisten func() (net.Listener, error)

	hsMu sync.Mutex // guards hs
	hs   *http.Server

	// Switches.
	trackerDown atomic.Bool // the tracker answers 503
	bodiesDown  atomic.Bool // file GETs answer 503 (HEAD and manifests pass)
	// Hooks (from originConfig), called on the request's goroutine.
	onPiece   func(served int)
	onStarted func(started int)

	mu          sync.Mutex // guards the following
	bodies      int        // file bodies being sent (206/200 written, handler not returned)
	maxBodies   int
	requests    int // file requests in the handler (any outcome)
	maxRequests int
	gets        int // file GETs
	status      map[int]int
	perPiece    map[int]int // origin fetches (206) per piece index
	served      int         // 206 responses
	bodyBytes   int64
	trackerHits int
	started     int   // "started" announces
	allBytes    int64 // every response's body: files, manifests, tracker answers
}

type originConfig struct {
	size         int
	seed         uint64
	rate         int64
	maxTransfers int
	// overloadTransfers is origin.Config.OverloadTransfers (negative: no
	// overload mode, every request past maxTransfers gets 503).
	overloadTransfers int
	net               network
	// onPiece is called after each piece served (206), with the count so
	// far; onStarted after each "started" announce, with the count so far.
	onPiece   func(served int)
	onStarted func(started int)
}

const fileName = "f.bin"

func startOrigin(t *testing.T, cfg originConfig) *testOrigin {
	t.Helper()
	if cfg.net == nil {
		cfg.net = loopback{}
	}
	dir := t.TempDir()
	data := randomBytes(cfg.size, cfg.seed)
	if err := os.WriteFile(filepath.Join(dir, fileName), data, 0o644); err != nil {
		t.Fatal(err)
	}
	tr := tracker.New(tracker.Config{Logger: testLogger(t, slog.LevelWarn)})
	srv, err := origin.New(origin.Config{
		Dir: dir, CacheDir: t.TempDir(), Rate: cfg.rate, MaxTransfers: cfg.maxTransfers,
		OverloadTransfers: cfg.overloadTransfers,
		Tracker:           tr, Logger: testLogger(t, slog.LevelWarn),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, dial := cfg.net.listen(t, memnet.HostConfig{})
	o := &testOrigin{
		t: t, srv: srv, ln: ln, data: data, http: httpClient(dial), relisten: relistener(t, cfg.net, ln),
		base:   "http://" + ln.Addr().String(),
		status: map[int]int{}, perPiece: map[int]int{},
		onPiece: cfg.onPiece, onStarted: cfg.onStarted,
	}
	o.url = o.base + "/" + fileName
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), fileName)
	if err != nil {
		t.Fatal(err)
	}
	o.m = m
	// The origin's own Serve would not let us in front of its handler:
	// serve it with ours.
	o.serve(ln)
	t.Cleanup(func() {
		o.http.CloseIdleConnections()
		o.kill()
		srv.Close()
	})
	return o
}

// serve serves o's handler on ln, in place of the last server.
func (o *testOrigin) serve(ln net.Listener) {
	hs := &http.Server{Handler: o.handler(), ErrorLog: slog.NewLogLogger(testLogger(o.t, slog.LevelWarn).Handler(), slog.LevelWarn)}
	o.hsMu.Lock()
	o.hs = hs
	o.hsMu.Unlock()
	go hs.Serve(ln)
}

// relistener returns a function that listens on ln's address again.
func relistener(t *testing.T, nw network, ln net.Listener) func() (net.Listener, error) {
	addr := ln.Addr().String()
	ln2, ok := ln.(interface {
		Relisten() (net.Listener, error)
	})
	if ok {
		return ln2.Relisten
	}
	if _, ok := nw.(loopback); ok {
		return func() (net.Listener, error) {
			l, err := net.Listen("tcp", addr)
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return l, err
		}
	}
	return func() (net.Listener, error) { return nil, fmt.Errorf("cannot listen on %s again", addr) }
}

func (o *testOrigin) pieceOf(rangeHdr string) int {
	rs, err := httphdr.ParseRange(rangeHdr, int64(len(o.data)))
	if err != nil || len(rs) != 1 {
		return -1
	}
	return int(rs[0].Start / o.m.PieceSize)
}

// countingWriter records the status and body bytes of one response. A body
// stops counting in o.bodies when its last byte is written (or the handler
// returns): the origin frees its transfer slot right after that, before its
// handler returns, so counting until the return would see the next body
// start while this one still counts.
type countingWriter struct {
	http.ResponseWriter
	o      *testOrigin
	status int
	body   bool  // counted in o.bodies
	left   int64 // body bytes still to write (-1: unknown)
}

func (w *countingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if code == http.StatusOK || code == http.StatusPartialContent {
			w.o.mu.Lock()
			w.o.bodies++
			w.o.maxBodies = max(w.o.maxBodies, w.o.bodies)
			w.o.mu.Unlock()
			w.body = true
			w.left = -1
			if n, err := strconv.ParseInt(w.Header().Get("Content-Length"), 10, 64); err == nil {
				w.left = n
			}
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.o.mu.Lock()
	w.o.bodyBytes += int64(n)
	if w.body && w.left >= 0 {
		if w.left -= int64(n); w.left <= 0 {
			w.o.bodies--
			w.body = false
		}
	}
	w.o.mu.Unlock()
	return n, err
}

// handler wraps the origin's handler with the counters and switches.
func (o *testOrigin) handler() http.Handler {
	inner := o.srv.Handler()
	return http.HandlerFunc(func(w0 http.ResponseWriter, r *http.Request) {
		w := &allCounter{w0, o}
		switch {
		case r.URL.Path == tracker.WellKnownPath:
			o.mu.Lock()
			o.trackerHits++
			started := 0
			if r.URL.Query().Get("event") == string(tracker.EventStarted) {
				o.started++
				started = o.started
			}
			o.mu.Unlock()
			if o.trackerDown.Load() {
				http.Error(w, "tracker down for the test", http.StatusServiceUnavailable)
				return
			}
			inner.ServeHTTP(w, r)
			if started > 0 && o.onStarted != nil {
				o.onStarted(started)
			}
			return
		case r.URL.Path != "/"+fileName || r.Method != http.MethodGet:
			inner.ServeHTTP(w, r)
			return
		}
		o.mu.Lock()
		o.gets++
		o.requests++
		o.maxRequests = max(o.maxRequests, o.requests)
		o.mu.Unlock()
		cw := &countingWriter{ResponseWriter: w, o: o}
		defer func() {
			o.mu.Lock()
			o.requests--
			if cw.body {
				o.bodies--
			}
			o.status[cw.status]++
			served := 0
			if cw.status == http.StatusPartialContent {
				o.perPiece[o.pieceOf(r.Header.Get("Range"))]++
				o.served++
				served = o.served
			}
			o.mu.Unlock()
			if served > 0 && o.onPiece != nil {
				o.onPiece(served)
			}
		}()
		if o.bodiesDown.Load() {
			w.Header().Set("Retry-After", "1")
			cw.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(cw, r)
	})
}

// allCounter counts every body byte the origin writes (allBytes).
type allCounter struct {
	http.ResponseWriter
	o *testOrigin
}

func (w *allCounter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.o.mu.Lock()
	w.o.allBytes += int64(n)
	w.o.mu.Unlock()
	return n, err
}

func (w *allCounter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// kill stops the origin: its listener and connections close, and new
// connections are refused, until restart.
func (o *testOrigin) kill() {
	o.hsMu.Lock()
	defer o.hsMu.Unlock()
	o.hs.Close()
}

// restart brings a killed origin back on its address, with its state
// (cache, tracker) as it was.
func (o *testOrigin) restart() {
	ln, err := o.relisten()
	if err != nil {
		o.t.Errorf("origin restart: %v", err)
		return
	}
	o.serve(ln)
}

// originStats is a snapshot of the counters.
type originStats struct {
	gets, maxBodies, maxRequests int
	status                       map[int]int
	perPiece                     map[int]int
	bodyBytes, allBytes          int64
	trackerHits                  int
}

func (o *testOrigin) stats() originStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := originStats{gets: o.gets, maxBodies: o.maxBodies, maxRequests: o.maxRequests,
		bodyBytes: o.bodyBytes, allBytes: o.allBytes, trackerHits: o.trackerHits, status: map[int]int{}, perPiece: map[int]int{}}
	for k, v := range o.status {
		s.status[k] = v
	}
	for k, v := range o.perPiece {
		s.perPiece[k] = v
	}
	return s
}

// metric reads one sample of the origin's /metrics.
func (o *testOrigin) metric(name string) float64 {
	o.t.Helper()
	resp, err := o.http.Get(o.base + "/metrics")
	if err != nil {
		o.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	o.t.Fatalf("/metrics has no %s", name)
	return 0
}

// scenarioSwarm is the scheduler configuration of the swarm scenarios: the
// defaults.
func scenarioSwarm() swarm.Config { return swarm.Config{} }

// peerResult is one download's outcome.
type peerResult struct {
	idx  int
	res  *fetch.Result
	err  error
	took time.Duration
	path string
}

// peerConfig describes one downloading peer.
type peerConfig struct {
	link     memnet.HostConfig
	seedTime time.Duration
	node     node.Config   // network hooks are filled in
	swarm    *swarm.Config // default scenarioSwarm()
	limit    int64         // --limit-rate
	// listening, if set, is told the peer's listening address before it
	// starts.
	listening func(addr string)
	// wrapDial, if set, wraps the peer's dialer (HTTP and peers alike).
	wrapDial func(func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error)
}

// runPeer downloads the origin's file as one swarm peer on net.
func runPeer(ctx context.Context, t *testing.T, o *testOrigin, nw network, idx int, pc peerConfig) peerResult {
	out := filepath.Join(t.TempDir(), fmt.Sprintf("peer%d.bin", idx))
	ln, dial := nw.listen(t, pc.link)
	if pc.listening != nil {
		pc.listening(ln.Addr().String())
	}
	if pc.wrapDial != nil {
		dial = pc.wrapDial(dial)
	}
	ncfg := pc.node
	ncfg.Swarm = scenarioSwarm()
	if pc.swarm != nil {
		ncfg.Swarm = *pc.swarm
	}
	ncfg.Listener = ln
	ncfg.Dial = dial
	client := httpClient(dial)
	defer client.CloseIdleConnections()
	ncfg.HTTPClient = client
	if ncfg.Logger == nil {
		ncfg.Logger = testLogger(t, slog.LevelWarn).With("peer", idx)
	}
	d, err := fetch.New(fetch.Config{
		URL: o.url, Output: out, Client: client, LimitRate: pc.limit,
		Logger: ncfg.Logger,
		Swarm:  fetch.SwarmConfig{SeedTime: pc.seedTime, Node: ncfg},
	})
	if err != nil {
		return peerResult{idx: idx, err: err}
	}
	start := time.Now()
	res, err := d.Run(ctx)
	took := time.Since(start)
	if res != nil && res.Seconds > 0 {
		took = time.Duration(res.Seconds * float64(time.Second))
	}
	return peerResult{idx: idx, res: res, err: err, took: took, path: out}
}

// runSwarm starts n peers at once and waits for them all.
func runSwarm(ctx context.Context, t *testing.T, o *testOrigin, nw network, n int, pc func(i int) peerConfig) []peerResult {
	results := make([]peerResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = runPeer(ctx, t, o, nw, i, pc(i)) })
	}
	wg.Wait()
	return results
}

// checkAll fails the test unless every result succeeded with the origin's
// bytes.
func checkAll(t *testing.T, o *testOrigin, results []peerResult) {
	t.Helper()
	want := sha256.Sum256(o.data)
	for _, r := range results {
		if r.err != nil {
			t.Errorf("peer %d: %v", r.idx, r.err)
			continue
		}
		got, err := os.ReadFile(r.path)
		if err != nil {
			t.Errorf("peer %d: %v", r.idx, err)
			continue
		}
		if sha256.Sum256(got) != want {
			t.Errorf("peer %d: the file differs from the origin's (%d bytes, want %d)", r.idx, len(got), len(o.data))
		}
	}
}

// summary is what a swarm run measured.
type summary struct {
	maxTook, meanTook, medianTook time.Duration
	fromPeers, toPeers            int64
	piecesFromPeers, banned       int
	originFetches                 map[string]int
	queueDrops                    int64
	timeouts                      int
}

func summarize(results []peerResult) summary {
	s := summary{originFetches: map[string]int{}}
	var tooks []time.Duration
	for _, r := range results {
		if r.res == nil {
			continue
		}
		tooks = append(tooks, r.took)
		s.maxTook = max(s.maxTook, r.took)
		s.meanTook += r.took
		if sw := r.res.Swarm; sw != nil {
			s.fromPeers += sw.BytesFromPeers
			s.toPeers += sw.BytesToPeers
			s.piecesFromPeers += sw.PiecesFromPeer
			s.banned += sw.PeersBanned
			s.queueDrops += sw.QueueDrops
			s.timeouts += sw.RequestTimeouts
			for k, v := range sw.OriginFetches {
				s.originFetches[k] += v
			}
		}
	}
	if len(tooks) > 0 {
		s.meanTook /= time.Duration(len(tooks))
		slices.Sort(tooks)
		s.medianTook = tooks[len(tooks)/2]
	}
	return s
}

func (s summary) String() string {
	keys := make([]string, 0, len(s.originFetches))
	for k := range s.originFetches {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var of []string
	for _, k := range keys {
		of = append(of, fmt.Sprintf("%s=%d", k, s.originFetches[k]))
	}
	return fmt.Sprintf("completion max %v, median %v, mean %v; from peers %d bytes (%d pieces); origin fetches [%s]; banned %d; queue drops %d; request timeouts %d",
		s.maxTook.Round(time.Millisecond), s.medianTook.Round(time.Millisecond), s.meanTook.Round(time.Millisecond),
		s.fromPeers, s.piecesFromPeers, strings.Join(of, " "), s.banned, s.queueDrops, s.timeouts)
}
