//go:build unix

package store

import "syscall"

// Open flags that keep a path's last element from being a symbolic link
// (the open fails with ELOOP) or a FIFO from blocking the open.
const (
	NoFollow = syscall.O_NOFOLLOW
	NonBlock = syscall.O_NONBLOCK
)
