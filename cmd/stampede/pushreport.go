package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/daemon"
	"github.com/stampede-dev/stampede/internal/units"
)

// pushHost is one host in push's progress and report.
type pushHost struct {
	Host  string `json:"host"`
	Rack  string `json:"rack"`
	Role  string `json:"role,omitempty"`
	State string `json:"state"`
	Done  int64  `json:"done"`
	Size  int64  `json:"size"`
	// Seconds is when the file was installed, from the push's start.
	Seconds        float64            `json:"seconds,omitempty"`
	FromRack       int64              `json:"from_rack"`
	FromOtherRacks int64              `json:"from_other_racks"`
	FromOrigin     int64              `json:"from_origin"`
	Reused         int64              `json:"reused"`
	Throttled      bool               `json:"throttled,omitempty"`
	Then           *daemon.ThenResult `json:"then,omitempty"`
	Cause          string             `json:"cause,omitempty"`
	Installed      bool               `json:"installed"`
}

// pushRack is one rack's hosts and what came in over its uplink.
type pushRack struct {
	Rack  string     `json:"rack"`
	Hosts []pushHost `json:"hosts"`
	Done  int        `json:"done"` // hosts done
	// InBytes came in over the rack's uplink: from other racks and from
	// the origin; InCopies in copies of the file.
	InBytes  int64   `json:"in_bytes"`
	InCopies float64 `json:"in_copies"`
}

// pushSnapshot is the progress at one moment, or (Type "report") the end.
type pushSnapshot struct {
	Type    string     `json:"type"` // "progress" or "report"
	Root    string     `json:"root,omitempty"`
	Size    int64      `json:"size"`
	Dest    string     `json:"dest"`
	Elapsed float64    `json:"elapsed"`
	Racks   []pushRack `json:"racks"`
	// Behind are the racks found behind so far, in order, and the
	// standbys told to take over.
	Behind []pushBehind `json:"behind,omitempty"`
}

// pushReport is the snapshot at the end, with the sums and the exit code.
type pushReport struct {
	pushSnapshot
	Hosts        int     `json:"hosts"`
	Got          int     `json:"got"` // installed, --then succeeded
	Installed    int     `json:"installed"`
	OriginBytes  int64   `json:"origin_bytes"`
	OriginCopies float64 `json:"origin_copies"`
	// MedianSeconds and LastSeconds are the hosts' completion times.
	MedianSeconds float64 `json:"median_seconds"`
	LastSeconds   float64 `json:"last_seconds"`
	// Failures: each host that did not get the file, with its cause.
	Failures []pushFailure `json:"failures,omitempty"`
	Exit     int           `json:"exit"`
}

type pushFailure struct {
	Host  string `json:"host"`
	Cause string `json:"cause"`
}

// snapshot reads the agents' states.
func (p *pusher) snapshot() pushSnapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := pushSnapshot{Type: "progress", Root: p.req.Root, Size: p.req.Size, Dest: p.dest, Elapsed: time.Since(p.start).Seconds(),
		Behind: slices.Clone(p.behind)}
	racks := map[string]*pushRack{}
	for _, h := range p.hosts {
		a := p.agents[h]
		rack := p.c.Hosts[h].Rack.Name
		st := a.st
		ph := pushHost{
			Host: h, Rack: rack, Role: st.Role, State: st.State, Done: st.Done, Size: p.req.Size,
			FromRack: st.FromRack, FromOtherRacks: st.FromRacks, FromOrigin: st.FromOrigin, Reused: st.Reused,
			Throttled: st.Throttled, Then: st.Then, Cause: a.cause, Installed: !st.Installed.IsZero(),
		}
		if ph.Installed {
			ph.Seconds = st.Installed.Sub(p.start).Seconds()
		}
		r := racks[rack]
		if r == nil {
			r = &pushRack{Rack: rack}
			racks[rack] = r
		}
		r.Hosts = append(r.Hosts, ph)
		if st.State == daemon.PushDone {
			r.Done++
		}
		r.InBytes += st.FromRacks + st.FromOrigin
	}
	for _, r := range racks {
		if p.req.Size > 0 {
			r.InCopies = float64(r.InBytes) / float64(p.req.Size)
		}
		s.Racks = append(s.Racks, *r)
	}
	slices.SortFunc(s.Racks, func(a, b pushRack) int { return strings.Compare(a.Rack, b.Rack) })
	return s
}

// report sums the end up.
func (p *pusher) report(size int64) *pushReport {
	r := &pushReport{pushSnapshot: p.snapshot()}
	r.Type, r.Size = "report", size
	var secs []float64
	for _, rk := range r.Racks {
		for _, h := range rk.Hosts {
			r.Hosts++
			r.OriginBytes += h.FromOrigin
			if h.Installed {
				r.Installed++
				secs = append(secs, h.Seconds)
			}
			if h.State == daemon.PushDone {
				r.Got++
			} else {
				r.Failures = append(r.Failures, pushFailure{h.Host, h.Cause})
			}
		}
	}
	if size > 0 {
		r.OriginCopies = float64(r.OriginBytes) / float64(size)
	}
	if len(secs) > 0 {
		slices.Sort(secs)
		r.MedianSeconds, r.LastSeconds = secs[len(secs)/2], secs[len(secs)-1]
	}
	switch {
	case r.Got == r.Hosts:
		r.Exit = exitOK
	case r.Installed == 0:
		r.Exit = exitPushNone
	default:
		r.Exit = exitPushSome
	}
	return r
}

func (r *pushReport) exitError() error {
	if r.Exit == exitOK {
		return nil
	}
	return withCode(r.Exit, fmt.Errorf("%w: %d of %d did (%d installed)", ErrPushIncomplete, r.Got, r.Hosts, r.Installed))
}

// printReport writes the report: a JSON line with --json, else a table.
func (p *pusher) printReport(r *pushReport) {
	w := p.e.stdout
	if p.json {
		json.NewEncoder(w).Encode(r)
		return
	}
	fmt.Fprintf(w, "push of %s (%s, root %.16s) to %s: %d of %d hosts got it", p.file, units.Bytes(r.Size), r.Root, p.dest, r.Got, r.Hosts)
	if r.Installed > 0 {
		fmt.Fprintf(w, "; median %.1fs, last %.1fs", r.MedianSeconds, r.LastSeconds)
	}
	fmt.Fprintf(w, "; origin sent %.2f copies\n", r.OriginCopies)
	fmt.Fprintf(w, "%-16s %-8s %-24s %-10s %8s %12s %12s %12s %12s\n", "HOST", "RACK", "ROLE", "STATE", "DONE(s)", "FROM RACK", "OTHER RACKS", "ORIGIN", "REUSED")
	for _, rk := range r.Racks {
		for _, h := range rk.Hosts {
			secs := "-"
			if h.Installed {
				secs = fmt.Sprintf("%.1f", h.Seconds)
			}
			fmt.Fprintf(w, "%-16s %-8s %-24s %-10s %8s %12s %12s %12s %12s\n", h.Host, h.Rack, h.Role, h.State, secs,
				units.Bytes(h.FromRack), units.Bytes(h.FromOtherRacks), units.Bytes(h.FromOrigin), units.Bytes(h.Reused))
		}
		fmt.Fprintf(w, "  rack %s: %d of %d done, %s (%.2f copies) in over its uplink\n", rk.Rack, rk.Done, len(rk.Hosts), units.Bytes(rk.InBytes), rk.InCopies)
	}
	for _, b := range r.Behind {
		fmt.Fprintf(w, "rack %s behind at %.1fs: %s\n", b.Rack, b.Seconds, behindLine(b))
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "FAILED %s: %s\n", f.Host, f.Cause)
	}
}

// behindLine says what came of a rack found behind.
func behindLine(b pushBehind) string {
	var parts []string
	if len(b.TookOver) > 0 {
		parts = append(parts, strings.Join(b.TookOver, ", ")+" took over")
	}
	if b.Cause != "" {
		parts = append(parts, b.Cause)
	}
	return strings.Join(parts, "; ")
}

// pushView shows the progress: JSON lines on stdout (--json), a table
// redrawn on a terminal, or a line per rack every few seconds.
type pushView struct {
	p     *pusher
	lines int       // drawn on the terminal last time
	last  time.Time // last plain output
}

func (p *pusher) newView() *pushView { return &pushView{p: p} }

func (v *pushView) draw(s pushSnapshot, final bool) {
	p := v.p
	if p.json {
		json.NewEncoder(p.e.stdout).Encode(s)
		return
	}
	if p.quiet {
		return
	}
	w := p.e.stderr
	if !p.e.stderrIsTerminal {
		if !final && time.Since(v.last) < 5*time.Second {
			return
		}
		v.last = time.Now()
		for _, r := range s.Racks {
			fmt.Fprintf(w, "push %5.1fs rack %s: %s\n", s.Elapsed, r.Rack, rackLine(r, s.Size))
		}
		return
	}
	if v.lines > 0 {
		fmt.Fprintf(w, "\x1b[%dA", v.lines)
	}
	v.lines = 0
	for _, r := range s.Racks {
		fmt.Fprintf(w, "\x1b[2K%5.1fs %-8s %s\n", s.Elapsed, r.Rack, rackLine(r, s.Size))
		v.lines++
	}
}

// rackLine is a rack's hosts' progress, "web-1 100% web-2 45%...".
func rackLine(r pushRack, size int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d done:", r.Done, len(r.Hosts))
	for _, h := range r.Hosts {
		pct := 0.0
		if size > 0 {
			pct = 100 * float64(h.Done) / float64(size)
		}
		mark := ""
		switch h.State {
		case daemon.PushFailed:
			mark = " FAILED"
		case daemon.PushThen:
			mark = " then"
		}
		if h.Throttled {
			mark += " throttled"
		}
		fmt.Fprintf(&b, " %s %.0f%%%s", h.Host, pct, mark)
	}
	return b.String()
}

// statusPage is push's live page: the snapshot, refreshed every second.
var statusPage = template.Must(template.New("push").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="1"><title>stampede push</title>
<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}td:first-child,th:first-child{text-align:left}</style></head>
<body><h1>stampede push to {{.Dest}}</h1><p>{{printf "%.1f" .Elapsed}} s, root {{.Root}}, {{.Size}} bytes. <a href="status.json">JSON</a></p>
{{range .Behind}}<p>rack {{.Rack}} behind at {{printf "%.1f" .Seconds}} s: {{range .TookOver}}{{.}} took over. {{end}}{{.Cause}}</p>
{{end}}{{range .Racks}}<h2>rack {{.Rack}}: {{.Done}} of {{len .Hosts}} done, {{printf "%.2f" .InCopies}} copies in over its uplink</h2>
<table><tr><th>host</th><th>role</th><th>state</th><th>done</th><th>from rack</th><th>other racks</th><th>origin</th><th>reused</th><th>cause</th></tr>
{{range .Hosts}}<tr><td>{{.Host}}</td><td>{{.Role}}</td><td>{{.State}}</td><td>{{.Done}}</td><td>{{.FromRack}}</td><td>{{.FromOtherRacks}}</td><td>{{.FromOrigin}}</td><td>{{.Reused}}</td><td>{{.Cause}}</td></tr>
{{end}}</table>{{end}}</body></html>
`))

// serveStatus serves the status page until stop.
func (p *pusher) serveStatus(ctx context.Context) (stop func()) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		statusPage.Execute(w, p.snapshot())
	})
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(p.snapshot())
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.Serve(p.statusLn)
	}()
	fmt.Fprintf(p.e.stderr, "push: status on http://%s/\n", p.statusLn.Addr())
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		hs.Shutdown(sctx)
		<-done
	}
}
