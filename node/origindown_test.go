package node_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/node"
)

// TestOriginDies: the origin of a lone swarm download dies (its
// connections refused) a quarter of the way in. The download backs off
// for the whole origin, at most one connection a second from 10 s on
// (tracker announces included), and
// gives up after node.DefaultOriginPatience with the origin's network
// error (exit 4 in stampede get). It used to try about 1,160 times a
// second for the 3 minutes of the stall timeout, and end with an error
// that named no network failure (exit 1).
func TestOriginDies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size = 4 * MiB
		ctx := testContext(t)
		nw := memNetwork{memnet.New()}
		var (
			once   sync.Once
			mu     sync.Mutex
			diedAt time.Time
			dials  []time.Time // to the origin, after it died
			o      *testOrigin
		)
		o = startOrigin(t, originConfig{size: size, seed: 36, rate: 1 * MiB, net: nw,
			onPiece: func(served int) {
				if served >= size/(16*KiB)/4 {
					once.Do(func() {
						mu.Lock()
						diedAt = time.Now()
						mu.Unlock()
						go o.kill()
					})
				}
			}})
		originAddr := o.ln.Addr().String()
		pc := peerConfig{wrapDial: func(dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
			return func(ctx context.Context, addr string) (net.Conn, error) {
				mu.Lock()
				if addr == originAddr && !diedAt.IsZero() {
					dials = append(dials, time.Now())
				}
				mu.Unlock()
				return dial(ctx, addr)
			}
		}}
		r := runPeer(ctx, t, o, nw, 0, pc)
		end := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if diedAt.IsZero() {
			t.Fatal("the origin never died")
		}
		perSecond := make([]int, int(end.Sub(diedAt)/time.Second)+1)
		for _, d := range dials {
			perSecond[int(d.Sub(diedAt)/time.Second)]++
		}
		t.Logf("gave up %v after the origin died: %v; connections to it a second: %v", end.Sub(diedAt), r.err, perSecond)
		var nerr net.Error
		if !errors.Is(r.err, node.ErrStalled) || !errors.As(r.err, &nerr) {
			t.Errorf("the download ended with %v, want node.ErrStalled with the origin's network error", r.err)
		}
		if took := end.Sub(diedAt); took < node.DefaultOriginPatience || took > node.DefaultOriginPatience+10*time.Second {
			t.Errorf("gave up %v after the origin died, want its patience (%v) and a little more", took, node.DefaultOriginPatience)
		}
		// The tracker is the origin's too: its announces count here.
		late := 0
		for _, n := range perSecond[min(10, len(perSecond)):] {
			late += n
		}
		if secs := len(perSecond) - 10; secs > 0 && late > secs {
			t.Errorf("%d connections to the dead origin in the %d s from 10 s after it died, want at most one a second", late, secs)
		}
	})
}
