package rtcpeer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/webrtc/v4"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

// Signalling timings.
const (
	offerEvery   = 2 * time.Second  // announces with offers while short of peers and not done
	answerWait   = 8 * time.Second  // an offer unanswered this long is dropped: the answerer gathers for gatherWait at most
	offerTTL     = 15 * time.Second // a channel answered and not open this long is dropped
	gatherWait   = 3 * time.Second  // ICE candidates gathered at most this long
	redialMin    = time.Second
	redialMax    = 30 * time.Second
	offersAtOnce = 3
	autoRecheck  = 5 * time.Minute // Config.Auto: a peer not behind a NAT probes again after this long
	// nativeMark opens the offer_id of a native peer that knows it has
	// a public address (probeNAT): the tracker relays it to no other
	// peer that made one, as they reach each other over TCP
	// (tracker/ws.go). natMark opens the offer_id of a native peer
	// behind a NAT, or that cannot tell (no STUN): it goes to every kind
	// of peer, as a browser's does.
	nativeMark = tracker.NativeOfferMark
	natMark    = "nat-"
)

// message is the signalling's message (tracker/ws.go).
type (
	message = tracker.WSMessage
	offer   = tracker.WSOffer
	sdp     = tracker.WSSDP
)

// joined is one swarm's signalling on one tracker.
type joined struct {
	t    *Transport
	url  string
	site string // the announce URL: its host serves peer.json
	root manifest.Hash
	size int64
	id   string
	left func() int64
	// dial takes a channel we offered as the node's outbound connection
	// (node.Node.Opened); nil: it goes to Accept, as one answered does.
	dial  func(net.Conn) bool
	peers atomic.Int32 // channels open
	// answering counts the offers answered whose channel is not open
	// yet: each holds a peer connection (sockets, goroutines) for up to
	// offerTTL, so a flood of offers must not make one each.
	answering atomic.Int32
	mu        sync.Mutex // guards the following
	offers    map[string]*pending
	ws        *websocket.Conn
	ice       []webrtc.ICEServer // the site's (siteICE)
	nat       natType            // what the site's STUN and TURN servers tell of our NAT (probeNAT)
	// linked counts the open channels by the other end's signalling ID:
	// a peer already linked is neither answered nor taken again.
	linked map[string]int
}

type pending struct {
	pc *webrtc.PeerConnection
	dc *webrtc.DataChannel
	at time.Time
}

// Join takes part in the WebRTC signalling of the swarm of root and size
// on the tracker at announce (an http or https announce URL: its
// WebSocket) until ctx ends: it announces, offers channels while it has
// fewer than MaxPeers and left() is not 0, and answers browsers' offers.
// The channels come out of Accept.
func (t *Transport) Join(ctx context.Context, announce string, root manifest.Hash, size int64, left func() int64) {
	t.join(ctx, announce, root, size, left, nil)
}

// join is Join with the channels we offer handed to dial (nil: to
// Accept).
func (t *Transport) join(ctx context.Context, announce string, root manifest.Hash, size int64, left func() int64, dial func(net.Conn) bool) {
	u := tracker.WSURL(announce)
	if u == "" {
		return
	}
	var id [16]byte
	rand.Read(id[:])
	j := &joined{t: t, url: u, site: announce, root: root, size: size, id: hex.EncodeToString(id[:]), left: left, dial: dial,
		offers: map[string]*pending{}, linked: map[string]int{}}
	t.log.Debug("webrtc: joining", "tracker", u, "id", j.id)
	go j.run(ctx)
}

func (j *joined) run(ctx context.Context) {
	wait := redialMin
	for ctx.Err() == nil {
		err := j.session(ctx)
		if ctx.Err() != nil {
			break
		}
		again := wait
		if errors.Is(err, errDialled) {
			again = autoRecheck
			j.t.log.Debug("webrtc: not needed: the peer can be dialled", "tracker", j.url, "again in", again)
		} else {
			j.t.log.Debug("webrtc: signalling lost", "tracker", j.url, "err", err, "again in", again)
			wait = min(2*wait, redialMax)
		}
		select {
		case <-time.After(again):
		case <-ctx.Done():
		}
	}
	j.mu.Lock()
	for id, p := range j.offers {
		p.pc.Close()
		delete(j.offers, id)
	}
	j.mu.Unlock()
}

// session is one WebSocket connection to the tracker. The site's ICE
// servers are read again at each, so that TURN credentials (valid for a
// day) stay fresh for as long as the daemon stays.
func (j *joined) session(ctx context.Context) error {
	if !j.t.cfg.NoSiteICE {
		ice, err := siteICE(ctx, j.t.cfg.HTTPClient, j.site)
		if err != nil {
			j.t.log.Debug("webrtc: no ICE servers from the site", "tracker", j.site, "err", err)
		}
		j.mu.Lock()
		j.ice = ice
		j.mu.Unlock()
	}
	nat := probeNAT(ctx, append(slices.Clip(j.iceAll()), j.t.configICE()...))
	j.t.log.Debug("webrtc: NAT", "id", j.id, "kind", nat, "relay", nat.needsRelay())
	j.mu.Lock()
	j.nat = nat
	j.mu.Unlock()
	if j.t.cfg.Auto && nat != natMapping && nat != natSymmetric && nat != natBehind {
		return errDialled
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ws, _, err := websocket.Dial(dctx, j.url, nil)
	cancel()
	if err != nil {
		return err
	}
	ws.SetReadLimit(tracker.MaxWSMessage)
	j.mu.Lock()
	j.ws = ws
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.ws = nil
		j.mu.Unlock()
		ws.CloseNow()
	}()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		j.announce(sctx, tracker.EventStarted)
		tick := time.NewTicker(offerEvery)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-sctx.Done():
				wctx, cancel := context.WithTimeout(context.Background(), time.Second)
				j.send(wctx, &message{Left: ptr(j.left()), Event: tracker.EventStopped})
				cancel()
				return
			case <-tick.C:
			}
			j.expire()
			if (j.left() > 0 && int(j.peers.Load()) < j.t.cfg.MaxPeers) || time.Since(last) > 15*time.Second {
				j.announce(sctx, tracker.EventNone)
				last = time.Now()
			}
		}
	}()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return err
		}
		var m message
		if json.Unmarshal(b, &m) != nil || m.Root != j.root.String() || m.Size != j.size {
			continue
		}
		switch {
		case m.Error != "":
			j.t.log.Debug("webrtc: tracker refused", "err", m.Error)
		case m.Offer != nil && !j.isLinked(m.PeerID):
			go j.answer(sctx, m)
		case m.Answer != nil:
			j.answered(m)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func (j *joined) send(ctx context.Context, m *message) error {
	m.Action, m.Root, m.Size, m.PeerID = "announce", j.root.String(), j.size, j.id
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	j.mu.Lock()
	ws := j.ws
	j.mu.Unlock()
	if ws == nil {
		return nil
	}
	return ws.Write(ctx, websocket.MessageText, b)
}

// gathered waits for pc's ICE candidates, so that its SDP carries them.
func gathered(ctx context.Context, pc *webrtc.PeerConnection) {
	select {
	case <-webrtc.GatheringCompletePromise(pc):
	case <-time.After(gatherWait):
	case <-ctx.Done():
	}
}

// announce announces, with offers while peers are wanted.
func (j *joined) announce(ctx context.Context, event tracker.Event) {
	left := j.left()
	want := 0
	if left > 0 {
		want = min(offersAtOnce, j.t.cfg.MaxPeers-int(j.peers.Load()))
	}
	var offers []offer
	for range max(want, 0) {
		pc, err := j.t.newPC(j.iceServers())
		if err != nil {
			j.t.log.Warn("webrtc: no peer connection", "err", err)
			break
		}
		dc, err := pc.CreateDataChannel("stampede", nil)
		if err == nil {
			err = j.offer(ctx, pc, dc, &offers)
		}
		if err != nil {
			pc.Close()
			j.t.log.Debug("webrtc: no offer", "err", err)
		}
	}
	j.send(ctx, &message{Left: &left, Event: event, Offers: offers})
}

func (j *joined) offer(ctx context.Context, pc *webrtc.PeerConnection, dc *webrtc.DataChannel, offers *[]offer) error {
	o, err := pc.CreateOffer(nil)
	if err != nil {
		return err
	}
	if err := pc.SetLocalDescription(o); err != nil {
		return err
	}
	gathered(ctx, pc)
	var id [8]byte
	rand.Read(id[:])
	j.mu.Lock()
	mark := map[bool]string{true: nativeMark, false: natMark}[j.nat == natNone]
	j.mu.Unlock()
	oid := mark + hex.EncodeToString(id[:])
	j.mu.Lock()
	j.offers[oid] = &pending{pc: pc, dc: dc, at: time.Now()}
	j.mu.Unlock()
	*offers = append(*offers, offer{OfferID: oid, Offer: sdp{Type: "offer", SDP: pc.LocalDescription().SDP}})
	return nil
}

// expire drops the offers no one answered in time.
func (j *joined) expire() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for id, p := range j.offers {
		if time.Since(p.at) > answerWait {
			p.pc.Close()
			delete(j.offers, id)
		}
	}
}

// answered applies the answer to one of our offers.
func (j *joined) answered(m message) {
	j.mu.Lock()
	p := j.offers[m.OfferID]
	delete(j.offers, m.OfferID)
	j.mu.Unlock()
	if p == nil {
		return
	}
	if j.isLinked(m.PeerID) {
		// It answered another offer of ours, or we one of its.
		p.pc.Close()
		return
	}
	j.t.log.Debug("webrtc: answered", "id", j.id, "peer", m.PeerID, "offer", m.OfferID, "candidates", candidates(m.Answer.SDP), "ours", candidates(p.pc.LocalDescription().SDP))
	p.dc.OnOpen(func() { j.opened(p.pc, p.dc, m.PeerID, true) })
	if err := p.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: m.Answer.SDP}); err != nil {
		j.t.log.Debug("webrtc: bad answer", "err", err)
		p.pc.Close()
		return
	}
	// Not connected in time: give it up.
	time.AfterFunc(offerTTL, func() {
		if st := p.pc.ConnectionState(); st != webrtc.PeerConnectionStateConnected && st != webrtc.PeerConnectionStateClosed {
			j.t.log.Debug("webrtc: no channel", "id", j.id, "peer", m.PeerID, "offered", true, "state", st)
			p.pc.Close()
		}
	})
}

// answer answers a browser's offer, unless MaxPeers channels are open or
// MaxPeers answers wait for theirs.
func (j *joined) answer(ctx context.Context, m message) {
	if int(j.answering.Add(1)) > j.t.cfg.MaxPeers || int(j.peers.Load()) >= j.t.cfg.MaxPeers {
		j.answering.Add(-1)
		j.t.log.Debug("webrtc: offer not answered: full", "id", j.id, "peer", m.PeerID)
		return
	}
	j.t.log.Debug("webrtc: answering", "id", j.id, "peer", m.PeerID, "offer", m.OfferID, "candidates", candidates(m.Offer.SDP))
	var once sync.Once
	answered := func() { once.Do(func() { j.answering.Add(-1) }) }
	pc, err := j.t.newPC(j.iceServers())
	if err != nil {
		answered()
		return
	}
	pc.OnDataChannel(func(dc *webrtc.DataChannel) {
		dc.OnOpen(func() { answered(); j.opened(pc, dc, m.PeerID, false) })
	})
	err = pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: m.Offer.SDP})
	var a webrtc.SessionDescription
	if err == nil {
		a, err = pc.CreateAnswer(nil)
	}
	if err == nil {
		err = pc.SetLocalDescription(a)
	}
	if err != nil {
		j.t.log.Debug("webrtc: cannot answer", "err", err)
		pc.Close()
		answered()
		return
	}
	gathered(ctx, pc)
	if err := j.send(ctx, &message{ToPeerID: m.PeerID, OfferID: m.OfferID, Answer: &sdp{Type: "answer", SDP: pc.LocalDescription().SDP}}); err != nil {
		pc.Close()
		answered()
		return
	}
	time.AfterFunc(offerTTL, func() {
		answered()
		if st := pc.ConnectionState(); st != webrtc.PeerConnectionStateConnected && st != webrtc.PeerConnectionStateClosed {
			j.t.log.Debug("webrtc: no channel", "id", j.id, "peer", m.PeerID, "offered", false, "state", st)
			pc.Close()
		}
	})
}

// opened hands an open channel to the node, when we offered it and it
// takes ours (dial), else to the transport's Accept. peer is the other
// end's signalling ID.
func (j *joined) opened(pc *webrtc.PeerConnection, dc *webrtc.DataChannel, peer string, offered bool) {
	j.peers.Add(1)
	j.link(peer, 1)
	c, err := newConn(pc, dc, func() { j.peers.Add(-1); j.link(peer, -1) })
	if err != nil {
		j.peers.Add(-1)
		j.link(peer, -1)
		pc.Close()
		return
	}
	j.t.log.Debug("webrtc: channel open", "id", j.id, "peer", peer, "offered", offered, "path", c.path, "remote", c.remote.String())
	if offered && j.dial != nil {
		if !j.dial(c) {
			c.Close()
		}
		return
	}
	j.t.deliver(c)
}

// link counts a channel opened (d 1) or closed (d -1) to peer.
func (j *joined) link(peer string, d int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.linked[peer] += d; j.linked[peer] <= 0 {
		delete(j.linked, peer)
	}
}

// isLinked reports whether a channel to peer is open.
func (j *joined) isLinked(peer string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.linked[peer] > 0
}

// errDialled ends a session of Config.Auto's: the peer is not behind a
// NAT, or cannot tell.
var errDialled = errors.New("rtcpeer: not behind a NAT")

// iceAll is the site's ICE servers, as last read.
func (j *joined) iceAll() []webrtc.ICEServer {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ice
}

// iceServers are the site's ICE servers, as last read, without its
// TURN servers unless our NAT needs a relay (natType.needsRelay).
func (j *joined) iceServers() []webrtc.ICEServer {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.nat.needsRelay() {
		return j.ice
	}
	var out []webrtc.ICEServer
	for _, s := range j.ice {
		if !isTURN(s) {
			out = append(out, s)
		}
	}
	return out
}

// isTURN reports whether s is a TURN server.
func isTURN(s webrtc.ICEServer) bool {
	return slices.ContainsFunc(s.URLs, func(u string) bool { return strings.HasPrefix(u, "turn:") || strings.HasPrefix(u, "turns:") })
}

// candidates sums up the ICE candidates of an SDP by type, for the log:
// "host=2 srflx=1 relay=1".
func candidates(sdp string) string {
	n := map[string]int{}
	for line := range strings.Lines(sdp) {
		if !strings.HasPrefix(line, "a=candidate:") {
			continue
		}
		f := strings.Fields(line)
		if i := slices.Index(f, "typ"); i >= 0 && i+1 < len(f) {
			n[f[i+1]]++
		}
	}
	var b strings.Builder
	for _, typ := range []string{"host", "srflx", "prflx", "relay"} {
		if n[typ] > 0 {
			fmt.Fprintf(&b, "%s%s=%d", map[bool]string{true: " "}[b.Len() > 0], typ, n[typ])
		}
	}
	return b.String()
}
