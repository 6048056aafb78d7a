package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What the gateway refuses, so that reaching it is not reaching
// everything its machine can (docs/gateway.md, What the gateway exposes):
//
//   - A request in origin form (URL prefix, the gateway's own pages) whose
//     Host is a name the gateway does not answer to. A web page that
//     rebinds its DNS name to the gateway's address sends its own name
//     there; the browser then lets the page read the answers. IP literals,
//     localhost and the machine's host name cannot be rebound by a page;
//     other names are allowed by Config.AllowHosts. Forward-proxy requests
//     (absolute form) and CONNECT are not checked: a browser sends them
//     only to a proxy its user set.
//   - CONNECT to a port not in Config.ConnectPorts (443 by default): a
//     tunnel is a raw byte stream, to SSH, SMTP or a database as easily as
//     to TLS.
//   - Connections to loopback, link-local and private addresses, when the
//     gateway serves beyond loopback (Serve) and Config.AllowPrivateTargets
//     is not set. The address is checked as it is dialled, after the name
//     is resolved (a net.Dialer Control hook), so a name that resolves to
//     127.0.0.1, a redirect followed to one, or a name rebound between the
//     gateway's requests is refused alike. On loopback the gateway's
//     clients could reach those addresses themselves, and they are allowed.

// DefaultConnectPorts are the ports CONNECT tunnels may go to when
// Config.ConnectPorts is empty.
var DefaultConnectPorts = []uint16{443}

// Flag names in refusals: they tell the user what allows what was refused.
const (
	flagAllowHost    = "--allow-host"
	flagConnectPorts = "--connect-ports"
	flagAllowPrivate = "--allow-private-targets"
)

// originDialTimeout bounds the dial of an origin, a tracker or the
// upstream proxy, as http.DefaultTransport's does.
const originDialTimeout = 30 * time.Second

// refusedTarget is the error of a dial the gateway refuses: the address,
// once resolved, is of a kind it does not reach for its clients.
type refusedTarget struct {
	addr netip.AddrPort
	kind string // "loopback", "private", ...
}

func (e *refusedTarget) Error() string {
	return fmt.Sprintf("%s is a %s address, which a gateway listening beyond loopback does not connect to", e.addr, e.kind)
}

// addrKind returns the kind of a, if it is one that a gateway serving
// beyond loopback refuses, else "".
func addrKind(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsUnspecified(), a.Is4() && thisNetwork.Contains(a):
		return "this-host" // 0.0.0.0 and :: reach the machine itself
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "link-local"
	case a.IsPrivate():
		return "private"
	case sharedSpace.Contains(a):
		return "shared (carrier-grade NAT)"
	}
	return ""
}

var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")     // RFC 1122
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10") // RFC 6598
)

// checkDial is the Control hook of the gateway's dialers: it sees the
// address about to be connected, resolved.
func (g *Gateway) checkDial(network, address string, _ syscall.RawConn) error {
	if !g.refusePrivate.Load() {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &refusedTarget{kind: "unknown (" + address + ")"}
	}
	if kind := g.kindOf(ap.Addr()); kind != "" {
		return &refusedTarget{addr: ap, kind: kind}
	}
	return nil
}

// dialUpstream is the default Transport's DialContext: origins and
// trackers are checked (checkDial), the upstream proxy the user set is
// not, wherever it is.
func (g *Gateway) dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: originDialTimeout, KeepAlive: 30 * time.Second}
	if !g.isUpstreamProxy(addr) {
		d.Control = g.checkDial
	}
	return d.DialContext(ctx, network, addr)
}

// noteUpstreamProxy remembers the address the Transport dials to reach
// proxy p (its host and port, the scheme's default port if none).
func (g *Gateway) noteUpstreamProxy(p *url.URL) {
	a := strings.ToLower(net.JoinHostPort(p.Hostname(), proxyPort(p)))
	g.mu.Lock()
	g.proxyAddrs[a] = struct{}{}
	g.mu.Unlock()
}

func (g *Gateway) isUpstreamProxy(addr string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.proxyAddrs[strings.ToLower(addr)]
	return ok
}

// beyondLoopback reports whether clients other than the machine's own can
// reach a listener on a: a TCP address not on loopback, or one that
// cannot be told (an unknown kind of listener).
func beyondLoopback(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return !a.IP.IsLoopback()
	case *net.UnixAddr:
		return false
	}
	ap, err := netip.ParseAddrPort(a.String())
	return err != nil || !ap.Addr().Unmap().IsLoopback()
}

// allowedHosts is the set of host names Host may carry in origin form,
// besides IP literals and localhost: cfg.AllowHosts and the machine's
// host name.
func allowedHosts(names []string) map[string]struct{} {
	m := map[string]struct{}{}
	if h, err := os.Hostname(); err == nil && h != "" {
		m[normalHost(h)] = struct{}{}
	}
	for _, n := range names {
		m[normalHost(n)] = struct{}{}
	}
	return m
}

func normalHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// hostAllowed reports whether a request in origin form with this Host
// header may be answered: no rebinding page can send it.
func (g *Gateway) hostAllowed(hostport string) bool {
	if hostport == "" {
		return true // HTTP/1.0 without Host: not a browser's
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		// A page can only send an IP literal from a page at that
		// address: it would have to be served by the gateway already.
		return true
	}
	host = normalHost(host)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true // browsers resolve these to loopback themselves (RFC 6761)
	}
	_, ok := g.allowHosts[host]
	return ok
}

// refuseHost answers a request whose Host is not the gateway's.
func (g *Gateway) refuseHost(w http.ResponseWriter, r *http.Request) {
	g.log.Info("refused: Host is not the gateway's", "host", r.Host, "uri", r.RequestURI, "remote", r.RemoteAddr)
	name := r.Host
	if h, _, err := net.SplitHostPort(name); err == nil {
		name = h
	}
	name = normalHost(name)
	forbidden(w, fmt.Sprintf("Host %q is not a name of this gateway. A web page may be using "+
		"DNS rebinding to reach your network through it. To reach the gateway under this name, "+
		"allow the name with %s %s.", r.Host, flagAllowHost, name))
}

// connectPortAllowed reports whether CONNECT may go to port.
func (g *Gateway) connectPortAllowed(port string) bool {
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && slices.Contains(g.connectPorts, uint16(p))
}

// refusePort answers a CONNECT to a port not in the list.
func (g *Gateway) refusePort(w http.ResponseWriter, r *http.Request, host, port string) {
	g.log.Info("refused: CONNECT port", "host", host, "remote", r.RemoteAddr)
	list := make([]string, len(g.connectPorts))
	for i, p := range g.connectPorts {
		list[i] = strconv.Itoa(int(p))
	}
	forbidden(w, fmt.Sprintf("CONNECT to %s refused: tunnels go only to port %s. To allow port %s, "+
		"list it with %s %s,%s.", host, strings.Join(list, ", "), port, flagConnectPorts, strings.Join(list, ","), port))
}

// refusedTargetError answers 403 if err is a refused dial, and reports
// whether it was.
func refusedTargetError(w http.ResponseWriter, host string, err error) bool {
	var rt *refusedTarget
	if !errors.As(err, &rt) {
		return false
	}
	at := "an address that cannot be checked"
	if rt.addr.IsValid() {
		at = rt.addr.String() + ", a " + rt.kind + " address"
	}
	forbidden(w, fmt.Sprintf("refused to connect to %s: it is at %s. This gateway listens beyond loopback, "+
		"so it does not connect to loopback, link-local or private addresses for its clients. "+
		"To allow them, start it with %s.", host, at, flagAllowPrivate))
	return true
}

// forbidden answers 403 with why.
func forbidden(w http.ResponseWriter, why string) {
	w.Header().Del(Header)
	http.Error(w, "stampede gateway: "+why, http.StatusForbidden)
}
