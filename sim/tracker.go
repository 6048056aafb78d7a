package sim

import (
	"context"
	"time"

	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/tracker"
)

// trackerSim is the tracker on the origin's host: tracker.Tracker, over
// Config.Tracker's store, on the simulated clock. A peer's announce
// reaches it a path latency after it is sent, and the answer takes as
// long back.
type trackerSim struct {
	s        *Sim
	t        *tracker.Tracker
	store    tracker.Store
	interval time.Duration

	announces, failed int64
	byEvent           map[string]int64
	// The store's state, sampled every simulated second: the peers its
	// table holds, the largest swarm estimate it gave.
	held, heldMax, estimateMax int64
	swarmsMax                  int64
}

// announce is one announce on its way to the tracker.
type announce struct {
	n   *node
	req tracker.AnnounceRequest
}

func newTrackerSim(s *Sim) *trackerSim {
	cfg := tracker.Config{Now: s.clock, AnnounceRate: -1}
	store := s.cfg.Tracker
	if store == nil {
		store = tracker.NewSeededMemoryStore(cfg.Limits(), nil, s.cfg.Seed)
	}
	cfg.Store = store
	t := tracker.New(cfg)
	return &trackerSim{s: s, t: t, store: store, interval: t.Interval(), byEvent: map[string]int64{}}
}

// send sends req from n to the tracker.
func (t *trackerSim) send(n *node, req tracker.AnnounceRequest) {
	t.s.after(t.s.transit(n.site, t.s.origin.site), event{kind: evTrackerReq, x: &announce{n: n, req: req}})
}

// request applies an announce and sends the answer back, as
// node.askTracker reads it: a failure is an answer without news.
func (t *trackerSim) request(a *announce) {
	s := t.s
	t.announces++
	ev := string(a.req.Event)
	if ev == "" {
		ev = "periodic"
	}
	t.byEvent[ev]++
	resp, err := t.t.AnnounceContext(context.Background(), a.req, a.n.ap)
	if a.req.Event == tracker.EventStopped {
		return
	}
	var tp swarm.TrackerPeers
	if err != nil {
		t.failed++
	} else {
		tp.SwarmSize = resp.SwarmSize
		tp.Addrs = make([]string, 0, len(resp.Peers))
		for _, p := range resp.Peers {
			if o := s.byAddr[p.Addr]; o != nil {
				tp.Addrs = append(tp.Addrs, o.addr)
			} else {
				tp.Addrs = append(tp.Addrs, p.Addr.String())
			}
		}
		t.estimateMax = max(t.estimateMax, int64(resp.SwarmSize))
	}
	s.after(s.transit(s.origin.site, a.n.site), event{kind: evTrackerAns, n: a.n, x: tp})
}

// sample reads the store's state.
func (t *trackerSim) sample() {
	st, err := t.store.Stats(context.Background(), t.s.clock())
	if err != nil {
		return
	}
	t.held = st.Peers
	t.heldMax = max(t.heldMax, st.Peers)
	t.swarmsMax = max(t.swarmsMax, st.Swarms)
	// What the origin's dashboard shows (the store's Peers).
	if n, _, ok := t.t.SwarmSize(t.s.root, t.s.cfg.Size); ok {
		t.estimateMax = max(t.estimateMax, int64(n))
	}
}

// peers are up to want addresses of the swarm, as the tracker hands them
// to its origin (Tracker.Peers).
func (t *trackerSim) peers(want int) []string {
	var addrs []string
	for _, p := range t.t.Peers(t.s.root, t.s.cfg.Size, want) {
		if o := t.s.byAddr[p.Addr]; o != nil {
			addrs = append(addrs, o.addr)
		}
	}
	return addrs
}
