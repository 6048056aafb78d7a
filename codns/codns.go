// Package codns is a cooperative DNS forwarder after CoDNS (Park's thesis,
// chapter 4), behind `stampede dns` (docs/dns.md). A lookup asks the local
// resolver (the upstream) first; when that has not answered within an
// adaptive delay (Delay, drawn from its recent response times), or failed,
// the lookup also asks peer nodes, other forwarders that answer from their
// own resolvers and caches, one after another on a doubling delay, in the
// order of highest random weight for the name (Peers) so that every node
// asks the same peer first and its cache serves them all. The first good
// answer (NOERROR or NXDOMAIN) wins and is cached for its TTL (Cache,
// negative answers as RFC 2308 says, bounded, least recently used first).
//
// The decisions, the delay, the cache and the peers' order and health, are
// pure structures with the time passed in; Forwarder is the shell around
// them: the UDP and TCP servers and clients (github.com/miekg/dns), the
// race between the upstream and the peers, and the metrics.
//
// It is no open resolver: clients are served only from the Allow networks
// (loopback by default), peers only from their addresses on the peer list
// or, with a Key, when their queries are signed with it (TSIG), each at a
// bounded rate; and a peer's query is never passed on to another peer.
// Peer queries carry an EDNS option (PeerOption) that says so.
package codns

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/stampede-dev/stampede/internal/metrics"
)

// Defaults of Config.
const (
	DefaultListen            = "127.0.0.1:5353"
	DefaultTimeout           = 5 * time.Second
	DefaultPeerTimeout       = 2 * time.Second
	DefaultMaxPeersPerLookup = 3
	DefaultPeerRate          = 200
	DefaultPeerBurst         = 400
	DefaultMaxLookups        = 1024
)

// PeerOption is the EDNS0 option code (from the range RFC 6891 leaves for
// local use) that marks a query from one forwarder to another: its answer
// must come from the receiver's cache or resolver, never from its peers.
const PeerOption = 65321

// tsigName is the name of Config.Key in TSIG records; tsigFudge, the
// clock difference between peers a signature tolerates.
const (
	tsigName  = "stampede-dns."
	tsigFudge = 300
)

// ednsSize is the UDP payload size advertised to upstreams and peers, and
// the most answered to clients: DNS Flag Day 2020's, which no path
// fragments.
const ednsSize = 1232

// udpQuerySize is the largest query read over UDP (miekg/dns reads 512
// bytes by default, which a query with EDNS options and a TSIG record may
// pass).
const udpQuerySize = 4096

// udpReadBuffer is the receive buffer asked for the UDP socket.
const udpReadBuffer = 4 << 20

// shutdownGrace is how long lookups in flight get to finish once the
// forwarder is told to stop.
const shutdownGrace = 2 * time.Second

// Config configures a Forwarder.
type Config struct {
	// Upstream is the local resolver, HOST:PORT (required; stampede dns
	// defaults to the first nameserver of /etc/resolv.conf).
	Upstream string
	// Peers are the other forwarders, asked when the upstream is slow or
	// failing. An address of this forwarder's own among them is ignored,
	// so every node may be given the same list. Queries from their
	// addresses are answered as a peer's.
	Peers []netip.AddrPort
	// Allow are the networks whose clients are served (default loopback:
	// 127.0.0.0/8 and ::1).
	Allow []netip.Prefix
	// Timeout bounds a lookup, and a query to the upstream (default 5 s);
	// past it the client gets SERVFAIL.
	Timeout time.Duration
	// PeerTimeout bounds a query to a peer (default 2 s).
	PeerTimeout time.Duration
	// MaxPeersPerLookup is how many peers one lookup may ask (default 3).
	MaxPeersPerLookup int
	// PeerRate and PeerBurst bound the queries each peer may make, per
	// second on average and at once (defaults 200 and 400); past them it
	// gets REFUSED.
	PeerRate  float64
	PeerBurst int
	// MaxLookups bounds the lookups under way, clients' and peers'
	// together (default 1024); past it a query gets REFUSED. It bounds
	// as well the queries to the upstream under way, which may outlive
	// their lookup (a peer answered first): past it, a lookup asks the
	// peers alone; and the TCP connections open, each a goroutine until
	// its idle timeout: past it, a new one is closed as it comes.
	MaxLookups int
	// Delay tunes the adaptive delay before peers are asked, Cache the
	// cache; their zero values are their defaults.
	Delay DelayConfig
	Cache CacheConfig
	// Key, if set, authenticates peers: queries between peers are signed
	// with TSIG (RFC 8945, HMAC-SHA256) with this secret, the same on
	// every node, and so are their answers. A query signed with it is
	// then a peer's whatever its source address, and a peer's address no
	// longer stands in for a signature; a query or an answer signed
	// otherwise is refused.
	Key []byte
	// Logger gets the forwarder's log (default: discarded).
	Logger *slog.Logger
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

// Forwarder is a cooperative DNS forwarder. Make one with New, run it with
// Serve.
type Forwarder struct {
	cfg      Config
	log      *slog.Logger
	now      func() time.Time
	m        *series
	reg      *prometheus.Registry
	limiters map[netip.Addr]*rate.Limiter // per peer address, fixed by New
	// signedLimiter is the rate of signed queries from addresses off
	// the peer list, all together.
	signedLimiter *rate.Limiter
	tsig          map[string]string // Key for miekg/dns: name to base64 secret
	slots         chan struct{}     // MaxLookups of them
	upstreamSlots chan struct{}     // MaxLookups of them: upstream queries may outlive their lookup
	life          context.Context   // ends when Serve returns
	stop          context.CancelFunc
	wg            sync.WaitGroup // upstream queries, which may outlive their lookup
	// handlers is read-held by every query being handled; Serve takes it
	// to wait for them before it returns, and then closed turns away the
	// queries the servers hand over late.
	handlers sync.RWMutex
	closed   bool

	mu      sync.Mutex // guards the following
	peerIP  netip.Addr // the source of queries to peers, when set
	cache   *Cache
	delay   *Delay
	peers   *Peers
	flights map[flightKey]*flight
}

// New returns a forwarder for cfg.
func New(cfg Config) (*Forwarder, error) {
	if cfg.Upstream == "" {
		return nil, errors.New("codns: no upstream resolver")
	}
	if _, _, err := net.SplitHostPort(cfg.Upstream); err != nil {
		return nil, fmt.Errorf("codns: upstream %q: %w", cfg.Upstream, err)
	}
	if cfg.Allow == nil {
		cfg.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.PeerTimeout <= 0 {
		cfg.PeerTimeout = DefaultPeerTimeout
	}
	if cfg.MaxPeersPerLookup <= 0 {
		cfg.MaxPeersPerLookup = DefaultMaxPeersPerLookup
	}
	if cfg.PeerRate <= 0 {
		cfg.PeerRate = DefaultPeerRate
	}
	if cfg.PeerBurst <= 0 {
		cfg.PeerBurst = DefaultPeerBurst
	}
	if cfg.MaxLookups <= 0 {
		cfg.MaxLookups = DefaultMaxLookups
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Delay = cfg.Delay.withDefaults()
	f := &Forwarder{
		cfg:           cfg,
		log:           cfg.Logger,
		now:           cfg.Now,
		limiters:      make(map[netip.Addr]*rate.Limiter),
		slots:         make(chan struct{}, cfg.MaxLookups),
		upstreamSlots: make(chan struct{}, cfg.MaxLookups),
		cache:         NewCache(cfg.Cache),
		delay:         NewDelay(cfg.Delay),
		peers:         NewPeers(cfg.Peers),
		flights:       make(map[flightKey]*flight),
	}
	f.life, f.stop = context.WithCancel(context.Background())
	for _, p := range cfg.Peers {
		f.limiters[p.Addr().Unmap()] = rate.NewLimiter(rate.Limit(cfg.PeerRate), cfg.PeerBurst)
	}
	if cfg.Key != nil {
		f.tsig = map[string]string{tsigName: base64.StdEncoding.EncodeToString(cfg.Key)}
		f.signedLimiter = rate.NewLimiter(rate.Limit(cfg.PeerRate), cfg.PeerBurst)
	}
	f.m = newSeries(f)
	f.reg = metrics.NewRegistry()
	f.reg.MustRegister(f.m.collectors)
	return f, nil
}

// Serve answers DNS queries on pc (UDP) and ln (TCP), both on the same
// address, until ctx ends; then it stops taking queries, gives those under
// way shutdownGrace to finish and returns nil. It returns early with the
// error of a server that fails. Call it once.
func (f *Forwarder) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	defer f.wg.Wait()
	defer func() {
		// The lookups under way end with f.life; their handlers write
		// (and log) before Serve returns, not after.
		f.handlers.Lock()
		f.closed = true
		f.handlers.Unlock()
	}()
	defer f.stop()
	f.forgetSelf(addrPortOf(pc.LocalAddr()))

	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	servers := []*dns.Server{
		{PacketConn: pc, Handler: f, NotifyStartedFunc: notify, TsigSecret: f.tsig, UDPSize: udpQuerySize},
		{Listener: f.limitConns(ln), Handler: f, NotifyStartedFunc: notify, TsigSecret: f.tsig},
	}
	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() { errc <- s.ActivateAndServe() }()
	}
	var err error
	for range servers {
		select {
		case <-started:
		case err = <-errc:
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		select {
		case <-ctx.Done():
		case err = <-errc:
		}
	}
	shutdown, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	for _, s := range servers {
		if serr := s.ShutdownContext(shutdown); serr != nil && !errors.Is(serr, context.DeadlineExceeded) {
			f.log.Debug("dns server shutdown", "err", serr)
		}
	}
	if err != nil {
		return fmt.Errorf("codns: serve: %w", err)
	}
	return nil
}

// forgetSelf drops this forwarder's own address, self, from the peers, and
// picks the source address of queries to peers: the listening one, when it
// names one, so that peers know the queries by the address on their list.
func (f *Forwarder) forgetSelf(self netip.AddrPort) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ip := self.Addr().Unmap()
	if !ip.IsUnspecified() {
		f.peerIP = ip
		f.peers.remove(netip.AddrPortFrom(ip, self.Port()))
		return
	}
	// Listening on every address: any of this host's, on our port.
	local := []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified(), netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				local = append(local, p.Addr().Unmap())
			}
		}
	}
	for _, a := range local {
		f.peers.remove(netip.AddrPortFrom(a, self.Port()))
	}
}

// limitConns returns ln holding at most MaxLookups connections open at
// once: past them, a new one is closed as it comes. Anyone may open one,
// allowed or not, and miekg/dns gives each a goroutine until it goes idle.
func (f *Forwarder) limitConns(ln net.Listener) net.Listener {
	return &connLimit{Listener: ln, slots: make(chan struct{}, f.cfg.MaxLookups), refused: f.m.refused[refusedConns]}
}

type connLimit struct {
	net.Listener
	slots   chan struct{} // one per connection open
	refused prometheus.Counter
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
		default:
			l.refused.Inc()
			c.Close()
		}
	}
}

// slotConn is a connection that gives its slot back when closed.
type slotConn struct {
	net.Conn
	release func()
}

func (c *slotConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// addrPortOf returns a's address and port, the address unmapped (a v4
// client of a v6 socket is a v4 address).
func addrPortOf(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.UDPAddr:
		ap = a.AddrPort()
	case *net.TCPAddr:
		ap = a.AddrPort()
	default:
		ap, _ = netip.ParseAddrPort(a.String())
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// Listen opens the UDP and TCP sockets of addr for Serve, on the same
// port: with port 0, the one the system picks for UDP, tried again a few
// times when TCP has it taken.
func Listen(addr string) (net.PacketConn, net.Listener, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("codns: listen %q: %w", addr, err)
	}
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("codns: %w", err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			if u, ok := pc.(*net.UDPConn); ok {
				// Queries arrive in bursts; the kernel's default queue
				// drops them while a busy host is slow to read. Best
				// effort: the system's rmem_max caps it.
				u.SetReadBuffer(udpReadBuffer)
			}
			return pc, ln, nil
		}
		pc.Close()
		if port != "0" || try == 8 {
			return nil, nil, fmt.Errorf("codns: %w", err)
		}
	}
}

// Resolver returns a resolver of Go's own that sends every query to the
// forwarder at addr (HOST:PORT), for a process that embeds stampede's
// servers (a CDN node's origin names) rather than changing
// /etc/resolv.conf.
func Resolver(addr string) *net.Resolver {
	var d net.Dialer
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}
}
