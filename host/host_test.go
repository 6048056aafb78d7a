package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/host"
	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/wire"
)

const KiB = 1 << 10

// memTransport is a host.Transport on a memnet host.
type memTransport struct {
	*memnet.Listener
	h *memnet.Host
}

func (memTransport) Scheme() string { return "" }
func (t memTransport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return t.h.Dial(ctx, addr)
}

// testFile is a file of random bytes and its manifest.
type testFile struct {
	data []byte
	m    *manifest.Manifest
}

func newFile(t *testing.T, size int, pieceSize int64, seed uint64) testFile {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	b, err := manifest.NewBuilder(int64(size), pieceSize)
	if err != nil {
		t.Fatal(err)
	}
	b.Write(data)
	m, err := b.Manifest(fmt.Sprintf("f%d", seed))
	if err != nil {
		t.Fatal(err)
	}
	return testFile{data, m}
}

// open returns a store of f in dir, complete or empty.
func (f testFile) open(t *testing.T, dir string, complete bool) *store.File {
	t.Helper()
	path := filepath.Join(dir, f.m.Name)
	if complete {
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := store.OpenComplete(path, f.m)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	st, err := store.Open(path, f.m, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startHost runs a host on its own memnet host, listening on port 7000.
func startHost(t *testing.T, ctx context.Context, nw *memnet.Network, cfg host.Config) *host.Host {
	t.Helper()
	mh := nw.Host(memnet.HostConfig{Latency: 5 * time.Millisecond})
	ln, err := mh.Listen(7000)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Transports = []host.Transport{memTransport{ln, mh}}
	return runHost(t, ctx, cfg)
}

// runHost runs a host of cfg until ctx ends; the test fails if Run returns
// an error.
func runHost(t *testing.T, ctx context.Context, cfg host.Config) *host.Host {
	t.Helper()
	cfg.Logger = testLogger(t)
	h, err := host.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("host: %v", err)
		}
	})
	return h
}

// run starts a node of cfg until ctx ends and returns a channel that gets
// Run's error.
func run(t *testing.T, ctx context.Context, cfg node.Config) (*node.Node, <-chan error) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	nd, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- nd.Run(ctx) }()
	return nd, done
}

// fetcher runs a downloading node of f on a memnet host of its own that
// knows only the host's address, and returns a channel closed when its
// store is complete.
func fetcher(t *testing.T, ctx context.Context, nw *memnet.Network, h *host.Host, f testFile, link memnet.HostConfig) (<-chan struct{}, *store.File) {
	t.Helper()
	mh := nw.Host(link)
	ln, err := mh.Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	st := f.open(t, t.TempDir(), false)
	done := make(chan struct{})
	nd, _ := run(t, ctx, node.Config{
		Manifest: f.m, Store: st, Listener: ln, Dial: mh.Dial, SeedForever: true,
		OnComplete: func() error { close(done); return nil },
	})
	nd.AddPeers(ctx, []string{h.Addr().String()})
	return done, st
}

func checkStore(t *testing.T, st *store.File, f testFile) {
	t.Helper()
	got := make([]byte, 0, len(f.data))
	buf := make([]byte, f.m.PieceSize)
	for i := range f.m.NumPieces() {
		b, err := st.ReadPiece(i, buf)
		if err != nil {
			t.Fatalf("piece %d: %v", i, err)
		}
		got = append(got, b...)
	}
	if !bytes.Equal(got, f.data) {
		t.Fatalf("%s: the bytes differ", f.m.Name)
	}
}

// TestTwoSwarmsOnePort: one host seeds two files on one address, and a
// peer of each swarm gets its file from it.
func TestTwoSwarmsOnePort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		nw := memnet.New()
		h := startHost(t, ctx, nw, host.Config{})
		files := []testFile{newFile(t, 200*KiB, 16*KiB, 1), newFile(t, 130*KiB, 32*KiB, 2)}
		var seeds []<-chan error
		for _, f := range files {
			_, done := run(t, ctx, node.Config{Manifest: f.m, Store: f.open(t, t.TempDir(), true), Host: h, SeedForever: true})
			seeds = append(seeds, done)
		}
		synctest.Wait() // both attached
		if got := h.Stats().Swarms; got != 2 {
			t.Fatalf("Swarms = %d, want 2", got)
		}
		for _, f := range files {
			done, st := fetcher(t, ctx, nw, h, f, memnet.HostConfig{Latency: 5 * time.Millisecond})
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatalf("%s: not complete after a minute", f.m.Name)
			}
			checkStore(t, st, f)
		}
		if s := h.Stats(); s.Routed < 2 || s.NoSwarm != 0 {
			t.Errorf("stats %+v: want 2 routed or more, none refused", s)
		}
		cancel()
		for _, done := range seeds {
			if err := <-done; err != nil {
				t.Errorf("seed: %v", err)
			}
		}
		if got := h.Stats().Swarms; got != 0 {
			t.Errorf("after the nodes ended Swarms = %d, want 0", got)
		}
	})
}

// TestNoSuchSwarm: a handshake for a root the host does not hold gets a
// handshake of no swarm and GOODBYE 11.
func TestNoSuchSwarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		nw := memnet.New()
		h := startHost(t, ctx, nw, host.Config{})
		f := newFile(t, 64*KiB, 16*KiB, 3)
		_, seedDone := run(t, ctx, node.Config{Manifest: f.m, Store: f.open(t, t.TempDir(), true), Host: h, SeedForever: true})
		synctest.Wait()

		other := newFile(t, 64*KiB, 16*KiB, 4)
		mine := wire.Handshake{Root: other.m.Root, Size: uint64(other.m.Size), PeerID: wire.NewPeerID()}
		b, _ := mine.MarshalBinary()
		theirs := declined(t, ctx, nw, h, b, wire.GoodbyeNoSwarm)
		if theirs.Root != ([32]byte{}) || theirs.Size != 0 {
			t.Errorf("answer names root %x size %d, want no swarm", theirs.Root[:8], theirs.Size)
		}
		if s := h.Stats(); s.NoSwarm != 1 || s.Routed != 0 {
			t.Errorf("stats %+v, want 1 no-swarm and none routed", s)
		}

		// The dialer's side of the same, through Exchange: a wrong swarm,
		// with the host's reason in the error.
		c2, err := nw.Host(memnet.HostConfig{}).Dial(ctx, h.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		if _, err := wire.Exchange(ctx, c2, mine); !errors.Is(err, wire.ErrWrongSwarm) || !strings.Contains(err.Error(), "no such swarm") {
			t.Errorf("Exchange: %v, want ErrWrongSwarm and the host's reason, no such swarm", err)
		}
		cancel()
		if err := <-seedDone; err != nil {
			t.Errorf("seed: %v", err)
		}
	})
}

// TestTwoNodesOneSwarm: a second node of a swarm the host holds already
// (the same file downloaded to a second place) runs too, and gets the file
// from the first through the host: its dial of the host's own address is
// routed to the first node, which has been in the swarm longer.
func TestTwoNodesOneSwarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		nw := memnet.New()
		h := startHost(t, ctx, nw, host.Config{})
		f := newFile(t, 200*KiB, 16*KiB, 8)
		_, seedDone := run(t, ctx, node.Config{Manifest: f.m, Store: f.open(t, t.TempDir(), true), Host: h, SeedForever: true})
		synctest.Wait()
		st := f.open(t, t.TempDir(), false)
		done := make(chan struct{})
		second, secondDone := run(t, ctx, node.Config{Manifest: f.m, Store: st, Host: h, SeedForever: true,
			OnComplete: func() error { close(done); return nil }})
		synctest.Wait()
		if got := h.Stats().Swarms; got != 1 {
			t.Errorf("Swarms = %d, want 1 (two nodes of one swarm)", got)
		}
		second.AddPeers(ctx, []string{h.Addr().String()})
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("the second node is not complete after a minute")
		}
		checkStore(t, st, f)
		if s := second.Stats(); s.BytesFromPeers < int64(len(f.data)) {
			t.Errorf("the second node got %d bytes from peers, want the whole file", s.BytesFromPeers)
		}
		cancel()
		for _, d := range []<-chan error{seedDone, secondDone} {
			if err := <-d; err != nil {
				t.Errorf("node: %v", err)
			}
		}
	})
}

// TestTwentySwarms: one host holds 20 swarms with 5 peers each on the
// in-memory network; every peer gets its file, every connection reaches
// its own swarm.
func TestTwentySwarms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		nw := memnet.New()
		h := startHost(t, ctx, nw, host.Config{})
		const swarms, peers = 20, 5
		type fetch struct {
			f    testFile
			done <-chan struct{}
			st   *store.File
		}
		var all []fetch
		for i := range swarms {
			f := newFile(t, 48*KiB+i*KiB, 16*KiB, uint64(100+i))
			run(t, ctx, node.Config{Manifest: f.m, Store: f.open(t, t.TempDir(), true), Host: h, SeedForever: true})
			synctest.Wait()
			for range peers {
				done, st := fetcher(t, ctx, nw, h, f, memnet.HostConfig{Latency: 2 * time.Millisecond})
				all = append(all, fetch{f, done, st})
			}
		}
		for _, x := range all {
			select {
			case <-x.done:
			case <-time.After(time.Minute):
				t.Fatalf("%s: a peer is not complete after a minute", x.f.m.Name)
			}
			checkStore(t, x.st, x.f)
		}
		s := h.Stats()
		if s.Swarms != swarms || s.Routed < swarms*peers || s.NoSwarm != 0 || s.Refused != 0 {
			t.Errorf("stats %+v: want %d swarms, at least %d routed, none refused", s, swarms, swarms*peers)
		}
	})
}

// TestSharedUploadBudget: two swarms of one host share its upload cap:
// their peers together get no more than the cap allows (its burst aside),
// and each swarm gets some of it meanwhile.
func TestSharedUploadBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		nw := memnet.New()
		const rate = 256 * KiB
		h := startHost(t, ctx, nw, host.Config{UploadRate: rate})
		files := []testFile{newFile(t, 1024*KiB, 64*KiB, 5), newFile(t, 1024*KiB, 64*KiB, 6)}
		for _, f := range files {
			run(t, ctx, node.Config{Manifest: f.m, Store: f.open(t, t.TempDir(), true), Host: h, SeedForever: true})
		}
		synctest.Wait()
		start := time.Now()
		var wg sync.WaitGroup
		var took [2]time.Duration
		for i, f := range files {
			done, st := fetcher(t, ctx, nw, h, f, memnet.HostConfig{Latency: time.Millisecond})
			wg.Go(func() {
				<-done
				took[i] = time.Since(start)
				checkStore(t, st, f)
			})
		}
		wg.Wait()
		total := len(files[0].data) + len(files[1].data)
		// The bucket holds a tenth of a second's worth at the start.
		least := time.Duration(float64(total-rate/10) / rate * float64(time.Second))
		last := max(took[0], took[1])
		t.Logf("%d bytes at most %d B/s: took %v and %v (at least %v)", total, rate, took[0], took[1], least)
		if last < least {
			t.Errorf("both files in %v: faster than the shared cap allows (%v)", last, least)
		}
		// Shared, not one after the other: the first done is past half
		// of the time both needed.
		if first := min(took[0], took[1]); first < last/2 {
			t.Errorf("one swarm done at %v, the other at %v: not sharing the budget", first, last)
		}
	})
}

// TestPendingPerIP: silent connections from one address hold no more than
// MaxPendingPerIP of the handshake slots; past it that address's new
// connections are closed at once, while a peer from another address is
// still routed, however many the first one opens.
func TestPendingPerIP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		nw := memnet.New()
		h := startHost(t, ctx, nw, host.Config{})
		f := newFile(t, 64*KiB, 16*KiB, 9)
		_, seedDone := run(t, ctx, node.Config{Manifest: f.m, Store: f.open(t, t.TempDir(), true), Host: h, SeedForever: true})
		synctest.Wait()

		flood := nw.Host(memnet.HostConfig{})
		dial := func() net.Conn {
			t.Helper()
			c, err := flood.Dial(ctx, h.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		for range host.DefaultMaxPendingPerIP {
			dial()
		}
		synctest.Wait() // all accepted, their handshakes awaited
		start := time.Now()
		if n, err := dial().Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("past the cap: read %d bytes, %v; want EOF", n, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("past the cap the connection was closed after %v, want at once", took)
		}
		if got := h.Stats().Dropped; got != 1 {
			t.Errorf("Dropped = %d, want 1", got)
		}
		// Enough to fill every slot of the host were they all held.
		for range host.DefaultMaxPending {
			dial()
		}
		synctest.Wait()

		c, err := nw.Host(memnet.HostConfig{}).Dial(ctx, h.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		mine := wire.Handshake{Root: f.m.Root, Size: uint64(f.m.Size), PeerID: wire.NewPeerID()}
		if _, err := wire.Exchange(ctx, c, mine); err != nil {
			t.Fatalf("a peer from another address: %v", err)
		}
		if s := h.Stats(); s.Routed != 1 || s.Dropped != 1+host.DefaultMaxPending {
			t.Errorf("stats %+v, want 1 routed and %d dropped", s, 1+host.DefaultMaxPending)
		}
		cancel()
		if err := <-seedDone; err != nil {
			t.Errorf("seed: %v", err)
		}
	})
}

// flakyTransport is a memTransport whose Accept fails on the calls that
// fail names (counting from 0), as a listener out of file descriptors
// does, and records when each call came.
type flakyTransport struct {
	memTransport
	fail map[int]bool

	mu    sync.Mutex // guards the following
	calls []time.Time
}

var errTooManyFiles = &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}

func (t *flakyTransport) Accept() (net.Conn, error) {
	t.mu.Lock()
	i := len(t.calls)
	t.calls = append(t.calls, time.Now())
	t.mu.Unlock()
	if t.fail[i] {
		return nil, errTooManyFiles
	}
	return t.memTransport.Accept()
}

// TestAcceptErrorRetried: an Accept that fails (EMFILE) does not stop the
// host: it accepts again after 5 ms, twice as long after each failure in a
// row and 5 ms again after a success, and routes what comes next.
func TestAcceptErrorRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		nw := memnet.New()
		mh := nw.Host(memnet.HostConfig{})
		ln, err := mh.Listen(7000)
		if err != nil {
			t.Fatal(err)
		}
		// Three failures, a success, one failure, then successes.
		tr := &flakyTransport{memTransport: memTransport{ln, mh}, fail: map[int]bool{0: true, 1: true, 2: true, 4: true}}
		h := runHost(t, ctx, host.Config{Transports: []host.Transport{tr}})
		f := newFile(t, 64*KiB, 16*KiB, 10)
		_, seedDone := run(t, ctx, node.Config{Manifest: f.m, Store: f.open(t, t.TempDir(), true), Host: h, SeedForever: true})
		synctest.Wait()

		peer := nw.Host(memnet.HostConfig{})
		for i := range 2 {
			c, err := peer.Dial(ctx, h.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			mine := wire.Handshake{Root: f.m.Root, Size: uint64(f.m.Size), PeerID: wire.NewPeerID()}
			if _, err := wire.Exchange(ctx, c, mine); err != nil {
				t.Fatalf("peer %d: %v", i, err)
			}
			synctest.Wait()
		}
		if got := h.Stats().Routed; got != 2 {
			t.Errorf("Routed = %d, want 2", got)
		}
		tr.mu.Lock()
		calls := slices.Clone(tr.calls)
		tr.mu.Unlock()
		if len(calls) < 7 {
			t.Fatalf("%d calls of Accept, want 7 or more", len(calls))
		}
		// The waits before the calls that follow a failure: 1, 2, 3 and 5.
		want := map[int]time.Duration{1: 5 * time.Millisecond, 2: 10 * time.Millisecond, 3: 20 * time.Millisecond, 5: 5 * time.Millisecond}
		for i, d := range want {
			if got := calls[i].Sub(calls[i-1]); got != d {
				t.Errorf("Accept call %d came %v after the failure before it, want %v", i, got, d)
			}
		}
		cancel()
		if err := <-seedDone; err != nil {
			t.Errorf("seed: %v", err)
		}
	})
}

// TestNodeNotRunning: a connection for a swarm whose only attached node is
// not running (it is stopping) gets a handshake of no swarm and GOODBYE 7,
// from the host; one attached after it that runs gets the next.
func TestNodeNotRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		nw := memnet.New()
		h := startHost(t, ctx, nw, host.Config{})
		f := newFile(t, 64*KiB, 16*KiB, 11)
		idle, err := node.New(node.Config{Manifest: f.m, Store: f.open(t, t.TempDir(), true), Host: h, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		// As a node's Run does, but not running.
		detach, err := h.Attach(idle)
		if err != nil {
			t.Fatal(err)
		}
		defer detach()
		geom, err := wire.NewGeometry(f.m.Size, f.m.PieceSize)
		if err != nil {
			t.Fatal(err)
		}
		// exchange dials the host for f's swarm and returns the first
		// frame after the handshakes.
		exchange := func() (wire.Message, error) {
			c, err := nw.Host(memnet.HostConfig{}).Dial(ctx, h.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			mine := wire.Handshake{Root: f.m.Root, Size: uint64(f.m.Size), PeerID: wire.NewPeerID()}
			if _, err := wire.Exchange(ctx, c, mine); err != nil {
				return nil, err
			}
			return wire.NewReader(c, geom).Read()
		}
		if _, err := exchange(); !errors.Is(err, wire.ErrWrongSwarm) || !strings.Contains(err.Error(), "not running") {
			t.Errorf("Exchange: %v, want ErrWrongSwarm and GOODBYE shutdown, not running", err)
		}
		if s := h.Stats(); s.NoSwarm != 1 || s.Routed != 0 {
			t.Errorf("stats %+v, want 1 no-swarm and none routed", s)
		}

		_, done := run(t, ctx, node.Config{Manifest: f.m, Store: f.open(t, t.TempDir(), true), Host: h, SeedForever: true})
		synctest.Wait()
		if m, err := exchange(); err != nil {
			t.Errorf("with a running node too: %v", err)
		} else if _, ok := m.(*wire.HaveSet); !ok {
			t.Errorf("with a running node too: got %#v, want HAVESET", m)
		}
		if s := h.Stats(); s.Routed != 1 {
			t.Errorf("stats %+v, want 1 routed", s)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node: %v", err)
		}
	})
}

// TestVersionDeclined: a handshake of a version the host does not speak
// gets GOODBYE 2 (version) under a peer ID of its own, not the dialer's.
func TestVersionDeclined(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		nw := memnet.New()
		h := startHost(t, ctx, nw, host.Config{})
		mine := wire.Handshake{PeerID: wire.NewPeerID()}
		b, _ := mine.MarshalBinary()
		b[4] = 0 // the version
		if theirs := declined(t, ctx, nw, h, b, wire.GoodbyeVersion); theirs.PeerID == mine.PeerID {
			t.Errorf("the host answered under the dialer's own peer ID %v", mine.PeerID)
		}
		if s := h.Stats(); s.Refused != 1 {
			t.Errorf("stats %+v, want 1 refused", s)
		}
	})
}

// declined dials h from a host of its own, sends the raw handshake hs, and
// returns the host's handshake, checking that a GOODBYE of reason comes
// next.
func declined(t *testing.T, ctx context.Context, nw *memnet.Network, h *host.Host, hs []byte, reason wire.GoodbyeReason) wire.Handshake {
	t.Helper()
	c, err := nw.Host(memnet.HostConfig{}).Dial(ctx, h.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(hs); err != nil {
		t.Fatal(err)
	}
	theirs, err := wire.ReadHandshake(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.NewReader(c, wire.Geometry{}).Read()
	if err != nil {
		t.Fatal(err)
	}
	if bye, ok := m.(*wire.Goodbye); !ok || bye.Reason != reason {
		t.Fatalf("got %#v, want GOODBYE %d", m, reason)
	}
	return theirs
}
