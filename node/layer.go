package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/wire"
)

// The piece layer from peers (docs/protocol.md, section 5, GETLAYER). A peer may
// join with the manifest's head alone: root, geometry and trackers
// (Config.Manifest without Pieces). It announces, connects and trades
// have-sets as usual, but the scheduler asks nobody for a piece until the
// layer is known (swarm.Config.LayerPending), since nothing could be
// verified. Meanwhile:
//
//   - it asks up to layerAsks neighbours that answer GETLAYER (CapLayer)
//     for it, others as they refuse or go; a neighbour that does not know
//     the layer yet holds the request and answers once it does, so in a
//     crowd that arrives at once the layer spreads from the first peers
//     that have it along the requests. Neighbours waiting on each other
//     (in a test, three newcomers that met before they met the seed) would
//     wait for the origin: so a neighbour that has a piece, which it could
//     only have verified with the layer, is asked too, whatever the bound;
//   - on the tracker's first answer it fetches the layer from the origin
//     (Config.FetchLayer) with probability k/n, n the swarm size the
//     tracker reports and k swarm.Config.OriginK, as Slurpie's peers go to
//     the origin for pieces: in a crowd of n arriving together about
//     k(1 + ln(n/k)) peers draw (11 of 50), instead of all n. One the
//     tracker named no peer to fetches at once; the others first give the
//     neighbours they ask layerGrace to answer. In flash50 runs on the
//     testbed 9-14 peers drew; in a traced one, 12 of its 13 had the
//     layer from a neighbour within 0.1 s of the tracker's answer, but
//     their 16 KiB fetches were on the origin's link by then: 218 KB (0.2 s
//     of the link) in its first second, ahead of the pieces. With the grace
//     the origin sent the layer once a run;
//   - it fetches the layer from the origin after layerWait anyway (and
//     gives that fetch up if a neighbour's answer comes first).
//
// A neighbour asks for the layer once a connection: GETLAYERs past one
// layer's worth of hashes end the connection, so an answer (16 KiB for 512
// pieces, outside the upload limit) cannot be had again and again.
//
// A layer that does not hash to the root gets its peer dropped, as a
// corrupt piece does: it is not asked again, and its address is not
// connected to again (swarm.Corrupt). In a flash crowd of 50 on the testbed
// the manifests took 0.85 MB of the origin's 8 Mbit/s link at the start
// (about 0.9 s of it) before any piece could go out: 512 piece hashes of
// 32 bytes for each peer.
const (
	layerAsks  = 2
	layerGrace = 300 * time.Millisecond
	layerWait  = 1500 * time.Millisecond
)

// layerState is the node's progress towards the piece layer. Its mutex
// also orders every read of Manifest.Pieces by a connection's goroutine
// after the write that filled them.
type layerState struct {
	mu     sync.Mutex
	known  atomic.Bool    // the layer is in the manifest; set under mu
	from   string         // "peer" or "origin", once known; "" if the manifest had it
	asking int            // asks not answered yet
	held   []heldGetLayer // GETLAYERs to answer once known, in order
	done   chan struct{}  // closed once known
	now    chan struct{}  // the draw says: fetch from the origin now
	grace  chan struct{}  // the draw says: fetch after layerGrace
	retry  chan struct{}  // an ask ended without the layer: ask another
	drawn  bool           // the k/n draw is done (loop only)
	start  time.Time
}

type heldGetLayer struct {
	p   *peerConn
	req wire.GetLayer
}

func (l *layerState) init(known bool) {
	l.done = make(chan struct{})
	l.now = make(chan struct{}, 1)
	l.grace = make(chan struct{}, 1)
	l.retry = make(chan struct{}, 1)
	l.start = time.Now()
	if known {
		l.known.Store(true)
		close(l.done)
	}
}

// nudge wakes whoever waits on c, once.
func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// fetchLayerLater runs until the layer is known: it fetches it from the
// origin when the draw says so (at once or after layerGrace) or after
// layerWait.
func (n *Node) fetchLayerLater(ctx context.Context) {
	l := &n.layer
	patience, grace := layerWait, layerGrace
	if d := n.cfg.Swarm.SmallDeadline; swarm.IsSmall(n.cfg.Swarm, n.m.NumPieces(), n.m.Size) {
		// A small object's pieces go to the origin at its deadline
		// (swarm/small.go), none can be verified without the layer, and
		// a neighbour that has it answers in a round trip; the layer is
		// 512 bytes at most.
		if d <= 0 {
			d = swarm.DefaultSmallDeadline
		}
		patience = min(patience, d/2)
		grace = min(grace, patience/5)
	}
	deadline := time.Now().Add(patience)
	t := time.NewTimer(patience)
	defer t.Stop()
	why := "no neighbour answered in time"
	for wait := true; wait; {
		select {
		case <-ctx.Done():
			return
		case <-l.done:
			return
		case <-l.now:
			why, wait = "drawn", false
		case <-l.grace:
			if time.Until(deadline) > grace {
				t.Reset(grace)
				why = "drawn, and no neighbour answered within the grace"
			}
		case <-t.C:
			wait = false
		}
	}
	if n.cfg.FetchLayer == nil {
		return // peers only (tests): wait for them
	}
	n.log.Debug("fetching the piece layer from the origin", "why", why)
	// A neighbour's answer may come first: the fetch is given up then.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-fctx.Done():
		}
	}()
	pieces, err := n.cfg.FetchLayer(fctx)
	if err == nil {
		err = n.setLayer(ctx, pieces, "origin")
	}
	if err != nil && ctx.Err() == nil && !l.known.Load() {
		select {
		case n.fatal <- fmt.Errorf("piece layer from the origin: %w", err):
		default:
		}
	}
}

// setLayer makes pieces the manifest's layer if they hash to its root,
// answers the GETLAYERs held, and lets the scheduler request. Once the
// layer is known it does nothing.
func (n *Node) setLayer(ctx context.Context, pieces []manifest.Hash, from string) error {
	l := &n.layer
	l.mu.Lock()
	if l.known.Load() {
		l.mu.Unlock()
		return nil
	}
	if err := n.m.SetLayer(pieces); err != nil {
		l.mu.Unlock()
		return err
	}
	l.from = from
	l.known.Store(true)
	// The held answers go before the mutex is let go, so that a later
	// GETLAYER of the same connection (the next 8192 hashes), which finds
	// the layer known, is answered after them, in order (sendControl never blocks).
	for _, h := range l.held {
		h.p.sendLayer(h.req)
	}
	held := len(l.held)
	l.held = nil
	l.mu.Unlock()
	close(l.done)
	n.log.Debug("piece layer known", "from", from, "took", time.Since(l.start), "held", held)
	n.post(ctx, swarm.LayerReady{})
	return nil
}

// askLayer asks neighbours for the layer while fewer than layerAsks asks
// are under way; called by the loop.
func (n *Node) askLayer() {
	if n.layer.known.Load() {
		return
	}
	l := &n.layer
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range n.peers { // a map: in no particular order
		if l.known.Load() || l.asking >= layerAsks {
			return
		}
		n.askLayerOf(p)
	}
}

// haveFrom is called by the loop for a HAVE or a non-empty HAVESET of
// peer: a neighbour with a piece knows the layer, and is asked at once.
func (n *Node) haveFrom(peer swarm.PeerID) {
	if n.layer.known.Load() {
		return
	}
	if p := n.peers[peer]; p != nil {
		n.layer.mu.Lock()
		if !n.layer.known.Load() {
			n.askLayerOf(p)
		}
		n.layer.mu.Unlock()
	}
}

// askLayerOf sends p our GETLAYERs unless it cannot answer or was asked
// on this connection; n.layer.mu held, the layer unknown.
func (n *Node) askLayerOf(p *peerConn) {
	// Asked once a connection: a neighbour holds our request until it
	// knows the layer. Per connection, not per peer: when a duplicate
	// connection replaces the one we asked on (docs/protocol.md, section
	// 3), the request held there is lost with it, and the new one is
	// asked again.
	if !p.caps.Has(wire.CapLayer) || p.layerTried {
		return
	}
	p.layerTried = true
	n.layer.asking++
	p.layerAsked.Store(true)
	n.log.Debug("asking for the piece layer", "peer", p.addr)
	for first := 0; first < n.m.NumPieces(); first += wire.MaxLayerHashes {
		p.sendControl(&wire.GetLayer{First: uint32(first), Count: uint32(min(wire.MaxLayerHashes, n.m.NumPieces()-first))})
	}
}

// askEnded counts an ask that ended without the layer (a refusal, the
// connection gone) and has the loop ask another neighbour.
func (n *Node) askEnded(p *peerConn) {
	if !p.layerAsked.Swap(false) {
		return
	}
	l := &n.layer
	l.mu.Lock()
	l.asking--
	l.mu.Unlock()
	nudge(l.retry)
}

// drawLayer is the k/n draw on the tracker's first answer (loop only):
// size is the swarm size it reports (0: none, the tracker failed), peers
// how many peers it named.
func (n *Node) drawLayer(size, peers int) {
	l := &n.layer
	if l.drawn {
		return
	}
	l.drawn = true
	k := n.cfg.Swarm.OriginK
	if k <= 0 {
		k = swarm.DefaultOriginK
	}
	switch {
	case size > k && rand.IntN(size) >= k:
		// Not drawn: the neighbours, or the origin after layerWait.
	case peers == 0:
		nudge(l.now)
	default:
		nudge(l.grace)
	}
}

// onGetLayer answers a GETLAYER, or holds it until the layer is known (the
// reader goroutine's). A connection asks for one layer's worth of hashes
// at most: more is an error.
func (p *peerConn) onGetLayer(req *wire.GetLayer) error {
	if p.layerServed += int(req.Count); p.layerServed > p.n.m.NumPieces() {
		return fmt.Errorf("GETLAYER for %d hashes in all, of a layer of %d", p.layerServed, p.n.m.NumPieces())
	}
	l := &p.n.layer
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.known.Load() {
		l.held = append(l.held, heldGetLayer{p: p, req: *req})
		return nil
	}
	p.sendLayer(*req)
	return nil
}

// dropHeld forgets the GETLAYERs held for p, whose connection is gone.
func (n *Node) dropHeld(p *peerConn) {
	l := &n.layer
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = slices.DeleteFunc(l.held, func(h heldGetLayer) bool { return h.p == p })
}

// sendLayer answers req; the layer is known.
func (p *peerConn) sendLayer(req wire.GetLayer) {
	hs := make([][wire.HashLen]byte, req.Count)
	for i := range hs {
		hs[i] = p.n.m.Pieces[int(req.First)+i]
	}
	p.sendControl(&wire.Layer{First: req.First, Hashes: hs})
}

// onLayer files a LAYER frame (the reader goroutine's): the hashes must
// come in order from the first, or the connection ends; once all have,
// they must hash to the root, or the peer is dropped and banned. A LAYER
// we did not ask for is ignored.
func (p *peerConn) onLayer(ctx context.Context, msg *wire.Layer) error {
	if !p.layerAsked.Load() {
		return nil
	}
	if len(msg.Hashes) == 0 {
		p.n.askEnded(p)
		return nil
	}
	if int(msg.First) != len(p.layerBuf) {
		return fmt.Errorf("LAYER from hash %d, expected %d", msg.First, len(p.layerBuf))
	}
	for _, h := range msg.Hashes {
		p.layerBuf = append(p.layerBuf, manifest.Hash(h))
	}
	if len(p.layerBuf) < p.n.m.NumPieces() {
		return nil
	}
	pieces := p.layerBuf
	p.layerBuf = nil
	if err := p.n.setLayer(ctx, pieces, "peer"); err != nil {
		p.n.askEnded(p) // also ignores what else it sends
		// Hashes that fail the root are data failing verification: as for
		// a corrupt piece, the scheduler drops the peer, and it is banned
		// by address and by peer ID (Node.register), so it is not asked
		// again. The connection ends by the scheduler's Disconnect, with
		// GOODBYE reason 8, counted in PeersBanned.
		p.n.log.Info("a neighbour's piece layer failed verification", "peer", p.addr, "err", err)
		p.n.post(ctx, swarm.Corrupt{Peer: p.id, Piece: -1})
		return nil
	}
	p.layerAsked.Store(false)
	return nil
}

// layerFrom is Stats.LayerFrom.
func (n *Node) layerFrom() string {
	l := &n.layer
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.from
}
