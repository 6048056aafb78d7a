package node

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
)

// announceEnough is the number of neighbours past which a periodic
// announce asks the tracker for few peers (askTracker).
const announceEnough = 8

// trackerRetry is the first wait after a failed announce (trackerBackoff).
const trackerRetry = time.Second

// trackerBackoff is a tracker's run of failed announces. A tracker that
// fails (often the origin's own, down with it) is asked again only at
// the end of a wait that doubles from trackerRetry up to the announce
// interval, each drawn between half and all of it (the periodic timer
// wakes for it); the scheduler's refills and repairs skip it until it
// answers. A crowd that all joined at once, or all stalled at once when
// its origin died, would otherwise announce in step, and all come back
// in the same instant when the origin does.
type trackerBackoff struct {
	fails  int
	nextAt time.Time // the next announce to it
}

// trackerWait is the wait after fails failed announces in a row, at most
// interval, drawn between half and all of it.
func trackerWait(fails int, interval time.Duration) time.Duration {
	d := max(min(interval, trackerRetry<<min(fails-1, 16)), time.Millisecond)
	return d/2 + rand.N(d/2+1)
}

// announceWaitLocked is the wait before the next periodic announce: the
// tracker's interval, or less, to the end of a failing tracker's wait.
// n.mu is held.
func (n *Node) announceWaitLocked() time.Duration {
	d := n.interval
	for _, b := range n.trackerFails {
		d = min(d, time.Until(b.nextAt))
	}
	return max(d, time.Millisecond)
}

// trackerResult records the outcome of an announce to url. After a
// failure the loop re-arms its periodic timer (trackerFailed).
func (n *Node) trackerResult(url string, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ok {
		delete(n.trackerFails, url)
		return
	}
	b := n.trackerFails[url]
	if b == nil {
		b = &trackerBackoff{}
		n.trackerFails[url] = b
	}
	b.fails++
	b.nextAt = time.Now().Add(trackerWait(b.fails, n.interval))
	select {
	case n.trackerFailed <- struct{}{}:
	default:
	}
}

// trackersToAsk is the trackers to announce to for why: a join or a
// completion goes to all; a periodic announce skips the failing trackers
// whose wait has not ended, a refill or a repair every failing tracker.
func (n *Node) trackersToAsk(why string) []string {
	if why == "join" || why == "completed" {
		return n.cfg.Trackers
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var urls []string
	now := time.Now()
	for _, url := range n.cfg.Trackers {
		if b := n.trackerFails[url]; b == nil || why == "" && !now.Before(b.nextAt) {
			urls = append(urls, url)
		}
	}
	return urls
}

// askTracker announces to every tracker in the background; answers come
// back as TrackerPeers events.
func (n *Node) askTracker(ctx context.Context, why string) {
	urls := n.trackersToAsk(why)
	if len(urls) == 0 {
		if why == "join" || why == "refill" || why == "repair" {
			n.postLater(ctx, swarm.TrackerPeers{})
		}
		return
	}
	event := tracker.EventNone
	switch why {
	case "join":
		event = tracker.EventStarted
	case "completed":
		event = tracker.EventCompleted
	}
	left := n.m.Size
	if n.complete {
		left = 0
	}
	port := n.listenPort()
	// Joining, refilling and repairing want addresses; the periodic
	// announces of a peer with neighbours enough, and a completion, only
	// keep it counted (and bring the swarm size): each peer listed is
	// about 80 bytes of the tracker's answer, which an embedded tracker
	// sends on the origin's link, 50 times a round in a crowd of 50.
	want := 30
	if why == "completed" || why == "" && len(n.peers) >= announceEnough {
		want = 5
	}
	req := n.signed(tracker.AnnounceRequest{Root: n.m.Root, Size: n.m.Size, ID: tracker.PeerID(n.id), Port: uint16(port), Left: left, Event: event, NumWant: want})
	for _, url := range urls {
		n.wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			resp, err := tracker.Announce(actx, n.cfg.HTTPClient, url, req)
			if ctx.Err() == nil { // else not the tracker's doing: the node is stopping
				n.trackerResult(url, err == nil)
			}
			if err != nil {
				if ctx.Err() == nil {
					n.log.Info("tracker announce failed", "tracker", url, "err", err)
				}
				n.post(ctx, swarm.TrackerPeers{}) // no news: the scheduler decides
				return
			}
			addrs := make([]string, 0, len(resp.Peers))
			for _, p := range resp.Peers {
				addrs = append(addrs, p.Addr.String())
			}
			if resp.Interval > 0 {
				n.setInterval(resp.Interval)
			}
			n.log.Debug("tracker answered", "why", why, "peers", len(addrs), "swarm_size", resp.SwarmSize)
			n.post(ctx, swarm.TrackerPeers{Addrs: addrs, SwarmSize: resp.SwarmSize})
		})
	}
}

// setInterval records the tracker's announce interval (from tracker
// goroutines; the loop reads it under mu).
func (n *Node) setInterval(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d >= time.Second {
		n.interval = d
	}
}

// schedStats copies the scheduler's counters that Stats reports (on the
// loop goroutine, which owns the scheduler).
func (n *Node) schedStats() {
	st := n.sched.Stats()
	n.mu.Lock()
	n.lastSched = st
	if !st.Complete {
		n.unchokes.ticks++
		for _, p := range st.PerPeer {
			if p.Unchoked {
				n.unchokes.ours++
			}
			if p.UnchokeUs {
				n.unchokes.theirs++
			}
		}
	}
	n.mu.Unlock()
}

// perTick is sum over ticks, 0 with no ticks.
func perTick(sum, ticks int) float64 {
	if ticks == 0 {
		return 0
	}
	return float64(sum) / float64(ticks)
}

// signed returns req with, in a private swarm, the node's token and its
// signature (tracker.AnnounceRequest.Sign); req as it is otherwise.
func (n *Node) signed(req tracker.AnnounceRequest) tracker.AnnounceRequest {
	if p := n.cfg.Private; p != nil {
		req.Sign(p.Key, p.Token, p.now())
	}
	return req
}
