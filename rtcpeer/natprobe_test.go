package rtcpeer

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/stampede-dev/stampede/origin"
)

// TestProbeNAT: a peer that two STUN servers see at its socket's own
// address has no NAT, and needs no relay; one that no server answers
// cannot tell, and offers its relay. (The kinds of NAT are the NAT
// testbed's: TestNATTraversal.)
func TestProbeNAT(t *testing.T) {
	stunAt := func() string {
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go origin.ServeSTUN(t.Context(), pc, nil)
		return pc.LocalAddr().String()
	}
	a, b := stunAt(), stunAt()
	silent, err := net.ListenPacket("udp4", "127.0.0.1:0") // never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ice := func(urls ...string) []webrtc.ICEServer {
		var out []webrtc.ICEServer
		for _, u := range urls {
			out = append(out, webrtc.ICEServer{URLs: []string{u}})
		}
		return out
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		name  string
		ice   []webrtc.ICEServer
		want  natType
		relay bool
	}{
		{"two servers", ice("stun:"+a, "turn:"+b+"?transport=udp"), natNone, false},
		{"one server, one silent", ice("stun:"+a, "stun:"+silent.LocalAddr().String()), natNone, false},
		{"no server", nil, natUnknown, true},
		{"TCP only", ice("turn:" + b + "?transport=tcp"), natUnknown, true},
		{"silent", ice("stun:" + silent.LocalAddr().String()), natUnknown, true},
	} {
		got := probeNAT(ctx, c.ice)
		if got != c.want || got.needsRelay() != c.relay {
			t.Errorf("%s: %v (relay %v), want %v (relay %v)", c.name, got, got.needsRelay(), c.want, c.relay)
		}
	}
	for k, relay := range map[natType]bool{natMapping: false, natSymmetric: true, natBehind: true} {
		if k.needsRelay() != relay {
			t.Errorf("%v: relay %v, want %v", k, k.needsRelay(), relay)
		}
	}
}
