package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
)

// counting is a server's snapshot function: its counter grows by 1000
// bytes at each call.
type counting struct{ calls atomic.Int64 }

func (c *counting) snapshot() Snapshot {
	n := c.calls.Add(1)
	return Snapshot{
		Title:   "test",
		Figures: []Figure{{ID: "sent", Label: "Sent", Unit: UnitBytes, Value: float64(1000 * n), Counter: true, Chart: true}},
		Tables:  []Table{},
	}
}

// serve serves h on a memnet host until the test ends; it returns a
// client of another host and the base URL.
func serve(t *testing.T, h http.Handler) (*http.Client, string) {
	t.Helper()
	nw := memnet.New()
	ln, err := nw.Host(memnet.HostConfig{}).Listen(80)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		hs.Serve(ln)
		close(done)
	}()
	tr := &http.Transport{DialContext: nw.Host(memnet.HostConfig{}).DialContext}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		hs.Close()
		<-done
	})
	return &http.Client{Transport: tr}, "http://" + ln.String()
}

// events is a stream read by a client.
type events struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

func openStream(t *testing.T, c *http.Client, base string) (*events, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+EventsPath, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode
	}
	return &events{resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}, resp.StatusCode
}

// next returns the next event's snapshot; a retry field before it is
// checked and skipped.
func (e *events) next(t *testing.T) (Snapshot, error) {
	t.Helper()
	for {
		line, err := e.r.ReadString('\n')
		if err != nil {
			return Snapshot{}, err
		}
		switch {
		case line == "retry: 2000\n" || line == "\n":
		case strings.HasPrefix(line, "data: "):
			var s Snapshot
			if err := json.Unmarshal([]byte(line[len("data: "):]), &s); err != nil {
				t.Fatalf("event %q: %v", line, err)
			}
			return s, nil
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

func (e *events) close() {
	e.cancel()
	e.resp.Body.Close()
}

// TestStream: a stream sends a snapshot at once and then one an
// interval, with the counters' rates, and ends when its client goes.
func TestStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c counting
		h := New(Config{Snapshot: c.snapshot})
		client, base := serve(t, h)
		ev, code := openStream(t, client, base)
		if code != http.StatusOK {
			t.Fatalf("stream: %d", code)
		}
		if ct := ev.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("Content-Type %q", ct)
		}
		start := time.Now()
		for i := range 4 {
			s, err := ev.next(t)
			if err != nil {
				t.Fatal(err)
			}
			if at := time.Since(start); at != time.Duration(i)*time.Second {
				t.Errorf("event %d at %v, want %ds", i, at, i)
			}
			f := s.Figures[0]
			if f.Value != float64(1000*(i+1)) || s.Title != "test" || !s.Time.Equal(start.UTC()) && i == 0 {
				t.Errorf("event %d: %+v", i, s)
			}
			switch {
			case i == 0 && f.Rate != nil:
				t.Errorf("first event: a rate (%v) with nothing before it", *f.Rate)
			case i > 0 && (f.Rate == nil || *f.Rate != 1000):
				t.Errorf("event %d: rate %v, want 1000", i, f.Rate)
			}
		}
		ev.close()
		synctest.Wait()
		if n := len(h.streams); n != 0 {
			t.Errorf("%d streams still open after their client went", n)
		}
	})
}

// TestStreamsShareSnapshots: however many watch, the server makes one
// snapshot an interval.
func TestStreamsShareSnapshots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c counting
		h := New(Config{Snapshot: c.snapshot})
		client, base := serve(t, h)
		var wg sync.WaitGroup
		for range 5 {
			ev, code := openStream(t, client, base)
			if code != http.StatusOK {
				t.Fatalf("stream: %d", code)
			}
			wg.Go(func() {
				defer ev.close()
				for range 3 {
					if _, err := ev.next(t); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if n := c.calls.Load(); n != 3 {
			t.Errorf("%d snapshots for 5 streams of 3 events over 2 s, want 3", n)
		}
	})
}

// TestStreamBound: past MaxStreams a stream is refused, the snapshot is
// still served, and a stream that ends frees its place.
func TestStreamBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c counting
		h := New(Config{Snapshot: c.snapshot, MaxStreams: 2})
		client, base := serve(t, h)
		var open []*events
		for range 2 {
			ev, code := openStream(t, client, base)
			if code != http.StatusOK {
				t.Fatalf("stream: %d", code)
			}
			open = append(open, ev)
		}
		if _, code := openStream(t, client, base); code != http.StatusServiceUnavailable {
			t.Errorf("a third stream: %d, want 503", code)
		}
		resp, err := client.Get(base + SnapshotPath)
		if err != nil {
			t.Fatal(err)
		}
		var s Snapshot
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != 200 || s.Title != "test" {
			t.Errorf("snapshot: %d %+v %v", resp.StatusCode, s, err)
		}
		resp.Body.Close()
		open[0].close()
		synctest.Wait()
		ev, code := openStream(t, client, base)
		if code != http.StatusOK {
			t.Fatalf("a stream after one ended: %d", code)
		}
		ev.close()
		open[1].close()
	})
}

// TestEndStreams: EndStreams ends the streams open, as a server that
// shuts down needs, and later streams work.
func TestEndStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c counting
		h := New(Config{Snapshot: c.snapshot})
		client, base := serve(t, h)
		ev, _ := openStream(t, client, base)
		if _, err := ev.next(t); err != nil {
			t.Fatal(err)
		}
		h.EndStreams()
		if _, err := ev.next(t); err != io.EOF {
			t.Errorf("after EndStreams: %v, want EOF", err)
		}
		ev.close()
		ev, code := openStream(t, client, base)
		if code != http.StatusOK {
			t.Fatalf("a stream after EndStreams: %d", code)
		}
		if _, err := ev.next(t); err != nil {
			t.Error(err)
		}
		ev.close()
	})
}

// TestRates: a rate is left out after a long pause and when a counter went
// down.
func TestRates(t *testing.T) {
	v := 0.0
	h := New(Config{Snapshot: func() Snapshot {
		return Snapshot{Figures: []Figure{{ID: "c", Value: v, Counter: true}, {ID: "g", Value: v}}}
	}})
	t0 := time.Now()
	rate := func(at time.Duration) *float64 {
		s, _ := h.current(t0.Add(at))
		if s.Figures[1].Rate != nil {
			t.Errorf("a gauge with a rate")
		}
		return s.Figures[0].Rate
	}
	steps := []struct {
		at    time.Duration
		value float64
		rate  float64 // -1: none
	}{
		{0, 0, -1},
		{500 * time.Millisecond, 100, -1}, // within the interval: the same snapshot
		{time.Second, 500, 500},
		{3 * time.Second, 1500, 500},
		{10 * time.Second, 2000, -1}, // a pause
		{11 * time.Second, 1000, -1}, // down
		{12 * time.Second, 1000, 0},
	}
	for _, st := range steps {
		v = st.value
		r := rate(st.at)
		switch {
		case st.rate < 0 && r != nil:
			t.Errorf("at %v: rate %v, want none", st.at, *r)
		case st.rate >= 0 && (r == nil || *r != st.rate):
			t.Errorf("at %v: rate %v, want %v", st.at, r, st.rate)
		}
	}
}

// TestPage: the page shows the snapshot with every string escaped, under
// a policy that lets it run only its own script.
func TestPage(t *testing.T) {
	evil := `<script>alert(1)</script>`
	h := New(Config{Snapshot: func() Snapshot {
		return Snapshot{
			Title: "stampede <test>",
			Notes: []string{`note "` + evil},
			Figures: []Figure{
				{ID: "sent", Label: "Sent" + evil, Unit: UnitBytes, Value: 1536, Counter: true, Max: 1 << 20, Chart: true},
				{ID: "transfers", Label: "Transfers", Value: 3, Max: 64},
			},
			Tables: []Table{
				{Title: "Files", Columns: []Column{{"name", UnitText}, {"done", UnitProgress}, {"size", UnitBytes}, {"peers", UnitCount}},
					Rows: [][]any{{evil, 0.25, int64(3 << 20), 7}, {"b.bin", nil, nil, 0}}},
				{Title: "Nothing", Empty: "None yet."},
			},
		}
	}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", Path, nil))
	body := rec.Body.String()
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") ||
		!strings.Contains(rec.Header().Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	if strings.Contains(body, evil) || strings.Count(body, "&lt;script&gt;alert(1)&lt;/script&gt;") != 3 {
		t.Errorf("a string not escaped, or not shown:\n%s", body)
	}
	for _, want := range []string{
		"<h1>stampede &lt;test&gt;</h1>",
		`<div class="figure" data-id="sent" data-value="1536">`,
		`<div class="value">1.5 KiB</div>`,
		`<meter max="64" value="3"></meter><div class="max">of 64</div>`,
		`<progress max="1" value="0.25"></progress> 25.0%`,
		`<td class="n">3.0 MiB</td><td class="n">7</td>`,
		`<td>b.bin</td><td class="n">–</td><td class="n">–</td><td class="n">0</td>`,
		`<p class="empty">None yet.</p>`,
		`<script src="/.well-known/stampede/dashboard/dashboard.js" defer></script>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("no %s in\n%s", want, body)
		}
	}
}

// TestResources: the script and style sheet, revalidated by ETag; an
// unknown path below Path is not the page; only GET and HEAD.
func TestResources(t *testing.T) {
	h := New(Config{Snapshot: func() Snapshot { return Snapshot{} }})
	for path, ct := range map[string]string{Path + "/dashboard.js": "text/javascript", Path + "/dashboard.css": "text/css"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), ct) || rec.Body.Len() < 500 {
			t.Errorf("%s: %d %v, %d bytes", path, rec.Code, rec.Header(), rec.Body.Len())
		}
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("If-None-Match", rec.Header().Get("ETag"))
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotModified {
			t.Errorf("%s revalidated: %d", path, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", Path+"/nothing", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("%s/nothing: %d", Path, rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", SnapshotPath, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
}

// TestFormat: the figures as the page prints them (the script's fmt must
// agree: the browser test checks it).
func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{0, UnitCount, "0"},
		{12.5, UnitCount, "13"},
		{123456789, UnitCount, "123456789"},
		{0, UnitBytes, "0 B"},
		{1023, UnitBytes, "1023 B"},
		{1024, UnitBytes, "1.0 KiB"},
		{1280, UnitBytes, "1.3 KiB"}, // 1.25: half away from zero
		{10 << 20, UnitBytes, "10.0 MiB"},
		{1.5 * (1 << 30), UnitBytes, "1.5 GiB"},
		{1 << 62, UnitBytes, "4096.0 PiB"},
	} {
		if got := Format(tc.v, tc.unit); got != tc.want {
			t.Errorf("Format(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}
