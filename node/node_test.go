package node_test

// Tests of one or two nodes run directly (node.New, Run) over memnet, each
// pinning a behaviour of the runtime that a bug once broke.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/wire"
)

// serveHTTP serves h on a new memnet host and returns its base URL.
func serveHTTP(t *testing.T, nw *memnet.Network, h http.Handler) string {
	ln, err := nw.Host(memnet.HostConfig{}).Listen(80)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.String()
}

// serveTracker runs a tracker on nw and returns its announce URL.
func serveTracker(t *testing.T, nw *memnet.Network) string {
	return serveHTTP(t, nw, tracker.New(tracker.Config{})) + tracker.WellKnownPath
}

// testFile returns data of size bytes and its manifest with pieces of
// pieceSize (0: the default).
func testFile(t *testing.T, size int, pieceSize int64, seed uint64) ([]byte, *manifest.Manifest) {
	data := randomBytes(size, seed)
	b, err := manifest.NewBuilder(int64(size), pieceSize)
	if err != nil {
		t.Fatal(err)
	}
	b.Write(data)
	m, err := b.Manifest("f")
	if err != nil {
		t.Fatal(err)
	}
	return data, m
}

// openStore opens a fresh store for m holding the pieces of data that keep
// says to.
func openStore(t *testing.T, m *manifest.Manifest, data []byte, keep func(i int) bool) *store.File {
	st, err := store.Open(filepath.Join(t.TempDir(), "f"), m, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for i := range m.NumPieces() {
		if keep(i) {
			off := m.PieceOffset(i)
			if err := st.WritePiece(i, data[off:off+m.PieceLen(i)]); err != nil {
				t.Fatal(err)
			}
		}
	}
	return st
}

// testNode is a node on its own memnet host.
type testNode struct {
	nd       *node.Node
	st       *store.File
	ln       *memnet.Listener
	done     chan struct{} // closed when the store is complete
	complete time.Time     // set before done is closed
	ended    chan struct{} // closed when Run has returned runErr
	runErr   error
	cancel   context.CancelFunc
}

// addr is the node's listening address.
func (tn *testNode) addr(t *testing.T) string {
	return tn.ln.String()
}

// stop ends Run and returns its error.
func (tn *testNode) stop() error {
	tn.cancel()
	<-tn.ended
	return tn.runErr
}

func startNode(t *testing.T, ctx context.Context, nw *memnet.Network, cfg node.Config) *testNode {
	return startNodeLink(t, ctx, nw, memnet.HostConfig{Latency: 10 * time.Millisecond}, cfg)
}

// startNodeLink is startNode on a host with the given link.
func startNodeLink(t *testing.T, ctx context.Context, nw *memnet.Network, link memnet.HostConfig, cfg node.Config) *testNode {
	h := nw.Host(link)
	ln, err := h.Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{st: cfg.Store, ln: ln, done: make(chan struct{}), ended: make(chan struct{})}
	if cfg.Listener != nil {
		// A wrapper of the listener to come (see slowInbound).
		cfg.Listener.(*slowInbound).Listener = ln
	} else {
		cfg.Listener = ln
	}
	cfg.Dial = h.Dial
	client := httpClient(h.Dial)
	cfg.HTTPClient = client
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t, slog.LevelInfo)
	}
	cfg.OnComplete = func() error {
		tn.complete = time.Now()
		close(tn.done)
		return nil
	}
	tn.nd, err = node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	tn.cancel = cancel
	go func() {
		tn.runErr = tn.nd.Run(rctx)
		close(tn.ended)
	}()
	t.Cleanup(func() {
		tn.stop()
		// Closed here, not at the server's end, so that no connection
		// waits for an EOF after the bubble's time has stopped.
		client.CloseIdleConnections()
	})
	return tn
}

// wait waits for the node's store to be complete, failing the test at the
// context's end.
func (tn *testNode) wait(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-tn.done:
	case <-tn.ended:
		t.Fatalf("node ended before completing: %v", tn.runErr)
	case <-ctx.Done():
		t.Fatalf("node incomplete after the test's time: %d of %d pieces", tn.st.Count(), tn.st.Manifest().NumPieces())
	}
}

// TestRejectDontHaveDropsPeer: a peer that advertises every piece and then
// refuses every request as "don't have" is dropped after a few refusals,
// and the pieces it claimed come from the origin instead. (The runtime used
// to pass REJECTs to the scheduler without their reason, so the lie never
// counted: the scheduler believed the peer had the pieces and kept the
// origin off them until StallAfter, 40 s.)
func TestRejectDontHaveDropsPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 256*KiB, 0, 11)
		f := startFake(t, ctx, nw, m, dontHave, nil)

		st := openStore(t, m, data, func(int) bool { return false })
		origin := storeOrigin(m, st, data)
		start := time.Now()
		tn := startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, Origin: origin, Trackers: m.Trackers, SeedForever: true})
		tn.wait(t, ctx)
		took := time.Since(start)
		var how string
		select {
		case how = <-f.ended:
		case <-ctx.Done():
			t.Fatal("the connection to the liar is still up")
		}
		t.Logf("complete in %v; the liar got %d requests on %d connections; the node closed with %q", took, f.requests.Load(), f.conns.Load(), how)
		if took > 10*time.Second {
			t.Errorf("took %v with a peer refusing what it advertised: its lies were not counted", took)
		}
		if !strings.Contains(how, "dont-have") {
			t.Errorf("the node closed the connection with %q, want it dropped for refusing what it advertised", how)
		}
	})
}

// barrierTracker answers each of the first two announces, once both have
// come, with the other peer only: the two then dial each other at the same
// moment.
type barrierTracker struct {
	mu      sync.Mutex
	arrived []netip.AddrPort
	ids     []tracker.PeerID
	both    chan struct{}
}

func (b *barrierTracker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	ip, _ := netip.ParseAddr(host)
	port, _ := netip.ParseAddrPort("0.0.0.0:" + r.URL.Query().Get("port"))
	id, _ := tracker.ParsePeerID(r.URL.Query().Get("id"))
	ap := netip.AddrPortFrom(ip, port.Port())
	b.mu.Lock()
	me := -1
	for k, a := range b.arrived {
		if a == ap {
			me = k
		}
	}
	if me < 0 && len(b.arrived) < 2 {
		me = len(b.arrived)
		b.arrived = append(b.arrived, ap)
		b.ids = append(b.ids, id)
		if len(b.arrived) == 2 {
			close(b.both)
		}
	}
	b.mu.Unlock()
	resp := &tracker.AnnounceResponse{Interval: time.Minute, SwarmSize: 2}
	if me >= 0 {
		select {
		case <-b.both:
			other := 1 - me
			resp.Peers = []tracker.Peer{{Addr: b.arrived[other], ID: b.ids[other]}}
		case <-r.Context().Done():
			return
		}
	}
	body, _ := json.Marshal(resp)
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

// slowInbound delays the first read of every accepted connection, so that
// a node finishes the handshake of a connection it dialed before that of
// one dialed to it at the same moment.
type slowInbound struct {
	net.Listener
	delay time.Duration
}

func (l *slowInbound) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: c, delay: time.After(l.delay)}, nil
}

type slowConn struct {
	net.Conn
	delay <-chan time.Time
	once  sync.Once
}

func (c *slowConn) Read(b []byte) (int, error) {
	c.once.Do(func() { <-c.delay })
	return c.Conn.Read(b)
}

// TestSimultaneousDial: two peers that learn of each other at the same
// moment dial each other at once. Both must keep the same one of the two
// connections (the one dialed by the smaller peer ID), not one each, which
// would leave them with none and redial in lockstep after the dial backoff.
func TestSimultaneousDial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const pairs = 4
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 512*KiB, 0, 12)
		var wg sync.WaitGroup
		took := make([]time.Duration, pairs)
		for k := range pairs {
			wg.Go(func() {
				mk := *m
				mk.Trackers = []string{serveHTTP(t, nw, &barrierTracker{both: make(chan struct{})}) + tracker.WellKnownPath}
				// Each has the half the other lacks; neither has an origin.
				start := time.Now()
				// Both register the connection they dialed first: dropping
				// the later one on each side would drop both.
				a := startNode(t, ctx, nw, node.Config{Manifest: &mk, Trackers: mk.Trackers, SeedForever: true,
					Listener: &slowInbound{delay: 50 * time.Millisecond},
					Store:    openStore(t, &mk, data, func(i int) bool { return i%2 == 0 })})
				b := startNode(t, ctx, nw, node.Config{Manifest: &mk, Trackers: mk.Trackers, SeedForever: true,
					Listener: &slowInbound{delay: 50 * time.Millisecond},
					Store:    openStore(t, &mk, data, func(i int) bool { return i%2 == 1 })})
				for _, tn := range []*testNode{a, b} {
					select {
					case <-tn.done:
					case <-ctx.Done():
						t.Errorf("pair %d: a peer has %d of %d pieces at the end of the test", k, tn.st.Count(), m.NumPieces())
						return
					}
				}
				took[k] = time.Since(start)
				a.stop()
				b.stop()
			})
		}
		wg.Wait()
		t.Logf("pairs completed in %v", took)
		for k, d := range took {
			// Dial backoff is 5 s: a pair that lost both connections takes
			// at least that.
			if d > 3*time.Second {
				t.Errorf("pair %d took %v: the two connections were both dropped", k, d)
			}
		}
	})
}

// remnantSeed serves a file of one two-frame piece: it answers the first
// request with the first frame only, and once the node has cancelled it
// and asked again, sends the second frame of that first answer (the
// protocol lets a server finish a cancelled answer) and then the whole
// piece.
func remnantSeed(data []byte) func(s *fakeSession) error {
	return func(s *fakeSession) error {
		if err := s.start(true); err != nil {
			return err
		}
		req, err := s.next()
		if err != nil {
			return err
		}
		if err := s.w.WriteData(req.Piece, 0, data[:wire.MaxData]); err != nil {
			return err
		}
		if err := s.w.Flush(); err != nil {
			return err
		}
		// Wait for the CANCEL and the new REQUEST.
		cancelled := false
		for {
			msg, err := s.r.Read()
			if err != nil {
				return err
			}
			if _, ok := msg.(*wire.Cancel); ok {
				cancelled = true
			}
			if r, ok := msg.(*wire.Request); ok && cancelled {
				req = r
				break
			}
		}
		if err := s.w.WriteData(req.Piece, wire.MaxData, data[wire.MaxData:]); err != nil {
			return err
		}
		if err := s.w.WriteData(req.Piece, 0, data); err != nil {
			return err
		}
		if err := s.w.Flush(); err != nil {
			return err
		}
		<-s.f.quit
		return errStop
	}
}

// TestDataAfterCancel: DATA of a request the node cancelled may still
// arrive after it asked for the same piece again; the node drops it and
// takes the new answer, rather than closing the connection as if the peer
// had broken the protocol.
func TestDataAfterCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		nw := memnet.New()
		const size = 2 * wire.MaxData
		data, m := testFile(t, size, size, 13) // one piece, two DATA frames
		f := startFake(t, ctx, nw, m, remnantSeed(data), nil)
		st := openStore(t, m, data, func(int) bool { return false })
		tn := startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, Trackers: m.Trackers, SeedForever: true,
			// Time the first request out quickly.
			Swarm: swarm.Config{RequestTimeout: 300 * time.Millisecond, MinRequestTimeout: 100 * time.Millisecond}})
		tn.wait(t, ctx)
		if f.closed.Load() != 0 {
			t.Errorf("the node closed the connection")
		}
		got := make([]byte, size)
		if _, err := st.ReadPiece(0, got); err != nil || !bytes.Equal(got, data) {
			t.Errorf("piece 0 not stored right: %v", err)
		}
	})
}

// TestLazyHaves: a HAVE goes at once to a neighbour that lacks the piece,
// and waits (up to a second) for one that has it and more for us, going
// out with the others that waited. A peer with all pieces but the last
// serves 15 of them, one every 60 ms, and the origin the last: an empty
// peer hears of them one by one as they come, the serving peer in a few
// batches; both hear of all 16.
func TestLazyHaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		nw := memnet.New()
		const pieces = 16
		data, m := testFile(t, pieces*16*KiB, 16*KiB, 15)
		trURL := serveTracker(t, nw)
		m.Trackers = []string{trURL}

		var fakes []*fakePeer
		var mu sync.Mutex                             // guards the following
		haves := map[*fakePeer][]time.Time{}          // in the order they came
		heard := map[*fakePeer]map[uint32]time.Time{} // by piece
		done := 0                                     // fake peers that have heard of every piece
		allHeard := make(chan struct{})               // closed when done is 2
		// listen records the HAVEs s reads, and passes REQUESTs on to reqs.
		listen := func(s *fakeSession, reqs chan<- *wire.Request) error {
			for {
				msg, err := s.r.Read()
				if err != nil {
					return err
				}
				switch msg := msg.(type) {
				case *wire.Have:
					mu.Lock()
					haves[s.f] = append(haves[s.f], time.Now())
					if heard[s.f] == nil {
						heard[s.f] = map[uint32]time.Time{}
					}
					heard[s.f][msg.Piece] = time.Now()
					if len(heard[s.f]) == pieces {
						if done++; done == 2 {
							close(allHeard)
						}
					}
					mu.Unlock()
				case *wire.Request:
					if reqs != nil {
						reqs <- msg
					}
				}
			}
		}
		slowSeed := func(s *fakeSession) error {
			set := pieceset.Full(pieces)
			set.Remove(pieces - 1)
			if err := s.w.WriteMessage(&wire.HaveSet{Set: set}); err != nil {
				return err
			}
			if err := s.w.WriteMessage(&wire.Unchoke{}); err != nil {
				return err
			}
			if err := s.w.Flush(); err != nil {
				return err
			}
			reqs := make(chan *wire.Request, pieces)
			go func() {
				for req := range reqs {
					time.Sleep(60 * time.Millisecond)
					off := m.PieceOffset(int(req.Piece))
					if s.w.WriteData(req.Piece, 0, data[off:off+m.PieceLen(int(req.Piece))]) != nil || s.w.Flush() != nil {
						return
					}
				}
			}()
			defer close(reqs)
			return listen(s, reqs)
		}
		empty := func(s *fakeSession) error {
			if err := s.w.WriteMessage(&wire.HaveSet{Set: pieceset.New(pieces)}); err != nil {
				return err
			}
			if err := s.w.Flush(); err != nil {
				return err
			}
			return listen(s, nil)
		}
		for _, serve := range []func(*fakeSession) error{slowSeed, empty} {
			h := nw.Host(memnet.HostConfig{})
			ln, err := h.Listen(0)
			if err != nil {
				t.Fatal(err)
			}
			f := newFakePeer(t, m, ln, serve)
			f.leecher = true // before anyone can connect: the tracker does not know it yet
			fakes = append(fakes, f)
			f.announce(ctx, httpClient(h.Dial), trURL)
		}
		seed, leech := fakes[0], fakes[1]
		st := openStore(t, m, data, func(int) bool { return false })
		origin := storeOrigin(m, st, data)
		tn := startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, Origin: origin, Trackers: m.Trackers, SeedForever: true,
			Swarm: swarm.Config{SmallDeadline: -1}}) // the rules of any file, not a small object's
		tn.wait(t, ctx)

		// batches counts the bursts in which HAVEs came (20 ms apart or more).
		batches := func(at []time.Time) int {
			n := 0
			for i := range at {
				if i == 0 || at[i].Sub(at[i-1]) >= 20*time.Millisecond {
					n++
				}
			}
			return n
		}
		select {
		case <-allHeard:
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("HAVEs heard: %d by the serving peer, %d by the empty peer, of %d pieces", len(heard[seed]), len(heard[leech]), pieces)
		}
		mu.Lock()
		defer mu.Unlock()
		bs, bl := batches(haves[seed]), batches(haves[leech])
		var late time.Duration // the longest a HAVE to the serving peer came after the same to the empty one
		for p, at := range heard[seed] {
			late = max(late, at.Sub(heard[leech][p]))
		}
		t.Logf("the serving peer heard of %d pieces in %d bursts, the empty peer in %d; a HAVE held back at most %v", pieces, bs, bl, late)
		// Without lazy HAVEs, one burst per piece for both.
		if bs > pieces/2 {
			t.Errorf("the serving peer heard of the %d pieces in %d bursts: its HAVEs were not held back", pieces, bs)
		}
		if bl < pieces/2 {
			t.Errorf("the empty peer heard of the %d pieces in %d bursts only: its HAVEs were held back", pieces, bl)
		}
		// Held lazyHaveDelay (a second) at most: in the bubble the loop's
		// ticks come on time, so there is no slack to allow for.
		if late > time.Second {
			t.Errorf("a HAVE was held back %v, over a second", late)
		}
	})
}

// TestDisconnectStuckPeer: a peer that never reads (but keeps talking, so
// it never looks idle) fills the connection until the node's writer blocks.
// When the scheduler drops it (its requests time out), the connection must
// still close: a GOODBYE that cannot be flushed must not hold the socket,
// the goroutines and the buffers open for as long as the peer likes.
func TestDisconnectStuckPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 256*KiB, 0, 14)
		trURL := serveTracker(t, nw)
		m.Trackers = []string{trURL}
		// A window of a few frames: the node's writes block at once.
		fh := nw.Host(memnet.HostConfig{Window: 64})
		fln, err := fh.Listen(0)
		if err != nil {
			t.Fatal(err)
		}
		f := newFakePeer(t, m, fln, deafTalker)
		f.announce(ctx, httpClient(fh.Dial), trURL)
		st := openStore(t, m, data, func(int) bool { return false })
		origin := storeOrigin(m, st, data)
		startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, Origin: origin, Trackers: m.Trackers, SeedForever: true,
			Swarm: swarm.Config{RequestTimeout: 300 * time.Millisecond, MinRequestTimeout: 100 * time.Millisecond}})
		select {
		case how := <-f.ended:
			t.Logf("the connection to the stuck peer ended: %s", how)
		case <-ctx.Done():
			t.Fatal("the connection to a peer the node dropped is still open at the end of the test")
		}
	})
}

// TestStalledPeerRuntime: one seed serves a few downloaders while a peer
// that advertises every piece and never delivers (silent: it reads the
// requests; deaf: it reads nothing, so our writes to it block) is in
// everyone's list, first. The stalled connection must cost the others
// little: its requests time out and go to the seed, and nothing it does
// blocks the loop or the other connections.
func TestStalledPeerRuntime(t *testing.T) {
	const downloaders, size = 4, 4 * MiB
	run := func(t *testing.T, serve func(*fakeSession) error) (time.Duration, node.Stats, *fakePeer) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, size, 0, 15)
		fh := nw.Host(memnet.HostConfig{Window: 16 * KiB}) // the staller's
		// The seed is the one other peer that announces nothing left.
		seedJoined := make(chan struct{})
		var once sync.Once
		tr := tracker.New(tracker.Config{})
		trURL := serveHTTP(t, nw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tr.ServeHTTP(w, r)
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			if host != fh.IP().String() && r.URL.Query().Get("left") == "0" {
				once.Do(func() { close(seedJoined) })
			}
		})) + tracker.WellKnownPath
		m.Trackers = []string{trURL}
		var f *fakePeer
		if serve != nil {
			fln, err := fh.Listen(0)
			if err != nil {
				t.Fatal(err)
			}
			f = newFakePeer(t, m, fln, serve)
			f.announce(ctx, httpClient(fh.Dial), trURL)
		}
		// The seed's uplink takes a second or two for the file: long
		// enough for the staller's requests to time out.
		startNodeLink(t, ctx, nw, memnet.HostConfig{Up: 4 * MiB, Latency: 10 * time.Millisecond},
			node.Config{Manifest: m, Trackers: m.Trackers, SeedForever: true, Store: openStore(t, m, data, func(int) bool { return true })})
		// The downloaders start once the tracker knows the seed (the
		// staller announced itself above, directly).
		select {
		case <-seedJoined:
		case <-ctx.Done():
			t.Fatal("the seed never announced itself")
		}
		start := time.Now()
		nodes := make([]*testNode, downloaders)
		for i := range nodes {
			nodes[i] = startNode(t, ctx, nw, node.Config{Manifest: m, Trackers: m.Trackers, SeedForever: true,
				Store: openStore(t, m, data, func(int) bool { return false })})
		}
		var sum node.Stats
		var last time.Duration
		for _, tn := range nodes {
			tn.wait(t, ctx)
			last = max(last, tn.complete.Sub(start))
		}
		for _, tn := range nodes {
			if err := tn.stop(); err != nil {
				t.Errorf("downloader: %v", err)
			}
			st := tn.nd.Stats()
			sum.RequestTimeouts += st.RequestTimeouts
			sum.QueueDrops += st.QueueDrops
			sum.BytesFromPeers += st.BytesFromPeers
		}
		return last, sum, f
	}
	var base time.Duration
	t.Run("baseline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var st node.Stats
			base, st, _ = run(t, nil)
			t.Logf("without a staller: the last of %d downloaders done after %v (timeouts %d)", downloaders, base, st.RequestTimeouts)
		})
	})
	if base == 0 {
		t.Fatal("the baseline failed")
	}
	for _, tc := range []struct {
		name  string
		serve func(*fakeSession) error
	}{{"silent", silent}, {"deaf", deaf}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				took, st, f := run(t, tc.serve)
				t.Logf("with a %s staller: the last done after %v (baseline %v); it had %d connections and read %d requests; timeouts %d, queue drops %d; the staller read %d CANCELs",
					tc.name, took, base, f.conns.Load(), f.requests.Load(), st.RequestTimeouts, st.QueueDrops, f.cancels.Load())
				// Times are the bubble's: a loaded machine does not stretch
				// them, so the second allowed is the staller's cost alone,
				// and a loop or connection it blocked costs request
				// timeouts on every downloader, well past it.
				if bound := base + time.Second; took > bound {
					t.Errorf("with a %s staller the last downloader took %v, without %v: more than 1 s longer", tc.name, took, base)
				}
				// Its requests move elsewhere when they time out, or, when
				// the endgame asks the seed for the same pieces first, when
				// they are withdrawn; which comes first depends on the order
				// the goroutines run in. The silent staller reads the
				// CANCELs; the deaf one shows nothing, and the bound above
				// is what it is held to.
				if f.requests.Load() > 0 && st.RequestTimeouts == 0 && f.cancels.Load() == 0 {
					t.Errorf("no request timed out or was withdrawn: the staller's requests did not move elsewhere")
				}
			})
		})
	}
}

// TestChokeDropsQueuedUploads: when the node chokes a peer, the requests of
// that peer it has queued and not started are answered with REJECT(choked)
// rather than served (docs/protocol.md, section 7): the peer voids them on
// CHOKE and asks elsewhere, so serving them anyway sends every such piece
// twice. The peer here reads slowly, asks for 16 pieces, then announces it
// has everything the node has, so the next choking round chokes it.
func TestChokeDropsQueuedUploads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 40*16*KiB, 16*KiB, 16)
		const have = 20 // the node has pieces [0, have)
		tn := startNode(t, ctx, nw, node.Config{Manifest: m, SeedForever: true,
			Store: openStore(t, m, data, func(i int) bool { return i < have }),
			Swarm: swarm.Config{ChokeInterval: 200 * time.Millisecond}})
		addr := tn.addr(t)

		// The fake downloader: 64 KiB/s down, four pieces a second.
		h := nw.Host(memnet.HostConfig{Down: 64 * KiB})
		c, err := h.Dial(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		g, _ := wire.NewGeometry(m.Size, m.PieceSize)
		if _, err := wire.Exchange(ctx, c, wire.Handshake{Root: m.Root, Size: uint64(m.Size), PeerID: wire.NewPeerID()}); err != nil {
			t.Fatal(err)
		}
		r, w := wire.NewReader(c, g), wire.NewWriter(c, g)
		if err := w.WriteMessage(&wire.HaveSet{Set: pieceset.New(m.NumPieces())}); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		var (
			asked, dataBefore, dataAfter, rejected, busy int
			choked                                       bool
		)
		for {
			msg, err := r.Read()
			if err != nil {
				t.Fatalf("after %d DATA and %d REJECTs: %v", dataBefore+dataAfter, rejected, err)
			}
			switch msg := msg.(type) {
			case *wire.Unchoke:
				if asked > 0 {
					continue
				}
				for i := range 16 {
					w.WriteMessage(&wire.Request{Piece: uint32(i), Length: uint32(m.PieceLen(i))})
				}
				asked = 16
				w.Flush()
			case *wire.Data:
				if choked {
					dataAfter++
				} else {
					dataBefore++
				}
				if dataBefore == 1 && !choked {
					// Lose interest: we have all it has.
					for i := range have {
						w.WriteMessage(&wire.Have{Piece: uint32(i)})
					}
					w.Flush()
				}
			case *wire.Choke:
				choked = true
			case *wire.Reject:
				switch msg.Reason {
				case wire.RejectChoked:
					rejected++
				case wire.RejectBusy: // past the node's upload queue
					busy++
				}
			}
			if dataBefore+dataAfter+rejected+busy == asked && asked > 0 {
				break
			}
		}
		t.Logf("16 requests: %d rejected as busy, %d pieces before CHOKE, %d after, %d rejected as choked", busy, dataBefore, dataAfter, rejected)
		if !choked {
			t.Fatal("the node never choked the peer")
		}
		// 16 requests at once exceed the node's upload queue (8 pieces on all
		// connections, besides those the writer has taken: usually one, two
		// when the machine is loaded and the requests come in two batches):
		// the rest are refused as busy, so the requester asks elsewhere
		// instead of waiting behind them. The node holds fewer than
		// rampPieces here, so its bound is the ramp's (4 pieces, those being
		// sent or waiting for a turn counted) and more are refused than this
		// checks.
		if want := 16 - 8 - min(dataBefore+dataAfter, 2); busy < want {
			t.Errorf("%d of 16 requests refused as busy with %d served, want at least %d", busy, dataBefore+dataAfter, want)
		}
		// One piece may be under way when the CHOKE is decided.
		if dataAfter > 1 {
			t.Errorf("the node sent %d pieces after choking the peer, want at most 1 (the one under way)", dataAfter)
		}
	})
}

// TestFloodingPeer: a peer that floods the node with cheap frames keeps its
// event channel full. The node must keep running its loop: here it has no
// origin and no tracker, so the scheduler's origin fetches and tracker asks
// are answered by the runtime itself, and a loop that posts those answers to
// its own full channel would wait forever. A second peer must still be
// served its HAVESET promptly.
func TestFloodingPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 64*16*KiB, 16*KiB, 17)
		tn := startNode(t, ctx, nw, node.Config{Manifest: m, SeedForever: true,
			Store: openStore(t, m, data, func(i int) bool { return i < 32 }),
			// An origin slice every 10 ms: the scheduler asks for origin
			// fetches all through the flood.
			Swarm: swarm.Config{OriginSlice: 10 * time.Millisecond}})
		g, _ := wire.NewGeometry(m.Size, m.PieceSize)
		dial := func(h *memnet.Host) (*wire.Reader, *wire.Writer, net.Conn) {
			c, err := h.Dial(ctx, tn.addr(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if _, err := wire.Exchange(ctx, c, wire.Handshake{Root: m.Root, Size: uint64(m.Size), PeerID: wire.NewPeerID()}); err != nil {
				t.Fatal(err)
			}
			r, w := wire.NewReader(c, g), wire.NewWriter(c, g)
			w.WriteMessage(&wire.HaveSet{Set: pieceset.New(m.NumPieces())})
			w.Flush()
			return r, w, c
		}
		// The flooder: UNCHOKE after UNCHOKE, each an event for the loop. Its
		// small window makes what it has sent about what the node has read.
		_, fw, fc := dial(nw.Host(memnet.HostConfig{}))
		flooded := make(chan struct{})
		stop := make(chan struct{})
		var wg sync.WaitGroup
		defer wg.Wait()
		defer fc.Close()
		defer close(stop)
		wg.Go(func() { io.Copy(io.Discard, fc) }) // it reads what it is sent
		wg.Go(func() {
			for sent := 0; ; sent++ {
				if sent == 1_000_000 {
					close(flooded)
				}
				select {
				case <-stop:
					return
				default:
				}
				if err := fw.WriteMessage(&wire.Unchoke{}); err != nil {
					select {
					case <-stop:
					default:
						t.Errorf("the node closed the flooder's connection after %d frames: %v", sent, err)
					}
					return
				}
			}
		})
		select {
		case <-flooded:
		case <-ctx.Done():
			t.Fatal("the node does not read the flood")
		}
		start := time.Now()
		r, _, c := dial(nw.Host(memnet.HostConfig{}))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		msg, err := r.Read()
		if _, ok := msg.(*wire.HaveSet); err != nil || !ok {
			t.Fatalf("a second peer got %T, %v instead of the node's HAVESET: the loop is stuck", msg, err)
		}
		t.Logf("a second peer got the HAVESET %v after dialing, during the flood", time.Since(start))
	})
}

// TestOriginInSwarmAnswer: an origin fetcher's InSwarmError keeps the
// piece asked off the origin for the wait (a failed fetch would be retried
// a slice later), is counted, and the download still completes from the
// origin once the wait is over, the swarm having brought nothing. (The
// candidates' wait is swarm.TestOriginInSwarm's: here the fetches in
// flight when the answer came ask for them anyway.)
func TestOriginInSwarmAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 256*KiB, 0, 13)
		trURL := serveTracker(t, nw)
		m.Trackers = []string{trURL}
		st := openStore(t, m, data, func(int) bool { return false })
		const wait = 600 * time.Millisecond
		var (
			mu        sync.Mutex
			refused   = -1 // the piece the origin said was in the swarm
			refusedAt time.Time
			again     time.Duration // when it was asked again, after the answer
		)
		origin := func(ctx context.Context, f swarm.FetchOrigin) (int, time.Duration, error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case refused < 0 && len(f.Candidates) > 0:
				refused, refusedAt = f.Piece, time.Now()
				return -1, 0, &node.InSwarmError{Wait: wait}
			case f.Piece == refused && again == 0:
				again = time.Since(refusedAt)
			}
			off := m.PieceOffset(f.Piece)
			return f.Piece, 0, st.WritePiece(f.Piece, data[off:off+m.PieceLen(f.Piece)])
		}
		tn := startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, Origin: origin, Trackers: m.Trackers, SeedForever: true,
			Swarm: swarm.Config{SmallDeadline: -1}}) // the rules of any file, not a small object's
		tn.wait(t, ctx)
		mu.Lock()
		defer mu.Unlock()
		if refused < 0 {
			t.Fatal("no origin fetch offered candidates")
		}
		t.Logf("piece %d asked of the origin again %v after an in-swarm answer with a %v wait", refused, again, wait)
		if again < wait {
			t.Errorf("piece %d asked of the origin again %v after an in-swarm answer with a %v wait", refused, again, wait)
		}
		if s := tn.nd.Stats(); s.OriginInSwarm != 1 {
			t.Errorf("Stats.OriginInSwarm = %d, want 1", s.OriginInSwarm)
		}
	})
}

// TestUnchokeAfterHeldHaves: HAVEs to a neighbour we choke are held back,
// and go out before the UNCHOKE, so that a peer we unchoke knows all we
// have when it may ask. With one upload slot, two neighbours that lack all
// the node gets from the origin and have piece 15 for it: one is unchoked
// and hears the HAVEs at once, the other is choked. The first leaves as
// soon as it is unchoked and has heard a HAVE (at its first HAVE after the
// UNCHOKE, or at the UNCHOKE if HAVEs came before it); the node unchokes
// the second, which must by then have heard of every piece the first had.
func TestUnchokeAfterHeldHaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		nw := memnet.New()
		const pieces = 16
		data, m := testFile(t, pieces*16*KiB, 16*KiB, 16)
		trURL := serveTracker(t, nw)
		m.Trackers = []string{trURL}

		var (
			mu         sync.Mutex
			left       bool            // the unchoked neighbour has left
			atLeave    map[uint32]bool // what it had heard of then
			atUnchoke  map[uint32]bool // what the other had heard of at its UNCHOKE
			unchokedAt = make(chan struct{})
		)
		serve := func(s *fakeSession) error {
			set := pieceset.New(pieces)
			set.Add(pieces - 1)
			if err := s.w.WriteMessage(&wire.HaveSet{Set: set}); err != nil {
				return err
			}
			if err := s.w.Flush(); err != nil {
				return err
			}
			heard := map[uint32]bool{}
			unchoked, haves := false, 0
			for {
				msg, err := s.r.Read()
				if err != nil {
					return err
				}
				mu.Lock()
				switch msg := msg.(type) {
				case *wire.HaveSet:
					for i := range pieces {
						if msg.Set.Has(i) {
							heard[uint32(i)] = true
						}
					}
				case *wire.Have:
					heard[msg.Piece] = true
					haves++
				case *wire.Unchoke:
					unchoked = true
					if left && atUnchoke == nil {
						atUnchoke = maps.Clone(heard)
						close(unchokedAt)
					}
				}
				if unchoked && haves > 0 && !left {
					left, atLeave = true, maps.Clone(heard)
					mu.Unlock()
					return nil // closes the connection
				}
				mu.Unlock()
			}
		}
		for range 2 {
			h := nw.Host(memnet.HostConfig{})
			ln, err := h.Listen(0)
			if err != nil {
				t.Fatal(err)
			}
			f := newFakePeer(t, m, ln, serve)
			f.leecher = true
			f.announce(ctx, httpClient(h.Dial), trURL)
		}
		st := openStore(t, m, data, func(int) bool { return false })
		origin := func(ctx context.Context, f swarm.FetchOrigin) (int, time.Duration, error) {
			time.Sleep(30 * time.Millisecond) // the HAVEs come one by one
			off := m.PieceOffset(f.Piece)
			return f.Piece, 0, st.WritePiece(f.Piece, data[off:off+m.PieceLen(f.Piece)])
		}
		startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, Origin: origin, Trackers: m.Trackers, SeedForever: true,
			Swarm: swarm.Config{UploadSlots: 1, OptimisticSlots: -1}})

		select {
		case <-unchokedAt:
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the choked neighbour was never unchoked after the other left (left: %v)", left)
		}
		mu.Lock()
		defer mu.Unlock()
		for p := range atLeave {
			if !atUnchoke[p] {
				t.Errorf("UNCHOKE came before the HAVE of piece %d (heard then: %v; the other had heard: %v)", p, atUnchoke, atLeave)
			}
		}
	})
}
