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
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pion/turn/v5"

	"github.com/stampede-dev/stampede/internal/metrics"
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
	// Stats, if not nil, counts the relay's allocations and the bytes it
	// relays (for /metrics: it is a prometheus.Collector).
	Stats *TURNStats
	// permit says whom the relay may send to; nil: public addresses not
	// the server's (relayable). Tests relay on loopback with it.
	permit func(net.IP) bool
}

// TURNStats counts a TURN relay's work: the allocations (relays) made,
// held and refused, and the bytes relayed, each way. The relay's cost
// falls on the server's uplink twice: what it receives from a peer it
// sends to its client, and what it receives from its client it sends to a
// peer. Its zero value is ready.
type TURNStats struct {
	allocs, active, refused atomic.Int64
	toPeers, fromPeers      atomic.Int64 // payload bytes sent to peers, and received from them
}

// TURNCounts are a TURNStats' counts at one time.
type TURNCounts struct {
	Allocations int64 // made since the relay started
	Active      int64 // held now
	Refused     int64 // refused by the quota (MaxTURNAllocs, MaxTURNAllocsPerSrc)
	ToPeers     int64 // bytes relayed from clients to their peers
	FromPeers   int64 // bytes relayed from peers to the clients
}

// Counts returns the counts now.
func (s *TURNStats) Counts() TURNCounts {
	if s == nil {
		return TURNCounts{}
	}
	return TURNCounts{Allocations: s.allocs.Load(), Active: s.active.Load(), Refused: s.refused.Load(),
		ToPeers: s.toPeers.Load(), FromPeers: s.fromPeers.Load()}
}

var (
	turnAllocsDesc  = prometheus.NewDesc("stampede_origin_turn_allocations_total", "TURN relays allocated (serve --turn).", nil, nil)
	turnActiveDesc  = prometheus.NewDesc("stampede_origin_turn_allocations_active", "TURN relays held now.", nil, nil)
	turnRefusedDesc = prometheus.NewDesc("stampede_origin_turn_allocations_refused_total",
		fmt.Sprintf("TURN allocations refused by the quota (%d in all, %d per source).", MaxTURNAllocs, MaxTURNAllocsPerSrc), nil, nil)
	turnBytesDesc = prometheus.NewDesc("stampede_origin_turn_relayed_bytes_total",
		"Payload bytes the TURN relay carried, by direction: \"to_peer\" from its clients to their peers, \"from_peer\" back; each crosses the server's link twice.",
		[]string{"direction"}, nil)
)

// Describe implements prometheus.Collector.
func (s *TURNStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- turnAllocsDesc
	ch <- turnActiveDesc
	ch <- turnRefusedDesc
	ch <- turnBytesDesc
}

// Collect implements prometheus.Collector.
func (s *TURNStats) Collect(ch chan<- prometheus.Metric) {
	c := s.Counts()
	metrics.Counter(ch, turnAllocsDesc, float64(c.Allocations))
	metrics.Gauge(ch, turnActiveDesc, float64(c.Active))
	metrics.Counter(ch, turnRefusedDesc, float64(c.Refused))
	metrics.Counter(ch, turnBytesDesc, float64(c.ToPeers), "to_peer")
	metrics.Counter(ch, turnBytesDesc, float64(c.FromPeers), "from_peer")
}

// countingGenerator allocates relays as its embedded generator does, and
// counts what they carry.
type countingGenerator struct {
	*turn.RelayAddressGeneratorStatic
	stats *TURNStats
}

func (g countingGenerator) AllocatePacketConn(c turn.AllocateListenerConfig) (net.PacketConn, net.Addr, error) {
	pc, addr, err := g.RelayAddressGeneratorStatic.AllocatePacketConn(c)
	if err != nil {
		return pc, addr, err
	}
	return &countingConn{PacketConn: pc, stats: g.stats}, addr, nil
}

// countingConn is a relay's socket, counting: what it reads comes from a
// peer, what it writes goes to one.
type countingConn struct {
	net.PacketConn
	stats *TURNStats
}

func (c *countingConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	c.stats.fromPeers.Add(int64(n))
	return n, addr, err
}

func (c *countingConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	n, err := c.PacketConn.WriteTo(p, addr)
	c.stats.toPeers.Add(int64(n))
	return n, err
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
	if cfg.Stats == nil {
		cfg.Stats = new(TURNStats) // counted, not shown
	}
	if cfg.permit == nil {
		own := ownAddrs(cfg.RelayIP)
		cfg.permit = func(ip net.IP) bool { return relayable(ip, own) }
	}
	q := turnQuota{stats: cfg.Stats}
	s, err := turn.NewServer(turn.ServerConfig{
		Realm:        cfg.Realm,
		AuthHandler:  turn.LongTermTURNRESTAuthHandler(cfg.Secret, nil),
		QuotaHandler: q.allow,
		EventHandler: turn.EventHandler{
			OnAllocationCreated: func(src, _ net.Addr, _, _, _ string, _ net.Addr, _ int) {
				q.add(src, 1)
				cfg.Stats.allocs.Add(1)
				cfg.Stats.active.Add(1)
			},
			OnAllocationDeleted: func(src, _ net.Addr, _, _, _ string) {
				q.add(src, -1)
				cfg.Stats.active.Add(-1)
			},
		},
		PacketConnConfigs: []turn.PacketConnConfig{{
			PacketConn:            pc,
			RelayAddressGenerator: countingGenerator{&turn.RelayAddressGeneratorStatic{RelayAddress: cfg.RelayIP, Address: "0.0.0.0"}, cfg.Stats},
			PermissionHandler: func(client net.Addr, peer net.IP) bool {
				ok := cfg.permit(peer)
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
	MaxTURNAllocs = 1024
	// MaxTURNAllocsPerSrc is room for the peer connections of a few
	// peers behind one NAT: each holds one for every offer awaiting its
	// answer and every channel being set up or open.
	MaxTURNAllocsPerSrc = 32
)

// turnQuota counts the allocations, in all and by source (tracker.Source;
// loopback is exempt), and the refusals in stats.
type turnQuota struct {
	stats *TURNStats // counts the refusals; not nil
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
	p, ok := turnSource(src)
	if q.total >= MaxTURNAllocs || ok && q.bySrc[p] >= MaxTURNAllocsPerSrc {
		q.stats.refused.Add(1)
		return false
	}
	return true
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

// AddTURN puts the counts of the TURN relay that st counts for on s's
// /metrics (stampede_origin_turn_*), for serve --turn.
func (s *Server) AddTURN(st *TURNStats) error {
	return s.reg.Register(st)
}
