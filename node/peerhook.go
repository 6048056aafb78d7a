package node

import (
	"net"

	"github.com/stampede-dev/stampede/wire"
)

// PeerConnFunc sees each peer connection once its handshake agreed,
// before the peer joins: addr is the peer's address (the one dialed, or
// for an inbound connection its IP and the port its handshake names; ""
// if it names none), outbound whether we dialed it. It returns the
// connection to use, c itself or c wrapped (to count or shape its bytes:
// a wrapper should keep c's syscall.Conn, which the socket options
// need), or nil to refuse the peer. A cluster push uses it to keep
// peers within the topology (cluster.Plan.MayPeer).
type PeerConnFunc func(c net.Conn, addr string, outbound bool) net.Conn

// OwnBudget is implemented by a connection that a PeerConnFunc returns
// when a budget of the application's own shapes what is sent on it (a
// push's connections across a rack's uplink, which the link's budget
// shapes). OwnBudget returning true exempts the connection's uploads from
// the upload turns and the busy refusals (uploadsFull): both exist to
// share one uplink among the neighbours, and would hold the few pieces
// that cross a scarce link behind those for the hosts next door. It must
// be the connection the hook returns, not one wrapped inside it.
type OwnBudget interface{ OwnBudget() bool }

func ownBudget(c net.Conn) bool {
	o, ok := c.(OwnBudget)
	return ok && o.OwnBudget()
}

// peerConn applies Config.PeerConn; nil when the peer is refused (c is
// then told so and closed).
func (n *Node) peerConn(c net.Conn, addr string, outbound bool) net.Conn {
	if n.cfg.PeerConn == nil {
		return c
	}
	w := n.cfg.PeerConn(c, addr, outbound)
	if w == nil {
		n.log.Debug("peer refused by the peer filter", "peer", addr, "outbound", outbound)
		n.sayGoodbye(c, wire.GoodbyeOther, "refused by the topology")
	}
	return w
}
