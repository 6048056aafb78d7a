package origin

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

func TestManifestNamesEmbeddedTracker(t *testing.T) {
	dir, cacheDir := t.TempDir(), t.TempDir()
	data := randomBytes(fileSize, 40)
	writeFile(t, dir, "f.bin", data, t0)
	ts := start(t, Config{Dir: dir, CacheDir: cacheDir, Tracker: tracker.New(tracker.Config{Logger: testLogger(t)}),
		Trackers: []string{"https://tracker.example/announce"}})

	m := ts.manifest(t, "/f.bin")
	verify(t, m, data)
	own := ts.url + tracker.WellKnownPath
	if want := []string{own, "https://tracker.example/announce"}; !slices.Equal(m.Trackers, want) {
		t.Errorf("trackers %q, want %q", m.Trackers, want)
	}
	// The tracker is named by the Host the client used.
	req, err := http.NewRequest("GET", ts.url+contract.ManifestPrefix+"/f.bin", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "files.example:8443"
	res, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := manifest.Decode(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if m2.Trackers[0] != "http://files.example:8443"+tracker.WellKnownPath || m2.Root != m.Root {
		t.Errorf("manifest for another Host names trackers %q", m2.Trackers)
	}
	// and by https when it came over TLS.
	req = httptest.NewRequest("GET", contract.ManifestPrefix+"/f.bin", nil)
	req.TLS = &tls.ConnectionState{}
	rec := httptest.NewRecorder()
	ts.Handler().ServeHTTP(rec, req)
	if m3, err := manifest.Unmarshal(rec.Body.Bytes()); err != nil {
		t.Fatal(err)
	} else if m3.Trackers[0] != "https://example.com"+tracker.WellKnownPath {
		t.Errorf("manifest over TLS names trackers %q", m3.Trackers)
	}
	if got := rec.Header().Get("Content-Length"); got != strconv.Itoa(rec.Body.Len()) {
		t.Errorf("Content-Length %s for %d bytes", got, rec.Body.Len())
	}

	// The cache on disk names no tracker.
	files, _ := filepath.Glob(filepath.Join(cacheDir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("cache files %q", files)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var d diskEntry
	if err := json.Unmarshal(raw, &d); err != nil || strings.Contains(string(d.Manifest), "trackers") {
		t.Errorf("cached manifest carries trackers: %s (%v)", d.Manifest, err)
	}

	// The tracker answers where the manifest says.
	a := tracker.AnnounceRequest{Root: m.Root, Size: m.Size, ID: tracker.NewPeerID(), Port: 7000, Left: m.Size, Event: tracker.EventStarted}
	ar, err := tracker.Announce(t.Context(), ts.client, m.Trackers[0], a)
	if err != nil || ar.SwarmSize != 1 {
		t.Fatalf("announce to %s: %+v, %v", m.Trackers[0], ar, err)
	}
	if res, body := ts.do(t, "POST", tracker.WellKnownPath); res.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(string(body), `"error"`) {
		t.Errorf("POST to the tracker: %s %q", res.Status, body)
	}
	samples := ts.metrics(t)
	for series, want := range map[string]int64{
		`stampede_tracker_announces_total{event="started"}`: 1,
		`stampede_tracker_swarms`:                           1,
		`stampede_tracker_peers`:                            1,
		`stampede_origin_requests_total{kind="tracker"}`:    2,
		`stampede_origin_requests_total{kind="manifest"}`:   3,
	} {
		if got, ok := samples[series]; !ok || got != want {
			t.Errorf("%s = %d, want %d", series, got, want)
		}
	}
}

func TestManifestNamesExternalTrackersOnly(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f.bin", randomBytes(5000, 41), t0)
	ts := start(t, Config{Dir: dir, Trackers: []string{"http://a.example/announce", "http://b.example/x?k=1"}})
	if m := ts.manifest(t, "/f.bin"); !slices.Equal(m.Trackers, []string{"http://a.example/announce", "http://b.example/x?k=1"}) {
		t.Errorf("trackers %q", m.Trackers)
	}
	if res, _ := ts.do(t, "GET", tracker.WellKnownPath+"?root=00"); res.StatusCode != http.StatusNotFound {
		t.Errorf("no tracker is embedded, yet %s answers %s", tracker.WellKnownPath, res.Status)
	}
	if _, ok := ts.metrics(t)["stampede_tracker_swarms"]; ok {
		t.Error("tracker metrics without a tracker")
	}
}

func TestManifestWithoutTrackers(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f.bin", randomBytes(5000, 42), t0)
	ts := start(t, Config{Dir: dir})
	if _, body := ts.do(t, "GET", contract.ManifestPrefix+"/f.bin"); strings.Contains(string(body), "trackers") {
		t.Errorf("manifest names trackers: %s", body)
	}
}

func TestUpstreamTrackerNotProxied(t *testing.T) {
	up := newFakeUpstream(t)
	ts := start(t, Config{Upstream: mustParse(t, up.URL+"/"), Tracker: tracker.New(tracker.Config{})})
	if res, body := ts.do(t, "GET", tracker.WellKnownPath+"?root=bad"); res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"error"`) {
		t.Errorf("bad announce: %s %q", res.Status, body)
	}
	if n := up.requests("GET " + tracker.WellKnownPath + "?root=bad"); n != 0 {
		t.Errorf("the announce reached the upstream %d times", n)
	}
}

func TestNewRefusesBadTrackerURL(t *testing.T) {
	for _, u := range []string{"", "udp://tracker.example:6969", "tracker.example/announce", "http://"} {
		if s, err := New(Config{Dir: t.TempDir(), CacheDir: t.TempDir(), Trackers: []string{u}}); err == nil {
			s.Close()
			t.Errorf("tracker %q accepted", u)
		}
	}
}

// TestEmbeddedTrackerTracksServedFiles: a tracker given OnlyAdmitted, as
// "stampede serve" runs it, tracks the files its origin has sent a
// manifest (or a manifest's head) of, and answers 403 for any other.
func TestEmbeddedTrackerTracksServedFiles(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(fileSize, 43)
	writeFile(t, dir, "f.bin", data, t0)
	writeFile(t, dir, "g.bin", randomBytes(5000, 44), t0)
	ts := start(t, Config{Dir: dir, CacheDir: t.TempDir(), Tracker: tracker.New(tracker.Config{OnlyAdmitted: true, Logger: testLogger(t)})})
	m, err := manifest.FromReader(strings.NewReader(string(data)), int64(len(data)), "f.bin")
	if err != nil {
		t.Fatal(err)
	}
	announceURL := ts.url + tracker.WellKnownPath
	announce := func(root manifest.Hash, size int64) error {
		a := tracker.AnnounceRequest{Root: root, Size: size, ID: tracker.NewPeerID(), Port: 7000, Left: size, Event: tracker.EventStarted}
		_, err := tracker.Announce(t.Context(), ts.client, announceURL, a)
		return err
	}
	// Before the origin sent anything out, and for a file it never
	// serves: refused.
	var se *tracker.StatusError
	for _, root := range []manifest.Hash{m.Root, {0x42}} {
		if err := announce(root, m.Size); !errors.As(err, &se) || se.Code != http.StatusForbidden {
			t.Errorf("announce to %s before its manifest went out: %v, want 403", root, err)
		}
	}
	// A HEAD that gets the manifest's head admits the file.
	if res, _ := ts.do(t, "HEAD", "/f.bin", contract.WantHeader, contract.WantManifestHead); res.Header.Get(contract.ManifestHeadHeader) == "" {
		t.Fatalf("HEAD without the manifest's head")
	}
	if err := announce(m.Root, m.Size); err != nil {
		t.Errorf("announce once the manifest's head went out: %v", err)
	}
	if err := announce(m.Root, m.Size+1); !errors.As(err, &se) || se.Code != http.StatusForbidden {
		t.Errorf("announce with another size: %v, want 403", err)
	}
}
