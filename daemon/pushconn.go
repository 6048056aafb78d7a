package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/contract"
)

// pushCounters are one push's live figures, updated by its connections
// and its origin requests.
type pushCounters struct {
	done, reused                    atomic.Int64
	fromRack, fromRacks, fromOrigin atomic.Int64
	progressAt                      atomic.Int64 // unix ns of the last piece verified (or the start)
	throttled                       atomic.Bool
}

// restore takes back the byte counts an earlier run reported.
func (c *pushCounters) restore(st PushStatus) {
	c.fromRack.Store(st.FromRack)
	c.fromRacks.Store(st.FromRacks)
	c.fromOrigin.Store(st.FromOrigin)
	c.reused.Store(st.Reused)
}

// received is every byte that came in, for the throttle's measure.
func (c *pushCounters) received() int64 {
	return c.fromRack.Load() + c.fromRacks.Load() + c.fromOrigin.Load()
}

// pushRates shape one push: down every byte that comes in (from peers and
// the origin), up every byte sent to peers, cross what comes from the
// origin across the uplink, crossPeers what comes from other racks' hosts,
// and crossUp what goes to other racks, on top (links are full duplex: a
// representative has its share of the uplink each way). Their limits are
// the plan's budgets; the throttle lowers down and up while the host is
// loaded.
//
// The origin's bodies come first within the cross budget: they wait on
// cross alone, and what they take is charged to crossPeers too, without
// waiting (debit), so the peers get what the origin leaves. Shared
// fairly, a representative's one or two origin fetches got a fraction of
// the budget against its peers' many connections, the origin sent at
// half its link, and the representatives, each soon holding what the
// others held, waited on it: new pieces enter a cluster only from the
// origin (docs/push.md has the simulator's figures).
type pushRates struct {
	down, up, cross, crossPeers, crossUp *rate.Limiter
	downMax, upMax                       float64 // the budgets (0: none)
}

func newPushRates(r *cluster.Role) *pushRates {
	lim := func(b int64) *rate.Limiter {
		if b <= 0 {
			return rate.NewLimiter(rate.Inf, 1<<20)
		}
		return rate.NewLimiter(rate.Limit(paced(float64(b))), burst(paced(float64(b))))
	}
	return &pushRates{down: lim(r.Down), up: lim(r.Up), cross: lim(r.Cross), crossPeers: lim(r.Cross), crossUp: lim(r.Cross),
		downMax: float64(r.Down), upMax: float64(r.Up)}
}

// burst is a limiter's burst at bps: 20 ms of it, at least 16 KiB. What
// a limiter saves while idle goes out at once when traffic resumes, on
// top of the budget in that second.
func burst(bps float64) int { return max(16<<10, int(bps/50)) }

// paced is the rate of a limiter that keeps a budget of bps over any
// second: a burst (20 ms) less, as a second may carry a burst on top of
// the rate.
func paced(bps float64) float64 { return bps * 50 / 51 }

// set applies a limit (0: none) to l, keeping its burst.
func set(l *rate.Limiter, bps float64) {
	if bps <= 0 {
		l.SetLimit(rate.Inf)
		return
	}
	l.SetLimit(rate.Limit(bps))
	l.SetBurst(burst(bps))
}

// crossReadBuffer is the receive buffer of a connection across an uplink.
const crossReadBuffer = 128 << 10

// Bytes on the wire, as the links' budgets count them (and tc does): a
// full Ethernet frame of the usual 1500-byte MTU, 1514 bytes with the
// Ethernet header tc counts, carries 1448 bytes of TCP payload (20 bytes
// of IP header, 32 of TCP with timestamps); the receiver answers every
// second frame with an ACK of 66 bytes, which crosses the links the
// other way, where no limiter of the data sees it. On push-4x6 that
// comes to 1.046 copies of the file into a rack plus 2.3% of what left
// it: 1.064, against 1.06 measured by tc.
const (
	framePayload = 1448
	frameWire    = 1514
	ackWire      = 66
)

// onWire is n payload bytes counted on the wire.
func onWire(n int64) int64 { return (n*frameWire + framePayload - 1) / framePayload }

// acksOf is what the ACKs of n payload bytes take on the wire, the other
// way.
func acksOf(n int64) int64 { return n * ackWire / (2 * framePayload) }

// wait lets n payload bytes through l, counted on the wire, in steps of
// its burst.
func wait(ctx context.Context, l *rate.Limiter, n int) {
	n = int(onWire(int64(n)))
	for n > 0 {
		k := min(n, l.Burst())
		if l.WaitN(ctx, k) != nil {
			return // ctx ended: the connection goes with it
		}
		n -= k
	}
}

// debit charges n bytes on the wire to l without waiting: l goes into
// debt, and whoever waits on it next waits it out.
func debit(l *rate.Limiter, n int64) {
	if l == nil || l.Limit() == rate.Inf {
		return
	}
	now := time.Now()
	for n > 0 {
		k := min(int(n), l.Burst())
		l.ReserveN(now, k) // never cancelled: the tokens are spent
		n -= int64(k)
	}
}

// throttle adjusts the push's rates to the host's load every second until
// ctx ends (cluster.Throttle).
func (e *pushEnv) throttle(ctx context.Context) {
	cfg := e.s.push.cfg
	if cfg.MaxLoad <= 0 && cfg.MaxIOWait <= 0 {
		return
	}
	down := cluster.Throttle{MaxLoad: cfg.MaxLoad, MaxIOWait: cfg.MaxIOWait}
	up := down
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := e.ps.ctr.received()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		l, err := cfg.LoadSource.Load()
		if err != nil {
			e.s.log.Debug("reading the load", "err", err)
			continue
		}
		got := e.ps.ctr.received()
		dr, dt := down.Step(l, float64(got-last), e.rt.downMax)
		ur, ut := up.Step(l, 0, e.rt.upMax)
		last = got
		set(e.rt.down, paced(dr))
		set(e.rt.up, paced(ur))
		if dt != e.ps.ctr.throttled.Swap(dt || ut) {
			e.s.log.Info("push throttled by the host's load", "push", e.ps.req.ID(), "throttled", dt || ut, "load", l.CPU, "iowait", l.IOWait, "rate", dr)
		}
	}
}

// peerConn is the push's node.PeerConnFunc: a peer the plan does not pair
// this host with is refused; the others' bytes are counted (from this
// rack or another) and shaped.
func (e *pushEnv) peerConn(ctx context.Context) func(c net.Conn, addr string, outbound bool) net.Conn {
	p := e.s.push
	return func(c net.Conn, addr string, outbound bool) net.Conn {
		h := p.cfg.Cluster.HostByPeer(addr)
		// A standby takes over once no piece has come for Fallback: the
		// active representatives are gone or stuck.
		takenOver := e.role.Standby && time.Since(time.Unix(0, e.ps.ctr.progressAt.Load())) >= p.cfg.Fallback
		if h == nil || !e.plan.MayPeerActive(p.self.Name, h.Name, takenOver) {
			return nil
		}
		if h.Rack == p.self.Rack {
			return &shapedConn{Conn: c, ctx: ctx, in: &e.ps.ctr.fromRack, down: []*rate.Limiter{e.rt.down}, up: []*rate.Limiter{e.rt.up},
				ackOut: []*rate.Limiter{e.rt.up}, ackIn: []*rate.Limiter{e.rt.down}}
		}
		from, to := e.pace.open(e, h.Name)
		if tc, ok := c.(interface{ SetReadBuffer(int) error }); ok && e.role.Cross > 0 {
			// A receive buffer the kernel grows to megabytes fills at the
			// link's speed before flow control follows our reads: a burst
			// past the uplink's budget at each connection's start, times
			// the connections. A small fixed one keeps the sender to our
			// pace.
			tc.SetReadBuffer(crossReadBuffer)
		}
		return &shapedConn{Conn: c, ctx: ctx, in: &e.ps.ctr.fromRacks, from: from, own: true,
			down: []*rate.Limiter{e.rt.crossPeers, e.rt.down}, up: []*rate.Limiter{to, e.rt.crossUp, e.rt.up},
			ackOut: []*rate.Limiter{e.rt.crossUp, e.rt.up}, ackIn: []*rate.Limiter{e.rt.crossPeers, e.rt.down}, acksIn: &e.pace.acksIn,
			closed: func() { e.pace.release(h.Name) }}
	}
}

// shapedConn counts and shapes a peer connection. It keeps the socket's
// syscall.Conn, which the node's socket options need. A connection across
// the uplink has a budget of its own (own, node.OwnBudget): its uploads
// take no upload turn and are not refused as busy, so that the pieces
// leaving the rack do not wait behind those for the hosts next door.
type shapedConn struct {
	net.Conn
	ctx  context.Context
	in   *atomic.Int64
	from *atomic.Int64 // the peer's bytes, for sender pacing (nil: not paced)
	down []*rate.Limiter
	up   []*rate.Limiter
	own  bool
	// The ACKs of what is read leave on ackOut's links, those of what
	// is written come in on ackIn's; acksIn counts the latter.
	ackOut, ackIn []*rate.Limiter
	acksIn        *atomic.Int64

	closed    func() // once, on Close (nil: nothing)
	closeOnce sync.Once
}

func (c *shapedConn) OwnBudget() bool { return c.own }

func (c *shapedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	if c.from != nil {
		c.from.Add(int64(n))
	}
	for _, l := range c.ackOut {
		debit(l, acksOf(int64(n)))
	}
	for _, l := range c.down {
		wait(c.ctx, l, n)
	}
	return n, err
}

// Write sends p a chunk at a time, each once the limiters let it
// through, so that what leaves is as smooth as they are: a piece written
// whole after waiting for all of it would leave at the link's speed.
func (c *shapedConn) Write(p []byte) (int, error) {
	var n int
	for len(p) > 0 {
		k := min(len(p), writeChunk)
		for _, l := range c.up {
			wait(c.ctx, l, k)
		}
		m, err := c.Conn.Write(p[:k])
		n += m
		for _, l := range c.ackIn {
			debit(l, acksOf(int64(m)))
		}
		if c.acksIn != nil {
			c.acksIn.Add(acksOf(int64(m)))
		}
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// writeChunk is the most a shaped write sends at once.
const writeChunk = 16 << 10

func (c *shapedConn) Close() error {
	if c.closed != nil {
		c.closeOnce.Do(c.closed)
	}
	return c.Conn.Close()
}

func (c *shapedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

func (c *shapedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// pieceRange is a representative's share of the pieces (cluster.Work).
type pieceRange struct{ from, to, n int }

// gate returns the transport of the push's requests to the pusher's
// origin. Piece requests (GETs of the file with a Range) are counted and
// shaped; a host that is not one of its datacenter's representatives is
// answered at once, as the origin answers pieces on their way through
// the swarm (503, Stampede-In-Swarm), while pieces come from its peers,
// and goes to the origin only after Fallback without any. A
// representative's candidates are narrowed to its share while it has
// some there, so representatives fetch different pieces.
func (e *pushEnv) gate(fileURL string, share *pieceRange) http.RoundTripper {
	next := e.s.client.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	if t, ok := next.(*http.Transport); ok && e.role.Cross > 0 {
		// The origin's answers cross the uplinks too: the same small
		// receive buffer as a peer's from another rack.
		t = t.Clone()
		dial := t.DialContext
		if dial == nil {
			dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
		}
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetReadBuffer(crossReadBuffer)
			}
			return c, err
		}
		next = t
	}
	u, _ := url.Parse(fileURL)
	return &originGate{e: e, next: next, path: u.EscapedPath(), share: share}
}

type originGate struct {
	e     *pushEnv
	next  http.RoundTripper
	path  string
	share *pieceRange
}

func (g *originGate) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet || r.Header.Get("Range") == "" || r.URL.EscapedPath() != g.path {
		return g.next.RoundTrip(r)
	}
	ctr := g.e.ps.ctr
	if !g.e.role.DCRep && time.Since(time.Unix(0, ctr.progressAt.Load())) < g.e.s.push.cfg.Fallback {
		return &http.Response{
			Status: "503 Service Unavailable", StatusCode: http.StatusServiceUnavailable,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Retry-After": {"1"}, contract.InSwarmHeader: {"1"}},
			Body:   http.NoBody, Request: r,
		}, nil
	}
	if s := g.share; s != nil {
		if v := r.Header.Get(contract.CandidatesHeader); v != "" {
			if cs, err := contract.ParseCandidates(v, s.n, 256); err == nil {
				var mine []int
				for _, c := range cs {
					if c >= s.from && c < s.to {
						mine = append(mine, c)
					}
				}
				if len(mine) > 0 {
					r = r.Clone(r.Context())
					r.Header.Set(contract.CandidatesHeader, contract.FormatCandidates(mine))
				}
			}
		}
	}
	resp, err := g.next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusPartialContent {
		return resp, err
	}
	resp.Body = &shapedBody{ReadCloser: resp.Body, ctx: r.Context(), n: &ctr.fromOrigin, l: []*rate.Limiter{g.e.rt.cross, g.e.rt.down},
		debit: g.e.rt.crossPeers, acks: []*rate.Limiter{g.e.rt.crossUp, g.e.rt.up}}
	return resp, nil
}

// shapedBody counts and shapes an origin answer's body, and charges it to
// the peers' limiter too (debit: the origin first).
type shapedBody struct {
	io.ReadCloser
	ctx   context.Context
	n     *atomic.Int64
	l     []*rate.Limiter
	debit *rate.Limiter
	acks  []*rate.Limiter // of the links its ACKs take back
}

func (b *shapedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	debit(b.debit, onWire(int64(n)))
	for _, l := range b.acks {
		debit(l, acksOf(int64(n)))
	}
	for _, l := range b.l {
		wait(b.ctx, l, n)
	}
	return n, err
}

// pushPace is one push's sender pacing (cluster.Pacer). The bytes that
// cross a rack's uplink into a representative are paced by their
// senders, the representatives on the other side, each at the grant the
// receiver gives it out of its share of the uplink (Role.Cross, less
// what the origin sends it). The receiver's own limiters stay, as a
// ceiling: they shape after the fact, by its reads, and the TCP windows
// let the link's load swing around them; paced senders keep it smooth.
//
// As a receiver, it holds the Pacer and what came from each sender; as
// a sender, a limiter for each receiver in another rack, at its last
// grant, which it asks for every cluster.DefaultPaceInterval
// (GET /v1/push/{id}/grant on the receiver's agent) while it has a
// connection to it.
type pushPace struct {
	// acksIn is what the ACKs of this host's sends across take on the
	// wire coming in: priority traffic, as the origin's.
	acksIn atomic.Int64

	mu    sync.Mutex // guards the following
	pacer *cluster.Pacer
	from  map[string]*atomic.Int64 // host -> payload bytes received from it
	to    map[string]*paceTo       // host -> what is sent to it
}

type paceTo struct {
	l    *rate.Limiter
	refs int // connections open to it
}

func newPushPace(role *cluster.Role) *pushPace {
	p := &pushPace{from: map[string]*atomic.Int64{}, to: map[string]*paceTo{}}
	if role.Cross > 0 {
		p.pacer = &cluster.Pacer{Budget: paced(float64(role.Cross))}
	}
	return p
}

// open returns the counter of what comes from host (in another rack)
// and the limiter of what is sent to it, which starts at the receiver's
// share divided among the hosts the plan lets send to it.
func (p *pushPace) open(e *pushEnv, host string) (*atomic.Int64, *rate.Limiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	from := p.from[host]
	if from == nil {
		from = &atomic.Int64{}
		p.from[host] = from
	}
	to := p.to[host]
	if to == nil {
		to = &paceTo{l: rate.NewLimiter(rate.Inf, 1<<20)}
		if r := e.plan.Roles[host]; r != nil && r.Cross > 0 {
			senders := 0
			for n, o := range e.plan.Roles {
				if o.Rack != r.Rack && e.plan.MayPeer(n, host) {
					senders++
				}
			}
			set(to.l, paced(float64(r.Cross))/float64(max(senders, 1)))
		}
		p.to[host] = to
	}
	to.refs++
	return from, to.l
}

// release is a connection to host closing.
func (p *pushPace) release(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if to := p.to[host]; to != nil {
		if to.refs--; to.refs <= 0 {
			delete(p.to, host)
		}
	}
}

// grant is the receiver's answer to sender's ask at now: its grant, on
// the wire, bytes/s; false when this host has no budget to divide.
func (p *pushPace) grant(sender string, now time.Time, fromOrigin int64) (float64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pacer == nil {
		return 0, false
	}
	got := make(map[string]int64, len(p.from))
	for h, n := range p.from {
		got[h] = onWire(n.Load())
	}
	p.pacer.Tick(now, got, onWire(fromOrigin)+p.acksIn.Load())
	return p.pacer.Ask(sender, now), true
}

// paceGrant is the answer to a sender's ask.
type paceGrant struct {
	// Rate is the sender's grant, bytes/s on the wire.
	Rate float64 `json:"rate"`
}

// askGrants asks, every interval until ctx ends, each receiver this host
// sends to in another rack for its grant, and applies it. A receiver
// that does not answer leaves its limiter as it was.
func (e *pushEnv) askGrants(ctx context.Context) {
	client := &http.Client{Timeout: time.Second}
	t := time.NewTicker(cluster.DefaultPaceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.pace.mu.Lock()
		hosts := make(map[string]*rate.Limiter, len(e.pace.to))
		for h, to := range e.pace.to {
			hosts[h] = to.l
		}
		e.pace.mu.Unlock()
		var wg sync.WaitGroup
		for h, l := range hosts {
			wg.Go(func() {
				g, err := e.askGrant(ctx, client, h)
				if err != nil {
					e.s.log.Debug("asking for a grant", "push", e.ps.req.ID(), "host", h, "err", err)
					return
				}
				set(l, g)
			})
		}
		wg.Wait()
	}
}

func (e *pushEnv) askGrant(ctx context.Context, client *http.Client, host string) (float64, error) {
	h := e.s.push.cfg.Cluster.Hosts[host]
	if h == nil {
		return 0, errors.New("not in the cluster")
	}
	u := "http://" + h.Agent + "/v1/push/" + url.PathEscape(e.ps.req.ID()) + "/grant?from=" + url.QueryEscape(e.s.push.self.Name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("grant: %s", resp.Status)
	}
	var g paceGrant
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&g); err != nil {
		return 0, fmt.Errorf("grant: %w", err)
	}
	if g.Rate <= 0 {
		return 0, fmt.Errorf("grant: rate %v", g.Rate)
	}
	return g.Rate, nil
}
