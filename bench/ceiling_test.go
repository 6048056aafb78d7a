package bench

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestNetnsMeshCeiling measures what the netns testbed itself carries
// when the programs cost nearly nothing: 50 hosts capped like flash50's
// peers (8 Mbit/s up, 20 down), each sending to the next 4 over TCP as
// fast as it may, all in this one process. The aggregate, against the 50
// MB/s of caps, is the ceiling any system can reach on this machine
// (docs/benchmarks.md, seventh pass): on 2 cores it was 47 MB/s (94%,
// the TCP/IP headers being most of the rest) at half the CPU, so the
// network emulation alone does not hold flash50 back. Opt-in
// (STAMPEDETEST_NETNS_CEILING=1, root): it takes about a minute.
func TestNetnsMeshCeiling(t *testing.T) {
	if os.Getenv("STAMPEDETEST_NETNS_CEILING") == "" || os.Geteuid() != 0 {
		t.Skip("set STAMPEDETEST_NETNS_CEILING=1 and run as root")
	}
	const (
		hosts   = 50
		fanout  = 4
		up      = 1e6
		down    = 2.5e6
		warmup  = 3 * time.Second
		measure = 10 * time.Second
	)
	nw := newTestNetns(t)
	var hs []*Host
	for i := range hosts {
		h, err := nw.AddHost(t.Context(), fmt.Sprint("peer", i), up, down)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	var (
		received atomic.Int64
		mu       sync.Mutex
		closers  []func() error
		wg       sync.WaitGroup
	)
	defer func() {
		mu.Lock()
		for _, c := range closers {
			c()
		}
		mu.Unlock()
		wg.Wait()
	}()
	track := func(c func() error) {
		mu.Lock()
		closers = append(closers, c)
		mu.Unlock()
	}
	for _, h := range hs {
		ln, err := h.Listen(9000)
		if err != nil {
			t.Fatal(err)
		}
		track(ln.Close)
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				track(c.Close)
				wg.Go(func() { drain(c, &received) })
			}
		})
	}
	for i, h := range hs {
		for k := 1; k <= fanout; k++ {
			c, err := h.DialContext(t.Context(), "tcp", hs[(i+k)%hosts].Addr(9000))
			if err != nil {
				t.Fatal(err)
			}
			track(c.Close)
			wg.Go(func() {
				buf := make([]byte, 16<<10)
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			})
		}
	}
	time.Sleep(warmup)
	before := received.Load()
	time.Sleep(measure)
	rate := float64(received.Load()-before) / measure.Seconds()
	ratio := rate / (hosts * up)
	t.Logf("%d hosts, %d streams each: %.2f MB/s of TCP payload, %.1f%% of the %.0f MB/s of upload caps",
		hosts, fanout, rate/1e6, 100*ratio, hosts*up/1e6)
	if ratio < 0.85 {
		t.Errorf("the testbed carried %.1f%% of its caps, want at least 85%%", 100*ratio)
	}
}

// drain reads c to its end, counting the bytes.
func drain(c net.Conn, n *atomic.Int64) {
	buf := make([]byte, 64<<10)
	for {
		k, err := c.Read(buf)
		n.Add(int64(k))
		if err != nil {
			return
		}
	}
}
