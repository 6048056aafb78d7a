package origin

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/pion/stun/v3"
)

// TestSTUN: a binding request is answered with the address it came from;
// anything else is not answered.
func TestSTUN(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ServeSTUN(ctx, pc, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	c, err := net.DialUDP("udp", nil, pc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))

	// Not STUN, then a STUN request of another method: no answer; then
	// a binding request, whose answer is the first to come.
	c.Write([]byte("hello"))
	alloc := stun.MustBuild(stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest))
	c.Write(alloc.Raw)
	req := stun.MustBuild(stun.TransactionID, stun.BindingRequest, stun.Fingerprint)
	if _, err := c.Write(req.Raw); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	res := &stun.Message{Raw: buf[:n]}
	if err := res.Decode(); err != nil {
		t.Fatal(err)
	}
	if res.Type != stun.BindingSuccess || res.TransactionID != req.TransactionID {
		t.Fatalf("answer %v, transaction %x; want binding success to %x", res.Type, res.TransactionID, req.TransactionID)
	}
	var xor stun.XORMappedAddress
	if err := xor.GetFrom(res); err != nil {
		t.Fatal(err)
	}
	if me := c.LocalAddr().(*net.UDPAddr); !xor.IP.Equal(me.IP) || xor.Port != me.Port {
		t.Errorf("mapped address %v, want %v", &xor, me)
	}
	if err := stun.Fingerprint.Check(res); err != nil {
		t.Error(err)
	}
}
