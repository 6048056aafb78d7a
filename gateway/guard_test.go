package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// countingServer serves "ok" on a loopback address (127.0.0.1:0 unless
// given) and counts the requests that reach it.
func countingServer(t *testing.T, addr string) (string, *atomic.Int64) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.WriteString(w, "ok")
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String(), &n
}

// short is s cut to a length that reads well in a test's log.
func short(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// withHost sends a GET of u with Host set to host.
func withHost(t *testing.T, u, host string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := plainClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestRefusesRebindingHost: a request by URL prefix, or for the gateway's
// own pages, whose Host is a name the gateway does not answer to (what a
// DNS-rebinding page sends) is refused with 403, and the origin is not
// asked; the gateway's addresses, localhost and allowed names are
// answered, and forward-proxy requests are not checked.
func TestRefusesRebindingHost(t *testing.T) {
	origin, asked := countingServer(t, "")
	g := startGateway(t, Config{AllowHosts: []string{"gateway.lan"}})
	_, port, _ := net.SplitHostPort(g.addr)

	for _, host := range []string{"rebind.example:" + port, "rebind.example", "REBIND.example.:" + port} {
		for _, path := range []string{"/" + origin + "/secret", "/metrics", "/"} {
			resp, body := withHost(t, g.base+path, host)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "--allow-host rebind.example") ||
				!strings.Contains(body, "DNS rebinding") {
				t.Errorf("Host %s, %s: %s %q; want 403 naming --allow-host", host, path, resp.Status, short(body))
			}
		}
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the origin was asked %d times for a rebinding page", n)
	}

	for _, host := range []string{g.addr, "localhost:" + port, "app.localhost:" + port, "gateway.lan:" + port, "Gateway.LAN", "[::1]:" + port} {
		resp, body := withHost(t, g.base+"/"+origin+"/f", host)
		if resp.StatusCode != http.StatusOK || body != "ok" {
			t.Errorf("Host %s: %s %q, want the origin's answer", host, resp.Status, body)
		}
	}

	// A forward-proxy request names its target; its Host is the target's.
	c := g.proxyClient()
	resp, body := get(t, c, http.MethodGet, origin+"/f", nil)
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("as a proxy: %s %q", resp.Status, body)
	}
}

// connect sends CONNECT target to the gateway and returns the answer.
func connect(t *testing.T, g *testGateway, target string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	return resp, ""
}

// acceptCounter listens on loopback and counts the connections accepted.
func acceptCounter(t *testing.T) (net.Listener, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln, &n
}

// TestConnectPorts: by default CONNECT goes only to port 443; other ports
// get 403 naming --connect-ports, and nothing is dialled.
func TestConnectPorts(t *testing.T) {
	ln, accepted := acceptCounter(t)
	target := ln.Addr().String()
	port := strconv.Itoa(int(portOf(t, ln.Addr())))

	g := startGateway(t, Config{})
	resp, body := connect(t, g, target)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "--connect-ports 443,"+port) {
		t.Errorf("CONNECT %s: %s %q; want 403 naming --connect-ports", target, resp.Status, body)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the target got %d connections", n)
	}

	g = startGateway(t, Config{ConnectPorts: []uint16{443, portOf(t, ln.Addr())}})
	if resp, body := connect(t, g, target); resp.StatusCode != http.StatusOK {
		t.Errorf("CONNECT %s with its port allowed: %s %q", target, resp.Status, body)
	}
}

// TestPrivateTargetsBeyondLoopback: a gateway listening beyond loopback
// refuses loopback targets, by address and by a name that resolves to
// one, as a proxy, by prefix and by CONNECT; with AllowPrivateTargets, or
// on loopback, it reaches them.
func TestPrivateTargetsBeyondLoopback(t *testing.T) {
	origin, asked := countingServer(t, "")
	ou, _ := url.Parse(origin)
	byName := "http://localhost:" + ou.Port()
	ln, accepted := acceptCounter(t)
	tunnelPort := portOf(t, ln.Addr())

	g := startGatewayOpts(t, Config{ConnectPorts: []uint16{tunnelPort}}, gatewayOpts{wide: true})
	for _, c := range []struct {
		what string
		do   func() (*http.Response, []byte)
	}{
		{"as a proxy", func() (*http.Response, []byte) { return get(t, g.proxyClient(), "GET", origin+"/f", nil) }},
		{"by a name", func() (*http.Response, []byte) { return get(t, g.proxyClient(), "GET", byName+"/f", nil) }},
		{"by prefix", func() (*http.Response, []byte) { return get(t, plainClient(), "GET", g.prefixed(origin+"/f"), nil) }},
		{"a POST", func() (*http.Response, []byte) { return get(t, g.proxyClient(), "POST", origin+"/f", nil) }},
	} {
		resp, body := c.do()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "--allow-private-targets") ||
			!strings.Contains(string(body), "127.0.0.1") {
			t.Errorf("%s: %s %q; want 403 naming --allow-private-targets", c.what, resp.Status, short(string(body)))
		}
	}
	if resp, body := connect(t, g, ln.Addr().String()); resp.StatusCode != http.StatusForbidden ||
		!strings.Contains(body, "--allow-private-targets") {
		t.Errorf("CONNECT: %s %q; want 403", resp.Status, body)
	}
	if n, m := asked.Load(), accepted.Load(); n != 0 || m != 0 {
		t.Errorf("the targets were reached: %d requests, %d tunnels", n, m)
	}

	allowed := startGatewayOpts(t, Config{ConnectPorts: []uint16{tunnelPort}, AllowPrivateTargets: true}, gatewayOpts{wide: true})
	if resp, body := get(t, allowed.proxyClient(), "GET", byName+"/f", nil); resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("with AllowPrivateTargets: %s %q", resp.Status, body)
	}
	if resp, body := connect(t, allowed, ln.Addr().String()); resp.StatusCode != http.StatusOK {
		t.Errorf("CONNECT with AllowPrivateTargets: %s %q", resp.Status, body)
	}
}

// TestPrivateTargetAfterRedirect: a redirect the gateway follows itself (a
// manifest's) to a refused address is refused at the dial, though its
// origin is allowed. Here only 127.0.0.2 counts as private.
func TestPrivateTargetAfterRedirect(t *testing.T) {
	hidden, asked := countingServer(t, "127.0.0.2:0")
	data := randomBytes(100<<10, 3)
	o := startOrigin(t, map[string][]byte{"f.bin": data}, originOpts{noTracker: true})
	o.setWrap(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if strings.HasPrefix(r.URL.Path, "/.well-known/stampede/manifest/") {
			http.Redirect(w, r, hidden+"/manifest", http.StatusFound)
			return true
		}
		return false
	})
	private := func(a netip.Addr) string {
		if a == netip.MustParseAddr("127.0.0.2") {
			return "private"
		}
		return ""
	}
	g := startGatewayOpts(t, Config{}, gatewayOpts{wide: true, kindOf: private})
	resp, body := get(t, g.proxyClient(), "GET", o.base+"/f.bin", nil)
	if resp.StatusCode == http.StatusOK && resp.Header.Get(Header) == "swarm" {
		t.Errorf("answered from the swarm with a refused manifest: %s", resp.Status)
	}
	if resp.StatusCode == http.StatusOK {
		mustEqual(t, "straight through", body, data)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the redirect's target was asked %d times", n)
	}
}

// TestUpstreamProxyOnLoopbackBeyondLoopback: the upstream proxy the user
// set is reached wherever it is, even by a gateway that refuses loopback
// targets.
func TestUpstreamProxyOnLoopbackBeyondLoopback(t *testing.T) {
	proxy, asked := countingServer(t, "")
	pu, _ := url.Parse(proxy)
	g := startGatewayOpts(t, Config{UpstreamProxy: pu}, gatewayOpts{wide: true})
	resp, body := get(t, g.proxyClient(), "GET", "http://origin.invalid/f", nil)
	if resp.StatusCode != http.StatusOK || string(body) != "ok" || asked.Load() == 0 {
		t.Errorf("through a loopback upstream proxy: %s %q", resp.Status, body)
	}
}

func TestAddrKind(t *testing.T) {
	for a, want := range map[string]string{
		"127.0.0.1": "loopback", "127.9.9.9": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"0.0.0.0": "this-host", "::": "this-host", "0.1.2.3": "this-host",
		"169.254.169.254": "link-local", "fe80::1": "link-local",
		"10.1.2.3": "private", "172.16.0.1": "private", "192.168.1.1": "private", "fd00::1": "private",
		"100.64.0.1":    "shared (carrier-grade NAT)",
		"93.184.215.14": "", "2606:2800:21f:cb07:6820:80da:af6b:8b2c": "", "100.128.0.1": "",
	} {
		if got := addrKind(netip.MustParseAddr(a)); got != want {
			t.Errorf("addrKind(%s) = %q, want %q", a, got, want)
		}
	}
}
