package node

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestConnReaderWakesOncePerFrame sends a 64 KiB frame's payload in 1 KiB
// writes a millisecond apart, as a slow link would deliver it: told the
// frame needs 64 KiB, the reader gets it in a few reads, not one per write.
func TestConnReaderWakesOncePerFrame(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SO_RCVLOWAT is used on Linux only")
	}
	const size, step = 64 << 10, 1 << 10
	for _, tc := range []struct {
		name     string
		expect   bool
		maxReads int
	}{
		{"told", true, 4},
		{"not told", false, size / step},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, c := tcpPair(t)
			go func() {
				b := make([]byte, step)
				for range size / step {
					if _, err := w.Write(b); err != nil {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
			r := newConnReader(c)
			if tc.expect {
				r.expect(size)
			}
			buf := make([]byte, size)
			reads, got := 0, 0
			for got < size {
				n, err := r.Read(buf[got:])
				if err != nil {
					t.Fatalf("read after %d bytes: %v", got, err)
				}
				got += n
				reads++
			}
			t.Logf("%d reads", reads)
			if tc.expect && reads > tc.maxReads {
				t.Errorf("%d reads for a 64 KiB frame, want at most %d", reads, tc.maxReads)
			}
			if !tc.expect && reads < 8 {
				t.Errorf("only %d reads without the hint: the test does not show a difference", reads)
			}
		})
	}
}

// TestConnReaderNeverWaitsPastTheFrame: the low-water mark follows the
// bytes still needed down, so a frame whose rest comes after a pause, and
// then nothing more, is still read whole.
func TestConnReaderNeverWaitsPastTheFrame(t *testing.T) {
	w, c := tcpPair(t)
	r := newConnReader(c)
	r.expect(40 << 10)
	go func() {
		w.Write(make([]byte, 30<<10))
		time.Sleep(50 * time.Millisecond)
		w.Write(make([]byte, 10<<10)) // the rest, then silence
	}()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 16<<10) // smaller than the frame, as a limiter's reads are
	got := 0
	for got < 40<<10 {
		n, err := r.Read(buf)
		if err != nil {
			t.Fatalf("read after %d bytes: %v", got, err)
		}
		got += n
	}
	// Between frames the mark is back at 1: a lone small frame wakes us.
	go w.Write([]byte{1, 2, 3})
	n, err := io.ReadAtLeast(r, buf, 3)
	if err != nil || n != 3 {
		t.Fatalf("small frame after the large one: %d bytes, %v", n, err)
	}
}
