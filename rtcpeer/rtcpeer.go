// Package rtcpeer carries native peers' connections over WebRTC data
// channels (pion/webrtc): so that stampede get and the daemon share a
// swarm with visitors' browsers (package webpeer, docs/browser.md), and so
// that native peers behind NATs reach each other (docs/nat.md): ICE finds
// a path (host, server-reflexive candidates from the site's STUN, a TURN
// relay as the last resort), DTLS secures it, and an SCTP data channel is
// the reliable, ordered stream the peer protocol runs on unchanged.
//
// Transport is a host.Transport of scheme "webrtc". It has no address to
// dial: WebRTC peers meet through the tracker's WebSocket signalling
// (tracker/ws.go), which JoinNode starts for every swarm attached to a
// host (host.Config.OnAttach; NewHost sets it). A channel this peer
// answered comes out of Accept, and the host routes it by the handshake
// the offerer sends first (docs/protocol.md, section 3). A channel this
// peer offered is the node's own outbound connection (node.Node.Opened):
// it sends its handshake at once, as a dialer does, so that two native
// peers pair as a native one and a browser do. The ICE servers are
// Config's and those the site names in peer.json, the browsers'
// configuration (STUN, and TURN with credentials), read at each
// signalling session. Each channel tells the node how it reaches its peer
// and what TCP_INFO would (node.PathConn, path.go).
package rtcpeer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/pion/datachannel"
	"github.com/pion/webrtc/v4"
)

// Defaults of Config.
const (
	DefaultMaxPeers = 16
	// chunk is the most bytes one data channel message carries: browsers
	// take 256 KiB, but small messages keep one piece from holding the
	// channel, and frames need not match messages (docs/protocol.md).
	chunk = 16 << 10
	// acceptQueue bounds the channels opened and not yet accepted.
	acceptQueue = 64
	// relayWait is how long ICE waits for a direct or punched pair
	// before it takes a relayed one.
	relayWait = 5 * time.Second
)

// Config configures a Transport.
type Config struct {
	// ICEServers are STUN (and TURN) URLs, e.g. "stun:example.org:3478",
	// used besides those the site names (NoSiteICE). Empty, and no site's:
	// host candidates only.
	ICEServers []string
	// NoSiteICE: do not read the ICE servers of the site whose tracker
	// signals (its peer.json, siteICE). By default they are read.
	NoSiteICE bool
	// HTTPClient reads peer.json. Default: a client with a 10 s timeout.
	HTTPClient *http.Client
	// Auto joins a swarm's signalling only when this peer cannot be
	// dialled: when the STUN servers of the site (its peer.json) or of
	// ICEServers see it behind a NAT (probeNAT). A peer with a public
	// address, or that no STUN server answers (a site without peer.json),
	// keeps to TCP: it is dialled, and it dials. It asks again every
	// autoRecheck, and at each signalling session, for its network may
	// change. Default false: every swarm joins (get --webrtc=on).
	Auto bool
	// MaxPeers bounds the data channels of each swarm joined. Default
	// DefaultMaxPeers.
	MaxPeers int
	// Logger receives the transport's log. Default: discard.
	Logger *slog.Logger
}

// Transport is the WebRTC transport. Create it with New.
type Transport struct {
	cfg    Config
	log    *slog.Logger
	api    *webrtc.API
	accept chan net.Conn
	done   chan struct{}
	once   sync.Once
}

// New returns a Transport for cfg.
func New(cfg Config) *Transport {
	if cfg.MaxPeers <= 0 {
		cfg.MaxPeers = DefaultMaxPeers
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	var se webrtc.SettingEngine
	se.DetachDataChannels()
	// Writes wait for room in the channel's buffer, as a socket's do, so
	// that a slow browser holds back its own connection only.
	se.EnableDataChannelBlockWrite(true)
	// The relay is the last resort: a pair through it is taken only
	// when no other answered for relayWait (pion's default is 2 s, which
	// a loaded machine's checks on a punched path can outlast).
	se.SetRelayAcceptanceMinWait(relayWait)
	return &Transport{cfg: cfg, log: cfg.Logger, api: webrtc.NewAPI(webrtc.WithSettingEngine(se)),
		accept: make(chan net.Conn, acceptQueue), done: make(chan struct{})}
}

// Scheme is "webrtc".
func (*Transport) Scheme() string { return "webrtc" }

// Addr is no address: WebRTC peers are not dialed.
func (*Transport) Addr() net.Addr { return Addr("signalled") }

// Dial fails: WebRTC peers meet through the tracker, not by address.
func (*Transport) Dial(context.Context, string) (net.Conn, error) {
	return nil, errors.New("rtcpeer: WebRTC peers are reached through the tracker's signalling, not dialed")
}

// Accept returns the next data channel opened, in either direction.
func (t *Transport) Accept() (net.Conn, error) {
	select {
	case c := <-t.accept:
		return c, nil
	case <-t.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; connections already accepted are their owners'.
func (t *Transport) Close() error {
	t.once.Do(func() { close(t.done) })
	return nil
}

// deliver hands an open channel to Accept, or closes it when no one takes
// it.
func (t *Transport) deliver(c net.Conn) {
	select {
	case t.accept <- c:
	case <-t.done:
		c.Close()
	default:
		t.log.Debug("webrtc: accept queue full: channel closed")
		c.Close()
	}
}

// newPC makes a peer connection using Config's ICE servers and site's.
func (t *Transport) newPC(site []webrtc.ICEServer) (*webrtc.PeerConnection, error) {
	return t.api.NewPeerConnection(webrtc.Configuration{ICEServers: append(slices.Clip(site), t.configICE()...)})
}

// configICE is Config's ICEServers.
func (t *Transport) configICE() []webrtc.ICEServer {
	var ice []webrtc.ICEServer
	for _, u := range t.cfg.ICEServers {
		ice = append(ice, webrtc.ICEServer{URLs: []string{u}})
	}
	return ice
}

// Addr is a WebRTC peer's address as a net.Addr.
type Addr string

func (Addr) Network() string  { return "webrtc" }
func (a Addr) String() string { return string(a) }

// conn is a detached data channel as a net.Conn: reads are buffered (a
// message may be larger than the caller's buffer), writes are cut into
// messages of at most chunk bytes.
type conn struct {
	pc     *webrtc.PeerConnection
	dc     datachannel.ReadWriteCloserDeadliner
	remote net.Addr
	path   string      // node.PathDirect, PathPunched or PathRelayed
	rtt    minDuration // MinRTT's samples
	buf    []byte      // message bytes not read yet
	rbuf   []byte
	once   sync.Once
	onEnd  func()
}

func newConn(pc *webrtc.PeerConnection, dc *webrtc.DataChannel, onEnd func()) (*conn, error) {
	raw, err := dc.DetachWithDeadline()
	if err != nil {
		return nil, err
	}
	c := &conn{pc: pc, dc: raw, remote: Addr("webrtc"), rbuf: make([]byte, 256<<10+64), onEnd: onEnd}
	var pair *webrtc.ICECandidatePair
	if c.path, pair = pathOf(pc); pair != nil {
		c.remote = &net.UDPAddr{IP: net.ParseIP(pair.Remote.Address), Port: int(pair.Remote.Port)}
	}
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateFailed || s == webrtc.PeerConnectionStateClosed || s == webrtc.PeerConnectionStateDisconnected {
			c.Close()
		}
	})
	return c, nil
}

func (c *conn) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		n, err := c.dc.Read(c.rbuf)
		if err != nil {
			if errors.Is(err, io.ErrShortBuffer) {
				return 0, fmt.Errorf("rtcpeer: a message larger than %d bytes", len(c.rbuf))
			}
			return 0, err
		}
		c.buf = c.rbuf[:n]
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func (c *conn) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n := min(chunk, len(p)-done)
		if _, err := c.dc.Write(p[done : done+n]); err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.dc.Close()
		c.pc.Close()
		if c.onEnd != nil {
			c.onEnd()
		}
	})
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return Addr("webrtc") }
func (c *conn) RemoteAddr() net.Addr { return c.remote }
func (c *conn) SetDeadline(t time.Time) error {
	c.dc.SetReadDeadline(t)
	return c.dc.SetWriteDeadline(t)
}
func (c *conn) SetReadDeadline(t time.Time) error  { return c.dc.SetReadDeadline(t) }
func (c *conn) SetWriteDeadline(t time.Time) error { return c.dc.SetWriteDeadline(t) }
