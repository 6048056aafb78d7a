package origin

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	if d := decide(load{active: 3, max: 4}, 0.5); d.action != actionAdmit {
		t.Errorf("below the limit: %+v", d)
	}
	if d := decide(load{active: 4, max: 4}, 0.5); d.action != actionReject || d.retryAfter < time.Second {
		t.Errorf("at the limit: %+v", d)
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
// arrived: from then on it holds a transfer slot until the body is closed.
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
	return res
}

func TestOverloadAnswers503(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(1<<20, 20)
	writeFile(t, dir, "f", data, t0)
	done := make(chan struct{}, 10)
	// At 256 KiB/s the 1 MiB body holds its slot for seconds.
	ts := start(t, Config{Dir: dir, MaxTransfers: 1, Rate: 256 << 10}, func(s *Server) {
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
		{"GET", ManifestPrefix + "/f", nil, 200},
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
}

func TestOverloadFixedRetryAfter(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", randomBytes(1<<20, 21), t0)
	ts := start(t, Config{Dir: dir, MaxTransfers: 1, Rate: 128 << 10, RetryAfter: 7 * time.Second})
	held := holdTransfer(t, ts, "/f")
	defer held.Body.Close()
	res, _ := ts.do(t, "GET", "/f")
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "7" {
		t.Errorf("%s, Retry-After %q; want 503 and 7", res.Status, res.Header.Get("Retry-After"))
	}
}

func TestRateShapesEgress(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(2<<20, 22)
	writeFile(t, dir, "f", data, t0)
	const rate = 4 << 20
	ts := start(t, Config{Dir: dir, Rate: rate})
	ts.manifest(t, "/f") // hash now, so that only the transfer is timed

	// The limiter lets a tenth of a second through at once; the rest of the
	// 2 MiB at 4 MiB/s takes 0.4 s at least. The upper bound only catches
	// a limiter gone badly wrong.
	begin := time.Now()
	res, body := ts.do(t, "GET", "/f")
	elapsed := time.Since(begin)
	if res.StatusCode != 200 || len(body) != len(data) {
		t.Fatalf("%s, %d bytes", res.Status, len(body))
	}
	if elapsed < 350*time.Millisecond || elapsed > 10*time.Second {
		t.Errorf("2 MiB at 4 MiB/s took %v", elapsed)
	}

	// Two transfers share the rate.
	begin = time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if res, body := ts.do(t, "GET", "/f", "Range", "bytes=0-1048575"); res.StatusCode != 206 || len(body) != 1<<20 {
				t.Errorf("%s, %d bytes", res.Status, len(body))
			}
		})
	}
	wg.Wait()
	if elapsed := time.Since(begin); elapsed < 350*time.Millisecond {
		t.Errorf("two 1 MiB ranges at 4 MiB/s in all took %v", elapsed)
	}
}
