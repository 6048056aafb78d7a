package tracker

// WebSocket signalling: how WebRTC peers (visitors' browsers, package
// webpeer; native peers, package rtcpeer) find each other. A peer that
// cannot be dialed cannot be handed out by address, so instead of a peer
// list the tracker relays WebRTC offers and answers between the peers of a
// swarm, as WebTorrent's WebSocket trackers do; once a data channel is up,
// the two speak docs/protocol.md over it and the tracker is out of the way.
//
// The connection is a WebSocket upgrade of a GET to the announce URL (ws://
// or wss:// for http:// or https://). Every message is a JSON text message
// with "action": "announce", naming the swarm by "root" (64 hex) and "size".
//
// A peer announces with its "peer_id" (32 hex), "left" and "event" as over
// HTTP, and up to MaxWSOffers "offers", each {"offer_id": "<up to 40
// chars>", "offer": {"type": "offer", "sdp": "..."}}:
//
//	{"action":"announce","root":"...","size":1048576,"peer_id":"...","left":1048576,
//	 "event":"started","offers":[{"offer_id":"a1","offer":{"type":"offer","sdp":"..."}}]}
//
// It is answered {"action":"announce","root","size","interval","swarm_size",
// "complete","webrtc_peers","webrtc_downloading","webrtc_recent"} (or
// "error"): the swarm's size as the store counts it (every peer, HTTP and
// WebRTC), and, of its WebRTC peers on this tracker other than the asker,
// how many are connected, how many of those are still downloading, and how
// many arrived in the last wsRecent, those gone since included (a visitor
// alone in a swarm that others joined a moment ago is in a crowd, and may
// wait for the next arrivals rather than take the object from the origin).
// Each offer goes to a different other peer of the swarm on this tracker:
// first those still downloading, then the seeds, the latest arrivals first
// in each (a downloader stays in the swarm until it is done, a seed may
// leave at any moment, and the latest arrivals stay longest); an offer
// marked native (its offer_id opens with "n-": package rtcpeer's) goes to
// no peer that made one, since native peers leave each other's offers
// unanswered (they pair over TCP):
//
//	{"action":"announce","root":"...","size":1048576,"peer_id":"<offerer>","offer_id":"a1","offer":{...}}
//
// That peer answers {"action":"announce","root","size","peer_id":"<itself>",
// "to_peer_id":"<offerer>","offer_id":"a1","answer":{"type":"answer",
// "sdp":"..."}}, which reaches the offerer as {"action":"announce","root",
// "size","peer_id":"<answerer>","offer_id":"a1","answer":{...}}. An answer
// is relayed only for an offer this tracker relayed to its sender, once,
// within wsOfferTTL, and only as from the peer_id the sender announced.
// Candidates are not trickled: SDPs carry them all.
//
// Everything is bounded: message size (MaxWSMessage), offers per announce,
// offers awaiting an answer per connection (each for wsOfferTTL at most),
// the bytes queued to a connection, swarms per connection, peers
// per swarm (Config.MaxPeersPerSwarm), connections (MaxWSConns), and the
// connections from one source (MaxWSConnsPerSrc), and the
// messages a connection may send (wsRate a second, wsBurst at once); a
// connection past a bound is closed, and one whose send queue is full
// (it does not read) is closed too, so that a slow peer never holds the
// others up. Announces count against their source's rate
// (Config.AnnounceRate) as over HTTP. They also go to the tracker's store
// as from a peer that cannot be dialed (port 0): the swarm's size counts
// WebRTC peers, and a swarm the tracker does not admit
// (Config.OnlyAdmitted) is refused the same way.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/stampede-dev/stampede/manifest"
)

// NativeOfferMark opens the offer_id of a native peer's offers (package
// rtcpeer): native peers pair over TCP and leave each other's offers
// unanswered, so the tracker relays them to no peer that made one.
const NativeOfferMark = "n-"

// Bounds of the WebSocket signalling.
const (
	MaxWSMessage     = 64 << 10         // bytes of one message: an SDP is a few KiB
	MaxWSOffers      = 10               // offers in one announce
	MaxWSConns       = 4096             // connections at once
	MaxWSConnsPerSrc = 32               // connections at once from one source (source.go; loopback exempt)
	maxWSPending     = 64               // offers relayed to a connection awaiting its answer
	wsOfferTTL       = 30 * time.Second // an offer unanswered this long no longer holds a slot of maxWSPending
	maxWSSwarms      = 64               // swarms one connection announces in
	maxWSOfferID     = 40               // characters of an offer_id
	wsSendQueue      = 64               // messages queued to one connection
	wsSendBytes      = 256 << 10        // and bytes: at most MaxWSConns times this waits in all
	wsRate           = 10               // messages a second a connection may send, on average
	wsBurst          = 60               // and at once
	wsWriteTimeout   = 10 * time.Second
	wsAnnounceNumber = 1               // peers asked of the store: only its counts matter
	wsRecent         = 5 * time.Second // arrivals counted in webrtc_recent
	wsArrivals       = 16              // arrivals remembered per swarm, for webrtc_recent
)

// isWebSocket reports whether r asks to upgrade to a WebSocket.
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// wsHub holds the WebSocket peers of every swarm. Its zero value is ready.
type wsHub struct {
	mu     sync.Mutex // guards the following
	swarms map[swarmKey]*wsSwarm
	// emptied is the swarms left with no peer, in order, each kept
	// wsRecent for its arrivals (webrtc_recent) and then dropped.
	emptied []wsEmptied
	conns   int
	bySrc   map[netip.Prefix]int // connections by source
	open    map[*wsConn]bool     // every connection, for CloseWebSockets
	closed  bool                 // CloseWebSockets was called: no more
}

// enter counts a connection from src (ok false: no source, as loopback),
// and reports whether it is within the bounds.
func (h *wsHub) enter(src netip.Prefix, ok bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.conns >= MaxWSConns || ok && h.bySrc[src] >= MaxWSConnsPerSrc {
		return false
	}
	h.conns++
	if ok {
		if h.bySrc == nil {
			h.bySrc = map[netip.Prefix]int{}
		}
		h.bySrc[src]++
	}
	return true
}

func (h *wsHub) exit(src netip.Prefix, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conns--
	if ok {
		if h.bySrc[src]--; h.bySrc[src] <= 0 {
			delete(h.bySrc, src)
		}
	}
}

// wsSwarm is one swarm's WebRTC peers on this tracker, and when the
// latest of them arrived.
type wsSwarm struct {
	peers    map[PeerID]*wsMember
	arrivals [wsArrivals]wsArrival // a ring
	next     int                   // where the next arrival goes in it
	emptied  time.Time             // when its last peer left
}

type wsArrival struct {
	id PeerID
	at time.Time
}

type wsEmptied struct {
	key swarmKey
	at  time.Time
}

// wsMember is one WebRTC peer of a swarm, as its announces tell it.
type wsMember struct {
	conn   *wsConn
	left   int64
	joined time.Time
	native bool // it made offers marked native
}

// recent counts the arrivals of the last wsRecent at now, but for id's.
func (sw *wsSwarm) recent(id PeerID, now time.Time) int {
	n := 0
	for _, a := range sw.arrivals {
		if !a.at.IsZero() && a.id != id && now.Sub(a.at) < wsRecent {
			n++
		}
	}
	return n
}

// wsConn is one WebSocket connection: the peer IDs it announced in each
// swarm, and the offers relayed to it that it may answer, with when.
type wsConn struct {
	send   chan []byte
	queued atomic.Int64 // bytes in send
	cancel context.CancelFunc
	// guarded by wsHub.mu:
	peers   map[swarmKey]PeerID
	pending map[wsOffer]time.Time
}

// wsOffer is an offer relayed to a connection: who made it, in which swarm.
type wsOffer struct {
	key  swarmKey
	from PeerID
	id   string
}

// WSSDP is an offer's or an answer's session description.
type WSSDP struct {
	Type string `json:"type"`
	SDP  string `json:"sdp"`
}

// WSMessage is every message of the WebSocket signalling, both ways
// (package rtcpeer is a client).
type WSMessage struct {
	Action    string    `json:"action"`
	Root      string    `json:"root"`
	Size      int64     `json:"size"`
	PeerID    string    `json:"peer_id,omitempty"`
	Left      *int64    `json:"left,omitempty"`
	Event     Event     `json:"event,omitempty"`
	Offers    []WSOffer `json:"offers,omitempty"`
	ToPeerID  string    `json:"to_peer_id,omitempty"`
	OfferID   string    `json:"offer_id,omitempty"`
	Offer     *WSSDP    `json:"offer,omitempty"`
	Answer    *WSSDP    `json:"answer,omitempty"`
	Interval  int64     `json:"interval,omitempty"`
	SwarmSize *int      `json:"swarm_size,omitempty"`
	Complete  *int      `json:"complete,omitempty"`
	// Of the swarm's other WebRTC peers on this tracker: connected,
	// still downloading, arrived in the last wsRecent (gone or not).
	WebRTCPeers       *int   `json:"webrtc_peers,omitempty"`
	WebRTCDownloading *int   `json:"webrtc_downloading,omitempty"`
	WebRTCRecent      *int   `json:"webrtc_recent,omitempty"`
	Error             string `json:"error,omitempty"`
}

// WSURL is the WebSocket form of an http or https announce URL (ws://,
// wss://), where the signalling is; "" for another scheme.
func WSURL(announce string) string {
	switch {
	case strings.HasPrefix(announce, "https://"):
		return "wss://" + strings.TrimPrefix(announce, "https://")
	case strings.HasPrefix(announce, "http://"):
		return "ws://" + strings.TrimPrefix(announce, "http://")
	}
	return ""
}

// WSOffer is one offer of an announce.
type WSOffer struct {
	OfferID string `json:"offer_id"`
	Offer   WSSDP  `json:"offer"`
}

var errWSThrottled = errors.New("too many announces from this address: announce again later")

// errWSClose is why a connection that broke a bound is closed.
type errWSClose struct {
	code websocket.StatusCode
	why  string
}

func (e *errWSClose) Error() string { return e.why }

func wsViolation(format string, args ...any) error {
	return &errWSClose{websocket.StatusPolicyViolation, fmt.Sprintf(format, args...)}
}

// serveWS runs one WebSocket connection until it closes.
func (t *Tracker) serveWS(w http.ResponseWriter, r *http.Request) {
	from, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		t.refuse(w, r, http.StatusBadRequest, fmt.Errorf("cannot tell the address of %q", r.RemoteAddr))
		return
	}
	h := &t.ws
	ip := from.Addr().Unmap().WithZone("")
	src, hasSrc := Source(ip)
	if !h.enter(src, hasSrc) {
		w.Header().Set("Retry-After", "60")
		t.refuse(w, r, http.StatusServiceUnavailable, errors.New("too many WebSocket peers: announce again later"))
		return
	}
	defer h.exit(src, hasSrc)
	// The connection outlives the request: no deadline of the server's
	// (nor of an embedder's writer) may cut it.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
	// Browsers send an Origin; any site may use an open tracker, as
	// WebTorrent's are, and what it relays is public (SDPs).
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		t.log.Debug("websocket upgrade failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	c.SetReadLimit(MaxWSMessage)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	conn := &wsConn{send: make(chan []byte, wsSendQueue), cancel: cancel,
		peers: map[swarmKey]PeerID{}, pending: map[wsOffer]time.Time{}}
	if !h.track(conn) {
		c.Close(websocket.StatusGoingAway, "the tracker is shutting down")
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.wsWrite(ctx, c, conn)
	}()
	err = t.wsRead(ctx, c, conn, ip)
	h.leave(conn, t, ip)
	// Close before the writer stops: a write cut by its context would
	// drop the connection without the close frame that says why.
	var bye *errWSClose
	switch {
	case errors.As(err, &bye):
		t.log.Debug("websocket peer closed", "remote", r.RemoteAddr, "why", bye.why)
		c.Close(bye.code, bye.why)
	default:
		c.Close(websocket.StatusNormalClosure, "")
	}
	cancel()
	<-done
}

// wsWrite sends what is queued for conn until ctx ends.
func (t *Tracker) wsWrite(ctx context.Context, c *websocket.Conn, conn *wsConn) {
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-conn.send:
			conn.queued.Add(-int64(len(b)))
			wctx, cancel := context.WithTimeout(ctx, wsWriteTimeout)
			err := c.Write(wctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				conn.cancel()
				return
			}
		}
	}
}

// queue queues m to conn; a connection whose queue is full (wsSendQueue
// messages or wsSendBytes) is not reading and is closed rather than
// waited for. It reports whether m was queued.
func (conn *wsConn) queue(m *WSMessage) bool {
	b, err := json.Marshal(m)
	if err != nil {
		return false
	}
	if conn.queued.Add(int64(len(b))) > wsSendBytes {
		conn.queued.Add(-int64(len(b)))
		conn.cancel()
		return false
	}
	select {
	case conn.send <- b:
		return true
	default:
		conn.queued.Add(-int64(len(b)))
		conn.cancel()
		return false
	}
}

// roomLocked reports whether conn may be relayed one more offer, once the
// offers it left unanswered past wsOfferTTL are forgotten: a peer that
// ignores offers (it has all the peers it wants) must not be left out of
// the swarm's offers for good.
func (conn *wsConn) roomLocked(now time.Time) bool {
	if len(conn.pending) < maxWSPending {
		return true
	}
	for o, at := range conn.pending {
		if now.Sub(at) > wsOfferTTL {
			delete(conn.pending, o)
		}
	}
	return len(conn.pending) < maxWSPending
}

// wsRead reads conn's messages and acts on them until it fails or breaks a
// bound.
func (t *Tracker) wsRead(ctx context.Context, c *websocket.Conn, conn *wsConn, ip netip.Addr) error {
	tokens, last := float64(wsBurst), t.cfg.Now()
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return err
		}
		now := t.cfg.Now()
		tokens = min(wsBurst, tokens+now.Sub(last).Seconds()*wsRate)
		last = now
		if tokens < 1 {
			return wsViolation("more than %d messages a second", wsRate)
		}
		tokens--
		if typ != websocket.MessageText {
			return &errWSClose{websocket.StatusUnsupportedData, "JSON text messages only"}
		}
		var m WSMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return &errWSClose{websocket.StatusInvalidFramePayloadData, "not JSON"}
		}
		if err := t.wsHandle(ctx, conn, ip, &m); err != nil {
			var bye *errWSClose
			if errors.As(err, &bye) {
				return err
			}
			// A refusal of this announce alone: say why, go on.
			conn.queue(&WSMessage{Action: "announce", Root: m.Root, Size: m.Size, Error: err.Error()})
		}
	}
}

func (t *Tracker) wsHandle(ctx context.Context, conn *wsConn, ip netip.Addr, m *WSMessage) error {
	if m.Action != "announce" {
		return fmt.Errorf("%w: action %q (want announce)", errBadRequest, m.Action)
	}
	root, err := manifest.ParseHash(m.Root)
	if err != nil || m.Size <= 0 || m.Size > manifest.MaxSize {
		return fmt.Errorf("%w: root and size must name a file", errBadRequest)
	}
	id, err := ParsePeerID(m.PeerID)
	if err != nil {
		return fmt.Errorf("%w: %w", errBadRequest, err)
	}
	key := swarmKey{root, m.Size}
	if m.Answer != nil {
		return t.ws.relayAnswer(conn, key, id, m, t.cfg.Now())
	}
	if m.Left == nil {
		return fmt.Errorf("%w: an announce needs left", errBadRequest)
	}
	if len(m.Offers) > MaxWSOffers {
		return wsViolation("%d offers in one announce, at most %d", len(m.Offers), MaxWSOffers)
	}
	for _, o := range m.Offers {
		if len(o.OfferID) == 0 || len(o.OfferID) > maxWSOfferID || o.Offer.Type != "offer" {
			return fmt.Errorf("%w: an offer needs an offer_id of 1 to %d characters and an SDP of type offer", errBadRequest, maxWSOfferID)
		}
	}
	// The source's announces count as over HTTP: a connection's own rate
	// starts afresh with each connection, which costs a client nothing.
	if src, ok := Source(ip); ok && t.limiter != nil {
		if ok, _ := t.limiter.allow(src, t.cfg.Now()); !ok {
			t.metrics.throttled.Add(1)
			return errWSThrottled
		}
	}
	sctx, cancel := context.WithTimeout(ctx, t.cfg.StoreTimeout)
	res, err := t.AnnounceContext(sctx, AnnounceRequest{Root: root, Size: m.Size, ID: id, Left: *m.Left,
		Event: m.Event, NumWant: wsAnnounceNumber}, netip.AddrPortFrom(ip, 0))
	cancel()
	if err != nil {
		return err
	}
	now := t.cfg.Now()
	native := false
	for _, o := range m.Offers {
		native = native || strings.HasPrefix(o.OfferID, NativeOfferMark)
	}
	view, err := t.ws.join(conn, key, id, *m.Left, native, m.Event == EventStopped, t.cfg.MaxPeersPerSwarm, now)
	if err != nil {
		return err
	}
	conn.queue(&WSMessage{Action: "announce", Root: m.Root, Size: m.Size,
		Interval: int64(res.Interval / time.Second), SwarmSize: &res.SwarmSize, Complete: &res.Complete,
		WebRTCPeers: &view.peers, WebRTCDownloading: &view.downloading, WebRTCRecent: &view.recent})
	if m.Event != EventStopped {
		t.ws.relayOffers(key, id, m, native, now)
	}
	return nil
}

// wsView is what an announce's answer tells of the swarm's other WebRTC
// peers on this tracker.
type wsView struct {
	peers, downloading, recent int
}

// join records that conn is peer id of swarm key, with left bytes to go
// (or, stopped, that it left it), and returns what the answer tells of
// the swarm's other peers.
func (h *wsHub) join(conn *wsConn, key swarmKey, id PeerID, left int64, native, stopped bool, maxPeers int, now time.Time) (wsView, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropEmptiedLocked(now)
	if h.swarms == nil {
		h.swarms = map[swarmKey]*wsSwarm{}
	}
	sw := h.swarms[key]
	if old, ok := conn.peers[key]; ok && old != id {
		return wsView{}, fmt.Errorf("%w: one peer ID per swarm and connection", errBadRequest)
	}
	if stopped {
		if sw != nil && sw.peers[id] != nil && sw.peers[id].conn == conn {
			h.removeLocked(key, sw, id, now)
			delete(conn.peers, key)
		}
		return h.viewLocked(sw, id, now), nil
	}
	var mem *wsMember
	if sw != nil {
		mem = sw.peers[id]
	}
	if mem != nil && mem.conn != conn {
		return wsView{}, fmt.Errorf("%w: peer ID %s is another connection's", errBadRequest, id)
	}
	if _, ok := conn.peers[key]; !ok {
		if len(conn.peers) >= maxWSSwarms {
			return wsView{}, wsViolation("more than %d swarms on one connection", maxWSSwarms)
		}
		if sw != nil && len(sw.peers) >= maxPeers {
			return wsView{}, fmt.Errorf("the swarm has %d WebRTC peers on this tracker, its most: try later", len(sw.peers))
		}
	}
	if sw == nil {
		sw = &wsSwarm{peers: map[PeerID]*wsMember{}}
		h.swarms[key] = sw
	}
	view := h.viewLocked(sw, id, now)
	if mem == nil {
		mem = &wsMember{conn: conn, joined: now}
		sw.peers[id] = mem
		sw.arrivals[sw.next] = wsArrival{id, now}
		sw.next = (sw.next + 1) % wsArrivals
	}
	mem.left = left
	mem.native = mem.native || native
	conn.peers[key] = id
	return view, nil
}

// viewLocked is what an answer to id tells of the swarm's other peers.
func (h *wsHub) viewLocked(sw *wsSwarm, id PeerID, now time.Time) wsView {
	var v wsView
	if sw == nil {
		return v
	}
	for pid, p := range sw.peers {
		if pid == id {
			continue
		}
		v.peers++
		if p.left > 0 {
			v.downloading++
		}
	}
	v.recent = sw.recent(id, now)
	return v
}

// removeLocked takes id out of swarm key; a swarm left empty is kept
// wsRecent for its arrivals, then dropped (dropEmptiedLocked).
func (h *wsHub) removeLocked(key swarmKey, sw *wsSwarm, id PeerID, now time.Time) {
	delete(sw.peers, id)
	if len(sw.peers) == 0 {
		sw.emptied = now
		h.emptied = append(h.emptied, wsEmptied{key, now})
	}
}

// dropEmptiedLocked drops the swarms emptied more than wsRecent ago that
// no one joined since.
func (h *wsHub) dropEmptiedLocked(now time.Time) {
	n := 0
	for ; n < len(h.emptied) && now.Sub(h.emptied[n].at) >= wsRecent; n++ {
		if sw := h.swarms[h.emptied[n].key]; sw != nil && len(sw.peers) == 0 && now.Sub(sw.emptied) >= wsRecent {
			delete(h.swarms, h.emptied[n].key)
		}
	}
	h.emptied = h.emptied[n:]
}

// relayOffers sends each offer of m, from peer id, to a different other
// peer of the swarm that has room for one more pending offer: those still
// downloading first, then the seeds, the latest arrivals first in each;
// a native peer's offers (native) to no peer known to be native.
func (h *wsHub) relayOffers(key swarmKey, id PeerID, m *WSMessage, native bool, now time.Time) {
	if len(m.Offers) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	sw := h.swarms[key]
	if sw == nil {
		return
	}
	var to []*wsMember
	for pid, p := range sw.peers {
		if pid != id && !(native && p.native) && p.conn.roomLocked(now) {
			to = append(to, p)
		}
	}
	// A peer still holding an offer of id's unanswered comes after those
	// that do not: it is linked to id already or busy, and an offerer's
	// offers must reach every peer in turn, not the same few each time.
	waiting := map[*wsMember]bool{}
	for _, p := range to {
		for o := range p.conn.pending {
			if o.key == key && o.from == id {
				waiting[p] = true
				break
			}
		}
	}
	slices.SortFunc(to, func(a, b *wsMember) int {
		if (a.left > 0) != (b.left > 0) {
			if a.left > 0 {
				return -1
			}
			return 1
		}
		if waiting[a] != waiting[b] {
			if waiting[b] {
				return -1
			}
			return 1
		}
		return b.joined.Compare(a.joined)
	})
	for i, o := range m.Offers {
		if i >= len(to) {
			break
		}
		offer := o.Offer
		if to[i].conn.queue(&WSMessage{Action: "announce", Root: m.Root, Size: m.Size, PeerID: id.String(), OfferID: o.OfferID, Offer: &offer}) {
			to[i].conn.pending[wsOffer{key, id, o.OfferID}] = now
		}
	}
}

// relayAnswer sends conn's answer, as from peer id, to the peer whose
// offer it answers, if id is conn's in that swarm and that offer was
// relayed to conn, not answered yet nor past wsOfferTTL.
func (h *wsHub) relayAnswer(conn *wsConn, key swarmKey, id PeerID, m *WSMessage, now time.Time) error {
	to, err := ParsePeerID(m.ToPeerID)
	if err != nil {
		return fmt.Errorf("%w: to_peer_id: %w", errBadRequest, err)
	}
	if m.Answer.Type != "answer" {
		return fmt.Errorf("%w: an answer's SDP has type answer", errBadRequest)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if mine, ok := conn.peers[key]; !ok || mine != id {
		// Else a peer could answer as another and have it banned.
		return fmt.Errorf("%w: peer ID %s did not announce on this connection", errBadRequest, id)
	}
	o := wsOffer{key, to, m.OfferID}
	if at, ok := conn.pending[o]; !ok || now.Sub(at) > wsOfferTTL {
		delete(conn.pending, o)
		return fmt.Errorf("%w: no offer %q of %s awaits an answer here", errBadRequest, m.OfferID, to)
	}
	delete(conn.pending, o)
	if sw := h.swarms[key]; sw != nil && sw.peers[to] != nil {
		sw.peers[to].conn.queue(&WSMessage{Action: "announce", Root: m.Root, Size: m.Size, PeerID: id.String(), OfferID: m.OfferID, Answer: m.Answer})
	}
	return nil
}

// track adds conn to the connections CloseWebSockets ends, and forgets
// it when it ends; false once they were ended.
func (h *wsHub) track(conn *wsConn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if h.open == nil {
		h.open = map[*wsConn]bool{}
	}
	h.open[conn] = true
	return true
}

// CloseWebSockets ends every WebSocket connection and refuses new ones.
// An http.Server's Shutdown does not wait for a connection taken over
// by a WebSocket: call this from its RegisterOnShutdown (origin.Serve
// does), or the connections outlive the server.
func (t *Tracker) CloseWebSockets() {
	h := &t.ws
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for conn := range h.open {
		conn.cancel()
	}
}

// leave forgets conn in every swarm it announced in, and tells the store
// those peers stopped.
func (h *wsHub) leave(conn *wsConn, t *Tracker, ip netip.Addr) {
	h.mu.Lock()
	now := t.cfg.Now()
	left := make(map[swarmKey]PeerID, len(conn.peers))
	for key, id := range conn.peers {
		if sw := h.swarms[key]; sw != nil && sw.peers[id] != nil && sw.peers[id].conn == conn {
			h.removeLocked(key, sw, id, now)
		}
		left[key] = id
	}
	conn.peers = nil
	delete(h.open, conn)
	h.mu.Unlock()
	for key, id := range left {
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.StoreTimeout)
		t.AnnounceContext(ctx, AnnounceRequest{Root: key.root, Size: key.size, ID: id, Event: EventStopped, NumWant: wsAnnounceNumber},
			netip.AddrPortFrom(ip, 0))
		cancel()
	}
}

// WSPeers returns the WebRTC peers connected in the swarm of root and
// size, for tests and the dashboard.
func (t *Tracker) WSPeers(root manifest.Hash, size int64) int {
	t.ws.mu.Lock()
	defer t.ws.mu.Unlock()
	if sw := t.ws.swarms[swarmKey{root, size}]; sw != nil {
		return len(sw.peers)
	}
	return 0
}
