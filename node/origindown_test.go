package node_test

import (
	"context"
	"errors"
	"net"
	"slices"
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

// TestOriginComesBack: a crowd of 50 loses its origin (connections
// refused) a quarter of the way in, and gets it back 40 s later. While it
// is dead each peer tries it at most once a second from 10 s on (tracker
// announces included); then and when it is back, the peers do not come
// in step: their backoffs are drawn at random. Everyone finishes. The
// crowd's tracker asks (repairs, all due at once since all stalled at
// once) used to come in step every 5 s, 45 peers within 10 ms, and one
// of those waves was the origin's welcome back.
func TestOriginComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			size  = 2 * MiB
			peers = 50
			down  = 40 * time.Second
		)
		ctx := testContext(t)
		nw := memNetwork{memnet.New()}
		var (
			once           sync.Once
			mu             sync.Mutex
			diedAt, backAt time.Time
			dials          = make([][]time.Time, peers) // to the origin, from its death on
			o              *testOrigin
		)
		o = startOrigin(t, originConfig{size: size, seed: 37, rate: 1 * MiB, net: nw,
			onPiece: func(served int) {
				if served >= size/(16*KiB)/4 {
					once.Do(func() {
						mu.Lock()
						diedAt = time.Now()
						mu.Unlock()
						go func() {
							o.kill()
							time.Sleep(down)
							mu.Lock()
							backAt = time.Now()
							mu.Unlock()
							o.restart()
						}()
					})
				}
			}})
		originAddr := o.ln.Addr().String()
		link := memnet.HostConfig{Up: 2 * MiB, Down: 8 * MiB, Latency: 5 * time.Millisecond}
		results := runSwarm(ctx, t, o, nw, peers, func(i int) peerConfig {
			return peerConfig{link: link, wrapDial: func(dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
				return func(ctx context.Context, addr string) (net.Conn, error) {
					mu.Lock()
					if addr == originAddr && !diedAt.IsZero() {
						dials[i] = append(dials[i], time.Now())
					}
					mu.Unlock()
					return dial(ctx, addr)
				}
			}}
		})
		checkAll(t, o, results)
		logPeers(t, results)
		mu.Lock()
		defer mu.Unlock()
		if backAt.IsZero() {
			t.Fatal("the origin never died and came back")
		}
		// Dead: from 10 s after its death to its return, at most one a
		// second over any 5 s (an origin probe and a tracker announce
		// may come in the same second).
		const window = 5 * time.Second
		worst, worstPeer := 0, -1
		for i, ds := range dials {
			var late []time.Time
			for _, d := range ds {
				if d.Sub(diedAt) >= 10*time.Second && d.Before(backAt) {
					late = append(late, d)
				}
			}
			for k := range late {
				n := 0
				for _, d := range late[k:] {
					if d.Sub(late[k]) < window {
						n++
					}
				}
				if n > worst {
					worst, worstPeer = n, i
				}
			}
		}
		t.Logf("dead origin: at most %d connections in %v from one peer (peer %d), from 10 s after it died", worst, window, worstPeer)
		if worst > int(window/time.Second) {
			t.Errorf("peer %d opened %d connections to the dead origin in %v, 10 s or more after it died: want at most one a second", worstPeer, worst, window)
		}
		// In step: from 20 s after its death (all found it dead at once,
		// and a few random draws spread them) to 1 s after its return,
		// how many peers came within 250 ms? In step, a crowd that
		// stalled at once would also come back at once.
		type contact struct {
			at   time.Time
			peer int
		}
		var cs []contact
		for i, ds := range dials {
			for _, d := range ds {
				if d.Sub(diedAt) >= 20*time.Second && d.Before(backAt.Add(time.Second)) {
					cs = append(cs, contact{d, i})
				}
			}
		}
		slices.SortFunc(cs, func(a, b contact) int { return a.at.Compare(b.at) })
		most, mostAt := 0, time.Duration(0)
		for k := range cs {
			who := map[int]bool{}
			for _, c := range cs[k:] {
				if c.at.Sub(cs[k].at) >= 250*time.Millisecond {
					break
				}
				who[c.peer] = true
			}
			if len(who) > most {
				most, mostAt = len(who), cs[k].at.Sub(diedAt)
			}
		}
		t.Logf("at most %d peers came to the origin within 250 ms (%v after it died; it was back %v after)", most, mostAt.Round(time.Millisecond), backAt.Sub(diedAt).Round(time.Millisecond))
		if most > peers/3 {
			t.Errorf("%d of %d peers came to the origin within 250 ms, %v after it died (back after %v): a thundering herd (want at most %d)",
				most, peers, mostAt.Round(time.Millisecond), backAt.Sub(diedAt).Round(time.Millisecond), peers/3)
		}
	})
}
