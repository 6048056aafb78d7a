package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/internal/units"
)

// startProgress shows a download's progress on e.stderr until the returned function
// is called: a redrawn bar on a terminal, a plain line every few seconds
// otherwise.
func startProgress(e *env, progress func() fetch.Progress, name string) (stop func()) {
	interval := 5 * time.Second
	if e.stderrIsTerminal {
		interval = 200 * time.Millisecond
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		var m rateMeter
		drawn := false
		for {
			select {
			case <-done:
				if drawn && e.stderrIsTerminal {
					fmt.Fprint(e.stderr, "\r\033[K")
				}
				return
			case now := <-t.C:
				p := progress()
				rate := m.update(now, p.Done)
				line := progressLine(name, p, rate)
				if e.stderrIsTerminal {
					fmt.Fprintf(e.stderr, "\r\033[K%s", line)
				} else {
					fmt.Fprintln(e.stderr, line)
				}
				drawn = true
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// startJSONProgress writes one JSON object per line to e.stderr every half
// second, and a last one when stopped: {"t": seconds since start, "phase",
// "size", "done", "up"}, where done counts verified bytes written and up the
// bytes sent to other peers. Test harnesses read it to plot progress and
// peer upload over time.
func startJSONProgress(e *env, d *fetch.Download) (stop func()) {
	start := time.Now()
	emit := func() {
		p := d.Progress()
		fmt.Fprintf(e.stderr, `{"t":%.3f,"phase":%q,"size":%d,"done":%d,"up":%d}`+"\n",
			time.Since(start).Seconds(), p.Phase, p.Size, p.Done, p.Uploaded)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				emit()
				return
			case <-t.C:
				emit()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// rateMeter smooths the transfer rate over a few seconds.
type rateMeter struct {
	last     time.Time
	lastDone int64
	rate     float64
}

func (m *rateMeter) update(now time.Time, done int64) float64 {
	if !m.last.IsZero() {
		dt := now.Sub(m.last).Seconds()
		inst := float64(done-m.lastDone) / dt
		const alpha = 0.3
		if m.rate == 0 {
			m.rate = inst
		} else {
			m.rate = alpha*inst + (1-alpha)*m.rate
		}
	}
	m.last, m.lastDone = now, done
	return max(0, m.rate)
}

func progressLine(name string, p fetch.Progress, rate float64) string {
	if p.Size < 0 {
		return fmt.Sprintf("%s  %s  %s  %s", name, p.Phase, units.Bytes(p.Done), units.Rate(rate))
	}
	frac := 0.0
	if p.Size > 0 {
		frac = min(1, float64(p.Done)/float64(p.Size))
	}
	const width = 24
	fill := int(frac * width)
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
	if fill < width && fill > 0 {
		bar = bar[:fill-1] + ">" + bar[fill:]
	}
	eta := "--:--"
	if rate > 0 && p.Phase == "downloading" {
		eta = fmtETA(time.Duration(float64(p.Size-p.Done) / rate * float64(time.Second)))
	}
	return fmt.Sprintf("%s %3.0f%% [%s] %s / %s  %s  ETA %s  %s", name, frac*100, bar,
		units.Bytes(p.Done), units.Bytes(p.Size), units.Rate(rate), eta, p.Phase)
}

func fmtETA(d time.Duration) string {
	s := int(d.Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%02d:%02d", s/60, s%60)
}
