package memnet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/internal/ratelimit"
)

const MiB = 1 << 20

func TestDialListenAddresses(t *testing.T) {
	n := memnet.New()
	a, b := n.Host(memnet.HostConfig{}), n.Host(memnet.HostConfig{})
	if a.IP() == b.IP() {
		t.Fatalf("two hosts share %v", a.IP())
	}
	ln, err := a.Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	la, ok := ln.Addr().(*net.TCPAddr)
	if !ok || la.Port == 0 || la.AddrPort().Addr() != a.IP() {
		t.Fatalf("listener address %#v, want a *net.TCPAddr on %v with a port", ln.Addr(), a.IP())
	}
	if _, err := a.Listen(uint16(la.Port)); !errors.Is(err, memnet.ErrInUse) {
		t.Errorf("second Listen on %v: %v, want ErrInUse", la, err)
	}

	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	c, err := b.Dial(context.Background(), ln.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	defer s.Close()
	if s.RemoteAddr().String() != c.LocalAddr().String() || c.RemoteAddr().String() != ln.String() {
		t.Errorf("addresses: dialer %v -> %v, acceptor sees %v", c.LocalAddr(), c.RemoteAddr(), s.RemoteAddr())
	}
	if got := s.RemoteAddr().(*net.TCPAddr).AddrPort().Addr(); got != b.IP() {
		t.Errorf("acceptor sees the dialer at %v, want host %v", got, b.IP())
	}

	// Full duplex: both sides write before either reads.
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
		t.Errorf("acceptor read %q, %v", buf, err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Errorf("dialer read %q, %v", buf, err)
	}
}

func TestDialRefused(t *testing.T) {
	n := memnet.New()
	a, b := n.Host(memnet.HostConfig{}), n.Host(memnet.HostConfig{})
	addr := a.IP().String() + ":80"
	if _, err := b.Dial(context.Background(), addr); !errors.Is(err, memnet.ErrRefused) {
		t.Errorf("dial with nobody listening: %v, want ErrRefused", err)
	}
	ln, err := a.Listen(80)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := b.Dial(context.Background(), addr); !errors.Is(err, memnet.ErrRefused) {
		t.Errorf("dial after Close: %v, want ErrRefused", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	if _, err := b.Dial(context.Background(), "nonsense"); err == nil {
		t.Error("dial of a malformed address succeeded")
	}
}

func TestCloseSemantics(t *testing.T) {
	a, b := memnet.Pipe(memnet.Shape{}, memnet.Shape{})
	if _, err := a.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "last words" {
		t.Errorf("after the writer closed: read %q, %v; want the bytes then EOF", got, err)
	}
	if _, err := b.Write([]byte("x")); !errors.Is(err, memnet.ErrReset) {
		t.Errorf("write to a closed peer: %v, want ErrReset", err)
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after own Close: %v, want net.ErrClosed", err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after own Close: %v, want net.ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCloseUnblocks: a Read blocked forever returns when its own end
// closes, and a Write blocked on a full window when the other end closes.
func TestCloseUnblocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := memnet.Pipe(memnet.Shape{}, memnet.Shape{})
		readErr := make(chan error, 1)
		go func() {
			_, err := a.Read(make([]byte, 1))
			readErr <- err
		}()
		synctest.Wait()
		a.Close()
		if err := <-readErr; !errors.Is(err, net.ErrClosed) {
			t.Errorf("blocked read after Close: %v, want net.ErrClosed", err)
		}
		b.Close()

		a, b = memnet.Pipe(memnet.Shape{Window: 1024}, memnet.Shape{})
		writeErr := make(chan error, 1)
		go func() {
			n, err := a.Write(make([]byte, 4096)) // b never reads
			if n != 1024 {
				t.Errorf("wrote %d bytes into a window of 1024", n)
			}
			writeErr <- err
		}()
		synctest.Wait()
		b.Close()
		if err := <-writeErr; !errors.Is(err, memnet.ErrReset) {
			t.Errorf("blocked write after the reader closed: %v, want ErrReset", err)
		}
		a.Close()
	})
}

func TestDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := memnet.Pipe(memnet.Shape{Window: 64 << 10}, memnet.Shape{})
		defer a.Close()
		defer b.Close()

		start := time.Now()
		b.SetReadDeadline(start.Add(time.Second))
		_, err := b.Read(make([]byte, 1))
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("read past its deadline: %v, want a timeout", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("read deadline of 1s fired after %v", d)
		}

		// A deadline in the past cuts a blocked read short (as
		// wire.Exchange does to cancel a handshake).
		b.SetReadDeadline(time.Time{})
		done := make(chan error, 1)
		go func() {
			_, err := b.Read(make([]byte, 1))
			done <- err
		}()
		synctest.Wait()
		b.SetReadDeadline(time.Unix(1, 0))
		if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("read cut short: %v", err)
		}
		b.SetReadDeadline(time.Time{})

		// A writer nobody reads fills the window, then times out having
		// written exactly the window.
		start = time.Now()
		a.SetWriteDeadline(start.Add(2 * time.Second))
		n, err := a.Write(make([]byte, 1<<20))
		if !errors.Is(err, os.ErrDeadlineExceeded) || n != 64<<10 {
			t.Errorf("write into a full window: %d bytes, %v; want %d and a timeout", n, err, 64<<10)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("write deadline of 2s fired after %v", d)
		}
		// Once the reader drains it, writes go on.
		a.SetWriteDeadline(time.Time{})
		go io.Copy(io.Discard, b)
		if n, err := a.Write(make([]byte, 1<<20)); n != 1<<20 || err != nil {
			t.Errorf("write after the reader drained: %d, %v", n, err)
		}
	})
}

func TestLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lat = 30 * time.Millisecond
		a, b := memnet.Pipe(memnet.Shape{Latency: lat}, memnet.Shape{Latency: lat})
		defer a.Close()
		defer b.Close()
		go func() {
			buf := make([]byte, 4)
			for {
				if _, err := io.ReadFull(b, buf); err != nil {
					return
				}
				b.Write(buf)
			}
		}()
		start := time.Now()
		buf := make([]byte, 4)
		a.Write([]byte("ping"))
		if _, err := io.ReadFull(a, buf); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt != 2*lat {
			t.Errorf("round trip %v, want %v", rtt, 2*lat)
		}
		// A close travels as fast as the data: EOF one latency later.
		start = time.Now()
		b.Close()
		if _, err := a.Read(buf); err != io.EOF {
			t.Errorf("read after the other end closed: %v, want EOF", err)
		}
		if d := time.Since(start); d != lat {
			t.Errorf("EOF came %v after the close, want %v", d, lat)
		}
	})
}

func TestBandwidth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate = 4 * MiB
		a, b := memnet.Pipe(memnet.Shape{Limits: []*ratelimit.Limiter{ratelimit.New(rate)}, Latency: 10 * time.Millisecond}, memnet.Shape{})
		data := make([]byte, 8*MiB)
		for i := range data {
			data[i] = byte(i * 7)
		}
		start := time.Now()
		go func() {
			a.Write(data)
			a.Close()
		}()
		got, err := io.ReadAll(b)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d bytes, %v", len(got), err)
		}
		// The bucket starts with a tenth of a second of traffic.
		want := time.Duration(float64(len(data)-rate/10)/rate*float64(time.Second)) + 10*time.Millisecond
		if d := time.Since(start); d < want-20*time.Millisecond || d > want+20*time.Millisecond {
			t.Errorf("8 MiB at 4 MiB/s took %v, want about %v", d, want)
		}
	})
}

// TestHostLinksShared: a host's uplink is shared by all its connections,
// and a receiver's downlink caps what it gets.
func TestHostLinksShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate = 2 * MiB
		n := memnet.New()
		src := n.Host(memnet.HostConfig{Up: rate})
		fast := n.Host(memnet.HostConfig{})
		slow := n.Host(memnet.HostConfig{Down: rate / 2})
		transfer := func(from, to *memnet.Host, size int) time.Duration {
			ln, err := to.Listen(0)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			start := time.Now()
			go func() {
				c, err := from.Dial(context.Background(), ln.String())
				if err != nil {
					t.Error(err)
					return
				}
				c.Write(make([]byte, size))
				c.Close()
			}()
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got, err := io.Copy(io.Discard, c); got != int64(size) || err != nil {
				t.Errorf("received %d, %v", got, err)
			}
			return time.Since(start)
		}
		// Two transfers of 2 MiB at once through one 2 MiB/s uplink
		// (whose bucket starts with a tenth of a second): about 1.9 s
		// each, not 0.9.
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if d := transfer(src, fast, 2*MiB); d < 1700*time.Millisecond || d > 2*time.Second {
					t.Errorf("a transfer sharing the uplink took %v, want about 1.9s", d)
				}
			})
		}
		wg.Wait()
		// 2 MiB from an unlimited host into a 1 MiB/s downlink: about 1.9 s.
		if d := transfer(fast, slow, 2*MiB); d < 1850*time.Millisecond || d > 1950*time.Millisecond {
			t.Errorf("2 MiB into a 1 MiB/s downlink took %v, want about 1.9s", d)
		}
	})
}

// TestConcurrentUse hammers one connection from several goroutines in both
// directions (run it with -race): every byte arrives once, in order per
// writer call.
func TestConcurrentUse(t *testing.T) {
	a, b := memnet.Pipe(memnet.Shape{Window: 8 << 10}, memnet.Shape{Window: 8 << 10})
	const writers, msgs, size = 4, 200, 1000
	var wg sync.WaitGroup
	for _, c := range []net.Conn{a, b} {
		for w := range writers {
			wg.Go(func() {
				msg := bytes.Repeat([]byte{byte(w)}, size)
				for range msgs {
					if _, err := c.Write(msg); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	counts := make([][writers]int, 2)
	var rg sync.WaitGroup
	for k, c := range []net.Conn{a, b} {
		rg.Go(func() {
			buf := make([]byte, size)
			for range writers * msgs {
				if _, err := io.ReadFull(c, buf); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(buf, bytes.Repeat(buf[:1], size)) {
					t.Error("two writes interleaved")
					return
				}
				counts[k][buf[0]]++
			}
		})
	}
	wg.Wait()
	rg.Wait()
	for k := range counts {
		for w, c := range counts[k] {
			if c != msgs {
				t.Errorf("end %d got %d messages from writer %d, want %d", k, c, w, msgs)
			}
		}
	}
	a.Close()
	b.Close()
}

// TestHTTP runs net/http over the network: the server sees the client's
// host address, as a tracker must.
func TestHTTP(t *testing.T) {
	n := memnet.New()
	srvHost, cliHost := n.Host(memnet.HostConfig{}), n.Host(memnet.HostConfig{Latency: time.Millisecond})
	ln, err := srvHost.Listen(80)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.RemoteAddr)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: cliHost.DialContext}}
	defer client.CloseIdleConnections()
	for range 3 {
		resp, err := client.Get("http://" + ln.String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		host, _, _ := net.SplitHostPort(string(body))
		if host != cliHost.IP().String() {
			t.Errorf("server saw the client at %s, want %v", body, cliHost.IP())
		}
	}
}

// TestRandomChunks checks byte order under random write and read sizes with
// latency and shaping (a cheap fuzz of the chunk bookkeeping).
func TestRandomChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		a, b := memnet.Pipe(memnet.Shape{Latency: 3 * time.Millisecond, Window: 50000,
			Limits: []*ratelimit.Limiter{ratelimit.New(16 * MiB), nil}}, memnet.Shape{})
		data := make([]byte, 3*MiB+17)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		go func() {
			w := rand.New(rand.NewPCG(3, 4))
			for p := data; len(p) > 0; {
				k := min(len(p), 1+w.IntN(70000))
				if _, err := a.Write(p[:k]); err != nil {
					t.Error(err)
					return
				}
				p = p[k:]
			}
			a.Close()
		}()
		var got []byte
		buf := make([]byte, 100000)
		for {
			k, err := b.Read(buf[:1+rng.IntN(len(buf)-1)])
			got = append(got, buf[:k]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("got %d bytes, want %d, not equal", len(got), len(data))
		}
	})
}
