package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPassThroughStreams(t *testing.T) {
	chunk := randomBytes(64<<10, 5)
	proceed := make(chan struct{})
	var (
		mu   sync.Mutex // guards seen
		seen http.Header
	)
	plain := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		switch r.URL.Path {
		case "/stream":
			if r.Method == http.MethodHead {
				return // the gateway's probe
			}
			// Half the body, then wait for the client to have it: a
			// gateway that buffered whole bodies would never deliver it.
			w.Write(chunk)
			w.(http.Flusher).Flush()
			select {
			case <-proceed:
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Second):
				return
			}
			w.Write(chunk)
		case "/hop":
			w.Header().Set("Connection", "X-Secret")
			w.Header().Set("X-Secret", "1")
			w.Header().Set("X-End", "ok")
			io.WriteString(w, "hop")
		case "/echo":
			// Full duplex: the answer starts before the request ends.
			http.NewResponseController(w).EnableFullDuplex()
			io.Copy(w, r.Body)
		case "/redirect":
			http.Redirect(w, r, "/elsewhere?x=1", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	g := startGateway(t, Config{})
	c := g.proxyClient()

	resp, err := c.Get(plain + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get(Header) != "direct" {
		t.Errorf("answered %q, want direct", resp.Header.Get(Header))
	}
	first := make([]byte, len(chunk))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatalf("the first half did not stream through: %v", err)
	}
	close(proceed)
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "streamed body", append(first, rest...), append(append([]byte{}, chunk...), chunk...))

	// Hop-by-hop headers stop at the gateway, both ways.
	req, _ := http.NewRequest("GET", plain+"/hop", nil)
	req.Header.Set("Connection", "X-Client-Hop")
	req.Header.Set("X-Client-Hop", "1")
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	req.Header.Set("X-Client-End", "1")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Secret") != "" || resp.Header.Get("X-End") != "ok" {
		t.Errorf("response headers: %v", resp.Header)
	}
	mu.Lock()
	h := seen
	mu.Unlock()
	if h.Get("X-Client-Hop") != "" || h.Get("Proxy-Authorization") != "" || h.Get("X-Client-End") != "1" ||
		!strings.Contains(h.Get("Via"), "stampede-") {
		t.Errorf("the origin saw %v", h)
	}

	// In prefix form, the origin sees its own page as the Referer, not the
	// gateway's address.
	req, _ = http.NewRequest("GET", g.prefixed(plain+"/hop"), nil)
	req.Header.Set("Referer", g.prefixed(plain+"/page.html?q=1"))
	resp, err = plainClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	h = seen
	mu.Unlock()
	if got := h.Get("Referer"); got != plain+"/page.html?q=1" {
		t.Errorf("the origin saw Referer %q", got)
	}

	// Request bodies stream to the origin.
	big := randomBytes(1<<20, 6)
	resp, err = c.Post(plain+"/echo", "application/octet-stream", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mustEqual(t, "echoed POST", body, big)

	// A redirect keeps a prefixed client on the gateway; a proxy client
	// sees it as sent.
	noFollow := func(c *http.Client) *http.Client {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		return c
	}
	resp, _ = get(t, noFollow(plainClient()), "GET", g.prefixed(plain+"/redirect"), nil)
	if want := "/" + plain + "/elsewhere?x=1"; resp.Header.Get("Location") != want {
		t.Errorf("prefixed redirect to %q, want %q", resp.Header.Get("Location"), want)
	}
	resp, _ = get(t, noFollow(g.proxyClient()), "GET", plain+"/redirect", nil)
	if resp.Header.Get("Location") != "/elsewhere?x=1" {
		t.Errorf("proxied redirect to %q", resp.Header.Get("Location"))
	}
}

// A file linking a manifest that is not there, and requests with
// credentials, go straight through.
func TestPassThroughWhenNotSwarmable(t *testing.T) {
	data := randomBytes(100<<10, 7)
	o := startOrigin(t, map[string][]byte{"f.bin": data}, originOpts{})
	g := startGateway(t, Config{})

	resp, body := get(t, g.proxyClient(), "GET", o.base+"/f.bin", http.Header{"Authorization": {"Bearer x"}})
	if resp.Header.Get(Header) != "direct" {
		t.Errorf("with Authorization: answered %q, want direct", resp.Header.Get(Header))
	}
	mustEqual(t, "with Authorization", body, data)

	o.setWrap(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if strings.HasPrefix(r.URL.Path, "/.well-known/stampede/manifest/") {
			http.Error(w, "no manifest today", http.StatusNotFound)
			return true
		}
		return false
	})
	resp, body = get(t, g.proxyClient(), "GET", o.base+"/f.bin", nil)
	if resp.StatusCode != 200 || resp.Header.Get(Header) != "direct" {
		t.Errorf("manifest missing: %s, answered %q, want direct", resp.Status, resp.Header.Get(Header))
	}
	mustEqual(t, "manifest missing", body, data)
}

func TestConnectTunnel(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secret over TLS: "+r.URL.Path)
	}))
	t.Cleanup(ts.Close)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	g := startGateway(t, Config{ConnectPorts: []uint16{portOf(t, ts.Listener.Addr()), portOf(t, echo.Addr())}})
	gu, _ := url.Parse(g.base)
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(gu), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get(ts.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "secret over TLS: /x" {
		t.Fatalf("through the tunnel: %q", body)
	}

	// Byte for byte: what goes in one end comes out of the other, and a
	// half-close passes through.
	go func() {
		c, err := echo.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo until the client's half-close
	}()
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payload := randomBytes(256<<10, 8)
	// Send the first bytes with the request, before the 200: they must
	// not be lost.
	if _, err := io.WriteString(conn, "CONNECT "+echo.Addr().String()+" HTTP/1.1\r\nHost: "+echo.Addr().String()+"\r\n\r\n"+string(payload[:100])); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err = http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	go func() {
		conn.Write(payload[100:])
		conn.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "tunnelled bytes", got, payload)
}

// A protocol upgrade (as WebSocket does) passes through: 101, then bytes
// both ways.
func TestPassThroughUpgrade(t *testing.T) {
	origin := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			w.WriteHeader(http.StatusOK) // the gateway's probe: no upgrade in a HEAD
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		io.Copy(c, brw) // echo until the client closes
	}))
	g := startGateway(t, Config{})
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	host := strings.TrimPrefix(origin, "http://")
	io.WriteString(conn, "GET "+origin+"/up HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	msg := randomBytes(10000, 9)
	go conn.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "echoed after the upgrade", got, msg)
}
