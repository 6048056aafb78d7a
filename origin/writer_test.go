//go:build linux

package origin

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"
)

// smallBuffers gives the connections it accepts a small send buffer: the
// kernel then lets a blocked writer go on after every few KiB its client
// reads (about 32 KiB with the defaults on loopback), which keeps the tests
// of slow clients short.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// dialSmall connects to addr with a small receive buffer, set before the
// handshake so that the window it offers is small from the start.
func dialSmall(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2<<10)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A client reading 10 KiB/s keeps its response going across many write
// idle timeouts; once it stops reading, its response is ended within two
// timeouts, counted, and its transfer slot freed for the next client. On
// the sendfile path and on the write path (a shaped body).
func TestWriteIdleTimeout(t *testing.T) {
	const (
		idle    = time.Second
		slowFor = 3 * idle
		size    = 4 << 20
	)
	for _, tt := range []struct {
		name string
		rate int64
	}{{"sendfile", 0}, {"shaped", 1 << 20}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFile(t, dir, "big", make([]byte, size), t0)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{}, 10)
			ts := startOn(t, smallBuffers{ln}, Config{Dir: dir, MaxTransfers: 1, Rate: tt.rate, WriteIdleTimeout: idle},
				func(s *Server) { s.testHookTransferDone = func() { done <- struct{}{} } })

			c := dialSmall(t, ln.Addr().String())
			fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: origin\r\n\r\n")
			res, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
			if err != nil || res.StatusCode != http.StatusOK {
				t.Fatalf("GET: %v, %v", res, err)
			}
			// Slow: 512 bytes every 50 ms.
			buf := make([]byte, 512)
			got := 0
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for end := time.Now().Add(slowFor); time.Now().Before(end); {
				<-tick.C
				n, err := io.ReadFull(res.Body, buf)
				got += n
				if err != nil {
					t.Fatalf("a client reading 10 KiB/s was cut after %d bytes: %v", got, err)
				}
			}
			select {
			case <-done:
				t.Fatal("the transfer of a client reading 10 KiB/s ended")
			default:
			}
			if n := ts.metric(t, "stampede_origin_responses_stalled_total"); n != 0 {
				t.Fatalf("%d stalled responses while the client read", n)
			}

			// Stopped: the buffers fill at once, then nothing moves.
			stopped := time.Now()
			select {
			case <-done:
			case <-time.After(10 * idle):
				t.Fatalf("a client that stopped reading still holds its transfer slot after %v", time.Since(stopped))
			}
			t.Logf("read %d bytes slowly in %v; the response ended %v after the client stopped",
				got, slowFor, time.Since(stopped).Round(time.Millisecond))
			if n := ts.metric(t, "stampede_origin_responses_stalled_total"); n != 1 {
				t.Errorf("%d stalled responses, want 1", n)
			}
			if n := ts.metric(t, "stampede_origin_transfers_active"); n != 0 {
				t.Errorf("%d transfers active, want 0", n)
			}
			// The slot is free: the next client gets the file (MaxTransfers
			// is 1), and the one that stopped finds its response cut short.
			if res, body := ts.do(t, "GET", "/big", "Range", "bytes=0-99"); res.StatusCode != http.StatusPartialContent || len(body) != 100 {
				t.Errorf("next client: %s, %d bytes", res.Status, len(body))
			}
			n, err := io.Copy(io.Discard, res.Body)
			if err == nil || got+int(n) >= size {
				t.Errorf("the stalled client read %d of %d bytes, then %v; want the response cut", got+int(n), size, err)
			}
		})
	}
}

// What net/http writes after the handler returns (here the last chunk of
// a streamed body, proxied) gets a deadline of its own, not the one the
// handler's last write left, long past.
func TestWriteIdleTimeoutAfterQuietEnd(t *testing.T) {
	const idle = 50 * time.Millisecond
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
		w.(http.Flusher).Flush()
		time.Sleep(4 * idle) // the upstream is quiet, then ends the body
	}))
	defer up.Close()
	ts := start(t, Config{Upstream: mustParse(t, up.URL), WriteIdleTimeout: idle})
	res, body := ts.do(t, "GET", "/stream")
	if res.StatusCode != http.StatusOK || string(body) != "hello" {
		t.Errorf("%s %q", res.Status, body)
	}
	if n := ts.metric(t, "stampede_origin_responses_stalled_total"); n != 0 {
		t.Errorf("%d stalled responses, want 0", n)
	}
}
