//go:build !linux

package node

import (
	"errors"
	"syscall"
)

// setRecvLowat is Linux only: elsewhere poll semantics of SO_RCVLOWAT
// differ, and a connection reads as it would without it.
func setRecvLowat(syscall.RawConn, int) error { return errors.ErrUnsupported }
