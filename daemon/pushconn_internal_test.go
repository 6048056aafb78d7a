package daemon

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
)

// TestOriginFirst: an origin body read through its shapedBody waits on
// the cross budget alone and charges the peers' limiter, so that a peer
// reading at the same time waits for what the origin took: over the two,
// the budget holds, and the origin is not held back by the peer.
func TestOriginFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 1 << 20 // bytes/s
		cross := rate.NewLimiter(budget, budget/20)
		peers := rate.NewLimiter(budget, budget/20)
		var got atomic.Int64
		body := &shapedBody{ReadCloser: io.NopCloser(bytes.NewReader(make([]byte, budget/2))), ctx: context.Background(),
			n: &got, l: []*rate.Limiter{cross}, debit: peers}
		start := time.Now()
		var origin time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			if _, err := io.Copy(io.Discard, body); err != nil {
				t.Error(err)
			}
			origin = time.Since(start)
		}()
		// A peer's half second at the same time, 16 KiB at a time.
		for range budget / 2 / (16 << 10) {
			wait(context.Background(), peers, 16<<10)
		}
		peer := time.Since(start)
		<-done
		t.Logf("half the budget's second from the origin in %v; as much from a peer at the same time in %v", origin, peer)
		// On the wire (× wireOverhead) each half is 0.56 s. The origin
		// is not held back by the peer; the peer waits for both.
		if origin > 600*time.Millisecond {
			t.Errorf("the origin's body took %v: held back by the peer", origin)
		}
		if peer < time.Second {
			t.Errorf("the peer had its half in %v, the origin its own: more than the budget's second", peer)
		}
		if got.Load() != budget/2 {
			t.Errorf("counted %d bytes, want %d", got.Load(), budget/2)
		}
	})
}

// TestShapedConnCounts: a peer connection counts what it reads and what
// it writes (the throttle measures both ways from these), and its writes
// wait on its upload limiters.
func TestShapedConnCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		var in, out atomic.Int64
		const budget = 1 << 20
		up := rate.NewLimiter(budget, budget/50)
		up.AllowN(time.Now(), budget/50) // start with the bucket empty
		c := &shapedConn{Conn: a, ctx: context.Background(), in: &in, out: &out,
			down: []*rate.Limiter{rate.NewLimiter(rate.Inf, 1)}, up: []*rate.Limiter{up}}
		go io.Copy(io.Discard, b)
		start := time.Now()
		if _, err := c.Write(make([]byte, budget/4)); err != nil {
			t.Fatal(err)
		}
		// A quarter of the budget's second, on the wire (× wireOverhead).
		if took := time.Since(start); took < 250*time.Millisecond {
			t.Errorf("a quarter of the upload budget went in %v", took)
		}
		go b.Write(make([]byte, 1000))
		if _, err := io.ReadFull(c, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		if in.Load() != 1000 || out.Load() != budget/4 {
			t.Errorf("counted %d in, %d out; want 1000 and %d", in.Load(), out.Load(), budget/4)
		}
	})
}
