//go:build linux

package sockopt

import (
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestNotSentLowat(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	NotSentLowat(c, 48<<10)
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
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
