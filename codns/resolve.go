package codns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// LookupNetIP looks host up through the forwarder as a client's lookup
// is, in the same process: the cache, a lookup of the same question under
// way, the upstream and, past the delay, the peers. It is what a CDN node
// dials its origins' names with (cdn.Config.LookupIP). network is "ip"
// (A and AAAA, the A records first), "ip4" or "ip6". An address is
// returned as it is. A name with no address is a *net.DNSError with
// IsNotFound; no good answer within Config.Timeout, one with IsTemporary.
// The lookups count in the metrics as clients' do. It works from New until
// Serve returns.
func (f *Forwarder) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	var types []uint16
	switch network {
	case "ip":
		types = []uint16{dns.TypeA, dns.TypeAAAA}
	case "ip4":
		types = []uint16{dns.TypeA}
	case "ip6":
		types = []uint16{dns.TypeAAAA}
	default:
		return nil, fmt.Errorf("codns: lookup %s: network %q", host, network)
	}
	name := dns.Fqdn(host)
	if _, ok := dns.IsDomainName(name); !ok || host == "" {
		return nil, &net.DNSError{Err: "not a host name", Name: host}
	}
	type answer struct {
		msg *dns.Msg
		err error
	}
	answers := make([]chan answer, len(types))
	for i, t := range types {
		answers[i] = make(chan answer, 1)
		go func() {
			m, err := f.lookupOwn(ctx, dns.Question{Name: name, Qtype: t, Qclass: dns.ClassINET})
			answers[i] <- answer{m, err}
		}()
	}
	var addrs []netip.Addr
	var firstErr error
	found := false
	for i := range types {
		var a answer
		select {
		case a = <-answers[i]:
		case <-ctx.Done():
			return nil, &net.DNSError{Err: context.Cause(ctx).Error(), Name: host, IsTimeout: true}
		}
		if a.err != nil {
			if firstErr == nil {
				firstErr = a.err
			}
			continue
		}
		if a.msg.Rcode == dns.RcodeSuccess {
			found = true
		}
		for _, rr := range a.msg.Answer {
			switch rr := rr.(type) {
			case *dns.A:
				if ip, ok := netip.AddrFromSlice(rr.A); ok {
					addrs = append(addrs, ip.Unmap())
				}
			case *dns.AAAA:
				if ip, ok := netip.AddrFromSlice(rr.AAAA); ok {
					addrs = append(addrs, ip)
				}
			}
		}
	}
	switch {
	case len(addrs) > 0:
		return addrs, nil
	case firstErr != nil:
		return nil, &net.DNSError{Err: firstErr.Error(), Name: host, IsTemporary: true}
	case found:
		return nil, &net.DNSError{Err: "no address for the name", Name: host, IsNotFound: true}
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// errNoAnswer is a lookup that got no good answer in time (a client would
// get SERVFAIL).
var errNoAnswer = errors.New("no answer from the resolver nor the peers")

// lookupOwn is one question of this process's own, counted as a client's
// lookup. The lookup runs on the forwarder's life, not ctx, so that a
// caller giving up does not end it for the others who joined it.
func (f *Forwarder) lookupOwn(ctx context.Context, q dns.Question) (*dns.Msg, error) {
	select {
	case f.slots <- struct{}{}:
	default:
		f.m.refused[refusedBusy].Inc()
		return nil, errors.New("too many lookups under way")
	}
	start := f.now()
	type result struct {
		msg *dns.Msg
		by  answeredBy
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-f.slots }()
		m, by := f.lookup(f.life, q, false, true)
		f.m.clientLookups[by].Inc()
		f.m.lookupDuration.Observe(f.now().Sub(start).Seconds())
		done <- result{m, by}
	}()
	select {
	case r := <-done:
		if r.msg == nil {
			return nil, errNoAnswer
		}
		return r.msg, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// Collector returns the forwarder's own series (stampede_dns_...), for a
// process that serves them among its own metrics (a CDN node's).
func (f *Forwarder) Collector() prometheus.Collector { return f.m.collectors }
