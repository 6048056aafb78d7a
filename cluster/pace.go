package cluster

import (
	"slices"
	"time"
)

// Defaults of Pacer.
const (
	DefaultPaceInterval = 200 * time.Millisecond
	DefaultPaceIdle     = time.Second
	// paceHeadroom is how much more than it sent a sender that does not
	// use its grant is granted, so that it can grow back within a few
	// intervals.
	paceHeadroom = 1.25
	// paceSaturated: a sender that sent at least this share of its grant
	// used it all, and asks for more.
	paceSaturated = 0.9
	// prioSmoothing is the time constant of the priority traffic's
	// measured rate: it comes in bursts (a few fetches from the origin at
	// a time), and a reservation that followed each would leave the
	// senders the troughs.
	prioSmoothing = time.Second
)

// Pacer divides what a receiver may take in across a shared link (its
// share of its rack's uplink, Role.Cross) among the senders on the other
// side, so that they pace what they send into the link, and the bytes
// entering it are smooth rather than corrected after the fact by the
// receiver's reads, which let the TCP windows swing the link's load.
//
// The receiver owns a Pacer; each sender asks it for its grant every
// interval and sends at no more. Grants are max-min fair on what the
// senders use (water filling): a sender that sends less than its grant
// (it has few of the pieces wanted, or its own links hold it back) is
// granted what it sent and some headroom, and the rest goes to those
// that use all of theirs; a sender that stops asking (Idle) has finished,
// and its share goes to the others. Priority traffic the receiver takes
// in over the same link (the origin's bodies) is measured and left out
// of what is divided.
//
// The sum of the grants is Budget less the priority traffic's rate (so
// the senders together never pass it, and no part of it is kept from
// them), but for each sender's floor (Min) when the priority traffic
// leaves less than Min a sender.
//
// Pacer is pure: the caller passes the time and the byte counts, in the
// units Budget is in.
type Pacer struct {
	// Budget is the rate divided, bytes/s.
	Budget float64
	// Min is the least grant, bytes/s (default MinRate, or Budget over
	// 16 if less): a sender granted nothing would not send at all, and
	// so never show it wants more.
	Min float64
	// Interval is how often rates are measured and grants divided again
	// (default DefaultPaceInterval); Idle is how long a sender may not
	// ask before it counts as finished (default DefaultPaceIdle).
	Interval, Idle time.Duration

	senders          map[string]*paceSender
	at               time.Time // of the last division
	prio, prioBefore int64     // priority bytes now, and at the last division
	prioRate         float64
}

type paceSender struct {
	bytes, before int64     // received from it, now and at the last division
	asked         time.Time // its last ask
	grant         float64
	// demand is what it was found to use at the last measure, with
	// headroom; -1: all it can get.
	demand float64
	rate   float64 // measured at the last measure
	fresh  bool    // joined since the last measure: not measured yet
}

func (p *Pacer) defaults() {
	if p.Min <= 0 {
		p.Min = min(MinRate, p.Budget/16)
	}
	if p.Interval <= 0 {
		p.Interval = DefaultPaceInterval
	}
	if p.Idle <= 0 {
		p.Idle = DefaultPaceIdle
	}
	if p.senders == nil {
		p.senders = map[string]*paceSender{}
	}
}

// Ask is sender's ask at now: its grant, bytes/s. A new sender is
// counted as one that uses all it gets, and the grants are divided
// again at once (the others learn theirs at their next ask).
func (p *Pacer) Ask(sender string, now time.Time) float64 {
	p.defaults()
	s := p.senders[sender]
	if s == nil {
		s = &paceSender{demand: -1, fresh: true}
		p.senders[sender] = s
		s.asked = now
		p.divide(now, true)
		return s.grant
	}
	s.asked = now
	return s.grant
}

// Leave drops sender at once: it has nothing more to send.
func (p *Pacer) Leave(sender string, now time.Time) {
	p.defaults()
	if p.senders[sender] != nil {
		delete(p.senders, sender)
		p.divide(now, true)
	}
}

// Tick records the bytes received so far (cumulative) from each sender
// (received, by name) and from the priority traffic (prio), and divides
// the grants again if an interval has passed since the last division.
func (p *Pacer) Tick(now time.Time, received map[string]int64, prio int64) {
	p.defaults()
	for n, s := range p.senders {
		if b, ok := received[n]; ok {
			if s.fresh {
				s.before = b // what came before it asked is not its rate
			}
			s.bytes = b
		}
	}
	p.prio = prio
	if now.Sub(p.at) >= p.Interval {
		p.divide(now, false)
	}
}

// Grants returns every sender's grant, by name.
func (p *Pacer) Grants() map[string]float64 {
	g := make(map[string]float64, len(p.senders))
	for n, s := range p.senders {
		g[n] = s.grant
	}
	return g
}

// divide measures the rates since the last division (unless only a
// sender came or went: join, when the others' last measures stand) and
// divides the budget again.
func (p *Pacer) divide(now time.Time, join bool) {
	for n, s := range p.senders {
		if now.Sub(s.asked) >= p.Idle {
			delete(p.senders, n)
		}
	}
	dt := now.Sub(p.at).Seconds()
	measure := !join && !p.at.IsZero() && dt > 0
	type want struct {
		s      *paceSender
		demand float64 // -1: all it can get
	}
	wants := make([]want, 0, len(p.senders))
	for _, n := range sortedKeys(p.senders) {
		s := p.senders[n]
		if measure && s.fresh {
			s.fresh = false
		} else if measure && s.grant > 0 {
			// The better of the last two measures: what a sender has
			// to send comes a piece at a time.
			r := float64(s.bytes-s.before) / dt
			s.demand = -1
			if r < paceSaturated*s.grant {
				s.demand = max(p.Min, max(r, s.rate)*paceHeadroom)
			}
			s.rate = r
		}
		wants = append(wants, want{s, s.demand})
	}
	if measure {
		p.prioRate += (float64(p.prio-p.prioBefore)/dt - p.prioRate) * min(1, dt/prioSmoothing.Seconds())
		for _, w := range wants {
			w.s.before = w.s.bytes
		}
		p.prioBefore, p.at = p.prio, now
	} else if p.at.IsZero() {
		p.prioBefore, p.at = p.prio, now
	}
	if len(wants) == 0 {
		return
	}
	left := max(p.Budget-p.prioRate, p.Min*float64(len(wants)))
	// Water filling: the smallest demands first; what each leaves goes
	// to those after it.
	slices.SortStableFunc(wants, func(a, b want) int {
		switch {
		case a.demand == b.demand:
			return 0
		case a.demand < 0:
			return 1
		case b.demand < 0:
			return -1
		case a.demand < b.demand:
			return -1
		}
		return 1
	})
	for i, w := range wants {
		fair := left / float64(len(wants)-i)
		g := fair
		if w.demand >= 0 {
			g = min(fair, w.demand)
		}
		g = max(g, min(p.Min, left))
		w.s.grant = g
		left -= g
	}
	// When every sender sends less than it may, what they leave is
	// theirs too, evenly: a grant is a ceiling, not a reservation, and
	// one that has more to send can take it before the next division.
	for _, w := range wants {
		w.s.grant += left / float64(len(wants))
	}
}
