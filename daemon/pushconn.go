package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
)

// pushCounters are one push's live figures, updated by its connections
// and its origin requests.
type pushCounters struct {
	done, reused                    atomic.Int64
	fromRack, fromRacks, fromOrigin atomic.Int64
	sent                            atomic.Int64 // every byte written to peers, for the throttle's measure
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
		return rate.NewLimiter(rate.Limit(b), burst(float64(b)))
	}
	return &pushRates{down: lim(r.Down), up: lim(r.Up), cross: lim(r.Cross), crossPeers: lim(r.Cross), crossUp: lim(r.Cross),
		downMax: float64(r.Down), upMax: float64(r.Up)}
}

// burst is a limiter's burst at bps: 20 ms of it, at least 16 KiB. What
// a limiter saves while idle goes out at once when traffic resumes, on
// top of the budget in that second.
func burst(bps float64) int { return max(16<<10, int(bps/50)) }

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

// wireOverhead turns payload bytes into bytes on the wire, as the links'
// budgets count them (and tc does): a full Ethernet frame of 1514 bytes
// carries 1448 of TCP payload (4.6% more); the same link carries the ACKs
// of the flows going the other way (about 2.3% of their bytes), which no
// receiver's limiter sees; and the rest is margin for the bursts of the
// token buckets and of the peers' messages. In hundredths.
const wireOverhead = 112

// wait lets n payload bytes through l, counted on the wire, in steps of
// its burst.
func wait(ctx context.Context, l *rate.Limiter, n int) {
	n = n * wireOverhead / 100
	for n > 0 {
		k := min(n, l.Burst())
		if l.WaitN(ctx, k) != nil {
			return // ctx ended: the connection goes with it
		}
		n -= k
	}
}

// debit charges n payload bytes, counted on the wire, to l without
// waiting: l goes into debt, and whoever waits on it next waits it out.
func debit(l *rate.Limiter, n int) {
	if l.Limit() == rate.Inf {
		return
	}
	n = n * wireOverhead / 100
	now := time.Now()
	for n > 0 {
		k := min(n, l.Burst())
		l.ReserveN(now, k) // never cancelled: the tokens are spent
		n -= k
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
	last, lastSent := e.ps.ctr.received(), e.ps.ctr.sent.Load()
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
		got, sent := e.ps.ctr.received(), e.ps.ctr.sent.Load()
		dr, dt := down.Step(l, float64(got-last), e.rt.downMax)
		ur, ut := up.Step(l, float64(sent-lastSent), e.rt.upMax)
		last, lastSent = got, sent
		set(e.rt.down, dr)
		set(e.rt.up, ur)
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
		if h == nil || !e.plan.MayPeerActive(p.self.Name, h.Name, e.tookOver()) {
			return nil
		}
		if h.Rack == p.self.Rack {
			return &shapedConn{Conn: c, ctx: ctx, in: &e.ps.ctr.fromRack, out: &e.ps.ctr.sent, down: []*rate.Limiter{e.rt.down}, up: []*rate.Limiter{e.rt.up}}
		}
		if tc, ok := c.(interface{ SetReadBuffer(int) error }); ok && e.role.Cross > 0 {
			// A receive buffer the kernel grows to megabytes fills at the
			// link's speed before flow control follows our reads: a burst
			// past the uplink's budget at each connection's start, times
			// the connections. A small fixed one keeps the sender to our
			// pace.
			tc.SetReadBuffer(crossReadBuffer)
		}
		return &shapedConn{Conn: c, ctx: ctx, in: &e.ps.ctr.fromRacks, out: &e.ps.ctr.sent, own: true,
			down: []*rate.Limiter{e.rt.crossPeers, e.rt.down}, up: []*rate.Limiter{e.rt.crossUp, e.rt.up}}
	}
}

// tookOver reports whether this host, a standby representative, acts as
// an active one: told to by the pusher (its rack's active ones are slow),
// or after Fallback without a piece (they are gone or stuck).
func (e *pushEnv) tookOver() bool {
	return e.role.Standby && (e.ps.takenOver.Load() || e.starved())
}

// starved reports whether no piece has come for Fallback.
func (e *pushEnv) starved() bool {
	return time.Since(time.Unix(0, e.ps.ctr.progressAt.Load())) >= e.s.push.cfg.Fallback
}

// shapedConn counts and shapes a peer connection. It keeps the socket's
// syscall.Conn, which the node's socket options need. A connection across
// the uplink has a budget of its own (own, node.OwnBudget): its uploads
// take no upload turn and are not refused as busy, so that the pieces
// leaving the rack do not wait behind those for the hosts next door.
type shapedConn struct {
	net.Conn
	ctx  context.Context
	in   *atomic.Int64 // bytes read
	out  *atomic.Int64 // bytes written
	down []*rate.Limiter
	up   []*rate.Limiter
	own  bool
}

func (c *shapedConn) OwnBudget() bool { return c.own }

func (c *shapedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	for _, l := range c.down {
		wait(c.ctx, l, n)
	}
	return n, err
}

func (c *shapedConn) Write(p []byte) (int, error) {
	for _, l := range c.up {
		wait(c.ctx, l, len(p))
	}
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
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

// workShare is how a datacenter's representative divides the origin's
// pieces with the others (cluster.Work): the file's manifest, to read
// the piece a request asks for.
type workShare struct {
	w *cluster.Work
	m *manifest.Manifest
}

// gate returns the transport of the push's requests to the pusher's
// origin. Piece requests (GETs of the file with a Range) are counted and
// shaped; a host that is not one of its datacenter's representatives is
// answered at once, as the origin answers pieces on their way through
// the swarm (503, Stampede-In-Swarm), while pieces come from its peers,
// and goes to the origin only after Fallback without any, or once told
// to take over (a standby). A
// representative's request is steered by its share of the work
// (cluster.Work.Pick): to a free piece of its share, and once that is
// done to the far end of the share of the one most behind, so
// representatives fetch different pieces.
func (e *pushEnv) gate(fileURL string, share *workShare) http.RoundTripper {
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
	share *workShare
}

func (g *originGate) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet || r.Header.Get("Range") == "" || r.URL.EscapedPath() != g.path {
		return g.next.RoundTrip(r)
	}
	ctr := g.e.ps.ctr
	if !g.e.role.DCRep && !g.e.ps.takenOver.Load() && !g.e.starved() {
		return &http.Response{
			Status: "503 Service Unavailable", StatusCode: http.StatusServiceUnavailable,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Retry-After": {"1"}, contract.InSwarmHeader: {"1"}},
			Body:   http.NoBody, Request: r,
		}, nil
	}
	steered := -1
	if s := g.share; s != nil {
		r, steered = s.steer(g.e.s.push.self.Name, r)
	}
	resp, err := g.next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusPartialContent {
		return resp, err
	}
	if steered >= 0 && resp.Header.Get(contract.PieceHeader) == "" {
		// The origin sent the piece we asked it for in place of the
		// scheduler's: a pick answer, as the origin makes them.
		resp.Header.Set(contract.PieceHeader, strconv.Itoa(steered))
	}
	resp.Body = &shapedBody{ReadCloser: resp.Body, ctx: r.Context(), n: &ctr.fromOrigin, l: []*rate.Limiter{g.e.rt.cross, g.e.rt.down},
		debit: g.e.rt.crossPeers}
	return resp, nil
}

// steer rewrites r, a piece request of the scheduler's with its
// candidates, to the piece Work.Pick chooses for rep and the candidates
// it offers with it. It returns the request to send and the piece asked
// in place of the scheduler's one, or -1 when r goes as it was. Only
// pieces the scheduler offered are asked for, so the answer is one it
// takes (a pick answer names one of its candidates).
func (s *workShare) steer(rep string, r *http.Request) (*http.Request, int) {
	asked := -1
	if rs, err := httphdr.ParseRange(r.Header.Get("Range"), s.m.Size); err == nil && len(rs) == 1 {
		if i := int(rs[0].Start / s.m.PieceSize); i < s.m.NumPieces() && rs[0].Start == s.m.PieceOffset(i) && rs[0].Length == s.m.PieceLen(i) {
			asked = i
		}
	}
	cands, err := contract.ParseCandidates(r.Header.Get(contract.CandidatesHeader), s.m.NumPieces(), 256)
	if asked < 0 || err != nil || len(cands) == 0 {
		return r, -1 // not a swarm peer's piece request
	}
	piece, offer, ok := s.w.Pick(rep, asked, cands)
	if !ok {
		return r, -1
	}
	r = r.Clone(r.Context())
	r.Header.Set(contract.CandidatesHeader, contract.FormatCandidates(offer))
	if piece == asked {
		return r, -1
	}
	off, n := s.m.PieceOffset(piece), s.m.PieceLen(piece)
	r.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	return r, piece
}

// shapedBody counts and shapes an origin answer's body, and charges it to
// the peers' limiter too (debit: the origin first).
type shapedBody struct {
	io.ReadCloser
	ctx   context.Context
	n     *atomic.Int64
	l     []*rate.Limiter
	debit *rate.Limiter
}

func (b *shapedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	debit(b.debit, n)
	for _, l := range b.l {
		wait(b.ctx, l, n)
	}
	return n, err
}
