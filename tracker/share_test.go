package tracker

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestMakersMost: makers knows the most any source made as swarms come
// and go.
func TestMakersMost(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var m makers
	want := make(map[netip.Prefix]int)
	srcs := []netip.Prefix{hostMaker}
	for i := range 8 {
		srcs = append(srcs, netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 32))
	}
	for step := range 5000 {
		src := srcs[rng.IntN(len(srcs))]
		d := 1
		if want[src] > 0 && rng.IntN(2) == 0 {
			d = -1
		}
		want[src] += d
		m.count(src, d)
		most := 0
		for _, k := range want {
			most = max(most, k)
		}
		if m.most != most || m.made[src] != want[src] {
			t.Fatalf("step %d: most %d, made %d; want %d, %d", step, m.most, m.made[src], most, want[src])
		}
	}
}

func TestMaker(t *testing.T) {
	for ip, want := range map[string]netip.Prefix{
		"127.0.0.1":        hostMaker,
		"::1":              hostMaker,
		"::ffff:127.0.0.1": hostMaker,
		"127.0.0.2":        netip.MustParsePrefix("127.0.0.2/32"),
		"2001:db8:1:2::9":  netip.MustParsePrefix("2001:db8:1:2::/64"),
	} {
		if got := maker(netip.MustParseAddr(ip)); got != want {
			t.Errorf("maker(%s) = %v, want %v", ip, got, want)
		}
	}
}
