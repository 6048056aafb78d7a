package rtcpeer

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/webrtc/v4"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

// loopbackAPI is the tests' pion: loopback candidates included, so that
// the tests need no other interface.
func loopbackAPI(detach bool) *webrtc.API {
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	if detach {
		se.DetachDataChannels()
		se.EnableDataChannelBlockWrite(true)
	}
	return webrtc.NewAPI(webrtc.WithSettingEngine(se))
}

// fakeBrowser offers a data channel through the tracker's WebSocket, as
// webpeer/js/swarm.js does, with the offer ID given.
type fakeBrowser struct {
	pc   *webrtc.PeerConnection
	dc   *webrtc.DataChannel
	ws   *websocket.Conn
	got  chan []byte // messages received on the channel
	open chan struct{}
}

func newFakeBrowser(t *testing.T, ctx context.Context, announce string, root manifest.Hash, size int64, offerID string) *fakeBrowser {
	t.Helper()
	pc, err := loopbackAPI(false).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	dc, err := pc.CreateDataChannel("stampede", nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBrowser{pc: pc, dc: dc, got: make(chan []byte, 64), open: make(chan struct{})}
	dc.OnOpen(func() { close(b.open) })
	dc.OnMessage(func(m webrtc.DataChannelMessage) { b.got <- m.Data })
	o, _ := pc.CreateOffer(nil)
	pc.SetLocalDescription(o)
	<-webrtc.GatheringCompletePromise(pc)
	b.ws, _, err = websocket.Dial(ctx, tracker.WSURL(announce), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.ws.CloseNow() })
	left := size
	msg, _ := json.Marshal(message{Action: "announce", Root: root.String(), Size: size, PeerID: hex.EncodeToString(bytes.Repeat([]byte{offerID[0]}, 16)), Left: &left,
		Event: "started", Offers: []offer{{OfferID: offerID, Offer: sdp{Type: "offer", SDP: pc.LocalDescription().SDP}}}})
	if err := b.ws.Write(ctx, websocket.MessageText, msg); err != nil {
		t.Fatal(err)
	}
	_, raw, err := b.ws.Read(ctx)
	var m message
	if err != nil || json.Unmarshal(raw, &m) != nil || m.Error != "" || m.SwarmSize == nil {
		t.Fatalf("announce: %s, %v", raw, err)
	}
	return b
}

// answer waits for the answer to the offer and applies it; false when none
// comes within d.
func (b *fakeBrowser) answer(t *testing.T, ctx context.Context, d time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		_, raw, err := b.ws.Read(ctx)
		if err != nil {
			return false
		}
		var m message
		json.Unmarshal(raw, &m)
		if m.Answer != nil {
			if err := b.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: m.Answer.SDP}); err != nil {
				t.Fatal(err)
			}
			return true
		}
	}
}

func startTracker(t *testing.T) (*tracker.Tracker, string) {
	tr := tracker.New(tracker.Config{})
	srv := httptest.NewServer(tr)
	t.Cleanup(srv.Close)
	return tr, srv.URL + tracker.WellKnownPath
}

func waitPeers(t *testing.T, tr *tracker.Tracker, root manifest.Hash, size int64, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tr.WSPeers(root, size) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the tracker has %d WebRTC peers, want %d", tr.WSPeers(root, size), n)
		}
		time.Sleep(10 * time.Millisecond) // the tracker has no event to wait on
	}
}

// TestAnswerBrowser: a native seed answers a browser's offer relayed by the
// tracker; the channel comes out of Accept as a byte stream both ways,
// whatever the messages' sizes.
func TestAnswerBrowser(t *testing.T) {
	tr, announce := startTracker(t)
	rt := New(Config{})
	rt.api = loopbackAPI(true)
	defer rt.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	root, size := manifest.Hash{1, 2, 3}, int64(1<<20)
	rt.Join(ctx, announce, root, size, func() int64 { return 0 })
	waitPeers(t, tr, root, size, 1)

	b := newFakeBrowser(t, ctx, announce, root, size, "b1")
	if !b.answer(t, ctx, 10*time.Second) {
		t.Fatal("no answer to the browser's offer")
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := rt.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	var c net.Conn
	select {
	case c = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("no channel accepted")
	}
	defer c.Close()
	select {
	case <-b.open:
	case <-time.After(10 * time.Second):
		t.Fatal("the browser's channel did not open")
	}

	// Browser to native: two messages read as one stream.
	b.dc.Send(bytes.Repeat([]byte{1}, 100<<10))
	b.dc.Send(bytes.Repeat([]byte{2}, 50<<10))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	in := make([]byte, 150<<10)
	if _, err := io.ReadFull(c, in); err != nil {
		t.Fatal(err)
	}
	if in[0] != 1 || in[100<<10-1] != 1 || in[100<<10] != 2 || in[len(in)-1] != 2 {
		t.Error("the stream is not the messages in order")
	}

	// Native to browser: one write, cut into messages of chunk bytes.
	out := make([]byte, 3*chunk+5)
	for i := range out {
		out[i] = byte(i)
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for len(got) < len(out) {
		select {
		case m := <-b.got:
			if len(m) > chunk {
				t.Errorf("a message of %d bytes, want at most %d", len(m), chunk)
			}
			got = append(got, m...)
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d of %d bytes", len(got), len(out))
		}
	}
	if !bytes.Equal(got, out) {
		t.Error("the browser got other bytes than written")
	}
}

// TestAnswerBound: offers that never connect hold at most MaxPeers
// answers at once, not a peer connection each.
func TestAnswerBound(t *testing.T) {
	rt := New(Config{MaxPeers: 2})
	rt.api = loopbackAPI(true)
	defer rt.Close()
	j := &joined{t: rt, root: manifest.Hash{1}, size: 1, left: func() int64 { return 0 }, offers: map[string]*pending{}}
	j.answer(t.Context(), message{PeerID: "b", OfferID: "bad", Offer: &sdp{Type: "offer", SDP: "not an SDP"}})
	if n := j.answering.Load(); n != 0 {
		t.Errorf("%d answers waiting after an offer that could not be answered, want 0", n)
	}
	for i := range 3 {
		pc, err := loopbackAPI(false).NewPeerConnection(webrtc.Configuration{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		if _, err := pc.CreateDataChannel("stampede", nil); err != nil {
			t.Fatal(err)
		}
		o, _ := pc.CreateOffer(nil)
		pc.SetLocalDescription(o)
		<-webrtc.GatheringCompletePromise(pc)
		j.answer(t.Context(), message{PeerID: "b", OfferID: string(rune('a' + i)), Offer: &sdp{Type: "offer", SDP: pc.LocalDescription().SDP}})
	}
	if n := j.answering.Load(); n != 2 {
		t.Errorf("%d answers waiting for their channel, want 2 (MaxPeers)", n)
	}
}

// TestLinkedPeer: an answer from a peer a channel is open to already (it
// answered another offer of ours, or we one of its) closes the offer's
// peer connection instead of opening a second channel; once that channel
// closes, the peer is answered again.
func TestLinkedPeer(t *testing.T) {
	rt := New(Config{})
	rt.api = loopbackAPI(true)
	defer rt.Close()
	j := &joined{t: rt, root: manifest.Hash{1}, size: 1, left: func() int64 { return 1 }, offers: map[string]*pending{}, linked: map[string]int{}}
	pc, err := rt.newPC(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	dc, err := pc.CreateDataChannel("stampede", nil)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := pc.CreateOffer(nil)
	pc.SetLocalDescription(o)
	<-webrtc.GatheringCompletePromise(pc)
	// A valid answer, which would be applied but for the link.
	b, err := loopbackAPI(false).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.SetRemoteDescription(*pc.LocalDescription()); err != nil {
		t.Fatal(err)
	}
	a, _ := b.CreateAnswer(nil)
	b.SetLocalDescription(a)
	<-webrtc.GatheringCompletePromise(b)
	j.offers["o1"] = &pending{pc: pc, dc: dc, at: time.Now()}
	j.link("b", 1)
	if !j.isLinked("b") {
		t.Fatal("b not linked after a channel opened")
	}
	j.answered(message{PeerID: "b", OfferID: "o1", Answer: &sdp{Type: "answer", SDP: b.LocalDescription().SDP}})
	if s := pc.ConnectionState(); s != webrtc.PeerConnectionStateClosed {
		t.Errorf("the offer answered by a linked peer: connection %v, want closed", s)
	}
	if len(j.offers) != 0 {
		t.Errorf("%d offers pending, want 0", len(j.offers))
	}
	j.link("b", -1)
	if j.isLinked("b") || len(j.linked) != 0 {
		t.Errorf("b linked after its channel closed: %v", j.linked)
	}
}
