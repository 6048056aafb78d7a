package cdn

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"slices"
	"strings"
)

// Owners are chosen by rendezvous (highest random weight) hashing: every
// node scores every key with a hash of the pair, and the key's order is the
// nodes by descending score. Two nodes that see the same healthy set compute
// the same order with no coordination, and a node leaving moves only the
// keys it was first for (each to its own runner-up), which is why CoBlitz
// chose HRW over a ring of virtual nodes.
//
// Plain HRW lets a hot key pile every request onto one node. Bounded loads
// (Mirrokni, Thorup and Zadimoghaddam; HAProxy's hash-balance-factor) cap
// each node at Factor times the mean of the requests in flight: a request
// goes to the first node in the key's order that is under the cap, so the
// overflow of a hot chunk spills to its runner-up, then the next, and
// those become its replicas.

// DefaultLoadFactor is the bound on a node's share of the chunk requests in
// flight, as a multiple of the mean.
const DefaultLoadFactor = 1.25

// Ring is a set of nodes, named by their HOST:PORT.
type Ring struct {
	nodes []string // sorted, distinct
}

// NewRing returns the ring of nodes; the order and repeats of the list do
// not matter.
func NewRing(nodes []string) Ring {
	ns := slices.Clone(nodes)
	slices.Sort(ns)
	return Ring{nodes: slices.Compact(ns)}
}

// Nodes returns the ring's nodes, sorted.
func (r Ring) Nodes() []string { return slices.Clone(r.nodes) }

// Len is the number of nodes.
func (r Ring) Len() int { return len(r.nodes) }

// Has reports whether node is on the ring.
func (r Ring) Has(node string) bool {
	_, ok := slices.BinarySearch(r.nodes, node)
	return ok
}

// score is node's weight for key. SHA-256 rather than a fast hash: the
// scores must be the same on every node and every build, and a few
// thousand chunks a second cost nothing next to moving them.
func score(node, key string) uint64 {
	h := sha256.New()
	h.Write([]byte(node))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

// Order returns the nodes by descending score for key: the owner first,
// then its runners-up. Ties (of 64-bit scores) fall to the name.
func (r Ring) Order(key string) []string {
	type scored struct {
		node  string
		score uint64
	}
	s := make([]scored, len(r.nodes))
	for i, n := range r.nodes {
		s[i] = scored{n, score(n, key)}
	}
	slices.SortFunc(s, func(a, b scored) int {
		if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		return strings.Compare(a.node, b.node)
	})
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.node
	}
	return out
}

// Owner is the first node of key's order ("" on an empty ring).
func (r Ring) Owner(key string) string {
	var best string
	var bestScore uint64
	for _, n := range r.nodes {
		if s := score(n, key); best == "" || s > bestScore || (s == bestScore && n < best) {
			best, bestScore = n, s
		}
	}
	return best
}

// Balancer counts the chunk requests in flight to each node and places
// new ones by bounded-load HRW. It is a plain value with no lock: its
// owner serialises the calls.
type Balancer struct {
	// Factor is the cap on a node's load as a multiple of the mean
	// (default DefaultLoadFactor; below 1 is taken as 1).
	Factor float64

	load  map[string]int
	total int
}

// Cap is the most requests a node may have in flight, this one included,
// when total are in flight before it among n nodes: ceil(Factor × (total+1)/n).
func (b *Balancer) Cap(total, n int) int {
	f := b.Factor
	if f == 0 {
		f = DefaultLoadFactor
	}
	f = max(f, 1)
	if n <= 0 {
		return 0
	}
	return int(math.Ceil(f * float64(total+1) / float64(n)))
}

// Assign places one request along order (a key's HRW order over the
// healthy nodes): the first node whose load is under the cap, which
// always exists since the loads sum to less than n caps. It counts the
// request against that node until Done. An empty order gives "".
func (b *Balancer) Assign(order []string) string {
	if len(order) == 0 {
		return ""
	}
	if b.load == nil {
		b.load = make(map[string]int)
	}
	pick := b.firstUnder(order, order)
	b.load[pick]++
	b.total++
	return pick
}

// firstUnder is the first node of cand under the cap of a request among
// order's nodes, else cand's first.
func (b *Balancer) firstUnder(order, cand []string) string {
	limit := b.Cap(b.total, len(order))
	for _, n := range cand {
		if b.load[n] < limit {
			return n
		}
	}
	return cand[0]
}

// Skip moves a request counted against from (which failed it, or was
// too slow) to the next node of order after from that is under the cap,
// and returns that node; "" when from was the last.
func (b *Balancer) Skip(order []string, from string) string {
	i := slices.Index(order, from)
	if i < 0 || i == len(order)-1 {
		return ""
	}
	b.Done(from)
	if b.load == nil {
		b.load = make(map[string]int)
	}
	pick := b.firstUnder(order, order[i+1:])
	b.load[pick]++
	b.total++
	return pick
}

// Done ends a request counted against node.
func (b *Balancer) Done(node string) {
	if b.load[node] > 0 {
		b.load[node]--
		b.total--
	}
}

// Load is node's requests in flight.
func (b *Balancer) Load(node string) int { return b.load[node] }

// Total is the requests in flight to all nodes.
func (b *Balancer) Total() int { return b.total }
