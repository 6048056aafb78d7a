package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
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
	// Latency and Queue are Config's.
	Latency time.Duration
	Queue   int64
	// RackSize, if positive, puts the peers in racks of RackSize (in their
	// order of arrival), each behind a shared link of RackUp up and
	// RackDown down (bytes/s, 0: uncapped) with RackLatency.
	RackSize         int
	RackUp, RackDown int64
	RackLatency      time.Duration
	// Racks and HostsPerRack, if positive, replace a push scenario's.
	Racks, HostsPerRack int
}

// FromScenario returns the simulation of a bench scenario, with notes on
// what of it the simulator leaves out. Peers get their classes and
// arrival times as bench gives them (the same seed, the same draws).
func FromScenario(sc *bench.Scenario, o Options) (Config, []string, error) {
	if o.Peers < 0 || o.RackSize < 0 || o.RackUp < 0 || o.RackDown < 0 || o.Latency < 0 || o.RackLatency < 0 || o.Queue < 0 {
		return Config{}, nil, errors.New("peers, rack size, rates, latencies and queue must not be negative")
	}
	seed := sc.Seed
	if o.Seed != 0 {
		seed = o.Seed
	}
	if sc.Mode == bench.ModePush {
		return fromPush(sc, o, seed)
	}
	if o.Racks > 0 || o.HostsPerRack > 0 {
		return Config{}, nil, errors.New("racks and hosts per rack are a push scenario's (mode = push)")
	}
	classes := sc.Classes
	if o.Peers > 0 {
		classes = scaleClasses(classes, o.Peers)
	}
	var notes []string
	cfg := Config{Size: sc.Size, OriginUp: sc.OriginUp, Linger: sc.Departure.Linger,
		Latency: o.Latency, Queue: o.Queue, Seed: seed, MaxTime: sc.Timeout}
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
		p := Peer{Class: c.Name, Arrive: arrivals[i], Up: c.Up, Down: c.Down}
		if o.RackSize > 0 {
			if i%o.RackSize == 0 {
				cfg.Groups = append(cfg.Groups, Group{Name: fmt.Sprintf("rack%d", len(cfg.Groups)+1),
					Up: o.RackUp, Down: o.RackDown, Latency: o.RackLatency})
			}
			p.Group = cfg.Groups[len(cfg.Groups)-1].Name
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
	rest, err := serveArgs(&cfg, sc.ServeArgs)
	if err != nil {
		return Config{}, nil, fmt.Errorf("serve_args: %w", err)
	}
	if len(rest) > 0 {
		notes = append(notes, fmt.Sprintf("serve_args %q left out: the simulated origin knows --max-copies, --budget-window and --resend-after",
			strings.Join(rest, " ")))
	}
	if len(sc.GetArgs) > 0 {
		notes = append(notes, fmt.Sprintf("get_args %q left out: the simulated peers run get's defaults", strings.Join(sc.GetArgs, " ")))
	}
	return cfg, notes, nil
}

// fromPush is FromScenario for mode = push: a push over the scenario's
// topology (push.go).
func fromPush(sc *bench.Scenario, o Options, seed uint64) (Config, []string, error) {
	if o.Peers > 0 || o.RackSize > 0 {
		return Config{}, nil, errors.New("a push scenario's hosts are its racks' (racks, hosts per rack), not a crowd")
	}
	t := *sc.Push
	if o.Racks > 0 {
		t.Racks = o.Racks
	}
	if o.HostsPerRack > 0 {
		t.HostsPerRack = o.HostsPerRack
	}
	cfg, err := NewPushConfig(t, sc.Size, sc.OriginUp)
	if err != nil {
		return Config{}, nil, err
	}
	cfg.Latency, cfg.Queue, cfg.Seed, cfg.MaxTime = o.Latency, o.Queue, seed, sc.Timeout
	notes := []string{"push: the agents' plan, gate, shares and budgets as package daemon has them; the systems besides push are not simulated"}
	return cfg, notes, nil
}

// serveArgs applies the flags of stampede serve that the simulated origin
// has to cfg, and returns the others.
func serveArgs(cfg *Config, args []string) (rest []string, err error) {
	for i := 0; i < len(args); i++ {
		name, val, inline := strings.Cut(args[i], "=")
		switch name {
		case "--max-copies", "--budget-window", "--resend-after":
		default:
			rest = append(rest, args[i])
			continue
		}
		if !inline {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("%s needs a value", name)
			}
			i++
			val = args[i]
		}
		switch name {
		case "--max-copies":
			if strings.EqualFold(val, "off") {
				cfg.MaxCopies = -1
			} else if cfg.MaxCopies, err = strconv.ParseFloat(val, 64); err != nil || cfg.MaxCopies < 1 {
				return nil, fmt.Errorf("--max-copies %q: want a number of copies, at least 1, or off", val)
			}
		case "--budget-window", "--resend-after":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("%s %q: want a duration", name, val)
			}
			if name == "--budget-window" {
				cfg.BudgetWindow = d
			} else {
				cfg.ResendAfter = d
				if d == 0 {
					cfg.ResendAfter = -1 // serve's 0: always send them again
				}
			}
		}
	}
	return rest, nil
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
