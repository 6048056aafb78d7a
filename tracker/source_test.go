package tracker

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
)

// TestRateLimitPerAddress: past its burst, a source is answered 429 with
// a Retry-After until its bucket refills; another source, and loopback,
// are not held back; an IPv6 /64 is one source.
func TestRateLimitPerAddress(t *testing.T) {
	h := newHarness(t, Config{AnnounceRate: 2, AnnounceBurst: 5})
	send := func(remote string, i int) int {
		p := peer(i)
		return h.serve("GET", query(testRoot, p, EventStarted, 1000, 0), remote).Code
	}
	for i := range 5 {
		if code := send("192.0.2.1:4000", i); code != http.StatusOK {
			t.Fatalf("announce %d within the burst: %d", i, code)
		}
	}
	rec := h.serve("GET", query(testRoot, peer(5), EventStarted, 1000, 0), "192.0.2.1:4001")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("past the burst: %d, Retry-After %q; want 429, 1", rec.Code, rec.Header().Get("Retry-After"))
	}
	// Malformed requests count too, and are refused before they are read.
	if code := h.serve("GET", "junk", "192.0.2.1:4000").Code; code != http.StatusTooManyRequests {
		t.Errorf("a malformed announce past the rate: %d, want 429", code)
	}
	if code := send("192.0.2.2:4000", 6); code != http.StatusOK {
		t.Errorf("another address: %d", code)
	}
	for i := range 50 {
		if code := send("127.0.0.1:4000", 100+i); code != http.StatusOK {
			t.Fatalf("loopback, announce %d: %d", i, code)
		}
	}
	// Half a second gives one announce back (two a second).
	h.clock.Advance(500 * time.Millisecond)
	if code := send("192.0.2.1:4000", 7); code != http.StatusOK {
		t.Errorf("after half a second: %d", code)
	}
	if code := send("192.0.2.1:4000", 8); code != http.StatusTooManyRequests {
		t.Errorf("the second after half a second: %d", code)
	}
	// A long wait fills the bucket, to its burst and no more.
	h.clock.Advance(time.Hour)
	for i := range 6 {
		want := http.StatusOK
		if i == 5 {
			want = http.StatusTooManyRequests
		}
		if code := send("192.0.2.1:4000", 10+i); code != want {
			t.Errorf("after an hour, announce %d: %d, want %d", i, code, want)
		}
	}
	// One /64: its addresses share a bucket.
	for i := range 6 {
		want := http.StatusOK
		if i == 5 {
			want = http.StatusTooManyRequests
		}
		if code := send(fmt.Sprintf("[2001:db8:1:2::%x]:4000", i+1), 20+i); code != want {
			t.Errorf("IPv6 /64, announce %d: %d, want %d", i, code, want)
		}
	}
	if code := send("[2001:db8:1:3::1]:4000", 30); code != http.StatusOK {
		t.Errorf("another /64: %d", code)
	}
	m := h.metrics()
	if m["stampede_tracker_announces_throttled_total"] != 5 {
		t.Errorf("throttled %d, want 5", m["stampede_tracker_announces_throttled_total"])
	}
}

// TestRetryAfterSaysWhen: Retry-After is the seconds until the source
// has an announce again, rounded up.
func TestRetryAfterSaysWhen(t *testing.T) {
	h := newHarness(t, Config{AnnounceRate: 0.1, AnnounceBurst: 1})
	h.serve("GET", query(testRoot, peer(1), EventStarted, 1000, 0), "192.0.2.1:4000")
	h.clock.Advance(2500 * time.Millisecond)
	rec := h.serve("GET", query(testRoot, peer(1), EventNone, 1000, 0), "192.0.2.1:4000")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "8" {
		t.Errorf("%d, Retry-After %q; want 429, 8", rec.Code, rec.Header().Get("Retry-After"))
	}
}

// TestDefaultRateLetsANATThrough: the defaults let 200 peers behind one
// address start at once, and announce once an interval ever after, with
// their events, never refused.
func TestDefaultRateLetsANATThrough(t *testing.T) {
	h := newHarness(t, Config{})
	const peers = 200
	refused := 0
	for round := range 10 {
		for i := range peers {
			event, left := EventNone, int64(1000)
			switch {
			case round == 0:
				event = EventStarted
			case round == 5 && i%2 == 0:
				event, left = EventCompleted, 0
			}
			p := peer(i)
			p.port = 0
			if round > 0 {
				h.clock.Advance(DefaultInterval / peers)
			}
			if code := h.serve("GET", query(testRoot, p, event, left, 0), "203.0.113.9:4000").Code; code != http.StatusOK {
				refused++
			}
		}
	}
	if refused > 0 {
		t.Errorf("%d announces of %d peers behind one address refused", refused, peers)
	}
}

// TestRateLimiterBounded: a table of sources never grows past
// maxSources, however many addresses announce.
func TestRateLimiterBounded(t *testing.T) {
	l := newLimiter(1, 1)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for i := range maxSources + 1000 {
		var a [16]byte
		a[0], a[1] = 0x20, 0x01
		a[4], a[5], a[6], a[7] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		src, _ := Source(netip.AddrFrom16(a))
		if ok, _ := l.allow(src, now); !ok {
			t.Fatalf("source %d: refused its first announce", i)
		}
	}
	if n := l.len(); n != maxSources {
		t.Errorf("%d sources kept, want %d", n, maxSources)
	}
}

// TestOnlyAdmitted: a tracker with OnlyAdmitted tracks the swarms
// admitted, and those its store has (another tracker sharing it admitted
// them); an announce to another is answered 403 and kept nowhere.
func TestOnlyAdmitted(t *testing.T) {
	h := newHarness(t, Config{OnlyAdmitted: true})
	if code := h.serve("GET", query(testRoot, peer(1), EventStarted, 1000, 0), "192.0.2.1:4000").Code; code != http.StatusForbidden {
		t.Errorf("announce before its file was admitted: %d, want 403", code)
	}
	h.tr.Admit(testRoot, testSize)
	h.tr.Admit(testRoot, testSize+1)
	h.announce(peer(1), EventStarted, 1000, 0)
	other := manifest.Hash{0x99}
	rec := h.serve("GET", query(other, peer(2), EventStarted, 1000, 0), "192.0.2.1:4000")
	if rec.Code != http.StatusForbidden {
		t.Errorf("announce to a swarm not admitted: %d %s", rec.Code, rec.Body)
	}
	if _, err := h.tr.Announce(AnnounceRequest{Root: other, Size: testSize, ID: peer(3).id, Left: 1}, peer(3).addr()); !errors.Is(err, ErrNotTracked) {
		t.Errorf("Announce to a swarm not admitted: %v", err)
	}
	m := h.metrics()
	if m["stampede_tracker_swarms"] != 1 || m["stampede_tracker_announces_untracked_total"] != 3 {
		t.Errorf("metrics %v", m)
	}
	// Another tracker on the same store, which admitted nothing, tracks
	// the swarm the first one keeps there.
	replica := New(Config{OnlyAdmitted: true, Store: h.tr.store, Now: h.clock.Now})
	if res, err := replica.Announce(AnnounceRequest{Root: testRoot, Size: testSize, ID: peer(4).id, Port: 7000, Left: 1}, peer(4).addr()); err != nil || res.SwarmSize != 2 {
		t.Errorf("the replica: %v, %v", res, err)
	}
	// Admissions are bounded.
	for i := range maxAdmitted + 10 {
		h.tr.Admit(manifest.Hash{byte(i), byte(i >> 8), byte(i >> 16)}, 1)
	}
	if n := h.tr.admitted.len(); n != maxAdmitted {
		t.Errorf("%d swarms admitted, want %d", n, maxAdmitted)
	}
}

// TestNeverDials: the tracker never connects to the addresses announces
// name, reachable or not, nor anywhere else: the peers it is told of are
// listening here, and find no one at the door.
func TestNeverDials(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port, _ := strconv.Atoi(ln.Addr().(*net.TCPAddr).AddrPort().String()[len("127.0.0.1:"):])
	h := newHarness(t, Config{})
	for i := range 20 {
		p := peer(i)
		p.ip = netip.MustParseAddr("127.0.0.1")
		p.port = uint16(port)
		for _, ev := range []Event{EventStarted, EventNone, EventCompleted, EventStopped} {
			h.serve("GET", query(testRoot, p, ev, 0, 50), netip.AddrPortFrom(p.ip, 5000).String())
			h.clock.Advance(time.Second)
		}
	}
	h.tr.Peers(testRoot, testSize, 50)
	h.metrics()
	// A connection the tracker made would be waiting to be accepted by
	// now: every call above has returned. None must be.
	ln.(*net.TCPListener).SetDeadline(time.Now())
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Fatalf("the tracker connected to an announced address, from %s", c.RemoteAddr())
	}
}

// TestSourceExempt: only the host's own 127.0.0.1 and ::1 are exempt;
// the rest of loopback counts as sources, as any address.
func TestSourceExempt(t *testing.T) {
	for ip, exempt := range map[string]bool{
		"127.0.0.1": true, "::1": true, "::ffff:127.0.0.1": true,
		"127.0.0.2": false, "127.1.2.3": false, "10.0.0.1": false, "2001:db8::1": false,
	} {
		if _, ok := Source(netip.MustParseAddr(ip)); ok == exempt {
			t.Errorf("%s: counted %v, want exempt %v", ip, ok, exempt)
		}
	}
}
