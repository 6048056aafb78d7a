package origin

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/metrics"
	"github.com/stampede-dev/stampede/tracker"
)

// kind classifies requests for the metrics.
type kind int

const (
	kindFile        kind = iota // a file, from Dir or proxied to Upstream
	kindManifest                // under contract.ManifestPrefix
	kindMetrics                 // /metrics
	kindOther                   // directory indexes, bad methods, bad paths
	kindTracker                 // announces to the embedded tracker
	kindBundleIndex             // under contract.BundleIndexPrefix
	kindHealth                  // contract.HealthzPath and ReadyzPath
	numKinds
)

var kindNames = [numKinds]string{"file", "manifest", "metrics", "other", "tracker", "bundle_index", "health"}

// Where a manifest request found its manifest without computing it.
const (
	hitMemory = iota
	hitDisk
	numHits
)

var hitNames = [numHits]string{"memory", "disk"}

// Why the origin sent a request upstream.
const (
	upstreamProxy      = iota // a client's request, proxied
	upstreamRevalidate        // HEAD to learn a resource's current validators
	upstreamManifest          // GET to compute a manifest
	numUpstream
)

var upstreamNames = [numUpstream]string{"proxy", "revalidate", "manifest"}

// reasonNoPeers is the reason of a swarm peer that knows no other peer;
// reasonSpare of one fetching a piece its peers have, because the origin
// told of a budget with room and answers quickly (swarm.ReasonSpare).
const (
	reasonNoPeers = contract.ReasonOriginPrefix + "no-peers"
	reasonSpare   = contract.ReasonOriginPrefix + "spare"
)

// reasonNames are the reasons counted; anything else counts as "other" (a
// header must not grow the metrics without bound).
var reasonNames = [...]string{"none", contract.ReasonPiece, contract.ReasonRetryLate, contract.ReasonRetryError, contract.ReasonStream,
	contract.ReasonOriginPrefix + "no-peer-has-it", reasonNoPeers, contract.ReasonOriginPrefix + "stalled",
	contract.ReasonOriginPrefix + "peers-failing", reasonSpare, "other"}

func reasonIndex(h string) int {
	if h == "" {
		return 0
	}
	for i, r := range reasonNames {
		if r == h {
			return i
		}
	}
	return len(reasonNames) - 1
}

// series are the origin's counters, each named by the question it
// answers, and its histograms. Its gauges read the gate (newRegistry).
type series struct {
	bytesSent         prometheus.Counter
	requests          [numKinds]prometheus.Counter
	rejectedOverload  prometheus.Counter
	rejectedInSwarm   prometheus.Counter                    // pieces sent just now (pick.go)
	rejectedBudget    prometheus.Counter                    // past the file's egress budget (budget.go)
	budgetOverruns    [len(overrunNames)]prometheus.Counter // answers sent past a budget, by why
	stalled           prometheus.Counter                    // responses ended by WriteIdleTimeout
	overload          [numOutcomes]prometheus.Counter       // answers past MaxTransfers, by outcome
	overloadBytes     prometheus.Counter                    // piece bytes of overload answers
	pieceSends        [numSends]prometheus.Counter          // single-piece responses, first copy or again
	picksSwapped      prometheus.Counter                    // of those, sent instead of the piece asked (pick.go)
	paced             [numPace]prometheus.Counter           // piece answers by how their turn went (pace.go)
	manifestsComputed prometheus.Counter
	manifestHits      [numHits]prometheus.Counter
	manifestFailures  prometheus.Counter                  // computations that failed
	cacheRemoved      [numCacheRemoved]prometheus.Counter // files the cache sweeper removed, by why
	cacheBytes        prometheus.Gauge                    // bytes of cache files after the last sweep
	upstreamRequests  [numUpstream]prometheus.Counter
	fileReasons       [len(reasonNames)]prometheus.Counter // file requests by contract.ReasonHeader
	responses         *prometheus.CounterVec               // by status code, as they come

	requestDuration [numKinds]prometheus.Observer
	firstByte       [numKinds]prometheus.Observer
	pieceDuration   prometheus.Observer

	// collectors are the above as registered.
	collectors metrics.Collectors
}

func newSeries() *series {
	m := new(series)
	c := &m.collectors
	vec := func(dst []prometheus.Counter, name, help, label string, values []string) {
		copy(dst, c.Counters(name, help, label, values))
	}
	histogram := func(dst []prometheus.Observer, name, help string) {
		copy(dst, c.Histograms(name, help, "kind", kindNames[:], metrics.LatencyBuckets))
	}

	m.bytesSent = c.Counter("stampede_origin_bytes_sent_total", "Response body bytes sent, except those of /metrics and the health checks.")
	vec(m.requests[:], "stampede_origin_requests_total", "Requests answered, by what they asked for.", "kind", kindNames[:])
	vec(m.fileReasons[:], "stampede_origin_file_requests_total", "File requests by the reason the client gave in the Stampede-Reason header (\"none\": no header, e.g. curl).", "reason", reasonNames[:])
	m.responses = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stampede_origin_responses_total", Help: "Responses by status code."}, []string{"code"})
	*c = append(*c, m.responses)

	rejected := c.Counters("stampede_origin_rejected_total", "Requests turned away with 503 and Retry-After, by reason: "+
		"\"overload\" past the transfer limit, \"in-swarm\" a swarm peer's piece request whose pieces were all sent just now, "+
		"\"budget\" a swarm client's request past the file's egress budget (--max-copies per --budget-window) whose pieces all went out this window.",
		"reason", []string{"overload", "in-swarm", "budget"})
	m.rejectedOverload, m.rejectedInSwarm, m.rejectedBudget = rejected[0], rejected[1], rejected[2]
	vec(m.budgetOverruns[:], "stampede_origin_budget_overruns_total", "File bodies sent past their file's egress budget (--max-copies per --budget-window), by why they were not refused: "+
		"unsent (a piece no swarm client got this window), alone (a swarm client that says it has no peer delivering), "+
		"plain (a client outside the swarm, never refused), unknown (the file's manifest is not at hand to tell its pieces).",
		"why", overrunNames[:])
	m.stalled = c.Counter("stampede_origin_responses_stalled_total", "Responses ended because their client took none of their bytes "+
		"for --write-idle-timeout (a file body's transfer slot is freed with it).")

	vec(m.overload[:], "stampede_origin_overload_answers_total", "Requests for a file body past --max-transfers, by what they got: "+
		"piece (overload mode: 206 with one piece and peers), or 503 because legacy (the client did not ask for overload mode), "+
		"off (--overload-transfers 0), full (--overload-transfers answers in flight), no-manifest (not computed yet), "+
		"exhausted (every piece handed out --overload-copies times this --overload-window), upstream (no overload mode in front of an upstream), "+
		"budget (past the file's egress budget, every piece not handed out this round went to a swarm client this --budget-window).",
		"outcome", outcomeNames[:])
	m.overloadBytes = c.Counter("stampede_origin_overload_bytes_sent_total", "Piece bytes sent in overload answers (part of stampede_origin_bytes_sent_total).")

	vec(m.pieceSends[:], "stampede_origin_piece_sends_total", "Single-piece range responses of files whose manifest is cached, by whether the piece had been sent before (first, again): swarm peers should make nearly all of them first.",
		"copy", sendNames[:])
	m.picksSwapped = c.Counter("stampede_origin_piece_picks_total", "Single-piece responses that carry another piece than the one asked, picked among the request's Stampede-Candidates as the one sent least.")
	vec(m.paced[:], "stampede_origin_paced_total", "Piece answers to swarm peers' origin fetches, sent a few at a time in the order asked, by how their turn went: "+
		"turn (got one), waited (went out without one after 2 s), queue_full (answered 503: more than 1 s of answers were waiting).",
		"outcome", paceNames[:])

	m.manifestsComputed = c.Counter("stampede_origin_manifests_computed_total", "Manifests computed by hashing a file.")
	m.manifestFailures = c.Counter("stampede_origin_manifest_failures_total", "Manifest computations that failed.")
	vec(m.manifestHits[:], "stampede_origin_manifest_cache_hits_total", "Manifests found already computed, by where.", "where", hitNames[:])
	m.cacheBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "stampede_origin_manifest_cache_bytes", Help: "Bytes of manifest files in --cache-dir after the last sweep."})
	*c = append(*c, m.cacheBytes)
	vec(m.cacheRemoved[:], "stampede_origin_manifest_cache_removed_total", "Manifest files the cache sweeper removed, by why: "+
		"gone (the file or page no longer exists), changed (the file has another version), unreadable, "+
		"temp (a temporary file whose writer died), evicted (least recently used, past the cache's bound).",
		"reason", cacheRemovedNames[:])
	vec(m.upstreamRequests[:], "stampede_origin_upstream_requests_total", "Requests sent to the upstream, by purpose.", "purpose", upstreamNames[:])

	histogram(m.requestDuration[:], "stampede_origin_request_duration_seconds",
		"Time from a request's arrival to the end of its answer (the last byte handed to the kernel), by what it asked for.")
	histogram(m.firstByte[:], "stampede_origin_time_to_first_byte_seconds",
		"Time from a request's arrival to its answer's header going out, by what it asked for: "+
			"a manifest's includes hashing the file, a swarm peer's piece its turn (stampede_origin_paced_total).")
	m.pieceDuration = c.Histogram("stampede_origin_piece_duration_seconds",
		"Time from a request for one piece (a swarm peer's origin fetch, or answered with one piece in overload mode) "+
			"to the end of its answer: how long a peer waits for a piece from the origin.", metrics.LatencyBuckets)
	return m
}

func (m *series) countResponse(code int) {
	m.responses.WithLabelValues(strconv.Itoa(code)).Inc()
}

// newRegistry returns the registry of an origin's /metrics: m, the gauges
// of g, the rate limit, the budget (copies per window, 0 none), the series
// of t when an embedded tracker is given, and what package metrics adds to
// every server's.
func newRegistry(m *series, g *gate, rate int64, copies float64, window time.Duration, t *tracker.Tracker) *prometheus.Registry {
	r := metrics.NewRegistry()
	r.MustRegister(m.collectors)
	gauge := func(name, help string, f func() float64) {
		r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("stampede_origin_transfers_active", "File bodies being sent.", func() float64 { return float64(g.activeCount()) })
	gauge("stampede_origin_transfers_max", "File bodies sent at most at once (--max-transfers).", func() float64 { return float64(g.max) })
	gauge("stampede_origin_overload_answers_active", "Overload answers being sent.", func() float64 { return float64(g.answeringCount()) })
	gauge("stampede_origin_overload_answers_max", "Overload answers sent at most at once, past --max-transfers (--overload-transfers; 0: overload mode off).",
		func() float64 { return float64(g.maxAnswers) })
	gauge("stampede_origin_rate_limit_bytes_per_second", "Egress limit of file bodies in bytes per second (--rate); 0 is unlimited.",
		func() float64 { return float64(rate) })
	// The name it had before it followed the conventions (a rate is
	// per_second): dashboards read it, so it stays for a release
	// (docs/architecture.md, Metrics).
	gauge("stampede_origin_budget_copies", "Egress budget: copies of each file version sent to swarm clients per --budget-window at most (--max-copies); 0 is no budget.",
		func() float64 { return copies })
	gauge("stampede_origin_budget_window_seconds", "The period the egress budget counts over (--budget-window).",
		func() float64 { return window.Seconds() })
	gauge("stampede_origin_rate_limit_bytes", "Deprecated: stampede_origin_rate_limit_bytes_per_second under its old name, kept for one release.",
		func() float64 { return float64(rate) })
	if t != nil {
		r.MustRegister(t.Collector())
	}
	return r
}
