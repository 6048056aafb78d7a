package tracker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// FuzzWSMessage: whatever a WebSocket peer sends, decoded as the tracker
// decodes it and handled, neither panics nor grows a connection's state
// past its bounds: the swarms it is in, the offers awaiting its answer,
// the bytes queued to it.
func FuzzWSMessage(f *testing.F) {
	root, size := testRoot.String(), int64(testSize)
	for _, s := range []string{
		fmt.Sprintf(`{"action":"announce","root":%q,"size":%d,"peer_id":%q,"left":0}`, root, size, peer(1).id.String()),
		fmt.Sprintf(`{"action":"announce","root":%q,"size":%d,"peer_id":%q,"left":5,"offers":[{"offer_id":"x","offer":{"type":"offer","sdp":"v=0"}}]}`, root, size, peer(1).id.String()),
		fmt.Sprintf(`{"action":"announce","root":%q,"size":%d,"peer_id":%q,"to_peer_id":%q,"offer_id":"x","answer":{"type":"answer","sdp":"v=0"}}`, root, size, peer(1).id.String(), peer(2).id.String()),
		fmt.Sprintf(`{"action":"announce","root":%q,"size":%d,"peer_id":%q,"left":0,"event":"stopped"}`, root, size, peer(1).id.String()),
		`{"action":"scrape"}`, `{"size":-1}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m WSMessage
		if json.Unmarshal(b, &m) != nil {
			return
		}
		tr := New(Config{Logger: testLogger(t), AnnounceRate: -1})
		newConn := func() *wsConn {
			_, cancel := context.WithCancel(t.Context())
			conn := &wsConn{send: make(chan []byte, wsSendQueue), cancel: cancel,
				peers: map[swarmKey]PeerID{}, pending: map[wsOffer]time.Time{}}
			tr.ws.track(conn)
			return conn
		}
		// Another peer of the swarm, so that offers have somewhere to go.
		other := newConn()
		left := int64(0)
		if err := tr.wsHandle(t.Context(), other, netip.MustParseAddr("192.0.2.2"),
			&WSMessage{Action: "announce", Root: testRoot.String(), Size: testSize, PeerID: peer(2).id.String(), Left: &left}); err != nil {
			t.Fatalf("the other peer's announce: %v", err)
		}
		conn := newConn()
		for range 3 { // the same message again, as a peer repeating itself would
			tr.wsHandle(t.Context(), conn, netip.MustParseAddr("192.0.2.1"), &m)
		}
		tr.ws.mu.Lock()
		defer tr.ws.mu.Unlock()
		for _, c := range []*wsConn{conn, other} {
			if len(c.peers) > maxWSSwarms || len(c.pending) > maxWSPending {
				t.Errorf("a connection in %d swarms with %d offers pending", len(c.peers), len(c.pending))
			}
			if q := c.queued.Load(); q > wsSendBytes || len(c.send) > wsSendQueue {
				t.Errorf("%d bytes in %d messages queued to a connection", q, len(c.send))
			}
		}
	})
}
