// Package tcptest gives tests connected TCP sockets on loopback.
package tcptest

import (
	"net"
	"testing"
)

// Pair returns the two ends of a TCP connection on 127.0.0.1, closed when
// the test ends.
func Pair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		c   net.Conn
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		accepted <- result{c, err}
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	server = r.c
	t.Cleanup(func() { server.Close() })
	return client, server
}
