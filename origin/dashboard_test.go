package origin

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/dashboard"
	"github.com/stampede-dev/stampede/internal/dashboard/dashboardtest"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

var screenshot = flag.String("dashboard.screenshot", "", "TestDashboardInBrowser writes the page, after a few seconds of traffic, to this PNG (docs/dashboard.png)")

// announcePeers puts n peers, the first seeds of them, in m's swarm.
func announcePeers(t *testing.T, tr *tracker.Tracker, m *manifest.Manifest, n, seeds int) {
	t.Helper()
	for i := range n {
		left := m.Size
		if i < seeds {
			left = 0
		}
		req := tracker.AnnounceRequest{Root: m.Root, Size: m.Size, ID: tracker.NewPeerID(), Port: 7000, Left: left, Event: tracker.EventStarted}
		if _, err := tr.Announce(req, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 7000)); err != nil {
			t.Fatal(err)
		}
	}
}

// get downloads path from ts with the reason header, and checks it got n
// bytes.
func (ts *testServer) get(t *testing.T, path, reason string, n int) {
	t.Helper()
	res, body := ts.do(t, "GET", path, contract.ReasonHeader, reason)
	if res.StatusCode != http.StatusOK || len(body) != n {
		t.Errorf("GET %s: %s, %d bytes, want %d", path, res.Status, len(body), n)
	}
}

func figure(s dashboard.Snapshot, id string) *dashboard.Figure {
	for i := range s.Figures {
		if s.Figures[i].ID == id {
			return &s.Figures[i]
		}
	}
	return nil
}

func table(s dashboard.Snapshot, title string) *dashboard.Table {
	for i := range s.Tables {
		if s.Tables[i].Title == title {
			return &s.Tables[i]
		}
	}
	return nil
}

// serveAdmin serves ts's AdminHandler on a loopback listener of its own
// until the test ends, and returns its URL.
func serveAdmin(t *testing.T, ts *testServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: ts.AdminHandler()}
	hs.RegisterOnShutdown(ts.dash.EndStreams)
	done := make(chan struct{})
	go func() {
		hs.Serve(ln)
		close(done)
	}()
	t.Cleanup(func() {
		hs.Shutdown(t.Context())
		<-done
	})
	return "http://" + ln.Addr().String()
}

// TestDashboardPublic: without AdminApart the dashboard is on the site's
// address, under /.well-known/, with no file names; its requests are not
// counted; with AdminApart it is on the admin handler alone, with them.
func TestDashboardPublic(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(fileSize, 1)
	writeFile(t, dir, "unlisted-secret.bin", data, t0)
	tr := tracker.New(tracker.Config{Logger: testLogger(t)})
	ts := start(t, Config{Dir: dir, Tracker: tr})
	m := ts.manifest(t, "/unlisted-secret.bin")
	announcePeers(t, tr, m, 2, 1)

	res, page := ts.do(t, "GET", dashboard.Path)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(page), "<h1>stampede serve</h1>") {
		t.Fatalf("%s: %s\n%s", dashboard.Path, res.Status, page)
	}
	s, raw := dashboardtest.Snapshot(t, ts.client, ts.url)
	if strings.Contains(raw+string(page), "unlisted-secret") || strings.Contains(raw, dir) {
		t.Errorf("the public dashboard names a file or the directory:\n%s", raw)
	}
	sw := table(s, "Swarms")
	if sw == nil || len(sw.Rows) != 1 || fmt.Sprint(sw.Rows[0]) != fmt.Sprint([]any{m.Root.String()[:12], float64(m.Size), 2.0, 1.0}) {
		t.Errorf("swarms: %+v", sw)
	}
	if f := figure(s, figSwarms); f == nil || f.Value != 1 {
		t.Errorf("swarms figure: %+v", f)
	}
	if n := counterValue(ts.Server.metrics.requests[kindFile]) + counterValue(ts.Server.metrics.requests[kindOther]); n != 0 {
		t.Errorf("the dashboard's requests counted as %v file or other requests", n)
	}

	admin := start(t, Config{Dir: dir, Tracker: tr, AdminApart: true})
	if res, _ := admin.do(t, "GET", dashboard.Path); res.StatusCode != http.StatusNotFound {
		t.Errorf("the dashboard on the site's address with AdminApart: %s", res.Status)
	}
	admin.manifest(t, "/unlisted-secret.bin")
	base := serveAdmin(t, admin)
	s, _ = dashboardtest.Snapshot(t, http.DefaultClient, base)
	sw = table(s, "Swarms")
	if sw == nil || len(sw.Rows) != 1 || sw.Rows[0][0] != "/unlisted-secret.bin" || !strings.Contains(s.Notes[0], dir) {
		t.Errorf("admin dashboard: notes %q, swarms %+v", s.Notes, sw)
	}
	res, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("/ of the admin address: %s", res.Status)
	}
}

// countingDownStore is a store that does not answer, and counts the
// swarms it is asked about.
type countingDownStore struct {
	downStore
	peers atomic.Int32
}

func (c *countingDownStore) Peers(ctx context.Context, root manifest.Hash, size int64, want int, now time.Time) (tracker.Outcome, error) {
	c.peers.Add(1)
	return c.downStore.Peers(ctx, root, size, want, now)
}

// TestDashboardTrackerDown: a tracker whose store does not answer is said
// so, and not asked about each swarm (each would wait out a timeout).
func TestDashboardTrackerDown(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f.bin", randomBytes(fileSize, 1), t0)
	store := &countingDownStore{}
	ts := start(t, Config{Dir: dir, Tracker: tracker.New(tracker.Config{Store: store, Logger: testLogger(t)})})
	ts.manifest(t, "/f.bin")
	s, _ := dashboardtest.Snapshot(t, ts.client, ts.url)
	if !slices.Contains(s.Notes, "The tracker's store does not answer.") || table(s, "Swarms") != nil || figure(s, figSwarms) != nil {
		t.Errorf("snapshot with the store down: %+v", s)
	}
	if n := store.peers.Load(); n != 0 {
		t.Errorf("the store was asked about %d swarms", n)
	}
}

// TestDashboardInBrowser: the origin's dashboard, loaded in headless
// Chromium, follows the origin live: traffic made after the page is up
// shows in its figures, its chart and its tables, as the origin's own
// counters have it.
func TestDashboardInBrowser(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{"/a.bin": randomBytes(1<<20, 1), "/b.bin": randomBytes(700<<10, 2), "/c.bin": randomBytes(300<<10, 3)}
	for name, data := range files {
		writeFile(t, dir, name, data, t0)
	}
	tr := tracker.New(tracker.Config{Logger: testLogger(t)})
	const rate = 8 << 20
	ts := start(t, Config{Dir: dir, Tracker: tr, Rate: rate, AdminApart: true})
	for name, peers := range map[string]int{"/a.bin": 12, "/b.bin": 5, "/c.bin": 2} {
		announcePeers(t, tr, ts.manifest(t, name), peers, peers/2)
	}
	p := dashboardtest.Open(t, serveAdmin(t, ts)+dashboard.Path)
	m := ts.Server.metrics

	// What the page shows at first is the origin's count.
	base := counterValue(m.bytesSent)
	if f := p.Figure(figBytesSent); f.Value != base || f.Text != dashboard.Format(base, dashboard.UnitBytes) || f.Max != "of 8.0 MiB/s" {
		t.Errorf("bytes sent at first: %+v, the origin counts %v", f, base)
	}
	if rows := p.Table("Swarms"); len(rows) != 3 || !slices.Equal(rows[0], []string{"/a.bin", ts.manifest(t, "/a.bin").Root.String()[:12], "1.0 MiB", "12", "6"}) {
		t.Errorf("swarms: %q", rows)
	}
	base = counterValue(m.bytesSent) // with that manifest

	// Traffic after the load, which the page must come to show.
	want := base
	var wg sync.WaitGroup
	for i, reason := range []string{contract.ReasonStream, contract.ReasonStream, "", contract.ReasonPiece} {
		name := []string{"/a.bin", "/b.bin", "/c.bin", "/c.bin"}[i]
		want += float64(len(files[name]))
		wg.Go(func() { ts.get(t, name, reason, len(files[name])) })
	}
	wg.Wait()
	p.WaitFigure(figBytesSent, want)
	if got := counterValue(m.bytesSent); got != want {
		t.Errorf("the origin counts %v bytes sent, the page showed %v", got, want)
	}
	if f := p.Figure(figBytesSent); f.Text != dashboard.Format(want, dashboard.UnitBytes) || f.Rate == "–" {
		t.Errorf("bytes sent: %+v, want %s and a rate", f, dashboard.Format(want, dashboard.UnitBytes))
	}
	p.WaitFor("the requests by reason", `[...document.querySelectorAll("#tables td")].some((td) => td.textContent === "stream")`)
	p.WaitFor("4 file requests", `document.querySelector('.figure[data-id="file_requests"]').dataset.value === "4"`)
	var shown [][]string
	for i, c := range m.fileReasons {
		if n := counterValue(c); n > 0 {
			shown = append(shown, []string{reasonNames[i], fmt.Sprint(n)})
		}
	}
	if rows := p.Table("Origin requests by reason"); fmt.Sprint(rows) != fmt.Sprint(shown) || len(rows) != 3 {
		t.Errorf("requests by reason: the page shows %q, the origin counts %q", rows, shown)
	}
	if f := p.Figure(figTransfers); f.Value != 0 || f.Max != "of 64" {
		t.Errorf("transfers: %+v", f)
	}
	p.WaitFor("two points on the chart", `Number(document.querySelector('#plot polyline[data-id="bytes_sent"]')?.dataset.points) >= 2`)

	// The script prints as the server does.
	values := []float64{0, 1, 1023, 1024, 1280, 1536, 10 << 20, 1.5 * (1 << 30), 123456789}
	js := p.Format(values, dashboard.UnitBytes)
	for i, v := range values {
		if js[i] != dashboard.Format(v, dashboard.UnitBytes) {
			t.Errorf("%v: the script prints %q, the server %q", v, js[i], dashboard.Format(v, dashboard.UnitBytes))
		}
	}
	if *screenshot != "" {
		// A crowd that grows, at the cap for most of the page's chart.
		stop := make(chan struct{})
		wg.Go(func() { crowd(t, ts, files, stop) })
		time.Sleep(15 * time.Second) // a picture's worth of traffic, not a wait for a state
		p.WaitUpdates(p.Updates() + 1)
		p.Screenshot(*screenshot)
		close(stop)
		wg.Wait()
	}
	p.CheckConsole()
}

// crowd downloads the files, the first most, from more and more clients,
// until stop: traffic at the origin's cap, for the screenshot.
func crowd(t *testing.T, ts *testServer, files map[string][]byte, stop <-chan struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range 6 {
		name := []string{"/c.bin", "/a.bin", "/a.bin", "/b.bin", "/a.bin", "/c.bin"}[i]
		reason := []string{"", contract.ReasonStream, contract.ReasonPiece, contract.ReasonStream, contract.ReasonOriginPrefix + "no-peer-has-it", contract.ReasonRetryLate}[i]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ts.get(t, name, reason, len(files[name]))
			}
		})
		select {
		case <-stop:
			return
		case <-time.After(2 * time.Second):
		}
	}
}
