package gateway

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
