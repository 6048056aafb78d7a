//go:build linux

package sockopt

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stampede-dev/stampede/internal/tcptest"
)

// dialLoopback returns a TCP connection to a loopback listener, and its
// raw connection.
func dialLoopback(t *testing.T) (net.Conn, syscall.RawConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return c, raw
}

func TestNotSentLowat(t *testing.T) {
	c, raw := dialLoopback(t)
	NotSentLowat(c, 48<<10)
	var got int
	var gerr error
	raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT) })
	if gerr != nil || got != 48<<10 {
		t.Fatalf("TCP_NOTSENT_LOWAT = %d, %v; want %d", got, gerr, 48<<10)
	}
	// Not a TCP connection: left alone, no panic.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	NotSentLowat(a, 1)
}

func TestReleaseAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    bool
	}{
		{"5.7.0", true}, {"5.6.19", false}, {"6.1.0-18-amd64", true}, {"4.19.0", false},
		{"5.10rc1", true}, {"5.6-custom", false}, {"10.0", true}, {"garbage", false}, {"5.", false},
	} {
		if got := releaseAtLeast(tc.release, 5, 7); got != tc.want {
			t.Errorf("releaseAtLeast(%q, 5, 7) = %v, want %v", tc.release, got, tc.want)
		}
	}
}

func TestRecvLowat(t *testing.T) {
	_, raw := dialLoopback(t)
	if err := RecvLowat(raw, 40<<10); err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT) })
	if gerr != nil || got != 40<<10 {
		t.Fatalf("SO_RCVLOWAT = %d, %v; want %d", got, gerr, 40<<10)
	}
}

func TestMinRTT(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The handshake is the first sample: connect returns once the SYN's
	// round trip is over, so the minimum is within the dial's time.
	start := time.Now()
	c, err := net.Dial("tcp", ln.Addr().String())
	dial := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if rtt := MinRTT(c); rtt < time.Microsecond || rtt > dial {
		t.Fatalf("MinRTT on loopback = %v, want 1µs to %v (the dial's time)", rtt, dial)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := MinRTT(a); got != 0 {
		t.Fatalf("MinRTT of a pipe = %v, want 0", got)
	}
}

func TestMinRTTUnits(t *testing.T) {
	for _, tc := range []struct {
		us   uint32
		want time.Duration
	}{
		{0, 0},          // no sample
		{^uint32(0), 0}, // no sample either
		{1500, 1500 * time.Microsecond},
		{1, time.Microsecond},
	} {
		if got := minRTT(&unix.TCPInfo{Min_rtt: tc.us}); got != tc.want {
			t.Errorf("min_rtt %d µs: %v, want %v", tc.us, got, tc.want)
		}
	}
}

// TestUnacked: what the other end has not acknowledged, sent or not: 0 on
// an idle connection, more while the other end reads nothing and the
// buffers are full, 0 again once it has read everything; -1 for a
// connection that is not TCP.
func TestUnacked(t *testing.T) {
	c, s := tcptest.Pair(t)
	if u := Unacked(c); u != 0 {
		t.Fatalf("idle connection: Unacked = %d, want 0", u)
	}
	until := func(what string, ok func(int) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for u := Unacked(c); !ok(u); u = Unacked(c) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Unacked still %d after 10 s", what, u)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// More than the kernel's send and receive buffers hold together: the
	// write blocks while the other end reads nothing.
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 32<<20))
		wrote <- err
	}()
	until("the other end reads nothing", func(u int) bool { return u > 0 })
	go io.Copy(io.Discard, s)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	until("the other end read everything", func(u int) bool { return u == 0 })

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if u := Unacked(a); u != -1 {
		t.Errorf("a pipe: Unacked = %d, want -1", u)
	}
}
