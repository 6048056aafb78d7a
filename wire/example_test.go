package wire_test

import (
	"context"
	"fmt"
	"net"

	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/wire"
)

// A connection's life in miniature: handshake, HAVESET, one request served.
// A real peer runs its reader and its writer in separate goroutines; here
// each side only writes what the other is already reading.
func Example() {
	g, _ := wire.NewGeometry(3*16384, 16384) // from the manifest: 3 pieces
	mine := wire.Handshake{Size: uint64(g.Size()), PeerID: wire.NewPeerID(), ListenPort: 6881}
	theirs := wire.Handshake{Caps: wire.CapSeed, Size: uint64(g.Size()), PeerID: wire.NewPeerID()}

	conn, seed := net.Pipe()
	defer conn.Close()
	go func() { // the seed, in full
		defer seed.Close()
		if _, err := wire.Exchange(context.Background(), seed, theirs); err != nil {
			return
		}
		w, r := wire.NewWriter(seed, g), wire.NewReader(seed, g)
		w.WriteMessage(&wire.HaveSet{Set: pieceset.Full(g.NumPieces())})
		w.WriteMessage(&wire.Unchoke{})
		w.Flush()
		for {
			m, err := r.Read()
			if err != nil {
				return
			}
			if req, ok := m.(*wire.Request); ok {
				w.WriteData(req.Piece, req.Offset, make([]byte, req.Length))
			}
		}
	}()

	h, err := wire.Exchange(context.Background(), conn, mine)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("peer is a seed:", h.Caps.Has(wire.CapSeed))
	r, w := wire.NewReader(conn, g), wire.NewWriter(conn, g)
	for {
		m, err := r.Read()
		if err != nil {
			fmt.Println(err)
			return
		}
		switch m := m.(type) {
		case *wire.HaveSet:
			fmt.Println("peer has", m.Set.Count(), "pieces")
			w.WriteMessage(&wire.HaveSet{Set: pieceset.New(g.NumPieces())})
		case *wire.Unchoke:
			w.WriteMessage(&wire.Request{Piece: 2, Length: uint32(g.PieceLen(2))})
		case *wire.Data:
			fmt.Println("got", len(m.Bytes), "bytes of piece", m.Piece)
			return
		}
		if err := w.Flush(); err != nil {
			fmt.Println(err)
			return
		}
	}
	// Output:
	// peer is a seed: true
	// peer has 3 pieces
	// got 16384 bytes of piece 2
}
