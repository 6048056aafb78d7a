package webpeer_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/webpeer"
)

// The browser tests run visitors' browsers (Debian's headless Chromium,
// driven by chromedp) as peers of one swarm, each in a network namespace
// of its own: Chromium gathers no ICE candidates without a default route,
// and loopback candidates do not connect, so each namespace has a veth on
// a test bridge, an address of 10.77.0.0/24 and a default route to the
// bridge, where the origin listens. They need root, Chromium and
// STAMPEDETEST_BROWSER=1 (make browser-test sets it): they take a minute
// and a good part of two cores.
const browserEnv = "STAMPEDETEST_BROWSER"

// The test network. Names start with "wp" (web peer) so that a run never
// touches another's.
const (
	bridge    = "wpbr0"
	bridgeIP  = "10.77.0.1"
	netPrefix = "10.77.0."
)

const waitPage = 60 * time.Second

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// nsAddr is the address of namespace wp-b<i>.
func nsAddr(i int) string { return fmt.Sprintf("%s%d", netPrefix, 10+i) }

// netLock is the file whose lock a test holds while it has the test
// network: two processes running these tests at once (two checkouts, or
// two people's go test) would otherwise tear down each other's bridge.
const netLock = "/run/lock/stampede-wpbr0.lock"

// setupNet makes the bridge and n namespaces wp-b0... wp-b<n-1> with a
// veth on it each, and removes them when the test ends. It waits for
// another process's test to be done with them first.
func setupNet(t *testing.T, n int) []string {
	t.Helper()
	os.MkdirAll(filepath.Dir(netLock), 0o755)
	lock, err := os.OpenFile(netLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock %s: %v", netLock, err)
	}
	t.Cleanup(func() { lock.Close() }) // after the cleanup below: last in, first out
	cleanup := func() {
		for i := range n {
			exec.Command("ip", "netns", "del", fmt.Sprintf("wp-b%d", i)).Run()
			exec.Command("ip", "link", "del", fmt.Sprintf("wp-h%d", i)).Run()
		}
		exec.Command("ip", "link", "del", bridge).Run()
	}
	cleanup() // what a killed run left
	t.Cleanup(cleanup)
	run(t, "ip", "link", "add", bridge, "type", "bridge")
	run(t, "ip", "addr", "add", bridgeIP+"/24", "dev", bridge)
	run(t, "ip", "link", "set", bridge, "up")
	var names []string
	for i := range n {
		ns, host, peer := fmt.Sprintf("wp-b%d", i), fmt.Sprintf("wp-h%d", i), fmt.Sprintf("wp-n%d", i)
		run(t, "ip", "netns", "add", ns)
		run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer)
		run(t, "ip", "link", "set", peer, "netns", ns)
		run(t, "ip", "link", "set", host, "master", bridge, "up")
		run(t, "ip", "-n", ns, "addr", "add", nsAddr(i)+"/24", "dev", peer)
		run(t, "ip", "-n", ns, "link", "set", peer, "up")
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", ns, "route", "add", "default", "via", bridgeIP)
		names = append(names, ns)
	}
	// The kernel tells a link's carrier late on a loaded machine (up to a
	// second or more), and Chromium started before a namespace's link is
	// up says the network is off (ERR_INTERNET_DISCONNECTED).
	for i, ns := range names {
		peer := fmt.Sprintf("wp-n%d", i)
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, _ := exec.Command("ip", "-n", ns, "-br", "link", "show", "dev", peer).Output()
			if strings.Contains(string(out), " UP ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s in %s is not up: %s", peer, ns, out)
			}
			time.Sleep(20 * time.Millisecond) // no event to wait on short of netlink
		}
	}
	return names
}

// testOrigin is `stampede serve` of a directory with a page that opts in
// and a 1 MiB object, whose bodies can be refused (blocked).
type testOrigin struct {
	url     string
	www     string // the directory served
	obj     []byte
	sha     string
	blocked atomic.Bool
	off     atomic.Bool  // the kill switch: the peer is served off
	bodies  atomic.Int64 // bytes of /obj.bin sent
	byIP    sync.Map     // client IP -> *atomic.Int64: bytes of /obj.bin sent to it
	asks    sync.Map     // path -> *atomic.Int64: requests of its manifest
	peerOff atomic.Bool  // manifests are answered with Stampede-Peer: off
}

// manifestAsks is how many times path's manifest was asked for.
func (o *testOrigin) manifestAsks(path string) int64 {
	if n, ok := o.asks.Load(path); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// sentTo is how many bytes of /obj.bin the origin sent to ip.
func (o *testOrigin) sentTo(ip string) int64 {
	if n, ok := o.byIP.Load(ip); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

func startOrigin(t *testing.T) *testOrigin { return startOriginRate(t, 0, testPeerConfig) }

// testPeerConfig is the peer.json of the tests: a shorter deadline, and a
// kill switch read every second.
var testPeerConfig = webpeer.Config{Deadline: 3 * time.Second, CheckEvery: time.Second}

// startOriginRate is startOrigin with the file bodies capped to rate bytes
// a second (0: unlimited), and the peer configured by wcfg.
func startOriginRate(t *testing.T, rate int64, wcfg webpeer.Config) *testOrigin {
	t.Helper()
	www := t.TempDir()
	o := &testOrigin{obj: make([]byte, 1<<20), www: www}
	rand.Read(o.obj)
	sum := sha256.Sum256(o.obj)
	o.sha = hex.EncodeToString(sum[:])
	os.WriteFile(filepath.Join(www, "obj.bin"), o.obj, 0o644)
	os.WriteFile(filepath.Join(www, "index.html"), []byte(`<!doctype html><title>t</title>
<script type="module" src="/.well-known/stampede/peer.js"></script><p>hello</p>`), 0o644)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	tr := tracker.New(tracker.Config{Logger: log, OnlyAdmitted: true})
	on := webpeer.Handler(wcfg)
	off := webpeer.Handler(webpeer.Config{Off: true})
	srv, err := origin.New(origin.Config{Dir: www, CacheDir: t.TempDir(), Tracker: tr, Logger: log, Rate: rate,
		WebPeer: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if o.off.Load() {
				off.ServeHTTP(w, r)
				return
			}
			on.ServeHTTP(w, r)
		})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ln, err := net.Listen("tcp", bridgeIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/obj.bin" {
			// Bodies only: a native download's probe (HEAD) still passes.
			if o.blocked.Load() && r.Method == http.MethodGet {
				// As an origin past its budget answers a swarm client.
				w.Header().Set("Retry-After", "60")
				w.Header().Set(contract.BudgetHeader, "spent, left=0, reset=60")
				http.Error(w, "blocked by the test", http.StatusServiceUnavailable)
				return
			}
			ip, _, _ := net.SplitHostPort(r.RemoteAddr)
			n, _ := o.byIP.LoadOrStore(ip, new(atomic.Int64))
			cw := &countingWriter{ResponseWriter: w, n: &o.bodies, ip: n.(*atomic.Int64)}
			h.ServeHTTP(cw, r)
			return
		}
		if p, ok := strings.CutPrefix(r.URL.Path, webpeer.Prefix+"manifest"); ok {
			n, _ := o.asks.LoadOrStore(p, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			if o.peerOff.Load() {
				w.Header().Set("Stampede-Peer", "off") // as a proxy before the origin may add
			}
		}
		h.ServeHTTP(w, r)
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	o.url = "http://" + ln.Addr().String()
	return o
}

type countingWriter struct {
	http.ResponseWriter
	n, ip *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	c.ip.Add(int64(n))
	return n, err
}

// browser is a headless Chromium in a namespace, with the test page open.
type browser struct {
	t      *testing.T
	name   string
	ctx    context.Context
	cancel func()
}

func openBrowser(t *testing.T, ns, name string, o *testOrigin) *browser {
	t.Helper()
	return openPage(t, ns, name, o, "/index.html")
}

// openPage opens a Chromium in ns on the origin's page at path, which
// runs the peer, and waits for the peer to be on.
func openPage(t *testing.T, ns, name string, o *testOrigin, path string) *browser {
	t.Helper()
	b := blank(t, ns, name, o)
	b.do(chromedp.Navigate(o.url + path))
	var ready string
	b.eval(`stampede.ready`, &ready)
	if ready != "on" {
		t.Fatalf("%s: the peer is %q, want on", name, ready)
	}
	return b
}

// blank opens a Chromium in ns on about:blank, ready to navigate, with
// the options extra besides the tests' own.
func blank(t *testing.T, ns, name string, o *testOrigin, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "chromium-in-netns")
	os.WriteFile(wrapper, []byte("#!/bin/sh\nexec ip netns exec "+ns+" chromium \"$@\"\n"), 0o755)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(wrapper), chromedp.NoSandbox,
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		// Service workers and SubtleCrypto need a secure context.
		chromedp.Flag("unsafely-treat-insecure-origin-as-secure", o.url),
		// Host candidates as addresses, not mDNS names, which a
		// namespace cannot resolve.
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,WebRtcHideLocalIpsWithMdns"))
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	b := &browser{t: t, name: name, ctx: ctx}
	var once atomic.Bool
	b.cancel = func() {
		if once.CompareAndSwap(false, true) {
			cancel()
			cancelAlloc()
		}
	}
	t.Cleanup(b.cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("%s: chromium: %v", name, err)
	}
	return b
}

func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitPage)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: chromium: %v", b.name, err)
	}
}

// eval evaluates expr in the page, awaiting a promise, into v.
func (b *browser) eval(expr string, v any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitPage)
	defer cancel()
	if err := evalInto(ctx, expr, v); err != nil {
		b.t.Fatalf("%s: %s: %v", b.name, expr, err)
	}
}

func evalInto(ctx context.Context, expr string, v any) error {
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// stats is what the page's peer counted (peer.js, Page.stats).
type stats struct {
	FromPeers  int64 `json:"fromPeers"`
	FromOrigin int64 `json:"fromOrigin"`
	Uploaded   int64 `json:"uploaded"`
	Corrupt    int   `json:"corrupt"`
	Banned     int   `json:"banned"`
	Peers      int   `json:"peers"`
	Offers     int   `json:"offers"`   // made
	Answers    int   `json:"answers"`  // to them, received
	OffersIn   int   `json:"offersIn"` // received
	Busy       int   `json:"busy"`     // busy refusals received
}

type fetched struct {
	Via   string `json:"via"`
	Len   int    `json:"len"`
	SHA   string `json:"sha"`
	Stats stats  `json:"stats"`
}

const fetchJS = `(async () => {
  const r = await fetch('/obj.bin');
  const b = await r.arrayBuffer();
  const h = new Uint8Array(await crypto.subtle.digest('SHA-256', b));
  return {via: r.headers.get('stampede-via') || '', len: b.byteLength,
    sha: Array.from(h, (x) => x.toString(16).padStart(2, '0')).join(''), stats: stampede.page.stats()};
})()`

// fetch has the page fetch the object and checks every byte.
func (b *browser) fetch(o *testOrigin) fetched {
	b.t.Helper()
	var f fetched
	b.eval(fetchJS, &f)
	if f.Len != len(o.obj) || f.SHA != o.sha || f.Via != "swarm" {
		b.t.Fatalf("%s: fetched %d bytes of SHA-256 %s via %q; want %d of %s via the swarm", b.name, f.Len, f.SHA, f.Via, len(o.obj), o.sha)
	}
	b.t.Logf("%s: %+v", b.name, f.Stats)
	return f
}

func (b *browser) stats() stats {
	b.t.Helper()
	var s stats
	b.eval(`stampede.page.stats()`, &s)
	return s
}

func needBrowser(t *testing.T) {
	t.Helper()
	if os.Getenv(browserEnv) != "1" {
		t.Skipf("browser tests: set %s=1 (make browser-test)", browserEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("browser tests: need root for network namespaces")
	}
	for _, tool := range []string{"chromium", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("browser tests: no %s (scripts/install-test-deps.sh installs it): %v", tool, err)
		}
	}
}

// TestBrowserPeers: visitors' browsers get an object from each other,
// every byte verified: the first from the origin, later ones from peers
// with the origin blocked; a lying browser is caught and banned and the
// visitor still gets the object (from the origin, since every peer lied);
// a peer that leaves mid-object leaves the visitor to finish elsewhere.
func TestBrowserPeers(t *testing.T) {
	needBrowser(t)
	nss := setupNet(t, 4)
	o := startOrigin(t)
	size := int64(len(o.obj))

	a := openBrowser(t, nss[0], "A", o)
	if f := a.fetch(o); f.Stats.FromOrigin != size || f.Stats.FromPeers != 0 {
		t.Errorf("A, alone: %+v, want everything from the origin", f.Stats)
	}

	// The origin refuses the object from now on: B gets it from A, and
	// C from A and B.
	o.blocked.Store(true)
	b := openBrowser(t, nss[1], "B", o)
	if f := b.fetch(o); f.Stats.FromPeers != size || f.Stats.FromOrigin != 0 {
		t.Errorf("B, origin blocked: %+v, want everything from peers", f.Stats)
	}
	c := openBrowser(t, nss[2], "C", o)
	if f := c.fetch(o); f.Stats.FromPeers != size || f.Stats.FromOrigin != 0 {
		t.Errorf("C, origin blocked: %+v, want everything from peers", f.Stats)
	}
	o.blocked.Store(false)

	// A lies: every piece it serves is corrupt. B and C leave; D's only
	// peer is the liar.
	a.eval(`(() => { for (const s of stampede.page.swarms.values()) s.pieces = s.pieces.map((p) => { const q = p.slice(); q[7] ^= 0xff; return q; }); return true; })()`, new(bool))
	b.cancel()
	c.cancel()
	before := o.bodies.Load()
	d := openBrowser(t, nss[1], "D", o)
	f := d.fetch(o)
	if f.Stats.Corrupt < 1 || f.Stats.Banned != 1 {
		t.Errorf("D, whose only peer lies: %+v, want a corrupt piece and the liar banned", f.Stats)
	}
	if got := o.bodies.Load() - before; got < size-f.Stats.FromPeers {
		t.Errorf("D: the origin sent %d bytes, want at least %d", got, size-f.Stats.FromPeers)
	}
	a.cancel()

	// D serves slowly, then leaves while E is midway.
	d.eval(`(() => { const l = stampede.page.limiter; l.rate = 128 << 10; l.tokens = 0; return true; })()`, new(bool))
	// E starts its fetch and waits for D's first piece. Once in CI (one
	// run of many) E's data channel to D never opened and E took the
	// whole object from the origin: a second visitor gets one more try,
	// and the test fails only if it too gets nothing from D.
	var done chan fetched
	for try := 1; ; try++ {
		e := openBrowser(t, nss[2], "E", o)
		done = make(chan fetched, 1)
		go func() {
			var f fetched
			ctx, cancel := context.WithTimeout(e.ctx, waitPage)
			defer cancel()
			if err := evalInto(ctx, fetchJS, &f); err != nil {
				t.Errorf("E: %v", err)
			}
			done <- f
		}()
		deadline := time.Now().Add(waitPage)
		for e.stats().FromPeers == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // polling the page: no event reaches the test
		}
		if e.stats().FromPeers > 0 {
			break
		}
		if try == 2 {
			t.Fatal("E got nothing from D, twice")
		}
		t.Logf("E (try %d) got nothing from D: %+v; once more", try, <-done)
		e.cancel()
	}
	d.cancel()
	f = <-done
	if f.Len != len(o.obj) || f.SHA != o.sha {
		t.Fatalf("E, its peer gone midway: %d bytes of SHA-256 %s, want %d of %s", f.Len, f.SHA, len(o.obj), o.sha)
	}
	if f.Stats.FromPeers == 0 || f.Stats.FromOrigin == 0 {
		t.Errorf("E, its peer gone midway: %+v, want bytes from both", f.Stats)
	}
	t.Logf("E: %+v", f.Stats)
}

// TestBrowserKillSwitch: once the origin turns the peer off, an installed
// worker unregisters itself at its next check, and the page gets its
// objects from the origin as before.
func TestBrowserKillSwitch(t *testing.T) {
	needBrowser(t)
	nss := setupNet(t, 1)
	o := startOrigin(t)
	a := openBrowser(t, nss[0], "A", o)
	a.fetch(o)
	o.off.Store(true)
	time.Sleep(1100 * time.Millisecond) // past the worker's CheckEvery: what is tested is that period
	var f fetched
	a.eval(fetchJS, &f)
	if f.SHA != o.sha || f.Via != "" {
		t.Errorf("after the kill switch: %d bytes of SHA-256 %s via %q; want the object from the origin", f.Len, f.SHA, f.Via)
	}
	var regs int
	a.eval(`navigator.serviceWorker.getRegistrations().then((r) => r.length)`, &regs)
	if regs != 0 {
		t.Errorf("%d service workers still registered after the kill switch", regs)
	}
	// A page loaded now does not start the peer.
	var ready string
	a.do(chromedp.Navigate(o.url + "/index.html"))
	a.eval(`stampede.ready`, &ready)
	if ready != "off" {
		t.Errorf("peer.js with the switch off: %q, want off", ready)
	}
}

// TestBrowserHidden: a page hidden past hidden_stop_ms stops serving its
// swarms, and serves again once shown.
func TestBrowserHidden(t *testing.T) {
	needBrowser(t)
	nss := setupNet(t, 3)
	cfg := testPeerConfig
	cfg.HiddenStop = 200 * time.Millisecond
	o := startOriginRate(t, 0, cfg)
	size := int64(len(o.obj))
	a := openBrowser(t, nss[0], "A", o)
	a.fetch(o)
	visibility := func(state string) {
		a.eval(`(() => { Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => '`+state+`' });
			document.dispatchEvent(new Event('visibilitychange')); return true; })()`, new(bool))
	}
	visibility("hidden")
	deadline := time.Now().Add(waitPage)
	for {
		var asleep bool
		a.eval(`stampede.page.asleep`, &asleep)
		if asleep {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A did not stop while hidden")
		}
		time.Sleep(50 * time.Millisecond) // polling the page
	}
	b := openBrowser(t, nss[1], "B", o)
	if f := b.fetch(o); f.Stats.FromPeers != 0 {
		t.Errorf("B got %d bytes from peers while the only one was hidden", f.Stats.FromPeers)
	}
	b.cancel()
	visibility("visible")
	o.blocked.Store(true)
	c := openBrowser(t, nss[2], "C", o)
	if f := c.fetch(o); f.Stats.FromPeers != size {
		t.Errorf("C, A shown again, the origin blocked: %+v, want everything from peers", f.Stats)
	}
}
