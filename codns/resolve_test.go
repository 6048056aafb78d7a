package codns

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// answerDual answers A and AAAA queries of "dual.example." and NXDOMAIN
// for every other name.
func answerDual(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 60}
	switch {
	case q.Name != "dual.example.":
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IPv4(192, 0, 2, 7)})
	case q.Qtype == dns.TypeAAAA:
		m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.ParseIP("2001:db8::7")})
	}
	w.WriteMsg(m)
}

// A lookup in the process goes the way of a client's: the upstream, the
// cache, and NXDOMAIN as a name not found.
func TestLookupNetIP(t *testing.T) {
	up := startFake(t, "127.0.0.1", answerDual)
	n := startNode(t, "127.0.0.1", Config{Upstream: up.addr})
	ips, err := n.f.LookupNetIP(t.Context(), "ip", "dual.example")
	want := []netip.Addr{netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::7")}
	if err != nil || len(ips) != 2 || ips[0] != want[0] || ips[1] != want[1] {
		t.Fatalf("LookupNetIP ip: %v %v, want %v", ips, err, want)
	}
	if got := counter(t, n.f, "lookups", "local"); got != 2 {
		t.Errorf("lookups by the upstream %v, want 2 (A and AAAA)", got)
	}
	ips, err = n.f.LookupNetIP(t.Context(), "ip4", "DUAL.example.")
	if err != nil || len(ips) != 1 || ips[0] != want[0] {
		t.Fatalf("LookupNetIP ip4: %v %v", ips, err)
	}
	if got := counter(t, n.f, "lookups", "cache"); got != 1 {
		t.Errorf("lookups from the cache %v, want 1", got)
	}
	if q := up.queries.Load(); q != 2 {
		t.Errorf("the upstream was asked %d times, want 2", q)
	}
	_, err = n.f.LookupNetIP(t.Context(), "ip", "missing.example")
	if de, ok := errors.AsType[*net.DNSError](err); !ok || !de.IsNotFound {
		t.Errorf("missing name: %v, want a DNSError not found", err)
	}
	ips, err = n.f.LookupNetIP(t.Context(), "ip", "::ffff:10.0.0.1")
	if err != nil || len(ips) != 1 || ips[0] != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("an address: %v %v", ips, err)
	}
	if _, err := n.f.LookupNetIP(t.Context(), "tcp", "dual.example"); err == nil {
		t.Error("network tcp: no error")
	}
}

// With the upstream stalling, the lookup is a peer's answer, after the
// delay; with no peer, it fails as temporary when the lookup times out.
func TestLookupNetIPSickUpstream(t *testing.T) {
	sick := startFake(t, "127.0.0.1", stall(t))
	healthy := startFake(t, "127.0.0.1", answerA)
	peer := startNode(t, "127.0.0.2", Config{Upstream: healthy.addr})
	n := startNode(t, "127.0.0.3", Config{
		Upstream: sick.addr,
		Peers:    []netip.AddrPort{netip.MustParseAddrPort(peer.addr)},
		Delay:    DelayConfig{Initial: 20 * time.Millisecond},
	})
	ips, err := n.f.LookupNetIP(t.Context(), "ip4", "origin.example")
	if err != nil || len(ips) != 1 || ips[0] != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("LookupNetIP: %v %v, want 192.0.2.1 from the peer", ips, err)
	}
	if got := counter(t, n.f, "lookups", "peer"); got != 1 {
		t.Errorf("lookups won by the peer %v, want 1", got)
	}

	alone := startNode(t, "127.0.0.4", Config{Upstream: sick.addr, Timeout: 300 * time.Millisecond})
	_, err = alone.f.LookupNetIP(t.Context(), "ip4", "origin.example")
	if de, ok := errors.AsType[*net.DNSError](err); !ok || !de.IsTemporary {
		t.Errorf("no answer: %v, want a temporary DNSError", err)
	}
	if got := counter(t, alone.f, "lookups", "none"); got != 1 {
		t.Errorf("lookups unanswered %v, want 1", got)
	}
}
