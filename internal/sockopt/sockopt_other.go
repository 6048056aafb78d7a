//go:build !linux

// Package sockopt sets the socket options stampede tunes on its TCP
// connections.
package sockopt

import "net"

// NotSentLowat does nothing outside Linux (see sockopt_linux.go).
func NotSentLowat(net.Conn, int) {}
