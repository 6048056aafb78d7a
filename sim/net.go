package sim

import (
	"container/heap"
	"math"
	"slices"
	"time"
)

// The network: a tree of sites. A host (the origin, a peer) is a leaf; a
// group (a rack, a datacenter) is an inner site whose hosts and groups sit
// behind its uplink. Each site reaches its parent over one link with a
// capacity each way and a one-way latency; the root, the core, has no
// limit. Traffic between two hosts climbs from the sender to the lowest
// site both sit under and comes down to the receiver, crossing the up side
// of every link on the way up and the down side of every link on the way
// down: two hosts of one rack do not touch the rack's uplink.
//
// Transfers are fluid flows sharing the links max-min fairly, which is
// what TCP's congestion control converges to on a long transfer: each
// link's capacity is split equally among the flows it carries, except that
// a flow held below that share by another of its links leaves the rest to
// the others. The allocation is recomputed when a flow starts or ends.
// Control messages cost no capacity; they take the path's latency.

// Site is a host or a group of the network.
type Site struct {
	parent   *Site
	up, down *link // nil: uncapped that way
	lat      time.Duration
	depth    int
}

// link is one direction of a site's link to its parent.
type link struct {
	cap   float64 // bytes/s
	bytes float64 // what crossed it, counted as flows end
	flows []*flow
	// share is the link's fair share: what a flow bottlenecked here gets
	// (+Inf while the flows it carries are all held below its capacity
	// elsewhere).
	share float64
	// queued marks the link as waiting in the solver's work list.
	queued bool
}

// flow is one transfer of bytes from a host to another.
type flow struct {
	links []*link
	pos   []int // the flow's index in each link's flows
	rate  float64
	left  float64       // bytes still to send at at
	at    time.Duration // when left was last brought up to date
	end   time.Duration // when the last byte leaves, at the current rate
	hi    int           // index in the network's heap; -1 when not in it
	dirty bool          // in the solver's list of flows to re-rate
	over  bool          // stopped
	size  int64
	// done is called when the last byte has left the sender.
	done func(f *flow)
}

// sent is how many bytes of f have left the sender by now.
func (f *flow) sent(now time.Duration) float64 {
	return float64(f.size) - (f.left - f.rate*(now-f.at).Seconds())
}

// network holds the flows and shares the links among them.
type network struct {
	flows flowHeap
	work  []*link
	moved []*flow
	// Counters: solver passes, links recomputed, passes cut short.
	passes, relaxed, cut int64
}

// shareEps is the relative change of a link's fair share below which the
// solver does not pass the change on to the flows' other links. It keeps a
// change from rippling across a crowd's whole mesh for nothing: the shares
// are then within about that of the max-min allocation.
const shareEps = 1e-3

// maxRelax bounds the links recomputed in one pass, a guard against a
// slow convergence; passes cut short are counted (network.cut).
const maxRelax = 1 << 16

// path returns the links from host a to host b, and the one-way latency.
func path(a, b *Site) ([]*link, time.Duration) {
	var ups, downs []*link
	var lat time.Duration
	for a.depth > b.depth {
		ups, lat, a = appendLink(ups, a.up), lat+a.lat, a.parent
	}
	for b.depth > a.depth {
		downs, lat, b = appendLink(downs, b.down), lat+b.lat, b.parent
	}
	for a != b {
		ups, lat, a = appendLink(ups, a.up), lat+a.lat, a.parent
		downs, lat, b = appendLink(downs, b.down), lat+b.lat, b.parent
	}
	slices.Reverse(downs)
	return append(ups, downs...), lat
}

func appendLink(ls []*link, l *link) []*link {
	if l == nil {
		return ls
	}
	return append(ls, l)
}

// latency is the one-way latency from a to b.
func latency(a, b *Site) time.Duration {
	var lat time.Duration
	for a.depth > b.depth {
		lat, a = lat+a.lat, a.parent
	}
	for b.depth > a.depth {
		lat, b = lat+b.lat, b.parent
	}
	for a != b {
		lat, a = lat+a.lat, a.parent
		lat, b = lat+b.lat, b.parent
	}
	return lat
}

// queued is the delay the bottleneck queues of the path from a to b add
// at now: buf bytes at the rate of each link of it that is saturated (one
// whose fair share is what a flow gets there), or what the flows it holds
// back have still to send if that is less. TCP keeps the buffer in front
// of a saturated link full, and whatever crosses the link waits behind
// it; an idle link queues nothing, and a lone piece of 16 KiB cannot fill
// a buffer of 80 (a flow's own bytes wait behind none of it: its last one
// leaves its bottleneck when the flow ends).
func queued(a, b *Site, buf float64, now time.Duration) time.Duration {
	if buf <= 0 {
		return 0
	}
	var d float64
	add := func(l *link) {
		if l != nil && !math.IsInf(l.share, 1) {
			d += l.backlog(buf, now) / l.cap
		}
	}
	for a.depth > b.depth {
		add(a.up)
		a = a.parent
	}
	for b.depth > a.depth {
		add(b.down)
		b = b.parent
	}
	for a != b {
		add(a.up)
		add(b.down)
		a, b = a.parent, b.parent
	}
	return time.Duration(d * float64(time.Second))
}

// backlog is what the flows l holds back to its share have still to send
// at now, up to buf: the most its queue can hold.
func (l *link) backlog(buf float64, now time.Duration) float64 {
	var b float64
	for _, f := range l.flows {
		if f.rate < l.share*(1-shareEps) {
			continue // held back elsewhere: it queues there
		}
		if b += f.left - f.rate*(now-f.at).Seconds(); b >= buf {
			return buf
		}
	}
	return max(b, 0)
}

// start begins a flow of size bytes from a to b at now, over the path's
// links and any extra ones (a push's budgets); done is called when its
// last byte has left a (the receiver has it a path latency later).
func (n *network) start(a, b *Site, size int64, now time.Duration, done func(*flow), extra ...*link) *flow {
	links, _ := path(a, b)
	links = append(links, extra...)
	f := &flow{links: links, pos: make([]int, len(links)), left: float64(size), size: size, at: now, hi: -1, done: done}
	for i, l := range links {
		f.pos[i] = len(l.flows)
		l.flows = append(l.flows, f)
		n.enqueue(l)
	}
	f.dirty = true
	n.moved = append(n.moved, f)
	n.solve(now)
	return f
}

// stop ends f at now, finished or not.
func (n *network) stop(f *flow, now time.Duration) {
	if f.hi >= 0 {
		heap.Remove(&n.flows, f.hi)
	}
	f.left -= f.rate * (now - f.at).Seconds()
	f.at = now
	sent := float64(f.size) - max(f.left, 0)
	for i, l := range f.links {
		l.bytes += sent
		k := f.pos[i]
		last := l.flows[len(l.flows)-1]
		l.flows[k] = last
		for j, ll := range last.links {
			if ll == l {
				last.pos[j] = k
				break
			}
		}
		l.flows[len(l.flows)-1] = nil
		l.flows = l.flows[:len(l.flows)-1]
		n.enqueue(l)
	}
	f.over = true
	n.solve(now)
}

// setCap changes l's capacity at now (+Inf: uncapped) and shares it again.
func (n *network) setCap(l *link, c float64, now time.Duration) {
	l.cap = c
	n.enqueue(l)
	n.solve(now)
}

// next is the flow that ends first, or nil.
func (n *network) next() *flow {
	if len(n.flows) == 0 {
		return nil
	}
	return n.flows[0]
}

func (n *network) enqueue(l *link) {
	if !l.queued {
		l.queued = true
		n.work = append(n.work, l)
	}
}

// solve brings the fair shares of the queued links, and of the links their
// changes reach, to the max-min allocation (within shareEps), then re-rates
// the flows whose rate moved. Each link's share is the water level that
// fills its capacity given what every flow it carries may have elsewhere
// (the least share among the flow's other links); a link whose share moves
// queues the other links of the flows whose rate that moves. This is the
// classic distributed computation of max-min fairness, run only where
// something changed: a flow starting or ending touches its own links, and
// the change spreads only as far as rates actually move.
func (n *network) solve(now time.Duration) {
	n.passes++
	relaxed := 0
	for k := 0; k < len(n.work); k++ {
		l := n.work[k]
		l.queued = false
		if relaxed++; relaxed > maxRelax {
			for _, l := range n.work[k:] {
				l.queued = false
			}
			n.cut++
			break
		}
		old := l.share
		l.share = waterLevel(l)
		if !moved(old, l.share) {
			continue
		}
		for _, f := range l.flows {
			other := f.elsewhere(l)
			if !moved(min(old, other), min(l.share, other)) {
				continue
			}
			if !f.dirty {
				f.dirty = true
				n.moved = append(n.moved, f)
			}
			for _, ll := range f.links {
				if ll != l {
					n.enqueue(ll)
				}
			}
		}
	}
	n.relaxed += int64(relaxed)
	n.work = n.work[:0]
	for _, f := range n.moved {
		f.dirty = false
		if f.over { // stopped meanwhile
			continue
		}
		rate := math.Inf(1)
		for _, l := range f.links {
			rate = min(rate, l.share)
		}
		if rate == f.rate && f.hi >= 0 {
			continue
		}
		f.left -= f.rate * (now - f.at).Seconds()
		f.left = max(f.left, 0)
		f.at, f.rate = now, rate
		f.end = now
		if !math.IsInf(rate, 1) && f.left > 0 {
			f.end = now + time.Duration(math.Ceil(f.left/rate*1e9))
		}
		if f.hi >= 0 {
			heap.Fix(&n.flows, f.hi)
		} else {
			heap.Push(&n.flows, f)
		}
	}
	n.moved = n.moved[:0]
}

// elsewhere is the least fair share among f's links other than l: the
// most f may get whatever l gives it.
func (f *flow) elsewhere(l *link) float64 {
	m := math.Inf(1)
	for _, ll := range f.links {
		if ll != l {
			m = min(m, ll.share)
		}
	}
	return m
}

// moved reports whether a share or rate changed by more than shareEps.
func moved(old, new float64) bool {
	if math.IsInf(old, 1) || math.IsInf(new, 1) {
		return old != new
	}
	return math.Abs(new-old) > shareEps*max(old, new)
}

// waterLevel is l's fair share: the level w such that the flows' rates,
// each min(w, what it may have elsewhere), fill l's capacity; +Inf when
// they cannot fill it.
func waterLevel(l *link) float64 {
	var buf [32]float64
	caps := buf[:0]
	for _, f := range l.flows {
		caps = append(caps, f.elsewhere(l))
	}
	slices.Sort(caps)
	left := l.cap
	for i, c := range caps {
		w := left / float64(len(caps)-i)
		if c >= w {
			return w
		}
		left -= c
	}
	return math.Inf(1)
}

// flowHeap orders flows by their end.
type flowHeap []*flow

func (h flowHeap) Len() int { return len(h) }
func (h flowHeap) Less(i, j int) bool {
	return h[i].end < h[j].end
}
func (h flowHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hi, h[j].hi = i, j
}
func (h *flowHeap) Push(x any) {
	f := x.(*flow)
	f.hi = len(*h)
	*h = append(*h, f)
}
func (h *flowHeap) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	f.hi = -1
	return f
}
