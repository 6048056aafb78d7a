package node_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/wire"
)

// deafRequester has no piece; once unchoked it asks for the first four
// pieces, closes asked, and then reads nothing, so the other side's writes
// to it block once the connection's window is full.
func deafRequester(asked chan<- struct{}) func(s *fakeSession) error {
	return func(s *fakeSession) error {
		if err := s.startEmpty(); err != nil {
			return err
		}
		if _, err := await[*wire.Unchoke](s); err != nil {
			return err
		}
		for i := range min(4, s.f.m.NumPieces()) {
			if err := s.w.WriteMessage(&wire.Request{Piece: uint32(i), Length: uint32(s.f.m.PieceLen(i))}); err != nil {
				return err
			}
			s.f.requests.Add(1)
		}
		if err := s.w.Flush(); err != nil {
			return err
		}
		close(asked)
		<-s.f.quit
		return errStop
	}
}

// dialDeaf connects a deafRequester from fh (listening on fln) to the
// seed at addr; asked is closed once it has sent its requests.
func dialDeaf(t *testing.T, ctx context.Context, fh *memnet.Host, fln net.Listener, m *manifest.Manifest, addr string) (*fakePeer, <-chan struct{}) {
	t.Helper()
	asked := make(chan struct{})
	f := newFakePeer(t, m, fln, deafRequester(asked))
	f.leecher = true
	c, err := fh.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	f.wg.Go(func() {
		defer c.Close()
		f.session(c)
	})
	return f, asked
}

// TestDeafRequesterHoldsNoTurn: a seed with a single upload turn serves a
// peer that asks for pieces and then reads nothing, so the seed's write of
// the first piece to it blocks for good. The turn must come back (after
// the stall bound), and a downloader that comes next gets the whole file
// from the seed, which is its only source.
func TestDeafRequesterHoldsNoTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 1*MiB, 64*KiB, 21)
		trURL := serveTracker(t, nw)
		m.Trackers = []string{trURL}
		fh := nw.Host(memnet.HostConfig{Window: 16 * KiB})
		fln, err := fh.Listen(0)
		if err != nil {
			t.Fatal(err)
		}
		seed := startNode(t, ctx, nw, node.Config{Manifest: m, Trackers: m.Trackers, SeedForever: true, UploadTurns: 1,
			Store: openStore(t, m, data, func(int) bool { return true })})
		f, asked := dialDeaf(t, ctx, fh, fln, m, seed.addr(t))
		select {
		case <-asked:
		case <-ctx.Done():
			t.Fatalf("the deaf peer sent %d requests (%d connections): the seed never unchoked it", f.requests.Load(), f.conns.Load())
		}
		start := time.Now()
		dl := startNode(t, ctx, nw, node.Config{Manifest: m, Trackers: m.Trackers, SeedForever: true,
			Store: openStore(t, m, data, func(int) bool { return false })})
		dl.wait(t, ctx)
		t.Logf("the downloader had the file from the seed after %v", time.Since(start))
		if st := dl.nd.Stats(); st.BytesFromPeers != int64(len(data)) {
			t.Errorf("the downloader got %d bytes from peers, want all %d", st.BytesFromPeers, len(data))
		}
	})
}

// ownConn is a connection whose uploads a budget of the application's
// own shapes (node.OwnBudget).
type ownConn struct{ net.Conn }

func (ownConn) OwnBudget() bool { return true }

// TestOwnBudgetTakesNoTurn: with the seed's single upload turn held by a
// requester that reads nothing, a downloader whose connection has a
// budget of its own (as a push's across a rack's uplink) gets its pieces
// at once, where one without waits for the stalled turn to come back
// (turnStall, 500 ms).
func TestOwnBudgetTakesNoTurn(t *testing.T) {
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprintf("own=%v", own), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				nw := memnet.New()
				data, m := testFile(t, 256*KiB, 64*KiB, 22)
				trURL := serveTracker(t, nw)
				m.Trackers = []string{trURL}
				fh := nw.Host(memnet.HostConfig{Window: 16 * KiB})
				fln, err := fh.Listen(0)
				if err != nil {
					t.Fatal(err)
				}
				deaf, _, _ := net.SplitHostPort(fln.Addr().String())
				var hook node.PeerConnFunc
				if own {
					hook = func(c net.Conn, addr string, _ bool) net.Conn {
						if strings.HasPrefix(addr, deaf+":") {
							return c // the deaf peer takes the turn
						}
						return ownConn{c}
					}
				}
				seed := startNode(t, ctx, nw, node.Config{Manifest: m, Trackers: m.Trackers, SeedForever: true, UploadTurns: 1,
					PeerConn: hook, Store: openStore(t, m, data, func(int) bool { return true })})
				_, asked := dialDeaf(t, ctx, fh, fln, m, seed.addr(t))
				<-asked
				time.Sleep(10 * time.Millisecond) // the seed takes its turn for the deaf peer
				start := time.Now()
				dl := startNode(t, ctx, nw, node.Config{Manifest: m, Trackers: m.Trackers, SeedForever: true,
					Store: openStore(t, m, data, func(int) bool { return false })})
				dl.wait(t, ctx)
				took := time.Since(start)
				t.Logf("own=%v: the downloader had the file after %v", own, took)
				if own != (took < 500*time.Millisecond) {
					t.Errorf("own budget %v: the file took %v, want %s the stalled turn's 500 ms", own, took, map[bool]string{true: "less than", false: "at least"}[own])
				}
			})
		})
	}
}

// TestUnchokeCounts: the --json summary's unchoke means. A seed on a 256
// KiB/s uplink serves a downloader a 1 MiB file: the seed unchokes it once
// they are connected, so the downloader's unchoked_us_mean is over 0 and
// at most 1 (the ticks before the connection count 0); the downloader has
// nothing the seed lacks and unchokes nobody; the seed, complete from the
// start, samples nothing.
func TestUnchokeCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 1*MiB, 64*KiB, 22)
		m.Trackers = []string{serveTracker(t, nw)}
		seed := startNodeLink(t, ctx, nw, memnet.HostConfig{Up: 256 * KiB, Latency: 10 * time.Millisecond},
			node.Config{Manifest: m, Trackers: m.Trackers, SeedForever: true,
				Store: openStore(t, m, data, func(int) bool { return true })})
		dl := startNode(t, ctx, nw, node.Config{Manifest: m, Trackers: m.Trackers, SeedForever: true,
			Store: openStore(t, m, data, func(int) bool { return false })})
		start := time.Now()
		dl.wait(t, ctx)
		st, ss := dl.nd.Stats(), seed.nd.Stats()
		t.Logf("done after %v; downloader: unchoked %.2f, unchoked us %.2f; seed: %.2f, %.2f", dl.complete.Sub(start), st.UnchokedMean, st.UnchokedUsMean, ss.UnchokedMean, ss.UnchokedUsMean)
		if st.UnchokedUsMean <= 0 || st.UnchokedUsMean > 1 {
			t.Errorf("downloader: unchoked_us_mean %.2f, want over 0 and at most 1 (one neighbour, which unchoked it)", st.UnchokedUsMean)
		}
		if st.UnchokedMean != 0 {
			t.Errorf("downloader: unchoked_mean %.2f, want 0 (the seed wants nothing from it)", st.UnchokedMean)
		}
		if ss.UnchokedMean != 0 || ss.UnchokedUsMean != 0 {
			t.Errorf("seed: %.2f, %.2f, want 0, 0 (complete from the start, it samples nothing)", ss.UnchokedMean, ss.UnchokedUsMean)
		}
	})
}
