package bench

import (
	"slices"
	"time"
)

// linkKind says what a link of a push cluster is.
type linkKind int

// The "out" kind of a link follows its "in" kind (pushNet.join).
const (
	linkOrigin  linkKind = iota // the origin's link, outside the cluster's budgets
	linkRackIn                  // into a rack over its uplink
	linkRackOut                 // out of a rack over its uplink
	linkDCIn                    // into a datacenter over its link
	linkDCOut                   // out of a datacenter
)

// PushLink is one direction of a link the harness watches: its qdisc's
// byte counter is what crossed it, on the wire.
type PushLink struct {
	Name string   `json:"name"`
	Kind linkKind `json:"-"`
	// Rack is the rack it leads into or out of (-1 for others).
	Rack     int   `json:"rack"`
	Capacity int64 `json:"capacity"` // bytes/s
	// Budget is the capacity less the reserve (the origin's: its
	// capacity), bytes/s.
	Budget float64 `json:"budget"`

	ns, dev string // the namespace and device of its qdisc
}

// shared says whether the link is one of the cluster's budgeted shared
// links (a rack uplink or a datacenter link, either way).
func (l *PushLink) shared() bool { return l.Kind != linkOrigin }

// linkSample is one reading of a link's counter.
type linkSample struct {
	at    time.Time
	bytes int64
	ok    bool
}

// PushLinkLoad is what one shared link carried in a run.
type PushLinkLoad struct {
	Link string `json:"link"`
	// Copies is what crossed it, in copies of the file (on the wire).
	Copies float64 `json:"copies"`
	// MaxOverBudget is its highest load over any 1 s window, over its
	// budget (capacity less reserve).
	MaxOverBudget float64 `json:"max_over_budget"`
	// Bytes is what had crossed it since the first reading, against
	// seconds since the transfer's start (a reading every 0.5 s).
	Bytes []Point `json:"bytes,omitempty"`
}

// loadWindow is the span over which a link's load is averaged: 1 s, less
// a little for the sampling's jitter (samples come every 0.5 s).
const loadWindow = 0.95

// linkFigures computes what the samples of one run say: each link's series
// (cumulative bytes since the first sample, against seconds since t0), and
// the run's push figures. size is the file's. samples[i][k] is the i-th
// reading of link k.
func linkFigures(links []*PushLink, samples [][]linkSample, t0 time.Time, size int64) (series [][]Point, f PushRunFigures) {
	series = make([][]Point, len(links))
	for k := range links {
		var base int64
		first := true
		for _, s := range samples {
			if !s[k].ok {
				continue
			}
			if first {
				base, first = s[k].bytes, false
			}
			series[k] = append(series[k], Point{T: s[k].at.Sub(t0).Seconds(), V: float64(s[k].bytes - base)})
		}
	}
	fsize := float64(size)
	for k, l := range links {
		pts := series[k]
		if len(pts) < 2 {
			continue
		}
		copies := pts[len(pts)-1].V / fsize
		if l.Kind == linkOrigin {
			f.OriginCopies = copies
			continue
		}
		peak := maxWindowRate(pts, loadWindow) / l.Budget
		f.Links = append(f.Links, PushLinkLoad{Link: l.Name, Copies: copies, MaxOverBudget: peak, Bytes: pts})
		f.LinkMaxOverBudget = max(f.LinkMaxOverBudget, peak)
		switch l.Kind {
		case linkRackIn:
			f.RackInCopies = max(f.RackInCopies, copies)
		case linkDCIn:
			f.DCInCopies = max(f.DCInCopies, copies)
		}
	}
	return series, f
}

// maxWindowRate is the highest rate of a cumulative series over any span
// of at least window seconds between two of its points (the shortest such
// span from each point).
func maxWindowRate(pts []Point, window float64) float64 {
	best := 0.0
	j := 0
	for i := range pts {
		j = max(j, i+1)
		for j < len(pts) && pts[j].T-pts[i].T < window {
			j++
		}
		if j == len(pts) {
			break
		}
		best = max(best, (pts[j].V-pts[i].V)/(pts[j].T-pts[i].T))
	}
	return best
}

// hostTimes are the figures of the hosts' completion times: the median,
// the last and the slowest over the median (0 when none finished).
func hostTimes(secs []float64) (median, last, slowestOverMedian float64) {
	if len(secs) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(secs))
	median, last = quantile(s, 0.5), s[len(s)-1]
	if median > 0 {
		slowestOverMedian = last / median
	}
	return median, last, slowestOverMedian
}
