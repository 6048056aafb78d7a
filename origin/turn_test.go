package origin

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/turn/v5"
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
	client := func(secret string) *turn.Client {
		t.Helper()
		user, pass, err := turn.GenerateLongTermTURNRESTCredentials(secret, "visitor", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c, err := turn.NewClient(&turn.ClientConfig{TURNServerAddr: pc.LocalAddr().String(), STUNServerAddr: pc.LocalAddr().String(),
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

// TestTURNQuota: a source holds at most MaxTURNAllocsPerSrc relays, and
// has room again once one goes; loopback is exempt.
func TestTURNQuota(t *testing.T) {
	var q turnQuota
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
}
