package origin

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/memnet"
)

// TestPacerOrder: turns go to the waiters in the order they came.
func TestPacerOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(1)
		first, ok := p.wait(t.Context(), time.Second, time.Minute, nil)
		if !ok {
			t.Fatal("no turn with all of them free")
		}
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		for i := range 4 {
			wg.Go(func() {
				done, ok := p.wait(t.Context(), 10*time.Second, time.Minute, nil)
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				if !ok {
					t.Errorf("waiter %d: no turn", i)
				}
				done()
			})
			synctest.Wait() // so that each is waiting before the next comes
		}
		first()
		wg.Wait()
		if fmt.Sprint(order) != "[0 1 2 3]" {
			t.Errorf("turns went in the order %v, want [0 1 2 3]", order)
		}
	})
}

// TestPacerBounds: a waiter goes ahead without a turn after maxWait, and a
// turn comes back by itself after maxHold, running onGive once.
func TestPacerBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(1)
		start := time.Now()
		var gives atomic.Int32
		_, ok := p.wait(t.Context(), time.Second, 300*time.Millisecond, func() { gives.Add(1) }) // never given back
		if !ok {
			t.Fatal("no turn with all of them free")
		}
		if _, ok := p.wait(t.Context(), 50*time.Millisecond, time.Minute, nil); ok {
			t.Fatal("a turn while the only one is held")
		}
		if took := time.Since(start); took != 50*time.Millisecond {
			t.Errorf("gave up after %v, want maxWait (50ms)", took)
		}
		done, ok := p.wait(t.Context(), 5*time.Second, time.Minute, func() { gives.Add(1) })
		if !ok {
			t.Fatal("the turn held past maxHold did not come back")
		}
		if took := time.Since(start); took != 300*time.Millisecond {
			t.Errorf("turn came back after %v, want maxHold (300ms)", took)
		}
		if n := gives.Load(); n != 1 {
			t.Errorf("onGive ran %d times for the turn given back by its hold limit, want 1", n)
		}
		// Giving a turn back twice frees it once (a second receive would block).
		gave := make(chan struct{})
		go func() { done(); done(); close(gave) }()
		select {
		case <-gave:
		case <-time.After(5 * time.Second):
			t.Fatal("giving a turn back twice blocks")
		}
		if n := gives.Load(); n != 2 {
			t.Errorf("onGive ran %d times in all, want 2", n)
		}
		if _, ok := p.wait(t.Context(), time.Second, time.Minute, nil); !ok {
			t.Fatal("no turn after it was given back")
		}
		if _, ok := p.wait(t.Context(), 10*time.Millisecond, time.Minute, nil); ok {
			t.Fatal("two turns out of one: a turn given back twice")
		}
	})
}

// TestPiecesPaced: single-range answers to swarm peers' origin fetches
// take a turn; those to other clients, full files and spare fetches do
// not.
func TestPiecesPaced(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(fileSize, 31)
	writeFile(t, dir, "f", data, t0)
	ts := start(t, Config{Dir: dir})
	m := ts.manifest(t, "/f")
	turns := func() int64 { return ts.metric(t, `stampede_origin_paced_total{outcome="turn"}`) }
	for i := range 3 {
		if _, p := ts.pieceGet(t, m, data, i, "", contract.ReasonHeader, "origin:no-peer-has-it"); p != i {
			t.Fatalf("piece %d: got %d", i, p)
		}
	}
	if n := turns(); n != 3 {
		t.Errorf("%d paced answers after 3 piece requests of a stampede client, want 3", n)
	}
	ts.pieceGet(t, m, data, 3, "")                                        // curl asking for a range
	ts.pieceGet(t, m, data, 4, "", contract.ReasonHeader, "piece")        // a download without the swarm
	ts.pieceGet(t, m, data, 5, "", contract.ReasonHeader, "origin:spare") // a spare fetch
	if res, _ := ts.do(t, "GET", "/f", contract.ReasonHeader, "stream"); res.StatusCode != 200 {
		t.Fatalf("full GET: %s", res.Status)
	}
	if res, _ := ts.do(t, "GET", "/f", contract.ReasonHeader, "stream", "Range", "bytes=1000-"); res.StatusCode != 206 {
		t.Fatalf("resumed stream: %s", res.Status)
	}
	if n := turns(); n != 3 {
		t.Errorf("%d paced answers: a range without %s, a download without the swarm, a spare fetch, a full file or a resumed stream took a turn", n, contract.ReasonHeader)
	}
}

// TestPacerBacklog: the backlog is 0 while a turn is free, and otherwise
// the waiters ahead, cap(turns) at a time, each batch the smoothed hold.
func TestPacerBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(2)
		if d := p.backlog(); d != 0 {
			t.Errorf("backlog %v with every turn free, want 0", d)
		}
		one := newPacer(1)
		done, _ := one.wait(t.Context(), time.Second, time.Minute, nil)
		if d := one.backlog(); d != paceMaxHold {
			t.Errorf("backlog %v with the only turn held and none given back yet, want paceMaxHold (%v)", d, paceMaxHold)
		}
		done()
		for range 2 {
			done, _ := p.wait(t.Context(), time.Second, time.Minute, nil)
			time.Sleep(100 * time.Millisecond)
			done()
		}
		hold := p.hold
		if hold != 100*time.Millisecond {
			t.Fatalf("smoothed hold %v after two turns held 100 ms", hold)
		}
		a, _ := p.wait(t.Context(), time.Second, time.Minute, nil)
		if d := p.backlog(); d != 0 {
			t.Errorf("backlog %v with one turn free, want 0", d)
		}
		b, _ := p.wait(t.Context(), time.Second, time.Minute, nil)
		if d := p.backlog(); d != hold {
			t.Errorf("backlog %v with both turns held and nobody waiting, want one hold (%v)", d, hold)
		}
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				if done, ok := p.wait(t.Context(), 10*time.Second, time.Minute, nil); ok {
					done()
				}
			})
		}
		synctest.Wait()
		p.mu.Lock()
		w := p.waiting
		p.mu.Unlock()
		if w != 5 {
			t.Fatalf("%d waiters, want 5", w)
		}
		if d := p.backlog(); d != 3*hold {
			t.Errorf("backlog %v with 5 waiting for 2 turns, want 3 holds (%v)", d, 3*hold)
		}
		a()
		b()
		wg.Wait()
	})
}

// TestPieceQueueFull: an origin fetch that would wait more than
// paceMaxQueue for its turn is answered 503 at once, with the wait as its
// Retry-After; other range requests are not paced and still get their
// piece; once the queue is short again the fetch is answered.
func TestPieceQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		data := randomBytes(fileSize, 37)
		writeFile(t, dir, "f", data, t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir})
		m := ts.manifest(t, "/f")
		var held []func()
		for range paceSlots {
			done, ok := ts.pacer.wait(t.Context(), time.Second, time.Minute, nil)
			if !ok {
				t.Fatal("no turn free")
			}
			held = append(held, done)
		}
		ts.pacer.mu.Lock()
		ts.pacer.hold = 2500 * time.Millisecond // each batch of turns takes 2.5 s
		ts.pacer.mu.Unlock()

		asked := time.Now()
		res, p := ts.pieceGet(t, m, data, 1, "", contract.ReasonHeader, "origin:no-peer-has-it")
		if res.StatusCode != http.StatusServiceUnavailable || p != -1 {
			t.Fatalf("origin fetch behind 2.5 s of answers: %s, want 503", res.Status)
		}
		if took := time.Since(asked); took != 0 {
			t.Errorf("the 503 took %v, want no time: it waited for a turn", took)
		}
		if ra := res.Header.Get("Retry-After"); ra != "3" {
			t.Errorf("Retry-After %q, want 3 (2.5 s rounded up)", ra)
		}
		if n := ts.metric(t, `stampede_origin_paced_total{outcome="queue_full"}`); n != 1 {
			t.Errorf("queue_full counted %d times, want 1", n)
		}
		if _, p := ts.pieceGet(t, m, data, 2, ""); p != 2 {
			t.Errorf("a range request without %s: got piece %d, want 2 (not paced)", contract.ReasonHeader, p)
		}
		for _, done := range held {
			done()
		}
		if _, p := ts.pieceGet(t, m, data, 1, "", contract.ReasonHeader, "origin:no-peer-has-it"); p != 1 {
			t.Errorf("origin fetch with every turn free: got piece %d, want 1", p)
		}
	})
}

// TestPieceQueueFullUpstream: in upstream mode the header comes from the
// reverse proxy after the upstream answered, too late to become a clean
// 503, so a fetch behind a long queue still gets its piece (after
// paceMaxWait) rather than a connection cut short.
func TestPieceQueueFullUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		up := newMemUpstream(t, nw)
		data := randomBytes(fileSize, 41)
		up.set("/f", upstreamFile{data: data, etag: `"v1"`, modTime: t0})
		ts := startMem(t, nw, Config{Upstream: mustParse(t, up.URL)})
		m := ts.manifest(t, "/f")
		for range paceSlots {
			done, ok := ts.pacer.wait(t.Context(), time.Second, time.Minute, nil)
			if !ok {
				t.Fatal("no turn free")
			}
			defer done()
		}
		ts.pacer.mu.Lock()
		ts.pacer.hold = 2500 * time.Millisecond
		ts.pacer.mu.Unlock()
		asked := time.Now()
		if _, p := ts.pieceGet(t, m, data, 1, "", contract.ReasonHeader, "origin:no-peer-has-it"); p != 1 {
			t.Errorf("upstream mode, origin fetch behind 2.5 s of answers: got piece %d, want 1", p)
		}
		if took := time.Since(asked); took != paceMaxWait {
			t.Errorf("the piece took %v, want paceMaxWait (%v) of waiting for a turn", took, paceMaxWait)
		}
		if n := ts.metric(t, `stampede_origin_paced_total{outcome="queue_full"}`); n != 0 {
			t.Errorf("queue_full counted %d times in upstream mode, want 0", n)
		}
	})
}
