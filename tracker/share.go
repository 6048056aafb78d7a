package tracker

import "net/netip"

// Swarm slots: who may push out whose swarm past Limits.MaxSwarms.
//
// Every swarm is remembered with its maker: the source (source.go) of the
// announce that made it. A source that made n of the swarms kept, making
// one more when MaxSwarms are kept, pushes out:
//
//  1. a swarm of the source that made the most, if that source made
//     more than n+1 (more than the newcomer's will have with this one):
//     its lone swarm idle longest, or, if none is lone, its swarm idle
//     longest (of either, when two made as many);
//  2. else, the lone swarm idle longest among those of sources that made
//     more than n, and its own;
//  3. else nothing: the new swarm is not kept.
//
// Sources thus share the slots, the one most over its share losing first,
// as hosts share a peer's neighbour slots (crowding, swarm/peers.go). A
// few addresses that announce together to random roots, making swarms
// that are never lone and keeping them alive under the rate limit, cannot
// hold every slot: each new swarm of another source takes one of theirs
// back. A live swarm (peers of two sources or more) whose source made
// only it is never pushed out, nor one whose source made no more than the
// newcomer's will have, and no source pushes out its own live swarms, so
// holding slots takes addresses. Lone swarms (no two sources trading)
// cost least to lose: a source may replace its own, and take those of a
// source that made more than it. One that holds many cannot take another's
// new swarm, lone until its second peer comes. What this cannot stop is an
// attacker with as many sources as there are slots (an IPv6 user has many
// /64s): each holds one, and a new swarm of a source that made none is not
// kept.
//
// The host's own addresses, 127.0.0.1 and ::1, exempt from the bounds on a
// source because many peers share them, are one maker here: the slots are
// not about how many peers an address has but how many swarms one party
// holds, and the host is one party. Its swarms are pushed out when it
// made the most, like anyone's.

// maker returns who a swarm made by an announce from ip counts as made by:
// its source, or, for the host's own 127.0.0.1 and ::1, hostMaker.
func maker(ip netip.Addr) netip.Prefix {
	if src, ok := Source(ip); ok {
		return src
	}
	return hostMaker
}

// hostMaker is the maker of the swarms made from 127.0.0.1 and ::1.
var hostMaker = netip.Prefix{}

// makers counts the swarms kept that each source made, and knows the most
// any made. The zero value is empty.
type makers struct {
	made  map[netip.Prefix]int
	makes []int // makes[k]: makers that made k swarms, for k > 0
	most  int
}

// count adds (d 1) or takes off (d -1) a swarm made by src.
func (m *makers) count(src netip.Prefix, d int) {
	if m.made == nil {
		m.made = make(map[netip.Prefix]int)
	}
	k := m.made[src]
	if k > 0 {
		m.makes[k]--
	}
	k += d
	if k > 0 {
		m.made[src] = k
		for len(m.makes) <= k {
			m.makes = append(m.makes, 0)
		}
		m.makes[k]++
	} else {
		delete(m.made, src)
	}
	m.most = max(m.most, k)
	for m.most > 0 && m.makes[m.most] == 0 {
		m.most--
	}
}
