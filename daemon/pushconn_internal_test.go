package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
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

// TestSteer: a datacenter representative's piece request is steered to
// its share of the work, among the pieces its scheduler offered; a
// request with no candidates, or already in its share, goes as it was.
func TestSteer(t *testing.T) {
	data := make([]byte, 8*16<<10+100) // 9 pieces of 16 KiB
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "f")
	if err != nil {
		t.Fatal(err)
	}
	if m.NumPieces() != 9 {
		t.Fatalf("%d pieces", m.NumPieces())
	}
	s := &workShare{cluster.NewWork([]string{"a", "b", "c"}, m.NumPieces()), m} // a: 0-2, b: 3-5, c: 6-8
	req := func(piece int, cands string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/f", nil)
		off, n := m.PieceOffset(piece), m.PieceLen(piece)
		r.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
		if cands != "" {
			r.Header.Set(contract.CandidatesHeader, cands)
		}
		return r
	}
	for _, tc := range []struct {
		rep, cands     string
		asked, steered int
		rng, offer     string
	}{
		{"a", "1,4,7", 4, 1, "bytes=16384-32767", "1"},
		{"a", "1-2", 2, -1, "bytes=32768-49151", "1-2"},
		{"b", "0,6-8", 1, 8, fmt.Sprintf("bytes=%d-%d", 8*16<<10, len(data)-1), "6-8"},
		{"a", "", 4, -1, "bytes=65536-81919", ""},
		{"z", "1", 4, -1, "bytes=65536-81919", "1"},
	} {
		r, steered := s.steer(tc.rep, req(tc.asked, tc.cands))
		if steered != tc.steered || r.Header.Get("Range") != tc.rng || r.Header.Get(contract.CandidatesHeader) != tc.offer {
			t.Errorf("%s asks %d offering %q: steered %d, Range %q, candidates %q; want %d, %q, %q", tc.rep, tc.asked, tc.cands,
				steered, r.Header.Get("Range"), r.Header.Get(contract.CandidatesHeader), tc.steered, tc.rng, tc.offer)
		}
	}
}
