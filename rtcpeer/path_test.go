package rtcpeer

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/stampede-dev/stampede/node"
)

func TestClassify(t *testing.T) {
	const (
		host  = webrtc.ICECandidateTypeHost
		srflx = webrtc.ICECandidateTypeSrflx
		prflx = webrtc.ICECandidateTypePrflx
		relay = webrtc.ICECandidateTypeRelay
	)
	for _, c := range []struct {
		local, remote webrtc.ICECandidateType
		mine, theirs  []string
		want          string
	}{
		{host, host, nil, nil, node.PathDirect},
		{host, host, []string{"198.19.0.11"}, []string{"198.19.0.11"}, node.PathDirect}, // behind one NAT
		{host, host, []string{"198.19.0.11"}, nil, node.PathPunched},                    // ours maps our packets
		{host, host, nil, []string{"198.19.0.12"}, node.PathPunched},
		{host, host, []string{"198.19.0.11"}, []string{"198.19.0.12"}, node.PathPunched},
		{host, prflx, nil, nil, node.PathPunched},
		{srflx, host, []string{"198.19.0.11"}, nil, node.PathPunched},
		{prflx, srflx, nil, nil, node.PathPunched},
		{relay, srflx, nil, nil, node.PathRelayed},
		{host, relay, nil, nil, node.PathRelayed},
	} {
		if got := classify(c.local, c.remote, c.mine, c.theirs); got != c.want {
			t.Errorf("classify(%v, %v, %v, %v) = %s, want %s", c.local, c.remote, c.mine, c.theirs, got, c.want)
		}
	}
}

func TestEndOf(t *testing.T) {
	sdp := "v=0\r\n" +
		"a=candidate:1 1 udp 2130706431 10.88.1.2 40000 typ host\r\n" +
		"a=candidate:2 1 udp 1694498815 198.19.0.11 40000 typ srflx raddr 0.0.0.0 rport 40000\r\n" +
		"a=candidate:3 1 udp 1694498815 198.19.0.11 40002 typ srflx raddr 0.0.0.0 rport 40002\r\n" +
		"a=candidate:4 1 udp 16777215 198.19.0.1 50000 typ relay raddr 198.19.0.11 rport 40003\r\n" +
		"a=candidate:5 1 udp 2130706431 198.19.0.21 40004 typ host\r\n" +
		"a=candidate:6 1 udp 1694498815 198.19.0.21 40004 typ srflx raddr 0.0.0.0 rport 40004\r\n"
	hosts, nat := endOf(sdp)
	if !slices.Equal(nat, []string{"198.19.0.11"}) {
		t.Errorf("NAT addresses %v, want [198.19.0.11] (a srflx that is a host address of ours is no NAT's)", nat)
	}
	if !slices.Equal(hosts, []string{"10.88.1.2", "198.19.0.21"}) {
		t.Errorf("host addresses %v, want [10.88.1.2 198.19.0.21]", hosts)
	}
	if _, nat := endOf("v=0\r\na=candidate:1 1 udp 1 198.19.0.21 1 typ host\r\n"); nat != nil {
		t.Errorf("NAT addresses of host candidates = %v, want none", nat)
	}
}

// TestAsSeen: a reflexive candidate at a host address of its end is that
// host candidate (a check came before the description; a public host's
// STUN answer), else its type holds.
func TestAsSeen(t *testing.T) {
	hosts := []string{"198.19.0.21"}
	for _, c := range []struct {
		typ  webrtc.ICECandidateType
		addr string
		want webrtc.ICECandidateType
	}{
		{webrtc.ICECandidateTypePrflx, "198.19.0.21", webrtc.ICECandidateTypeHost},
		{webrtc.ICECandidateTypeSrflx, "198.19.0.21", webrtc.ICECandidateTypeHost},
		{webrtc.ICECandidateTypePrflx, "198.19.0.11", webrtc.ICECandidateTypePrflx},
		{webrtc.ICECandidateTypeSrflx, "198.19.0.11", webrtc.ICECandidateTypeSrflx},
		{webrtc.ICECandidateTypeRelay, "198.19.0.21", webrtc.ICECandidateTypeRelay},
	} {
		if got := asSeen(&webrtc.ICECandidate{Typ: c.typ, Address: c.addr}, hosts); got != c.want {
			t.Errorf("asSeen(%v at %s) = %v, want %v", c.typ, c.addr, got, c.want)
		}
	}
}

func TestParseSiteICE(t *testing.T) {
	got, err := parseSiteICE([]byte(`{"enabled":true,"ice_servers":["stun:o.example:3478",
		{"urls":"turn:o.example:3479","username":"1700000000:s","credential":"c"},
		{"urls":["turn:a:1","turn:b:2"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []webrtc.ICEServer{{URLs: []string{"stun:o.example:3478"}},
		{URLs: []string{"turn:o.example:3479"}, Username: "1700000000:s", Credential: "c"},
		{URLs: []string{"turn:a:1", "turn:b:2"}}}
	if len(got) != len(want) {
		t.Fatalf("got %d servers, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if !slices.Equal(got[i].URLs, want[i].URLs) || got[i].Username != want[i].Username || got[i].Credential != want[i].Credential {
			t.Errorf("server %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if got, err := parseSiteICE([]byte(`{"enabled":false,"ice_servers":["stun:x:1"]}`)); err != nil || got != nil {
		t.Errorf("a site whose peer is off: %v, %v; want none", got, err)
	}
	if _, err := parseSiteICE([]byte(`{"enabled":true,"ice_servers":[{"urls":3}]}`)); err == nil {
		t.Error("urls of a number: no error")
	}
}

func TestMinDuration(t *testing.T) {
	var m minDuration
	for _, d := range []time.Duration{0, 30 * time.Millisecond, -1, 50 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond} {
		m.sample(d)
	}
	if got := m.get(); got != 20*time.Millisecond {
		t.Errorf("min = %v, want 20ms", got)
	}
}

// pair connects two peer connections of loopback pion over one data
// channel and returns the offerer's end as a conn, and the answerer's
// channel, detached.
func pair(t testing.TB) (*conn, *webrtc.DataChannel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	a, err := loopbackAPI(true).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := loopbackAPI(true).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	dc, err := a.CreateDataChannel("stampede", nil)
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	dc.OnOpen(func() { close(opened) })
	theirs := make(chan *webrtc.DataChannel, 1)
	b.OnDataChannel(func(d *webrtc.DataChannel) { d.OnOpen(func() { theirs <- d }) })
	o, _ := a.CreateOffer(nil)
	a.SetLocalDescription(o)
	<-webrtc.GatheringCompletePromise(a)
	if err := b.SetRemoteDescription(*a.LocalDescription()); err != nil {
		t.Fatal(err)
	}
	ans, _ := b.CreateAnswer(nil)
	b.SetLocalDescription(ans)
	<-webrtc.GatheringCompletePromise(b)
	if err := a.SetRemoteDescription(*b.LocalDescription()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-opened:
	case <-ctx.Done():
		t.Fatal("the channel did not open")
	}
	var bdc *webrtc.DataChannel
	select {
	case bdc = <-theirs:
	case <-ctx.Done():
		t.Fatal("the answerer's channel did not open")
	}
	c, err := newConn(a, dc, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bdc
}

// TestPathConn: a channel tells the node its path (loopback: direct) and
// a round trip once traffic has gone both ways; not what the other end has
// not acknowledged (Unacked: -1).
func TestPathConn(t *testing.T) {
	c, theirs := pair(t)
	if c.Path() != node.PathDirect {
		t.Errorf("path %q over loopback, want direct", c.Path())
	}
	raw, err := theirs.Detach()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4<<20)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(out)
		wrote <- err
	}()
	buf := make([]byte, 256<<10)
	for got := 0; got < len(out); {
		n, err := raw.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if u := c.Unacked(); u != -1 {
		t.Errorf("Unacked %d, want -1: the upload turns would wait on it", u)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.MinRTT() <= 0 {
		if time.Now().After(deadline) {
			t.Fatal("no round trip after 4 MiB both ways")
		}
		time.Sleep(10 * time.Millisecond) // SCTP has no event to wait on
	}
	if rtt := c.MinRTT(); rtt > time.Second {
		t.Errorf("a round trip of %v over loopback", rtt)
	}
}

// BenchmarkChannel: bytes through one data channel over loopback, as the
// peer protocol writes them (16 KiB messages), read as a stream.
func BenchmarkChannel(b *testing.B) {
	c, theirs := pair(b)
	raw, err := theirs.Detach()
	if err != nil {
		b.Fatal(err)
	}
	const each = 4 << 20
	out := make([]byte, each)
	buf := make([]byte, 256<<10)
	b.SetBytes(each)
	for b.Loop() {
		done := make(chan error, 1)
		go func() {
			_, err := c.Write(out)
			done <- err
		}()
		for got := 0; got < each; {
			n, err := raw.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
