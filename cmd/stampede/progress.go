package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-runewidth"

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
		// Measured from the start, so the first line has a rate (a plain
		// line comes only every 5 s).
		m := rateMeter{last: time.Now(), lastDone: progress().Done}
		// The rate is of bytes downloaded: not of those found on disk
		// (Resumed), nor of the check that finds them.
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
				var rate float64
				if p.Phase == "verifying" {
					m = rateMeter{last: now}
				} else {
					rate = m.update(now, p.Done-p.Resumed)
				}
				cols := 0
				if e.stderrIsTerminal && e.columns != nil {
					cols = e.columns()
				}
				line := progressLine(name, p, rate, cols)
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

// progressLine is one line of progress. On a terminal of cols columns (0:
// no limit) it is fitted to cols-1, so it never wraps: the phase goes first,
// then the bar narrows, then the name is shortened, then the bar goes.
func progressLine(name string, p fetch.Progress, rate float64, cols int) string {
	if p.Size < 0 {
		return fit(fmt.Sprintf("%s  %s  %s  %s", name, p.Phase, units.Bytes(p.Done), units.Rate(rate)), cols)
	}
	frac := 0.0
	if p.Size > 0 {
		frac = min(1, float64(p.Done)/float64(p.Size))
	}
	eta := "--:--"
	if rate > 0 && p.Phase == "downloading" {
		eta = fmtETA(time.Duration(float64(p.Size-p.Done) / rate * float64(time.Second)))
	}
	pct := fmt.Sprintf("%3.0f%%", frac*100)
	stats := fmt.Sprintf("%s / %s  %s  ETA %s", units.Bytes(p.Done), units.Bytes(p.Size), units.Rate(rate), eta)
	phase := "  " + p.Phase
	const maxBar, minBar, minName = 24, 10, 12
	bar := maxBar
	line := func() string {
		s := name + " " + pct + " "
		if bar > 0 {
			s += "[" + progressBar(frac, bar) + "] "
		}
		return s + stats + phase
	}
	if cols <= 0 {
		return line()
	}
	room := cols - 1
	over := func() int { return runewidth.StringWidth(line()) - room }
	if over() > 0 {
		phase = ""
	}
	if n := over(); n > 0 {
		bar = max(minBar, bar-n)
	}
	full := name
	if n := over(); n > 0 {
		name = shorten(full, max(minName, runewidth.StringWidth(full)-n))
	}
	if over() > 0 {
		bar, name = 0, full // the bar's room goes to the name
		if n := over(); n > 0 {
			name = shorten(full, max(1, runewidth.StringWidth(full)-n))
		}
	}
	return fit(line(), cols)
}

// progressBar draws frac of width as "===>   ".
func progressBar(frac float64, width int) string {
	fill := int(frac * float64(width))
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
	if fill < width && fill > 0 {
		bar = bar[:fill-1] + ">" + bar[fill:]
	}
	return bar
}

// shorten cuts s to n columns of a terminal, marking the cut with "…"
// (a wide character, CJK say, takes two columns).
func shorten(s string, n int) string {
	if runewidth.StringWidth(s) <= n {
		return s
	}
	if n <= 1 {
		return runewidth.Truncate(s, n, "")
	}
	return runewidth.Truncate(s, n, "…")
}

// fit cuts line to cols-1 columns on a terminal of cols columns (0: no limit).
func fit(line string, cols int) string {
	if cols <= 0 {
		return line
	}
	return shorten(line, max(1, cols-1))
}

func fmtETA(d time.Duration) string {
	s := int(d.Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%02d:%02d", s/60, s%60)
}
