package daemon

import (
	"fmt"
	"html/template"
	"net/http"
	"sort"

	"github.com/stampede-dev/stampede/internal/units"
)

// The status page, at / of the API and of the gateway: the jobs and their
// swarms, the peer port's account, bytes by source and the origin's
// requests by reason. It refreshes itself every 2 s and needs no script.
var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"bytes": func(n int64) string { return units.Bytes(n) },
	"pct": func(done, size int64) string {
		if size <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(done)/float64(size))
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>stampede daemon</title>
<style>body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse}
td,th{padding:.2em .8em;border-bottom:1px solid #ddd;text-align:left}td.n{text-align:right}</style>
</head><body>
<h1>stampede daemon</h1>
<p>Peers on {{.Stats.PeerAddr}}.{{with .Stats.GatewayAddr}} Gateway on {{.}}: use it as a proxy
(<code>curl -x http://{{.}} URL</code>) or by URL prefix (<code>curl http://{{.}}/URL</code>).{{end}}
Swarms {{.Stats.Peers.Swarms}}; connections routed {{.Stats.Peers.Routed}}, for no swarm here {{.Stats.Peers.NoSwarm}},
refused {{.Stats.Peers.Refused}}, dropped {{.Stats.Peers.Dropped}}.</p>
<p>From peers {{bytes .Stats.BytesFromPeers}}, to peers {{bytes .Stats.BytesToPeers}}.</p>
<h2>Jobs</h2>
{{if .Jobs}}<table><tr><th>id</th><th>kind</th><th>state</th>{{if .Private}}<th>path</th>{{end}}<th>done</th><th>size</th><th>from peers</th><th>to peers</th><th>peers</th>{{if .Private}}<th>error</th>{{end}}</tr>
{{range .Jobs}}<tr><td>{{.ID}}</td><td>{{.Kind}}</td><td>{{.State}}</td>{{if $.Private}}<td>{{.Path}}</td>{{end}}<td class="n">{{pct .Done .Size}}</td>
<td class="n">{{if ge .Size 0}}{{bytes .Size}}{{end}}</td><td class="n">{{bytes .FromPeers}}</td><td class="n">{{bytes .Uploaded}}</td><td class="n">{{.Peers}}</td>{{if $.Private}}<td>{{.Error}}</td>{{end}}</tr>
{{end}}</table>{{if not .Private}}<p>Paths and errors are shown on the API's status page only.</p>{{end}}{{else}}<p>None.</p>{{end}}
<h2>Origin requests by reason</h2>
{{if .Reasons}}<table>{{range .Reasons}}<tr><td>{{.Name}}</td><td class="n">{{.Count}}</td></tr>{{end}}</table>{{else}}<p>None yet.</p>{{end}}
</body></html>
`))

type reason struct {
	Name  string
	Count int
}

// serveStatus is the API's status page: everything, for the callers the
// API admits.
func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) { s.status(w, true) }

// servePublicStatus is the gateway's: anyone who reaches the gateway (any
// local user; a web page, by DNS rebinding) sees it, so it leaves out
// the jobs' paths and errors.
func (s *Server) servePublicStatus(w http.ResponseWriter, r *http.Request) { s.status(w, false) }

func (s *Server) status(w http.ResponseWriter, private bool) {
	st := s.Stats()
	var rs []reason
	for k, v := range st.OriginRequests {
		rs = append(rs, reason{k, v})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	statusPage.Execute(w, struct {
		Stats   Stats
		Jobs    []Job
		Reasons []reason
		Private bool
	}{st, s.Jobs(), rs, private})
}
