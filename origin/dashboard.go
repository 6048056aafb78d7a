package origin

import (
	"cmp"
	"context"
	"net/url"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stampede-dev/stampede/internal/dashboard"
	"github.com/stampede-dev/stampede/manifest"
)

// The origin's live dashboard (package internal/dashboard), at
// dashboard.Path of Handler, or of AdminHandler with Config.AdminApart. Its
// snapshot reads what the request path counts already, once a second at
// most and only while someone watches; its own requests are not counted
// (they do not go through route), so that watching changes nothing it
// shows.

// Bounds of the swarm table: the manifests in memory whose swarms the
// tracker is asked about (one store call each), and the largest shown.
const (
	dashboardSwarmsAsked = 64
	dashboardSwarmsShown = 20
)

// The figures' ids, which the page's chart and the tests follow.
const (
	figBytesSent     = "bytes_sent"
	figOverloadBytes = "overload_bytes_sent"
	figTransfers     = "transfers"
	figOverload      = "overload_answers"
	figFileRequests  = "file_requests"
	figSwarms        = "swarms"
	figPeers         = "peers"
)

// snapshot is what the dashboard shows now. File names are shown only on
// the admin listener: a public page would publish the names of files
// that are served but linked from nowhere.
func (s *Server) snapshot() dashboard.Snapshot {
	m := s.metrics
	names := s.cfg.AdminApart
	snap := dashboard.Snapshot{Title: "stampede serve"}
	switch {
	case !names:
		snap.Notes = append(snap.Notes, "File names are shown on the admin address only (serve --admin).")
	case s.root != nil:
		snap.Notes = append(snap.Notes, "Serving "+strings.TrimSuffix(strings.TrimPrefix(s.dirKey, "file:"), "/")+".")
	default:
		snap.Notes = append(snap.Notes, "Fronting "+s.upstream.Redacted()+".")
	}

	var requests float64
	reasons := dashboard.Table{Title: "Origin requests by reason", Empty: "None yet.",
		Columns: []dashboard.Column{{Name: "reason", Unit: dashboard.UnitText}, {Name: "file requests", Unit: dashboard.UnitCount}},
		Note:    `The Stampede-Reason each client gave; "none": no header (curl, a browser).`}
	for i, c := range m.fileReasons {
		if n := counterValue(c); n > 0 {
			requests += n
			reasons.Rows = append(reasons.Rows, []any{reasonNames[i], n})
		}
	}

	snap.Figures = []dashboard.Figure{
		{ID: figBytesSent, Label: "Sent", Unit: dashboard.UnitBytes, Value: counterValue(m.bytesSent),
			Counter: true, Max: float64(s.cfg.Rate), Chart: true},
		{ID: figOverloadBytes, Label: "Sent in overload answers", Unit: dashboard.UnitBytes, Value: counterValue(m.overloadBytes),
			Counter: true, Chart: true},
		{ID: figTransfers, Label: "Transfers", Value: float64(s.gate.activeCount()), Max: float64(s.gate.max)},
	}
	if s.gate.maxAnswers > 0 {
		snap.Figures = append(snap.Figures, dashboard.Figure{ID: figOverload, Label: "Overload answers",
			Value: float64(s.gate.answeringCount()), Max: float64(s.gate.maxAnswers)})
	}
	snap.Figures = append(snap.Figures, dashboard.Figure{ID: figFileRequests, Label: "File requests", Value: requests, Counter: true})
	snap.Tables = []dashboard.Table{reasons}
	if s.cfg.Tracker != nil {
		s.trackerSnapshot(&snap, names)
	}
	return snap
}

// trackerSnapshot adds the embedded tracker's figures, and the swarms of
// the files whose manifests are in memory, largest first.
func (s *Server) trackerSnapshot(snap *dashboard.Snapshot, names bool) {
	t := s.cfg.Tracker
	st, err := t.Stats(context.Background())
	if err != nil {
		// Asking it about each swarm would hold every watcher for a
		// timeout a swarm.
		snap.Notes = append(snap.Notes, "The tracker's store does not answer.")
		return
	}
	snap.Figures = append(snap.Figures,
		dashboard.Figure{ID: figSwarms, Label: "Swarms", Value: float64(st.Swarms)},
		dashboard.Figure{ID: figPeers, Label: "Peers in swarms", Value: float64(st.Estimated)})

	type swarm struct {
		name         string
		m            *manifest.Manifest
		peers, seeds int
	}
	var swarms []swarm
	for _, it := range s.cache.recent(dashboardSwarmsAsked) {
		if n, seeds, ok := t.SwarmSize(it.e.m.Root, it.e.m.Size); ok {
			swarms = append(swarms, swarm{s.displayName(it.key), it.e.m, n, seeds})
		}
	}
	slices.SortFunc(swarms, func(a, b swarm) int {
		return cmp.Or(cmp.Compare(b.peers, a.peers), strings.Compare(a.name, b.name))
	})
	tab := dashboard.Table{Title: "Swarms", Empty: "No swarm yet: none of the files whose manifests are in memory has peers."}
	if names {
		tab.Columns = append(tab.Columns, dashboard.Column{Name: "file", Unit: dashboard.UnitText})
	}
	tab.Columns = append(tab.Columns, []dashboard.Column{{Name: "root", Unit: dashboard.UnitText},
		{Name: "size", Unit: dashboard.UnitBytes}, {Name: "peers", Unit: dashboard.UnitCount}, {Name: "seeds", Unit: dashboard.UnitCount}}...)
	for _, sw := range swarms[:min(len(swarms), dashboardSwarmsShown)] {
		var row []any
		if names {
			row = append(row, sw.name)
		}
		tab.Rows = append(tab.Rows, append(row, sw.m.Root.String()[:12], sw.m.Size, sw.peers, sw.seeds))
	}
	if len(swarms) > dashboardSwarmsShown {
		tab.Note = "The largest shown."
	}
	snap.Tables = append(snap.Tables, tab)
}

// displayName is the name of the file of a manifest cache key: its path
// in Dir, or on the upstream.
func (s *Server) displayName(key string) string {
	if s.root != nil {
		if name, ok := strings.CutPrefix(key, s.dirKey); ok {
			return "/" + name
		}
		if page, ok := strings.CutPrefix(key, s.bundleKey("")); ok {
			return "bundle of /" + page
		}
	} else if u, err := url.Parse(key); err == nil {
		return u.Path
	}
	return key
}

// cacheItem is a manifest in memory and its cache key.
type cacheItem struct {
	key string
	e   *entry
}

// recent returns up to n of the manifests in memory, those used last
// first (as far as touch tells: to the minute).
func (c *cache) recent(n int) []cacheItem {
	c.mu.Lock()
	items := make([]cacheItem, 0, len(c.mem))
	for k, e := range c.mem {
		items = append(items, cacheItem{k, e})
	}
	c.mu.Unlock()
	slices.SortFunc(items, func(a, b cacheItem) int {
		return cmp.Or(cmp.Compare(b.e.touched.Load(), a.e.touched.Load()), strings.Compare(a.key, b.key))
	})
	return items[:min(len(items), n)]
}

// counterValue reads a counter the request path keeps.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
