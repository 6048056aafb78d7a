package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/bench"
	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/swarm"
)

// A cluster push (issue 31, docs/push.md), simulated: the peers are a
// cluster's hosts, every one arriving at once and seeding on; each runs
// as the daemon's push agent runs its node (daemon/push*.go):
//
//   - a connection the plan does not allow is refused by either side
//     (cluster.Plan.MayPeerActive, the agent's PeerConn hook), a standby
//     counting as active once no piece has come for Fallback;
//   - a host that is not one of its datacenter's representatives is
//     answered "in swarm" by its own gate, without a request, until
//     Fallback passes without a piece; a representative's request is
//     steered by its share of the work (cluster.Work.Pick);
//   - each host's budgets (cluster.Role: Down, Up, Cross each way) shape
//     its traffic as its rate limiters do: in the simulator, a link of
//     the budget's capacity over the wire overhead, on the path of every
//     flow the budget counts; within the cross budget the origin's bodies
//     come first, the other racks' hosts getting what they leave (tick);
//   - the datacenters' representatives hold the origin all the time
//     (swarm.Config.OriginHolder);
//   - uploads across the uplink take no upload turn and are never refused
//     as busy (node.OwnBudget).

// Push makes a run a cluster push.
type Push struct {
	Plan *cluster.Plan
	// Hosts[i] is peer i's host name in Plan.
	Hosts []string
	// Fallback is the agent's (daemon.PushConfig.Fallback; default
	// daemon.DefaultPushFallback, 10 s).
	Fallback time.Duration
	// Overhead turns payload into bytes on the wire, as budgets count
	// them (default the agent's wireOverhead, 1.12).
	Overhead float64
	// Bound is the topology bound, for the result (0: not known).
	Bound float64
}

// Defaults of a push.
const (
	DefaultPushFallback = 10 * time.Second // daemon.DefaultPushFallback
	DefaultPushOverhead = 1.12             // daemon's wireOverhead
	prioritizeFloor     = 1.0 / 16         // daemon's
)

// NewPushConfig returns the configuration of a push of size bytes from an
// origin of originUp bytes/s (0: not limited) over t, bench's push
// topology (mode = push): the groups, the peers (named d<D>r<R>h<H>) and
// the plan, with the cluster file's defaults but for t's rack
// representatives.
func NewPushConfig(t bench.PushTopology, size, originUp int64) (Config, error) {
	if t.Racks <= 0 || t.HostsPerRack <= 0 || t.Datacenters < 0 || size <= 0 {
		return Config{}, fmt.Errorf("a push needs racks, hosts per rack and a size: %+v, %d bytes", t, size)
	}
	if t.Reserve < 0 || t.Reserve >= 1 {
		return Config{}, fmt.Errorf("reserve %v: want 0 to 1", t.Reserve)
	}
	dcs := max(t.Datacenters, 1)
	rate := func(b int64) string { return fmt.Sprintf("%dbit", b*8) }
	var toml strings.Builder
	fmt.Fprintf(&toml, "reserve = %v\n", t.Reserve)
	if t.RackRepresentatives > 0 {
		fmt.Fprintf(&toml, "rack_representatives = %d\n", t.RackRepresentatives)
	}
	if t.HostUp > 0 {
		fmt.Fprintf(&toml, "host_link = %q\n", rate(t.HostUp))
	}
	cfg := Config{Size: size, OriginUp: originUp}
	var hosts []string
	for d := range dcs {
		dc := fmt.Sprintf("dc%d", d)
		fmt.Fprintf(&toml, "[datacenter.%s]\n", dc)
		parent := ""
		if t.Datacenters > 0 {
			if t.DCUplink > 0 {
				fmt.Fprintf(&toml, "link = %q\n", rate(t.DCUplink))
			}
			cfg.Groups = append(cfg.Groups, Group{Name: dc, Up: t.DCUplink, Down: t.DCUplink})
			parent = dc
		}
		for r := range t.Racks {
			rack := fmt.Sprintf("d%dr%d", d, r)
			fmt.Fprintf(&toml, "[rack.%s]\ndatacenter = %q\n", rack, dc)
			if t.RackUplink > 0 {
				fmt.Fprintf(&toml, "uplink = %q\n", rate(t.RackUplink))
			}
			cfg.Groups = append(cfg.Groups, Group{Name: rack, Parent: parent, Up: t.RackUplink, Down: t.RackUplink})
			var names []string
			for h := range t.HostsPerRack {
				name := fmt.Sprintf("%sh%d", rack, h)
				names = append(names, fmt.Sprintf("%q", name))
				hosts = append(hosts, name)
				cfg.Peers = append(cfg.Peers, Peer{Class: "host", Up: t.HostUp, Down: t.HostDown, Group: rack})
			}
			fmt.Fprintf(&toml, "hosts = [%s]\n", strings.Join(names, ", "))
		}
	}
	for i, name := range hosts {
		k := i + 1
		fmt.Fprintf(&toml, "[host.%s]\nagent = \"10.%d.%d.%d\"\n", name, byte(k>>16), byte(k>>8), byte(k))
	}
	c, err := cluster.Parse([]byte(toml.String()))
	if err != nil {
		return Config{}, fmt.Errorf("the push's cluster: %w", err)
	}
	// The plan's seed is the file's root, as the agents' is.
	plan, err := cluster.NewPlan(c, hosts, simRoot[:])
	if err != nil {
		return Config{}, err
	}
	cfg.Push = &Push{Plan: plan, Hosts: hosts, Bound: bench.PushBound(size, originUp, &t)}
	return cfg, nil
}

// pushSim is a push's state in a run.
type pushSim struct {
	Push
	roles []*cluster.Role
	// Per peer, its budgets as links (nil: none): down, up, and across
	// its rack's uplink in and out.
	down, up, crossIn, crossOut []*link
	// peersIn is what the host takes from other racks' hosts: crossIn
	// less what the origin's bodies take, which come first (the agent's
	// crossPeers limiter, following the origin's rate every tick).
	peersIn []*link
	work    *cluster.Work // the datacenter representatives' shares
}

func newPushSim(s *Sim, p *Push) (*pushSim, error) {
	if len(p.Hosts) != len(s.cfg.Peers) {
		return nil, fmt.Errorf("push: %d host names for %d peers", len(p.Hosts), len(s.cfg.Peers))
	}
	ps := &pushSim{Push: *p}
	if ps.Fallback <= 0 {
		ps.Fallback = DefaultPushFallback
	}
	if ps.Overhead <= 0 {
		ps.Overhead = DefaultPushOverhead
	}
	n := len(p.Hosts)
	ps.roles = make([]*cluster.Role, n)
	ps.down, ps.up, ps.crossIn, ps.crossOut = make([]*link, n), make([]*link, n), make([]*link, n), make([]*link, n)
	ps.peersIn = make([]*link, n)
	budget := func(b int64) *link {
		if b <= 0 {
			return nil
		}
		return &link{cap: float64(b) / ps.Overhead, share: math.Inf(1)}
	}
	ps.work = cluster.NewWork(p.Plan.Representatives(), s.pieces)
	for i, name := range p.Hosts {
		r := p.Plan.Roles[name]
		if r == nil {
			return nil, fmt.Errorf("push: host %q is not in the plan", name)
		}
		ps.roles[i] = r
		ps.down[i], ps.up[i] = budget(r.Down), budget(r.Up)
		ps.crossIn[i], ps.peersIn[i], ps.crossOut[i] = budget(r.Cross), budget(r.Cross), budget(r.Cross)
	}
	return ps, nil
}

// links are the budgets a flow from a to b crosses (a nil: the origin).
func (ps *pushSim) links(a, b *node) []*link {
	var ls []*link
	add := func(l *link) {
		if l != nil {
			ls = append(ls, l)
		}
	}
	cross := a == nil || ps.roles[a.idx].Rack != ps.roles[b.idx].Rack
	if a != nil {
		add(ps.up[a.idx])
		if cross {
			add(ps.crossOut[a.idx])
		}
	}
	add(ps.down[b.idx])
	if cross {
		if a != nil {
			add(ps.peersIn[b.idx])
		} else {
			add(ps.crossIn[b.idx])
		}
	}
	return ls
}

// tick gives a datacenter representative's origin bodies priority over its
// peers across the uplink: what its peers may use of its cross budget is
// what the origin's bodies leave of it.
func (ps *pushSim) tick(n *node) {
	l := ps.peersIn[n.idx]
	if l == nil {
		return
	}
	var origin float64
	for _, f := range n.fetches {
		if f.flow != nil && !f.flow.over {
			origin += f.flow.rate
		}
	}
	full := ps.crossIn[n.idx].cap
	c := max(full-origin, full*prioritizeFloor)
	if math.Abs(c-l.cap) > 1e-3*full {
		l.cap = c
		n.s.net.enqueue(l)
		n.s.net.solve(n.s.now)
	}
}

// stalled reports whether no piece has come to n for Fallback (from the
// start, for one with none yet).
func (ps *pushSim) stalled(n *node) bool {
	return n.s.now-n.progressAt >= ps.Fallback
}

// mayConnect reports whether a and b both accept their connection.
func (ps *pushSim) mayConnect(a, b *node) bool {
	pl := ps.Plan
	ha, hb := ps.Hosts[a.idx], ps.Hosts[b.idx]
	return pl.MayPeerActive(ha, hb, ps.roles[a.idx].Standby && ps.stalled(a)) &&
		pl.MayPeerActive(hb, ha, ps.roles[b.idx].Standby && ps.stalled(b))
}

// gate is the agent's gate in front of a fetch from the origin: the
// answer the gate gives at once, or nil and the piece the request asks
// the origin for (a datacenter representative's steered by its share of
// the work, a.Candidates to what it offers with it).
func (ps *pushSim) gate(n *node, a *swarm.FetchOrigin) (*swarm.OriginResult, int) {
	if !ps.roles[n.idx].DCRep && !ps.stalled(n) {
		return &swarm.OriginResult{Piece: a.Piece, InSwarm: time.Second, Candidates: a.Candidates}, a.Piece
	}
	if !ps.roles[n.idx].DCRep || len(a.Candidates) == 0 {
		return nil, a.Piece
	}
	piece, offer, ok := ps.work.Pick(ps.Hosts[n.idx], a.Piece, a.Candidates)
	if !ok {
		return nil, a.Piece
	}
	a.Candidates = offer
	return nil, piece
}

// PushResult is what a push run measured, as the push bench reports it.
type PushResult struct {
	// Bound is the topology bound when the run came from a PushTopology
	// (0 otherwise); LastOverBound the last host's time over it.
	Bound         float64 `json:"bound"`
	LastOverBound float64 `json:"last_over_bound"`
	// SlowestOverMedian: the last host's time over the median host's.
	SlowestOverMedian float64 `json:"slowest_over_median"`
	// RackInCopies and DCInCopies: the most bytes into one rack over its
	// uplink (one datacenter over its link), in copies of the file.
	RackInCopies float64 `json:"rack_in_copies"`
	DCInCopies   float64 `json:"dc_in_copies,omitempty"`
	// RackInMean: the mean rack's.
	RackInMean float64 `json:"rack_in_mean"`
	// Roles counts the hosts by role.
	Roles map[string]int `json:"roles"`
}

func (s *Sim) pushResult(r *Result) {
	ps := s.push
	pr := &PushResult{Bound: ps.Bound, Roles: map[string]int{}}
	for _, role := range ps.roles {
		switch {
		case role.DCRep:
			pr.Roles["dc_representative"]++
		case role.RackRep && role.Standby:
			pr.Roles["standby"]++
		case role.RackRep:
			pr.Roles["rack_representative"]++
		default:
			pr.Roles["member"]++
		}
	}
	if pr.Bound > 0 {
		pr.LastOverBound = r.Last / pr.Bound
	}
	var times []float64
	for _, n := range s.nodes {
		if n.complete {
			times = append(times, (n.doneAt - n.arrive).Seconds())
		}
	}
	if len(times) > 0 {
		slices.Sort(times)
		if m := times[len(times)/2]; m > 0 {
			pr.SlowestOverMedian = times[len(times)-1] / m
		}
	}
	racks := 0
	for _, g := range s.cfg.Groups {
		l := s.groups[g.Name].down
		if l == nil {
			continue
		}
		c := l.bytes / float64(s.cfg.Size)
		if g.Parent == "" && slices.ContainsFunc(s.cfg.Groups, func(o Group) bool { return o.Parent == g.Name }) {
			pr.DCInCopies = max(pr.DCInCopies, c)
			continue
		}
		pr.RackInCopies = max(pr.RackInCopies, c)
		pr.RackInMean += c
		racks++
	}
	if racks > 0 {
		pr.RackInMean /= float64(racks)
	}
	r.Push = pr
}

func (pr *PushResult) write(w *strings.Builder, last float64) {
	if pr.Bound > 0 {
		fmt.Fprintf(w, "push: last %s = %.2f × the topology bound (%s)\n", secs(last), pr.LastOverBound, secs(pr.Bound))
	}
	fmt.Fprintf(w, "push: slowest %.2f × the median; bytes into a rack over its uplink: at most %.3f copies, mean %.3f", pr.SlowestOverMedian, pr.RackInCopies, pr.RackInMean)
	if pr.DCInCopies > 0 {
		fmt.Fprintf(w, "; into a datacenter: at most %.3f", pr.DCInCopies)
	}
	roles := make([]string, 0, len(pr.Roles))
	for _, k := range []string{"dc_representative", "rack_representative", "standby", "member"} {
		if pr.Roles[k] > 0 {
			roles = append(roles, fmt.Sprintf("%d %s", pr.Roles[k], strings.ReplaceAll(k, "_", " ")))
		}
	}
	fmt.Fprintf(w, "\npush: hosts: %s\n", strings.Join(roles, ", "))
}

func secs(s float64) string { return fmt.Sprintf("%.2f s", s) }
