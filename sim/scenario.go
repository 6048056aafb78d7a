package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/bench"
)

// Options are what a command line changes in a bench scenario.
type Options struct {
	// Peers, if positive, is the crowd's size: the classes are scaled to
	// it, each keeping its share.
	Peers int
	// Seed, if not zero, replaces the scenario's.
	Seed uint64
	// Latency is Config.Latency.
	Latency time.Duration
	// RackSize, if positive, puts the peers in racks of RackSize (in their
	// order of arrival), each behind a shared link of RackUp up and
	// RackDown down (bytes/s, 0: uncapped) with RackLatency.
	RackSize         int
	RackUp, RackDown int64
	RackLatency      time.Duration
}

// FromScenario returns the simulation of a bench scenario, with notes on
// what of it the simulator leaves out. Peers get their classes and
// arrival times as bench gives them (the same seed, the same draws).
func FromScenario(sc *bench.Scenario, o Options) (Config, []string, error) {
	if o.Peers < 0 || o.RackSize < 0 || o.RackUp < 0 || o.RackDown < 0 || o.Latency < 0 || o.RackLatency < 0 {
		return Config{}, nil, errors.New("peers, rack size, rates and latencies must not be negative")
	}
	seed := sc.Seed
	if o.Seed != 0 {
		seed = o.Seed
	}
	classes := sc.Classes
	if o.Peers > 0 {
		classes = scaleClasses(classes, o.Peers)
	}
	var notes []string
	cfg := Config{Size: sc.Size, OriginUp: sc.OriginUp, OriginGroup: -1, Linger: sc.Departure.Linger,
		Latency: o.Latency, Seed: seed, MaxTime: sc.Timeout}
	var crowd []bench.Class
	for _, c := range classes {
		for range c.Count {
			crowd = append(crowd, c)
		}
	}
	n := len(crowd)
	if n == 0 {
		return Config{}, nil, errors.New("no peers")
	}
	// As bench spreads the classes over the arrival order.
	perm := rand.New(rand.NewPCG(seed, 0)).Perm(n)
	arrivals := sc.Arrivals.Offsets(n, rand.New(rand.NewPCG(seed, 1)))
	if sc.Arrivals.Kind == bench.ArrivePool {
		notes = append(notes, "pool arrivals: their Poisson process, without the stop once the pool is stable")
	}
	for i, j := range perm {
		c := crowd[j]
		p := Peer{Class: c.Name, Arrive: arrivals[i], Up: c.Up, Down: c.Down, Group: -1}
		if o.RackSize > 0 {
			if i%o.RackSize == 0 {
				cfg.Groups = append(cfg.Groups, Group{Name: fmt.Sprintf("rack%d", len(cfg.Groups)+1), Parent: -1,
					Up: o.RackUp, Down: o.RackDown, Latency: o.RackLatency})
			}
			p.Group = len(cfg.Groups) - 1
		}
		cfg.Peers = append(cfg.Peers, p)
	}
	for _, f := range sc.Faults {
		switch f.Kind {
		case bench.FaultKill:
			cfg.Kills = append(cfg.Kills, Kill{At: f.At, Count: f.Count})
		default:
			notes = append(notes, fmt.Sprintf("fault %q left out: the simulator kills peers, nothing else", f))
		}
	}
	if len(sc.ServeArgs) > 0 || len(sc.GetArgs) > 0 {
		notes = append(notes, fmt.Sprintf("serve_args %q and get_args %q left out: the simulated peers and origin run their defaults",
			strings.Join(sc.ServeArgs, " "), strings.Join(sc.GetArgs, " ")))
	}
	return cfg, notes, nil
}

// scaleClasses returns classes with counts adding up to n, each in
// proportion to its count (largest remainders first, then the first).
func scaleClasses(classes []bench.Class, n int) []bench.Class {
	total := 0
	for _, c := range classes {
		total += c.Count
	}
	out := slices.Clone(classes)
	type rem struct{ i, r int }
	var rems []rem
	left := n
	for i, c := range classes {
		out[i].Count = c.Count * n / total
		left -= out[i].Count
		rems = append(rems, rem{i, c.Count * n % total})
	}
	slices.SortStableFunc(rems, func(a, b rem) int { return cmp.Compare(b.r, a.r) })
	for k := 0; left > 0; k++ {
		out[rems[k%len(rems)].i].Count++
		left--
	}
	return slices.DeleteFunc(out, func(c bench.Class) bool { return c.Count == 0 })
}
