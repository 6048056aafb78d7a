package daemon

import (
	"net"
	"os/user"
	"strconv"

	"golang.org/x/sys/unix"
)

// peerCred reads the credentials of the process at the other end of c
// (SO_PEERCRED: as they were when it connected).
func peerCred(c *net.UnixConn) (cred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return cred{-1, -1}, err
	}
	var uc *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		uc, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return cred{-1, -1}, err
	}
	if cerr != nil {
		return cred{-1, -1}, cerr
	}
	return cred{int(uc.Uid), int(uc.Gid)}, nil
}

// groupsOf returns the supplementary groups of user uid (none if they
// cannot be looked up: the primary group still counts).
func groupsOf(uid int) []int {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return nil
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil
	}
	var gs []int
	for _, id := range ids {
		if g, err := strconv.Atoi(id); err == nil {
			gs = append(gs, g)
		}
	}
	return gs
}
