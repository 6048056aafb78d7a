package node_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/wire"
)

// TestRateTold: a seed on a 256 KiB/s uplink, asked for pieces without a
// pause, tells the peer asking its upload capacity (RATE), and tells it
// right: within a third of its uplink. Peers measure a neighbour's upload
// to them against it in reciprocation (swarm's capacityOf).
func TestRateTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const up = 256 * KiB
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		nw := memnet.New()
		data, m := testFile(t, 4*MiB, 64*KiB, 17)
		seed := openStore(t, m, data, func(int) bool { return true })
		tn := startNodeLink(t, ctx, nw, memnet.HostConfig{Up: up, Latency: 5 * time.Millisecond},
			node.Config{Manifest: m, Store: seed, SeedForever: true})

		c, err := nw.Host(memnet.HostConfig{Latency: 5 * time.Millisecond}).Dial(ctx, tn.addr(t))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := wire.Exchange(ctx, c, wire.Handshake{Root: m.Root, Size: uint64(m.Size), PeerID: wire.NewPeerID()}); err != nil {
			t.Fatal(err)
		}
		geom, err := wire.NewGeometry(m.Size, m.PieceSize)
		if err != nil {
			t.Fatal(err)
		}
		w, r := wire.NewWriter(c, geom), wire.NewReader(c, geom)
		if err := writeAll(w, &wire.HaveSet{Set: pieceset.New(m.NumPieces())}); err != nil {
			t.Fatal(err)
		}
		// Ask for every piece, 4 at a time, until a RATE has come and
		// 8 s have passed (the seed measures a second at a time).
		start := time.Now()
		next, inFlight := 0, 0
		var rates []uint32
		ask := func() error {
			for inFlight < 4 && next < m.NumPieces() {
				if err := writeAll(w, &wire.Request{Piece: uint32(next), Length: uint32(m.PieceLen(next))}); err != nil {
					return err
				}
				next++
				inFlight++
			}
			return nil
		}
		for time.Since(start) < 8*time.Second || len(rates) == 0 {
			if time.Since(start) > 30*time.Second {
				t.Fatal("no RATE from the seed in 30 s")
			}
			msg, err := r.Read()
			if err != nil {
				t.Fatalf("reading from the seed: %v", err)
			}
			switch msg := msg.(type) {
			case *wire.Unchoke:
				err = ask()
			case *wire.Data:
				if int64(msg.Offset)+int64(len(msg.Bytes)) == m.PieceLen(int(msg.Piece)) {
					inFlight--
					err = ask()
				}
			case *wire.Rate:
				rates = append(rates, msg.Up)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		last := rates[len(rates)-1]
		t.Logf("RATEs told: %v (uplink %d B/s)", rates, up)
		if last < up*2/3 || last > up*4/3 {
			t.Errorf("the seed told a capacity of %d B/s, its uplink is %d B/s: want within a third", last, up)
		}
	})
}
