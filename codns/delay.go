package codns

import (
	"slices"
	"time"
)

// DelayConfig says how the delay before a lookup's first peer query
// follows the local resolver. Its zero value is the defaults.
type DelayConfig struct {
	// Initial is the delay until Window/4 local response times are known
	// (default 200 ms, CoDNS's: a healthy resolver answers within about
	// 100 ms).
	Initial time.Duration
	// Min and Max bound the delay (defaults 50 ms and 500 ms). Min keeps
	// a fast resolver's scheduling jitter from sending its lookups to the
	// peers; Max is the longest a lookup waits on a resolver that has
	// stopped answering before a peer is asked.
	Min, Max time.Duration
	// Percentile of the recent local response times the delay is drawn
	// from (default 0.5, the median), and Factor it is multiplied by
	// (default 3). The percentile must sit below the share of lookups
	// that a sick resolver stalls, with room for chance (in 64 queries of
	// a resolver that stalls a fifth, more than a quarter stall one time
	// in ten), or the delay follows the stalls up to Max: at the median,
	// up to nearly half the lookups may stall without moving it.
	Percentile, Factor float64
	// Window is how many recent local response times are kept (default
	// 64).
	Window int
	// Outcomes is how many recent lookups are remembered for whether a
	// peer won them (default 16). When peers won more than half of them
	// and the delay is at Max, the delay is 0: the local resolver is
	// failing, and every lookup goes to a peer at once, as CoDNS does.
	// Peers that win while the local resolver is merely slow (a busy
	// host) do not bring it to 0, which would double every lookup's load
	// just when the host can least take it.
	Outcomes int
}

func (c DelayConfig) withDefaults() DelayConfig {
	if c.Initial <= 0 {
		c.Initial = 200 * time.Millisecond
	}
	if c.Min <= 0 {
		c.Min = 50 * time.Millisecond
	}
	if c.Max <= 0 {
		c.Max = 500 * time.Millisecond
	}
	if c.Max < c.Min {
		c.Max = c.Min
	}
	if c.Percentile <= 0 || c.Percentile >= 1 {
		c.Percentile = 0.5
	}
	if c.Factor <= 0 {
		c.Factor = 3
	}
	if c.Window <= 0 {
		c.Window = 64
	}
	if c.Outcomes <= 0 {
		c.Outcomes = 16
	}
	return c
}

// Delay is the adaptive delay of CoDNS, a pure structure: how long a
// lookup waits for the local resolver before it also asks a peer. It is
// fed the local resolver's response times (a failure counts as the time
// it took to fail) and whether peers won the recent lookups, and holds no
// clock. Not safe for concurrent use.
type Delay struct {
	cfg      DelayConfig
	local    []time.Duration // ring of the last Window response times
	next     int
	outcomes []bool // ring of the last Outcomes lookups: did a peer win?
	nextOut  int
	nOut     int
	current  time.Duration
}

// NewDelay returns a delay at cfg.Initial.
func NewDelay(cfg DelayConfig) *Delay {
	cfg = cfg.withDefaults()
	return &Delay{
		cfg:      cfg,
		local:    make([]time.Duration, 0, cfg.Window),
		outcomes: make([]bool, cfg.Outcomes),
		current:  clampDuration(cfg.Initial, cfg.Min, cfg.Max),
	}
}

// ObserveLocal records how long the local resolver took to answer one
// query, or to fail it.
func (d *Delay) ObserveLocal(rtt time.Duration) {
	if len(d.local) < d.cfg.Window {
		d.local = append(d.local, rtt)
	} else {
		d.local[d.next] = rtt
		d.next = (d.next + 1) % d.cfg.Window
	}
	d.update()
}

// ObserveOutcome records whether a peer's answer won a lookup that asked
// the local resolver (false also for lookups that asked no peer).
func (d *Delay) ObserveOutcome(peerWon bool) {
	d.outcomes[d.nextOut] = peerWon
	d.nextOut = (d.nextOut + 1) % len(d.outcomes)
	d.nOut = min(d.nOut+1, len(d.outcomes))
}

// Current returns the delay for a lookup starting now.
func (d *Delay) Current() time.Duration {
	won := 0
	for _, w := range d.outcomes[:d.nOut] {
		if w {
			won++
		}
	}
	if 2*won > len(d.outcomes) && d.current == d.cfg.Max {
		return 0
	}
	return d.current
}

// update recomputes the delay from the response times.
func (d *Delay) update() {
	if len(d.local) < max(1, d.cfg.Window/4) {
		return // too few to draw a percentile from: keep Initial
	}
	s := slices.Clone(d.local)
	slices.Sort(s)
	i := int(d.cfg.Percentile * float64(len(s)))
	if i >= len(s) {
		i = len(s) - 1
	}
	d.current = clampDuration(time.Duration(d.cfg.Factor*float64(s[i])), d.cfg.Min, d.cfg.Max)
}

func clampDuration(v, lo, hi time.Duration) time.Duration {
	return min(max(v, lo), hi)
}
