package origin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/pion/turn/v5"

	"github.com/stampede-dev/stampede/tracker"
)

// TURNConfig configures ServeTURN.
type TURNConfig struct {
	// RelayIP is the address relays are allocated on and told to
	// clients: the server's public IP. Required.
	RelayIP net.IP
	// Secret is the shared secret of the time-limited credentials
	// (webpeer hands them out with peer.json; draft-uberti-behave-turn-rest):
	// a TURN server without credentials is an open relay. Required.
	Secret string
	// Realm is the TURN realm. Default "stampede".
	Realm string
}

// ServeTURN runs a TURN server (RFC 8656, pion/turn) on pc until ctx is
// done, for visitors whose NATs let no direct path through. It relays
// only for clients whose credentials check against cfg.Secret, and never
// to a loopback, private, link-local, shared (100.64.0.0/10),
// multicast or unspecified address, one of the server's own (RelayIP and
// its interfaces'), or an IPv6 address that carries an IPv4 one refused
// (NAT64, 6to4): a relay must not become a way into the server or its
// networks. Since every visitor gets credentials (peer.json), they bound
// nothing by themselves: a source (an IPv4 address, an IPv6 /64) holds at
// most MaxTURNAllocsPerSrc relays at once, and all together MaxTURNAllocs.
func ServeTURN(ctx context.Context, pc net.PacketConn, cfg TURNConfig, log *slog.Logger) error {
	if cfg.RelayIP == nil || cfg.RelayIP.IsUnspecified() {
		return errors.New("origin: turn: a relay IP is required (the server's public address)")
	}
	if cfg.Secret == "" {
		return errors.New("origin: turn: a secret is required: without credentials a TURN server is an open relay")
	}
	if cfg.Realm == "" {
		cfg.Realm = "stampede"
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	own := ownAddrs(cfg.RelayIP)
	var q turnQuota
	s, err := turn.NewServer(turn.ServerConfig{
		Realm:        cfg.Realm,
		AuthHandler:  turn.LongTermTURNRESTAuthHandler(cfg.Secret, nil),
		QuotaHandler: q.allow,
		EventHandler: turn.EventHandler{
			OnAllocationCreated: func(src, _ net.Addr, _, _, _ string, _ net.Addr, _ int) { q.add(src, 1) },
			OnAllocationDeleted: func(src, _ net.Addr, _, _, _ string) { q.add(src, -1) },
		},
		PacketConnConfigs: []turn.PacketConnConfig{{
			PacketConn:            pc,
			RelayAddressGenerator: &turn.RelayAddressGeneratorStatic{RelayAddress: cfg.RelayIP, Address: "0.0.0.0"},
			PermissionHandler: func(client net.Addr, peer net.IP) bool {
				ok := relayable(peer, own)
				if !ok {
					log.Debug("turn: relay refused", "client", client.String(), "peer", peer.String())
				}
				return ok
			},
		}},
	})
	if err != nil {
		return fmt.Errorf("origin: turn: %w", err)
	}
	<-ctx.Done()
	return s.Close()
}

// Bounds of the TURN relay's allocations (each a UDP socket and its
// traffic).
const (
	MaxTURNAllocs       = 1024
	MaxTURNAllocsPerSrc = 8
)

// turnQuota counts the allocations, in all and by source (tracker.Source;
// loopback is exempt). Its zero value is ready.
type turnQuota struct {
	mu    sync.Mutex // guards the following
	total int
	bySrc map[netip.Prefix]int
}

func turnSource(a net.Addr) (netip.Prefix, bool) {
	u, ok := a.(*net.UDPAddr)
	if !ok {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(u.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	return tracker.Source(ip)
}

// allow is the turn.QuotaHandler: whether src may have one more.
func (q *turnQuota) allow(_, _ string, src net.Addr) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.total >= MaxTURNAllocs {
		return false
	}
	p, ok := turnSource(src)
	return !ok || q.bySrc[p] < MaxTURNAllocsPerSrc
}

// add counts an allocation of src made (n 1) or gone (n -1).
func (q *turnQuota) add(src net.Addr, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.total += n
	if p, ok := turnSource(src); ok {
		if q.bySrc == nil {
			q.bySrc = map[netip.Prefix]int{}
		}
		if q.bySrc[p] += n; q.bySrc[p] <= 0 {
			delete(q.bySrc, p)
		}
	}
}

var (
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10") // RFC 6598, carrier-grade NAT
	nat64       = netip.MustParsePrefix("64:ff9b::/96")  // RFC 6052: the last 32 bits are an IPv4 address
	sixToFour   = netip.MustParsePrefix("2002::/16")     // RFC 3056: bits 16-47 are an IPv4 address
)

// ownAddrs is the server's own addresses: relay's and its interfaces'.
func ownAddrs(relay net.IP) []netip.Addr {
	var own []netip.Addr
	if a, ok := netip.AddrFromSlice(relay); ok {
		own = append(own, a.Unmap())
	}
	addrs, _ := net.InterfaceAddrs() // none: RelayIP still is
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				own = append(own, ip.Unmap())
			}
		}
	}
	return own
}

// relayable reports whether a TURN relay may send to ip: a public unicast
// address, not one of own.
func relayable(ip net.IP, own []netip.Addr) bool {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	a = a.Unmap()
	if slices.Contains(own, a) {
		return false
	}
	if b := a.As16(); nat64.Contains(a) {
		return relayable(net.IP(b[12:16]), own)
	} else if sixToFour.Contains(a) {
		return relayable(net.IP(b[2:6]), own)
	}
	return a.IsGlobalUnicast() && !a.IsPrivate() && !sharedSpace.Contains(a)
}
