package cdn

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Heartbeats: every BeatInterval the node asks each other node for
// /.cdn/beat, within BeatTimeout, and hands the outcome, the round-trip
// time and the load the answer reports to Members, which decides who is
// on the ring.

// beat is a heartbeat's answer.
type beat struct {
	Node string `json:"node"`
	// Load is the chunk requests of other nodes this one is serving.
	Load int64 `json:"load"`
}

func (n *Node) serveBeat(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(beat{Node: n.self, Load: n.served.Load()})
}

func (n *Node) beatLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.BeatInterval)
	defer t.Stop()
	for {
		n.beatAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beatAll beats every other node at once and applies the outcomes.
func (n *Node) beatAll(ctx context.Context) {
	n.mu.Lock()
	states := n.members.States()
	n.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range states {
		wg.Go(func() {
			ok, rtt, load := n.beatOne(ctx, s.Node)
			if ctx.Err() != nil {
				return
			}
			if n.cfg.RTT != nil {
				rtt = n.cfg.RTT(s.Node, rtt)
			}
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.members.Beat(s.Node, ok, rtt, load, n.now()) {
				n.ringChangedLocked()
			}
		})
	}
	wg.Wait()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.members.Tick(n.now()) {
		n.ringChangedLocked()
	}
}

func (n *Node) beatOne(ctx context.Context, node string) (ok bool, rtt time.Duration, load int) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.BeatTimeout)
	defer cancel()
	start := time.Now()
	resp, err := n.nodeRequest(ctx, node, pathBeat, url.Values{}, nil)
	if err != nil {
		return false, 0, 0
	}
	defer resp.Body.Close()
	var b beat
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&b); err != nil || b.Node != node {
		return false, 0, 0
	}
	return true, time.Since(start), int(b.Load)
}
