// Package host carries the peer connections of many swarms in one process:
// the daemon's nodes (package node) share its listeners, its dialers, one
// upload budget and one set of upload turns.
//
// Peers reach every swarm of a host on the same address. The dialer's
// handshake names the swarm it wants (its root and size, docs/protocol.md
// section 3); the host reads it first, then hands the connection to the
// node of that swarm (node.Node.Adopt), which answers with its own. A
// handshake for a swarm the host does not hold gets a handshake of no swarm
// and GOODBYE reason 11, "no such swarm". Dialing needs nothing of the
// kind: the dialer already knows the swarm it wants.
//
// Connections come from Transports: TCP today. A transport is a listener
// of byte streams and a dialer, so WebRTC data channels and NAT-traversed
// streams fit behind the same interface; the host picks the transport of
// an address by its scheme ("webrtc://..."), TCP's addresses having none.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/internal/uplink"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/wire"
)

// Transport is one way peers' byte streams come and go: a listener of
// inbound streams and a dialer of outbound ones. Streams are reliable and
// ordered (net.Conn); deadlines must work.
type Transport interface {
	net.Listener
	// Scheme names the transport in peer addresses ("webrtc" for
	// "webrtc://..."); "" for TCP, whose addresses are plain HOST:PORT.
	Scheme() string
	// Dial opens a stream to addr (without its scheme).
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// TCP is the TCP transport on ln (net.Listen's, or any listener of TCP
// connections), dialing with a net.Dialer.
func TCP(ln net.Listener) Transport {
	return &tcpTransport{Listener: ln}
}

type tcpTransport struct {
	net.Listener
	d net.Dialer
}

func (*tcpTransport) Scheme() string { return "" }

func (t *tcpTransport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return t.d.DialContext(ctx, "tcp", addr)
}

// Config configures a Host. Zero values take the documented defaults.
type Config struct {
	// Transports carry the connections; at least one. The first one's
	// address is the one peers are told (handshakes, announces).
	Transports []Transport
	// UploadRate caps the bytes per second sent to peers, all swarms
	// together (0: unlimited).
	UploadRate int64
	// UploadTurns is how many pieces go to peers at once, all swarms
	// together (default 3, the node's); NoUploadTurns sends them all at
	// once.
	UploadTurns   int
	NoUploadTurns bool
	// NoPacing sends to peers as fast as the uplink takes, without the
	// pacer that keeps it a little below its measured capacity (package
	// uplink).
	NoPacing bool
	// MaxPending bounds the accepted connections whose handshake is still
	// awaited (default 256); past it new ones are closed at once, so a
	// flood of silent connections costs a bounded number of goroutines.
	MaxPending int
	// MaxPendingPerIP bounds those from one IP address (default 8); past
	// it that address's new ones are closed at once, so that one address
	// cannot hold every slot of MaxPending and keep the peers of every
	// swarm out.
	MaxPendingPerIP int
	// OnAttach, if set, is called for every node attached, and the
	// function it returns when the node is detached: a transport that
	// must announce each swarm to be reached (rtcpeer.Transport.JoinNode)
	// starts and stops there. Both are called without the host's lock.
	OnAttach func(n *node.Node) (detach func())
	Logger   *slog.Logger
}

// Defaults of Config.MaxPending and Config.MaxPendingPerIP.
const (
	DefaultMaxPending      = 256
	DefaultMaxPendingPerIP = 8
)

// Host carries the connections of many swarms. Create it with New, run
// it with Run, and give its nodes node.Config.Host = the host.
type Host struct {
	cfg     Config
	log     *slog.Logger
	limit   *ratelimit.Limiter
	pacer   *uplink.Pacer
	turns   *node.Turns
	pending chan struct{} // a slot per handshake awaited

	pendingMu sync.Mutex // guards the following
	// pendingBy counts the handshakes awaited by source IP (sourceIP).
	pendingBy map[string]int

	mu sync.Mutex // guards the following
	// swarms holds the nodes of each swarm, in the order they attached.
	swarms map[swarmKey][]*node.Node

	routed, noSwarm, refused, dropped atomic.Int64
}

type swarmKey struct {
	root manifest.Hash
	size int64
}

// New checks cfg and returns a Host.
func New(cfg Config) (*Host, error) {
	if len(cfg.Transports) == 0 {
		return nil, errors.New("host: no transport")
	}
	if cfg.UploadRate < 0 || cfg.UploadTurns < 0 {
		return nil, errors.New("host: UploadRate and UploadTurns must not be negative")
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.MaxPendingPerIP <= 0 {
		cfg.MaxPendingPerIP = DefaultMaxPendingPerIP
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var pacer *uplink.Pacer
	if !cfg.NoPacing {
		pacer = uplink.New()
	}
	turns := node.NewTurns(cfg.UploadTurns)
	if cfg.NoUploadTurns {
		turns = nil
	}
	return &Host{
		cfg:       cfg,
		log:       cfg.Logger,
		limit:     ratelimit.New(cfg.UploadRate),
		pacer:     pacer,
		turns:     turns,
		pending:   make(chan struct{}, cfg.MaxPending),
		pendingBy: map[string]int{},
		swarms:    map[swarmKey][]*node.Node{},
	}, nil
}

// Run accepts connections on every transport and routes them until ctx
// ends, then closes the transports and returns nil once the handshakes it
// was reading are done. A failed Accept (out of file descriptors, say) is
// logged and tried again after a pause; Run returns early with an error
// only if a transport's listener is closed under it.
func (h *Host) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(h.cfg.Transports))
	for _, t := range h.cfg.Transports {
		wg.Go(func() {
			if err := h.acceptLoop(ctx, t, &wg); err != nil && ctx.Err() == nil {
				errc <- err
				cancel()
			}
		})
	}
	<-ctx.Done()
	for _, t := range h.cfg.Transports {
		t.Close()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// Pauses after a failed Accept: the first, and the most they double to.
const (
	minAcceptRetry = 5 * time.Millisecond
	maxAcceptRetry = time.Second
)

// acceptLoop accepts t's connections and routes each in a goroutine of wg
// until ctx ends or t's listener is closed. Other errors of Accept, such
// as EMFILE, pass once connections close: it pauses (longer after each
// failure in a row, as net/http.Server does) and accepts again, rather
// than end the host and with it every swarm.
func (h *Host) acceptLoop(ctx context.Context, t Transport, wg *sync.WaitGroup) error {
	var retry time.Duration
	for {
		c, err := t.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("host: accept on %v: %w", t.Addr(), err)
			}
			retry = min(max(2*retry, minAcceptRetry), maxAcceptRetry)
			h.log.Warn("accept failed; retrying", "addr", t.Addr(), "err", err, "in", retry)
			pause := time.NewTimer(retry)
			select {
			case <-pause.C:
			case <-ctx.Done():
				pause.Stop()
				return nil
			}
			continue
		}
		retry = 0
		release, ok := h.reserve(sourceIP(c))
		if !ok {
			h.dropped.Add(1)
			c.Close()
			continue
		}
		wg.Go(func() {
			defer release()
			h.route(ctx, c)
		})
	}
}

// reserve takes a handshake slot for a connection from ip, within
// MaxPending and MaxPendingPerIP, and returns what gives it back; ok is
// false when either is full.
func (h *Host) reserve(ip string) (release func(), ok bool) {
	h.pendingMu.Lock()
	defer h.pendingMu.Unlock()
	if h.pendingBy[ip] >= h.cfg.MaxPendingPerIP {
		return nil, false
	}
	select {
	case h.pending <- struct{}{}:
	default:
		return nil, false
	}
	h.pendingBy[ip]++
	return func() {
		h.pendingMu.Lock()
		defer h.pendingMu.Unlock()
		if h.pendingBy[ip]--; h.pendingBy[ip] == 0 {
			delete(h.pendingBy, ip)
		}
		<-h.pending
	}, true
}

// sourceIP is the IP address c comes from, or its whole remote address
// for a transport whose addresses have no IP.
func sourceIP(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil {
		return ""
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().String()
	}
	if ip, _, err := net.SplitHostPort(a.String()); err == nil {
		return ip
	}
	return a.String()
}

// route reads c's handshake and hands c to the node of its swarm, or
// declines it, in the goroutine Run waits for.
func (h *Host) route(ctx context.Context, c net.Conn) {
	c.SetReadDeadline(time.Now().Add(wire.HandshakeTimeout))
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	theirs, err := wire.ReadHandshake(c)
	if !stop() {
		c.Close()
		return
	}
	if err != nil {
		h.refused.Add(1)
		h.log.Debug("handshake refused", "from", c.RemoteAddr(), "err", err)
		if errors.Is(err, wire.ErrVersion) {
			bye := &wire.Goodbye{Reason: wire.GoodbyeVersion, Text: fmt.Sprintf("I speak versions 1 to %d", wire.Version)}
			// Under a peer ID of our own: the dialer's would tell it
			// that it has dialed itself.
			wire.Decline(ctx, c, wire.Handshake{PeerID: wire.NewPeerID()}, bye)
		}
		c.Close()
		return
	}
	h.mu.Lock()
	ns := slices.Clone(h.swarms[swarmKey{theirs.Root, int64(theirs.Size)}])
	h.mu.Unlock()
	// The first node attached takes it, unless it is stopping (detached
	// since the lookup): then the next.
	for _, n := range ns {
		if n.Adopt(c, theirs) {
			h.routed.Add(1)
			return
		}
	}
	h.noSwarm.Add(1)
	// A handshake of no swarm (zero root and size) under a peer ID that is
	// not the dialer's, so it reads as a wrong swarm. A node that is
	// stopping gets the same, with its own reason: the host has not the
	// node's peer ID to speak for it, and no swarm is what the dialer
	// finds here the moment the node has stopped.
	bye := &wire.Goodbye{Reason: wire.GoodbyeNoSwarm, Text: fmt.Sprintf("no swarm of root %x… size %d here", theirs.Root[:8], theirs.Size)}
	if len(ns) > 0 {
		bye = &wire.Goodbye{Reason: wire.GoodbyeShutdown, Text: "not running"}
	}
	h.log.Debug("declined", "from", c.RemoteAddr(), "root", manifest.Hash(theirs.Root), "size", theirs.Size, "reason", bye.Reason)
	wire.Decline(ctx, c, wire.Handshake{PeerID: wire.NewPeerID()}, bye)
	c.Close()
}

// Addr is the first transport's address: the one peers are told.
func (h *Host) Addr() net.Addr { return h.cfg.Transports[0].Addr() }

// Dial connects to a peer through the transport its address names.
func (h *Host) Dial(ctx context.Context, addr string) (net.Conn, error) {
	scheme, rest, ok := strings.Cut(addr, "://")
	if !ok {
		scheme, rest = "", addr
	}
	for _, t := range h.cfg.Transports {
		if t.Scheme() == scheme {
			return t.Dial(ctx, rest)
		}
	}
	return nil, fmt.Errorf("host: no transport for %q", addr)
}

// UploadLimit is the upload budget every swarm of the host shares.
func (h *Host) UploadLimit() *ratelimit.Limiter { return h.limit }

// Pacer is the host's uplink pacer, shared by its nodes; nil when
// Config.NoPacing.
func (h *Host) Pacer() *uplink.Pacer { return h.pacer }

// Turns are the upload turns every swarm of the host shares.
func (h *Host) Turns() *node.Turns { return h.turns }

// Attach routes the connections for n's swarm to n until detach is called
// (node.Node.Run does both). Two nodes of one swarm may be attached at
// once (the same file downloaded to two places, or by the gateway and a
// download): inbound connections go to the first attached, which has been
// in the swarm longest (the next if it is stopping), and the others dial
// out as usual, the first among the peers they reach through this very
// host.
func (h *Host) Attach(n *node.Node) (detach func(), err error) {
	root, size := n.Swarm()
	k := swarmKey{root, size}
	h.mu.Lock()
	h.swarms[k] = append(h.swarms[k], n)
	h.mu.Unlock()
	// Outside the lock: OnAttach may ask the host (Stats) or take its
	// time without stalling the routing of every connection.
	leave := func() {}
	if h.cfg.OnAttach != nil {
		leave = h.cfg.OnAttach(n)
	}
	return func() {
		leave()
		h.mu.Lock()
		defer h.mu.Unlock()
		ns := slices.DeleteFunc(h.swarms[k], func(x *node.Node) bool { return x == n })
		if len(ns) == 0 {
			delete(h.swarms, k)
		} else {
			h.swarms[k] = ns
		}
	}, nil
}

// Stats count what the host did with the connections it accepted.
type Stats struct {
	// Swarms is how many swarms have a node attached now (several nodes
	// of one swarm count once).
	Swarms int `json:"swarms"`
	// Routed counts connections handed to a node; NoSwarm, those that
	// asked for a swarm the host does not hold (GOODBYE 11) or whose nodes
	// were all stopping (GOODBYE 7); Refused, those whose handshake was
	// not a stampede one or did not come in time; Dropped, those closed
	// unread past MaxPending or MaxPendingPerIP.
	Routed  int64 `json:"routed"`
	NoSwarm int64 `json:"no_swarm"`
	Refused int64 `json:"refused"`
	Dropped int64 `json:"dropped"`
}

// Stats returns a snapshot of the counters.
func (h *Host) Stats() Stats {
	h.mu.Lock()
	n := len(h.swarms)
	h.mu.Unlock()
	return Stats{Swarms: n, Routed: h.routed.Load(), NoSwarm: h.noSwarm.Load(), Refused: h.refused.Load(), Dropped: h.dropped.Load()}
}
