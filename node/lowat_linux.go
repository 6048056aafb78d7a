package node

import "syscall"

// setRecvLowat sets the socket's SO_RCVLOWAT: Linux then reports a TCP
// socket readable (and wakes an epoll waiter) only once n bytes are queued,
// or the peer closed, or memory pressure demands it, and grows the receive
// buffer to hold n if needed (tcp_set_rcvlowat).
func setRecvLowat(raw syscall.RawConn, n int) error {
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
	}); err != nil {
		return err
	}
	return serr
}
