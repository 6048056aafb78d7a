package tracker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsPeer is one WebSocket client of the tests.
type wsPeer struct {
	t  *testing.T
	c  *websocket.Conn
	id PeerID
}

func dialWS(t *testing.T, srv *httptest.Server, i int) *wsPeer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+WellKnownPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return &wsPeer{t: t, c: c, id: peer(i).id}
}

func (p *wsPeer) send(m map[string]any) {
	p.t.Helper()
	m["action"] = "announce"
	if _, ok := m["root"]; !ok {
		m["root"], m["size"] = testRoot.String(), testSize
	}
	if _, ok := m["peer_id"]; !ok {
		m["peer_id"] = p.id.String()
	}
	b, _ := json.Marshal(m)
	ctx, cancel := context.WithTimeout(p.t.Context(), 5*time.Second)
	defer cancel()
	if err := p.c.Write(ctx, websocket.MessageText, b); err != nil {
		p.t.Fatal(err)
	}
}

// read returns the next message, or the error that ended the connection.
func (p *wsPeer) read() (WSMessage, error) {
	ctx, cancel := context.WithTimeout(p.t.Context(), 5*time.Second)
	defer cancel()
	_, b, err := p.c.Read(ctx)
	if err != nil {
		return WSMessage{}, err
	}
	var m WSMessage
	if err := json.Unmarshal(b, &m); err != nil {
		p.t.Fatal(err)
	}
	return m, nil
}

func (p *wsPeer) must() WSMessage {
	p.t.Helper()
	m, err := p.read()
	if err != nil {
		p.t.Fatal(err)
	}
	return m
}

func (p *wsPeer) announce(left int64, offers ...string) WSMessage {
	p.t.Helper()
	var os []map[string]any
	for _, o := range offers {
		os = append(os, map[string]any{"offer_id": o, "offer": map[string]any{"type": "offer", "sdp": "sdp of " + o}})
	}
	p.send(map[string]any{"left": left, "event": "started", "offers": os})
	m := p.must()
	if m.Error != "" || m.SwarmSize == nil {
		p.t.Fatalf("announce: %+v", m)
	}
	return m
}

func newWSServer(t *testing.T, cfg Config) (*Tracker, *httptest.Server) {
	cfg.Logger = testLogger(t)
	tr := New(cfg)
	srv := httptest.NewServer(tr)
	t.Cleanup(srv.Close)
	return tr, srv
}

// TestWSRelay: an offer reaches another peer of the swarm, its answer
// comes back to the offerer, and nothing else is relayed.
func TestWSRelay(t *testing.T) {
	tr, srv := newWSServer(t, Config{})
	seed, leech := dialWS(t, srv, 1), dialWS(t, srv, 2)
	if m := seed.announce(0); *m.SwarmSize != 1 || *m.Complete != 1 {
		t.Errorf("seed's answer %+v", m)
	}
	if m := leech.announce(testSize, "o1", "o2"); *m.SwarmSize != 2 {
		t.Errorf("leech's answer %+v", m)
	}
	if n := tr.WSPeers(testRoot, testSize); n != 2 {
		t.Errorf("WSPeers = %d, want 2", n)
	}
	// One other peer: one offer relayed, the second has no one to go to.
	o := seed.must()
	if o.PeerID != leech.id.String() || o.Offer == nil || o.Offer.SDP != "sdp of "+o.OfferID {
		t.Fatalf("seed got %+v", o)
	}
	// An answer to an offer never relayed to the seed is refused.
	seed.send(map[string]any{"to_peer_id": leech.id.String(), "offer_id": "o9", "answer": map[string]any{"type": "answer", "sdp": "x"}})
	if m := seed.must(); !strings.Contains(m.Error, "no offer") {
		t.Errorf("answer to an unknown offer: %+v", m)
	}
	seed.send(map[string]any{"to_peer_id": leech.id.String(), "offer_id": o.OfferID, "answer": map[string]any{"type": "answer", "sdp": "the answer"}})
	a := leech.must()
	if a.PeerID != seed.id.String() || a.OfferID != o.OfferID || a.Answer == nil || a.Answer.SDP != "the answer" {
		t.Fatalf("leech got %+v", a)
	}
	// Answered once: a second answer to the same offer is refused.
	seed.send(map[string]any{"to_peer_id": leech.id.String(), "offer_id": o.OfferID, "answer": map[string]any{"type": "answer", "sdp": "again"}})
	if m := seed.must(); !strings.Contains(m.Error, "no offer") {
		t.Errorf("second answer: %+v", m)
	}
	// A peer that closes leaves the swarm.
	seed.c.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	for tr.WSPeers(testRoot, testSize) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("WSPeers = %d after the seed closed, want 1", tr.WSPeers(testRoot, testSize))
		}
		time.Sleep(10 * time.Millisecond) // no event to wait on: the server notices the close on its own goroutine
	}
}

// TestWSBounds: a connection that breaks a bound is closed with a policy
// violation; a full swarm refuses newcomers without closing them.
func TestWSBounds(t *testing.T) {
	_, srv := newWSServer(t, Config{MaxPeersPerSwarm: 2})
	closedWith := func(p *wsPeer, code websocket.StatusCode) {
		t.Helper()
		for {
			_, err := p.read()
			if err == nil {
				continue
			}
			if got := websocket.CloseStatus(err); got != code {
				t.Errorf("closed with %v (%v), want %v", got, err, code)
			}
			return
		}
	}

	many := dialWS(t, srv, 1)
	var offers []string
	for i := range MaxWSOffers + 1 {
		offers = append(offers, "o"+string(rune('a'+i)))
	}
	var os []map[string]any
	for _, o := range offers {
		os = append(os, map[string]any{"offer_id": o, "offer": map[string]any{"type": "offer", "sdp": "x"}})
	}
	many.send(map[string]any{"left": 0, "offers": os})
	closedWith(many, websocket.StatusPolicyViolation)

	big := dialWS(t, srv, 2)
	big.send(map[string]any{"left": 0, "junk": strings.Repeat("x", MaxWSMessage)})
	closedWith(big, websocket.StatusMessageTooBig)

	notJSON := dialWS(t, srv, 3)
	notJSON.c.Write(t.Context(), websocket.MessageText, []byte("{"))
	closedWith(notJSON, websocket.StatusInvalidFramePayloadData)

	a, b, c := dialWS(t, srv, 4), dialWS(t, srv, 5), dialWS(t, srv, 6)
	a.announce(0)
	b.announce(0)
	c.send(map[string]any{"left": 0})
	if m := c.must(); !strings.Contains(m.Error, "most") {
		t.Errorf("third peer of a swarm of 2: %+v", m)
	}
	// Still open: a bad announce is answered, not punished.
	c.send(map[string]any{"left": 0, "root": "zz", "size": 1})
	if m, err := c.read(); err != nil || m.Error == "" {
		t.Errorf("bad root: %+v, %v", m, err)
	}

	flood := dialWS(t, srv, 7)
	for range wsBurst + 5 {
		if err := flood.c.Write(t.Context(), websocket.MessageText, []byte(`{"action":"scrape"}`)); err != nil {
			break
		}
	}
	closedWith(flood, websocket.StatusPolicyViolation)
}

// TestWSNotAdmitted: a tracker that tracks only admitted swarms refuses
// WebSocket announces to others, as it does over HTTP.
func TestWSNotAdmitted(t *testing.T) {
	tr, srv := newWSServer(t, Config{OnlyAdmitted: true})
	p := dialWS(t, srv, 1)
	p.send(map[string]any{"left": 0})
	if m := p.must(); !strings.Contains(m.Error, ErrNotTracked.Error()) {
		t.Errorf("announce to a swarm not admitted: %+v", m)
	}
	tr.Admit(testRoot, testSize)
	p.announce(0)
}

// TestWSConnsPerSource: one source holds at most MaxWSConnsPerSrc
// connections; loopback is exempt.
func TestWSConnsPerSource(t *testing.T) {
	var h wsHub
	src, ok := Source(netip.MustParseAddr("192.0.2.1"))
	for i := range MaxWSConnsPerSrc {
		if !h.enter(src, ok) {
			t.Fatalf("connection %d refused", i)
		}
	}
	if h.enter(src, ok) {
		t.Error("one connection too many admitted")
	}
	other, _ := Source(netip.MustParseAddr("192.0.2.2"))
	if !h.enter(other, true) {
		t.Error("another source refused")
	}
	h.exit(src, ok)
	if !h.enter(src, ok) {
		t.Error("a connection refused after one left")
	}
	if _, ok := Source(netip.MustParseAddr("127.0.0.1")); ok {
		t.Error("loopback has a source")
	}
}

// TestWSPending: an offer left unanswered holds a slot of the peer it
// was relayed to for wsOfferTTL only, so that a peer that ignores offers
// is offered again later; an answer comes only as from the peer ID its
// connection announced, and not past wsOfferTTL.
func TestWSPending(t *testing.T) {
	var h wsHub
	newConn := func() *wsConn {
		return &wsConn{send: make(chan []byte, 2*maxWSPending), cancel: func() { t.Error("a connection was closed") },
			peers: map[swarmKey]PeerID{}, pending: map[wsOffer]time.Time{}}
	}
	key := swarmKey{testRoot, testSize}
	offerer, ignorer := newConn(), newConn()
	for i, c := range []*wsConn{offerer, ignorer} {
		if _, err := h.join(c, key, peer(i+1).id, 1, false, false, 10, time.Unix(1_000_000, 0)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Unix(1_000_000, 0)
	offer := func(id string) {
		h.relayOffers(key, peer(1).id, &WSMessage{Root: testRoot.String(), Size: testSize,
			Offers: []WSOffer{{OfferID: id, Offer: WSSDP{Type: "offer"}}}}, false, now)
	}
	for i := range maxWSPending + 1 {
		offer(fmt.Sprint(i))
	}
	if n := len(ignorer.send); n != maxWSPending {
		t.Fatalf("%d offers relayed to a peer that answers none, want %d", n, maxWSPending)
	}
	answer := func(from PeerID, id string) error {
		return h.relayAnswer(ignorer, key, from, &WSMessage{ToPeerID: peer(1).id.String(), OfferID: id, Answer: &WSSDP{Type: "answer"}}, now)
	}
	if err := answer(peer(3).id, "1"); err == nil {
		t.Error("an answer as another peer ID was relayed")
	}
	if err := answer(peer(2).id, "1"); err != nil {
		t.Errorf("answer: %v", err)
	}
	if n := len(offerer.send); n != 1 {
		t.Errorf("%d answers reached the offerer, want 1", n)
	}
	now = now.Add(wsOfferTTL + time.Second)
	if err := answer(peer(2).id, "2"); err == nil {
		t.Error("an answer to an offer past wsOfferTTL was relayed")
	}
	offer("later")
	if n := len(ignorer.send); n != maxWSPending+1 {
		t.Errorf("%d offers relayed once the old ones expired, want %d", n, maxWSPending+1)
	}
}

// TestWSQueueBytes: a connection that does not read is closed once
// wsSendBytes wait for it, however few the messages.
func TestWSQueueBytes(t *testing.T) {
	closed := false
	c := &wsConn{send: make(chan []byte, wsSendQueue), cancel: func() { closed = true }}
	sdp := strings.Repeat("x", 16<<10)
	n := 0
	for !closed && n < wsSendQueue {
		if c.queue(&WSMessage{Offer: &WSSDP{Type: "offer", SDP: sdp}}) {
			n++
		}
	}
	if !closed || n != wsSendBytes/len(sdp)-1 {
		t.Errorf("closed %v after %d messages of %d bytes, want after %d", closed, n, len(sdp), wsSendBytes/len(sdp)-1)
	}
	if q := c.queued.Load(); q > wsSendBytes {
		t.Errorf("%d bytes queued, at most %d", q, wsSendBytes)
	}
}

// TestWSSourceRate: WebSocket announces count against their source's
// announce rate, whatever connection they come on.
func TestWSSourceRate(t *testing.T) {
	tr := New(Config{Logger: testLogger(t), AnnounceRate: 0.001, AnnounceBurst: 2})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = "192.0.2.1:4000" // a source: loopback is exempt
		tr.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p := dialWS(t, srv, 1)
	p.announce(0)
	p.announce(0)
	q := dialWS(t, srv, 2)
	q.send(map[string]any{"left": 0})
	if m := q.must(); !strings.Contains(m.Error, "too many announces") {
		t.Errorf("third announce of the source, on a new connection: %+v", m)
	}
}

// TestCloseWebSockets: CloseWebSockets ends the connections a server's
// Shutdown does not wait for, and refuses new ones.
func TestCloseWebSockets(t *testing.T) {
	tr, srv := newWSServer(t, Config{})
	p := dialWS(t, srv, 1)
	p.announce(0)
	tr.CloseWebSockets()
	if m, err := p.read(); err == nil {
		t.Errorf("read %+v after CloseWebSockets, want the connection closed", m)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+WellKnownPath, nil); err == nil {
		c.CloseNow()
		t.Error("a connection accepted after CloseWebSockets")
	}
	deadline := time.Now().Add(5 * time.Second)
	for tr.WSPeers(testRoot, testSize) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("WSPeers = %d after CloseWebSockets, want 0", tr.WSPeers(testRoot, testSize))
		}
		time.Sleep(10 * time.Millisecond) // the connection's goroutine leaves on its own
	}
}

// TestWSOrder: an announce's offers go to the peers still downloading
// first, then to the seeds, the latest arrivals first in each; a native
// peer's offers to no native peer; the answer counts the other peers,
// those downloading, and the arrivals of the last wsRecent, gone or not.
func TestWSOrder(t *testing.T) {
	var h wsHub
	key := swarmKey{testRoot, testSize}
	now := time.Unix(1_000_000, 0)
	conns := map[int]*wsConn{}
	join := func(i int, left int64, native bool) wsView {
		t.Helper()
		c := conns[i]
		if c == nil {
			c = &wsConn{send: make(chan []byte, 16), cancel: func() { t.Error("a connection was closed") },
				peers: map[swarmKey]PeerID{}, pending: map[wsOffer]time.Time{}}
			conns[i] = c
		}
		v, err := h.join(c, key, peer(i).id, left, native, false, 100, now)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// got returns the peers (by test index) an offer went to since last asked.
	got := func() []int {
		var out []int
		for i := 1; i <= len(conns); i++ {
			for len(conns[i].send) > 0 {
				<-conns[i].send
				out = append(out, i)
			}
		}
		return out
	}
	offers := func(n int, mark string) []WSOffer {
		var o []WSOffer
		for j := range n {
			o = append(o, WSOffer{OfferID: fmt.Sprint(mark, j), Offer: WSSDP{Type: "offer"}})
		}
		return o
	}
	if v := join(1, 0, false); v != (wsView{}) {
		t.Errorf("the first peer's view %+v, want none", v)
	}
	now = now.Add(time.Second)
	join(2, 0, false) // a seed, later
	now = now.Add(time.Second)
	join(3, 100, true) // a native downloader
	now = now.Add(time.Second)
	join(4, 100, false) // a browser downloading, the latest
	now = now.Add(time.Second)
	if v := join(5, 100, false); v != (wsView{peers: 4, downloading: 2, recent: 4}) {
		t.Errorf("view %+v, want 4 peers, 2 downloading, 4 recent", v)
	}
	// Offer j goes to the j-th peer in order.
	h.relayOffers(key, peer(5).id, &WSMessage{Offers: offers(4, "o")}, false, now)
	order := make([]int, 4)
	for i := 1; i <= 4; i++ {
		var m WSMessage
		json.Unmarshal(<-conns[i].send, &m)
		var j int
		fmt.Sscanf(m.OfferID, "o%d", &j)
		order[j] = i
	}
	if want := []int{4, 3, 2, 1}; !slices.Equal(order, want) {
		t.Errorf("offers went to %v, want %v (downloading, then seeds, latest first)", order, want)
	}
	for _, c := range conns {
		clear(c.pending)
	}
	// A native's offers go to no native: not to 3, nor to 5 once it
	// offered as one.
	join(5, 100, true)
	h.relayOffers(key, peer(3).id, &WSMessage{Offers: offers(4, NativeOfferMark)}, true, now)
	if g := got(); !slices.Equal(g, []int{1, 2, 4}) {
		t.Errorf("a native's offers went to %v, want [1 2 4]", g)
	}
	// Arrivals are remembered wsRecent, gone or not.
	h.mu.Lock()
	h.removeLocked(key, h.swarms[key], peer(1).id, now)
	h.mu.Unlock()
	if v := join(4, 0, false); v != (wsView{peers: 3, downloading: 2, recent: 4}) {
		t.Errorf("view once 1 left %+v, want 3 peers, 2 downloading, 4 recent", v)
	}
	now = now.Add(time.Second + time.Millisecond)
	if v := join(4, 0, false); v.recent != 3 {
		t.Errorf("%d recent arrivals after 1 went out of the window, want 3", v.recent)
	}
	// A swarm left empty is kept wsRecent, then dropped.
	h.mu.Lock()
	for i := 2; i <= 5; i++ {
		h.removeLocked(key, h.swarms[key], peer(i).id, now)
	}
	h.mu.Unlock()
	now = now.Add(time.Second)
	if v := join(6, 100, false); v.peers != 0 || v.recent != 3 {
		t.Errorf("in an emptied swarm, view %+v, want 0 peers, 3 recent", v)
	}
	h.mu.Lock()
	h.removeLocked(key, h.swarms[key], peer(6).id, now)
	h.mu.Unlock()
	now = now.Add(wsRecent)
	h.mu.Lock()
	h.dropEmptiedLocked(now)
	_, kept := h.swarms[key]
	h.mu.Unlock()
	if kept {
		t.Error("an emptied swarm is still kept wsRecent after")
	}
}
