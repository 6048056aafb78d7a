//go:build !linux

// Package sockopt sets the socket options stampede tunes on its TCP
// connections, and reads what it measures from them.
package sockopt

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// NotSentLowat does nothing outside Linux (see sockopt_linux.go).
func NotSentLowat(net.Conn, int) {}

// MinRTT is Linux only (TCP_INFO): 0, unknown, elsewhere.
func MinRTT(net.Conn) time.Duration { return 0 }

// RecvLowat is Linux only: elsewhere the poll semantics of SO_RCVLOWAT
// differ.
func RecvLowat(syscall.RawConn, int) error { return errors.ErrUnsupported }

// RecvLowatSafe is false outside Linux.
const RecvLowatSafe = false

// Unacked is Linux only: -1, unknown, elsewhere.
func Unacked(net.Conn) int { return -1 }
