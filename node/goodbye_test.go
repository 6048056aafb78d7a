package node_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/wire"
)

// TestDuplicateGoodbye: a second connection from a peer already connected,
// which the node drops (both were dialed by that peer), gets GOODBYE
// reason 4 (duplicate) before it closes (docs/protocol.md, section 3).
func TestDuplicateGoodbye(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, h, m, tn := oneNode(t, 24, true)
		mine := wire.Handshake{Root: m.Root, Size: uint64(m.Size), PeerID: wire.NewPeerID()}
		dial := func() (*wire.Reader, *wire.Writer) { return dialAs(t, ctx, h, tn, m, mine) }
		first, w := dial()
		if _, err := first.Read(); err != nil { // its HAVESET: registered
			t.Fatal(err)
		}
		second, _ := dial()
		bye, err := readUntil[*wire.Goodbye](second)
		if err != nil {
			t.Fatalf("the duplicate connection ended without GOODBYE: %v", err)
		}
		if bye.Reason != wire.GoodbyeDuplicate {
			t.Errorf("GOODBYE reason %d %q, want %d (duplicate)", bye.Reason, bye.Text, wire.GoodbyeDuplicate)
		}
		// The first connection stays: told that we lack every piece, the node
		// unchokes us on it.
		if err := writeAll(w, &wire.HaveSet{Set: pieceset.New(m.NumPieces())}); err != nil {
			t.Fatal(err)
		}
		if _, err := readUntil[*wire.Unchoke](first); err != nil {
			t.Fatalf("the first connection: %v", err)
		}
	})
}

// TestBannedIDTurnedAway: a neighbour that cannot be dialed (listen port 0,
// so the scheduler has no address to ban) and sends a corrupt piece is
// dropped with GOODBYE reason 8, and turned away the same way when it
// comes back with the same peer ID.
func TestBannedIDTurnedAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, h, m, tn := oneNode(t, 25, false)
		mine := wire.Handshake{Caps: wire.CapSeed, Root: m.Root, Size: uint64(m.Size), PeerID: wire.NewPeerID()}
		dial := func() (*wire.Reader, *wire.Writer) { return dialAs(t, ctx, h, tn, m, mine) }
		// goodbye reads frames until GOODBYE, answering the first REQUEST with
		// bytes that are not the piece (the node may close before it reads
		// more); first: the GOODBYE must come first.
		goodbye := func(r *wire.Reader, w *wire.Writer, first bool) *wire.Goodbye {
			t.Helper()
			answered := false
			for {
				msg, err := r.Read()
				if err != nil {
					t.Fatalf("the connection ended without GOODBYE: %v", err)
				}
				switch msg := msg.(type) {
				case *wire.Goodbye:
					return msg
				case *wire.Request:
					if answered {
						continue
					}
					answered = true
					if err := w.WriteData(msg.Piece, 0, make([]byte, msg.Length)); err != nil {
						t.Fatal(err)
					}
					if err := w.Flush(); err != nil {
						t.Fatal(err)
					}
				}
				if first {
					t.Fatalf("got %T before GOODBYE", msg)
				}
			}
		}
		r, w := dial()
		if err := writeAll(w, &wire.HaveSet{Set: pieceset.Full(m.NumPieces())}, &wire.Unchoke{}); err != nil {
			t.Fatal(err)
		}
		if bye := goodbye(r, w, false); bye.Reason != wire.GoodbyeCorrupt {
			t.Errorf("after a corrupt piece: GOODBYE reason %d %q, want %d (corrupt data)", bye.Reason, bye.Text, wire.GoodbyeCorrupt)
		}
		r, w = dial()
		if bye := goodbye(r, w, true); bye.Reason != wire.GoodbyeCorrupt {
			t.Errorf("back with the same ID: GOODBYE reason %d %q, want %d", bye.Reason, bye.Text, wire.GoodbyeCorrupt)
		}
		if got := tn.nd.Stats().PeersBanned; got != 1 {
			t.Errorf("PeersBanned = %d, want 1", got)
		}
	})
}

// oneNode starts a node of a 4-piece file (random bytes from seed), with
// every piece if complete, else none, on an in-memory network, and returns
// a host to dial it from. ctx ends after 20 s or with the test.
func oneNode(t *testing.T, seed uint64, complete bool) (context.Context, *memnet.Host, *manifest.Manifest, *testNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	nw := memnet.New()
	data, m := testFile(t, 64*KiB, 16*KiB, seed)
	st := openStore(t, m, data, func(int) bool { return complete })
	tn := startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, SeedForever: true})
	return ctx, nw.Host(memnet.HostConfig{}), m, tn
}

// dialAs connects to tn from host h as a peer with handshake hs, with a
// 10 s deadline on the connection.
func dialAs(t *testing.T, ctx context.Context, h *memnet.Host, tn *testNode, m *manifest.Manifest, hs wire.Handshake) (*wire.Reader, *wire.Writer) {
	_, r, w := dialConn(t, ctx, h, tn, m, hs)
	return r, w
}

// dialConn is dialAs that also returns the connection.
func dialConn(t *testing.T, ctx context.Context, h *memnet.Host, tn *testNode, m *manifest.Manifest, hs wire.Handshake) (net.Conn, *wire.Reader, *wire.Writer) {
	t.Helper()
	geom, err := wire.NewGeometry(m.Size, m.PieceSize)
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.Dial(ctx, tn.addr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := wire.Exchange(ctx, c, hs); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, wire.NewReader(c, geom), wire.NewWriter(c, geom)
}

// TestMalformedFrameEndsOneConnection: a frame that breaks the protocol (a
// HAVE of a piece the file does not have) ends that connection, and only
// it: another neighbour connected meanwhile is still served.
func TestMalformedFrameEndsOneConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, h, m, tn := oneNode(t, 26, true)
		hs := func() wire.Handshake {
			return wire.Handshake{Root: m.Root, Size: uint64(m.Size), PeerID: wire.NewPeerID()}
		}
		good, gw := dialAs(t, ctx, h, tn, m, hs())
		if _, err := readUntil[*wire.HaveSet](good); err != nil {
			t.Fatal(err)
		}
		c, bad, _ := dialConn(t, ctx, h, tn, m, hs())
		if _, err := readUntil[*wire.HaveSet](bad); err != nil {
			t.Fatal(err)
		}
		// A HAVE (type 2) of piece 0xffffffff, written raw: our own writer
		// refuses to encode it.
		if _, err := c.Write([]byte{0, 0, 0, 5, 2, 0xff, 0xff, 0xff, 0xff}); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		for {
			if _, err := bad.Read(); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatal("the connection that sent a malformed frame is still open")
				}
				break
			}
		}

		// The other neighbour: told that it lacks every piece, it is unchoked
		// and gets the piece it asks for.
		if err := writeAll(gw, &wire.HaveSet{Set: pieceset.New(m.NumPieces())}); err != nil {
			t.Fatal(err)
		}
		if _, err := readUntil[*wire.Unchoke](good); err != nil {
			t.Fatal(err)
		}
		if err := writeAll(gw, &wire.Request{Piece: 1, Length: uint32(m.PieceLen(1))}); err != nil {
			t.Fatal(err)
		}
		got := 0
		for got < int(m.PieceLen(1)) {
			msg, err := good.Read()
			if err != nil {
				t.Fatalf("the other neighbour, after %d bytes of piece 1: %v", got, err)
			}
			if d, ok := msg.(*wire.Data); ok && d.Piece == 1 {
				got += len(d.Bytes)
			}
		}
	})
}
