// Package sockopt sets the socket options stampede tunes on its TCP
// connections.
package sockopt

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// NotSentLowat sets TCP_NOTSENT_LOWAT on c to n bytes: the kernel send
// buffer holds at most n bytes that TCP has not sent yet, and writes block
// (sendfile too) instead of queueing more. Without a bound the buffer
// autotunes to megabytes on a saturated uplink, so whatever is written
// after a burst waits seconds behind it, and a writer believes it has
// "sent" what is still queued. Connections that are not TCP (in-memory
// ones in tests) are left alone, as are errors: it is an optimisation.
func NotSentLowat(c net.Conn, n int) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, n)
	})
}
