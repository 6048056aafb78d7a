package node

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/internal/sockopt"
)

// PathConn is what a peer connection that is not a TCP socket (a WebRTC
// data channel, package rtcpeer) tells the node in place of the kernel's
// TCP_INFO and send queue (internal/sockopt): the path's round trip
// without queues, the bytes written and not yet acknowledged, and how the
// path reaches the peer. The node reads it where it would read the socket.
// A wrapper of such a connection (Config.PeerConn) must keep its methods,
// as a wrapper of a TCP connection keeps its syscall.Conn.
type PathConn interface {
	// MinRTT is the least round trip seen on the path; 0 if none yet.
	MinRTT() time.Duration
	// Unacked is how many bytes written the other end has not
	// acknowledged yet, sent or not; -1 if unknown.
	Unacked() int
	// Path is how the connection reaches the peer: PathDirect,
	// PathPunched or PathRelayed.
	Path() string
}

// How a connection reaches its peer (PathConn.Path). A TCP connection is
// direct.
const (
	// PathDirect: no NAT in between, or both ends behind the same one.
	PathDirect = "direct"
	// PathPunched: through a NAT, by an address learned from STUN or
	// from the other end's checks (a hole punched by both sides sending).
	PathPunched = "punched"
	// PathRelayed: through a TURN relay, the last resort.
	PathRelayed = "relayed"
)

// Paths counts the neighbours made by how their connection reaches them
// (Stats.Neighbours), and the peer bytes carried by relays, both ways.
type Paths struct {
	Direct       int   `json:"direct"`
	Punched      int   `json:"punched"`
	Relayed      int   `json:"relayed"`
	RelayedBytes int64 `json:"relayed_bytes"`
}

// pathCounts are Paths as the node keeps them.
type pathCounts struct {
	direct, punched, relayed, relayedBytes atomic.Int64
}

func (pc *pathCounts) snapshot() Paths {
	return Paths{Direct: int(pc.direct.Load()), Punched: int(pc.punched.Load()), Relayed: int(pc.relayed.Load()), RelayedBytes: pc.relayedBytes.Load()}
}

// pathOf is how c reaches its peer: PathConn's answer, else direct.
func pathOf(c net.Conn) string {
	if p, ok := c.(PathConn); ok {
		return p.Path()
	}
	return PathDirect
}

// countPath counts a neighbour made over c.
func (n *Node) countPath(c net.Conn) {
	switch pathOf(c) {
	case PathPunched:
		n.paths.punched.Add(1)
	case PathRelayed:
		n.paths.relayed.Add(1)
	default:
		n.paths.direct.Add(1)
	}
}

// relayCounted returns c, wrapped to count its bytes in
// Paths.RelayedBytes when it goes through a relay.
func (n *Node) relayCounted(c net.Conn) net.Conn {
	p, ok := c.(PathConn)
	if !ok || p.Path() != PathRelayed {
		return c
	}
	return &relayedConn{PathConn: p, Conn: c, n: &n.paths.relayedBytes}
}

// relayedConn counts a relayed connection's bytes.
type relayedConn struct {
	PathConn
	net.Conn
	n *atomic.Int64
}

func (c *relayedConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	c.n.Add(int64(k))
	return k, err
}

func (c *relayedConn) Write(b []byte) (int, error) {
	k, err := c.Conn.Write(b)
	c.n.Add(int64(k))
	return k, err
}

// minRTT is c's path round trip without queues: PathConn's, else TCP's
// (sockopt.MinRTT); 0 if unknown.
func minRTT(c net.Conn) time.Duration {
	if p, ok := c.(PathConn); ok {
		return p.MinRTT()
	}
	return sockopt.MinRTT(c)
}

// unacked is how many bytes c holds unacknowledged: PathConn's, else the
// kernel send buffer's (sockopt.Unacked); -1 if unknown.
func unacked(c net.Conn) int {
	if p, ok := c.(PathConn); ok {
		return p.Unacked()
	}
	return sockopt.Unacked(c)
}
