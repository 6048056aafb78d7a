package node

import "net"

// Opened takes a stream to a peer that this node opened otherwise than by
// dialing an address: a WebRTC data channel it offered through the
// tracker and a peer answered (package rtcpeer). Handshakes go both ways
// at once, as after a dial, and the peer joins as one we dialed (of the
// two connections two peers open to each other at once, both keep the
// same one), with no address to dial it again. It returns at once, true,
// and c is the node's from then on; a node not running returns false and
// leaves c to the caller.
func (n *Node) Opened(c net.Conn) bool {
	n.adoptMu.Lock()
	defer n.adoptMu.Unlock()
	ctx := n.adoptCtx
	if ctx == nil {
		return false
	}
	n.wg.Go(func() {
		if !n.handshake(ctx, c, true, "") {
			n.log.Debug("handshake failed on a stream we opened", "peer", c.RemoteAddr())
		}
	})
	return true
}
