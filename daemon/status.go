package daemon

import (
	"context"
	"fmt"
	"sort"

	"github.com/stampede-dev/stampede/internal/dashboard"
)

// The status page, at / of the API and of the gateway: the live dashboard
// (package internal/dashboard) of the jobs and their swarms, the peer
// port's account, bytes by source and the origins' requests by reason.
// The API's shows everything to the callers it admits. The gateway's is
// public: anyone who reaches the gateway (any local user; a web page, by
// DNS rebinding) sees it, so it leaves out the jobs' paths and errors.

// initDashboards makes the API's and the gateway's dashboards, whose
// streams end with the daemon.
func (s *Server) initDashboards() {
	s.dash = dashboard.New(dashboard.Config{Snapshot: func() dashboard.Snapshot { return s.snapshot(true) }, Logger: s.log})
	s.publicDash = dashboard.New(dashboard.Config{Snapshot: func() dashboard.Snapshot { return s.snapshot(false) }, Logger: s.log})
	context.AfterFunc(s.ctx, func() {
		s.dash.EndStreams()
		s.publicDash.EndStreams()
	})
}

// The figures' ids, which the page's chart and the tests follow.
const (
	figFromPeers   = "bytes_from_peers"
	figToPeers     = "bytes_to_peers"
	figDownloading = "downloads"
	figSwarms      = "swarms"
	figPeers       = "peers"
)

// snapshot is what the status page shows now; private, on the API.
func (s *Server) snapshot(private bool) dashboard.Snapshot {
	st, jobs := s.Stats(), s.Jobs()
	snap := dashboard.Snapshot{Title: "stampede daemon", Notes: []string{"Peers on " + st.PeerAddr + "."}}
	if a := st.GatewayAddr; a != "" {
		snap.Notes = append(snap.Notes, fmt.Sprintf("Gateway on %s: use it as a proxy (curl -x http://%s URL) or by URL prefix (curl http://%s/URL).", a, a, a))
	}
	snap.Notes = append(snap.Notes, fmt.Sprintf("Connections to the peer port: routed %d, for no swarm here %d, refused %d, dropped %d.",
		st.Peers.Routed, st.Peers.NoSwarm, st.Peers.Refused, st.Peers.Dropped))

	peers := 0
	for _, j := range jobs {
		peers += j.Peers
	}
	snap.Figures = []dashboard.Figure{
		{ID: figFromPeers, Label: "From peers", Unit: dashboard.UnitBytes, Value: float64(st.BytesFromPeers), Counter: true, Chart: true},
		{ID: figToPeers, Label: "To peers", Unit: dashboard.UnitBytes, Value: float64(st.BytesToPeers), Counter: true, Chart: true},
		{ID: figDownloading, Label: "Downloads running", Value: float64(st.Jobs[StateDownloading]), Max: float64(s.cfg.MaxDownloads)},
		{ID: figSwarms, Label: "Swarms", Value: float64(st.Peers.Swarms)},
		{ID: figPeers, Label: "Peers seen", Value: float64(peers)},
	}

	cols := []dashboard.Column{{Name: "id", Unit: dashboard.UnitText}, {Name: "kind", Unit: dashboard.UnitText}, {Name: "state", Unit: dashboard.UnitText}}
	if private {
		cols = append(cols, dashboard.Column{Name: "path", Unit: dashboard.UnitText})
	}
	cols = append(cols, []dashboard.Column{{Name: "done", Unit: dashboard.UnitProgress}, {Name: "size", Unit: dashboard.UnitBytes},
		{Name: "from peers", Unit: dashboard.UnitBytes}, {Name: "to peers", Unit: dashboard.UnitBytes}, {Name: "peers", Unit: dashboard.UnitCount}}...)
	if private {
		cols = append(cols, dashboard.Column{Name: "error", Unit: dashboard.UnitText})
	}
	jt := dashboard.Table{Title: "Jobs", Columns: cols, Empty: "None."}
	if !private {
		jt.Note = "Paths and errors are shown on the API's status page only."
	}
	for _, j := range jobs {
		row := []any{j.ID, j.Kind, j.State}
		if private {
			row = append(row, j.Path)
		}
		var done, size any // unknown until the download knows its size
		if j.Size > 0 {
			done, size = float64(j.Done)/float64(j.Size), j.Size
		} else if j.Size == 0 {
			done, size = 1.0, j.Size
		}
		row = append(row, done, size, j.FromPeers, j.Uploaded, j.Peers)
		if private {
			row = append(row, j.Error)
		}
		jt.Rows = append(jt.Rows, row)
	}

	rt := dashboard.Table{Title: "Origin requests by reason", Empty: "None yet.", Note: "Of the downloads that have ended.",
		Columns: []dashboard.Column{{Name: "reason", Unit: dashboard.UnitText}, {Name: "requests", Unit: dashboard.UnitCount}}}
	for k, v := range st.OriginRequests {
		rt.Rows = append(rt.Rows, []any{k, v})
	}
	sort.Slice(rt.Rows, func(i, j int) bool { return rt.Rows[i][0].(string) < rt.Rows[j][0].(string) })
	snap.Tables = []dashboard.Table{jt, rt}
	return snap
}
