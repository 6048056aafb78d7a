package node_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/wire"
)

// TestStrictTFT: a downloading node in strict tit-for-tat mode says so in
// its handshake and serves a neighbour that sends it nothing no more than
// the tab (2 pieces), refusing the rest; without the mode it serves what
// its upload queue's bound lets it.
func TestStrictTFT(t *testing.T) {
	const has = 8 // pieces the node holds, of 16
	for _, strict := range []bool{true, false} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				nw := memnet.New()
				data, m := testFile(t, 256*KiB, 16*KiB, 23)
				type answers struct {
					served, refused int
					busy            int // of the refused, REJECT(busy)
					err             error
				}
				got := make(chan answers, 1)
				// The leecher asks for every piece the node has, sends none, and
				// counts the answers.
				leech := func(s *fakeSession) error {
					var a answers
					defer func() {
						select {
						case got <- a:
						default:
						}
					}()
					if a.err = s.startEmpty(); a.err != nil {
						return a.err
					}
					if _, a.err = await[*wire.Unchoke](s); a.err != nil {
						return a.err
					}
					var reqs []wire.Message
					for i := range has {
						reqs = append(reqs, &wire.Request{Piece: uint32(i), Length: uint32(m.PieceLen(i))})
					}
					if a.err = writeAll(s.w, reqs...); a.err != nil {
						return a.err
					}
					s.c.SetReadDeadline(time.Now().Add(10 * time.Second))
					bytes := map[uint32]int{}
					for a.served+a.refused < has {
						msg, err := s.r.Read()
						if err != nil {
							a.err = err
							return err
						}
						switch msg := msg.(type) {
						case *wire.Data:
							if bytes[msg.Piece] += len(msg.Bytes); int64(bytes[msg.Piece]) == m.PieceLen(int(msg.Piece)) {
								a.served++
							}
						case *wire.Reject:
							a.refused++
							if msg.Reason == wire.RejectBusy {
								a.busy++
							}
						}
					}
					select {
					case got <- a:
					default:
					}
					<-s.f.quit
					return errStop
				}
				f := startFake(t, ctx, nw, m, leech, func(f *fakePeer) { f.leecher = true })
				st := openStore(t, m, data, func(i int) bool { return i < has })
				startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, Trackers: m.Trackers, SeedForever: true, Swarm: swarm.Config{StrictTFT: strict}})
				var a answers
				select {
				case a = <-got:
				case <-ctx.Done():
					t.Fatal("the node never unchoked the leecher")
				}
				if a.err != nil {
					t.Fatalf("after %d pieces and %d refusals: %v", a.served, a.refused, a.err)
				}
				if caps := wire.Caps(f.caps.Load()); caps.Has(wire.CapStrictTFT) != strict {
					t.Errorf("handshake caps %b: STRICT_TFT %v, want %v", caps, caps.Has(wire.CapStrictTFT), strict)
				}
				t.Logf("served %d pieces, refused %d (%d busy)", a.served, a.refused, a.busy)
				switch {
				case strict && (a.served != 2 || a.busy != 0):
					// The tab is 2 pieces; the rest are refused for it, not
					// for a full upload queue.
					t.Errorf("served %d pieces and refused %d (%d busy), want 2 served and 6 refused for the tab", a.served, a.refused, a.busy)
				case !strict && (a.served <= 2 || a.busy != a.refused):
					// Without the mode only the upload queue's bound refuses.
					t.Errorf("served %d pieces and refused %d (%d busy), want more than 2 served and only busy refusals", a.served, a.refused, a.busy)
				}
			})
		})
	}
}
