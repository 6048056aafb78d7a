package gateway

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// CONNECT tunnels (RFC 9110 9.3.6) carry TLS the gateway does not see into:
// it dials the target, answers 200 and splices bytes both ways until
// either side is done, passing half-closes on. No inspection, no MITM.
// Only to the ports of Config.ConnectPorts, and to private addresses only
// as guard.go allows.

// tunnelDialTimeout bounds the dial of a tunnel's target.
const tunnelDialTimeout = 30 * time.Second

func (g *Gateway) tunnel(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if r.URL != nil && r.URL.Host != "" {
		host = r.URL.Host
	}
	_, port, err := net.SplitHostPort(host)
	if err != nil {
		http.Error(w, "stampede gateway: CONNECT wants HOST:PORT, got "+host, http.StatusBadRequest)
		return
	}
	if !g.connectPortAllowed(port) {
		g.refusePort(w, r, host, port)
		return
	}
	if g.loops(r, host) {
		http.Error(w, "stampede gateway: this tunnel would loop back to the gateway", http.StatusLoopDetected)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "stampede gateway: CONNECT needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
		return
	}
	d := net.Dialer{Timeout: tunnelDialTimeout, Control: g.checkDial}
	up, err := d.DialContext(r.Context(), "tcp", host)
	if err != nil {
		g.log.Info("tunnel dial failed", "host", host, "err", err)
		if refusedTargetError(w, host, err) {
			return
		}
		http.Error(w, "stampede gateway: cannot reach "+host+": "+err.Error(), http.StatusBadGateway)
		return
	}
	client, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		g.log.Warn("hijack failed", "err", err)
		return
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		up.Close()
		return
	}
	// Bytes the client sent right after its request (a TLS ClientHello
	// that did not wait for our answer) sit in the server's buffer.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := up.Write(b); err != nil {
			client.Close()
			up.Close()
			return
		}
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		client.Close()
		up.Close()
		return
	}
	g.tunnels[client] = struct{}{}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.tunnels, client)
		g.mu.Unlock()
	}()
	g.log.Debug("tunnel open", "host", host)
	splice(client, up)
}

// splice copies both ways (io.Copy between TCP connections uses splice(2))
// and closes both connections once both directions are done; an EOF in one
// direction is passed on as a half-close.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	one := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			cw.CloseWrite()
			return
		}
		// An error on one side ends the tunnel.
		a.Close()
		b.Close()
	}
	wg.Add(2)
	go one(a, b)
	go one(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}
