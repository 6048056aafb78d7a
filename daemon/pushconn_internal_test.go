package daemon

import (
	"bytes"
	"context"
	"io"
	"math"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"

	"github.com/stampede-dev/stampede/cluster"
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
		// On the wire (onWire) each half is 0.52 s of the budget. The
		// origin is not held back by the peer; the peer waits for both,
		// 1.05 s less its limiter's burst (50 ms): a peer that did not
		// wait for the origin's would be done in 0.52 s.
		if origin > 600*time.Millisecond {
			t.Errorf("the origin's body took %v: held back by the peer", origin)
		}
		if peer < 950*time.Millisecond {
			t.Errorf("the peer had its half in %v, the origin its own: more than the budget's second", peer)
		}
		if got.Load() != budget/2 {
			t.Errorf("counted %d bytes, want %d", got.Load(), budget/2)
		}
	})
}

// TestDebitUnlimited: a limiter without a limit takes no debt.
func TestDebitUnlimited(t *testing.T) {
	l := rate.NewLimiter(rate.Inf, 1<<20)
	debit(l, 10<<20)
	if l.Tokens() < 0 {
		t.Errorf("tokens %v after a debit of an unlimited limiter", l.Tokens())
	}
}

// TestShapedWritePaced: a write across the uplink leaves a chunk at a
// time as its limiter lets it, not all at once after waiting for all of
// it: over any 100 ms the reader gets no more than the rate allows, with
// its burst and a chunk.
func TestShapedWritePaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bps = 1 << 20
		l := rate.NewLimiter(bps, burst(bps))
		a, b := net.Pipe()
		c := &shapedConn{Conn: a, ctx: context.Background(), in: &atomic.Int64{}, up: []*rate.Limiter{l}}
		type got struct {
			at time.Time
			n  int
		}
		var reads []got
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 64<<10)
			for {
				n, err := b.Read(buf)
				reads = append(reads, got{time.Now(), n})
				if err != nil {
					return
				}
			}
		}()
		start := time.Now()
		if _, err := c.Write(make([]byte, 2*bps)); err != nil {
			t.Fatal(err)
		}
		c.Close()
		<-done
		if took := time.Since(start); took < 1900*time.Millisecond {
			t.Errorf("2 s of the rate written in %v", took)
		}
		limit := bps/10 + burst(bps) + writeChunk
		for i := range reads {
			sum := 0
			for _, r := range reads[i:] {
				if r.at.Sub(reads[i].at) >= 100*time.Millisecond {
					break
				}
				sum += r.n
			}
			if sum > limit {
				t.Fatalf("%d bytes within 100 ms from %v, more than %d", sum, reads[i].at.Sub(start), limit)
			}
		}
	})
}

// TestPushPaceGrants: the receiver's grants, asked through pushPace,
// divide its paced share among the senders, less what the origin and the
// ACKs of its own sends take, and go to the one left when the other
// stops asking.
func TestPushPaceGrants(t *testing.T) {
	const cross = 4_000_000
	p := newPushPace(&cluster.Role{Cross: cross})
	a, b := &atomic.Int64{}, &atomic.Int64{}
	p.from["a"], p.from["b"] = a, b
	now := time.Unix(1000, 0)
	budget := paced(cross)
	var origin int64
	step := func(senders ...string) map[string]float64 {
		t.Helper()
		g := p.pacer.Grants()
		a.Add(int64(g["a"] / 5 * framePayload / frameWire))
		b.Add(int64(g["b"] / 5 * framePayload / frameWire))
		origin += 200_000 // 1 MB/s of payload
		p.acksIn.Add(20_000)
		now = now.Add(cluster.DefaultPaceInterval)
		for _, s := range senders {
			p.grant(s, now, origin)
		}
		g = p.pacer.Grants()
		if sum := g["a"] + g["b"]; sum > budget {
			t.Fatalf("grants %v sum to %.0f, over the paced share %.0f", g, sum, budget)
		}
		return g
	}
	var g map[string]float64
	for range 30 {
		g = step("a", "b")
	}
	prio := float64(onWire(1_000_000) + 100_000)
	if want := (budget - prio) / 2; math.Abs(g["a"]-want) > 0.02*want || math.Abs(g["b"]-want) > 0.02*want {
		t.Errorf("grants %v, want %.0f each: the share %.0f less the origin's and the ACKs' %.0f, halved", g, want, budget, prio)
	}
	for range 10 {
		g = step("a")
	}
	if _, ok := g["b"]; ok {
		t.Errorf("b, which stopped asking, still has a grant: %v", g)
	}
	if want := budget - prio; math.Abs(g["a"]-want) > 0.02*want {
		t.Errorf("a alone granted %.0f, want %.0f", g["a"], want)
	}
	if _, ok := newPushPace(&cluster.Role{}).grant("a", now, 0); ok {
		t.Error("a host without a share of an uplink granted something")
	}
}

func TestFromHost(t *testing.T) {
	h := &cluster.Host{Agent: "10.0.0.2:7000", Peer: "10.0.1.2:6881"}
	for remote, want := range map[string]bool{"10.0.0.2:5555": true, "10.0.1.2:1": true, "10.0.0.3:5555": false, "garbage": false} {
		if got := fromHost(remote, h); got != want {
			t.Errorf("fromHost(%q) = %v, want %v", remote, got, want)
		}
	}
	if !fromHost("10.0.0.3:1", &cluster.Host{Agent: "a.example:7000"}) {
		t.Error("a host named, not numbered, is not checked")
	}
}
