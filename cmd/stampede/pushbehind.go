package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/daemon"
)

// Racks behind (docs/push.md): a rack whose active representatives are
// slow, not gone, keeps its hosts from falling back on their own (a
// trickle of pieces is progress), so the pusher, which sees every rack,
// tells its standby to take over.
const (
	// defaultBehindAfter is how long a rack must stay behind before its
	// standby is told to take over: the agents' own Fallback, so a
	// trickle is treated as no piece at all would be.
	defaultBehindAfter = daemon.DefaultPushFallback
	// behindRateWindow is what a rack's rate is measured over: a few
	// pieces' time, so one piece arriving late is not a stall.
	behindRateWindow = 3 * time.Second
	// behindRatio: a rack is behind below 1/behindRatio of the median
	// rack's rate.
	behindRatio = 3
	// takeoverTTL is how long a takeover's signature is valid: it is sent
	// at once.
	takeoverTTL = time.Minute
)

// rackWatch finds the racks of a push that fall behind: those whose rate
// stays under a third of the median rack's for After while the median
// rack's rate is above zero, the rack is not done and it has less than
// the median rack's progress (a rack ahead of the others, slowing for its
// last pieces, is not behind them). A rack's progress is the most bytes
// any of its hosts has verified (what has come across its uplink,
// roughly); its rate is over the last behindRateWindow; a rack done
// counts at its average rate, from the push's start to the moment it was
// done. So a rack slow for a moment is not behind, nor is one when every
// rack is slow together (the origin, or the pusher's link, is the
// bottleneck, and a standby would not help). The median of an even
// number of racks is the faster middle one, so that of two racks the
// slow one can be behind. It is pure: the caller says the time.
type rackWatch struct {
	after time.Duration
	size  int64
	start time.Time
	racks map[string]*rackTrack
}

// rackTrack is one rack's progress over time.
type rackTrack struct {
	samples   []rackSample // the last behindRateWindow's, and one before
	doneAt    time.Time
	slowSince time.Time // zero: not slow at the last observation
	behind    bool
}

type rackSample struct {
	at    time.Time
	bytes int64
}

func newRackWatch(size int64, after time.Duration, start time.Time) *rackWatch {
	return &rackWatch{after: after, size: size, start: start, racks: map[string]*rackTrack{}}
}

// observe takes each rack's progress at now (racks missing are left
// out: their hosts have all failed) and returns the racks found behind
// at now, sorted; each is returned once in a push.
func (w *rackWatch) observe(now time.Time, progress map[string]int64) []string {
	rates := map[string]float64{}
	for rack, n := range progress {
		t := w.racks[rack]
		if t == nil {
			t = &rackTrack{samples: []rackSample{{w.start, 0}}}
			w.racks[rack] = t
		}
		if n >= w.size && t.doneAt.IsZero() {
			t.doneAt = now
		}
		t.samples = append(t.samples, rackSample{now, n})
		// Keep the newest sample at or before the window's start.
		k := 0
		for k+1 < len(t.samples) && !t.samples[k+1].at.After(now.Add(-behindRateWindow)) {
			k++
		}
		t.samples = t.samples[k:]
		rates[rack] = t.rate(w.size, w.start, now)
	}
	if len(rates) == 0 {
		return nil
	}
	var all, done []float64
	for rack, r := range rates {
		all = append(all, r)
		done = append(done, float64(progress[rack]))
	}
	slices.Sort(all)
	slices.Sort(done)
	median, medianDone := all[len(all)/2], done[len(done)/2]
	var behind []string
	for rack, r := range rates {
		t := w.racks[rack]
		if !t.doneAt.IsZero() || median <= 0 || r*behindRatio >= median || float64(progress[rack]) >= medianDone {
			t.slowSince = time.Time{}
			continue
		}
		if t.slowSince.IsZero() {
			t.slowSince = now
		}
		if !t.behind && now.Sub(t.slowSince) >= w.after {
			t.behind = true
			behind = append(behind, rack)
		}
	}
	slices.Sort(behind)
	return behind
}

// rate is the rack's bytes/s: over its samples, or, done, on average.
func (t *rackTrack) rate(size int64, start, now time.Time) float64 {
	if !t.doneAt.IsZero() {
		return float64(size) / max(t.doneAt.Sub(start).Seconds(), 1e-3)
	}
	first, last := t.samples[0], t.samples[len(t.samples)-1]
	dt := last.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(last.bytes-first.bytes) / dt
}

// pushBehind is a rack found behind, in push's progress and report.
type pushBehind struct {
	Rack string `json:"rack"`
	// Seconds is when, from the push's start.
	Seconds float64 `json:"seconds"`
	// TookOver are the standby representatives told to take over, and
	// that did.
	TookOver []string `json:"took_over,omitempty"`
	// Cause says why none did, or what some answered.
	Cause string `json:"cause,omitempty"`
}

// checkBehind observes the racks' progress and tells the standbys of
// those found behind to take over.
func (p *pusher) checkBehind(ctx context.Context, now time.Time) {
	if p.behindAfter <= 0 {
		return
	}
	p.mu.Lock()
	if p.watchRacks == nil {
		p.watchRacks = newRackWatch(p.req.Size, p.behindAfter, p.start)
	}
	progress := map[string]int64{}
	for rack, hosts := range p.plan.Racks {
		best, live := int64(0), false
		for _, h := range hosts {
			a := p.agents[h]
			best = max(best, a.st.Done)
			live = live || !a.final || a.st.State == daemon.PushDone
		}
		if live {
			progress[rack] = best
		}
	}
	behind := p.watchRacks.observe(now, progress)
	p.mu.Unlock()
	for _, rack := range behind {
		b := p.takeOver(ctx, rack)
		b.Seconds = now.Sub(p.start).Seconds()
		p.log.Warn("push: a rack is behind", "rack", rack, "at", fmt.Sprintf("%.1fs", b.Seconds), "took_over", b.TookOver, "cause", b.Cause)
		p.mu.Lock()
		p.behind = append(p.behind, b)
		p.mu.Unlock()
	}
}

// takeOver tells rack's standby representatives still fetching to take
// over, each with a takeover signed by the cluster's key.
func (p *pusher) takeOver(ctx context.Context, rack string) pushBehind {
	b := pushBehind{Rack: rack}
	p.mu.Lock()
	var standbys []string
	for _, h := range p.plan.Racks[rack] {
		if a := p.agents[h]; p.plan.Roles[h].Standby && a.accepted && !a.final {
			standbys = append(standbys, h)
		}
	}
	id := p.req.ID()
	p.mu.Unlock()
	if len(standbys) == 0 {
		b.Cause = "no standby representative to take over"
		return b
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		causes []string
	)
	for _, h := range standbys {
		wg.Go(func() {
			err := p.sendTakeover(ctx, id, h)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				causes = append(causes, h+": "+err.Error())
				return
			}
			b.TookOver = append(b.TookOver, h)
		})
	}
	wg.Wait()
	slices.Sort(b.TookOver)
	slices.Sort(causes)
	b.Cause = strings.Join(causes, "; ")
	return b
}

// sendTakeover posts a signed takeover of push id to host h's agent.
func (p *pusher) sendTakeover(ctx context.Context, id, h string) error {
	to := cluster.Takeover{Push: id, Host: h}
	to.Sign(p.priv, time.Now(), takeoverTTL)
	return p.callJSON(ctx, http.MethodPost, "http://"+p.c.Hosts[h].Agent+"/v1/push/"+id+"/takeover", to, nil)
}
