package cdn

import (
	"slices"
	"time"
)

// Members is what a node knows of the others' health, from heartbeats: a
// pure core that takes each beat's outcome with the time and says which
// nodes are on the ring. A node is on it from the start (so a cluster
// starting together agrees at once on the full set), leaves after
// DownBeats failed beats in a row or no good beat for DownAfter, and comes
// back only after UpBeats good beats in a row (hysteresis: a flapping node
// does not move chunks back and forth); a node that was down before it
// ever answered (one starting after this one) joins at its first answer.
//
// Each node also picks its peers unilaterally, as CoDeeN's did: the
// MaxPeers healthy nodes of lowest smoothed RTT, a peer already picked
// staying until another's RTT is below StickRatio of its own. With
// MaxPeers 0 every healthy node is a peer, and all nodes compute the same
// ring.
type Members struct {
	cfg    MembersConfig
	self   string
	peers  map[string]*member
	picked map[string]bool
}

// MembersConfig configures Members; zero fields take the defaults.
type MembersConfig struct {
	// DownBeats failed beats in a row take a node off the ring (default 3).
	DownBeats int
	// DownAfter without a good beat takes a node off the ring (default 5s).
	DownAfter time.Duration
	// UpBeats good beats in a row bring a node back (default 3).
	UpBeats int
	// MaxPeers bounds the peers picked by RTT (0: every healthy node).
	MaxPeers int
	// StickRatio is how much faster a node must be to displace a picked
	// peer (default 0.8).
	StickRatio float64
}

func (c *MembersConfig) setDefaults() {
	if c.DownBeats <= 0 {
		c.DownBeats = 3
	}
	if c.DownAfter <= 0 {
		c.DownAfter = 5 * time.Second
	}
	if c.UpBeats <= 0 {
		c.UpBeats = 3
	}
	if c.StickRatio <= 0 || c.StickRatio > 1 {
		c.StickRatio = 0.8
	}
}

type member struct {
	up        bool
	seen      bool // has answered a beat
	good, bad int  // in a row
	lastGood  time.Time
	rtt       time.Duration // smoothed; 0 until measured
	load      int           // as its last beat said
	beats     int64
	failures  int64
}

// PeerState is one node's health as Members sees it.
type PeerState struct {
	Node     string        `json:"node"`
	Up       bool          `json:"up"`
	Picked   bool          `json:"picked"`
	RTT      time.Duration `json:"rtt_ns"`
	Load     int           `json:"load"`
	Beats    int64         `json:"beats"`
	Failures int64         `json:"failures"`
}

// NewMembers returns the health of nodes (self among them or not) as of
// now: all up.
func NewMembers(cfg MembersConfig, self string, nodes []string, now time.Time) *Members {
	cfg.setDefaults()
	m := &Members{cfg: cfg, self: self, peers: make(map[string]*member), picked: make(map[string]bool)}
	for _, n := range nodes {
		if n != self {
			m.peers[n] = &member{up: true, lastGood: now}
		}
	}
	m.repick()
	return m
}

// Beat records a heartbeat to node: whether it answered, in what time,
// and the load it reported. It reports whether the ring changed.
func (m *Members) Beat(node string, ok bool, rtt time.Duration, load int, now time.Time) bool {
	p := m.peers[node]
	if p == nil {
		return false
	}
	was := p.up
	p.beats++
	if ok {
		defer func() { p.seen = true }()
		p.good++
		p.bad = 0
		p.lastGood = now
		p.load = load
		if p.rtt == 0 {
			p.rtt = rtt
		} else {
			p.rtt = (7*p.rtt + rtt) / 8
		}
		// A node never heard from yet (starting after this one) joins at
		// its first good beat: hysteresis is for nodes that failed.
		if !p.up && (p.good >= m.cfg.UpBeats || !p.seen) {
			p.up = true
		}
	} else {
		p.failures++
		p.bad++
		p.good = 0
		if p.bad >= m.cfg.DownBeats {
			p.up = false
		}
	}
	return m.settle(was, p)
}

// Tick takes off the ring the nodes with no good beat for DownAfter, and
// reports whether the ring changed.
func (m *Members) Tick(now time.Time) bool {
	changed := false
	for _, p := range m.peers {
		if p.up && now.Sub(p.lastGood) >= m.cfg.DownAfter {
			p.up = false
			p.good = 0
			changed = true
		}
	}
	if changed {
		m.repick()
	}
	return changed
}

// Failed records a request to node that failed to connect: a beat's
// worth of evidence, so a dead owner leaves the ring without waiting for
// the next beat.
func (m *Members) Failed(node string, now time.Time) bool {
	return m.Beat(node, false, 0, 0, now)
}

func (m *Members) settle(was bool, p *member) bool {
	if was == p.up {
		// RTTs move the picks only when MaxPeers bounds them.
		if m.cfg.MaxPeers > 0 {
			return m.repick()
		}
		return false
	}
	m.repick()
	return true
}

// repick chooses the peers and reports whether the choice changed.
func (m *Members) repick() bool {
	var up []string
	for n, p := range m.peers {
		if p.up {
			up = append(up, n)
		}
	}
	slices.Sort(up)
	next := make(map[string]bool, len(up))
	if m.cfg.MaxPeers <= 0 || len(up) <= m.cfg.MaxPeers {
		for _, n := range up {
			next[n] = true
		}
	} else {
		// A picked peer's RTT counts as StickRatio of itself, so another
		// must be faster by more than that to take its place.
		eff := func(n string) float64 {
			r := float64(m.peers[n].rtt)
			if m.picked[n] {
				r *= m.cfg.StickRatio
			}
			return r
		}
		slices.SortStableFunc(up, func(a, b string) int {
			ea, eb := eff(a), eff(b)
			switch {
			case ea < eb:
				return -1
			case ea > eb:
				return 1
			}
			return 0
		})
		for _, n := range up[:m.cfg.MaxPeers] {
			next[n] = true
		}
	}
	changed := len(next) != len(m.picked)
	for n := range next {
		if !m.picked[n] {
			changed = true
		}
	}
	m.picked = next
	return changed
}

// Ring is the ring of the node itself and its picked peers.
func (m *Members) Ring() Ring {
	nodes := []string{m.self}
	for n := range m.picked {
		nodes = append(nodes, n)
	}
	return NewRing(nodes)
}

// Up reports whether node is on the ring (the node itself always is).
func (m *Members) Up(node string) bool {
	if node == m.self {
		return true
	}
	return m.picked[node]
}

// States returns every other node's health, by name.
func (m *Members) States() []PeerState {
	out := make([]PeerState, 0, len(m.peers))
	for n, p := range m.peers {
		out = append(out, PeerState{Node: n, Up: p.up, Picked: m.picked[n], RTT: p.rtt, Load: p.load, Beats: p.beats, Failures: p.failures})
	}
	slices.SortFunc(out, func(a, b PeerState) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	return out
}
