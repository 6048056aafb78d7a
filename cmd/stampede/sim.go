package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/bench"
	"github.com/stampede-dev/stampede/internal/units"
	"github.com/stampede-dev/stampede/sim"
)

const simAbout = `Simulate a scenario with far more peers than the testbed runs: every peer is
the real swarm scheduler, the tracker is the real tracker, and the network is
simulated (each host's upload and download capacity, shared rack links,
transfers sharing links max-min fairly, latencies), in simulated time.
SCENARIO is a scenario file or the name of a standard one, as for bench
('stampede bench --list'); --peers scales its crowd, each class keeping its
share. Prints the completion times against T_KR, the origin's load (copies,
fetches in flight), the control frames per peer and the tracker's state;
--json prints them as JSON. A push scenario (mode = push) simulates the
push agents over its racks (--racks, --hosts-per-rack to scale it) and
prints the last host against the topology bound and the bytes into the
racks. Progress goes to stderr every few seconds.
docs/sim.md describes the model and what it leaves out.`

// simReport is what sim --json prints.
type simReport struct {
	Scenario string      `json:"scenario"`
	Summary  string      `json:"summary"`
	Seed     uint64      `json:"seed"`
	Latency  string      `json:"latency"`
	Queue    int64       `json:"queue"`
	Notes    []string    `json:"notes,omitempty"`
	Result   *sim.Result `json:"result"`
}

func runSim(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "sim", "SCENARIO", simAbout)
	var (
		peers    = fs.Int("peers", 0, "simulate `N` peers, the scenario's classes scaled to it (default: the scenario's crowd)")
		seed     = fs.Uint64("seed", 0, "seed of the run (default: the scenario's)")
		latency  = fs.Duration("latency", sim.DefaultLatency, "one-way latency of each host's own link")
		queue    = fs.String("queue", "0", "bytes a saturated link's bottleneck buffer holds, which whatever crosses it waits behind (`SIZE`, as 64KiB; docs/sim.md)")
		step     = fs.Duration("step-time", 0, "how long a pass of a peer's loop takes: the events that come meanwhile go to its scheduler together; longer runs faster (0: "+sim.DefaultStepTime.String()+", or T_KR/100 if less; docs/sim.md)")
		rackSize = fs.Int("rack-size", 0, "put the peers in racks of `N`, in their order of arrival, each behind a shared link (--rack-link)")
		rackLink = fs.String("rack-link", "0", "capacity of each rack's link, each way (`RATE`, as 1Gbit; 0: uncapped)")
		rackLat  = fs.Duration("rack-latency", 0, "one-way latency of each rack's link")
		racks    = fs.Int("racks", 0, "a push scenario's racks (per datacenter), in place of the scenario's")
		perRack  = fs.Int("hosts-per-rack", 0, "a push scenario's hosts per rack, in place of the scenario's")
		noPacing = fs.Bool("no-pacing", false, "the peers upload as fast as their uplinks take, as stampede get --no-pacing (by default each paces its uploads below its uplink's measured capacity, as get does; docs/sim.md)")
		maxTime  = fs.Duration("max-time", 0, "stop after this much simulated time (default: the scenario's timeout, else 1h)")
		asJSON   = fs.Bool("json", false, "print the result as JSON")
		quiet    = fs.BoolP("quiet", "q", false, "no progress on stderr")
	)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return usageErrorf("want one SCENARIO (a file, or one of: %s)", strings.Join(bench.StandardScenarios(), ", "))
	case fs.Changed("peers") && *peers < 1:
		return usageErrorf("--peers %d: want at least 1", *peers)
	case *latency < 0 || *rackLat < 0 || *maxTime < 0:
		return usageErrorf("--latency, --rack-latency and --max-time must not be negative")
	case *step < 0:
		return usageErrorf("--step-time must not be negative")
	case *rackSize < 0:
		return usageErrorf("--rack-size %d: want at least 1, or 0 for no racks", *rackSize)
	case *racks < 0 || *perRack < 0:
		return usageErrorf("--racks and --hosts-per-rack must not be negative")
	}
	rack, err := units.ParseRate(*rackLink)
	if err != nil {
		return usageErrorf("--rack-link: %v", err)
	}
	q, err := units.ParseSize(*queue)
	if err != nil {
		return usageErrorf("--queue: %v", err)
	}
	if rack > 0 && *rackSize == 0 {
		return usageErrorf("--rack-link needs --rack-size")
	}
	sc, err := bench.LoadScenario(pos[0])
	if err != nil {
		return withCode(exitUsage, err)
	}
	cfg, notes, err := sim.FromScenario(sc, sim.Options{Peers: *peers, Seed: *seed, Latency: *latency, Queue: q,
		RackSize: *rackSize, RackUp: rack, RackDown: rack, RackLatency: *rackLat, Racks: *racks, HostsPerRack: *perRack})
	if err != nil {
		return withCode(exitUsage, err)
	}
	cfg.StepTime = *step
	cfg.NoPacing = *noPacing
	if *latency == 0 {
		cfg.Latency = -1 // none: the package's zero means its default
	}
	if *maxTime > 0 {
		cfg.MaxTime = *maxTime
	}
	if !*quiet {
		cfg.Progress = simProgress(e)
	}
	res, err := sim.Run(ctx, cfg)
	if res == nil {
		return withCode(exitUsage, err)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "stampede sim: stopped (%v); the figures so far:\n", err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", " ")
		if werr := enc.Encode(simReport{Scenario: sc.Name, Summary: summary(sc, cfg), Seed: cfg.Seed,
			Latency: latency.String(), Queue: q, Notes: notes, Result: res}); werr != nil {
			return withCode(exitIO, werr)
		}
	} else {
		fmt.Fprintf(e.stdout, "scenario         %s: %s\n", sc.Name, summary(sc, cfg))
		fmt.Fprintf(e.stdout, "model            latency %v a host link, queue %s a saturated link, seed %d\n", *latency, units.Bytes(q), cfg.Seed)
		for _, n := range notes {
			fmt.Fprintf(e.stdout, "note             %s\n", n)
		}
		if werr := res.WriteText(e.stdout); werr != nil {
			return withCode(exitIO, werr)
		}
	}
	switch {
	case err != nil:
		return err
	case !res.Complete:
		return fmt.Errorf("%d of the %d peers that arrived did not finish", res.Arrived-res.Killed-res.Finished, res.Arrived)
	}
	return nil
}

// summary describes the crowd as simulated: the scenario's classes with
// their simulated counts.
func summary(sc *bench.Scenario, cfg sim.Config) string {
	counts := map[string]int{}
	for _, p := range cfg.Peers {
		counts[p.Class]++
	}
	s := *sc
	if sc.Push != nil && cfg.Push != nil {
		// --racks and --hosts-per-rack: the topology simulated.
		t := *sc.Push
		t.HostsPerRack = len(cfg.Push.Plan.Racks[cfg.Groups[len(cfg.Groups)-1].Name])
		t.Racks = len(cfg.Push.Plan.Racks) / max(t.Datacenters, 1)
		s.Push = &t
	}
	s.Classes = nil
	for _, c := range sc.Classes {
		if counts[c.Name] > 0 {
			c.Count = counts[c.Name]
			s.Classes = append(s.Classes, c)
		}
	}
	return s.Summary()
}

// simProgress prints a line on stderr every few seconds of a long run.
func simProgress(e *env) func(sim.Progress) {
	var last time.Duration
	return func(p sim.Progress) {
		if p.Wall-last < simProgressEvery {
			return
		}
		last = p.Wall
		fmt.Fprintf(e.stderr, "sim: %5.1f s simulated: %d of %d peers arrived, %d finished; origin %.2f copies; %.0f s of wall time\n",
			p.SimTime.Seconds(), p.Arrived, p.Peers, p.Finished, p.OriginCopies, p.Wall.Seconds())
	}
}

// simProgressEvery is how often, in wall time, a progress line is printed.
const simProgressEvery = 5 * time.Second
