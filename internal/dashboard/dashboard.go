// Package dashboard is the live status page that stampede's servers
// share: the origin (stampede serve), the daemon's API and its gateway.
// A server describes what it shows as a Snapshot, made by a function it
// provides; this package serves the page, the snapshot as JSON and a
// stream of snapshots (server-sent events, one a second), and draws them
// in the browser with its own small script: no library, no CDN, nothing
// from elsewhere (docs/dashboard.md).
//
// The page is rendered with the snapshot of the moment, so that it reads
// without a script (it then reloads itself every few seconds); the script
// redraws it from each event, and plots the rates of the figures marked
// for the chart. Everything shown comes from the server, file names
// included, and the script only ever sets text, never markup.
//
// Snapshots are made at most once per Interval whoever watches, and the
// streams are bounded (Config.MaxStreams), so that watching costs a server
// one snapshot a second, and cannot be used to exhaust it.
package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Path is where a server serves the page; the JSON snapshot, the stream,
// the script and the style sheet are below it. It is under
// /.well-known/stampede/, so it shadows no path of a site.
const Path = "/.well-known/stampede/dashboard"

// The resources below Path.
const (
	SnapshotPath = Path + "/snapshot"
	EventsPath   = Path + "/events"
	scriptPath   = Path + "/dashboard.js"
	stylePath    = Path + "/dashboard.css"
)

// Units of figures and table columns: how a value is printed.
const (
	UnitCount    = ""         // a whole number
	UnitBytes    = "bytes"    // 1.5 MiB
	UnitText     = "text"     // a string, as it is
	UnitProgress = "progress" // a fraction from 0 to 1, drawn as a bar
)

// Snapshot is what a server shows at one moment.
type Snapshot struct {
	Title string    `json:"title"`
	Time  time.Time `json:"time"`
	// Notes are lines of text under the title: addresses, how to use the
	// server.
	Notes   []string `json:"notes,omitempty"`
	Figures []Figure `json:"figures"`
	Tables  []Table  `json:"tables"`
}

// Figure is one number, with its unit, and what it is measured against.
type Figure struct {
	// ID names the figure across snapshots (the chart follows it), as a
	// series name does: "bytes_sent".
	ID    string  `json:"id"`
	Label string  `json:"label"`
	Unit  string  `json:"unit"` // UnitCount or UnitBytes
	Value float64 `json:"value"`
	// Counter: the value only grows (a total), so its rate is what moves.
	Counter bool `json:"counter,omitempty"`
	// Rate is a counter's growth per second since the previous snapshot,
	// filled in by the handler; absent on the first snapshot, after a
	// pause of the watchers, and when the value went down (what it
	// counted was removed).
	Rate *float64 `json:"rate,omitempty"`
	// Max is what the value (a counter's rate) is held under, shown as a
	// bar: a transfer limit, an egress cap. 0: none.
	Max float64 `json:"max,omitempty"`
	// Chart puts the figure on the chart: its rate if it is a counter.
	// The chart has one scale, so the figures on it share their unit.
	Chart bool `json:"chart,omitempty"`
}

// Table is a list of rows under a title.
type Table struct {
	Title   string   `json:"title"`
	Columns []Column `json:"columns"`
	// Rows hold one value a column: a string, a number, or nil for none.
	Rows [][]any `json:"rows"`
	// Empty is said instead of the table when it has no rows.
	Empty string `json:"empty,omitempty"`
	// Note is said under the table.
	Note string `json:"note,omitempty"`
}

// Column names a column of a Table and says how its values are printed.
type Column struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
}

// Defaults for the zero fields of Config.
const (
	DefaultInterval   = time.Second
	DefaultMaxStreams = 8
)

// Config configures a Handler.
type Config struct {
	// Snapshot makes a snapshot; the handler fills in Time and the
	// counters' rates. It is called at most once per Interval, and never
	// twice at once. It runs on a request's goroutine, so it should read
	// counters rather than wait on anything.
	Snapshot func() Snapshot
	// Interval is the time between two events of a stream. Default
	// DefaultInterval.
	Interval time.Duration
	// MaxStreams bounds the streams open at once; past it a stream is
	// refused with 503, and the page polls the JSON snapshot instead.
	// Default DefaultMaxStreams.
	MaxStreams int
	// Logger receives the handler's log. Default: discard.
	Logger *slog.Logger
}

// Handler serves the page at Path (and at any path a server routes to it
// that is not below Path, such as the daemon's "/"), and the resources
// below Path. Create it with New.
type Handler struct {
	cfg     Config
	streams chan struct{} // a token per open stream

	mu sync.Mutex // guards the following; held while a snapshot is made
	// last is the latest snapshot, and lastJSON its encoding, made at at.
	last     Snapshot
	lastJSON []byte
	at       time.Time
	// end is closed by EndStreams, ending the streams that took it.
	end chan struct{}
}

// New returns a Handler for cfg.
func New(cfg Config) *Handler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg, streams: make(chan struct{}, cfg.MaxStreams), end: make(chan struct{})}
}

// EndStreams ends the streams open now; the browsers showing them will
// connect again. A server calls it when it shuts down, so that it does
// not wait on streams that would never end by themselves.
func (h *Handler) EndStreams() {
	h.mu.Lock()
	close(h.end)
	h.end = make(chan struct{})
	h.mu.Unlock()
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the dashboard answers GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case SnapshotPath:
		_, body := h.current(time.Now())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(body)
	case EventsPath:
		h.stream(w, r)
	case scriptPath:
		serveStatic(w, r, "dashboard.js", "text/javascript; charset=utf-8")
	case stylePath:
		serveStatic(w, r, "dashboard.css", "text/css; charset=utf-8")
	default:
		if len(r.URL.Path) > len(Path) && r.URL.Path[:len(Path)+1] == Path+"/" {
			http.NotFound(w, r)
			return
		}
		h.page(w)
	}
}

// current returns the snapshot of now, made again if the last is older
// than most of an interval, and its JSON.
func (h *Handler) current(now time.Time) (Snapshot, []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastJSON != nil && now.Sub(h.at) < h.cfg.Interval*9/10 {
		return h.last, h.lastJSON
	}
	s := h.cfg.Snapshot()
	s.Time = now.UTC().Truncate(time.Millisecond)
	// A rate over a long pause (nobody watched) would be an average
	// passed off as the present: leave it out.
	if h.lastJSON != nil && now.Sub(h.at) <= 3*h.cfg.Interval {
		fillRates(s.Figures, h.last.Figures, now.Sub(h.at))
	}
	body, err := json.Marshal(s)
	if err != nil {
		// Only a value JSON cannot hold (NaN, a channel in a row) gets
		// here: the server's bug, shown as such.
		h.cfg.Logger.Error("dashboard: snapshot not encoded", "err", err)
		body, _ = json.Marshal(Snapshot{Title: s.Title, Time: s.Time, Notes: []string{"snapshot not encoded: " + err.Error()}})
	}
	h.last, h.lastJSON, h.at = s, body, now
	return s, body
}

// fillRates sets the rates of the counters of figs from their values in
// prev, dt earlier.
func fillRates(figs, prev []Figure, dt time.Duration) {
	for i := range figs {
		f := &figs[i]
		if !f.Counter || dt <= 0 {
			continue
		}
		for _, p := range prev {
			if p.ID == f.ID && f.Value >= p.Value {
				r := (f.Value - p.Value) / dt.Seconds()
				f.Rate = &r
				break
			}
		}
	}
}

// writeTimeout bounds the write of one event: a browser that stops
// reading must not keep its stream's slot.
const writeTimeout = 10 * time.Second

// stream sends a snapshot an interval until the client goes, the
// connection fails or EndStreams is called.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request) {
	select {
	case h.streams <- struct{}{}:
		defer func() { <-h.streams }()
	default:
		w.Header().Set("Retry-After", "10")
		http.Error(w, fmt.Sprintf("%d dashboards are streaming already; poll %s", h.cfg.MaxStreams, SnapshotPath), http.StatusServiceUnavailable)
		return
	}
	h.mu.Lock()
	end := h.end
	h.mu.Unlock()

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // a proxy in front must not hold the events
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	// retry: how long a browser waits before it connects again.
	if !h.send(w, rc, []byte("retry: 2000\n\n")) {
		return
	}
	tick := time.NewTicker(h.cfg.Interval)
	defer tick.Stop()
	var ev bytes.Buffer
	for {
		_, body := h.current(time.Now())
		ev.Reset()
		ev.WriteString("data: ")
		ev.Write(body) // JSON as encoding/json writes it: one line
		ev.WriteString("\n\n")
		if !h.send(w, rc, ev.Bytes()) {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-end:
			return
		case <-tick.C:
		}
	}
}

// send writes b and flushes it, within writeTimeout.
func (h *Handler) send(w http.ResponseWriter, rc *http.ResponseController, b []byte) bool {
	if err := rc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return false
	}
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}

//go:embed static
var static embed.FS

func serveStatic(w http.ResponseWriter, r *http.Request, name, contentType string) {
	b, err := static.ReadFile("static/" + name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	// The script and the style change with the binary only; a browser
	// revalidates them (ETag) rather than keep a stale one.
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", staticETag)
	if r.Header.Get("If-None-Match") == staticETag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if r.Method != http.MethodHead {
		w.Write(b)
	}
}

// staticETag identifies the embedded files' version.
var staticETag = func() string {
	var sum uint64 = 14695981039346656037 // FNV-1a over both files
	for _, name := range []string{"dashboard.js", "dashboard.css"} {
		b, _ := static.ReadFile("static/" + name)
		for _, c := range b {
			sum = (sum ^ uint64(c)) * 1099511628211
		}
	}
	return `"` + strconv.FormatUint(sum, 36) + `"`
}()

// csp lets the page run its own script and style and reach its own
// server, and nothing else: a name that slipped into markup could not
// load or run anything.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var pageTemplate = template.Must(template.New("dashboard.html").Funcs(template.FuncMap{
	"format": Format,
	"cell":   formatCell,
	"num":    func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) },
	"shown":  shown,
	"rate": func(f Figure) string {
		if f.Rate == nil {
			return "–"
		}
		return Format(*f.Rate, f.Unit) + "/s"
	},
	// pct prints a fraction as a percentage, as the script's pct does.
	"pct": func(v any) string {
		f, _ := v.(float64)
		return strconv.FormatFloat(math.Round(1000*f)/10, 'f', 1, 64)
	},
}).ParseFS(static, "static/dashboard.html"))

// shown is what a figure's bar measures: a counter's rate, or the value.
func shown(f Figure) float64 {
	switch {
	case !f.Counter:
		return f.Value
	case f.Rate != nil:
		return *f.Rate
	}
	return 0
}

// page renders the page with the snapshot of now.
func (h *Handler) page(w http.ResponseWriter) {
	s, _ := h.current(time.Now())
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, s); err != nil {
		h.cfg.Logger.Error("dashboard: page not rendered", "err", err)
		http.Error(w, "dashboard: "+err.Error(), http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	w.Write(b.Bytes())
}

// Format prints v in unit as the page's script does (dashboard.js, fmt),
// so that the page reads the same before and after its first update.
func Format(v float64, unit string) string {
	if unit != UnitBytes {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	if math.Abs(v) < 1024 {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64) + " B"
	}
	i := 0
	for math.Abs(v) >= 1024 && i < 5 {
		v /= 1024
		i++
	}
	// Half away from zero, as JavaScript's toFixed rounds.
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', 1, 64) + " " + string("KMGTPE"[i-1]) + "iB"
}

// formatCell prints a table's value in unit.
func formatCell(v any, unit string) string {
	switch v := v.(type) {
	case nil:
		return "–"
	case string:
		return v
	case float64:
		return Format(v, unit)
	case int:
		return Format(float64(v), unit)
	case int64:
		return Format(float64(v), unit)
	default:
		return fmt.Sprint(v)
	}
}
