package tracker

import (
	"crypto/ed25519"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/sign"
)

// TestPrivateTracker: a tracker given the origin's key answers only
// announces that carry a token of that key for their swarm and peer and
// are signed by the peer's key, and refuses the others with 403 without
// counting them in.
func TestPrivateTracker(t *testing.T) {
	origin := sign.GenerateKey()
	h := newHarness(t, Config{Tokens: sign.NewVerifier(origin.Public().(ed25519.PublicKey))})
	now := h.clock.Now()
	type member struct {
		key ed25519.PrivateKey
		p   testPeer
	}
	newMember := func(i int) member {
		k := sign.GenerateKey()
		p := peer(i)
		p.id = PeerID(sign.PeerIDOf(k.Public().(ed25519.PublicKey)))
		return member{k, p}
	}
	a, b, thief := newMember(1), newMember(2), newMember(3)
	tokenOf := func(m member) sign.Token { return sign.Issue(origin, testRoot, testSize, m.p.id, now.Add(time.Hour)) }
	request := func(m member) AnnounceRequest {
		return AnnounceRequest{Root: testRoot, Size: testSize, ID: m.p.id, Port: m.p.port, Left: testSize, Event: EventStarted}
	}
	send := func(from testPeer, r AnnounceRequest) (int, string) {
		q := url.Values{}
		r.addTo(q)
		rec := h.serve("GET", q.Encode(), netip.AddrPortFrom(from.ip, 51234).String())
		return rec.Code, rec.Body.String()
	}
	signed := func(m member, tok sign.Token, at time.Time) AnnounceRequest {
		r := request(m)
		r.Sign(m.key, tok, at)
		return r
	}
	// The thief holds a's token (seen on a wire), and one of its own for
	// a's ID (an origin issues one for any key it is shown).
	stolen := signed(thief, tokenOf(a), now)
	stolen.ID = a.p.id
	stolen.Sig = sign.SignAnnounce(thief.key, stolen.signedFields())
	replayed := signed(a, tokenOf(a), now)
	replayed.Port++ // a's signed announce, altered
	otherKey := signed(a, sign.Issue(sign.GenerateKey(), testRoot, testSize, a.p.id, now.Add(time.Hour)), now)
	for _, c := range []struct {
		name string
		r    AnnounceRequest
		want string
	}{
		{"no token", request(a), "private"},
		{"token, unsigned", func() AnnounceRequest { r := request(a); r.Token = tokenOf(a).String(); return r }(), "key"},
		{"another peer's token", signed(a, tokenOf(b), now), "not for this swarm and peer"},
		{"another key's token", otherKey, "not trusted"},
		{"expired", signed(a, sign.Issue(origin, testRoot, testSize, a.p.id, now), now), "expired"},
		{"stolen token, the thief's key", stolen, "not the peer ID's"},
		{"altered after signing", replayed, "not signed by the peer's key"},
		{"signed long ago", signed(a, tokenOf(a), now.Add(-time.Hour)), "from the tracker's clock"},
	} {
		if code, body := send(a.p, c.r); code != http.StatusForbidden || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want 403 saying %q", c.name, code, body, c.want)
		}
	}
	if m := h.metrics(); m["stampede_tracker_announces_unauthorized_total"] != 8 || m["stampede_tracker_swarms"] != 0 {
		t.Errorf("metrics after refusals: %v", m)
	}
	for _, m := range []member{a, b} {
		if code, body := send(m.p, signed(m, tokenOf(m), now)); code != http.StatusOK {
			t.Fatalf("%v with its token: %d %s", m.p.id, code, body)
		}
	}
	if n, _, _ := h.tr.SwarmSize(testRoot, testSize); n != 2 {
		t.Errorf("swarm_size %d, want the 2 admitted", n)
	}
	// What the client sends is what the tracker reads.
	r := signed(a, tokenOf(a), now)
	q := url.Values{}
	r.addTo(q)
	back, err := parseAnnounce(q.Encode())
	if err != nil || back.Token != r.Token || back.Key != r.Key || back.Sig != r.Sig || back.Time != r.Time {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	if _, err := parseAnnounce(query(testRoot, peer(1), EventNone, 0, 0) + "&token=" + strings.Repeat("A", 2*sign.TokenLen+1)); err == nil {
		t.Error("a token too long was parsed")
	}
}
