//go:build linux

package node

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/internal/sockopt"
	"github.com/stampede-dev/stampede/internal/tcptest"
)

// TestDrainedOnTCP: an upload turn waits for the acknowledgements of what
// its connection wrote, on a real TCP connection. A peer that reads
// nothing has the turn given back after turnStall; one that reads slowly
// keeps it, past turnStall, until all but turnLowat is acknowledged.
// (The buffer sizes are set after the handshake: the window first
// advertised is not shrunk, which only adds to what is queued.)
func TestDrainedOnTCP(t *testing.T) {
	c, s := tcptest.Pair(t)
	if err := c.(*net.TCPConn).SetWriteBuffer(256 << 10); err != nil {
		t.Fatal(err)
	}
	if err := s.(*net.TCPConn).SetReadBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	// Write until the kernel takes no more: the peer reads nothing yet.
	c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	for {
		if _, err := c.Write(make([]byte, 16<<10)); err != nil {
			break
		}
	}
	c.SetWriteDeadline(time.Time{})
	if u := sockopt.Unacked(c); u <= turnLowat {
		t.Fatalf("%d bytes unacknowledged with the peer not reading, want over %d", u, turnLowat)
	}
	p := &peerConn{n: &Node{}, c: c, done: make(chan struct{})}
	ts := NewTurns(1)
	take := func() *turn {
		<-ts.enter(0)
		return newTurn(ts, p)
	}
	noControl := func() (bool, error) { return false, nil }
	// A turn that is never given back must fail the test, not hang it.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	tn := take()
	start := time.Now()
	if done, err := tn.drained(ctx, noControl); done || err != nil {
		t.Fatalf("drained with a deaf peer: done %v, %v", done, err)
	}
	if took := time.Since(start); !tn.given.Load() || took < turnStall*9/10 {
		t.Fatalf("deaf peer: drained returned after %v, turn given back: %v; want it given back after about %v", took, tn.given.Load(), turnStall)
	}
	tn.done()
	if ts.free != 1 {
		t.Fatalf("%d turns free after the deaf peer's, want 1", ts.free)
	}

	// The peer now reads 8 KiB every 20 ms, about 400 KB/s: what is queued
	// (a send buffer of 256 KiB, which the kernel doubles, and what the
	// peer's receive buffer holds) takes over a second to be acknowledged,
	// longer than turnStall.
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		buf := make([]byte, 8<<10)
		for {
			if _, err := s.Read(buf); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	tn = take()
	start = time.Now()
	if done, err := tn.drained(ctx, noControl); done || err != nil {
		t.Fatalf("drained with a slow peer: done %v, %v", done, err)
	}
	took := time.Since(start)
	if tn.given.Load() {
		t.Fatalf("slow peer: the turn was given back after %v although the peer kept reading", took)
	}
	if took <= turnStall {
		t.Fatalf("slow peer: drained after %v, not past turnStall (%v): the test does not show the turn kept", took, turnStall)
	}
	if u := sockopt.Unacked(c); u > turnLowat {
		t.Fatalf("slow peer: drained returned with %d bytes unacknowledged, want at most %d", u, turnLowat)
	}
	t.Logf("slow peer: drained after %v", took)
	tn.done()
	s.Close()
	<-readerDone
}
