package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/internal/sockopt"
	"github.com/stampede-dev/stampede/internal/uplink"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/wire"
)

// dialTimeout bounds a dial to a peer. A peer whose uplink is saturated
// drops packets at its bottleneck queue, the SYN-ACK among them; TCP sends
// the SYN again after 1, 3 and 7 s, so a short timeout (5 s was measured)
// left late arrivals of a flash crowd of 50 unable to reach anyone.
const dialTimeout = 15 * time.Second

// register adopts a handshaken connection. Of two connections joining the
// same two peers, both keep the one dialed by the peer with the smaller ID
// (docs/protocol.md, section 3), so that when they dial each other at once
// they drop the same one rather than one each. A dial that ends as the
// dropped duplicate is reported to the scheduler as failed, since it waits
// for the outcome of every Connect. A peer ID the scheduler banned is
// turned away (GOODBYE corrupt data) whatever its address.
func (n *Node) register(ctx context.Context, j join) swarm.Event {
	p := j.p
	if n.bannedIDs[p.peerID] {
		n.sayGoodbye(p.c, wire.GoodbyeCorrupt, "banned")
		if j.outbound {
			return swarm.DialFailed{Addr: p.addr}
		}
		return nil
	}
	if oldID, dup := n.byPeerID[p.peerID]; dup {
		old := n.peers[oldID]
		if old == nil || !n.keepNew(p, j.outbound, old) {
			n.sayGoodbye(p.c, wire.GoodbyeDuplicate, "duplicate connection")
			if j.outbound {
				return swarm.DialFailed{Addr: p.addr}
			}
			return nil
		}
		// The old one goes; its reader reports PeerDown.
		old.sendControl(&wire.Goodbye{Reason: wire.GoodbyeDuplicate, Text: "duplicate connection"})
		old.closeAfterFlush()
	}
	n.peers[p.id] = p
	n.byPeerID[p.peerID] = p.id
	n.mu.Lock()
	n.seen++
	n.mu.Unlock()
	n.countPath(p.c)
	p.start(ctx)
	if n.capSent > 0 {
		p.sendControl(&wire.Rate{Up: rateUp(n.capSent)})
	}
	n.askLayer()
	n.log.Debug("peer up", "peer", p.addr, "outbound", j.outbound, "peers", len(n.peers))
	host, _, _ := net.SplitHostPort(p.c.RemoteAddr().String())
	return swarm.PeerUp{Peer: p.id, Addr: p.addr, Host: host, Outbound: j.outbound}
}

// maxBannedIDs bounds Node.bannedIDs: a peer can make up IDs at will, and
// past the bound the scheduler's ban of addresses still holds.
const maxBannedIDs = 4096

// sayGoodbye sends GOODBYE on a handshaken connection that is not adopted
// (a duplicate that lost, a banned peer ID) and closes it, off the loop,
// within closeGrace.
//
// What the peer sent meanwhile (its HAVESET) is read and dropped until it
// closes too: a TCP socket closed with unread data sends a reset, which
// can destroy the GOODBYE before the peer reads it.
func (n *Node) sayGoodbye(c net.Conn, reason wire.GoodbyeReason, text string) {
	n.wg.Go(func() {
		defer c.Close()
		c.SetDeadline(time.Now().Add(closeGrace))
		w := wire.NewWriter(c, n.geom)
		if w.WriteMessage(&wire.Goodbye{Reason: reason, Text: text}) != nil || w.Flush() != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		io.Copy(io.Discard, io.LimitReader(c, maxGoodbyeDrain))
	})
}

// maxGoodbyeDrain bounds what sayGoodbye reads from a peer it is leaving.
const maxGoodbyeDrain = 1 << 20

// keepNew reports whether p, a new connection to the same peer as old,
// replaces it: p was dialed by the peer with the smaller ID and old was not.
func (n *Node) keepNew(p *peerConn, outbound bool, old *peerConn) bool {
	smaller := n.id
	if bytes.Compare(p.peerID[:], n.id[:]) < 0 {
		smaller = p.peerID
	}
	dialer := func(outbound bool) wire.PeerID {
		if outbound {
			return n.id
		}
		return p.peerID
	}
	return dialer(outbound) == smaller && dialer(old.outbound) != smaller
}

// leave says goodbye to every peer and the tracker (best effort, bounded).
func (n *Node) leave() {
	n.schedStats()
	for _, p := range n.peers {
		p.sendControl(&wire.Goodbye{Reason: wire.GoodbyeShutdown, Text: "leaving"})
		p.closeAfterFlush()
	}
	if len(n.cfg.Trackers) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req := n.signed(tracker.AnnounceRequest{Root: n.m.Root, Size: n.m.Size, ID: tracker.PeerID(n.id), Event: tracker.EventStopped})
	for _, url := range n.cfg.Trackers {
		tracker.Announce(ctx, n.cfg.HTTPClient, url, req)
	}
}

// Host is what a node needs of the process that carries the connections
// of many swarms (Config.Host; package host implements it).
type Host interface {
	// Addr is where peers reach the host; its port goes in handshakes and
	// announces.
	Addr() net.Addr
	// Dial connects to a peer.
	Dial(ctx context.Context, addr string) (net.Conn, error)
	// UploadLimit, Pacer and Turns are shared by every node of the host.
	UploadLimit() *ratelimit.Limiter
	Pacer() *uplink.Pacer
	Turns() *Turns
	// Attach routes the connections that ask for n's swarm to n.Adopt
	// until detach is called. Several nodes of one swarm may be attached
	// at once: inbound connections go to the first attached. An error
	// ends Run.
	Attach(n *Node) (detach func(), err error)
}

// Swarm is the swarm's identity: the manifest's root and the file size, as
// handshakes carry them.
func (n *Node) Swarm() (root manifest.Hash, size int64) { return n.m.Root, n.m.Size }

// accepting starts taking peers for ctx's lifetime: from the listener, or
// through Adopt when a host routes them. detach stops it; connections
// adopted until then are the node's, and Run waits for them.
func (n *Node) accepting(ctx context.Context) (detach func(), err error) {
	n.adoptMu.Lock()
	n.adoptCtx = ctx
	n.adoptMu.Unlock()
	stop := func() {
		n.adoptMu.Lock()
		n.adoptCtx = nil
		n.adoptMu.Unlock()
	}
	if n.cfg.Host == nil {
		n.wg.Go(func() { n.acceptLoop(ctx) })
		return func() { n.ln.Close(); stop() }, nil
	}
	d, err := n.cfg.Host.Attach(n)
	if err != nil {
		stop()
		return nil, fmt.Errorf("node: %w", err)
	}
	return func() { d(); stop() }, nil
}

// Adopt takes an accepted connection whose handshake, theirs, the caller
// has read and found to name this node's swarm (a host routing by root,
// Config.Host): the node answers with its own handshake and the peer joins
// as any other. It returns at once, true, and c is the node's from then
// on. A node not running (yet, or any more) returns false and leaves c
// untouched, the caller's to answer and close: a goroutine of the node's
// doing so could outlive Run.
func (n *Node) Adopt(c net.Conn, theirs wire.Handshake) bool {
	n.adoptMu.Lock()
	defer n.adoptMu.Unlock()
	ctx := n.adoptCtx
	if ctx == nil {
		return false
	}
	n.wg.Go(func() {
		hctx, cancel := context.WithTimeout(ctx, wire.HandshakeTimeout)
		err := wire.Answer(hctx, c, theirs, n.hello())
		cancel()
		n.handshaken(ctx, c, theirs, err, false, "")
	})
	return true
}

func (n *Node) acceptLoop(ctx context.Context) {
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		n.wg.Go(func() { n.handshake(ctx, c, false, "") })
	}
}

func (n *Node) connect(ctx context.Context, addr string) {
	n.wg.Go(func() {
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		defer cancel()
		c, err := n.cfg.Dial(dctx, addr)
		if err != nil {
			n.log.Debug("dial failed", "peer", addr, "err", err)
			n.post(ctx, swarm.DialFailed{Addr: addr})
			return
		}
		if !n.handshake(ctx, c, true, addr) {
			n.log.Debug("handshake failed", "peer", addr)
			n.post(ctx, swarm.DialFailed{Addr: addr})
		}
	})
}

// handshake exchanges handshakes and, when they agree, registers the peer
// with the loop through a peerUp message.
func (n *Node) handshake(ctx context.Context, c net.Conn, outbound bool, addr string) bool {
	hctx, cancel := context.WithTimeout(ctx, wire.HandshakeTimeout)
	theirs, err := wire.Exchange(hctx, c, n.hello())
	cancel()
	return n.handshaken(ctx, c, theirs, err, outbound, addr)
}

// listenPort is the port peers reach us on, 0 if none (a listener or a
// host that is not TCP).
func (n *Node) listenPort() int {
	if ta, ok := n.Addr().(*net.TCPAddr); ok {
		return ta.Port
	}
	return 0
}

// hello is our handshake.
func (n *Node) hello() wire.Handshake {
	caps := wire.CapLayer
	if n.cfg.Store.Count() == n.m.NumPieces() {
		caps |= wire.CapSeed
	} else if n.cfg.Swarm.StrictTFT {
		caps |= wire.CapStrictTFT // strict only while downloading
	}
	h := wire.Handshake{Caps: caps, Root: n.m.Root, Size: uint64(n.m.Size), PeerID: n.id, ListenPort: uint16(n.listenPort())}
	if p := n.cfg.Private; p != nil {
		h.Private = privateHello{p: p, m: n.m}
	}
	return h
}

// handshaken registers the peer of a connection whose handshake is done
// (err is its outcome) with the loop, through a join, when it agreed.
func (n *Node) handshaken(ctx context.Context, c net.Conn, theirs wire.Handshake, err error, outbound bool, addr string) bool {
	if err == nil && theirs.PeerID == n.id {
		// We dialed ourselves: an address of ours came back to us.
		n.sayGoodbye(c, wire.GoodbyeSelf, "self")
		return false
	}
	if err != nil {
		c.Close()
		return false
	}
	if !outbound {
		addr = ""
		if theirs.ListenPort != 0 {
			if host, _, err := net.SplitHostPort(c.RemoteAddr().String()); err == nil {
				addr = net.JoinHostPort(host, strconv.Itoa(int(theirs.ListenPort)))
			}
		}
	}
	if c = n.peerConn(c, addr, outbound); c == nil {
		return false
	}
	c = n.relayCounted(c)
	sockopt.NotSentLowat(c, notSentLowat)
	id := swarm.PeerID(n.nextID.Add(1))
	p := newPeerConn(n, id, c, theirs.PeerID, addr)
	p.outbound, p.caps = outbound, theirs.Caps
	select {
	case n.joins <- join{p: p, outbound: outbound}:
	case <-ctx.Done():
		c.Close()
		return false
	}
	return true
}

type join struct {
	p        *peerConn
	outbound bool
}
