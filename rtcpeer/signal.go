package rtcpeer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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
	offerTTL     = 15 * time.Second // an offer unanswered this long is dropped
	gatherWait   = 3 * time.Second  // ICE candidates gathered at most this long
	redialMin    = time.Second
	redialMax    = 30 * time.Second
	offersAtOnce = 3
	nativeMark   = "n-" // opens a native peer's offer_id
)

// message is the signalling's message (tracker/ws.go).
type (
	message = tracker.WSMessage
	offer   = tracker.WSOffer
	sdp     = tracker.WSSDP
)

// joined is one swarm's signalling on one tracker.
type joined struct {
	t     *Transport
	url   string
	root  manifest.Hash
	size  int64
	id    string
	left  func() int64
	peers atomic.Int32 // channels open
	// answering counts the offers answered whose channel is not open
	// yet: each holds a peer connection (sockets, goroutines) for up to
	// offerTTL, so a flood of offers must not make one each.
	answering atomic.Int32
	mu        sync.Mutex // guards the following
	offers    map[string]*pending
	ws        *websocket.Conn
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
	u := tracker.WSURL(announce)
	if u == "" {
		return
	}
	var id [16]byte
	rand.Read(id[:])
	j := &joined{t: t, url: u, root: root, size: size, id: hex.EncodeToString(id[:]), left: left, offers: map[string]*pending{}}
	go j.run(ctx)
}

func (j *joined) run(ctx context.Context) {
	wait := redialMin
	for ctx.Err() == nil {
		err := j.session(ctx)
		if ctx.Err() != nil {
			break
		}
		j.t.log.Debug("webrtc: signalling lost", "tracker", j.url, "err", err, "again in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		wait = min(2*wait, redialMax)
	}
	j.mu.Lock()
	for id, p := range j.offers {
		p.pc.Close()
		delete(j.offers, id)
	}
	j.mu.Unlock()
}

// session is one WebSocket connection to the tracker.
func (j *joined) session(ctx context.Context) error {
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
		case m.Offer != nil && !strings.HasPrefix(m.OfferID, nativeMark):
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
		pc, err := j.t.newPC()
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
	oid := nativeMark + hex.EncodeToString(id[:])
	dc.OnOpen(func() { j.opened(pc, dc) })
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
		if time.Since(p.at) > offerTTL {
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
	if err := p.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: m.Answer.SDP}); err != nil {
		j.t.log.Debug("webrtc: bad answer", "err", err)
		p.pc.Close()
		return
	}
	// Not connected in time: give it up.
	time.AfterFunc(offerTTL, func() {
		if p.pc.ConnectionState() != webrtc.PeerConnectionStateConnected {
			p.pc.Close()
		}
	})
}

// answer answers a browser's offer, unless MaxPeers channels are open or
// MaxPeers answers wait for theirs.
func (j *joined) answer(ctx context.Context, m message) {
	if int(j.answering.Add(1)) > j.t.cfg.MaxPeers || int(j.peers.Load()) >= j.t.cfg.MaxPeers {
		j.answering.Add(-1)
		return
	}
	var once sync.Once
	answered := func() { once.Do(func() { j.answering.Add(-1) }) }
	pc, err := j.t.newPC()
	if err != nil {
		answered()
		return
	}
	pc.OnDataChannel(func(dc *webrtc.DataChannel) {
		dc.OnOpen(func() { answered(); j.opened(pc, dc) })
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
		if pc.ConnectionState() != webrtc.PeerConnectionStateConnected {
			pc.Close()
		}
	})
}

// opened hands an open channel to the transport's Accept.
func (j *joined) opened(pc *webrtc.PeerConnection, dc *webrtc.DataChannel) {
	j.peers.Add(1)
	c, err := newConn(pc, dc, func() { j.peers.Add(-1) })
	if err != nil {
		j.peers.Add(-1)
		pc.Close()
		return
	}
	j.t.deliver(c)
}
