package codns

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-dev/stampede/internal/health"
	"github.com/stampede-dev/stampede/internal/metrics"
)

// What answered a lookup, for the metrics.
type answeredBy int

const (
	byCache     answeredBy = iota // the cache
	byCoalesced                   // a lookup of the same question already under way
	byLocal                       // the local resolver (the upstream)
	byPeer                        // a peer node
	byNone                        // nothing in time: SERVFAIL
	numAnsweredBy
)

var answeredByNames = [numAnsweredBy]string{"cache", "coalesced", "local", "peer", "none"}

// Why the local resolver failed a query.
const (
	upstreamTimeout = iota // no answer in time
	upstreamError          // a network error or an answer that does not parse or match
	upstreamRcode          // an answer neither NOERROR nor NXDOMAIN (SERVFAIL, REFUSED...)
	upstreamBusy           // not asked: MaxLookups queries to it under way
	numUpstreamFails
)

var upstreamFailNames = [numUpstreamFails]string{"timeout", "error", "rcode", "busy"}

// Why a query was refused.
const (
	refusedNotAllowed   = iota // its source is neither in Allow nor a peer
	refusedRateLimited         // a peer past its rate
	refusedBusy                // MaxLookups lookups under way
	refusedBadSignature        // signed, but not with Config.Key (NOTAUTH)
	refusedConns               // a TCP connection closed as it came: MaxLookups open
	numRefused
)

var refusedNames = [numRefused]string{"not-allowed", "rate-limited", "busy", "bad-signature", "tcp-busy"}

// Outcomes of queries sent to peers.
const (
	peerQueryWon    = iota // its answer was the lookup's
	peerQueryLost          // a good answer, but another came first
	peerQueryFailed        // no good answer: timeout, error, SERVFAIL
	numPeerQueries
)

var peerQueryNames = [numPeerQueries]string{"won", "lost", "failed"}

// lookupBuckets are the upper bounds, in seconds, of the lookup
// histograms: from 100 µs (the cache) through a resolver's tens of
// milliseconds to the 5 s a stalled resolver takes.
var lookupBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

type series struct {
	clientLookups    [numAnsweredBy]prometheus.Counter
	peerRequests     [numAnsweredBy]prometheus.Counter
	sentToPeers      prometheus.Counter
	peerQueries      [numPeerQueries]prometheus.Counter
	upstreamFailures [numUpstreamFails]prometheus.Counter
	tcpRetries       prometheus.Counter
	refused          [numRefused]prometheus.Counter
	lookupDuration   prometheus.Observer

	collectors metrics.Collectors
}

var (
	delayDesc   = prometheus.NewDesc("stampede_dns_peer_delay_seconds", "How long a lookup now waits for the local resolver before it also asks a peer (adaptive).", nil, nil)
	entriesDesc = prometheus.NewDesc("stampede_dns_cache_entries", "Answers held in the cache.", nil, nil)
	peersDesc   = prometheus.NewDesc("stampede_dns_peers", "Peer nodes, by health (a peer that failed 3 queries in a row is asked last for 10 s).", []string{"state"}, nil)
)

func newSeries(f *Forwarder) *series {
	m := new(series)
	c := &m.collectors
	copy(m.clientLookups[:], c.Counters("stampede_dns_lookups_total",
		"Lookups of clients (the Allow networks), by what answered them: cache, coalesced (joined a lookup of the same question under way), local (the upstream resolver), peer, none (SERVFAIL).", "by", answeredByNames[:]))
	m.sentToPeers = c.Counter("stampede_dns_lookups_sent_to_peers_total",
		"Lookups of clients that asked at least one peer (the local resolver was slower than the delay, or failed).")
	copy(m.peerQueries[:], c.Counters("stampede_dns_peer_queries_total",
		"Queries sent to peers, by outcome: won (its answer was the lookup's), lost (another answer came first), failed (timeout, error, SERVFAIL).", "outcome", peerQueryNames[:]))
	copy(m.peerRequests[:], c.Counters("stampede_dns_peer_requests_total",
		"Queries from peers answered, by what answered them (never another peer).", "by", answeredByNames[:]))
	copy(m.upstreamFailures[:], c.Counters("stampede_dns_upstream_failures_total",
		"Queries the local resolver failed, by how: timeout, error (network, or an answer that does not parse or match), rcode (neither NOERROR nor NXDOMAIN), busy (not asked: as many queries to it under way as lookups may be, the peers asked alone).", "reason", upstreamFailNames[:]))
	m.tcpRetries = c.Counter("stampede_dns_tcp_retries_total",
		"Queries asked again over TCP because the answer over UDP was truncated.")
	copy(m.refused[:], c.Counters("stampede_dns_refused_total",
		"Queries refused, by reason: not-allowed (source neither in --allow nor a peer), rate-limited (a peer past its rate), busy (too many lookups under way): REFUSED; bad-signature (TSIG not made with --key): NOTAUTH; tcp-busy (a TCP connection closed as it came, too many open).", "reason", refusedNames[:]))
	m.lookupDuration = c.Histogram("stampede_dns_lookup_duration_seconds",
		"Time to answer a lookup of a client, the cache's answers included.", lookupBuckets)
	m.collectors = append(m.collectors, metrics.CollectFunc{
		Descs: []*prometheus.Desc{delayDesc, entriesDesc, peersDesc},
		F: func(ch chan<- prometheus.Metric) {
			f.mu.Lock()
			delay := f.delay.Current()
			entries := f.cache.Len()
			down := f.peers.down(f.now())
			total := f.peers.Len()
			f.mu.Unlock()
			metrics.Gauge(ch, delayDesc, delay.Seconds())
			metrics.Gauge(ch, entriesDesc, float64(entries))
			metrics.Gauge(ch, peersDesc, float64(total-down), "up")
			metrics.Gauge(ch, peersDesc, float64(down), "down")
		},
	})
	return m
}

// Registry returns the forwarder's metrics registry: its series, the Go
// runtime's, the process's and stampede_build_info.
func (f *Forwarder) Registry() *prometheus.Registry { return f.reg }

// Handler serves /metrics and the health checks, for --metrics-listen.
func (f *Forwarder) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(f.reg, f.log))
	health.Mount(mux, f.log)
	return mux
}
