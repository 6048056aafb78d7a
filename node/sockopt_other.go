//go:build !linux

package node

import "net"

// tuneConn does nothing outside Linux (see sockopt_linux.go).
func tuneConn(net.Conn) {}
