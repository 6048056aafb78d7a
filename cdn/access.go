package cdn

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Who may ask a node what. CoDeeN's open proxies were abused within days
// (spam, click fraud, attacks laundered through them), so a node is closed
// by default:
//
//   - Clients are served only from Config.Allow networks (loopback when
//     empty).
//   - A client may reach only the configured origins (Config.Origins, by
//     Host) and, by URL prefix or a proxy's absolute form, the origins of
//     Config.AllowOrigins: a node is not a way to any host.
//   - Node-to-node requests (/.cdn/...) are taken only from the addresses
//     of Config.Nodes, or, with Config.Key, only with a fresh token signed
//     by that key, from anywhere.
//   - CONNECT is refused: a tunnel carries anything to anywhere.

// DefaultAllow are the client networks served when Config.Allow is empty.
var DefaultAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// remoteAddr is r's client address (unmapped), if it parses.
func remoteAddr(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

func (n *Node) clientAllowed(r *http.Request) bool {
	a, ok := remoteAddr(r)
	if !ok {
		return false
	}
	for _, p := range n.allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// nodeAllowed says whether r may be a node's request: signed with the
// cluster's key when there is one, else from a node's address.
func (n *Node) nodeAllowed(r *http.Request) error {
	if n.cfg.Key != nil {
		return verifyToken(n.pub, r.Header.Get(authHeader), r.Method, r.URL.RequestURI(), n.now())
	}
	a, ok := remoteAddr(r)
	if ok && n.nodeAddrs[a] {
		return nil
	}
	return errors.New("not from a node's address (see --nodes, or use --key)")
}

// resolveNodeAddrs finds the addresses of the nodes, whose requests are
// accepted as nodes' without a key.
func resolveNodeAddrs(ctx context.Context, nodes []string) (map[netip.Addr]bool, error) {
	out := make(map[netip.Addr]bool)
	for _, hp := range nodes {
		host, _, err := net.SplitHostPort(hp)
		if err != nil {
			return nil, fmt.Errorf("node %q: %w", hp, err)
		}
		if a, err := netip.ParseAddr(host); err == nil {
			out[a.Unmap()] = true
			continue
		}
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("node %q: %w", hp, err)
		}
		for _, a := range addrs {
			out[a.Unmap()] = true
		}
	}
	return out, nil
}

// The node token: "EXPIRY.SIG", EXPIRY in Unix seconds, SIG the unpadded
// base64url ed25519 signature of tokenContext, EXPIRY, the method and the
// request URI (which carries the chunk's URL and index), each followed by a
// zero byte. It is good for tokenLife: long enough for clocks a little
// apart, short enough that a captured one is soon worthless, and it names
// one request, so it cannot be moved to another.
const (
	authHeader   = "Stampede-Cdn-Auth"
	tokenContext = "stampede cdn node request v1"
	tokenLife    = time.Minute
)

func tokenMessage(expiry int64, method, uri string) []byte {
	var b strings.Builder
	for _, s := range []string{tokenContext, strconv.FormatInt(expiry, 10), method, uri} {
		b.WriteString(s)
		b.WriteByte(0)
	}
	return []byte(b.String())
}

func makeToken(priv ed25519.PrivateKey, method, uri string, now time.Time) string {
	exp := now.Add(tokenLife).Unix()
	sig := ed25519.Sign(priv, tokenMessage(exp, method, uri))
	return strconv.FormatInt(exp, 10) + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func verifyToken(pub ed25519.PublicKey, tok, method, uri string, now time.Time) error {
	if tok == "" {
		return errors.New("no node token (the cluster uses --key)")
	}
	expS, sigS, ok := strings.Cut(tok, ".")
	exp, err := strconv.ParseInt(expS, 10, 64)
	if !ok || err != nil {
		return errors.New("malformed node token")
	}
	sig, err := base64.RawURLEncoding.DecodeString(sigS)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return errors.New("malformed node token")
	}
	t := time.Unix(exp, 0)
	if now.After(t) || t.Sub(now) > 2*tokenLife {
		return errors.New("node token expired, or from a clock far ahead")
	}
	if !ed25519.Verify(pub, tokenMessage(exp, method, uri), sig) {
		return errors.New("node token not signed by the cluster's key")
	}
	return nil
}

// refusal is a request the node will not serve, with the status and a
// message for the client saying why.
type refusal struct {
	status int
	msg    string
}

func (e *refusal) Error() string { return e.msg }

func refuse(status int, format string, args ...any) error {
	return &refusal{status, fmt.Sprintf(format, args...)}
}

// target finds the URL a client's request is for: the URL after the
// prefix (/http://origin/path), a proxy request's absolute URL, or the
// configured origin of its Host. Each must be an origin the node serves.
func (n *Node) target(r *http.Request) (*url.URL, error) {
	raw := ""
	switch {
	case r.URL.IsAbs():
		raw = r.URL.String()
	case strings.HasPrefix(r.URL.Path, "/http://"), strings.HasPrefix(r.URL.Path, "/https://"):
		raw = r.URL.EscapedPath()[1:]
		if r.URL.RawQuery != "" {
			raw += "?" + r.URL.RawQuery
		}
	default:
		host := strings.ToLower(r.Host)
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		base, ok := n.cfg.Origins[host]
		if !ok {
			return nil, refuse(http.StatusNotFound, "no origin here for host %q: name one in the path (/http://origin/path) or configure it with --origin", r.Host)
		}
		// The file's URL names the origin as its clients do; the node's
		// transport dials the configured address (originDialer).
		u := url.URL{Scheme: base.Scheme, Host: host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
		return &u, nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return nil, refuse(http.StatusBadRequest, "not an http or https URL: %q", raw)
	}
	if u.User != nil {
		return nil, refuse(http.StatusBadRequest, "a URL with credentials is not proxied")
	}
	u.Fragment = ""
	if !n.originAllowed(u) {
		return nil, refuse(http.StatusForbidden, "origin %s is not served here: allow it with --allow-origin %s", u.Host, u.Host)
	}
	return u, nil
}

// hostPort is u's host and port, the scheme's default port when it names
// none, the host in lower case.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = hostPortPort(u.Scheme)
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// originAllowed reports whether u is on an origin a client may name: a
// configured origin's, or one of AllowOrigins (HOST alone stands for
// ports 80 and 443).
func (n *Node) originAllowed(u *url.URL) bool {
	hp := hostPort(u)
	return n.allowedOrigins[hp]
}

// allowedOriginSet is the HOST:PORT set of origins and allowOrigins.
func allowedOriginSet(origins map[string]*url.URL, allow []string) (map[string]bool, error) {
	out := make(map[string]bool)
	for _, o := range origins {
		out[hostPort(o)] = true
	}
	for _, a := range allow {
		a = strings.ToLower(strings.TrimSpace(a))
		if a == "" || strings.ContainsAny(a, "/@ ") {
			return nil, fmt.Errorf("allowed origin %q: want HOST or HOST:PORT", a)
		}
		if h, p, err := net.SplitHostPort(a); err == nil {
			if _, err := strconv.ParseUint(p, 10, 16); err != nil || h == "" {
				return nil, fmt.Errorf("allowed origin %q: bad port", a)
			}
			out[net.JoinHostPort(h, p)] = true
			continue
		}
		h := strings.Trim(a, "[]")
		out[net.JoinHostPort(h, "80")] = true
		out[net.JoinHostPort(h, "443")] = true
	}
	return out, nil
}

// originDialer dials addr, or the configured address of the origin whose
// name addr is (on its scheme's port). With lookup, a host name is looked
// up with it, and its addresses dialed in turn, each given a share of the
// time left, as net.Dialer does.
func originDialer(origins map[string]*url.URL, d *net.Dialer, lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return d.DialContext(ctx, network, addr)
		}
		if base, ok := origins[strings.ToLower(host)]; ok && port == hostPortPort(base.Scheme) {
			addr = hostPort(base)
			host, port, _ = net.SplitHostPort(addr)
		}
		if _, err := netip.ParseAddr(host); err == nil || lookup == nil {
			return d.DialContext(ctx, network, addr)
		}
		ipNet := "ip"
		switch network {
		case "tcp4":
			ipNet = "ip4"
		case "tcp6":
			ipNet = "ip6"
		}
		ips, err := lookup(ctx, ipNet, host)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		if d.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d.Timeout)
			defer cancel()
		}
		var first error
		for i, ip := range ips {
			actx, cancel := ctx, context.CancelFunc(func() {})
			if dl, ok := ctx.Deadline(); ok && i < len(ips)-1 {
				actx, cancel = context.WithDeadline(ctx, time.Now().Add(max(time.Until(dl)/time.Duration(len(ips)-i), 2*time.Second)))
			}
			c, err := d.DialContext(actx, network, net.JoinHostPort(ip.String(), port))
			cancel()
			if err == nil {
				return c, nil
			}
			if first == nil {
				first = err
			}
			if ctx.Err() != nil {
				break
			}
		}
		if first == nil {
			first = &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no address", Name: host, IsNotFound: true}}
		}
		return nil, first
	}
}

func hostPortPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}
