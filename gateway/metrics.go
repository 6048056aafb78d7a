package gateway

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/health"
	"github.com/stampede-dev/stampede/internal/metrics"
)

// The gateway's own pages, on its own address in origin form (a proxy
// request names another host, and goes there): /metrics and the health
// checks. Every other request is counted by how it was answered.

// How a request was answered, for the metrics: the Stampede-Gateway
// header's values, CONNECT tunnels, and "gateway" for what the gateway
// answers itself (its pages, its refusals, an origin it could not reach).
const (
	answerSwarm = iota
	answerBundle
	answerDirect
	answerGateway
	answerTunnel // last: the histograms leave tunnels out
	numAnswers
)

var answerNames = [numAnswers]string{"swarm", "bundle", "direct", "gateway", "tunnel"}

func answerOf(header string) int {
	for i, name := range answerNames[:answerGateway] {
		if header == name {
			return i
		}
	}
	return answerGateway
}

// series are the gateway's metrics, each named by the question it
// answers; the cache's gauges are read at each scrape (cacheCollector).
type series struct {
	requests        [numAnswers]prometheus.Counter
	bytesSent       [numAnswers]prometheus.Counter
	responses       *prometheus.CounterVec // by status code, as they come
	requestDuration [numAnswers]prometheus.Observer
	firstByte       [numAnswers]prometheus.Observer
	pieceWait       prometheus.Observer

	collectors metrics.Collectors
}

func newSeries() *series {
	m := new(series)
	c := &m.collectors
	copy(m.requests[:], c.Counters("stampede_gateway_requests_total",
		"Requests by how they were answered: swarm (a file from the cache and its swarm), bundle (from a page's bundle), "+
			"direct (proxied straight through), gateway (the gateway's own pages and refusals, an origin it could not reach), tunnel (CONNECT).",
		"answer", answerNames[:]))
	copy(m.bytesSent[:], c.Counters("stampede_gateway_bytes_sent_total",
		"Response body bytes sent to clients, by how the request was answered (tunnels not counted).", "answer", answerNames[:answerTunnel]))
	m.responses = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stampede_gateway_responses_total",
		Help: "Responses by status code (tunnels not counted)."}, []string{"code"})
	*c = append(*c, m.responses)
	// Tunnels are not timed: they last as long as their client wants.
	histogram := func(dst []prometheus.Observer, name, help string) {
		copy(dst, c.Histograms(name, help, "answer", answerNames[:answerTunnel], metrics.LatencyBuckets))
	}
	histogram(m.requestDuration[:], "stampede_gateway_request_duration_seconds",
		"Time from a request's arrival to the end of its answer, by how it was answered (tunnels not counted).")
	histogram(m.firstByte[:], "stampede_gateway_time_to_first_byte_seconds",
		"Time from a request's arrival to its answer's header going out, by how it was answered: "+
			"a swarm answer's includes asking the origin (HEAD), the manifest and, for a body, its first piece.")
	m.pieceWait = c.Histogram("stampede_gateway_piece_wait_seconds",
		"Time a client's read waited for a piece that was not in yet, until the swarm or the origin brought it and it was verified "+
			"(reads of pieces already in are not counted).", metrics.LatencyBuckets)
	return m
}

// The cache's gauges.
var (
	cacheFilesDesc    = prometheus.NewDesc("stampede_gateway_cache_files", "Files in the cache, complete or downloading.", nil, nil)
	cacheBytesDesc    = prometheus.NewDesc("stampede_gateway_cache_bytes", "Bytes of the files in the cache (their full sizes).", nil, nil)
	cacheMaxDesc      = prometheus.NewDesc("stampede_gateway_cache_max_bytes", "Bound of the cache's bytes (--cache-size).", nil, nil)
	cacheCompleteDesc = prometheus.NewDesc("stampede_gateway_cache_complete_files", "Files in the cache that are complete.", nil, nil)
	cacheReadingDesc  = prometheus.NewDesc("stampede_gateway_cache_reading_files", "Files in the cache that clients are reading.", nil, nil)
	cacheSeedingDesc  = prometheus.NewDesc("stampede_gateway_cache_seeding_files", "Complete files seeded to their swarms (at most --max-cache-seeds).", nil, nil)
	cacheDroppedDesc  = prometheus.NewDesc("stampede_gateway_cache_damaged_files_total", "Files found damaged, and dropped, by the check of the cache at start.", nil, nil)
)

// cacheCollector reads the cache's gauges from one snapshot of it.
func (g *Gateway) cacheCollector() prometheus.Collector {
	return metrics.CollectFunc{
		Descs: []*prometheus.Desc{cacheFilesDesc, cacheBytesDesc, cacheMaxDesc, cacheCompleteDesc, cacheReadingDesc, cacheSeedingDesc, cacheDroppedDesc},
		F: func(ch chan<- prometheus.Metric) {
			st := g.cache.stats()
			metrics.Gauge(ch, cacheFilesDesc, float64(st.Files))
			metrics.Gauge(ch, cacheBytesDesc, float64(st.Bytes))
			metrics.Gauge(ch, cacheMaxDesc, float64(g.cfg.CacheSize))
			metrics.Gauge(ch, cacheCompleteDesc, float64(st.Complete))
			metrics.Gauge(ch, cacheReadingDesc, float64(st.Reading))
			metrics.Gauge(ch, cacheSeedingDesc, float64(st.Seeding))
			metrics.Counter(ch, cacheDroppedDesc, float64(st.Dropped))
		},
	}
}

// initMetrics registers the gateway's series on its registry and makes
// its own pages.
func (g *Gateway) initMetrics() error {
	reg := g.cfg.Registry
	if reg == nil {
		reg = metrics.NewRegistry()
	}
	if err := reg.Register(metrics.Collectors{g.metrics.collectors, g.cacheCollector()}); err != nil {
		return errors.New("gateway: Config.Registry has a gateway's series already: one registry per gateway")
	}
	g.ownPages = map[string]http.Handler{
		"/metrics":           metrics.Handler(reg, g.log),
		contract.HealthzPath: health.Live(),
		contract.ReadyzPath: health.Ready(g.log, health.Check{Name: "cache directory",
			Run: health.DirReadable(func() (*os.File, error) { return os.Open(g.cfg.CacheDir) })}),
	}
	return nil
}

// page returns the gateway's own page r asks for, or nil: GET and HEAD of
// one of its paths, in origin form.
func (g *Gateway) page(r *http.Request) http.Handler {
	if r.URL.IsAbs() || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return nil
	}
	return g.ownPages[r.URL.Path]
}

// countingWriter is the ResponseWriter of every request but CONNECT: it
// notes the status, when the header went out and the body's bytes, for
// the metrics. It passes ReadFrom on, so that bodies from the cache still
// go out by sendfile(2), and Unwrap, for http.ResponseController.
type countingWriter struct {
	http.ResponseWriter
	code     int // 0 until the header is written
	answer   int
	headerAt time.Time
	bytes    int64
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *countingWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 { // not an informational header
		w.code, w.headerAt, w.answer = code, time.Now(), answerOf(w.Header().Get(Header))
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

func (w *countingWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	rf, ok := w.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.Copy(writerOnly{w}, src)
	}
	n, err := rf.ReadFrom(src)
	w.bytes += n
	return n, err
}

// count accounts for a request answered through w, which arrived at
// start.
func (m *series) count(w *countingWriter, start time.Time) {
	code, answer := w.code, w.answer
	if code == 0 { // nothing written: net/http sends an empty 200
		code, answer = http.StatusOK, answerOf(w.Header().Get(Header))
	}
	m.requests[answer].Inc()
	m.bytesSent[answer].Add(float64(w.bytes))
	m.responses.WithLabelValues(strconv.Itoa(code)).Inc()
	m.requestDuration[answer].Observe(time.Since(start).Seconds())
	if !w.headerAt.IsZero() {
		m.firstByte[answer].Observe(w.headerAt.Sub(start).Seconds())
	}
}
