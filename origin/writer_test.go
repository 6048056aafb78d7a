//go:build linux

package origin

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
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
// idle timeouts; once it stops reading, its response is ended within a
// timeout, counted, and its transfer slot freed for the next client. This
// is the write path (a shaped body), on memnet in a synctest bubble, where
// those times are exact.
func TestWriteIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = time.Second
		dir := t.TempDir()
		writeFile(t, dir, "big", make([]byte, idleTestSize), t0)
		nw := memnet.New()
		done := make(chan struct{}, 10)
		ts := startMem(t, nw, Config{Dir: dir, MaxTransfers: 1, Rate: 1 << 20, WriteIdleTimeout: idle},
			func(s *Server) { s.testHookTransferDone = func() { done <- struct{}{} } })
		// A small window, as on a real link whose buffers are full: a
		// blocked writer goes on after every few KiB its client reads.
		c, err := nw.Host(memnet.HostConfig{Window: 4 << 10}).Dial(t.Context(), strings.TrimPrefix(ts.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if took := readSlowlyThenStop(t, ts, c, idle, done); took > idle {
			t.Errorf("the response ended %v after the client stopped reading, want within the write idle timeout (%v)", took, idle)
		}
	})
}

// TestWriteIdleTimeoutSendfile is TestWriteIdleTimeout on the sendfile(2)
// path (no Rate), where one call sends the whole body and the deadline is
// renewed while the client takes bytes. sendfile needs a TCP socket, so
// this runs on real loopback in real time, and how soon the response ends
// (within two timeouts) is only bounded loosely: ten.
func TestWriteIdleTimeoutSendfile(t *testing.T) {
	const idle = time.Second
	dir := t.TempDir()
	writeFile(t, dir, "big", make([]byte, idleTestSize), t0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 10)
	ts := startOn(t, smallBuffers{ln}, nil, Config{Dir: dir, MaxTransfers: 1, WriteIdleTimeout: idle},
		func(s *Server) { s.testHookTransferDone = func() { done <- struct{}{} } })
	readSlowlyThenStop(t, ts, dialSmall(t, ln.Addr().String()), idle, done)
}

// idleTestSize is the file readSlowlyThenStop asks for: more than a slow
// client reads and the buffers hold.
const idleTestSize = 4 << 20

// readSlowlyThenStop asks for /big on c, reads 10 KiB/s for three write
// idle timeouts and checks that the response goes on; then it stops
// reading, waits for the response to end (done) and checks that it was
// counted as stalled, that the slot is free for the next client and that
// the response was cut short. It returns how long after the client stopped
// the response ended.
func readSlowlyThenStop(t *testing.T, ts *testServer, c net.Conn, idle time.Duration, done <-chan struct{}) time.Duration {
	t.Helper()
	slowFor := 3 * idle
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
	took := time.Since(stopped)
	t.Logf("read %d bytes slowly in %v; the response ended %v after the client stopped",
		got, slowFor, took.Round(time.Millisecond))
	if n := ts.metric(t, "stampede_origin_responses_stalled_total"); n != 1 {
		t.Errorf("%d stalled responses, want 1", n)
	}
	if n := ts.metric(t, "stampede_origin_transfers_active"); n != 0 {
		t.Errorf("%d transfers active, want 0", n)
	}
	// The slot is free: the next client gets the file (MaxTransfers is 1),
	// and the one that stopped finds its response cut short.
	if res, body := ts.do(t, "GET", "/big", "Range", "bytes=0-99"); res.StatusCode != http.StatusPartialContent || len(body) != 100 {
		t.Errorf("next client: %s, %d bytes", res.Status, len(body))
	}
	n, err := io.Copy(io.Discard, res.Body)
	if err == nil || got+int(n) >= idleTestSize {
		t.Errorf("the stalled client read %d of %d bytes, then %v; want the response cut", got+int(n), idleTestSize, err)
	}
	return took
}

// What net/http writes after the handler returns (here the last chunk of
// a streamed body, proxied) gets a deadline of its own, not the one the
// handler's last write left, long past.
func TestWriteIdleTimeoutAfterQuietEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 50 * time.Millisecond
		nw := memnet.New()
		up := serveMem(t, nw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hello")
			w.(http.Flusher).Flush()
			time.Sleep(4 * idle) // the upstream is quiet, then ends the body
		}))
		ts := startMem(t, nw, Config{Upstream: mustParse(t, up), WriteIdleTimeout: idle})
		res, body := ts.do(t, "GET", "/stream")
		if res.StatusCode != http.StatusOK || string(body) != "hello" {
			t.Errorf("%s %q", res.Status, body)
		}
		if n := ts.metric(t, "stampede_origin_responses_stalled_total"); n != 0 {
			t.Errorf("%d stalled responses, want 0", n)
		}
	})
}
