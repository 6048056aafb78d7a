// Package sockopt sets the socket options stampede tunes on its TCP
// connections, and reads what it measures from them.
package sockopt

import (
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

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

// MinRTT is the connection's round trip without queues: TCP's minimum RTT
// (tcpi_min_rtt, a windowed minimum over the last 5 minutes by default).
// 0 if c is not TCP or the kernel has no sample yet.
func MinRTT(c net.Conn) time.Duration {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var info *unix.TCPInfo
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || gerr != nil {
		return 0
	}
	return minRTT(info)
}

// minRTT reads tcpi_min_rtt (microseconds); the kernel reports none as 0
// (also what a kernel too old to have the field leaves there) or ~0.
func minRTT(info *unix.TCPInfo) time.Duration {
	if info.Min_rtt == 0 || info.Min_rtt == ^uint32(0) {
		return 0
	}
	return time.Duration(info.Min_rtt) * time.Microsecond
}

// RecvLowat sets SO_RCVLOWAT on the socket raw controls to n bytes: the
// kernel then reports the TCP socket readable (and wakes an epoll waiter)
// only once n bytes are queued, or the peer closed, and grows the receive
// buffer to hold them (tcp_set_rcvlowat). A non-blocking read still
// returns what is queued. Use it only where RecvLowatSafe.
func RecvLowat(raw syscall.RawConn, n int) error {
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, n)
	}); err != nil {
		return err
	}
	return serr
}

// RecvLowatSafe reports whether this kernel wakes a reader below its
// SO_RCVLOWAT mark when the receive window or memory runs short: Linux 5.7
// and later. Older kernels could leave a reader asleep with less than the
// mark queued and the window closed (fixed in 2020: "tcp: fix SO_RCVLOWAT
// hangs with fat skbs" and "tcp: fix SO_RCVLOWAT possible hangs under high
// mem pressure"), so the option stays unused there.
var RecvLowatSafe = kernelAtLeast(5, 7)

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor; false if it cannot tell.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return releaseAtLeast(unix.ByteSliceToString(u.Release[:]), major, minor)
}

// releaseAtLeast compares a kernel release such as "6.1.0-18-amd64" or
// "5.10rc1" with major.minor.
func releaseAtLeast(release string, major, minor int) bool {
	ma, rest, ok := strings.Cut(release, ".")
	if !ok {
		return false
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		rest = rest[:end]
	}
	M, err1 := strconv.Atoi(ma)
	m, err2 := strconv.Atoi(rest)
	if err1 != nil || err2 != nil {
		return false
	}
	return M > major || M == major && m >= minor
}

// Unacked is how many bytes c's kernel send buffer holds: written and not
// yet acknowledged by the other end, sent or not (SIOCOUTQ). -1 if c is
// not TCP or it cannot be read.
func Unacked(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	n, gerr := -1, error(nil)
	if err := raw.Control(func(fd uintptr) {
		n, gerr = unix.IoctlGetInt(int(fd), unix.TIOCOUTQ)
	}); err != nil || gerr != nil {
		return -1
	}
	return n
}
