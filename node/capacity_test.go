package node

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/wire"
)

// unackedConn is a connection whose unacknowledged bytes the test sets.
type unackedConn struct {
	net.Conn
	unacked int
}

func (c *unackedConn) MinRTT() time.Duration { return 0 }
func (c *unackedConn) Unacked() int          { return c.unacked }
func (c *unackedConn) Path() string          { return PathDirect }

// TestCapacityCountsAcknowledged: the upload capacity is what peers
// acknowledged in a second. A connection that closes with bytes still
// unacknowledged does not add them to the second it closed in (before, the
// reading was what was written less what the open connections held, and
// a closing connection's backlog read as delivered), so neither the
// estimate nor the peak that sets how long a turn is held (slowAfter) goes
// past the link.
func TestCapacityCountsAcknowledged(t *testing.T) {
	n := &Node{peers: map[swarm.PeerID]*peerConn{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	conns := map[swarm.PeerID]*unackedConn{}
	for id := range swarm.PeerID(4) {
		c := &unackedConn{}
		conns[id] = c
		n.peers[id] = &peerConn{n: n, c: c, ctrl: make(chan wire.Message, 16), done: make(chan struct{})}
	}
	const link = 100_000 // bytes a second the peers acknowledge
	now := time.Unix(0, 0)
	second := func(write map[swarm.PeerID]int) {
		for id, k := range write {
			p := n.peers[id]
			p.sent.Add(int64(k))
			n.bytesToPeers.Add(int64(k))
			conns[id].unacked += k
		}
		// link bytes acknowledged, from every peer alike.
		left := link
		for _, c := range conns {
			a := min(c.unacked, link/len(conns), left)
			c.unacked -= a
			left -= a
		}
		now = now.Add(capacityEvery)
		n.measureCapacity(now, nil)
	}
	n.measureCapacity(now, nil)
	for range 5 {
		second(map[swarm.PeerID]int{0: 60_000, 1: 60_000, 2: 60_000, 3: 60_000})
	}
	// Peer 3 goes with 200 KB it was sent but never acknowledged.
	delete(n.peers, 3)
	delete(conns, 3)
	for range 3 {
		second(map[swarm.PeerID]int{0: 40_000, 1: 40_000, 2: 40_000})
	}
	if c, peak := n.capacity, n.uploadPeak(); c > link*1.01 || peak > link*1.01 {
		t.Errorf("capacity %.0f, peak %.0f bytes/s after a connection closed with its backlog; the peers acknowledged %d a second", c, peak, link)
	}
	if n.capacity < link*0.9 {
		t.Errorf("capacity %.0f bytes/s, want about %d", n.capacity, link)
	}
}
