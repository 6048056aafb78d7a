package fetch

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
)

// overloadOrigin is origin.Server with its tracker, on loopback or on an
// in-memory network, behind a handler that measures what capable clients
// get for file.
type overloadOrigin struct {
	url, base string
	data      []byte
	dir       string
	nw        *memnet.Network // nil on loopback

	answered     chan struct{} // closed at the first overload answer
	answeredOnce sync.Once

	mu          sync.Mutex // guards the following
	capableBody int64      // file body bytes sent to capable clients
	pieces      map[int]int
	withPeers   int // overload answers naming peers
	statuses    map[int]int
}

type countWriter struct {
	http.ResponseWriter
	n      int64
	status int
}

func (w *countWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

// startOverloadOrigin starts an origin serving size bytes as file.bin, on
// nw, or on loopback if nw is nil.
func startOverloadOrigin(t *testing.T, nw *memnet.Network, size int, cfg origin.Config) *overloadOrigin {
	t.Helper()
	o := &overloadOrigin{dir: t.TempDir(), data: randomData(size, 77), nw: nw, pieces: map[int]int{}, statuses: map[int]int{},
		answered: make(chan struct{})}
	if err := os.WriteFile(filepath.Join(o.dir, "file.bin"), o.data, 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Dir, cfg.CacheDir, cfg.Logger = o.dir, t.TempDir(), log
	cfg.Tracker = tracker.New(tracker.Config{Logger: log})
	srv, err := origin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if nw != nil {
		ln, err = nw.Host(memnet.HostConfig{}).Listen(80)
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	inner := srv.Handler()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/file.bin" || r.Header.Get(contract.CapabilitiesHeader) == "" {
			inner.ServeHTTP(w, r)
			return
		}
		cw := &countWriter{ResponseWriter: w}
		inner.ServeHTTP(cw, r)
		o.mu.Lock()
		defer o.mu.Unlock()
		if cw.status == http.StatusOK || cw.status == http.StatusPartialContent {
			o.capableBody += cw.n
		}
		o.statuses[cw.status]++
		if p := w.Header().Get(contract.PieceHeader); p != "" && w.Header().Get("Retry-After") != "" { // not a pick answer
			o.answeredOnce.Do(func() { close(o.answered) })
			i, _ := strconv.Atoi(p)
			o.pieces[i]++
			if w.Header().Get(contract.PeersHeader) != "" {
				o.withPeers++
			}
		}
	})}
	go hs.Serve(ln)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	o.base = "http://" + ln.Addr().String()
	o.url = o.base + "/file.bin"
	return o
}

// dial is what a plain client of o dials with: a new host's DialContext
// on memnet, nil (net/http's default) on loopback.
func (o *overloadOrigin) dial() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if o.nw == nil {
		return nil
	}
	return o.nw.Host(memnet.HostConfig{}).DialContext
}

// client is NewClient(parallel) reaching o. On memnet it dials from a new
// host, returned too for a swarm's listener: the tracker tells peers apart
// by address.
func (o *overloadOrigin) client(t *testing.T, parallel int) (*http.Client, *memnet.Host) {
	if o.nw == nil {
		c := NewClient(parallel)
		t.Cleanup(c.CloseIdleConnections)
		return c, nil
	}
	h := o.nw.Host(memnet.HostConfig{})
	return memClient(t, h, parallel), h
}

// hog occupies the origin's only transfer slot with a download it never
// reads: a 64 MiB sparse file, asked as a range so that no digest is
// computed. The origin's write blocks once the socket buffers are full.
func (o *overloadOrigin) hog(t *testing.T) {
	t.Helper()
	f, err := os.Create(filepath.Join(o.dir, "hog"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	req, _ := http.NewRequest("GET", o.base+"/hog", nil)
	req.Header.Set("Range", "bytes=0-")
	tr := &http.Transport{DialContext: o.dial()}
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusPartialContent {
		t.Fatalf("hog: %s", res.Status)
	}
	t.Cleanup(func() {
		res.Body.Close()
		tr.CloseIdleConnections()
	})
}

// legacyGet is a plain HTTP client (net/http, no stampede header) asking
// o for the file; it reports the status, Retry-After and how long the
// answer took.
func legacyGet(t *testing.T, o *overloadOrigin) (int, string, time.Duration) {
	t.Helper()
	tr := &http.Transport{DialContext: o.dial()}
	defer tr.CloseIdleConnections()
	start := time.Now()
	res, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(o.url)
	if err != nil {
		t.Error(err)
		return 0, "", 0
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, res.Header.Get("Retry-After"), time.Since(start)
}

// legacyTimeBound is how soon a legacy client must be told 503: at once,
// however busy the origin is, rather than after a slow timeout. The test
// runs in a synctest bubble, where answering takes no time: only a wait
// the origin imposes would count.
const legacyTimeBound = 100 * time.Millisecond

// TestOverloadedOriginSwarm: 50 capable clients (stampede get in the swarm)
// against an origin whose only transfer slot is taken: every one of their
// requests is past the limit, so what they get from the origin is overload
// answers, one piece each, and the rest comes from each other. The origin
// hands each piece out at most once per window (OverloadCopies 1, a window
// longer than the test), so the file bytes it sends them are at most one
// copy of the file: that is the bound asserted. Meanwhile plain HTTP
// clients get 503 + Retry-After within legacyTimeBound.
func TestOverloadedOriginSwarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const clients, size = 50, 2 << 20
		o := startOverloadOrigin(t, memnet.New(), size, origin.Config{MaxTransfers: 1, OverloadWindow: time.Hour})
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		c, _ := o.client(t, 4)
		m, err := Manifest(ctx, c, o.url) // computed before the crowd: overload answers need it
		if err != nil {
			t.Fatal(err)
		}
		o.hog(t)

		code, retry, took := legacyGet(t, o)
		if code != http.StatusServiceUnavailable || retry == "" || took > legacyTimeBound {
			t.Fatalf("legacy client before the crowd: %d, Retry-After %q, after %v", code, retry, took)
		}

		// Clients seed until all are done, so that a piece handed to one that
		// finished early is not lost to the others (a real crowd keeps
		// arriving; this one is all there is).
		swarmCtx, stopSeeding := context.WithCancel(ctx)
		defer stopSeeding()
		type result struct {
			res *Result
			err error
			out string
		}
		results := make([]result, clients)
		downloads := make([]*Download, clients)
		for i := range clients {
			out := filepath.Join(t.TempDir(), "file.bin")
			c, h := o.client(t, 4)
			ln, err := h.Listen(0)
			if err != nil {
				t.Fatal(err)
			}
			d, err := New(Config{
				URL: o.url, Output: out, Client: c,
				Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})).With("client", i),
				Swarm: SwarmConfig{SeedForever: true, Node: node.Config{
					Listener: ln, Dial: h.Dial,
					// START only for origin fetches: see node's scenarioSwarm.
					Swarm: swarm.Config{QuietRequests: true},
				}},
			})
			if err != nil {
				t.Fatal(err)
			}
			downloads[i], results[i].out = d, out
		}
		var wg sync.WaitGroup
		for i, d := range downloads {
			wg.Go(func() { results[i].res, results[i].err = d.Run(swarmCtx) })
		}

		// A legacy client in the middle of the crowd, once overload answers
		// are flowing.
		legacyDone := make(chan struct{})
		go func() {
			defer close(legacyDone)
			select {
			case <-o.answered:
				code, retry, took = legacyGet(t, o)
			case <-swarmCtx.Done():
			}
		}()

		// Wait for every client to have the whole file (they are seeding), or
		// for one to fail.
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for done := 0; done < clients; {
			select {
			case <-ctx.Done():
				t.Fatalf("only %d of %d clients finished", done, clients)
			case <-tick.C:
			}
			done = 0
			for _, d := range downloads {
				if d.Progress().Phase == "seeding" {
					done++
				}
			}
		}
		<-legacyDone
		stopSeeding()
		wg.Wait()

		want := o.data
		for i, r := range results {
			if r.err != nil {
				t.Errorf("client %d: %v", i, r.err)
				continue
			}
			got, err := os.ReadFile(r.out)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("client %d: the file differs from the origin's (%v)", i, err)
			}
		}
		if code != http.StatusServiceUnavailable || retry == "" || took > legacyTimeBound {
			t.Errorf("legacy client during the crowd: %d, Retry-After %q, after %v (want 503 within %v)", code, retry, took, legacyTimeBound)
		}

		o.mu.Lock()
		defer o.mu.Unlock()
		var slowest time.Duration
		for _, r := range results {
			if r.res != nil {
				slowest = max(slowest, time.Duration(r.res.Seconds*float64(time.Second)))
			}
		}
		answers, twice := 0, 0
		for _, n := range o.pieces {
			answers += n
			if n > 1 {
				twice++
			}
		}
		t.Logf("%d clients, %d KiB file of %d pieces: origin sent capable clients %d file bytes (%.2f× the file) in %d overload answers "+
			"(%d naming peers); their requests got %v; slowest client %v; legacy 503 in %v",
			clients, size>>10, m.NumPieces(), o.capableBody, float64(o.capableBody)/size, answers, o.withPeers, o.statuses,
			slowest.Round(time.Millisecond), took)
		if o.capableBody > size {
			t.Errorf("the origin sent capable clients %d file bytes, more than the file (%d): the policy hands each piece out once per window", o.capableBody, size)
		}
		if answers == 0 || o.withPeers == 0 || twice > 0 || o.statuses[http.StatusOK] > 0 {
			t.Errorf("overload answers: %d, %d with peers, %d pieces twice, %d full bodies", answers, o.withPeers, twice, o.statuses[http.StatusOK])
		}
	})
}

// TestOverloadedOriginCurl: curl, the other legacy client, gets 503 and
// Retry-After from an origin whose only transfer slot is taken. It runs on
// loopback, where a process can connect: how soon the answer comes is
// TestOverloadedOriginSwarm's to check, in virtual time; curl's --max-time
// only keeps a hung answer from holding up the run.
func TestOverloadedOriginCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl here")
	}
	o := startOverloadOrigin(t, nil, 1<<20, origin.Config{MaxTransfers: 1})
	o.hog(t)
	out, err := exec.CommandContext(t.Context(), "curl", "-sS", "-o", "/dev/null", "-D", "-", "--max-time", "30", o.url).Output()
	if err != nil || !strings.Contains(string(out), " 503") || !strings.Contains(strings.ToLower(string(out)), "retry-after:") {
		t.Errorf("curl: %v:\n%s", err, out)
	}
}

// TestSwarmAnnouncesOnDownloadClient: the swarm's tracker announces go
// through the download's HTTP client, so that the tracker embedded in the
// origin answers on the connection that brought the manifest instead of
// on a new one.
func TestSwarmAnnouncesOnDownloadClient(t *testing.T) {
	o := startOverloadOrigin(t, nil, 1<<20, origin.Config{})
	c := NewClient(4)
	var announces atomic.Int32
	inner := c.Transport
	c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == tracker.WellKnownPath {
			announces.Add(1)
		}
		return inner.RoundTrip(r)
	})
	out := filepath.Join(t.TempDir(), "file.bin")
	d, err := New(Config{URL: o.url, Output: out, Client: c, Logger: logTo(t, new(logBuffer)),
		Swarm: SwarmConfig{ListenAddr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, o.data) {
		t.Fatalf("download differs from the file (err %v)", err)
	}
	if announces.Load() == 0 {
		t.Error("no tracker announce went through the download's client")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
