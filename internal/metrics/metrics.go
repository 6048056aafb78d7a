// Package metrics is what stampede's servers (the origin, the tracker, the
// gateway, the daemon) share to expose their metrics with the Prometheus
// Go client: the registry each server makes for itself, the /metrics
// handler, and the buckets of their latency histograms. Each package
// defines its own series and registers them; this one holds no series of
// its own but stampede_build_info.
//
// A server gets a registry of its own, never the client's global default:
// a test, or a daemon with its gateway, runs several servers in one
// process, and each must count only what it did. Every registry carries
// the Go runtime's series (go_*), the process's (process_*, from /proc on
// Linux) and stampede_build_info{version, goversion}, whose value is 1.
package metrics

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// Version is the version stampede_build_info reports for registries made
// after it is set. The stampede command sets it, before it starts a
// server, to the version it was linked with; left empty, the main
// module's version from the build information is used (what
// `go install ...@v1.2.3` records), else "unknown".
var Version string

// version returns the version to report.
func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "unknown"
}

// NewRegistry returns a registry for one server, with the Go runtime's and
// the process's collectors and stampede_build_info registered.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "stampede_build_info",
		Help:        "Always 1; its labels say which stampede is running: the version it was built as and the Go release that built it.",
		ConstLabels: prometheus.Labels{"version": version(), "goversion": runtime.Version()},
	})
	info.Set(1)
	r.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
	)
	return r
}

// LatencyBuckets are the upper bounds, in seconds, of the servers'
// request, time-to-first-byte and piece histograms: from a millisecond (a
// manifest from memory, a piece on loopback) to five minutes (a large
// file's body at a capped rate, a manifest hashed from a slow disk), in
// 1-2.5-5 steps so that each bucket is a round number a person reads
// without a calculator. Sixteen buckets keep a histogram by a handful of
// labels within a few hundred series.
var LatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// Handler serves g in the Prometheus text format (or whichever format the
// scraper asks for in Accept), never cached. A collector that fails is
// logged to log, and the page is served without its series rather than
// not at all: an operator looking at a failing store still wants the
// rest.
func Handler(g prometheus.Gatherer, log *slog.Logger) http.Handler {
	h := promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      errorLog{log},
		ErrorHandling: promhttp.ContinueOnError,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// errorLog adapts a *slog.Logger to promhttp's logger.
type errorLog struct{ log *slog.Logger }

func (l errorLog) Println(v ...any) {
	l.log.Warn("metrics: " + strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}

// WriteText writes the families of g whose names start with prefix ("" for
// all) in the Prometheus text format, version 0.0.4. It writes what g
// gathered even when g fails, and then returns g's error.
func WriteText(w io.Writer, g prometheus.Gatherer, prefix string) error {
	mfs, gatherErr := g.Gather()
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), prefix) {
			continue
		}
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	return gatherErr
}

// Collectors is a collector made of others, collected in order, one after
// the other: a package makes its series with the methods below and
// registers them as one. The order matters where a collector's values
// must be read before the others' (the tracker asks its store first, so
// that a failure is counted on the same page).
type Collectors []prometheus.Collector

// Describe implements prometheus.Collector.
func (cs Collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (cs Collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}

// Counter makes a counter and adds it to cs.
func (cs *Collectors) Counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	*cs = append(*cs, c)
	return c
}

// Counters makes a counter vector with one label, adds it to cs and
// returns its counters for values, in order. Each is there from the
// start at 0: a rate over a series that appears only at its first event
// misses that event.
func (cs *Collectors) Counters(name, help, label string, values []string) []prometheus.Counter {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	*cs = append(*cs, v)
	counters := make([]prometheus.Counter, len(values))
	for i, lv := range values {
		counters[i] = v.WithLabelValues(lv)
	}
	return counters
}

// Histogram makes a histogram with the given buckets and adds it to cs.
func (cs *Collectors) Histogram(name, help string, buckets []float64) prometheus.Observer {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	*cs = append(*cs, h)
	return h
}

// Histograms makes a histogram vector with one label and the given
// buckets, adds it to cs and returns its histograms for values, in order,
// each there from the start as Counters' counters are.
func (cs *Collectors) Histograms(name, help, label string, values []string, buckets []float64) []prometheus.Observer {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{label})
	*cs = append(*cs, v)
	hs := make([]prometheus.Observer, len(values))
	for i, lv := range values {
		hs[i] = v.WithLabelValues(lv)
	}
	return hs
}

// CollectFunc is a collector of the metrics f sends, described by descs:
// for values computed once per scrape (several gauges from one snapshot of
// a structure, taken under its lock once).
type CollectFunc struct {
	Descs []*prometheus.Desc
	F     func(ch chan<- prometheus.Metric)
}

// Describe implements prometheus.Collector.
func (c CollectFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.Descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c CollectFunc) Collect(ch chan<- prometheus.Metric) { c.F(ch) }

// Gauge sends the gauge of desc with value v and label values lvs; for
// CollectFunc's functions.
func Gauge(ch chan<- prometheus.Metric, desc *prometheus.Desc, v float64, lvs ...string) {
	ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, lvs...)
}

// Counter sends the counter of desc with value v and label values lvs;
// for CollectFunc's functions, over counts kept elsewhere.
func Counter(ch chan<- prometheus.Metric, desc *prometheus.Desc, v float64, lvs ...string) {
	ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, lvs...)
}
