package codns

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestPeersOrder(t *testing.T) {
	addrs := []netip.AddrPort{
		netip.MustParseAddrPort("10.0.0.1:53"),
		netip.MustParseAddrPort("10.0.0.2:53"),
		netip.MustParseAddrPort("10.0.0.3:53"),
		netip.MustParseAddrPort("10.0.0.1:53"),
	}
	p := NewPeers(addrs)
	if p.Len() != 3 {
		t.Fatalf("%d peers, want 3 (one given twice)", p.Len())
	}
	now := time.Unix(0, 0)
	// The same order for the same name, whatever its case and whatever the
	// order of the list (another node's).
	q := NewPeers([]netip.AddrPort{addrs[2], addrs[1], addrs[0]})
	first := map[netip.AddrPort]int{}
	for i := range 300 {
		name := fmt.Sprintf("host%d.example.", i)
		o := p.Order(name, now)
		if len(o) != 3 || !slices.Equal(o, q.Order(name, now)) || !slices.Equal(o, p.Order("HOST"+name[4:], now)) {
			t.Fatalf("%s: orders differ: %v %v", name, o, q.Order(name, now))
		}
		first[o[0]]++
	}
	for a, n := range first {
		if n < 60 {
			t.Errorf("%v first for %d of 300 names, want about 100", a, n)
		}
	}
}

func TestPeersFailingGoLast(t *testing.T) {
	a := netip.MustParseAddrPort("10.0.0.1:53")
	b := netip.MustParseAddrPort("10.0.0.2:53")
	p := NewPeers([]netip.AddrPort{a, b})
	now := time.Unix(0, 0)
	name := "x.example."
	for i := 0; p.Order(name, now)[0] != a; i++ {
		name = fmt.Sprintf("x%d.example.", i)
	}
	for range peerFailures - 1 {
		p.Result(a, false, now)
	}
	if p.Order(name, now)[0] != a || p.down(now) != 0 {
		t.Fatal("a demoted before its third failure in a row")
	}
	p.Result(a, false, now)
	if o := p.Order(name, now); o[0] != b || o[1] != a || p.down(now) != 1 {
		t.Errorf("after 3 failures: %v, want b first, a last", o)
	}
	if o := p.Order(name, now.Add(peerBackoff)); o[0] != a {
		t.Errorf("after the backoff: %v, want a first again", o)
	}
	p.Result(a, false, now.Add(peerBackoff))
	if o := p.Order(name, now.Add(peerBackoff)); o[0] != b {
		t.Errorf("a failure after the backoff: %v, want a demoted again", o)
	}
	p.Result(a, true, now.Add(peerBackoff))
	if o := p.Order(name, now.Add(peerBackoff)); o[0] != a {
		t.Errorf("after a success: %v, want a first", o)
	}
}
