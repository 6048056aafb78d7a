package origin

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/promtext"
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
	numKinds
)

var kindNames = [numKinds]string{"file", "manifest", "metrics", "other", "tracker", "bundle_index"}

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

// reasonNoPeers is the reason of a swarm peer that knows no other peer.
const reasonNoPeers = contract.ReasonOriginPrefix + "no-peers"

// reasonNames are the reasons counted; anything else counts as "other" (a
// header must not grow the metrics without bound).
var reasonNames = [...]string{"none", contract.ReasonPiece, contract.ReasonRetryLate, contract.ReasonRetryError, contract.ReasonStream,
	contract.ReasonOriginPrefix + "no-peer-has-it", reasonNoPeers, contract.ReasonOriginPrefix + "stalled",
	contract.ReasonOriginPrefix + "peers-failing", "other"}

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

// metrics are the origin's counters, each named by the question it answers.
type metrics struct {
	bytesSent         atomic.Int64
	requests          [numKinds]atomic.Int64
	rejectedOverload  atomic.Int64
	rejectedInSwarm   atomic.Int64              // pieces sent just now (pick.go)
	stalled           atomic.Int64              // responses ended by WriteIdleTimeout
	overload          [numOutcomes]atomic.Int64 // answers past MaxTransfers, by outcome
	overloadBytes     atomic.Int64              // piece bytes of overload answers
	pieceSends        [numSends]atomic.Int64    // single-piece responses, first copy or again
	picksSwapped      atomic.Int64              // of those, sent instead of the piece asked (pick.go)
	paced             [numPace]atomic.Int64     // piece answers by how their turn went (pace.go)
	manifestsComputed atomic.Int64
	manifestHits      [numHits]atomic.Int64
	manifestFailures  atomic.Int64                  // computations that failed
	cacheRemoved      [numCacheRemoved]atomic.Int64 // files the cache sweeper removed, by why
	cacheBytes        atomic.Int64                  // bytes of cache files after the last sweep
	upstreamRequests  [numUpstream]atomic.Int64
	fileReasons       [len(reasonNames)]atomic.Int64 // file requests by contract.ReasonHeader

	mu        sync.Mutex // guards responses
	responses map[int]int64
}

func (m *metrics) countResponse(code int) {
	m.mu.Lock()
	if m.responses == nil {
		m.responses = make(map[int]int64)
	}
	m.responses[code]++
	m.mu.Unlock()
}

// write prints the metrics in the Prometheus text exposition format.
func (m *metrics) write(w io.Writer, g *gate, rate int64) error {
	var p promtext.Writer
	p.Family("stampede_origin_bytes_sent_total", promtext.Counter, "Response body bytes sent, except those of /metrics itself.")
	p.Sample(m.bytesSent.Load())

	p.Family("stampede_origin_requests_total", promtext.Counter, "Requests answered, by what they asked for.")
	for k := range numKinds {
		p.Sample(m.requests[k].Load(), "kind", kindNames[k])
	}

	p.Family("stampede_origin_file_requests_total", promtext.Counter, "File requests by the reason the client gave in the Stampede-Reason header (\"none\": no header, e.g. curl).")
	for i, r := range reasonNames {
		p.Sample(m.fileReasons[i].Load(), "reason", r)
	}

	p.Family("stampede_origin_responses_total", promtext.Counter, "Responses by status code.")
	m.mu.Lock()
	promtext.MapSamples(&p, "code", m.responses)
	m.mu.Unlock()

	p.Family("stampede_origin_rejected_total", promtext.Counter, "Requests turned away with 503 and Retry-After, by reason: "+
		"\"overload\" past the transfer limit, \"in-swarm\" a swarm peer's piece request whose pieces were all sent just now.")
	p.Sample(m.rejectedOverload.Load(), "reason", "overload")
	p.Sample(m.rejectedInSwarm.Load(), "reason", "in-swarm")
	p.Family("stampede_origin_responses_stalled_total", promtext.Counter, "Responses ended because their client took none of their bytes "+
		"for --write-idle-timeout (a file body's transfer slot is freed with it).")
	p.Sample(m.stalled.Load())

	p.Family("stampede_origin_overload_answers_total", promtext.Counter, "Requests for a file body past --max-transfers, by what they got: "+
		"piece (overload mode: 206 with one piece and peers), or 503 because legacy (the client did not ask for overload mode), "+
		"off (--overload-transfers 0), full (--overload-transfers answers in flight), no-manifest (not computed yet), "+
		"exhausted (every piece handed out --overload-copies times this --overload-window), upstream (no overload mode in front of an upstream).")
	for i, name := range outcomeNames {
		p.Sample(m.overload[i].Load(), "outcome", name)
	}
	p.Family("stampede_origin_overload_bytes_sent_total", promtext.Counter, "Piece bytes sent in overload answers (part of stampede_origin_bytes_sent_total).")
	p.Sample(m.overloadBytes.Load())

	p.Family("stampede_origin_piece_sends_total", promtext.Counter, "Single-piece range responses of files whose manifest is cached, by whether the piece had been sent before (first, again): swarm peers should make nearly all of them first.")
	for i, name := range sendNames {
		p.Sample(m.pieceSends[i].Load(), "copy", name)
	}
	p.Family("stampede_origin_piece_picks_total", promtext.Counter, "Single-piece responses that carry another piece than the one asked, picked among the request's Stampede-Candidates as the one sent least.")
	p.Sample(m.picksSwapped.Load())
	p.Family("stampede_origin_paced_total", promtext.Counter, "Piece answers to swarm peers' origin fetches, sent a few at a time in the order asked, by how their turn went: "+
		"turn (got one), waited (went out without one after 2 s), queue_full (answered 503: more than 1 s of answers were waiting).")
	for i, name := range paceNames {
		p.Sample(m.paced[i].Load(), "outcome", name)
	}

	p.Family("stampede_origin_transfers_active", promtext.Gauge, "File bodies being sent.")
	p.Sample(int64(g.activeCount()))
	p.Family("stampede_origin_transfers_max", promtext.Gauge, "File bodies sent at most at once (--max-transfers).")
	p.Sample(int64(g.max))
	p.Family("stampede_origin_overload_answers_active", promtext.Gauge, "Overload answers being sent.")
	p.Sample(int64(g.answeringCount()))
	p.Family("stampede_origin_overload_answers_max", promtext.Gauge, "Overload answers sent at most at once, past --max-transfers (--overload-transfers; 0: overload mode off).")
	p.Sample(int64(g.maxAnswers))
	p.Family("stampede_origin_rate_limit_bytes", promtext.Gauge, "Egress limit of file bodies in bytes per second (--rate); 0 is unlimited.")
	p.Sample(rate)

	p.Family("stampede_origin_manifests_computed_total", promtext.Counter, "Manifests computed by hashing a file.")
	p.Sample(m.manifestsComputed.Load())
	p.Family("stampede_origin_manifest_failures_total", promtext.Counter, "Manifest computations that failed.")
	p.Sample(m.manifestFailures.Load())
	p.Family("stampede_origin_manifest_cache_hits_total", promtext.Counter, "Manifests found already computed, by where.")
	for i := range numHits {
		p.Sample(m.manifestHits[i].Load(), "where", hitNames[i])
	}
	p.Family("stampede_origin_manifest_cache_bytes", promtext.Gauge, "Bytes of manifest files in --cache-dir after the last sweep.")
	p.Sample(m.cacheBytes.Load())
	p.Family("stampede_origin_manifest_cache_removed_total", promtext.Counter, "Manifest files the cache sweeper removed, by why: "+
		"gone (the file or page no longer exists), changed (the file has another version), unreadable, "+
		"temp (a temporary file whose writer died), evicted (least recently used, past the cache's bound).")
	for i := range numCacheRemoved {
		p.Sample(m.cacheRemoved[i].Load(), "reason", cacheRemovedNames[i])
	}

	p.Family("stampede_origin_upstream_requests_total", promtext.Counter, "Requests sent to the upstream, by purpose.")
	for i := range numUpstream {
		p.Sample(m.upstreamRequests[i].Load(), "purpose", upstreamNames[i])
	}
	_, err := p.WriteTo(w)
	return err
}
