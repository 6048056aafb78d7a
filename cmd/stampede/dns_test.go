package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/stampede-dev/stampede/codns"
)

// startDNSUpstream runs a resolver on loopback that answers every A query
// with 192.0.2.7, or, stalled, never answers until the test ends.
func startDNSUpstream(t *testing.T, stalled bool) string {
	t.Helper()
	if stalled {
		return startResolver(t, func(w dns.ResponseWriter, r *dns.Msg) { <-t.Context().Done() })
	}
	return startResolver(t, answerEvery(net.IPv4(192, 0, 2, 7)))
}

// answerEvery answers every A query with ip, and other types with no
// data (a SOA, so that the answer is cached).
func answerEvery(ip net.IP) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg).SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: ip})
		} else {
			m.Ns = append(m.Ns, &dns.SOA{Hdr: dns.RR_Header{Name: "test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
				Ns: "ns.test.", Mbox: "hostmaster.test.", Minttl: 60})
		}
		w.WriteMsg(m)
	}
}

// startResolver runs a resolver on loopback, UDP and TCP, answering with
// h until the test ends.
func startResolver(t *testing.T, h dns.HandlerFunc) string {
	t.Helper()
	pc, ln, err := codns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
		t.Cleanup(func() { s.Shutdown() })
	}
	return pc.LocalAddr().String()
}

// startDNSCommand runs "stampede dns args..." until the test ends, and
// returns the addresses it said it was ready on.
func startDNSCommand(t *testing.T, ready int, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	addrc := make(chan string, ready)
	e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr, ready: func(a string) { addrc <- a }}
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"dns"}, args...), e) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("dns exited %d after its context ended: %s", code, stderr.String())
		}
	})
	var addrs []string
	for range ready {
		select {
		case a := <-addrc:
			addrs = append(addrs, a)
		case code := <-done:
			done <- code
			t.Fatalf("dns exited %d: %s", code, stderr.String())
		}
	}
	return addrs
}

// Two nodes: the first's resolver stalls, so its lookups are answered by
// the second (a third peer on its list is not there, and asked in vain for
// the names it comes first for); both answer over UDP and TCP, and
// /metrics says so.
func TestDNSCommand(t *testing.T) {
	healthy := startDNSUpstream(t, false)
	sick := startDNSUpstream(t, true)
	peer := startDNSCommand(t, 1, "--listen", "127.0.0.2:0", "--upstream", healthy, "-q")[0]
	// The peer that is not there: a socket no one reads, not port 53,
	// where a local resolver bound to every address would answer.
	absent, err := net.ListenPacket("udp", "127.0.0.9:0")
	if err != nil {
		t.Fatal(err)
	}
	defer absent.Close()
	addrs := startDNSCommand(t, 2, "--listen", "127.0.0.3:0", "--upstream", sick, "--peers", peer+","+absent.LocalAddr().String(),
		"--metrics-listen", "127.0.0.1:0", "-q")
	node, metricsAddr := addrs[0], addrs[1]
	for _, network := range []string{"udp", "tcp"} {
		c := &dns.Client{Net: network, Timeout: 10 * time.Second}
		m := new(dns.Msg).SetQuestion(network+".example.", dns.TypeA)
		r, _, err := c.Exchange(m, node)
		if err != nil {
			t.Fatalf("%s: %v", network, err)
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.7" {
			t.Errorf("%s: answer %v", network, r)
		}
	}
	base := "http://" + metricsAddr
	if got := metric(t, base, `stampede_dns_lookups_total{by="peer"}`); got != 2 {
		t.Errorf("lookups won by peers %v, want 2", got)
	}
	if got := metric(t, base, `stampede_dns_lookups_sent_to_peers_total`); got != 2 {
		t.Errorf("lookups sent to peers %v, want 2", got)
	}
}

// With --key, a peer that is not on a node's lists nor in its --allow
// networks is served when it signs its queries with the same key.
func TestDNSKey(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	if code, _, stderr := runCmd(t, "keygen", "-o", key); code != exitOK {
		t.Fatalf("keygen: exit %d: %s", code, stderr)
	}
	healthy := startDNSUpstream(t, false)
	sick := startDNSUpstream(t, true)
	peer := startDNSCommand(t, 1, "--listen", "127.0.0.2:0", "--upstream", healthy, "--allow", "127.0.0.1", "--key", key, "-q")[0]
	node := startDNSCommand(t, 1, "--listen", "127.0.0.3:0", "--upstream", sick, "--peers", peer, "--key", key, "-q")[0]
	c := &dns.Client{Timeout: 10 * time.Second}
	r, _, err := c.Exchange(new(dns.Msg).SetQuestion("signed.example.", dns.TypeA), node)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("answer %v, %v; want the peer's", r, err)
	}
}

func TestDNSFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"extra"},
		{"--upstream", "127.0.0.1:53", "--listen", "nowhere"},
		{"--upstream", "127.0.0.1:53", "--peers", "nowhere"},
		{"--upstream", "127.0.0.1:53", "--allow", "10.0.0.0/33"},
		{"--upstream", "127.0.0.1:53", "--max-peers", "0"},
		{"--upstream", "127.0.0.1:53", "--timeout", "0s"},
		{"--upstream", "127.0.0.1:53", "--metrics-listen", "9090"},
		{"--upstream", "a:b:c:d]"},
		{"--upstream", "host:port"},
		{"--upstream", ":53"},
		{"--upstream", "127.0.0.1:53", "--key", "/nonexistent/key"},
	} {
		var stderr syncBuffer
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr}
		if code := run(context.Background(), append([]string{"dns"}, args...), e); code != exitUsage {
			t.Errorf("dns %q: exit %d, want %d (%s)", args, code, exitUsage, stderr.String())
		}
	}
}
