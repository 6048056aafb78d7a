package node

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// notSentLowat bounds the bytes a peer connection's kernel send buffer holds
// that TCP has not sent yet. Without a bound the buffer autotunes to
// megabytes on a saturated uplink, and a HAVE, START or REQUEST queued
// after piece data waits seconds behind it: the swarm then coordinates on
// stale news (origin fetches of pieces already on their way, requests
// timing out). With it, the writer blocks instead, and control frames,
// which the writer sends before piece data, wait at most this much.
const notSentLowat = 32 << 10

// tuneConn sets TCP_NOTSENT_LOWAT on TCP connections; other connections
// (in-memory ones in tests) are left alone, as are errors: the setting is
// an optimisation.
func tuneConn(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, notSentLowat)
	})
}
