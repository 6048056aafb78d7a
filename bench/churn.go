package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/internal/units"
)

// The churn mode (issue 34, docs/benchmarks.md "Churn"): a small object
// and visitors arriving as a Poisson process, at each of several rates in
// turn, each leaving the moment it has the object; Flashback's setting.
// Peers come in classes, each on a few pooled hosts (network namespaces
// that many peer processes share, each with its own ports), and a class
// may sit behind a NAT of one kind, made with nftables. The systems are
// those of the crowd mode: stampede, aria2 (BitTorrent) and plain HTTP.

// ModeChurn is a scenario of small objects under churn (this file).
const ModeChurn = "churn"

// NAT kinds a churn class may sit behind ("" is a public address).
const (
	NATFullCone       = "full-cone"
	NATPortRestricted = "port-restricted"
	NATSymmetric      = "symmetric"
)

var natKinds = []string{NATFullCone, NATPortRestricted, NATSymmetric}

// churnSystems are the systems of mode = churn.
var churnSystems = []string{SysStampede, SysAria2, SysHTTP}

// DefaultChurnHosts is the most hosts (namespaces) a churn class's peers
// are pooled on when the class says none.
const DefaultChurnHosts = 4

// ChurnSpec is a churn scenario's arrival process; the object's size is
// the scenario's Size.
type ChurnSpec struct {
	// Rates are the arrival rates, per second, run one after the other.
	Rates []float64 `json:"rates"`
	// Duration is how long arrivals go on at each rate.
	Duration time.Duration `json:"duration"`
}

// churnKeys are the scenario keys of mode = churn only.
var churnKeys = []string{"object", "rates", "duration"}

// set parses one churn key; known is false for a key that is not one.
// object is the scenario's size, parsed by the caller.
func (c *ChurnSpec) set(key, val string) (known bool, err error) {
	switch key {
	case "rates":
		c.Rates, err = parseRates(val)
	case "duration":
		c.Duration, err = time.ParseDuration(val)
		if err == nil && c.Duration <= 0 {
			err = fmt.Errorf("want a positive duration such as 30s, got %q", val)
		}
	default:
		return false, nil
	}
	return true, err
}

// parseRates parses "1,2,4,8,16" (arrivals per second; "/s" or "/m" may
// follow each).
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		r, err := parsePerSecond(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if math.IsInf(r, 0) || math.IsNaN(r) {
			return nil, fmt.Errorf("bad rate %q", f)
		}
		out = append(out, r)
	}
	return out, nil
}

// Hosts is how many hosts (namespaces) class c's peers are pooled on in
// mode = churn: Hosts if given, else min(Count, DefaultChurnHosts); a
// full-cone NAT has one (it forwards every port of its address to one
// host, which is what makes it full-cone).
func (c Class) churnHosts() int {
	switch {
	case c.NAT == NATFullCone:
		return 1
	case c.Hosts > 0:
		return c.Hosts
	}
	return max(min(c.Count, DefaultChurnHosts), 1)
}

// hasNAT says whether a class of the scenario sits behind a NAT.
func (s *Scenario) hasNAT() bool {
	return slices.ContainsFunc(s.Classes, func(c Class) bool { return c.NAT != "" })
}

// validateChurn is Validate for mode = churn.
func (s *Scenario) validateChurn() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Churn == nil {
		return errors.New("mode = churn without rates and duration")
	}
	if s.Size <= 0 {
		bad("object must be positive")
	}
	if s.OriginUp < 0 {
		bad("origin_up must not be negative")
	}
	if len(s.Churn.Rates) == 0 {
		bad("mode = churn needs rates (e.g. rates = 1,2,4,8,16)")
	}
	for _, r := range s.Churn.Rates {
		if r <= 0 || r > 1000 {
			bad("rate %g: want more than 0 and at most 1000 per second", r)
		}
	}
	if s.Churn.Duration <= 0 {
		bad("mode = churn needs a positive duration")
	}
	if len(s.Classes) == 0 {
		bad("no peers: give peers = N (with peer_up, peer_down) or class lines")
	}
	hosts, nats := 0, 0
	for _, c := range s.Classes {
		if c.Count <= 0 || c.Up < 0 || c.Down < 0 || c.Hosts < 0 {
			bad("class %s: count must be positive, caps and hosts not negative", c.Name)
		}
		if c.NAT != "" && !slices.Contains(natKinds, c.NAT) {
			bad("class %s: nat %q: want %s", c.Name, c.NAT, strings.Join(natKinds, ", "))
		}
		if c.NAT != "" {
			nats++
		}
		hosts += c.churnHosts()
	}
	// Addresses: public hosts 198.20.1-4.x, NATs' LANs 10.89.K.0/24.
	if hosts > 500 || nats > 200 {
		bad("%d hosts and %d NATs: at most 500 hosts and 200 NATs (pool more peers on fewer hosts)", hosts, nats)
	}
	if s.Departure.Linger < 0 {
		bad("departure linger must not be negative")
	}
	if len(s.Systems) == 0 {
		bad("no systems")
	}
	for _, sys := range s.Systems {
		if !slices.Contains(churnSystems, sys) {
			bad("system %q is not one of mode = churn (%s)", sys, strings.Join(churnSystems, ", "))
		}
	}
	for sys := range s.RepsBy {
		if !slices.Contains(churnSystems, sys) {
			bad("reps.%s: %q is not a system of mode = churn (%s)", sys, sys, strings.Join(churnSystems, ", "))
		}
	}
	if s.Backend != BackendNetns {
		bad("mode = churn runs on the netns backend only, not %q", s.Backend)
	}
	return errors.Join(errs...)
}

// churnSummary is Summary for mode = churn.
func (s *Scenario) churnSummary() string {
	var b strings.Builder
	var rates []string
	for _, r := range s.Churn.Rates {
		rates = append(rates, formatFloat(r))
	}
	fmt.Fprintf(&b, "churn: %s object, arrivals %s/s for %v each, origin %s up", units.Bytes(s.Size),
		strings.Join(rates, ","), s.Churn.Duration, rateString(s.OriginUp))
	for _, c := range s.Classes {
		fmt.Fprintf(&b, "; %s (weight %d, %d hosts) %s up / %s down", c.Name, c.Count, c.churnHosts(), rateString(c.Up), rateString(c.Down))
		if c.NAT != "" {
			fmt.Fprintf(&b, " behind a %s NAT", c.NAT)
		}
	}
	fmt.Fprintf(&b, "; %s", s.Departure)
	return b.String()
}

// finishChurn ends ParseScenario for mode = churn: keys of the other
// modes, defaults, what is missing, then Validate. lineOf has each key's
// first line, so every error about a key names it.
func (p *parser) finishChurn(s *Scenario, c *ChurnSpec, systemsVal string, lineOf map[string]int) (*Scenario, error) {
	at := func(key string, format string, args ...any) {
		p.line = lineOf[key]
		p.errorf(format, args...)
	}
	for _, k := range append([]string{"size", "arrivals", "fault"}, pushKeys...) {
		if _, ok := lineOf[k]; ok {
			hint := ""
			switch k {
			case "size":
				hint = " (object gives the size)"
			case "arrivals":
				hint = " (rates and duration give the arrivals)"
			}
			at(k, "%s: not a key of mode = churn%s", k, hint)
		}
	}
	if systemsVal == "" {
		s.Systems = slices.Clone(churnSystems)
	}
	for _, sys := range s.Systems {
		if !slices.Contains(churnSystems, sys) {
			at("systems", "systems: %q is not a system of mode = churn (known: %s)", sys, strings.Join(churnSystems, ", "))
		}
	}
	if _, ok := lineOf["backend"]; !ok {
		s.Backend = BackendNetns
	} else if s.Backend != BackendNetns {
		at("backend", "backend: mode = churn runs on the netns backend only, not %q", s.Backend)
	}
	p.line = 0
	for _, k := range []struct{ key, example string }{{"object", "64KiB"}, {"origin_up", "8Mbit"},
		{"rates", "1,2,4,8,16"}, {"duration", "30s"}} {
		if _, ok := lineOf[k.key]; !ok {
			p.errorf("missing %s (e.g. %s = %s)", k.key, k.key, k.example)
		}
	}
	s.Churn = c
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

// churnClassField parses a class field of mode = churn (nat=, hosts=);
// known is false for another field.
func churnClassField(c *Class, k, v string) (known bool, err error) {
	switch k {
	case "nat":
		if v != "public" && !slices.Contains(natKinds, v) {
			return true, fmt.Errorf("nat %q: want %s or public", v, strings.Join(natKinds, ", "))
		}
		if v != "public" {
			c.NAT = v
		}
	case "hosts":
		c.Hosts, err = parsePositive(v)
	default:
		return false, nil
	}
	return true, err
}

// churnArrival is one arrival of a churn run: when, in which class, on
// which of the class's hosts.
type churnArrival struct {
	At    time.Duration
	Class int
	Host  int // index into the class's hosts
}

// churnSchedule draws the Poisson arrivals at rate for d: exponential
// gaps, the first at 0; each arrival's class is drawn by the classes'
// counts, and its host is the next of its class's, round robin. next
// holds each class's round-robin position across calls.
func churnSchedule(rate float64, d time.Duration, classes []Class, next []int, expo func() float64, unif func() float64) []churnArrival {
	total := 0
	for _, c := range classes {
		total += c.Count
	}
	var out []churnArrival
	for t := 0.0; t < d.Seconds(); t += expo() / rate {
		k, x := 0, unif()*float64(total)
		for k < len(classes)-1 && x >= float64(classes[k].Count) {
			x -= float64(classes[k].Count)
			k++
		}
		out = append(out, churnArrival{At: time.Duration(t * float64(time.Second)), Class: k, Host: next[k] % classes[k].churnHosts()})
		next[k]++
	}
	return out
}

// churnRateLabel prints a rate for tables: "16/s".
func churnRateLabel(r float64) string { return strconv.FormatFloat(r, 'g', 4, 64) + "/s" }
