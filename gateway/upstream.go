package gateway

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

// proxyFor returns the default Transport's Proxy: explicit (the
// UpstreamProxy of the config), or the environment's, but never the
// gateway itself. A user who points http_proxy at the gateway for every
// program, the gateway's own process included, would otherwise have each
// request sent back to it; such a proxy is skipped, once said, and
// requests go direct.
func (g *Gateway) proxyFor(explicit *url.URL) func(*http.Request) (*url.URL, error) {
	pick := http.ProxyFromEnvironment
	if explicit != nil {
		pick = http.ProxyURL(explicit)
	}
	sc := &selfCheck{g: g, names: map[string]lookedUp{}}
	return func(r *http.Request) (*url.URL, error) {
		p, err := pick(r)
		if err != nil || p == nil {
			return p, err
		}
		if sc.isSelf(r.Context(), p) {
			g.selfProxy.Do(func() {
				g.log.Warn("the upstream proxy is this gateway; going direct", "proxy", p.Redacted())
			})
			return nil, nil
		}
		g.noteUpstreamProxy(p)
		return p, nil
	}
}

// selfCheckTTL is how long a selfCheck trusts a resolver's answer and the
// list of the machine's addresses: the Transport asks for the proxy on
// every request, and a lookup each time would double the requests' DNS
// traffic, while the answers change seldom.
const selfCheckTTL = time.Minute

// selfCheck decides whether an upstream proxy is the gateway: whether a
// connection to it would reach one of the gateway's listeners
// (listensOn), whatever the proxy's host is called.
type selfCheck struct {
	g *Gateway

	mu    sync.Mutex          // guards the following
	names map[string]lookedUp // the resolver's, by host name
	local lookedUp            // the machine's interface addresses
}

// lookedUp is a list of addresses, trusted until a time.
type lookedUp struct {
	addrs []netip.Addr
	until time.Time
}

// isSelf reports whether p is the gateway. A host name that does not
// resolve is not: the Transport will fail to reach it too.
func (sc *selfCheck) isSelf(ctx context.Context, p *url.URL) bool {
	port, err := strconv.ParseUint(proxyPort(p), 10, 16)
	if err != nil {
		return false
	}
	addrs := sc.lookup(ctx, p.Hostname())
	for _, ip := range addrs {
		if sc.g.listensOn(ip, uint16(port), sc.localAddrs) {
			return true
		}
	}
	return false
}

// lookup returns host's addresses: host itself when it is an IP address,
// else the resolver's answer, remembered for selfCheckTTL. A failure is
// not remembered: the next request asks again.
func (sc *selfCheck) lookup(ctx context.Context, host string) []netip.Addr {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}
	}
	now := time.Now()
	sc.mu.Lock()
	a, ok := sc.names[host]
	sc.mu.Unlock()
	if ok && now.Before(a.until) {
		return a.addrs
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	sc.mu.Lock()
	sc.names[host] = lookedUp{addrs: addrs, until: now.Add(selfCheckTTL)}
	sc.mu.Unlock()
	return addrs
}

// localAddrs is interfaceAddrs, remembered for selfCheckTTL.
func (sc *selfCheck) localAddrs() []netip.Addr {
	now := time.Now()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if now.After(sc.local.until) {
		sc.local = lookedUp{addrs: interfaceAddrs(), until: now.Add(selfCheckTTL)}
	}
	return sc.local.addrs
}

// interfaceAddrs returns the addresses of the machine's network
// interfaces (none if they cannot be listed).
func interfaceAddrs() []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// listensOn reports whether a connection to ip:port would reach one of
// the gateway's listeners: one on port bound to ip itself, or to an
// unspecified address (every interface) when ip is loopback, unspecified
// or one of the machine's own addresses, which local returns (asked only
// then). A connection to an unspecified address goes to the loopback
// interface, so such an ip also finds a listener bound to loopback.
func (g *Gateway) listensOn(ip netip.Addr, port uint16, local func() []netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	g.mu.Lock()
	var bound []netip.Addr
	for a := range g.self {
		if ap, err := netip.ParseAddrPort(a); err == nil && ap.Port() == port {
			bound = append(bound, ap.Addr().Unmap().WithZone(""))
		}
	}
	g.mu.Unlock()
	everywhere := false
	for _, b := range bound {
		switch {
		case b == ip,
			b.IsUnspecified() && (ip.IsLoopback() || ip.IsUnspecified()),
			ip.IsUnspecified() && b.IsLoopback():
			return true
		case b.IsUnspecified():
			everywhere = true
		}
	}
	return everywhere && slices.Contains(local(), ip)
}

// proxyPort is the port of proxy URL u, the scheme's default when it has
// none (an http_proxy of "http://127.0.0.1" means port 80), as the
// Transport picks it.
func proxyPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch u.Scheme {
	case "https":
		return "443"
	case "socks5", "socks5h":
		return "1080"
	}
	return "80"
}
