package codns

import (
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Peer health, passive: a peer that fails this many queries in a row
// (times out, errs, or answers neither NOERROR nor NXDOMAIN) is asked
// last for peerBackoff, then tried again as any other.
const (
	peerFailures = 3
	peerBackoff  = 10 * time.Second
)

// Peers orders the peer nodes for a name and remembers which have been
// failing. It is pure: the time is passed in, and it is not safe for
// concurrent use.
type Peers struct {
	peers []*peerState
}

type peerState struct {
	addr      netip.AddrPort
	fails     int
	downUntil time.Time
}

// NewPeers returns the set of addrs, without duplicates.
func NewPeers(addrs []netip.AddrPort) *Peers {
	p := new(Peers)
	for _, a := range addrs {
		if !slices.ContainsFunc(p.peers, func(s *peerState) bool { return s.addr == a }) {
			p.peers = append(p.peers, &peerState{addr: a})
		}
	}
	return p
}

// Len returns how many peers there are.
func (p *Peers) Len() int { return len(p.peers) }

// Order returns the peers in the order a lookup of name asks them: by
// highest random weight (HRW) of the name and the peer, so that every
// node asks the same peer first for the same name and that peer's cache
// holds it, except that peers failing at now come last.
func (p *Peers) Order(name string, now time.Time) []netip.AddrPort {
	type scored struct {
		addr netip.AddrPort
		down bool
		w    uint64
	}
	name = strings.ToLower(name)
	s := make([]scored, len(p.peers))
	for i, ps := range p.peers {
		s[i] = scored{ps.addr, now.Before(ps.downUntil), hrw(ps.addr, name)}
	}
	slices.SortFunc(s, func(a, b scored) int {
		switch {
		case a.down != b.down:
			if a.down {
				return 1
			}
			return -1
		case a.w > b.w:
			return -1
		case a.w < b.w:
			return 1
		}
		return a.addr.Compare(b.addr)
	})
	out := make([]netip.AddrPort, len(s))
	for i, x := range s {
		out[i] = x.addr
	}
	return out
}

// Result records how a query to addr went at now.
func (p *Peers) Result(addr netip.AddrPort, ok bool, now time.Time) {
	for _, ps := range p.peers {
		if ps.addr != addr {
			continue
		}
		if ok {
			ps.fails, ps.downUntil = 0, time.Time{}
			return
		}
		ps.fails++
		if ps.fails >= peerFailures {
			ps.downUntil = now.Add(peerBackoff)
		}
		return
	}
}

// hrw is the weight of peer a for name: FNV-1a of both, then mixed
// (splitmix64's finalizer) so that close inputs spread. Every node
// computes the same weights.
func hrw(a netip.AddrPort, name string) uint64 {
	h := fnv.New64a()
	b, _ := a.MarshalBinary()
	h.Write(b)
	h.Write([]byte{0})
	h.Write([]byte(name))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// down returns how many peers are failing at now.
func (p *Peers) down(now time.Time) int {
	n := 0
	for _, ps := range p.peers {
		if now.Before(ps.downUntil) {
			n++
		}
	}
	return n
}

// remove takes addr out of the set.
func (p *Peers) remove(addr netip.AddrPort) {
	p.peers = slices.DeleteFunc(p.peers, func(s *peerState) bool { return s.addr == addr })
}
