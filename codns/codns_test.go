package codns

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stampede-dev/stampede/internal/metrics/metricstest"
)

// fakeDNS is a test resolver on loopback, UDP and TCP on one port, whose
// answers its handler makes.
type fakeDNS struct {
	addr    string
	queries atomic.Int64
}

func startFake(t testing.TB, ip string, h func(w dns.ResponseWriter, r *dns.Msg)) *fakeDNS {
	t.Helper()
	pc, ln, err := Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeDNS{addr: pc.LocalAddr().String()}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		f.queries.Add(1)
		h(w, r)
	})
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
		t.Cleanup(func() { s.Shutdown() })
	}
	return f
}

// answerA answers every A query with 192.0.2.1 for 60 s.
func answerA(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)})
	w.WriteMsg(m)
}

func servfail(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeServerFailure)
	w.WriteMsg(m)
}

// stall never answers until the test ends.
func stall(t *testing.T) func(w dns.ResponseWriter, r *dns.Msg) {
	return func(w dns.ResponseWriter, r *dns.Msg) { <-t.Context().Done() }
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// node is a running forwarder.
type node struct {
	f    *Forwarder
	addr string
}

// startNode runs a forwarder for cfg on ip until the test ends.
func startNode(t *testing.T, ip string, cfg Config) *node {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, ln, err := Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Serve(ctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	// The sockets are open: queries wait in them until Serve reads.
	return &node{f: f, addr: pc.LocalAddr().String()}
}

// ask sends a query for name over network, from src if not empty.
func ask(t *testing.T, network, addr, src, name string, edit ...func(*dns.Msg)) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	for _, e := range edit {
		e(m)
	}
	d := &net.Dialer{}
	if src != "" {
		if network == "udp" {
			d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(src)}
		} else {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
		}
	}
	c := &dns.Client{Net: network, Dialer: d, Timeout: 10 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", network, name, err)
	}
	return r
}

func counter(t *testing.T, f *Forwarder, name, label string) float64 {
	t.Helper()
	switch name {
	case "lookups":
		return testutil.ToFloat64(f.m.clientLookups[index(t, answeredByNames[:], label)])
	case "peer_requests":
		return testutil.ToFloat64(f.m.peerRequests[index(t, answeredByNames[:], label)])
	case "peer_queries":
		return testutil.ToFloat64(f.m.peerQueries[index(t, peerQueryNames[:], label)])
	case "upstream_failures":
		return testutil.ToFloat64(f.m.upstreamFailures[index(t, upstreamFailNames[:], label)])
	case "refused":
		return testutil.ToFloat64(f.m.refused[index(t, refusedNames[:], label)])
	case "sent_to_peers":
		return testutil.ToFloat64(f.m.sentToPeers)
	case "tcp_retries":
		return testutil.ToFloat64(f.m.tcpRetries)
	}
	t.Fatalf("no counter %s", name)
	return 0
}

func index(t *testing.T, names []string, s string) int {
	for i, n := range names {
		if n == s {
			return i
		}
	}
	t.Fatalf("no label %q in %v", s, names)
	return 0
}

func TestForwarderAnswersAndCaches(t *testing.T) {
	up := startFake(t, "127.0.0.1", answerA)
	var mu sync.Mutex
	now := time.Now()
	n := startNode(t, "127.0.0.1", Config{Upstream: up.addr, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	for _, network := range []string{"udp", "tcp"} {
		r := ask(t, network, n.addr, "", "WWW.example.", func(m *dns.Msg) { m.SetEdns0(4096, false) })
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
			t.Fatalf("%s: answer %v", network, r)
		}
		if r.Question[0].Name != "WWW.example." || !r.RecursionAvailable || r.IsEdns0() == nil {
			t.Errorf("%s: question %v, RA %v, OPT %v: want the client's case, RA, an OPT", network, r.Question, r.RecursionAvailable, r.IsEdns0())
		}
	}
	if got := up.queries.Load(); got != 1 {
		t.Errorf("upstream asked %d times, want once (the second from the cache)", got)
	}
	mu.Lock()
	now = now.Add(45 * time.Second)
	mu.Unlock()
	r := ask(t, "udp", n.addr, "", "www.example.")
	if ttl := r.Answer[0].Header().Ttl; ttl != 15 || r.IsEdns0() != nil {
		t.Errorf("after 45 s: TTL %d, OPT %v; want 15 and no OPT for a query without", ttl, r.IsEdns0())
	}
	if got := counter(t, n.f, "lookups", "cache"); got != 2 {
		t.Errorf("lookups from the cache %v, want 2", got)
	}
	if got := counter(t, n.f, "lookups", "local"); got != 1 {
		t.Errorf("lookups answered by the upstream %v, want 1", got)
	}
	mu.Lock()
	now = now.Add(15 * time.Second)
	mu.Unlock()
	ask(t, "udp", n.addr, "", "www.example.")
	if got := up.queries.Load(); got != 2 {
		t.Errorf("upstream asked %d times, want twice (the answer expired)", got)
	}

	// The metrics page: parses, passes the linter, has the series.
	srv := httptest.NewServer(n.f.Handler())
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	names := metricstest.Check(t, page)
	for _, want := range []string{"stampede_dns_lookups_total", "stampede_dns_lookups_sent_to_peers_total", "stampede_dns_peer_queries_total",
		"stampede_dns_upstream_failures_total", "stampede_dns_lookup_duration_seconds", "stampede_dns_peer_delay_seconds", "stampede_dns_cache_entries"} {
		if !names[want] {
			t.Errorf("no %s on /metrics", want)
		}
	}
	if !bytes.Contains(page, []byte(`stampede_dns_lookups_total{by="cache"} 2`)) {
		t.Errorf("/metrics does not count 2 lookups from the cache:\n%s", page)
	}
}

// A lookup the upstream does not answer within the delay goes to the peer
// the name's weight picks, whose answer wins.
func TestForwarderSlowUpstreamAsksPeer(t *testing.T) {
	sick := startFake(t, "127.0.0.1", stall(t))
	healthy := startFake(t, "127.0.0.1", answerA)
	peer := startNode(t, "127.0.0.2", Config{Upstream: healthy.addr})
	n := startNode(t, "127.0.0.3", Config{
		Upstream: sick.addr,
		Peers:    []netip.AddrPort{netip.MustParseAddrPort(peer.addr)},
		Delay:    DelayConfig{Initial: 20 * time.Millisecond},
	})
	r := ask(t, "udp", n.addr, "", "slow.example.")
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("answer %v", r)
	}
	if got := counter(t, n.f, "lookups", "peer"); got != 1 {
		t.Errorf("lookups won by peers %v, want 1", got)
	}
	if got := counter(t, n.f, "sent_to_peers", ""); got != 1 {
		t.Errorf("lookups sent to peers %v, want 1", got)
	}
	if got := counter(t, n.f, "peer_queries", "won"); got != 1 {
		t.Errorf("peer queries won %v, want 1", got)
	}
	// The peer answered it as a peer's query, from its upstream, and
	// counted it apart from its clients' lookups.
	if got := counter(t, peer.f, "peer_requests", "local"); got != 1 {
		t.Errorf("the peer's answered peer requests %v, want 1", got)
	}
	if got := counter(t, peer.f, "lookups", "local"); got != 0 {
		t.Errorf("the peer counted %v client lookups, want 0", got)
	}
	// The answer is cached: the next lookup asks nobody.
	ask(t, "udp", n.addr, "", "slow.example.")
	if got := counter(t, n.f, "lookups", "cache"); got != 1 {
		t.Errorf("lookups from the cache %v, want 1", got)
	}
}

// An upstream that answers SERVFAIL sends the lookup to a peer at once,
// long before the delay.
func TestForwarderServfailAsksPeerAtOnce(t *testing.T) {
	failing := startFake(t, "127.0.0.1", servfail)
	healthy := startFake(t, "127.0.0.1", answerA)
	peer := startNode(t, "127.0.0.2", Config{Upstream: healthy.addr})
	n := startNode(t, "127.0.0.3", Config{
		Upstream: failing.addr,
		Peers:    []netip.AddrPort{netip.MustParseAddrPort(peer.addr)},
		Timeout:  time.Minute,
		Delay:    DelayConfig{Initial: time.Minute, Min: time.Minute, Max: time.Minute},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := new(dns.Client)
	m := new(dns.Msg).SetQuestion("fail.example.", dns.TypeA)
	r, _, err := c.ExchangeContext(ctx, m, n.addr)
	if err != nil {
		t.Fatalf("no answer well before the 1-minute delay: %v", err)
	}
	if r.Rcode != dns.RcodeSuccess || counter(t, n.f, "lookups", "peer") != 1 {
		t.Errorf("answer %v, by peers %v; want the peer's", r, counter(t, n.f, "lookups", "peer"))
	}
	if got := counter(t, n.f, "upstream_failures", "rcode"); got != 1 {
		t.Errorf("upstream failures (rcode) %v, want 1", got)
	}
}

// With the upstream and every peer failing, the client gets SERVFAIL, and
// the failure is not cached.
func TestForwarderAllFail(t *testing.T) {
	failing := startFake(t, "127.0.0.1", servfail)
	peer := startNode(t, "127.0.0.2", Config{Upstream: failing.addr})
	n := startNode(t, "127.0.0.3", Config{Upstream: failing.addr, Peers: []netip.AddrPort{netip.MustParseAddrPort(peer.addr)}})
	for range 2 {
		if r := ask(t, "udp", n.addr, "", "x.example."); r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
		}
	}
	if got := counter(t, n.f, "lookups", "none"); got != 2 {
		t.Errorf("failed lookups %v, want 2", got)
	}
	if got := counter(t, n.f, "peer_queries", "failed"); got != 2 {
		t.Errorf("failed peer queries %v, want 2", got)
	}
}

// A truncated answer over UDP is asked again over TCP; an answer too
// large for the client's UDP size reaches it truncated, and whole over
// TCP.
func TestForwarderTruncation(t *testing.T) {
	const n = 60 // A records: about 1 KB, past 512
	up := startFake(t, "127.0.0.1", func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			m.Truncated = true
			w.WriteMsg(m)
			return
		}
		for i := range n {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, byte(i))})
		}
		w.WriteMsg(m)
	})
	node := startNode(t, "127.0.0.1", Config{Upstream: up.addr})
	r := ask(t, "udp", node.addr, "", "big.example.", func(m *dns.Msg) { m.SetEdns0(4096, false) })
	if r.Truncated || len(r.Answer) != n {
		t.Errorf("EDNS 4096 over UDP: TC %v, %d answers; want all %d", r.Truncated, len(r.Answer), n)
	}
	if got := counter(t, node.f, "tcp_retries", ""); got != 1 {
		t.Errorf("TCP retries %v, want 1", got)
	}
	r = ask(t, "udp", node.addr, "", "big.example.")
	r.Compress = true // as it came
	if !r.Truncated || r.Len() > 512 || len(r.Answer) >= n {
		t.Errorf("no EDNS over UDP: TC %v, %d bytes; want truncated within 512", r.Truncated, r.Len())
	}
	if r = ask(t, "tcp", node.addr, "", "big.example."); r.Truncated || len(r.Answer) != n {
		t.Errorf("over TCP: TC %v, %d answers; want all %d", r.Truncated, len(r.Answer), n)
	}
}

// Clients outside Allow are refused; so are peers past their rate; a
// peer's query is never passed on to another peer.
func TestForwarderAccess(t *testing.T) {
	up := startFake(t, "127.0.0.1", answerA)
	failing := startFake(t, "127.0.0.1", servfail)
	third := startNode(t, "127.0.0.4", Config{Upstream: up.addr})
	n := startNode(t, "127.0.0.3", Config{
		Upstream:  failing.addr,
		Allow:     []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Peers:     []netip.AddrPort{netip.MustParseAddrPort("127.0.0.2:53"), netip.MustParseAddrPort(third.addr)},
		PeerRate:  0.001,
		PeerBurst: 2,
	})
	if r := ask(t, "udp", n.addr, "127.0.0.5", "a.example."); r.Rcode != dns.RcodeRefused {
		t.Errorf("from 127.0.0.5, not allowed: %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if r := ask(t, "tcp", n.addr, "127.0.0.5", "a.example."); r.Rcode != dns.RcodeRefused {
		t.Errorf("from 127.0.0.5 over TCP: %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if got := counter(t, n.f, "refused", "not-allowed"); got != 2 {
		t.Errorf("refused not-allowed %v, want 2", got)
	}
	// From the peer 127.0.0.2, marked: its upstream fails, and it does not
	// turn to the third node, which would have answered.
	if r := ask(t, "udp", n.addr, "127.0.0.2", "b.example.", asPeer); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("peer query, upstream failing: %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	if got := third.f.m.peerRequests; testutilSum(got[:]) != 0 {
		t.Errorf("a peer's query was passed on to another peer (%v)", testutilSum(got[:]))
	}
	if got := counter(t, n.f, "peer_requests", "none"); got != 1 {
		t.Errorf("peer requests failed %v, want 1", got)
	}
	// Its burst is 2: the third is refused.
	ask(t, "udp", n.addr, "127.0.0.2", "c.example.", asPeer)
	if r := ask(t, "udp", n.addr, "127.0.0.2", "d.example.", asPeer); r.Rcode != dns.RcodeRefused {
		t.Errorf("third peer query of a burst of 2: %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if got := counter(t, n.f, "refused", "rate-limited"); got != 1 {
		t.Errorf("refused rate-limited %v, want 1", got)
	}
}

// asPeer marks a query as a peer's.
func asPeer(m *dns.Msg) {
	m.SetEdns0(1232, false)
	m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: PeerOption})
}

func testutilSum(cs []prometheus.Counter) float64 {
	var sum float64
	for _, c := range cs {
		sum += testutil.ToFloat64(c)
	}
	return sum
}

// Every node may be given the same peer list: a forwarder ignores its own
// address on it, and does not ask itself.
func TestForwarderIgnoresItself(t *testing.T) {
	up := startFake(t, "127.0.0.1", servfail)
	pc, ln, err := Listen("127.0.0.3:0")
	if err != nil {
		t.Fatal(err)
	}
	self := netip.MustParseAddrPort(pc.LocalAddr().String())
	other := netip.MustParseAddrPort(startFake(t, "127.0.0.9", stall(t)).addr)
	f, err := New(Config{Upstream: up.addr, Peers: []netip.AddrPort{self, other}, PeerTimeout: 100 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Serve(ctx, pc, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	if r := ask(t, "udp", self.String(), "", "x.example."); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	if got := counter(t, f, "peer_requests", "none"); got != 0 {
		t.Errorf("asked itself: %v peer requests", got)
	}
	f.mu.Lock()
	order := f.peers.Order("x.example.", f.now())
	f.mu.Unlock()
	if len(order) != 1 || order[0] != other {
		t.Errorf("peers %v, want only %v", order, other)
	}
}

// Malformed queries get FORMERR or nothing, and do not stop the
// forwarder.
func TestForwarderMalformed(t *testing.T) {
	up := startFake(t, "127.0.0.1", answerA)
	n := startNode(t, "127.0.0.1", Config{Upstream: up.addr})
	c, err := net.Dial("udp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, junk := range [][]byte{{1, 2, 3}, bytes.Repeat([]byte{0xff}, 100), make([]byte, 12)} {
		c.Write(junk)
	}
	// Two questions: FORMERR.
	m := new(dns.Msg).SetQuestion("a.example.", dns.TypeA)
	m.Question = append(m.Question, dns.Question{Name: "b.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, n.addr)
	if err != nil || r.Rcode != dns.RcodeFormatError {
		t.Errorf("two questions: %v %v, want FORMERR", r, err)
	}
	// A question whose name runs past the packet, over TCP.
	tc, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	tc.Write([]byte{0, 14, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 63, 'a'})
	tc.Close()
	if r := ask(t, "udp", n.addr, "", "ok.example."); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("after junk: %v", r)
	}
	if r := ask(t, "tcp", n.addr, "", "ok.example."); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("after junk, over TCP: %v", r)
	}
}

// With a key, peers sign their queries and answers: a signed query is a
// peer's from any address, one signed with another key gets NOTAUTH, and
// a peer's address alone no longer makes a query a peer's.
func TestForwarderKey(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	healthy := startFake(t, "127.0.0.1", func(w dns.ResponseWriter, r *dns.Msg) {
		if !strings.HasPrefix(r.Question[0].Name, "big") {
			answerA(w, r)
			return
		}
		m := new(dns.Msg).SetReply(r)
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			m.Truncated = true
			w.WriteMsg(m)
			return
		}
		for i := range 100 {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, byte(i))})
		}
		w.WriteMsg(m)
	})
	failing := startFake(t, "127.0.0.1", servfail)
	peer := startNode(t, "127.0.0.2", Config{
		Upstream: healthy.addr,
		Key:      key,
		Allow:    []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Peers:    []netip.AddrPort{netip.MustParseAddrPort("127.0.0.4:53")},
	})
	peerAddr := netip.MustParseAddrPort(peer.addr)
	n := startNode(t, "127.0.0.3", Config{Upstream: failing.addr, Key: key, Peers: []netip.AddrPort{peerAddr}})
	if r := ask(t, "udp", n.addr, "", "signed.example."); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.IsTsig() != nil {
		t.Fatalf("answer %v: want the peer's, without its signature", r)
	}
	if got := counter(t, peer.f, "peer_requests", "local"); got != 1 {
		t.Errorf("the peer answered %v signed queries from 127.0.0.3 (not on its lists), want 1", got)
	}
	// A large answer: the peer's, signed, is truncated over UDP, and asked
	// again over TCP, signed afresh.
	r := ask(t, "tcp", n.addr, "", "big.example.")
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 100 || counter(t, n.f, "lookups", "peer") != 2 {
		t.Errorf("a large answer: %s, %d records, won by peers %v; want 100, from the peer",
			dns.RcodeToString[r.Rcode], len(r.Answer), counter(t, n.f, "lookups", "peer"))
	}
	if got := counter(t, n.f, "tcp_retries", ""); got != 1 {
		t.Errorf("TCP retries %v, want 1", got)
	}

	// Another key: NOTAUTH, and the lookup fails.
	other := startNode(t, "127.0.0.5", Config{Upstream: failing.addr, Key: []byte("another key, as long as the first"), Peers: []netip.AddrPort{peerAddr}})
	if r := ask(t, "udp", other.addr, "", "forged.example."); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("with another key: %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	if got := counter(t, peer.f, "refused", "bad-signature"); got != 1 {
		t.Errorf("refused bad-signature %v, want 1", got)
	}
	// No key: the peer's address list is not enough.
	for _, src := range []string{"127.0.0.4", "127.0.0.3"} {
		if r := ask(t, "udp", peer.addr, src, "unsigned.example.", asPeer); r.Rcode != dns.RcodeRefused {
			t.Errorf("unsigned from %s: %s, want REFUSED", src, dns.RcodeToString[r.Rcode])
		}
	}
	// A peer without the key does not take an unsigned answer from one
	// with it (nor can it get one).
	unkeyed := startNode(t, "127.0.0.6", Config{Upstream: failing.addr, Peers: []netip.AddrPort{peerAddr}})
	if r := ask(t, "udp", unkeyed.addr, "", "nokey.example."); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("without the key: %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
}

// A query the upstream drops (a lost packet) is sent again, and its
// answer is the lookup's, without peers.
func TestForwarderRetransmits(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	up := startFake(t, "127.0.0.1", func(w dns.ResponseWriter, r *dns.Msg) {
		mu.Lock()
		first := !seen[r.Question[0].Name]
		seen[r.Question[0].Name] = true
		mu.Unlock()
		if !first {
			answerA(w, r)
		}
	})
	n := startNode(t, "127.0.0.1", Config{Upstream: up.addr})
	if r := ask(t, "udp", n.addr, "", "lost.example."); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("answer %v", r)
	}
	if got := up.queries.Load(); got != 2 {
		t.Errorf("upstream asked %d times, want 2", got)
	}
	if got := counter(t, n.f, "lookups", "local"); got != 1 {
		t.Errorf("lookups answered by the upstream %v, want 1", got)
	}
}

func TestResolver(t *testing.T) {
	up := startFake(t, "127.0.0.1", answerA)
	n := startNode(t, "127.0.0.1", Config{Upstream: up.addr})
	ips, err := Resolver(n.addr).LookupNetIP(t.Context(), "ip4", "origin.example")
	if err != nil || len(ips) != 1 || ips[0] != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("LookupNetIP: %v %v, want 192.0.2.1", ips, err)
	}
	if got := counter(t, n.f, "lookups", "local"); got != 1 {
		t.Errorf("lookups by the upstream %v, want 1", got)
	}
}

// When the first peer does not answer in time either, the next is asked
// (after twice the wait), and its answer wins.
func TestForwarderNextPeer(t *testing.T) {
	sick := startFake(t, "127.0.0.1", stall(t))
	healthy := startFake(t, "127.0.0.1", answerA)
	slow := startNode(t, "127.0.0.2", Config{Upstream: sick.addr})
	good := startNode(t, "127.0.0.4", Config{Upstream: healthy.addr})
	peers := []netip.AddrPort{netip.MustParseAddrPort(slow.addr), netip.MustParseAddrPort(good.addr)}
	n := startNode(t, "127.0.0.3", Config{Upstream: sick.addr, Peers: peers, Delay: DelayConfig{Initial: 20 * time.Millisecond}})
	// A name the slow peer comes first for.
	name := ""
	for i := 0; name == ""; i++ {
		if q := fmt.Sprintf("n%d.example.", i); NewPeers(peers).Order(q, time.Now())[0] == peers[0] {
			name = q
		}
	}
	if r := ask(t, "udp", n.addr, "", name); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("answer %v", r)
	}
	if got := counter(t, good.f, "peer_requests", "local"); got != 1 {
		t.Errorf("the second peer answered %v queries, want 1", got)
	}
	if got := counter(t, n.f, "lookups", "peer"); got != 1 {
		t.Errorf("lookups won by peers %v, want 1", got)
	}
}

// Past MaxLookups under way, a query is refused.
func TestForwarderBusy(t *testing.T) {
	arrived := make(chan struct{}, 10)
	sick := startFake(t, "127.0.0.1", func(w dns.ResponseWriter, r *dns.Msg) {
		arrived <- struct{}{}
		<-t.Context().Done()
	})
	n := startNode(t, "127.0.0.1", Config{Upstream: sick.addr, MaxLookups: 1, Timeout: time.Minute})
	c, err := net.Dial("udp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := new(dns.Msg).SetQuestion("held.example.", dns.TypeA).Pack()
	c.Write(b) // holds the one slot until the test ends
	<-arrived
	if r := ask(t, "udp", n.addr, "", "other.example."); r.Rcode != dns.RcodeRefused {
		t.Errorf("a second lookup: %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if got := counter(t, n.f, "refused", "busy"); got != 1 {
		t.Errorf("refused busy %v, want 1", got)
	}
}

// Queries to the upstream that outlive their lookups (a peer answered
// first) are bounded by MaxLookups too: past it, a lookup asks the peers
// alone, at once.
func TestForwarderUpstreamBusy(t *testing.T) {
	sick := startFake(t, "127.0.0.1", stall(t))
	healthy := startFake(t, "127.0.0.1", answerA)
	peer := startNode(t, "127.0.0.2", Config{Upstream: healthy.addr})
	n := startNode(t, "127.0.0.3", Config{
		Upstream:   sick.addr,
		Peers:      []netip.AddrPort{netip.MustParseAddrPort(peer.addr)},
		MaxLookups: 1,
		Timeout:    time.Minute,
		Delay:      DelayConfig{Initial: 20 * time.Millisecond},
	})
	// The first lookup is the peer's; its upstream query stalls on.
	for _, name := range []string{"first.example.", "second.example."} {
		// The lookup before frees its slot just after its answer is
		// written: wait for it, or this one is refused as busy.
		for deadline := time.Now().Add(5 * time.Second); len(n.f.slots) > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if r := ask(t, "udp", n.addr, "", name); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("%s: answer %v", name, r)
		}
	}
	if got := counter(t, n.f, "upstream_failures", "busy"); got != 1 {
		t.Errorf("upstream not asked (busy) %v times, want 1: the second lookup's", got)
	}
	if got := counter(t, n.f, "lookups", "peer"); got != 2 {
		t.Errorf("lookups won by peers %v, want 2", got)
	}
	if got := sick.queries.Load(); got > 1 {
		t.Errorf("the upstream got %d queries, want the first lookup's alone", got)
	}
}

// A peer that does not answer within PeerTimeout fails the query: three
// in a row, and it is asked last.
func TestForwarderPeerTimeoutsCount(t *testing.T) {
	failing := startFake(t, "127.0.0.1", servfail)
	mute := startFake(t, "127.0.0.2", stall(t))
	n := startNode(t, "127.0.0.3", Config{
		Upstream:    failing.addr,
		Peers:       []netip.AddrPort{netip.MustParseAddrPort(mute.addr)},
		PeerTimeout: 50 * time.Millisecond,
	})
	for i := range peerFailures {
		if r := ask(t, "udp", n.addr, "", fmt.Sprintf("t%d.example.", i)); r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
		}
	}
	n.f.mu.Lock()
	down := n.f.peers.down(n.f.now())
	n.f.mu.Unlock()
	if down != 1 {
		t.Errorf("%d peers down after %d timeouts in a row, want 1", down, peerFailures)
	}
}

// An answer is taken only from the upstream's address and port, with the
// query's ID and to its question: a forged one is neither given nor
// cached.
func TestForwarderRejectsForgedAnswers(t *testing.T) {
	forged := func(r *dns.Msg, name string) *dns.Msg {
		m := new(dns.Msg).SetReply(r)
		m.Question[0].Name = name
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 66)})
		return m
	}
	up := startFake(t, "127.0.0.1", func(w dns.ResponseWriter, r *dns.Msg) {
		switch name := r.Question[0].Name; name {
		case "id.example.":
			m := forged(r, name)
			m.Id++
			w.WriteMsg(m)
		case "port.example.", "addr.example.":
			src := "127.0.0.1:0"
			if name == "addr.example." {
				src = "127.0.0.5:0"
			}
			c, err := net.ListenPacket("udp", src)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := forged(r, name).Pack()
			c.WriteTo(b, w.RemoteAddr())
			c.Close()
		case "question.example.":
			w.WriteMsg(forged(r, "evil.example."))
			return
		}
		answerA(w, r)
	})
	n := startNode(t, "127.0.0.1", Config{Upstream: up.addr})
	for _, name := range []string{"id.example.", "port.example.", "addr.example."} {
		r := ask(t, "udp", n.addr, "", name)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
			t.Errorf("%s: answer %v, want the upstream's own (192.0.2.1)", name, r)
		}
	}
	if r := ask(t, "udp", n.addr, "", "question.example."); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("an answer to another question: %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	for _, name := range []string{"question.example.", "evil.example."} {
		if m := n.f.cache.Get(KeyOf(dns.Question{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}, false), n.f.now()); m != nil {
			t.Errorf("%s cached from an answer to another question: %v", name, m)
		}
	}
}

// Past MaxLookups TCP connections open, a new one is closed as it comes;
// one closing makes room.
func TestConnLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"})
	l := &connLimit{Listener: ln, slots: make(chan struct{}, 1), refused: refused}
	defer l.Close()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	first, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	// The second is closed: its read ends.
	second := dial()
	second.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := second.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read %d bytes, %v, from a connection past the limit; want it closed", n, err)
	}
	if got := testutil.ToFloat64(refused); got != 1 {
		t.Errorf("refused %v, want 1", got)
	}
	first.Close()
	first.Close() // gives its slot back once
	dial()
	c := <-accepted
	if c == nil {
		t.Fatal("no third connection after the first closed")
	}
	c.Close()
	if len(l.slots) != 0 {
		t.Errorf("%d slots held with every connection closed, want 0", len(l.slots))
	}
}
