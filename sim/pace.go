package sim

import (
	"math"
	"time"
)

// The uplink pacer, as package node runs it (package uplink): a peer's
// uploads go at uplink.Fraction of its uplink's capacity as the pacer
// reads it, while it downloads at uplink.Asymmetry times that or more, so
// that the queue in front of its uplink stays short. Here the pacer's own
// Estimator reads what node feeds it: every capacityEvery the bytes the
// neighbours acknowledged (measureCapacity's reading) and the bytes
// downloaded, with the time uploads waited for the uplink (for an upload
// turn, or, what TCP would hold, a flow held by the uplink's share) and
// for the pace. Its pace is the capacity of a link of the peer's own that
// every upload crosses (node.paceLink), outside the path: a paced uplink
// is not saturated, and what crosses it queues nothing (queued), as the
// runtime's pacer means it to.

// pacing reports whether n paces its uploads.
func (n *node) pacing() bool { return !n.s.cfg.NoPacing && n.s.push == nil }

// backlogged adds d that an upload waited for the uplink.
func (n *node) backlogged(d time.Duration) {
	if d > time.Millisecond && n.pacing() {
		n.pacer.Backlogged(d)
	}
}

// paceTick, every tick, tells the pacer the tick's waits: for the
// uplink, when an upload is held by the uplink's share (TCP would not
// take its bytes), and for the pace, when one is held by the pace.
func (n *node) paceTick() {
	if !n.pacing() {
		return
	}
	var byUplink, byPace bool
	up := n.site.up
	for _, e := range n.ends {
		f := e.flow
		if f == nil || math.IsInf(f.rate, 1) {
			continue
		}
		byUplink = byUplink || up != nil && heldBy(f, up)
		byPace = byPace || n.paceLink != nil && heldBy(f, n.paceLink)
	}
	if byUplink {
		n.pacer.Backlogged(tickEvery)
	}
	if byPace {
		n.pacer.Waited(tickEvery)
	}
}

// heldBy reports whether l's share is what holds flow f back.
func heldBy(f *flow, l *link) bool {
	return !math.IsInf(l.share, 1) && f.rate >= l.share*(1-shareEps)
}

// pace feeds the pacer a reading, acked bytes delivered since the last
// one and what was downloaded meanwhile, and sets the pace it decides.
func (n *node) pace(acked float64) {
	if !n.pacing() {
		return
	}
	recv := n.fromPeers + n.fromOrigin
	n.pacer.Delivered(int64(acked))
	n.pacer.Received(recv - n.pacerRecv)
	n.pacerRecv = recv
	if !n.pacer.Tick(n.s.clock()) {
		return
	}
	c := n.pacer.Pace()
	if c > 0 {
		if n.firstRead == 0 {
			n.firstRead = n.pacer.Capacity()
		}
	} else {
		c = math.Inf(1)
	}
	switch {
	case n.paceLink != nil:
		n.s.net.setCap(n.paceLink, c, n.s.now)
	case !math.IsInf(c, 1):
		n.paceLink = &link{cap: c, share: math.Inf(1)}
	}
}
