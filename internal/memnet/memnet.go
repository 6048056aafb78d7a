// Package memnet is an in-memory network for tests: hosts with addresses,
// listeners and dialers by "ip:port", and connections that behave like TCP's
// where stampede's code can tell (buffered and full duplex, a bounded window
// that blocks a writer whose reader stalls, read and write deadlines, EOF
// after the other side closes), with optional bandwidth shaping per
// direction (package internal/ratelimit) and added one-way latency.
//
// It is the first of the three network tiers of the tests: a swarm of fifty
// peers, an origin and a tracker run in one test process with no socket, no
// port to find and no firewall, and a link can be made slow or far away.
// Connections use only channels, timers and time.Now, so they also run
// inside a testing/synctest bubble, where latency and bandwidth become exact.
//
// A Network holds hosts; a Host listens and dials. Between hosts A and B the
// bytes A sends pass A's uplink and B's downlink token buckets (each shared
// by every connection of its host, as a real access link is) and arrive
// A.Latency+B.Latency after they were sent. Pipe makes a single connected
// pair with shapes of its own.
package memnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/internal/ratelimit"
)

// DefaultWindow is the most bytes in flight in one direction of a
// connection (sent and not yet read) before a write blocks: TCP's send and
// receive buffers together, about what Linux gives a loopback connection.
const DefaultWindow = 1 << 20

// acceptBacklog is how many dialed connections wait for Accept; a dial past
// it waits too (within its context).
const acceptBacklog = 128

// Errors. Dial wraps ErrRefused in a *net.OpError; a Write to a connection
// whose other side closed wraps ErrReset.
var (
	ErrRefused = errors.New("memnet: connection refused")
	ErrReset   = errors.New("memnet: connection reset by peer")
	ErrInUse   = errors.New("memnet: address already in use")
)

// Network is a set of hosts that can reach each other. The zero value is not
// usable: call New.
type Network struct {
	mu        sync.Mutex // guards the following
	next      netip.Addr // the next host address to hand out
	hosts     map[netip.Addr]*Host
	listeners map[netip.AddrPort]*Listener
}

// New returns an empty network. Hosts get addresses 10.0.0.1, 10.0.0.2, ...
func New() *Network {
	return &Network{
		next:      netip.AddrFrom4([4]byte{10, 0, 0, 1}),
		hosts:     map[netip.Addr]*Host{},
		listeners: map[netip.AddrPort]*Listener{},
	}
}

// HostConfig describes a host's access link. Zero values: unlimited, no
// added latency, DefaultWindow.
type HostConfig struct {
	// Up and Down cap the bytes per second the host sends and receives, all
	// its connections together.
	Up, Down int64
	// Latency is added to every byte leaving or entering the host: the
	// one-way delay between hosts A and B is A.Latency + B.Latency.
	Latency time.Duration
	// Window bounds the bytes in flight per direction of each connection
	// the host dials or accepts (the smaller of the two hosts' applies).
	Window int
}

// Host is one machine of the network.
type Host struct {
	n        *Network
	ip       netip.Addr
	up, down *ratelimit.Limiter
	latency  time.Duration
	window   int

	nextPort uint16 // guarded by the network's mu
}

// Host adds a host with the next free address.
func (n *Network) Host(cfg HostConfig) *Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	ip := n.next
	n.next = n.next.Next()
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	h := &Host{
		n: n, ip: ip,
		up: ratelimit.New(cfg.Up), down: ratelimit.New(cfg.Down),
		latency: cfg.Latency, window: cfg.Window,
		nextPort: 49152,
	}
	n.hosts[ip] = h
	return h
}

// IP is the host's address.
func (h *Host) IP() netip.Addr { return h.ip }

// Listen accepts connections to the host's address at port; port 0 picks a
// free one (see Listener.Addr).
func (h *Host) Listen(port uint16) (*Listener, error) {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	if port == 0 {
		port = h.ephemeralLocked()
	}
	ap := netip.AddrPortFrom(h.ip, port)
	if h.n.listeners[ap] != nil {
		return nil, &net.OpError{Op: "listen", Net: "memnet", Addr: tcpAddr(ap), Err: ErrInUse}
	}
	l := &Listener{n: h.n, h: h, addr: ap, queue: make(chan *conn, acceptBacklog), done: make(chan struct{})}
	h.n.listeners[ap] = l
	return l, nil
}

// ephemeralLocked picks a port nobody listens on; n.mu is held.
func (h *Host) ephemeralLocked() uint16 {
	for {
		p := h.nextPort
		h.nextPort++
		if h.nextPort == 0 {
			h.nextPort = 49152
		}
		if h.n.listeners[netip.AddrPortFrom(h.ip, p)] == nil {
			return p
		}
	}
}

// Dial connects to addr ("ip:port") from this host. It fails with an error
// wrapping ErrRefused when nothing listens there.
func (h *Host) Dial(ctx context.Context, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "memnet", Err: fmt.Errorf("memnet: address %q: %w", addr, err)}
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	h.n.mu.Lock()
	l := h.n.listeners[ap]
	var local netip.AddrPort
	if l != nil {
		local = netip.AddrPortFrom(h.ip, h.ephemeralLocked())
	}
	h.n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "memnet", Addr: tcpAddr(ap), Err: ErrRefused}
	}
	window := min(h.window, l.h.window)
	out := Shape{Limits: []*ratelimit.Limiter{h.up, l.h.down}, Latency: h.latency + l.h.latency, Window: window}
	in := Shape{Limits: []*ratelimit.Limiter{l.h.up, h.down}, Latency: h.latency + l.h.latency, Window: window}
	c, s := pipe(local, ap, out, in)
	select {
	case l.queue <- s:
		return c, nil
	case <-l.done:
	case <-ctx.Done():
		c.Close()
		s.Close()
		return nil, &net.OpError{Op: "dial", Net: "memnet", Addr: tcpAddr(ap), Err: ctx.Err()}
	}
	c.Close()
	s.Close()
	return nil, &net.OpError{Op: "dial", Net: "memnet", Addr: tcpAddr(ap), Err: ErrRefused}
}

// DialContext is Dial with net.Dialer's signature (the network is ignored),
// for http.Transport.DialContext.
func (h *Host) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	return h.Dial(ctx, addr)
}

// Listener is a host's listening address. It implements net.Listener.
type Listener struct {
	n     *Network
	h     *Host
	addr  netip.AddrPort
	queue chan *conn
	done  chan struct{}
	once  sync.Once
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "memnet", Addr: l.Addr(), Err: net.ErrClosed}
	}
}

// Close stops listening; connections not yet accepted are reset.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.n.mu.Lock()
		delete(l.n.listeners, l.addr)
		l.n.mu.Unlock()
		close(l.done)
		for {
			select {
			case c := <-l.queue:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// Addr is the listening address, a *net.TCPAddr (code that asks for the
// port of a TCP listener finds it).
func (l *Listener) Addr() net.Addr { return tcpAddr(l.addr) }

// String is the listening address as "ip:port".
func (l *Listener) String() string { return l.addr.String() }

func tcpAddr(ap netip.AddrPort) *net.TCPAddr { return net.TCPAddrFromAddrPort(ap) }

// Shape is what one direction of a connection does to the bytes sent.
type Shape struct {
	// Limits are token buckets every byte passes, in order (the sender's
	// uplink, then the receiver's downlink, say); nil ones do not limit.
	// Share a Limiter between connections to make them share a link.
	Limits []*ratelimit.Limiter
	// Latency is how long after it was sent (and shaped) a byte can be read.
	Latency time.Duration
	// Window is the most bytes in flight before a write blocks
	// (DefaultWindow if 0).
	Window int
}

// Pipe returns the two ends of a connection: what a writes goes through ab
// to b, what b writes through ba to a. Their addresses are 10.255.0.1:1 and
// 10.255.0.2:2; no Network is involved.
func Pipe(ab, ba Shape) (a, b net.Conn) {
	ca := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 255, 0, 1}), 1)
	cb := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 255, 0, 2}), 2)
	x, y := pipe(ca, cb, ab, ba)
	return x, y
}

// pipe returns the two ends of a connection between local and remote.
func pipe(local, remote netip.AddrPort, out, in Shape) (*conn, *conn) {
	o, i := newStream(out), newStream(in)
	c := newConn(local, remote, i, o)
	s := newConn(remote, local, o, i)
	return c, s
}
