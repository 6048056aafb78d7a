package tracker

import (
	"encoding/binary"
	"math"
	"net/netip"
	"sync"
	"time"
)

// Sources: what one address may do.
//
// Ids cost nothing, addresses do: an attacker holds one address or a few
// (an IPv6 user, a /64 of them), and may announce from them any number
// of random ids. So the evidence a swarm's size rests on is counted per
// source, an IPv4 address or an IPv6 /64:
//
//   - announces are rate limited per source, in the HTTP layer (limiter);
//   - a swarm's table holds at most Limits.MaxPeersPerAddress peers of
//     one source: a newcomer from a source that has as many is answered
//     but not added (peers behind a NAT, port 0 or not, count up to it);
//   - the estimator counts, for a source, not the ids but at most that
//     many of them (CountingID), so that one source adds at most that
//     many to swarm_size however many ids it announces.
//
// The host's own loopback addresses, 127.0.0.1 and ::1, are exempt: tests
// and local swarms run many peers on one address there, and an attacker
// there is past any tracker's reach anyway. The rest of 127.0.0.0/8 is
// not, so that a test on one machine can play other sources from
// 127.0.0.2 on.

// Source returns the source an announce from ip is counted under: ip as
// a /32, or its /64 for IPv6; ok is false for 127.0.0.1 and ::1, which
// are exempt.
func Source(ip netip.Addr) (src netip.Prefix, ok bool) {
	ip = ip.Unmap()
	if !ip.IsValid() || ip == exempt4 || ip == netip.IPv6Loopback() {
		return netip.Prefix{}, false
	}
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.WithZone("").Prefix(bits)
	return p, true
}

// CountingID returns what the swarm-size estimator counts for the peer id
// announcing from ip, with at most perAddress peers counted per source:
// the id itself from loopback; otherwise one of perAddress ids of the
// source, picked by the id, so that ids from one source count as at most
// perAddress peers. (Two honest peers behind one address may share one,
// with odds 1/perAddress: the estimator then counts one. It counts only
// swarms larger than their table, where that is within its error.) Both
// stores count these, so they count alike.
func CountingID(id PeerID, ip netip.Addr, perAddress int) PeerID {
	src, ok := Source(ip)
	if !ok || perAddress <= 0 {
		return id
	}
	var c PeerID
	c[0] = 0xfe
	c[1] = byte(binary.BigEndian.Uint64(id[8:]) % uint64(min(perAddress, 256)))
	a := src.Addr().AsSlice()
	c[2] = byte(len(a))
	copy(c[4:], a[:min(len(a), 8)])
	return c
}

// Rate limits per source, in the HTTP layer: a token bucket per source,
// in a table of at most maxSources, the least recently used going first
// when a new source comes to a full table. An attacker with more sources
// than that cycles them through the table, and so does anyone else: a
// source pushed out comes back with a full bucket, never with less, so
// memory stays bounded and no honest peer is limited harder for it.
const maxSources = 1 << 16

// limiter is the per-source token buckets. It reads no clock.
type limiter struct {
	rate  float64 // tokens a second
	burst float64

	mu      sync.Mutex // guards the following
	buckets map[netip.Prefix]*bucket
	lru     bucket // sentinel: most recently used first
}

type bucket struct {
	src        netip.Prefix
	tokens     float64
	at         time.Time
	prev, next *bucket
}

func newLimiter(rate float64, burst int) *limiter {
	l := &limiter{rate: rate, burst: float64(max(burst, 1)), buckets: make(map[netip.Prefix]*bucket)}
	l.lru.prev, l.lru.next = &l.lru, &l.lru
	return l
}

// allow takes a token from src's bucket at now, or says how long until
// there is one.
func (l *limiter) allow(src netip.Prefix, now time.Time) (ok bool, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[src]
	if b == nil {
		if len(l.buckets) >= maxSources {
			old := l.lru.prev
			l.unlinkLocked(old)
			delete(l.buckets, old.src)
		}
		b = &bucket{src: src, tokens: l.burst, at: now}
		l.buckets[src] = b
	} else {
		l.unlinkLocked(b)
		if d := now.Sub(b.at); d > 0 {
			b.tokens = min(l.burst, b.tokens+d.Seconds()*l.rate)
			b.at = now
		}
	}
	b.prev, b.next = &l.lru, l.lru.next
	l.lru.next.prev = b
	l.lru.next = b
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration(math.Ceil((1 - b.tokens) / l.rate * float64(time.Second)))
}

func (l *limiter) unlinkLocked(b *bucket) {
	b.prev.next, b.next.prev = b.next, b.prev
}

// len returns the sources in the table.
func (l *limiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// exempt4 is the IPv4 address exempt from the bounds on a source.
var exempt4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})
