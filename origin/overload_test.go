package origin

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		name    string
		l       load
		action  action
		outcome int
	}{
		{"below the limit", load{active: 3, max: 4}, actionAdmit, 0},
		{"below the limit, capable", load{active: 3, max: 4, capable: true, maxAnswers: 2}, actionAdmit, 0},
		{"at the limit, legacy", load{active: 4, max: 4, maxAnswers: 2}, actionReject, outcomeLegacy},
		{"at the limit, capable", load{active: 4, max: 4, capable: true, maxAnswers: 2}, actionPiece, outcomePiece},
		{"at the limit, capable, answers full", load{active: 4, max: 4, capable: true, answering: 2, maxAnswers: 2}, actionReject, outcomeFull},
		{"at the limit, capable, mode off", load{active: 4, max: 4, capable: true}, actionReject, outcomeOff},
		{"past the limit, capable", load{active: 9, max: 4, capable: true, answering: 1, maxAnswers: 2}, actionPiece, outcomePiece},
	}
	for _, tt := range tests {
		d := decide(tt.l, 0.5)
		if d.action != tt.action || (d.action != actionAdmit && d.outcome != tt.outcome) {
			t.Errorf("%s: %+v, want action %d outcome %s", tt.name, d, tt.action, outcomeNames[tt.outcome])
		}
		if d.action != actionAdmit && d.retryAfter < time.Second {
			t.Errorf("%s: Retry-After %v", tt.name, d.retryAfter)
		}
	}
	// With a rate, a 503 waits for a transfer to end; a piece answer only
	// spaces the client's requests.
	l := load{active: 1, max: 1, rate: 1 << 20, remaining: []int64{60 << 20}, capable: true, maxAnswers: 1}
	if d := decide(l, 0); d.action != actionPiece || d.retryAfter != time.Second {
		t.Errorf("piece answer with a rate: %+v, want Retry-After 1s", d)
	}
	l.capable = false
	if d := decide(l, 0); d.action != actionReject || d.retryAfter != time.Minute {
		t.Errorf("503 with a rate: %+v, want Retry-After 1m", d)
	}
}

func TestRetryAfter(t *testing.T) {
	const MiB = 1 << 20
	tests := []struct {
		name   string
		l      load
		jitter float64
		want   time.Duration
	}{
		{"fixed", load{fixed: 7 * time.Second, rate: MiB, active: 4, remaining: []int64{MiB}}, 0.9, 7 * time.Second},
		{"unlimited", load{active: 4}, 0, time.Second},
		{"unlimited, jitter", load{active: 4}, 0.99, 2 * time.Second},
		// 4 bodies share 1 MiB/s; the nearest to done has 2 MiB left: 8 s.
		{"rate", load{active: 4, rate: MiB, remaining: []int64{10 * MiB, 2 * MiB, -1, 3 * MiB}}, 0, 8 * time.Second},
		{"rate, jitter", load{active: 4, rate: MiB, remaining: []int64{2 * MiB}}, 0.5, 12 * time.Second},
		{"rate, sizes unknown", load{active: 4, rate: MiB, remaining: []int64{-1}}, 0, time.Second},
		{"nearly done", load{active: 1, rate: MiB, remaining: []int64{10}}, 0, time.Second},
		{"capped", load{active: 64, rate: 1000, remaining: []int64{1 << 40}}, 0, maxRetryAfter},
		{"rounded up", load{active: 1, rate: MiB, remaining: []int64{MiB + 1}}, 0, 2 * time.Second},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.l, tt.jitter); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// holdTransfer starts a GET of path and returns once its 200 header has
// arrived: from then on it holds a transfer slot until the body is closed,
// at the latest when the test ends.
func holdTransfer(t *testing.T, ts *testServer, path string) *http.Response {
	t.Helper()
	res, err := ts.client.Get(ts.url + path)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		t.Fatalf("GET %s: %s", path, res.Status)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func TestOverloadAnswers503(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		data := randomBytes(1<<20, 20)
		writeFile(t, dir, "f", data, t0)
		done := make(chan struct{}, 10)
		// At 256 KiB/s the 1 MiB body holds its slot for seconds.
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxTransfers: 1, Rate: 256 << 10}, func(s *Server) {
			s.testHookTransferDone = func() { done <- struct{}{} }
		})
		held := holdTransfer(t, ts, "/f")

		for _, header := range [][]string{nil, {"Range", "bytes=0-99"}} {
			res, body := ts.do(t, "GET", "/f", header...)
			if res.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("GET %v past the limit: %s", header, res.Status)
			}
			secs, err := strconv.Atoi(res.Header.Get("Retry-After"))
			if err != nil || secs < 1 || secs > int(maxRetryAfter.Seconds()) {
				t.Errorf("Retry-After %q", res.Header.Get("Retry-After"))
			}
			if !strings.Contains(string(body), "retry in") || res.Header.Get("Etag") != "" || res.Header.Get("Link") != "" {
				t.Errorf("503 with body %q and header %v", body, res.Header)
			}
		}
		// HEAD, 304 and manifests send no file body: they pass.
		etag := held.Header.Get("Etag")
		for _, c := range []struct {
			method, path string
			header       []string
			status       int
		}{
			{"HEAD", "/f", nil, 200},
			{"GET", "/f", []string{"If-None-Match", etag}, 304},
			{"GET", contract.ManifestPrefix + "/f", nil, 200},
			{"GET", "/missing", nil, 404},
		} {
			if res, _ := ts.do(t, c.method, c.path, c.header...); res.StatusCode != c.status {
				t.Errorf("%s %s %v: %s, want %d", c.method, c.path, c.header, res.Status, c.status)
			}
		}
		if got := ts.metric(t, `stampede_origin_rejected_total{reason="overload"}`); got != 2 {
			t.Errorf("rejected %d, want 2", got)
		}
		if got := ts.metric(t, `stampede_origin_responses_total{code="503"}`); got != 2 {
			t.Errorf("503s %d, want 2", got)
		}
		if got := ts.metric(t, "stampede_origin_transfers_active"); got != 1 {
			t.Errorf("transfers active %d, want 1", got)
		}

		held.Body.Close()
		<-done
		res, body := ts.do(t, "GET", "/f", "Range", "bytes=0-99")
		if res.StatusCode != http.StatusPartialContent || string(body) != string(data[:100]) {
			t.Errorf("after the transfer ended: %s", res.Status)
		}
	})
}

func TestOverloadFixedRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "f", randomBytes(1<<20, 21), t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxTransfers: 1, Rate: 128 << 10, RetryAfter: 7 * time.Second})
		held := holdTransfer(t, ts, "/f")
		defer held.Body.Close()
		res, _ := ts.do(t, "GET", "/f")
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "7" {
			t.Errorf("%s, Retry-After %q; want 503 and 7", res.Status, res.Header.Get("Retry-After"))
		}
	})
}

func TestRateShapesEgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		data := randomBytes(2<<20, 22)
		writeFile(t, dir, "f", data, t0)
		const rate = 4 << 20
		ts := startMem(t, memnet.New(), Config{Dir: dir, Rate: rate})
		ts.manifest(t, "/f") // hash now, so that only the transfer is timed

		// The limiter lets a tenth of a second through at once; the rest
		// of the 2 MiB at 4 MiB/s takes 0.4 s. The millisecond allows for
		// the limiter's rounding.
		begin := time.Now()
		res, body := ts.do(t, "GET", "/f")
		elapsed := time.Since(begin)
		if res.StatusCode != 200 || len(body) != len(data) {
			t.Fatalf("%s, %d bytes", res.Status, len(body))
		}
		if want := 400 * time.Millisecond; elapsed < want || elapsed > want+time.Millisecond {
			t.Errorf("2 MiB at 4 MiB/s took %v, want %v", elapsed, want)
		}

		// Two transfers share the rate: with the burst spent, their 2 MiB
		// take 0.5 s, and both end near the end rather than one at 0.25 s.
		begin = time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if res, body := ts.do(t, "GET", "/f", "Range", "bytes=0-1048575"); res.StatusCode != 206 || len(body) != 1<<20 {
					t.Errorf("%s, %d bytes", res.Status, len(body))
				}
				if took := time.Since(begin); took < 450*time.Millisecond {
					t.Errorf("one of two 1 MiB ranges at 4 MiB/s in all took %v: it did not share the rate", took)
				}
			})
		}
		wg.Wait()
		if elapsed, want := time.Since(begin), 500*time.Millisecond; elapsed < want || elapsed > want+time.Millisecond {
			t.Errorf("two 1 MiB ranges at 4 MiB/s in all took %v, want %v", elapsed, want)
		}
	})
}

// capableGet asks for piece i (or the whole file, i < 0) as a stampede
// client in the swarm does.
func (ts *testServer) capableGet(t *testing.T, m *manifest.Manifest, i int) (*http.Response, []byte) {
	t.Helper()
	h := []string{contract.CapabilitiesHeader, "gzip-maybe, " + contract.CapabilityOverload}
	if m.ETag != "" {
		h = append(h, "If-Range", m.ETag)
	}
	if i >= 0 {
		off := m.PieceOffset(i)
		h = append(h, "Range", fmt.Sprintf("bytes=%d-%d", off, off+m.PieceLen(i)-1))
	}
	return ts.do(t, "GET", "/f", h...)
}

// holdHog creates a sparse file of 64 MiB, "hog", in dir, starts a GET of
// all of it as a 206 (so no digest is computed) and returns once the header
// has arrived. The body is never read: the origin's write blocks once the
// connection's window is full, and the transfer holds its slot until the
// response is closed. It runs in a synctest bubble (startMem).
func holdHog(t *testing.T, ts *testServer, dir string) *http.Response {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "hog")); err != nil {
		f, err := os.Create(filepath.Join(dir, "hog"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(64 << 20); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	req, err := http.NewRequest("GET", ts.url+"/hog", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Range", "bytes=0-")
	// A transfer the test just finished may still hold its slot for a
	// moment after the client has the last byte: let it end.
	synctest.Wait()
	// A connection of its own, so the test's client is not left waiting
	// for it.
	client := &http.Client{Transport: &http.Transport{DialContext: ts.dial}}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusPartialContent {
		res.Body.Close()
		t.Fatalf("GET hog: %s", res.Status)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func TestOverloadAnswerPiece(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		data := randomBytes(fileSize, 23)
		writeFile(t, dir, "f", data, t0)
		tr := tracker.New(tracker.Config{})
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxTransfers: 1, Tracker: tr, OverloadWindow: time.Hour})
		m := ts.manifest(t, "/f")
		n := m.NumPieces()

		// Two peers in the swarm of f.
		for k, addr := range []string{"192.0.2.7:7000", "[2001:db8::5]:7001"} {
			req := tracker.AnnounceRequest{Root: m.Root, Size: m.Size, Port: netip.MustParseAddrPort(addr).Port(), Left: m.Size, Event: tracker.EventStarted}
			req.ID[0] = byte(k + 1)
			if _, err := tr.Announce(req, netip.MustParseAddrPort(addr)); err != nil {
				t.Fatal(err)
			}
		}
		holdHog(t, ts, dir)
		etag := ts.validators(t, "/f")

		// A legacy client gets 503, without peers.
		res, _ := ts.do(t, "GET", "/f", "Range", "bytes=0-99")
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(contract.PeersHeader) != "" {
			t.Fatalf("legacy client past the limit: %s, peers %q", res.Status, res.Header.Get(contract.PeersHeader))
		}

		check := func(res *http.Response, body []byte) int {
			t.Helper()
			if res.StatusCode != http.StatusPartialContent {
				t.Fatalf("capable client past the limit: %s", res.Status)
			}
			p, err := strconv.Atoi(res.Header.Get(contract.PieceHeader))
			if err != nil || p < 0 || p >= n {
				t.Fatalf("%s %q", contract.PieceHeader, res.Header.Get(contract.PieceHeader))
			}
			off, ln := m.PieceOffset(p), m.PieceLen(p)
			if cr := res.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes %d-%d/%d", off, off+ln-1, m.Size) {
				t.Errorf("piece %d: Content-Range %q", p, cr)
			}
			if err := m.VerifyPiece(p, body); err != nil || string(body) != string(data[off:off+ln]) {
				t.Errorf("piece %d: body of %d bytes does not verify: %v", p, len(body), err)
			}
			if res.Header.Get(contract.RootHeader) != m.Root.String() || res.Header.Get("Etag") != etag ||
				!strings.Contains(res.Header.Get("Link"), `rel="stampede-manifest"`) || res.Header.Get("Repr-Digest") != "" {
				t.Errorf("piece %d: headers %v", p, res.Header)
			}
			if secs, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || secs < 1 {
				t.Errorf("piece %d: Retry-After %q", p, res.Header.Get("Retry-After"))
			}
			peers := strings.Split(res.Header.Get(contract.PeersHeader), ", ")
			slices.Sort(peers)
			if !slices.Equal(peers, []string{"192.0.2.7:7000", "[2001:db8::5]:7001"}) {
				t.Errorf("piece %d: peers %q", p, res.Header.Get(contract.PeersHeader))
			}
			return p
		}

		// The asked piece first; asked again, another one; then every piece
		// once, whatever is asked.
		if p := check(ts.capableGet(t, m, 3)); p != 3 {
			t.Errorf("asked for piece 3, got %d", p)
		}
		seen := map[int]bool{3: true}
		for range n - 1 {
			p := check(ts.capableGet(t, m, 3))
			if seen[p] {
				t.Fatalf("piece %d handed out twice in one round", p)
			}
			seen[p] = true
		}
		// All given: 503 for capable clients too, still naming peers.
		res, _ = ts.capableGet(t, m, -1)
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(contract.PeersHeader) == "" || res.Header.Get("Retry-After") == "" {
			t.Errorf("every piece given: %s, peers %q, Retry-After %q", res.Status, res.Header.Get(contract.PeersHeader), res.Header.Get("Retry-After"))
		}

		for series, want := range map[string]int64{
			`stampede_origin_overload_answers_total{outcome="piece"}`:     int64(n),
			`stampede_origin_overload_answers_total{outcome="legacy"}`:    1,
			`stampede_origin_overload_answers_total{outcome="exhausted"}`: 1,
			`stampede_origin_rejected_total{reason="overload"}`:           2,
			`stampede_origin_overload_bytes_sent_total`:                   m.Size,
			`stampede_origin_overload_answers_max`:                        DefaultOverloadTransfers,
		} {
			if got := ts.metric(t, series); got != want {
				t.Errorf("%s = %d, want %d", series, got, want)
			}
		}
	})
}

func TestOverloadAnswerNeedsAManifest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "f", randomBytes(fileSize, 24), t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxTransfers: 1})
		holdHog(t, ts, dir)
		// f's manifest was never asked for: a capable client gets 503 rather
		// than the origin hashing under overload.
		res, _ := ts.do(t, "GET", "/f", contract.CapabilitiesHeader, contract.CapabilityOverload)
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("capable client, no manifest yet: %s", res.Status)
		}
		if got := ts.metric(t, `stampede_origin_overload_answers_total{outcome="no-manifest"}`); got != 1 {
			t.Errorf("no-manifest answers %d, want 1", got)
		}
	})
}

func TestOverloadModeOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "f", randomBytes(fileSize, 26), t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxTransfers: 1, OverloadTransfers: -1})
		m := ts.manifest(t, "/f")
		holdHog(t, ts, dir)
		if res, _ := ts.capableGet(t, m, 0); res.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("overload mode off: %s", res.Status)
		}
		if got := ts.metric(t, `stampede_origin_overload_answers_total{outcome="off"}`); got != 1 {
			t.Errorf("off answers %d, want 1", got)
		}
	})
}

// validators returns the ETag a HEAD of path answers with.
func (ts *testServer) validators(t *testing.T, path string) string {
	t.Helper()
	res, _ := ts.do(t, "HEAD", path)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("HEAD %s: %s", path, res.Status)
	}
	return res.Header.Get("Etag")
}
