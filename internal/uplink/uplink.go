// Package uplink paces a host's uploads to peers below its uplink's
// capacity, which it measures, so that the uplink's queue stays short.
//
// A link's queue sits in front of its slowest hop, most often the home
// router or the modem, and a host that fills its uplink fills that queue:
// every packet it sends then waits there, the acknowledgements of its own
// downloads among them. On an asymmetric link the downloads stall on their
// late acknowledgements. Measured on the testbed's links (tc tbf with the
// testbed's queue sizes, one TCP download beside two saturating uploads,
// docs/benchmarks.md, "The uplink's queue"): a 1/10 Mbit/s host downloaded
// at 6.9 Mbit/s with its uplink full and at 9.5 with its uploads held to
// 0.8 Mbit/s; a 20/50 Mbit/s host at 33 and 48 Mbit/s. At 0.9 Mbit/s of
// the slow uplink the download still ran at 9.3, at 0.95 at 5.6: the edge
// is sharp, and a host cannot see its router's queue.
//
// What the host can see is what its peers acknowledged: the bytes written
// to each connection less those its send buffer still holds. Over a window
// in which the uploads waited for the uplink (for an upload turn, or for
// TCP to take their bytes) rather than for requests, that is at most the
// uplink's capacity for data, its framing and the downloads'
// acknowledgements already taken out. The Pacer starts unpaced, and once
// StartupFlat such windows in a row read no more than the most so far,
// the median of them and of the window that read that most is the
// capacity: not the most, which one window's burst would set (mixed20 on
// the testbed: 1 Mbit/s uplinks read at 110-163 KB/s with the most,
// 102-129 KB/s with the median; 119.7 KB/s of payload). It then sends at
// Fraction of it, holds the reading while its own pace is what holds the
// uploads back (a paced link reads no more than its pace), and lets it
// decay otherwise; every ProbeEvery windows of held-back uploads it sends
// one window at ProbeGain of it, and a probe that reads more (grew times
// it) starts it over, unpaced; one that reads less leaves the capacity as
// it was, so that a token bucket's burst or a bunch of acknowledgements,
// read by a probe, does not ratchet the capacity up, and the pace past
// the link (on the testbed 1 Mbit/s uplinks were read at up to 152 KB/s).
// A link shared with other work thus gets its share read again. It paces
// only while the host downloads at Asymmetry times the capacity or more:
// the harm is a download's acknowledgements waiting the queue's time, and
// a download at about the uplink's rate has a window that covers it, so
// in a crowd of equal links, whose uplinks are its bottleneck, pacing
// would only take a fifth of them (flash50 on the testbed: 50.5 s paced
// against 43.6 s, one run each at load 100).
//
// Fraction leaves a fifth: the edge above is at 0.9-0.95 of the link's
// rate, and the readings came up to 12% over it on the testbed (the
// token bucket's burst, acknowledgements that arrive in bunches), so 0.8
// of a reading is 0.8-0.9 of the link. It is the bandwidth-state
// adaptation of Slurpie, kept below the link where uTP and LEDBAT keep a
// delay target: a delay target read from TCP's round trips also counts
// the far ends' queues and our own downlink's, and collapsed a mixed crowd
// on the testbed (docs/benchmarks.md, issue 30's second pass).
//
// The pace is an average, and each write reaches the queue at once: while
// it paces, uploads write about stepTime's worth at a time (Step).
package uplink

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

const (
	// Window is how often the capacity is read: two seconds, so that a
	// reading is not a burst of acknowledgements.
	Window = 2 * time.Second
	// Fraction of the capacity is what the host sends: the queue in
	// front of the uplink drains at the rest (see the package comment
	// for why a fifth).
	Fraction = 0.8
	// ProbeGain is a probe window's pace, over the capacity.
	ProbeGain = 1.25
	// ProbeEvery is how many windows of held-back uploads come between
	// two probes.
	ProbeEvery = 4
	// Decay is what a window in which the pace held nothing back leaves
	// of the capacity, unless it read more.
	Decay = 0.95
	// MinCapacity (bytes/s): below it nothing was measured, and the
	// uploads go unpaced.
	MinCapacity = 16 << 10
	// Asymmetry: the uploads are paced only while the host downloads at
	// least this many times its uplink's capacity. A download that
	// needs no more than the uplink's rate is not held back by
	// acknowledgements waiting a queue's time (its window covers it),
	// and a crowd whose uplinks are its bottleneck would lose a fifth of
	// them for nothing.
	Asymmetry = 2
	// grew: a reading this much over the most read so far is a link
	// still finding its rate, or a faster one.
	grew = 1.1
	// maxStep is the most one wait asks of the bucket.
	maxStep = 16 << 10
	// stepTime is how long one write takes at the pace (Step): the
	// queue it makes in front of the uplink lasts about as long.
	stepTime = 50 * time.Millisecond
	// minStep is the least Step gives: frames much smaller than this
	// cost more in headers and writes than the queue they spare.
	minStep = 4 << 10
)

// Estimator is the Pacer's pure core: windows of delivered bytes, of time
// spent waiting for the pace and of time pieces waited for an upload
// turn in, the pace out. Not safe for concurrent use.
//
// It starts unpaced, reading the most delivered. Once StartupFlat windows
// in a row in which pieces waited for a turn (the uplink, not the
// requests, held them back) read no more than grew times that most, the
// median of them and of the window that read the most is the capacity,
// and the uploads are paced at Fraction of it.
type Estimator struct {
	paced    bool    // a capacity is read: the uploads go at its pace
	capacity float64 // bytes/s, while paced
	best     float64 // unpaced: the most read
	last     float64 // the capacity last read, kept when started over
	flat     int     // unpaced: backlogged windows in a row that read no more

	// unpaced: the readings of the window that set best and of the
	// backlogged ones since, the last StartupFlat+1 of them
	run  [StartupFlat + 1]float64
	runN int

	engaged bool // paced, and the last window downloaded Asymmetry times the capacity

	at      time.Time
	recv    int64         // downloaded in the window
	bytes   int64         // delivered in the window
	waited  time.Duration // uploads held back by the pace in the window
	backlog time.Duration // pieces waited for an upload turn in the window

	held    int     // paced windows holding back since the last probe
	probing bool    // this window is a probe
	settle  bool    // this window follows a probe: judge it at its end
	before  float64 // the capacity before the probe
}

// StartupFlat is how many backlogged windows in a row that read no more
// end the unpaced start.
const StartupFlat = 2

// Delivered adds n bytes acknowledged by peers.
func (e *Estimator) Delivered(n int64) {
	if n > 0 {
		e.bytes += n
	}
}

// Received adds n bytes downloaded.
func (e *Estimator) Received(n int64) {
	if n > 0 {
		e.recv += n
	}
}

// Waited adds d that an upload waited for the pace.
func (e *Estimator) Waited(d time.Duration) { e.waited += d }

// Backlogged adds d that a piece waited for an upload turn.
func (e *Estimator) Backlogged(d time.Duration) { e.backlog += d }

// Capacity is the uplink's capacity for data as last read, in bytes/s;
// 0 if not read yet.
func (e *Estimator) Capacity() float64 {
	if e.paced {
		return e.capacity
	}
	return e.last
}

// Pace is the bytes per second uploads may go at now; 0 means unpaced.
func (e *Estimator) Pace() float64 {
	switch {
	case !e.paced || !e.engaged:
		return 0
	case e.probing:
		return ProbeGain * e.capacity
	}
	return Fraction * e.capacity
}

// Tick closes the window at now once it is Window long, and reports
// whether the pace changed.
func (e *Estimator) Tick(now time.Time) bool {
	if e.at.IsZero() {
		e.at = now
		return false
	}
	span := now.Sub(e.at)
	if span < Window {
		return false
	}
	old := e.Pace()
	rate, down := float64(e.bytes)/span.Seconds(), float64(e.recv)/span.Seconds()
	held, backlogged := e.waited >= span/10, e.backlog >= span/10
	e.at, e.bytes, e.recv, e.waited, e.backlog = now, 0, 0, 0, 0
	if e.paced {
		e.pacedTick(rate, held)
	} else {
		e.start(rate, backlogged)
	}
	e.engaged = e.paced && down >= Asymmetry*e.capacity
	return e.Pace() != old
}

// pacedTick is Tick while paced, for a window that read rate.
func (e *Estimator) pacedTick(rate float64, held bool) {
	switch {
	case rate > e.capacity:
		e.capacity = rate
	case !held:
		e.capacity = max(rate, e.capacity*Decay)
	}
	if e.capacity >= MinCapacity {
		e.last = e.capacity
	}
	switch {
	case e.capacity < MinCapacity:
		// Nothing to send for long: read it again when there is.
		*e = Estimator{at: e.at, last: e.last}
	case e.probing:
		// What the probe sent is acknowledged partly in the next
		// window: judge it there.
		e.probing, e.settle = false, true
	case e.settle:
		e.settle = false
		if e.capacity >= grew*e.before {
			// A faster link: unpaced again until it is read.
			e.paced = false
			e.restart(e.capacity)
			break
		}
		// No faster: what the probe read over the capacity is a
		// burst (a token bucket's, acknowledgements in a bunch), not
		// the link. Kept, every probe would ratchet the capacity up
		// by its noise, and the pace past the link.
		e.capacity = min(e.capacity, e.before)
	case held:
		e.held++
		if e.held >= ProbeEvery {
			e.probing, e.held, e.before = true, 0, e.capacity
		}
	}
}

// start is Tick while unpaced.
func (e *Estimator) start(rate float64, backlogged bool) {
	switch {
	case rate > grew*e.best:
		e.restart(rate)
	case backlogged:
		e.best = max(e.best, rate)
		e.flat++
		e.record(rate)
	default: // the requests, not the uplink, held it: no reading
		e.best = max(e.best, rate)
	}
	if e.flat >= StartupFlat && e.best >= MinCapacity {
		if c := e.median(); c >= MinCapacity {
			e.paced, e.capacity, e.held = true, c, 0
		}
	}
	if e.paced {
		e.last = e.capacity
	}
}

// restart begins an unpaced run at a window that read rate, the most so
// far.
func (e *Estimator) restart(rate float64) {
	e.best, e.flat, e.runN = rate, 0, 0
	e.record(rate)
}

// record adds a window's reading to the run, dropping its oldest once it
// holds StartupFlat+1.
func (e *Estimator) record(rate float64) {
	if e.runN == len(e.run) {
		copy(e.run[:], e.run[1:])
		e.runN--
	}
	e.run[e.runN] = rate
	e.runN++
}

// median is the run's median reading: the capacity the start reads. Not
// its most, which one window's burst (a token bucket's, acknowledgements
// in a bunch) would set: a reading past grew times the most starts a run,
// and the flat windows after it read no more than it.
func (e *Estimator) median() float64 {
	r := e.run // a copy: sorted here, the run keeps its order for record
	w := r[:e.runN]
	slices.Sort(w)
	return w[len(w)/2]
}

// Pacer is an Estimator shared by every upload of a host, in front of a
// token bucket at its pace. A nil *Pacer does not pace.
type Pacer struct {
	mu  sync.Mutex // guards the following
	est Estimator
	lim *rate.Limiter
}

// New returns a Pacer that sends unpaced until it has read a capacity.
func New() *Pacer {
	return &Pacer{lim: rate.NewLimiter(rate.Inf, maxStep)}
}

// Delivered adds sent bytes that peers acknowledged and received bytes
// downloaded since the last call, and closes the window if it is due (a
// node calls it about once a second).
func (p *Pacer) Delivered(now time.Time, sent, received int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.est.Delivered(sent)
	p.est.Received(received)
	if !p.est.Tick(now) {
		return
	}
	pace := p.est.Pace()
	if pace == 0 {
		p.lim.SetLimitAt(now, rate.Inf)
		return
	}
	// A burst of a fiftieth of a second, at least one step: short
	// enough that a second's bytes stay within its pace.
	p.lim.SetBurstAt(now, max(maxStep, int(pace/50)))
	p.lim.SetLimitAt(now, rate.Limit(pace))
}

// Backlogged adds d that a piece waited for an upload turn.
func (p *Pacer) Backlogged(d time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.est.Backlogged(d)
	p.mu.Unlock()
}

// WaitN blocks until n more bytes may go at the pace.
func (p *Pacer) WaitN(ctx context.Context, n int) error {
	if p == nil {
		return nil
	}
	start := time.Now()
	for n > 0 {
		k := min(n, maxStep)
		if err := p.lim.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	if d := time.Since(start); d > time.Millisecond {
		p.mu.Lock()
		p.est.Waited(d)
		p.mu.Unlock()
	}
	return nil
}

// Step returns the most bytes an upload should write at once, up to
// most: most while unpaced, else about stepTime's worth at the pace.
//
// The pace is an average; what reaches the uplink's queue is each write,
// at once. Written a 64 KiB piece at a time, uploads paced at 94 KB/s on
// a 1/10 Mbit/s link of the testbed's (tc tbf, 16 KiB bucket) halved a
// download that keeps one 64 KiB request in flight, from 1204 to 655
// KB/s, its requests and acknowledgements waiting behind each piece in
// the queue (p90 of the round trip 229 ms against 55); written 16 or 4
// KiB at a time, at the same pace, they took nothing from it
// (docs/benchmarks.md, issue 30's tenth pass). A stampede peer keeps one
// or two requests in flight to each neighbour.
func (p *Pacer) Step(most int) int {
	if p == nil {
		return most
	}
	p.mu.Lock()
	pace := p.est.Pace()
	p.mu.Unlock()
	if pace == 0 {
		return most
	}
	return min(most, max(minStep, int(pace*stepTime.Seconds())))
}

// Rates returns the capacity read and the pace, in bytes/s (0: none).
func (p *Pacer) Rates() (capacity, pace float64) {
	if p == nil {
		return 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.est.Capacity(), p.est.Pace()
}
