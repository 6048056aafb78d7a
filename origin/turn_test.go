package origin

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pion/turn/v5"

	"github.com/stampede-dev/stampede/internal/metrics/metricstest"
)

func TestRelayable(t *testing.T) {
	for ip, want := range map[string]bool{
		"8.8.8.8": true, "2001:4860::8888": true, "192.0.2.1": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.1.1": false, "fe80::1": false, "fc00::1": false, "100.64.0.1": false, "224.0.0.1": false,
		"0.0.0.0": false, "::": false, "::ffff:10.0.0.1": false, "255.255.255.255": false,
		"203.0.113.7": false, "64:ff9b::7f00:1": false, "64:ff9b::a00:1": false, "2002:c0a8:101::1": false,
		"64:ff9b::808:808": true, "2002:808:808::1": true,
	} {
		// 203.0.113.7 stands for the server's own public address.
		if got := relayable(net.ParseIP(ip), []netip.Addr{netip.MustParseAddr("203.0.113.7")}); got != want {
			t.Errorf("relayable(%s) = %v, want %v", ip, got, want)
		}
	}
}

// TestTURN: a client with the secret's credentials gets a relay; one
// with other credentials does not; and the relay refuses a permission to
// a loopback or private address.
func TestTURN(t *testing.T) {
	if err := ServeTURN(t.Context(), nil, TURNConfig{RelayIP: net.IPv4(127, 0, 0, 1)}, nil); err == nil {
		t.Error("a TURN server without a secret started")
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ServeTURN(ctx, pc, TURNConfig{RelayIP: net.IPv4(127, 0, 0, 1), Secret: "s3cret"}, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	client := func(secret string) *turn.Client { return turnClient(t, pc.LocalAddr(), secret) }
	if _, err := client("wrong").Allocate(); err == nil {
		t.Error("a relay allocated with other credentials")
	}
	c := client("s3cret")
	relay, err := c.Allocate()
	if err != nil {
		t.Fatalf("allocation with the secret's credentials: %v", err)
	}
	defer relay.Close()
	for _, peer := range []string{"127.0.0.1:9", "10.0.0.1:9", "192.168.0.1:9"} {
		addr, _ := net.ResolveUDPAddr("udp4", peer)
		if err := c.CreatePermission(addr); err == nil {
			t.Errorf("permission to relay to %s granted", peer)
		}
	}
	pub, _ := net.ResolveUDPAddr("udp4", "192.0.2.1:9")
	if err := c.CreatePermission(pub); err != nil {
		t.Errorf("permission to a public address: %v", err)
	}
}

// turnClient is a TURN client of server with credentials of secret,
// closed when the test ends.
func turnClient(t *testing.T, server net.Addr, secret string) *turn.Client {
	t.Helper()
	user, pass, err := turn.GenerateLongTermTURNRESTCredentials(secret, "visitor", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := turn.NewClient(&turn.ClientConfig{TURNServerAddr: server.String(), STUNServerAddr: server.String(),
		Username: user, Password: pass, Realm: "stampede", Conn: conn, RTO: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); conn.Close() })
	return c
}

// TestTURNQuota: a source holds at most MaxTURNAllocsPerSrc relays, and
// has room again once one goes; loopback is exempt.
func TestTURNQuota(t *testing.T) {
	q := turnQuota{stats: new(TURNStats)}
	src := &net.UDPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1}
	other := &net.UDPAddr{IP: net.ParseIP("192.0.2.2"), Port: 1}
	for range MaxTURNAllocsPerSrc {
		if !q.allow("", "", src) {
			t.Fatal("refused within the quota")
		}
		q.add(src, 1)
	}
	if q.allow("", "", src) {
		t.Error("one relay too many allowed")
	}
	if !q.allow("", "", other) || !q.allow("", "", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}) {
		t.Error("another source refused")
	}
	q.add(src, -1)
	if !q.allow("", "", src) {
		t.Error("refused after a relay went")
	}
	if got := q.stats.Counts().Refused; got != 1 {
		t.Errorf("%d refusals counted, want 1", got)
	}
}

// TestTURNStats: the counts of a relay's allocations and bytes, each way,
// and on the server's /metrics.
func TestTURNStats(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var st TURNStats
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- ServeTURN(ctx, pc, TURNConfig{RelayIP: net.IPv4(127, 0, 0, 1), Secret: "s3cret", Stats: &st,
			permit: func(net.IP) bool { return true }}, nil)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	c := turnClient(t, pc.LocalAddr(), "s3cret")
	relay, err := c.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Counts(); got.Allocations != 1 || got.Active != 1 {
		t.Errorf("after one allocation: %+v", got)
	}
	peer, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	// Every datagram the client sends the peer through the relay, the
	// peer echoes back twice.
	const rounds, size = 20, 1000
	buf := make([]byte, 2048)
	for range rounds {
		if _, err := relay.WriteTo(make([]byte, size), peer.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := peer.ReadFrom(buf)
		if err != nil || n != size {
			t.Fatalf("the peer read %d bytes: %v", n, err)
		}
		for range 2 {
			peer.WriteTo(buf[:n], from)
			relay.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, _, err := relay.ReadFrom(buf); err != nil || n != size {
				t.Fatalf("the client read %d bytes back: %v", n, err)
			}
		}
	}
	// The relay counts a datagram once its write returns, which may come
	// after the echo it caused has reached the client: wait for the
	// counts to settle.
	got := st.Counts()
	for end := time.Now().Add(2 * time.Second); got.ToPeers < rounds*size && time.Now().Before(end); got = st.Counts() {
		time.Sleep(5 * time.Millisecond)
	}
	if got.ToPeers != rounds*size || got.FromPeers != 2*rounds*size {
		t.Errorf("relayed %d bytes to the peer and %d back, want %d and %d", got.ToPeers, got.FromPeers, rounds*size, 2*rounds*size)
	}
	ts := start(t, Config{Dir: t.TempDir()}, func(s *Server) {
		if err := s.AddTURN(&st); err != nil {
			t.Fatal(err)
		}
	})
	_, page := ts.do(t, "GET", "/metrics")
	metricstest.Check(t, page)
	text := string(page)
	for _, want := range []string{
		"stampede_origin_turn_allocations_total 1\n",
		fmt.Sprintf("stampede_origin_turn_relayed_bytes_total{direction=\"to_peer\"} %d\n", rounds*size),
		fmt.Sprintf("stampede_origin_turn_relayed_bytes_total{direction=\"from_peer\"} %d\n", 2*rounds*size),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, text)
		}
	}
	relay.Close() // deletes the allocation (a refresh of lifetime 0)
	for end := time.Now().Add(5 * time.Second); st.Counts().Active != 0 && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
	}
	if got := st.Counts(); got.Active != 0 || got.Allocations != 1 {
		t.Errorf("after the relay closed: %+v", got)
	}
}
