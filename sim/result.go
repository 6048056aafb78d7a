package sim

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/bench"
	"github.com/stampede-dev/stampede/internal/units"
	"github.com/stampede-dev/stampede/swarm"
)

// counters are the run's own counts.
type counters struct {
	events, steps int64
	frames        [numMsgKinds]int64
	peerBytes     int64
	duplicates    int64 // pieces a peer received from peers that it had
	lateDropped   int64 // pieces arriving for requests cancelled and forgotten
}

// Result is what a run measured. Times are in seconds of simulated time,
// except Engine.WallSeconds.
type Result struct {
	Peers    int `json:"peers"`
	Arrived  int `json:"arrived"`
	Finished int `json:"finished"`
	Killed   int `json:"killed"`
	// Paced counts the peers whose uploads the uplink pacer paced at some
	// point (pace.go).
	Paced     int   `json:"paced"`
	Complete  bool  `json:"complete"` // every peer that arrived and was not killed finished
	TimedOut  bool  `json:"timed_out"`
	Size      int64 `json:"size"`
	PieceSize int64 `json:"piece_size"`
	Pieces    int   `json:"pieces"`
	// SimSeconds is the simulated time the run lasted.
	SimSeconds float64 `json:"sim_seconds"`
	// Last is the first arrival to the last completion; Mean, P50 and P90
	// summarize the finished peers' completion times (arrival to
	// completion), as bench reports them.
	Last float64 `json:"last"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	// TKR and its terms (origin, slowest download, crowd), TKRR (T_KR(R)
	// with R = OriginCopies) and HTTPBound are bench's bounds for the
	// peers that arrived.
	TKR          float64    `json:"tkr"`
	TKRTerms     [3]float64 `json:"tkr_terms"`
	TKRR         float64    `json:"tkr_r"`
	HTTPBound    float64    `json:"http_bound"`
	LastOverTKR  float64    `json:"last_over_tkr"`
	MeanOverTKR  float64    `json:"mean_over_tkr"`
	LastOverTKRR float64    `json:"last_over_tkr_r"`
	// OriginBytes is what the origin sent (bodies cut short count what
	// went out); OriginCopies is that over the file's size.
	OriginBytes  int64         `json:"origin_bytes"`
	OriginCopies float64       `json:"origin_copies"`
	Origin       OriginStats   `json:"origin"`
	PeerBytes    int64         `json:"peer_bytes"`
	Control      ControlStats  `json:"control"`
	Tracker      TrackerStats  `json:"tracker"`
	Scheduler    SchedStats    `json:"scheduler"`
	Classes      []ClassResult `json:"classes"`
	// Push is a push's figures (Config.Push).
	Push   *PushResult `json:"push,omitempty"`
	Engine EngineStats `json:"engine"`
}

// OriginStats describes the origin's load. A fetch is in flight from the
// peer's FetchOrigin to the answer reaching it; Slurpie's claim is that
// about k peers use the origin at once however large the crowd.
type OriginStats struct {
	Fetches map[string]int `json:"fetches"` // FetchOrigin actions by reason
	// Answers: pieces sent, 503s because the pace queue was full (busy),
	// 503s "in swarm", and pieces sent in place of the one asked.
	Sent    int64 `json:"sent"`
	Busy    int64 `json:"busy"`
	InSwarm int64 `json:"in_swarm"`
	Picked  int64 `json:"picked"`
	// BudgetRefused: 503s past the egress budget; OverBudget: pieces
	// sent past it (not sent in the window, or to a peer alone).
	BudgetRefused int64   `json:"budget_refused"`
	OverBudget    int64   `json:"over_budget"`
	InFlightMax   int     `json:"in_flight_max"`
	InFlightMean  float64 `json:"in_flight_mean"`
	PeersMax      int     `json:"peers_max"` // peers with a fetch in flight
	PeersMean     float64 `json:"peers_mean"`
	BodiesMax     int     `json:"bodies_max"` // bodies being sent at once
}

// ControlStats counts the control frames the peers sent each other (piece
// data aside), and the tracker announces.
type ControlStats struct {
	Frames    int64            `json:"frames"`
	PerPeer   float64          `json:"per_peer"` // frames sent per peer that arrived
	ByKind    map[string]int64 `json:"by_kind"`
	Announces int64            `json:"announces"`
}

// TrackerStats describes the tracker's state: the peers its swarm's table
// held (sampled every simulated second; bounded by the tracker's
// MaxPeersPerSwarm whatever the crowd) and the largest swarm size it gave.
type TrackerStats struct {
	Announces   int64            `json:"announces"`
	ByEvent     map[string]int64 `json:"by_event"`
	Failed      int64            `json:"failed"`
	PeersHeld   int64            `json:"peers_held"` // at the last sample
	PeersMax    int64            `json:"peers_held_max"`
	SwarmsMax   int64            `json:"swarms_max"`
	EstimateMax int64            `json:"swarm_size_max"`
}

// SchedStats sums the peers' scheduler counters.
type SchedStats struct {
	Requests int64 `json:"requests"`
	Timeouts int64 `json:"timeouts"`
	Cancels  int64 `json:"cancels"`
	Rejects  int64 `json:"rejects"`
	// Duplicates: pieces from peers that the peer had already.
	Duplicates int64 `json:"duplicates"`
	Dials      int64 `json:"dials"`
	Evicted    int64 `json:"evicted"`
}

// ClassResult is one class of peers' outcome.
type ClassResult struct {
	Name     string  `json:"name"`
	Peers    int     `json:"peers"`
	Finished int     `json:"finished"`
	Up       int64   `json:"up"`
	Down     int64   `json:"down"`
	Mean     float64 `json:"mean"`
	Last     float64 `json:"last"` // its last completion, from the first arrival
	// OriginBytes is what the class took from the origin: who gets the
	// origin's pieces (issue 30).
	OriginBytes int64 `json:"origin_bytes"`
	// UpTo is what the class uploaded to each class, by name: where its
	// uplinks went.
	UpTo map[string]int64 `json:"up_to"`
	// Paced counts its peers paced at some point (Result.Paced).
	Paced int `json:"paced"`
	// Have is the class's mean share of the file held every 10 s of
	// simulated time, and at the run's end (a peer that finished counts
	// 1, one yet to arrive 0).
	Have []float64 `json:"have"`
}

// EngineStats describe the simulation itself.
type EngineStats struct {
	Events int64 `json:"events"`
	// Steps are the scheduler passes (StepAll calls) of all peers.
	Steps int64 `json:"steps"`
	// SolverPasses are the max-min recomputations, LinksRelaxed the link
	// shares they computed, PassesCut those stopped at maxRelax.
	SolverPasses int64   `json:"solver_passes"`
	LinksRelaxed int64   `json:"links_relaxed"`
	PassesCut    int64   `json:"passes_cut"`
	WallSeconds  float64 `json:"wall_seconds"`
	// StepTime is Config.StepTime as used.
	StepTime float64 `json:"step_time"`
}

func (s *Sim) result(timedOut bool) *Result {
	r := &Result{
		Peers: len(s.nodes), Arrived: s.arrived, Finished: s.finished, Killed: s.killed,
		TimedOut: timedOut, Size: s.cfg.Size, PieceSize: s.cfg.PieceSize, Pieces: s.pieces,
		SimSeconds: s.now.Seconds(),
	}
	r.Complete = s.done() && !timedOut
	s.sampleClasses()
	first := time.Duration(math.MaxInt64)
	var secs []float64
	crowd := bench.Crowd{Size: s.cfg.Size, OriginUp: float64(s.cfg.OriginUp)}
	classes := map[string]*ClassResult{}
	var names []string
	for _, n := range s.nodes {
		c := classes[n.class]
		if c == nil {
			c = &ClassResult{Name: n.class, Up: s.cfg.Peers[n.idx].Up, Down: s.cfg.Peers[n.idx].Down,
				UpTo: s.upTo[n.class], Have: s.have[n.class]}
			classes[n.class] = c
			names = append(names, n.class)
		}
		c.Peers++
		c.OriginBytes += n.fromOrigin
		if n.firstRead > 0 {
			c.Paced++
			r.Paced++
		}
		if n.state == waiting {
			continue
		}
		first = min(first, n.arrive)
		crowd.Up = append(crowd.Up, float64(s.cfg.Peers[n.idx].Up))
		crowd.Down = append(crowd.Down, float64(s.cfg.Peers[n.idx].Down))
		st := n.final
		if n.sched != nil {
			st = n.sched.Stats()
		}
		r.Scheduler.add(st)
		if !n.complete {
			continue
		}
		d := (n.doneAt - n.arrive).Seconds()
		secs = append(secs, d)
		c.Finished++
		c.Mean += d
		c.Last = max(c.Last, n.doneAt.Seconds())
	}
	for _, name := range names {
		c := classes[name]
		if c.Finished > 0 {
			c.Mean /= float64(c.Finished)
		}
		if first != math.MaxInt64 {
			c.Last = max(c.Last-first.Seconds(), 0)
		}
		r.Classes = append(r.Classes, *c)
	}
	slices.Sort(secs)
	if len(secs) > 0 {
		var sum float64
		for _, v := range secs {
			sum += v
		}
		r.Mean = sum / float64(len(secs))
		r.P50, r.P90 = quantile(secs, 0.5), quantile(secs, 0.9)
		for _, n := range s.nodes {
			if n.complete {
				r.Last = max(r.Last, (n.doneAt - first).Seconds())
			}
		}
	}
	o := s.origin
	o.account()
	r.OriginBytes = int64(o.bytes)
	r.OriginCopies = o.bytes / float64(s.cfg.Size)
	r.Origin = OriginStats{Fetches: o.reasons, Sent: o.ok, Busy: o.busy, InSwarm: o.inSwarm, Picked: o.picked,
		BudgetRefused: o.spent, OverBudget: o.overBudget,
		InFlightMax: o.maxInFlight, PeersMax: o.maxPeers, BodiesMax: o.maxFlows}
	if span := (s.now - max(first, 0)).Seconds(); span > 0 && first != math.MaxInt64 {
		r.Origin.InFlightMean, r.Origin.PeersMean = o.flightSum/span, o.peersSum/span
	}
	if r.Arrived > 0 {
		r.TKR = crowd.TKR()
		r.TKRTerms[0], r.TKRTerms[1], r.TKRTerms[2] = crowd.TKRTerms()
		r.TKRR, r.HTTPBound = crowd.TKRR(r.OriginCopies), crowd.HTTP()
		if r.TKR > 0 {
			r.LastOverTKR, r.MeanOverTKR = r.Last/r.TKR, r.Mean/r.TKR
		}
		if r.TKRR > 0 {
			r.LastOverTKRR = r.Last / r.TKRR
		}
	}
	r.PeerBytes = s.stats.peerBytes
	r.Control.ByKind = map[string]int64{}
	for k, v := range s.stats.frames {
		r.Control.Frames += v
		r.Control.ByKind[msgNames[k]] = v
	}
	t := s.tracker
	r.Control.Announces = t.announces
	if r.Arrived > 0 {
		r.Control.PerPeer = float64(r.Control.Frames) / float64(r.Arrived)
	}
	r.Tracker = TrackerStats{Announces: t.announces, ByEvent: t.byEvent, Failed: t.failed, PeersHeld: t.held,
		PeersMax: t.heldMax, SwarmsMax: t.swarmsMax, EstimateMax: t.estimateMax}
	r.Engine = EngineStats{Events: s.stats.events, Steps: s.stats.steps, SolverPasses: s.net.passes,
		LinksRelaxed: s.net.relaxed, PassesCut: s.net.cut, WallSeconds: time.Since(s.wallStart).Seconds(),
		StepTime: s.cfg.StepTime.Seconds()}
	if s.push != nil {
		s.pushResult(r)
	}
	return r
}

func (st *SchedStats) add(s swarm.Stats) {
	st.Requests += int64(s.Requests)
	st.Timeouts += int64(s.Timeouts)
	st.Cancels += int64(s.Cancels)
	st.Rejects += int64(s.Rejects)
	st.Duplicates += int64(s.Duplicates)
	st.Dials += int64(s.Dials)
	st.Evicted += int64(s.Evicted)
}

// quantile of sorted values, by the nearest rank.
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// WriteText writes r for a reader: the times against the bounds, the
// origin's load, the control traffic, the tracker, the engine.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	state := "complete"
	switch {
	case r.TimedOut:
		state = "TIMED OUT (simulated time limit)"
	case !r.Complete:
		state = "INCOMPLETE"
	}
	fmt.Fprintf(&b, "peers            %d arrived, %d finished, %d killed: %s; %d paced their uploads\n", r.Arrived, r.Finished, r.Killed, state, r.Paced)
	fmt.Fprintf(&b, "file             %s in %d pieces of %s\n", units.Bytes(r.Size), r.Pieces, units.Bytes(r.PieceSize))
	fmt.Fprintf(&b, "T_KR             %.2f s (origin %.2f, slowest download %.2f, crowd %.2f); T_KR(R) %.2f s; HTTP %.1f s\n",
		r.TKR, r.TKRTerms[0], r.TKRTerms[1], r.TKRTerms[2], r.TKRR, r.HTTPBound)
	fmt.Fprintf(&b, "last             %.2f s = %.3f × T_KR (%.3f × T_KR(R))\n", r.Last, r.LastOverTKR, r.LastOverTKRR)
	fmt.Fprintf(&b, "mean             %.2f s = %.3f × T_KR (p50 %.2f s, p90 %.2f s)\n", r.Mean, r.MeanOverTKR, r.P50, r.P90)
	if len(r.Classes) > 1 {
		for _, c := range r.Classes {
			fmt.Fprintf(&b, "  class %-9s %d peers %s up / %s down: %d finished, mean %.2f s, last %.2f s, %.2f copies from the origin, %d paced\n", c.Name, c.Peers,
				rate(c.Up), rate(c.Down), c.Finished, c.Mean, c.Last, float64(c.OriginBytes)/float64(r.Size), c.Paced)
			var to []string
			for _, d := range r.Classes {
				to = append(to, fmt.Sprintf("%.2f copies to %s", float64(c.UpTo[d.Name])/float64(r.Size), d.Name))
			}
			have := make([]string, len(c.Have))
			for i, h := range c.Have {
				have[i] = fmt.Sprintf("%.0f%%", 100*h)
			}
			fmt.Fprintf(&b, "                  uploaded %s; held every 10 s: %s\n", strings.Join(to, ", "), strings.Join(have, " "))
		}
	}
	o := r.Origin
	fmt.Fprintf(&b, "origin           %s = %.3f copies; %d pieces sent (%d picked in place of the one asked), %d busy, %d in swarm\n",
		units.Bytes(r.OriginBytes), r.OriginCopies, o.Sent, o.Picked, o.Busy, o.InSwarm)
	if o.BudgetRefused+o.OverBudget > 0 {
		fmt.Fprintf(&b, "origin budget    %d refused past it, %d pieces sent past it\n", o.BudgetRefused, o.OverBudget)
	}
	fmt.Fprintf(&b, "origin fetches   in flight: mean %.2f, max %d; peers fetching: mean %.2f, max %d; bodies at once max %d\n",
		o.InFlightMean, o.InFlightMax, o.PeersMean, o.PeersMax, o.BodiesMax)
	fmt.Fprintf(&b, "  by reason      %s\n", joinCounts(o.Fetches))
	fmt.Fprintf(&b, "peer traffic     %s between peers\n", units.Bytes(r.PeerBytes))
	fmt.Fprintf(&b, "control          %d frames = %.0f per peer (%s)\n", r.Control.Frames, r.Control.PerPeer, joinCounts(r.Control.ByKind))
	t := r.Tracker
	fmt.Fprintf(&b, "tracker          %d announces (%s); its table held %d peers at most (%d at the end), swarm size up to %d\n",
		t.Announces, joinCounts(t.ByEvent), t.PeersMax, t.PeersHeld, t.EstimateMax)
	sc := r.Scheduler
	fmt.Fprintf(&b, "schedulers       %d requests, %d timeouts, %d cancels, %d rejects, %d duplicate pieces, %d dials, %d evicted\n",
		sc.Requests, sc.Timeouts, sc.Cancels, sc.Rejects, sc.Duplicates, sc.Dials, sc.Evicted)
	if r.Push != nil {
		r.Push.write(&b, r.Last)
	}
	e := r.Engine
	fmt.Fprintf(&b, "simulation       %.1f s simulated in %.1f s of wall time: %d events, %d scheduler passes (step time %v), %d max-min passes (%d cut short)\n",
		r.SimSeconds, e.WallSeconds, e.Events, e.Steps, time.Duration(e.StepTime*float64(time.Second)), e.SolverPasses, e.PassesCut)
	_, err := io.WriteString(w, b.String())
	return err
}

func rate(bps int64) string {
	if bps <= 0 {
		return "uncapped"
	}
	return strings.TrimSuffix(fmt.Sprintf("%.4g", float64(bps)*8/1e6), ".0") + " Mbit/s"
}

// joinCounts prints a map's counts by key: "a 1, b 2".
func joinCounts[V int | int64](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, cmp.Compare)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
