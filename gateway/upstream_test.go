package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// TestUpstreamProxy: the gateway reaches origins through the upstream
// proxy it is given.
func TestUpstreamProxy(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Method+" "+r.URL.String())
		mu.Unlock()
		w.Write([]byte("from the proxy"))
	}))
	defer proxy.Close()
	pu, _ := url.Parse(proxy.URL)
	g := startGateway(t, Config{UpstreamProxy: pu})
	// A host that resolves nowhere: only the proxy can answer for it.
	res, body := get(t, g.proxyClient(), http.MethodGet, "http://origin.invalid/f.txt", nil)
	if res.StatusCode != 200 || string(body) != "from the proxy" {
		t.Fatalf("through the gateway: %s %q", res.Status, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(asked, "\n"), "http://origin.invalid/f.txt") {
		t.Errorf("the proxy was asked %q", asked)
	}
}

// TestUpstreamProxyIsSelf: an upstream proxy that is the gateway itself
// (http_proxy exported for every program, the gateway's too) is skipped,
// with a warning, and requests go direct instead of looping.
func TestUpstreamProxyIsSelf(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("direct")) }))
	defer origin.Close()
	var logs syncBuffer
	g := startGateway(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	self, _ := url.Parse(g.base)
	g.transport.Proxy = g.proxyFor(self)
	for range 2 {
		res, body := get(t, g.proxyClient(), http.MethodGet, origin.URL+"/x", nil)
		if res.StatusCode != 200 || string(body) != "direct" {
			t.Fatalf("with the gateway as its own upstream proxy: %s %q", res.Status, body)
		}
	}
	if n := strings.Count(logs.String(), "the upstream proxy is this gateway"); n != 1 {
		t.Errorf("warned %d times, want once: %s", n, logs.String())
	}
}

// TestUpstreamProxyIsSelfByName: the gateway is recognised as its own
// upstream proxy under a host name too, here "localhost", which resolves
// to the loopback address it listens on.
func TestUpstreamProxyIsSelfByName(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("direct")) }))
	defer origin.Close()
	var logs syncBuffer
	g := startGateway(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	_, port, _ := net.SplitHostPort(g.addr)
	self, _ := url.Parse("http://localhost:" + port)
	g.transport.Proxy = g.proxyFor(self)
	for range 2 {
		res, body := get(t, g.proxyClient(), http.MethodGet, origin.URL+"/x", nil)
		if res.StatusCode != 200 || string(body) != "direct" {
			t.Fatalf("with %s, the gateway, as its upstream proxy: %s %q", self.Host, res.Status, body)
		}
	}
	if n := strings.Count(logs.String(), "the upstream proxy is this gateway"); n != 1 {
		t.Errorf("warned %d times, want once: %s", n, logs.String())
	}
}

// TestUpstreamProxyIsSelfOnEveryInterface: a gateway listening on every
// interface (0.0.0.0) is also reached at the machine's own network
// addresses, so a proxy that names one of them with the gateway's port is
// the gateway.
func TestUpstreamProxyIsSelfOnEveryInterface(t *testing.T) {
	lan := nonLoopbackAddr(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("direct")) }))
	defer origin.Close()
	// The origin is on loopback, which a gateway on 0.0.0.0 refuses
	// unless allowed.
	g := startGateway(t, Config{AllowPrivateTargets: true})
	lo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := wideListener{lo}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve on %s: %v", ln.Addr(), err)
		}
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	self, _ := url.Parse("http://" + net.JoinHostPort(lan.String(), port))
	g.transport.Proxy = g.proxyFor(self)
	res, body := get(t, g.proxyClient(), http.MethodGet, origin.URL+"/x", nil)
	if res.StatusCode != 200 || string(body) != "direct" {
		t.Fatalf("with %s, the gateway on 0.0.0.0, as its upstream proxy: %s %q", self.Host, res.Status, body)
	}
}

// TestListensOn: which addresses reach a listener, by what it is bound to.
func TestListensOn(t *testing.T) {
	lan := netip.MustParseAddr("192.0.2.2") // the machine's, for local
	local := func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1"), lan} }
	for _, tc := range []struct {
		listen, dial string
		want         bool
	}{
		{"127.0.0.1:8642", "127.0.0.1:8642", true},
		{"127.0.0.1:8642", "[::ffff:127.0.0.1]:8642", true},
		{"127.0.0.1:8642", "0.0.0.0:8642", true}, // dialing nowhere in particular reaches loopback
		{"127.0.0.1:8642", "127.0.0.1:8643", false},
		{"127.0.0.1:8642", "127.0.0.2:8642", false},
		{"127.0.0.1:8642", "[::1]:8642", false},
		{"127.0.0.1:8642", "192.0.2.2:8642", false},
		{"0.0.0.0:8642", "[::1]:8642", true},
		{"0.0.0.0:8642", "192.0.2.2:8642", true},
		{"[::]:8642", "192.0.2.2:8642", true},
		{"0.0.0.0:8642", "198.51.100.7:8642", false}, // another machine's
		{"0.0.0.0:8642", "192.0.2.2:80", false},
		{"192.0.2.2:8642", "192.0.2.2:8642", true},
		{"192.0.2.2:8642", "127.0.0.1:8642", false},
	} {
		g := &Gateway{self: map[string]struct{}{tc.listen: {}}}
		dial := netip.MustParseAddrPort(tc.dial)
		if got := g.listensOn(dial.Addr(), dial.Port(), local); got != tc.want {
			t.Errorf("listening on %s, %s is the gateway: %v, want %v", tc.listen, tc.dial, got, tc.want)
		}
	}
}

// nonLoopbackAddr returns one of the machine's own network addresses that
// is not a loopback one, or skips the test.
func nonLoopbackAddr(t *testing.T) netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses: %v", err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		// Link-local addresses are left out: an IPv6 one is reached only
		// with its zone.
		if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().IsGlobalUnicast() {
			return ip.Unmap()
		}
	}
	t.Skip("this machine has no network address but loopback ones")
	return netip.Addr{}
}

// TestAccessLog: at debug level (stampede gateway -v) every request is
// logged with its status, bytes and how it was answered.
func TestAccessLog(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) }))
	defer origin.Close()
	var logs syncBuffer
	g := startGateway(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	get(t, g.proxyClient(), http.MethodGet, origin.URL+"/x", nil)
	g.stop()
	line := ""
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "msg=request ") && strings.Contains(l, origin.URL+"/x") {
			line = l
		}
	}
	for _, want := range []string{"method=GET", "status=200", "bytes=5", "answer=direct", "took="} {
		if !strings.Contains(line, want) {
			t.Errorf("access log line %q lacks %s; log:\n%s", line, want, logs.String())
		}
	}
}

// syncBuffer is a log destination safe for the gateway's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
