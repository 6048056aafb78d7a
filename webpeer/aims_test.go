package webpeer_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stampede-dev/stampede/webpeer"
)

// The aims of docs/browser.md's benchmark, against WebTorrent: browsers
// arriving at 1/s for a 1 MiB object, origin 8 Mbit/s, each browser's
// link 8 Mbit/s up and 20 down (tc in its namespace), median of 3 runs.
// STAMPEDETEST_BROWSER_AIMS=1 runs it (after npm install in bench/); it
// takes a few minutes and logs the table.
const aimsEnv = "STAMPEDETEST_BROWSER_AIMS"

// aimsStayEnv, a duration, is a variant: every peer stays that long once
// done (a browser's page stays open, a native peer seeds for it) instead
// of leaving at once.
const aimsStayEnv = "STAMPEDETEST_BROWSER_AIMS_STAY"

// aimsStay is $STAMPEDETEST_BROWSER_AIMS_STAY, or 0.
func aimsStay(t *testing.T) time.Duration {
	v := os.Getenv(aimsStayEnv)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", aimsStayEnv, err)
	}
	return d
}

const (
	aimsBrowsers = 4
	aimsRuns     = 3
	originRate   = 1_000_000 // 8 Mbit/s
)

// aimsPeerConfig lets each browser upload at its link's 8 Mbit/s: the
// default cap, 512 KiB/s, is for sites that have not measured what their
// visitors' links take.
var aimsPeerConfig = webpeer.Config{Deadline: 3 * time.Second, UploadRate: 1 << 20}

// The pages: with the peer, without it, and WebTorrent's. Each sets
// window.result to a promise of {t: ms from navigation to the whole
// object, len}.
const (
	peerPage = `<!doctype html><title>peer</title>
<script type="module" src="/.well-known/stampede/peer.js"></script>
<script type="module">
window.result = (async () => {
  await stampede.ready;
  const ready = performance.now();
  const b = await (await fetch('/obj.bin')).arrayBuffer();
  const t = performance.now();
  const stats = stampede.page && stampede.page.stats();
  if (stats) stats.timeline.ready = Math.round(ready);
  return { t, len: b.byteLength, stats, origin: performance.timeOrigin };
})();
</script>`
	tagPage = `<!doctype html><title>tag</title>
<script type="module" src="/.well-known/stampede/peer.js"></script>
<script type="module">
window.result = (async () => {
  const b = await (await fetch('/obj.bin')).arrayBuffer();
  return { t: performance.now(), len: b.byteLength };
})();
</script>`
	plainPage = `<!doctype html><title>plain</title>
<script type="module">
window.result = (async () => {
  const b = await (await fetch('/obj.bin')).arrayBuffer();
  return { t: performance.now(), len: b.byteLength };
})();
</script>`
	wtPage = `<!doctype html><title>webtorrent</title>
<script type="module">
import WebTorrent from '/wt/webtorrent.min.js';
window.result = (async () => {
  const buf = new Uint8Array(await (await fetch('/obj.torrent')).arrayBuffer());
  const client = new WebTorrent();
  return await new Promise((resolve) => client.add(buf, (t) => t.on('done', () => resolve({ t: performance.now(), len: t.length }))));
})();
</script>`
)

// shape caps ns's link: up out of the namespace, down into it.
func shape(t *testing.T, i int, up, down string) {
	t.Helper()
	ns, host, peer := fmt.Sprintf("wp-b%d", i), fmt.Sprintf("wp-h%d", i), fmt.Sprintf("wp-n%d", i)
	run(t, "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", peer, "root", "tbf", "rate", up, "burst", "32kbit", "latency", "400ms")
	run(t, "tc", "qdisc", "add", "dev", host, "root", "tbf", "rate", down, "burst", "32kbit", "latency", "400ms")
}

// The crowd: aimsBrowsers browsers among aimsNatives native peers
// (stampede get --webrtc, each in a namespace of its own, shaped as the
// browsers are), arriving one a second. A browser is every fifth arrival,
// in the middle of each five (the 3rd, 8th, 13th and 18th), so that the
// browsers are spread through the crowd as its share of it.
const aimsNatives = 16

// arrival is the i-th arrival: a browser (its index) or a native peer.
func arrival(i int) (browser int, isBrowser bool) {
	const every = (aimsBrowsers + aimsNatives) / aimsBrowsers
	return i / every, i%every == every/2
}

type aimsRun struct {
	times       []float64 // ms from navigation to the object, by browser
	peerShare   float64   // of the browsers' bytes, what did not come from the origin
	originBytes int64     // all the origin sent
	natives     []nativeRun
	stats       []pageStats // the browsers' pages, stampede only
	navAt       []float64   // s from the crowd's start to each browser's navigation
}

type nativeRun struct {
	At        int     `json:"-"` // its arrival, in seconds
	Gone      float64 `json:"-"` // seconds from its arrival until it left
	Seconds   float64 `json:"seconds"`
	FromPeers int64   `json:"bytes_from_peers"`
}

func (n nativeRun) String() string {
	return fmt.Sprintf("{at %ds: done at %.2fs, %d KiB from peers, gone at %.2fs}", n.At, float64(n.At)+n.Seconds, n.FromPeers>>10, float64(n.At)+n.Gone)
}

// pageStats is what a page's peer says of its swarm (Page.stats), with
// when each step came, in ms from navigation.
type pageStats struct {
	stats
	Timeline map[string]float64 `json:"timeline"`
}

// buildStampede builds the binary the native peers run, or takes
// $STAMPEDETEST_BIN.
func buildStampede(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("STAMPEDETEST_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "stampede")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/stampede-dev/stampede/cmd/stampede").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runAims runs one crowd at page: with bin set, the native peers arrive
// among the browsers (stampede); without, the browsers alone, one a
// second (WebTorrent, which has no native peer here).
func runAims(t *testing.T, nss []string, page string, wt bool, bin string) aimsRun {
	t.Helper()
	o := startOriginRate(t, originRate, aimsPeerConfig)
	os.WriteFile(filepath.Join(o.www, "page.html"), []byte(page), 0o644)
	if wt {
		tracker := startWTTracker(t)
		os.MkdirAll(filepath.Join(o.www, "wt"), 0o755)
		js, err := os.ReadFile("bench/node_modules/webtorrent/dist/webtorrent.min.js")
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(o.www, "wt", "webtorrent.min.js"), js, 0o644)
		// The piece length stampede's manifest has for 1 MiB.
		out, err := exec.Command("node", "bench/torrent.mjs", filepath.Join(o.www, "obj.bin"), o.url+"/obj.bin", tracker, "16384").Output()
		if err != nil {
			t.Fatalf("create-torrent: %v", err)
		}
		raw, err := base64.StdEncoding.DecodeString(string(out))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(o.www, "obj.torrent"), raw, 0o644)
	}
	var bs []*browser
	for i := range aimsBrowsers {
		bs = append(bs, blank(t, nss[i], fmt.Sprintf("V%d", i), o))
	}
	res := aimsRun{times: make([]float64, len(bs)), stats: make([]pageStats, len(bs)), navAt: make([]float64, len(bs))}
	var mu sync.Mutex // guards res.natives
	var wg sync.WaitGroup
	start := time.Now()
	visit := func(i int, b *browser) {
		stay := aimsStay(t)
		defer func() { time.Sleep(stay); b.cancel() }() // it leaves when done
		ctx, cancel := context.WithTimeout(b.ctx, 3*time.Minute)
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.Navigate(o.url+"/page.html")); err != nil {
			t.Errorf("%s: %v", b.name, err)
			return
		}
		var r struct {
			T      float64    `json:"t"`
			Len    int        `json:"len"`
			Stats  *pageStats `json:"stats"`
			Origin float64    `json:"origin"` // performance.timeOrigin, ms since the epoch
		}
		if err := evalInto(ctx, "window.result", &r); err != nil || r.Len != len(o.obj) {
			t.Errorf("%s: %+v, %v", b.name, r, err)
			return
		}
		res.times[i] = r.T
		if r.Origin > 0 {
			res.navAt[i] = (r.Origin - float64(start.UnixMicro())/1000) / 1000
		}
		if r.Stats != nil {
			res.stats[i] = *r.Stats
		}
	}
	natives := 0
	for k := 0; ; k++ {
		at := start.Add(time.Duration(k) * time.Second) // the arrival schedule
		if wt {
			if k == aimsBrowsers {
				break
			}
			wg.Go(func() { time.Sleep(time.Until(at)); visit(k, bs[k]) })
			continue
		}
		if k == aimsBrowsers+aimsNatives {
			break
		}
		if i, ok := arrival(k); ok {
			wg.Go(func() { time.Sleep(time.Until(at)); visit(i, bs[i]) })
			continue
		}
		ns := nss[aimsBrowsers+natives]
		natives++
		wg.Go(func() {
			time.Sleep(time.Until(at))
			n, err := runNative(t, ns, bin, o)
			n.At, n.Gone = k, time.Since(at).Seconds()
			if err != nil {
				t.Errorf("native peer in %s: %v", ns, err)
				return
			}
			mu.Lock()
			res.natives = append(res.natives, n)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(res.natives, func(a, b nativeRun) int { return a.At - b.At })
	res.originBytes = o.bodies.Load()
	var toBrowsers int64
	for i := range aimsBrowsers {
		toBrowsers += o.sentTo(nsAddr(i))
	}
	res.peerShare = 1 - float64(toBrowsers)/float64(aimsBrowsers*len(o.obj))
	return res
}

// runNative runs stampede get --webrtc in ns until it is done and leaves
// (the default --seed-time).
func runNative(t *testing.T, ns, bin string, o *testOrigin) (nativeRun, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "obj.bin")
	args := []string{"netns", "exec", ns, bin, "get", "--webrtc", "--json", "-q", "--sha256", o.sha, "-o", out}
	if stay := aimsStay(t); stay > 0 {
		args = append(args, "--seed-time", stay.String())
	}
	cmd := exec.CommandContext(ctx, "ip", append(args, o.url+"/obj.bin")...)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir()) // no config file of the machine's
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nativeRun{}, fmt.Errorf("%w: %s", err, stderr.String())
	}
	var n nativeRun
	if err := json.Unmarshal(b, &n); err != nil {
		return nativeRun{}, fmt.Errorf("%w: %s", err, b)
	}
	return n, nil
}

// startWTTracker runs npm bittorrent-tracker's WebSocket server on the
// bridge and returns its announce URL.
func startWTTracker(t *testing.T) string {
	t.Helper()
	port := 18000 + time.Now().Nanosecond()%1000
	cmd := exec.Command("node", "bench/tracker.mjs", bridgeIP, fmt.Sprint(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	buf := make([]byte, 64)
	if n, _ := out.Read(buf); !strings.Contains(string(buf[:n]), "listening") {
		t.Fatalf("bittorrent-tracker: %q", buf[:n])
	}
	return fmt.Sprintf("ws://%s:%d", bridgeIP, port)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// p90 is the nearest-rank 90th percentile.
func p90(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[int(math.Ceil(0.9*float64(len(s))))-1]
}

// TestBrowserAims measures the aims of docs/browser.md and logs them.
func TestBrowserAims(t *testing.T) {
	needBrowser(t)
	// "alone" runs the lone visitor's part only, a quicker look at it.
	crowd := os.Getenv(aimsEnv) == "1"
	if !crowd && os.Getenv(aimsEnv) != "alone" {
		t.Skipf("set %s=1 to run the benchmark", aimsEnv)
	}
	if _, err := os.Stat("bench/node_modules/webtorrent"); err != nil && crowd {
		t.Skip("no WebTorrent: npm install --prefix webpeer/bench")
	}
	var bin string
	if crowd {
		bin = buildStampede(t)
	}
	nss := setupNet(t, aimsBrowsers+aimsNatives)
	for i := range nss {
		shape(t, i, "8mbit", "20mbit")
	}
	size := float64(1 << 20)
	var sP90, wP90, sPeers, wPeers, alonePeer, aloneFirst, alonePlain []float64
	for r := range aimsRuns {
		if crowd {
			s := runAims(t, nss, peerPage, false, bin)
			w := runAims(t, nss, wtPage, true, "")
			sP90, wP90 = append(sP90, p90(s.times)), append(wP90, p90(w.times))
			sPeers = append(sPeers, s.peerShare)
			wPeers = append(wPeers, 1-float64(w.originBytes)/(aimsBrowsers*size))
			t.Logf("run %d: stampede: browsers %.0f ms, %.0f%% of their bytes from peers, origin %d B in all; natives %v", r+1, s.times, 100*s.peerShare, s.originBytes, s.natives)
			for i, st := range s.stats {
				t.Logf("run %d:   browser %d: navigated at %.2fs: %+v", r+1, i, s.navAt[i], st)
			}
			t.Logf("run %d: webtorrent: browsers %.0f ms, origin %d B", r+1, w.times, w.originBytes)
		}
		// One visitor alone: without the peer; with its tag, on the
		// first visit (the worker not controlling the page yet); and on
		// the next page, the worker getting the object through the
		// swarm, alone in it.
		o := startOriginRate(t, originRate, aimsPeerConfig)
		for _, p := range []struct{ name, page string }{{"plain.html", plainPage}, {"tag.html", tagPage}, {"peer.html", peerPage}} {
			os.WriteFile(filepath.Join(o.www, p.name), []byte(p.page), 0o644)
		}
		var res struct {
			T     float64    `json:"t"`
			Stats *pageStats `json:"stats"`
		}
		b := blank(t, nss[0], "alone", o)
		b.do(chromedp.Navigate(o.url + "/plain.html"))
		b.eval("window.result", &res)
		alonePlain = append(alonePlain, res.T)
		b.cancel()
		b = blank(t, nss[0], "alone", o)
		b.do(chromedp.Navigate(o.url + "/tag.html"))
		b.eval("window.result", &res)
		aloneFirst = append(aloneFirst, res.T)
		var ready string
		b.eval("stampede.ready", &ready)
		b.do(chromedp.Navigate(o.url + "/peer.html"))
		b.eval("window.result", &res)
		alonePeer = append(alonePeer, res.T)
		b.cancel()
		t.Logf("run %d: alone: without the peer %.0f ms; first visit %.0f ms; through the worker %.0f ms (%+v)", r+1, alonePlain[r], aloneFirst[r], alonePeer[r], res.Stats)
	}
	if crowd {
		t.Logf("median of %d runs; stampede: %d browsers among %d native peers, WebTorrent: the %d browsers alone; arriving 1/s, 1 MiB, origin 8 Mbit/s, peers 8/20 Mbit/s:",
			aimsRuns, aimsBrowsers, aimsNatives, aimsBrowsers)
		t.Logf("  p90 time to object: stampede %.0f ms, WebTorrent %.0f ms: ratio %.2f (aim <= 0.6)", median(sP90), median(wP90), median(sP90)/median(wP90))
		t.Logf("  browsers' bytes from peers: stampede %.0f%%, WebTorrent %.0f%% (aim >= 80%%)", 100*median(sPeers), 100*median(wPeers))
	}
	t.Logf("  alone, time to the page's object: without the peer %.0f ms; with its tag, first visit %.0f ms (ratio %.2f), through the worker %.0f ms (ratio %.2f) (aim <= 1.1)",
		median(alonePlain), median(aloneFirst), median(aloneFirst)/median(alonePlain), median(alonePeer), median(alonePeer)/median(alonePlain))
}

// TestBrowserSeedRate, with STAMPEDETEST_BROWSER_AIMS=seed, measures what
// one native seed gives one browser on the benchmark's links (8/20
// Mbit/s), the origin refusing: the time from the page's first piece to
// the whole object, three browsers in turn, then a native download (over
// TCP) from the same seed for comparison. STAMPEDETEST_BROWSER_SEEDS=2:
// two seeds. docs/browser.md, "The p90".
func TestBrowserSeedRate(t *testing.T) {
	needBrowser(t)
	if os.Getenv(aimsEnv) != "seed" {
		t.Skipf("set %s=seed to run it", aimsEnv)
	}
	bin := buildStampede(t)
	seeds := 1
	if os.Getenv("STAMPEDETEST_BROWSER_SEEDS") == "2" {
		seeds = 2
	}
	nss := setupNet(t, 1+seeds)
	for i := range nss {
		shape(t, i, "8mbit", "20mbit")
	}
	o := startOriginRate(t, originRate, aimsPeerConfig)
	os.WriteFile(filepath.Join(o.www, "page.html"), []byte(peerPage), 0o644)
	for k := range seeds {
		ctx, cancel := context.WithCancel(t.Context())
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", nss[1+k], bin, "get", "--webrtc", "-q", "--seed-time", "-1s",
			"--sha256", o.sha, "-o", filepath.Join(t.TempDir(), "obj.bin"), o.url+"/obj.bin")
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); cmd.Wait() })
	}
	deadline := time.Now().Add(time.Minute)
	for o.bodies.Load() < int64(seeds*len(o.obj)) {
		if time.Now().After(deadline) {
			t.Fatal("the seeds did not get the object")
		}
		time.Sleep(50 * time.Millisecond) // the origin's count is all there is to watch
	}
	time.Sleep(time.Second) // their "completed" announced
	o.blocked.Store(true)
	for r := range 3 {
		b := blank(t, nss[0], "S", o)
		b.do(chromedp.Navigate(o.url + "/page.html"))
		var res struct {
			T     float64    `json:"t"`
			Stats *pageStats `json:"stats"`
		}
		b.eval("window.result", &res)
		b.cancel()
		if res.Stats == nil || res.Stats.FromPeers != int64(len(o.obj)) {
			t.Fatalf("run %d: %+v, want the whole object from the seeds", r+1, res.Stats)
		}
		tl := res.Stats.Timeline
		t.Logf("run %d: first piece at %.0f ms, done at %.0f ms: %.0f ms from %d seed(s), %d busy refusals",
			r+1, tl["fromPeer"], tl["done"], tl["done"]-tl["fromPeer"], seeds, res.Stats.Busy)
	}
	for r := range 3 {
		start := time.Now()
		out, err := exec.Command("ip", "netns", "exec", nss[0], bin, "get", "--webrtc=off", "-q",
			"--sha256", o.sha, "-o", filepath.Join(t.TempDir(), "obj.bin"), o.url+"/obj.bin").CombinedOutput()
		if err != nil {
			t.Fatalf("native download from the seeds: %v: %s", err, out)
		}
		t.Logf("native run %d, over TCP: %v in all, its start included", r+1, time.Since(start).Round(time.Millisecond))
	}
}
