package webpeer_test

import (
	"context"
	"encoding/base64"
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
  const b = await (await fetch('/obj.bin')).arrayBuffer();
  return { t: performance.now(), len: b.byteLength };
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

type aimsRun struct {
	times       []float64 // ms from navigation to the object, by browser
	originBytes int64
}

// runAims runs one arrival of aimsBrowsers browsers at page.
func runAims(t *testing.T, nss []string, page string, wt bool) aimsRun {
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
	res := aimsRun{times: make([]float64, len(bs))}
	var wg sync.WaitGroup
	start := time.Now()
	for i, b := range bs {
		wg.Go(func() {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second))) // the arrival schedule
			ctx, cancel := context.WithTimeout(b.ctx, 3*time.Minute)
			defer cancel()
			if err := chromedp.Do(ctx, chromedp.Navigate(o.url+"/page.html")); err != nil {
				t.Errorf("%s: %v", b.name, err)
				return
			}
			var r struct {
				T   float64 `json:"t"`
				Len int     `json:"len"`
			}
			if err := evalInto(ctx, "window.result", &r); err != nil || r.Len != len(o.obj) {
				t.Errorf("%s: %+v, %v", b.name, r, err)
				return
			}
			res.times[i] = r.T
		})
	}
	wg.Wait()
	res.originBytes = o.bodies.Load()
	for _, b := range bs {
		b.cancel()
	}
	return res
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
	if os.Getenv(aimsEnv) != "1" {
		t.Skipf("set %s=1 to run the benchmark", aimsEnv)
	}
	if _, err := os.Stat("bench/node_modules/webtorrent"); err != nil {
		t.Skip("no WebTorrent: npm install --prefix webpeer/bench")
	}
	nss := setupNet(t, aimsBrowsers)
	for i := range aimsBrowsers {
		shape(t, i, "8mbit", "20mbit")
	}
	size := float64(1 << 20)
	var sP90, wP90, sPeers, wPeers, alonePeer, aloneFirst, alonePlain []float64
	for r := range aimsRuns {
		s := runAims(t, nss, peerPage, false)
		w := runAims(t, nss, wtPage, true)
		sP90, wP90 = append(sP90, p90(s.times)), append(wP90, p90(w.times))
		sPeers = append(sPeers, 1-float64(s.originBytes)/(aimsBrowsers*size))
		wPeers = append(wPeers, 1-float64(w.originBytes)/(aimsBrowsers*size))
		t.Logf("run %d: stampede %v ms, origin %d B; webtorrent %v ms, origin %d B", r+1, s.times, s.originBytes, w.times, w.originBytes)
		// One visitor alone: without the peer; with its tag, on the
		// first visit (the worker not controlling the page yet); and on
		// the next page, the worker getting the object through the
		// swarm, alone in it.
		o := startOriginRate(t, originRate, aimsPeerConfig)
		for _, p := range []struct{ name, page string }{{"plain.html", plainPage}, {"tag.html", tagPage}, {"peer.html", peerPage}} {
			os.WriteFile(filepath.Join(o.www, p.name), []byte(p.page), 0o644)
		}
		var res struct {
			T float64 `json:"t"`
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
	}
	t.Logf("median of %d runs, %d browsers arriving 1/s, 1 MiB, origin 8 Mbit/s, browsers 8/20 Mbit/s:", aimsRuns, aimsBrowsers)
	t.Logf("  p90 time to object: stampede %.0f ms, WebTorrent %.0f ms: ratio %.2f (aim <= 0.6)", median(sP90), median(wP90), median(sP90)/median(wP90))
	t.Logf("  browsers' bytes from peers: stampede %.0f%%, WebTorrent %.0f%% (aim >= 80%%)", 100*median(sPeers), 100*median(wPeers))
	t.Logf("  alone, time to the page's object: without the peer %.0f ms; with its tag, first visit %.0f ms (ratio %.2f), through the worker %.0f ms (ratio %.2f) (aim <= 1.1)",
		median(alonePlain), median(aloneFirst), median(aloneFirst)/median(alonePlain), median(alonePeer), median(alonePeer)/median(alonePlain))
}
