package codns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Who sent a query.
type origin int

const (
	fromRefused origin = iota // neither an allowed client nor a peer
	fromClient
	fromPeer
)

// flightKey names a lookup under way that others of the same question
// join. Cooperative lookups (which may ask peers) and the others (peers'
// queries, which must not) are apart: a peer's query joined to a
// cooperative lookup could be passed on to its own sender.
type flightKey struct {
	Key
	coop bool
}

// flight is a lookup under way; msg and by are set before done closes.
type flight struct {
	done chan struct{}
	msg  *dns.Msg // nil: no good answer
	by   answeredBy
}

// ServeDNS answers one query: it implements dns.Handler.
func (f *Forwarder) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	f.handlers.RLock()
	defer f.handlers.RUnlock()
	if f.closed {
		return // Serve has returned: no answer, as if the socket were shut
	}
	start := f.now()
	src := addrPortOf(w.RemoteAddr()).Addr()
	marked := hasPeerOption(req)
	signed := f.tsig != nil && req.IsTsig() != nil
	if signed && w.TsigStatus() != nil {
		f.m.refused[refusedBadSignature].Inc()
		f.log.Debug("dns query refused: bad signature", "src", src, "err", w.TsigStatus())
		f.refuse(w, req, dns.RcodeNotAuth)
		return
	}
	who := f.classify(src, marked, signed)
	limiter := f.limiters[src]
	if signed && limiter == nil {
		limiter = f.signedLimiter
	}
	switch {
	case who == fromRefused:
		f.m.refused[refusedNotAllowed].Inc()
		f.log.Debug("dns query refused: source not allowed", "src", src)
		f.refuse(w, req, dns.RcodeRefused)
		return
	case who == fromPeer && limiter != nil && !limiter.AllowN(start, 1):
		f.m.refused[refusedRateLimited].Inc()
		f.refuse(w, req, dns.RcodeRefused)
		return
	case req.Opcode != dns.OpcodeQuery:
		f.refuse(w, req, dns.RcodeNotImplemented)
		return
	case len(req.Question) != 1:
		f.refuse(w, req, dns.RcodeFormatError)
		return
	}
	select {
	case f.slots <- struct{}{}:
		defer func() { <-f.slots }()
	default:
		f.m.refused[refusedBusy].Inc()
		f.refuse(w, req, dns.RcodeRefused)
		return
	}
	q := req.Question[0]
	do := false
	if opt := req.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	msg, by := f.lookup(f.life, q, do, who == fromClient)
	// Counted before the answer goes, so that whoever got it sees it
	// counted.
	if who == fromPeer {
		f.m.peerRequests[by].Inc()
	} else {
		f.m.clientLookups[by].Inc()
		f.m.lookupDuration.Observe(f.now().Sub(start).Seconds())
	}
	f.reply(w, req, msg)
}

// classify tells who sent a query from src. A query signed with
// Config.Key is a peer's. Without a key, a query marked as a peer's
// (PeerOption) is answered as one when it comes from a peer's address or
// an allowed one: from the cache or the upstream, never from other
// peers; unmarked, it is a client's when src is in Allow, and a peer's
// when src is a peer's address. With a key, a peer's address is not
// enough. Queries answered as a peer's are rate-limited per peer
// address (signed ones from elsewhere, all together).
func (f *Forwarder) classify(src netip.Addr, marked, signed bool) origin {
	_, isPeer := f.limiters[src]
	isPeer = isPeer && f.tsig == nil
	allowed := f.allowed(src)
	switch {
	case signed:
		return fromPeer
	case marked && (isPeer || allowed):
		return fromPeer
	case allowed:
		return fromClient
	case isPeer:
		return fromPeer
	}
	return fromRefused
}

func (f *Forwarder) allowed(a netip.Addr) bool {
	for _, p := range f.cfg.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// lookup answers q from the cache, by joining a lookup of the same
// question under way, or by resolving it. The message it returns is
// shared: not to be changed.
func (f *Forwarder) lookup(ctx context.Context, q dns.Question, do, coop bool) (*dns.Msg, answeredBy) {
	key := KeyOf(q, do)
	fk := flightKey{key, coop}
	f.mu.Lock()
	if m := f.cache.Get(key, f.now()); m != nil {
		f.mu.Unlock()
		return m, byCache
	}
	if fl, ok := f.flights[fk]; ok {
		f.mu.Unlock()
		select {
		case <-fl.done:
			if fl.msg == nil {
				return nil, byNone
			}
			return fl.msg, byCoalesced
		case <-ctx.Done():
			return nil, byNone
		}
	}
	fl := &flight{done: make(chan struct{})}
	f.flights[fk] = fl
	f.mu.Unlock()

	fl.msg, fl.by = f.resolve(ctx, q, do, coop)
	f.mu.Lock()
	delete(f.flights, fk)
	if fl.msg != nil {
		f.cache.Put(key, fl.msg, f.now())
	}
	f.mu.Unlock()
	close(fl.done)
	return fl.msg, fl.by
}

// result is one source's answer to a lookup.
type result struct {
	msg  *dns.Msg
	err  error
	peer netip.AddrPort // the zero value for the upstream
}

// good reports whether r is an answer to give: NOERROR or NXDOMAIN.
func (r result) good() bool {
	return r.err == nil && (r.msg.Rcode == dns.RcodeSuccess || r.msg.Rcode == dns.RcodeNameError)
}

// resolve asks the upstream, and for a cooperative lookup the peers in
// turn: the first after the adaptive delay, or at once when the upstream
// fails, each next one after twice the previous wait or at once when one
// fails. The first good answer wins.
func (f *Forwarder) resolve(ctx context.Context, q dns.Question, do, coop bool) (*dns.Msg, answeredBy) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	f.mu.Lock()
	wait := f.delay.Current()
	var order []netip.AddrPort
	if coop {
		order = f.peers.Order(q.Name, f.now())
		order = order[:min(len(order), f.cfg.MaxPeersPerLookup)]
	}
	f.mu.Unlock()

	results := make(chan result, 1+len(order))
	select {
	case f.upstreamSlots <- struct{}{}:
		f.wg.Add(1)
		go f.askUpstream(ctx, q, do, results)
	default:
		// MaxLookups queries to the upstream under way, most of them
		// past their lookups: it is stalling, and the peers are asked
		// at once rather than one more socket held on it.
		f.m.upstreamFailures[upstreamBusy].Inc()
		results <- result{err: errUpstreamBusy}
	}
	pending, asked := 1, 0
	var timer *time.Timer
	var tick <-chan time.Time
	if len(order) > 0 {
		timer = time.NewTimer(wait)
		defer timer.Stop()
		tick = timer.C
	}
	askNext := func() {
		if asked == len(order) {
			tick = nil
			return
		}
		if asked == 0 {
			f.m.sentToPeers.Inc()
		}
		go f.askPeer(ctx, order[asked], q, do, results)
		asked++
		pending++
		wait = max(2*wait, f.cfg.Delay.Min)
		timer.Reset(wait)
	}
	// However the lookup ends, the delay learns whether a peer won it.
	winner := netip.AddrPort{}
	defer func() {
		if !coop || len(order) == 0 {
			return
		}
		f.mu.Lock()
		f.delay.ObserveOutcome(winner.IsValid())
		f.mu.Unlock()
	}()
	for {
		select {
		case r := <-results:
			pending--
			if r.good() {
				if r.peer.IsValid() {
					winner = r.peer
					f.m.peerQueries[peerQueryWon].Inc()
					f.countLosers(results, pending)
					return r.msg, byPeer
				}
				f.countLosers(results, pending)
				return r.msg, byLocal
			}
			if r.peer.IsValid() {
				f.m.peerQueries[peerQueryFailed].Inc()
			}
			if len(order) > 0 {
				askNext()
			}
			if pending == 0 {
				return nil, byNone
			}
		case <-tick:
			askNext()
		case <-ctx.Done():
			f.countLosers(results, pending)
			return nil, byNone
		}
	}
}

// countLosers counts, as they end, the outcomes of the peers' queries
// still under way when a lookup ended.
func (f *Forwarder) countLosers(results <-chan result, pending int) {
	if pending == 0 {
		return
	}
	go func() {
		for range pending {
			r := <-results
			switch {
			case !r.peer.IsValid():
			case r.good():
				f.m.peerQueries[peerQueryLost].Inc()
			default:
				f.m.peerQueries[peerQueryFailed].Inc()
			}
		}
	}()
}

// askUpstream asks the upstream for q and sends its answer to results;
// it releases the slot in upstreamSlots its caller took.
// It is not cut short when the lookup ends: how long the upstream took is
// what the delay learns from, and the query ends within Timeout anyway.
// A query unanswered after upstreamRetry is sent again (a UDP packet may
// be lost), the first still awaited, while the lookup (lookup) is under
// way: at most upstreamTries in all, each a new socket and ID.
func (f *Forwarder) askUpstream(lookup context.Context, q dns.Question, do bool, results chan<- result) {
	defer f.wg.Done()
	defer func() { <-f.upstreamSlots }()
	var tries sync.WaitGroup
	defer tries.Wait()
	ctx, cancel := context.WithTimeout(f.life, f.cfg.Timeout)
	defer cancel()
	start := f.now()
	answers := make(chan result, upstreamTries)
	try := func() {
		tries.Go(func() {
			m, err := f.exchange(ctx, query(q, do, false), f.cfg.Upstream, netip.Addr{})
			answers <- result{msg: m, err: err}
		})
	}
	try()
	sent, pending := 1, 1
	retry := time.NewTimer(upstreamRetry)
	defer retry.Stop()
	var r result
	for {
		select {
		case r = <-answers:
			pending--
		case <-retry.C:
			if sent < upstreamTries && lookup.Err() == nil {
				try()
				sent++
				pending++
				retry.Reset(upstreamRetry << (sent - 1))
			}
			continue
		}
		if r.err == nil || pending == 0 {
			break
		}
	}
	cancel() // the other tries are not awaited
	took := f.now().Sub(start)
	switch err := r.err; {
	case f.life.Err() != nil:
	case err != nil && errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		f.m.upstreamFailures[upstreamTimeout].Inc()
	case err != nil:
		f.m.upstreamFailures[upstreamError].Inc()
		f.log.Debug("dns upstream", "name", q.Name, "err", err)
	case r.msg.Rcode != dns.RcodeSuccess && r.msg.Rcode != dns.RcodeNameError:
		f.m.upstreamFailures[upstreamRcode].Inc()
	}
	if f.life.Err() == nil {
		f.mu.Lock()
		f.delay.ObserveLocal(took)
		f.mu.Unlock()
	}
	results <- r
}

// askPeer asks peer for q, within the lookup, and sends its answer to
// results.
func (f *Forwarder) askPeer(lookup context.Context, peer netip.AddrPort, q dns.Question, do bool, results chan<- result) {
	ctx, cancel := context.WithTimeout(lookup, f.cfg.PeerTimeout)
	defer cancel()
	f.mu.Lock()
	src := f.peerIP // set as Serve starts, maybe after a lookup of LookupNetIP
	f.mu.Unlock()
	if src.IsValid() && src.IsLoopback() != peer.Addr().IsLoopback() {
		src = netip.Addr{} // a loopback source cannot reach another host, nor the reverse
	}
	qm := query(q, do, true)
	if f.tsig != nil {
		qm.SetTsig(tsigName, dns.HmacSHA256, tsigFudge, f.now().Unix())
	}
	m, err := f.exchange(ctx, qm, peer.String(), src)
	if err == nil && f.tsig != nil && m.IsTsig() == nil {
		err = errUnsigned // a signed answer is checked as it is read
	}
	r := result{msg: m, err: err, peer: peer}
	if err != nil {
		f.log.Debug("dns peer", "peer", peer, "name", q.Name, "err", err)
	}
	// A query cut short because its lookup ended says nothing of the
	// peer; one past PeerTimeout is a failure.
	if lookup.Err() == nil || r.good() {
		f.mu.Lock()
		f.peers.Result(peer, r.good(), f.now())
		f.mu.Unlock()
	}
	results <- r
}

// upstreamRetry is how long a query to the upstream waits before it is
// sent again, the wait doubling each time, and upstreamTries how many
// times it is sent at most: at 0, 1 s and 3 s, within Timeout.
const (
	upstreamRetry = time.Second
	upstreamTries = 3
)

// tsigRoom is what a TSIG record with an HMAC-SHA256 takes in a message.
const tsigRoom = 100

// errMismatch is an answer to another question than the one asked.
var errMismatch = errors.New("codns: the answer is to another question")

// errUpstreamBusy is the upstream not asked, for MaxLookups queries to it
// are under way.
var errUpstreamBusy = errors.New("codns: too many queries to the upstream under way")

// errUnsigned is a peer's answer without a signature when there is a key.
var errUnsigned = errors.New("codns: the peer's answer is not signed")

// exchange asks addr for m over UDP, and again over TCP when the answer is
// truncated, from the address src when it is valid.
func (f *Forwarder) exchange(ctx context.Context, m *dns.Msg, addr string, src netip.Addr) (*dns.Msg, error) {
	// Signing takes the TSIG record out of the message it signs: each
	// exchange is given a copy.
	r, err := f.exchangeOver(ctx, "udp", m.Copy(), addr, src)
	if err == nil && r.Truncated {
		f.m.tcpRetries.Inc()
		m = m.Copy()
		if t := m.IsTsig(); t != nil {
			t.TimeSigned = uint64(f.now().Unix())
		}
		r, err = f.exchangeOver(ctx, "tcp", m, addr, src)
	}
	return r, err
}

func (f *Forwarder) exchangeOver(ctx context.Context, network string, m *dns.Msg, addr string, src netip.Addr) (*dns.Msg, error) {
	d := &net.Dialer{}
	if src.IsValid() {
		if network == "udp" {
			d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
		} else {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
		}
	}
	// The context bounds the exchange; the client's own timeouts, 2 s by
	// default, would cut a slow upstream short.
	c := &dns.Client{Net: network, Dialer: d, Timeout: time.Hour, TsigSecret: f.tsig}
	co, err := c.DialContext(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer co.Close()
	stop := context.AfterFunc(ctx, func() { co.Close() })
	defer stop()
	r, _, err := c.ExchangeWithConnContext(ctx, m, co)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, m.Question[0].Name) ||
		r.Question[0].Qtype != m.Question[0].Qtype || r.Question[0].Qclass != m.Question[0].Qclass {
		return nil, errMismatch
	}
	return r, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// query is the query for q sent to the upstream or, marked, to a peer.
func query(q dns.Question, do, peer bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Qtype)
	m.Question[0].Qclass = q.Qclass
	m.RecursionDesired = true
	m.SetEdns0(ednsSize, do)
	if peer {
		opt := m.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: PeerOption})
	}
	return m
}

// hasPeerOption reports whether m carries PeerOption.
func hasPeerOption(m *dns.Msg) bool {
	opt := m.IsEdns0()
	if opt == nil {
		return false
	}
	for _, o := range opt.Option {
		if o.Option() == PeerOption {
			return true
		}
	}
	return false
}

// reply answers req with ans (nil: SERVFAIL), cut to the client's UDP size
// over UDP.
func (f *Forwarder) reply(w dns.ResponseWriter, req, ans *dns.Msg) {
	if ans == nil {
		f.refuse(w, req, dns.RcodeServerFailure)
		return
	}
	m := ans.Copy()
	m.Id = req.Id
	m.Response = true
	m.Opcode = req.Opcode
	m.Authoritative = false
	m.RecursionDesired = req.RecursionDesired
	m.RecursionAvailable = true
	m.CheckingDisabled = req.CheckingDisabled
	m.Question = []dns.Question{req.Question[0]} // the client's own case (0x20)
	m.Extra = withoutPseudo(m.Extra)
	f.write(w, req, m)
}

// refuse answers req with rcode and nothing else.
func (f *Forwarder) refuse(w dns.ResponseWriter, req *dns.Msg, rcode int) {
	m := new(dns.Msg)
	m.SetRcode(req, rcode)
	m.RecursionAvailable = true
	if len(req.Question) > 1 {
		m.Question = nil
	}
	f.write(w, req, m)
}

func (f *Forwarder) write(w dns.ResponseWriter, req, m *dns.Msg) {
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(ednsSize, opt.Do())
		size = int(min(max(opt.UDPSize(), dns.MinMsgSize), ednsSize))
	}
	signed := f.tsig != nil && req.IsTsig() != nil && w.TsigStatus() == nil
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		if signed {
			size -= tsigRoom
		}
		m.Truncate(size)
	} else {
		m.Compress = true
	}
	if signed {
		m.SetTsig(tsigName, dns.HmacSHA256, tsigFudge, f.now().Unix())
	}
	if err := w.WriteMsg(m); err != nil {
		f.log.Debug("dns reply", "err", err)
	}
}
