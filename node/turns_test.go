package node_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
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
		asked := make(chan struct{})
		f := newFakePeer(t, m, fln, deafRequester(asked))
		f.leecher = true
		c, err := fh.Dial(ctx, seed.addr(t))
		if err != nil {
			t.Fatal(err)
		}
		f.wg.Go(func() {
			defer c.Close()
			f.session(c)
		})
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
