package node

import (
	"context"
	"time"

	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
)

// announceEnough is the number of neighbours past which a periodic
// announce asks the tracker for few peers (askTracker).
const announceEnough = 8

// askTracker announces to every tracker in the background; answers come
// back as TrackerPeers events.
func (n *Node) askTracker(ctx context.Context, why string) {
	if len(n.cfg.Trackers) == 0 {
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
	for _, url := range n.cfg.Trackers {
		n.wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			resp, err := tracker.Announce(actx, n.cfg.HTTPClient, url, req)
			if err != nil {
				if ctx.Err() == nil { // not a failure: the node is stopping
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
	n.mu.Unlock()
}

// signed returns req with, in a private swarm, the node's token and its
// signature (tracker.AnnounceRequest.Sign); req as it is otherwise.
func (n *Node) signed(req tracker.AnnounceRequest) tracker.AnnounceRequest {
	if p := n.cfg.Private; p != nil {
		req.Sign(p.Key, p.Token, p.now())
	}
	return req
}
