package cdn

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-dev/stampede/codns"
)

// startDNS runs a DNS server on ip (UDP) answering with h until the test
// ends, and returns its address.
func startDNS(t *testing.T, ip string, h dns.HandlerFunc) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	s := &dns.Server{PacketConn: pc, Handler: h, NotifyStartedFunc: func() { close(started) }}
	go s.ActivateAndServe()
	<-started
	t.Cleanup(func() { s.Shutdown() })
	return pc.LocalAddr().String()
}

// startForwarder runs a CoDNS forwarder on ip until the test ends.
func startForwarder(t *testing.T, ip string, cfg codns.Config) (*codns.Forwarder, string) {
	t.Helper()
	f, err := codns.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, ln, err := codns.Listen(ip + ":0")
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
	return f, pc.LocalAddr().String()
}

// A node looks its origins' names up through its CoDNS forwarder: with
// its own resolver stalling, the origin is still reached, by the name a
// peer forwarder's resolver gave, long before the resolver would have
// answered; the answer is cached for the next connections; and the
// forwarder's series are among the node's metrics.
func TestOriginNameThroughCoDNS(t *testing.T) {
	o := newTestOrigin(t)
	o.add("f", randomBytes(300<<10, 9), false, nil)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(o.URL, "http://"))
	const name = "origin.stampede.test" // resolvable by no system resolver
	stalled := make(chan struct{}, 64)
	sick := startDNS(t, "127.0.0.1", func(w dns.ResponseWriter, r *dns.Msg) {
		stalled <- struct{}{} // and never answers
	})
	healthy := startDNS(t, "127.0.0.1", func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA && strings.EqualFold(q.Name, name+".") {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
				A: net.IPv4(127, 0, 0, 1)})
		} else { // no data, for 300 s
			m.Ns = append(m.Ns, &dns.SOA{Hdr: dns.RR_Header{Name: "test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 300},
				Ns: "ns.test.", Mbox: "hostmaster.test.", Minttl: 300})
		}
		w.WriteMsg(m)
	})
	_, peerAddr := startForwarder(t, "127.0.0.2", codns.Config{Upstream: healthy, Logger: testLogger(t)})
	fwd, _ := startForwarder(t, "127.0.0.3", codns.Config{Upstream: sick, Timeout: time.Minute,
		Peers:  []netip.AddrPort{netip.MustParseAddrPort(peerAddr)},
		Delay:  codns.DelayConfig{Initial: 20 * time.Millisecond},
		Logger: testLogger(t)})
	nodes := startCluster(t, 1, nil, func(_ int, c *Config) {
		c.AllowOrigins = []string{name + ":" + port}
		c.LookupIP = fwd.LookupNetIP
		c.Collector = fwd.Collector()
	})
	target := "http://" + name + ":" + port + "/f"
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, body := mustGet(t, nodes[0].url(target), http.StatusOK)
		if len(body) != 300<<10 {
			t.Errorf("body of %d bytes", len(body))
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // the lookup's timeout is a minute
		t.Fatal("the origin was not reached through the peer's answer")
	}
	select {
	case <-stalled:
	default:
		t.Error("the node's own resolver was never asked")
	}
	// The name's A and AAAA lookups, both won by the peer.
	_, page := mustGet(t, nodes[0].url(".cdn/metrics"), http.StatusOK)
	if !strings.Contains(string(page), `stampede_dns_lookups_total{by="peer"} 2`) {
		t.Errorf("the node's metrics do not count two lookups won by a peer:\n%s", grepLines(string(page), "stampede_dns_lookups_total"))
	}
	// Another file of the origin, on new connections: the name is
	// cached.
	cached := lookups(t, fwd, "cache")
	nodes[0].client.CloseIdleConnections()
	o.add("g", randomBytes(10<<10, 10), false, nil)
	mustGet(t, nodes[0].url("http://"+name+":"+port+"/g"), http.StatusOK)
	if got := lookups(t, fwd, "peer"); got != 2 {
		t.Errorf("lookups won by the peer %v after the second file, want still 2", got)
	}
	if got := lookups(t, fwd, "cache"); got <= cached {
		t.Errorf("lookups from the cache %v after the second file, %v before", got, cached)
	}
}

// lookups is the forwarder's count of lookups answered by by.
func lookups(t *testing.T, f *codns.Forwarder, by string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(f.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "stampede_dns_lookups_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "by" && l.GetValue() == by {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no stampede_dns_lookups_total{by=%q}", by)
	return 0
}

func grepLines(s, prefix string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The dialer dials a name's addresses in turn until one answers, and
// fails with the lookup's error when there is none.
func TestOriginDialerTriesAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	var asked []string
	lookup := func(_ context.Context, network, host string) ([]netip.Addr, error) {
		asked = append(asked, network+" "+host)
		if host == "gone.test" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		// Nothing listens on 127.0.0.9: refused, then the next.
		return []netip.Addr{netip.MustParseAddr("127.0.0.9"), netip.MustParseAddr("127.0.0.1")}, nil
	}
	dial := originDialer(nil, &net.Dialer{Timeout: 5 * time.Second}, lookup)
	c, err := dial(t.Context(), "tcp4", net.JoinHostPort("two.test", port))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if got := c.RemoteAddr().String(); got != ln.Addr().String() {
		t.Errorf("connected to %s, want %s", got, ln.Addr())
	}
	c.Close()
	_, err = dial(t.Context(), "tcp", net.JoinHostPort("gone.test", port))
	if de, ok := errors.AsType[*net.DNSError](err); !ok || !de.IsNotFound {
		t.Errorf("dial a missing name: %v, want its DNSError", err)
	}
	if c, err := dial(t.Context(), "tcp", ln.Addr().String()); err != nil {
		t.Errorf("dial an address: %v", err)
	} else {
		c.Close()
	}
	if want := []string{"ip4 two.test", "ip gone.test"}; strings.Join(asked, ",") != strings.Join(want, ",") {
		t.Errorf("looked up %q, want %q (an address is not looked up)", asked, want)
	}
}
