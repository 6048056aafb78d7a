package tracker

import (
	"context"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-dev/stampede/internal/health"
	"github.com/stampede-dev/stampede/internal/metrics"
	"github.com/stampede-dev/stampede/manifest"
)

// Why a swarm was dropped, for the metrics.
const (
	swarmsRemovedIdle = iota
	swarmsRemovedLimit
	numSwarmsRemoved
)

var swarmsRemovedNames = [numSwarmsRemoved]string{"idle", "limit"}

var events = [...]Event{EventStarted, EventCompleted, EventStopped, EventNone}

func eventIndex(e Event) int {
	for i, x := range events {
		if x == e {
			return i
		}
	}
	panic("tracker: unknown event " + string(e))
}

// announceBuckets are the upper bounds, in seconds, of
// stampede_tracker_announce_duration_seconds: from 100 µs (the memory
// store answers in a few) through the milliseconds of a Redis round trip
// to 2.5 s, past DefaultStoreTimeout, where a store that does not answer
// ends up.
var announceBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// series are the tracker's counters, each named by the question it
// answers, and its histogram. The gauges come from the store at each
// scrape (collector).
type series struct {
	announces        [len(events)]prometheus.Counter
	rateLimited      prometheus.Counter
	late             prometheus.Counter
	addressFull      prometheus.Counter
	swarmsFull       prometheus.Counter
	throttled        prometheus.Counter
	untracked        prometheus.Counter
	unauthorized     prometheus.Counter
	rejected         prometheus.Counter
	failed           prometheus.Counter // calls to the store that failed
	peersRemoved     [numRemoved]prometheus.Counter
	swarmsRemoved    [numSwarmsRemoved]prometheus.Counter
	announceDuration prometheus.Observer

	// collectors are the above as registered, in the order of the page.
	collectors metrics.Collectors
}

// The gauges read from the store at each scrape.
var (
	swarmsDesc    = prometheus.NewDesc("stampede_tracker_swarms", "Swarms tracked.", nil, nil)
	peersDesc     = prometheus.NewDesc("stampede_tracker_peers", "Peers in the swarms' tables (at most max-peers-per-swarm per swarm).", nil, nil)
	estimatedDesc = prometheus.NewDesc("stampede_tracker_peers_estimated", "Sum of the swarms' estimated sizes, counting peers beyond the tables.", nil, nil)
)

func newSeries() *series {
	m := new(series)
	c := &m.collectors
	var eventNames []string
	for _, e := range events {
		eventNames = append(eventNames, e.metricName())
	}
	copy(m.announces[:], c.Counters("stampede_tracker_announces_total", `Well-formed announces, by event ("periodic": none).`, "event", eventNames))
	m.rateLimited = c.Counter("stampede_tracker_announces_rate_limited_total", "Announces less than a second after the same peer's last, answered from the cached peer list.")
	m.late = c.Counter("stampede_tracker_announces_late_total", `Announces, other than "started", from a peer that said "stopped" within the last interval (one sent before overtaken by it): answered, not added back.`)
	m.addressFull = c.Counter("stampede_tracker_announces_address_full_total", "Announces of a peer new to a swarm whose table holds max-peers-per-address peers of its source (address, IPv6 /64) already: answered, not added.")
	m.swarmsFull = c.Counter("stampede_tracker_announces_swarms_full_total", "Announces to a new swarm while max-swarms swarms were kept, none of which it may push out (no source over its share, no lone swarm it may take): answered as alone, the swarm not kept.")
	m.throttled = c.Counter("stampede_tracker_announces_throttled_total", "Announces refused because their source (address, IPv6 /64) was past its announce rate: HTTP ones with 429, WebSocket ones with an error message.")
	m.unauthorized = c.Counter("stampede_tracker_announces_unauthorized_total", "Announces refused with 403 by a private tracker (--trust-key): without a token, or with one refused.")
	m.untracked = c.Counter("stampede_tracker_announces_untracked_total", "Announces refused with 403: to a swarm this tracker does not track (an origin's tracker tracks the files it serves).")
	m.rejected = c.Counter("stampede_tracker_announces_rejected_total", "Announces refused with 400 for bad parameters.")
	m.failed = c.Counter("stampede_tracker_store_failures_total", "Calls to the swarm store that failed (announces answered 503, peer lookups and metrics left empty).")
	copy(m.peersRemoved[:], c.Counters("stampede_tracker_peers_removed_total", "Peers taken out of a swarm's table, by reason.", "reason", removedNames[:]))
	copy(m.swarmsRemoved[:], c.Counters("stampede_tracker_swarms_removed_total", "Swarms dropped, by reason.", "reason", swarmsRemovedNames[:]))
	m.announceDuration = c.Histogram("stampede_tracker_announce_duration_seconds",
		"Time to answer a well-formed announce, the call to the swarm store included, by the tracker's clock.", announceBuckets)
	return m
}

func (m *series) countRemoved(r *Removals) {
	for i, n := range [...]int{
		removedStopped:   r.PeersStopped,
		removedExpired:   r.PeersExpired,
		removedTableFull: r.PeersTableFull,
	} {
		if n != 0 {
			m.peersRemoved[i].Add(float64(n))
		}
	}
	if r.SwarmsIdle != 0 {
		m.swarmsRemoved[swarmsRemovedIdle].Add(float64(r.SwarmsIdle))
	}
	if r.SwarmsLimit != 0 {
		m.swarmsRemoved[swarmsRemovedLimit].Add(float64(r.SwarmsLimit))
	}
}

// collector is the tracker's series as one prometheus.Collector. It asks
// the store for the gauges first, so that what that call removes, or its
// failure, is counted on the same page; a store that fails (within
// Config.StoreTimeout) leaves the gauges out, and its error goes to
// statsErr when that is set.
type collector struct {
	t        *Tracker
	statsErr *error
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- swarmsDesc
	ch <- peersDesc
	ch <- estimatedDesc
	c.t.metrics.collectors.Describe(ch)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	t := c.t
	st, err := t.Stats(context.Background())
	if err != nil {
		t.log.Warn("metrics: the store did not answer", "err", err)
		if c.statsErr != nil {
			*c.statsErr = err
		}
	} else {
		metrics.Gauge(ch, swarmsDesc, float64(st.Swarms))
		metrics.Gauge(ch, peersDesc, float64(st.Peers))
		metrics.Gauge(ch, estimatedDesc, float64(st.Estimated))
	}
	t.metrics.collectors.Collect(ch)
}

// Collector returns the tracker's series (stampede_tracker_*) as one
// collector, for an embedder to register on the registry of its own
// /metrics page (package origin does). Each scrape has the store drop idle
// swarms and expired peers, so the gauges are current.
func (t *Tracker) Collector() prometheus.Collector { return collector{t: t} }

// WriteMetrics writes the tracker's series in the Prometheus text
// exposition format, version 0.0.4. A store that fails (within
// Config.StoreTimeout) leaves the gauges out; the rest is written all the
// same, and the error returned.
func (t *Tracker) WriteMetrics(w io.Writer) error {
	var statsErr error
	r := prometheus.NewRegistry()
	r.MustRegister(collector{t: t, statsErr: &statsErr})
	if err := metrics.WriteText(w, r, ""); err != nil {
		return err
	}
	return statsErr
}

// Stats counts the swarms and their peers, as the gauges of the metrics
// do, having the store drop the idle swarms and expired peers first. A
// store that does not answer within Config.StoreTimeout fails it.
func (t *Tracker) Stats(ctx context.Context) (StoreStats, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.StoreTimeout)
	defer cancel()
	st, err := t.store.Stats(ctx, t.cfg.Now())
	if err != nil {
		t.metrics.failed.Inc()
		return StoreStats{}, storeError(err)
	}
	t.metrics.countRemoved(&st.Removed)
	return st, nil
}

// Ready returns nil when the store answers, within Config.StoreTimeout:
// a lookup of a swarm no file has, which changes nothing.
func (t *Tracker) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.StoreTimeout)
	defer cancel()
	res, err := t.store.Peers(ctx, manifest.Hash{}, 0, 1, t.cfg.Now())
	if err != nil {
		t.metrics.failed.Inc()
		return storeError(err)
	}
	t.metrics.countRemoved(&res.Removed)
	return nil
}

// registry is the standalone tracker's: its series with the Go runtime's,
// the process's and stampede_build_info.
func (t *Tracker) registry() *prometheus.Registry {
	t.regOnce.Do(func() {
		t.reg = metrics.NewRegistry()
		t.reg.MustRegister(t.Collector())
	})
	return t.reg
}

// Handler returns the routes of a standalone tracker ("stampede tracker"):
// announces at /announce and WellKnownPath, /metrics (the tracker's
// series, go_*, process_* and stampede_build_info), and the health checks
// at contract.HealthzPath and contract.ReadyzPath (ready: the store
// answers).
func (t *Tracker) Handler() http.Handler {
	mux := http.NewServeMux()
	t.mountAnnounce(mux)
	t.mountAdmin(mux)
	return mux
}

// AnnounceHandler is Handler without /metrics and the health checks, which
// AdminHandler then serves on a listener of their own ("stampede tracker
// --admin").
func (t *Tracker) AnnounceHandler() http.Handler {
	mux := http.NewServeMux()
	t.mountAnnounce(mux)
	return mux
}

// AdminHandler serves /metrics and the health checks alone.
func (t *Tracker) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	t.mountAdmin(mux)
	return mux
}

func (t *Tracker) mountAnnounce(mux *http.ServeMux) {
	mux.Handle("/announce", t)
	mux.Handle(WellKnownPath, t)
}

func (t *Tracker) mountAdmin(mux *http.ServeMux) {
	mux.Handle("GET /metrics", metrics.Handler(t.registry(), t.log))
	health.Mount(mux, t.log, health.Check{Name: "tracker store", Run: t.Ready})
}
