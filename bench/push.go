package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/stampede-dev/stampede/internal/units"
)

// The push mode (issue 31, docs/push.md): one file to every host of a
// cluster of racks, and datacenters of racks, on the netns backend. Each
// rack is a bridge joined to a core bridge (or to its datacenter's, joined
// to the core) by a veth shaped with tbf both ways, its uplink; each host
// sits behind its own shaped link; the origin sits on the core behind
// origin_up, outside the racks. The systems are stampede push (a daemon
// with --cluster on every host) and three baselines: BitTorrent with the
// origin as the seed (aria2c, opentracker), every host pulling over HTTP
// from nginx on the origin, and a two-level tree (curl to one host per
// rack, then curl from it inside the rack). The harness reads every shared
// link's tc counters every 0.5 s.

// Scenario modes.
const (
	ModeCrowd = "crowd" // a flash crowd of peers (the default)
	ModePush  = "push"  // one file to every host of a cluster
)

// Push systems, in the order reports list them.
const (
	SysPush = "push" // stampede daemon --cluster on every host, stampede push
	SysTree = "tree" // curl to one host per rack, then from it inside the rack
	// SysHTTP in push mode: every host curls the file from nginx on the
	// origin host. SysAria2: aria2c, the origin seeding.
)

var pushSystems = []string{SysPush, SysAria2, SysTree, SysHTTP}

// DefaultReserve is the share of every shared link left free when a push
// scenario gives none: the thesis's queuing argument, as in cluster files.
const DefaultReserve = 0.2

// PushTopology is a push scenario's cluster: bytes/s for the links.
type PushTopology struct {
	// Racks per datacenter (all the racks when there are no datacenters).
	Racks        int   `json:"racks"`
	HostsPerRack int   `json:"hosts_per_rack"`
	HostUp       int64 `json:"host_up"`
	HostDown     int64 `json:"host_down"`
	// RackUplink is each rack's uplink's capacity, each way.
	RackUplink int64 `json:"rack_uplink"`
	// Reserve is the share of each shared link left free.
	Reserve float64 `json:"reserve"`
	// Datacenters, when set, makes that many datacenters of Racks racks
	// each, every one behind a link of DCUplink each way to the core.
	Datacenters int   `json:"datacenters,omitempty"`
	DCUplink    int64 `json:"dc_uplink,omitempty"`
	// RackRepresentatives is the cluster file's rack_representatives
	// (0: push's default).
	RackRepresentatives int `json:"rack_representatives,omitempty"`
}

// pushKeys are the scenario keys of mode = push only.
var pushKeys = []string{"racks", "hosts_per_rack", "host_up", "host_down", "rack_uplink", "reserve",
	"datacenters", "dc_uplink", "rack_representatives"}

// crowdKeys are the scenario keys of the crowd mode only.
var crowdKeys = []string{"peers", "peer_up", "peer_down", "class", "arrivals", "departure", "fault",
	"serve_args", "get_args"}

// set parses one push key; known is false for a key that is not one.
func (t *PushTopology) set(key, val string) (known bool, err error) {
	switch key {
	case "racks":
		t.Racks, err = parsePositive(val)
	case "hosts_per_rack":
		t.HostsPerRack, err = parsePositive(val)
	case "datacenters":
		t.Datacenters, err = parsePositive(val)
	case "rack_representatives":
		t.RackRepresentatives, err = parsePositive(val)
	case "host_up":
		t.HostUp, err = parseLinkRate(val)
	case "host_down":
		t.HostDown, err = parseLinkRate(val)
	case "rack_uplink":
		t.RackUplink, err = parseLinkRate(val)
	case "dc_uplink":
		t.DCUplink, err = parseLinkRate(val)
	case "reserve":
		t.Reserve, err = parseReserve(val)
	default:
		return false, nil
	}
	return true, err
}

// parseLinkRate parses a link's capacity, which must be given: a shared
// link without one has no budget to hold to.
func parseLinkRate(s string) (int64, error) {
	r, err := units.ParseRate(s)
	if err == nil && r <= 0 {
		err = fmt.Errorf("want a positive rate such as 40Mbit, got %q", s)
	}
	return r, err
}

// parseReserve parses "20%" or "0.2": a share in [0, 1).
func parseReserve(s string) (float64, error) {
	v, pct := strings.CutSuffix(s, "%")
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err == nil && pct {
		f /= 100
	}
	if err != nil || math.IsNaN(f) || f < 0 || f >= 1 {
		return 0, fmt.Errorf("want a share in [0, 100%%) such as 20%% or 0.2, got %q", s)
	}
	return f, nil
}

// RackCount is the number of racks in all.
func (t *PushTopology) RackCount() int { return t.Racks * max(t.Datacenters, 1) }

// Hosts is the number of hosts in all.
func (t *PushTopology) Hosts() int { return t.RackCount() * t.HostsPerRack }

// validate checks a push topology; missing says which required keys were
// not given (by name), for a parser to report.
func (t *PushTopology) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, k := range []struct {
		name string
		ok   bool
	}{{"racks", t.Racks > 0}, {"hosts_per_rack", t.HostsPerRack > 0}, {"host_up", t.HostUp > 0},
		{"host_down", t.HostDown > 0}, {"rack_uplink", t.RackUplink > 0}} {
		if !k.ok {
			bad("mode = push needs %s (a positive value)", k.name)
		}
	}
	if t.Reserve < 0 || t.Reserve >= 1 {
		bad("reserve %g: want a share in [0, 1)", t.Reserve)
	}
	switch {
	case t.Datacenters > 0 && t.DCUplink <= 0:
		bad("datacenters needs dc_uplink (each datacenter's link to the core)")
	case t.Datacenters == 0 && t.DCUplink > 0:
		bad("dc_uplink needs datacenters")
	}
	// Addresses are 198.19.RACK.HOST (see pushNet).
	if t.RackCount() > 250 || t.HostsPerRack > 250 {
		bad("at most 250 racks of 250 hosts (got %d racks of %d)", t.RackCount(), t.HostsPerRack)
	}
	if t.RackRepresentatives > t.HostsPerRack && t.HostsPerRack > 0 {
		bad("rack_representatives %d: a rack has only %d hosts", t.RackRepresentatives, t.HostsPerRack)
	}
	return errors.Join(errs...)
}

// validatePush is Validate for mode = push.
func (s *Scenario) validatePush() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Push == nil {
		return errors.New("mode = push without a topology")
	}
	if s.Size <= 0 {
		bad("size must be positive")
	}
	if s.OriginUp <= 0 {
		bad("mode = push needs origin_up (a positive rate: the origin's link)")
	}
	if err := s.Push.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(s.Systems) == 0 {
		bad("no systems")
	}
	for _, sys := range s.Systems {
		if !slices.Contains(pushSystems, sys) {
			bad("system %q is not one of mode = push (%s)", sys, strings.Join(pushSystems, ", "))
		}
	}
	for sys := range s.RepsBy {
		if !slices.Contains(pushSystems, sys) {
			bad("reps.%s: %q is not a system of mode = push (%s)", sys, sys, strings.Join(pushSystems, ", "))
		}
	}
	if s.Backend != BackendNetns {
		bad("mode = push runs on the netns backend only, not %q", s.Backend)
	}
	return errors.Join(errs...)
}

// pushSummary is Summary for mode = push.
func (s *Scenario) pushSummary() string {
	t := s.Push
	var b strings.Builder
	if t.Datacenters > 0 {
		fmt.Fprintf(&b, "%d datacenters × ", t.Datacenters)
	}
	fmt.Fprintf(&b, "%d racks × %d hosts, %s; hosts %s up / %s down, rack uplinks %s",
		t.Racks, t.HostsPerRack, units.Bytes(s.Size), rateString(t.HostUp), rateString(t.HostDown), rateString(t.RackUplink))
	if t.Datacenters > 0 {
		fmt.Fprintf(&b, ", datacenter links %s", rateString(t.DCUplink))
	}
	fmt.Fprintf(&b, ", origin %s up; reserve %s%%", rateString(s.OriginUp), formatFloat(t.Reserve*100))
	return b.String()
}

// PushBound is the topology's bound on the last host's time, in seconds,
// for a push that keeps every shared link within its budget (capacity less
// the reserve); docs/benchmarks.md derives it. Every rack takes at least a
// copy in over its uplink, every datacenter over its link, every host over
// its own link; the origin, outside the cluster's budgets, sends at least
// one at its full capacity; and a rack's H hosts receive H copies, which
// come over its uplink or from the hosts' own uploads:
//
//	max( F/origin_up, F/(rack_uplink·(1−r)), F/(dc_uplink·(1−r)),
//	     F/(host_down·(1−r)), H·F/((rack_uplink + H·host_up)·(1−r)) )
func PushBound(size, originUp int64, t *PushTopology) float64 {
	f := float64(size)
	keep := 1 - t.Reserve
	b := div(f, float64(originUp))
	b = max(b, div(f, float64(t.RackUplink)*keep), div(f, float64(t.DCUplink)*keep), div(f, float64(t.HostDown)*keep))
	h := float64(t.HostsPerRack)
	b = max(b, div(h*f, (float64(t.RackUplink)+h*float64(t.HostUp))*keep))
	return b
}

// finishPush ends ParseScenario for mode = push: keys of the other mode,
// defaults, what is missing, then Validate. lineOf has each key's first
// line, so every error about a key names it.
func (p *parser) finishPush(s *Scenario, t *PushTopology, systemsVal string, lineOf map[string]int) (*Scenario, error) {
	at := func(key string, format string, args ...any) {
		p.line = lineOf[key]
		p.errorf(format, args...)
	}
	for _, k := range crowdKeys {
		if _, ok := lineOf[k]; ok {
			at(k, "%s: not a key of mode = push (its keys: %s)", k, strings.Join(pushKeys, ", "))
		}
	}
	if systemsVal == "" {
		s.Systems = slices.Clone(pushSystems)
	}
	for _, sys := range s.Systems {
		if !slices.Contains(pushSystems, sys) {
			at("systems", "systems: %q is not a system of mode = push (known: %s)", sys, strings.Join(pushSystems, ", "))
		}
	}
	for sys := range s.RepsBy {
		if !slices.Contains(pushSystems, sys) {
			at("reps."+sys, "reps.%s: %q is not a system of mode = push (known: %s)", sys, sys, strings.Join(pushSystems, ", "))
		}
	}
	if _, ok := lineOf["backend"]; !ok {
		s.Backend = BackendNetns
	} else if s.Backend != BackendNetns {
		at("backend", "backend: mode = push runs on the netns backend only, not %q", s.Backend)
	}
	if _, ok := lineOf["reserve"]; !ok {
		t.Reserve = DefaultReserve
	}
	if _, ok := lineOf["dc_uplink"]; ok && t.Datacenters == 0 {
		at("dc_uplink", "dc_uplink: needs datacenters = D")
	}
	if _, ok := lineOf["datacenters"]; ok && t.DCUplink == 0 {
		at("datacenters", "datacenters: needs dc_uplink, each datacenter's link to the core (e.g. dc_uplink = 80Mbit)")
	}
	p.line = 0 // whole-file errors name no line
	for _, k := range []struct{ key, example string }{{"size", "128MiB"}, {"origin_up", "40Mbit"}, {"racks", "4"},
		{"hosts_per_rack", "6"}, {"host_up", "100Mbit"}, {"host_down", "100Mbit"}, {"rack_uplink", "40Mbit"}} {
		if _, ok := lineOf[k.key]; !ok {
			p.errorf("missing %s (e.g. %s = %s)", k.key, k.key, k.example)
		}
	}
	s.Push = t
	if len(p.errs) == 0 {
		if err := s.Validate(); err != nil {
			p.errs = append(p.errs, fmt.Errorf("%s: %w", p.name, err))
		}
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return s, nil
}
