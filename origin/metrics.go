package origin

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// kind classifies requests for the metrics.
type kind int

const (
	kindFile        kind = iota // a file, from Dir or proxied to Upstream
	kindManifest                // under ManifestPrefix
	kindMetrics                 // /metrics
	kindOther                   // directory indexes, bad methods, bad paths
	kindTracker                 // announces to the embedded tracker
	kindBundleIndex             // under BundleIndexPrefix
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

// ReasonHeader is the request header in which a stampede client says why it
// asks the origin for a file's bytes (see fetch and swarm): the origin counts
// its file requests by it.
const ReasonHeader = "Stampede-Reason"

// reasonNames are the reasons counted; anything else counts as "other" (a
// header must not grow the metrics without bound).
var reasonNames = [...]string{"none", "piece", "retry-late", "retry-error", "stream",
	"origin:no-peer-has-it", "origin:no-peers", "origin:stalled", "origin:peers-failing", "other"}

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
	overload          [numOutcomes]atomic.Int64 // answers past MaxTransfers, by outcome
	overloadBytes     atomic.Int64              // piece bytes of overload answers
	pieceSends        [numSends]atomic.Int64    // single-piece responses, first copy or again
	picksSwapped      atomic.Int64              // of those, sent instead of the piece asked (pick.go)
	manifestsComputed atomic.Int64
	manifestHits      [numHits]atomic.Int64
	manifestFailures  atomic.Int64 // computations that failed
	upstreamRequests  [numUpstream]atomic.Int64
	fileReasons       [len(reasonNames)]atomic.Int64 // file requests by ReasonHeader

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
	var b bytes.Buffer
	family := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	sample := func(name, labels string, v int64) {
		if labels != "" {
			labels = "{" + labels + "}"
		}
		fmt.Fprintf(&b, "%s%s %d\n", name, labels, v)
	}

	family("stampede_origin_bytes_sent_total", "counter", "Response body bytes sent, except those of /metrics itself.")
	sample("stampede_origin_bytes_sent_total", "", m.bytesSent.Load())

	family("stampede_origin_requests_total", "counter", "Requests answered, by what they asked for.")
	for k := range numKinds {
		sample("stampede_origin_requests_total", `kind="`+kindNames[k]+`"`, m.requests[k].Load())
	}

	family("stampede_origin_file_requests_total", "counter", "File requests by the reason the client gave in the Stampede-Reason header (\"none\": no header, e.g. curl).")
	for i, r := range reasonNames {
		sample("stampede_origin_file_requests_total", `reason="`+r+`"`, m.fileReasons[i].Load())
	}

	family("stampede_origin_responses_total", "counter", "Responses by status code.")
	m.mu.Lock()
	codes := make([]int, 0, len(m.responses))
	for c := range m.responses {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for _, c := range codes {
		sample("stampede_origin_responses_total", `code="`+strconv.Itoa(c)+`"`, m.responses[c])
	}
	m.mu.Unlock()

	family("stampede_origin_rejected_total", "counter", "Requests turned away with 503 and Retry-After, by reason.")
	sample("stampede_origin_rejected_total", `reason="overload"`, m.rejectedOverload.Load())

	family("stampede_origin_overload_answers_total", "counter", "Requests for a file body past --max-transfers, by what they got: "+
		"piece (overload mode: 206 with one piece and peers), or 503 because legacy (the client did not ask for overload mode), "+
		"off (--overload-transfers 0), full (--overload-transfers answers in flight), no-manifest (not computed yet), "+
		"exhausted (every piece handed out --overload-copies times this --overload-window), upstream (no overload mode in front of an upstream).")
	for i, name := range outcomeNames {
		sample("stampede_origin_overload_answers_total", `outcome="`+name+`"`, m.overload[i].Load())
	}
	family("stampede_origin_overload_bytes_sent_total", "counter", "Piece bytes sent in overload answers (part of stampede_origin_bytes_sent_total).")
	sample("stampede_origin_overload_bytes_sent_total", "", m.overloadBytes.Load())

	family("stampede_origin_piece_sends_total", "counter", "Single-piece range responses of files whose manifest is cached, by whether the piece had been sent before (first, again): swarm peers should make nearly all of them first.")
	for i, name := range sendNames {
		sample("stampede_origin_piece_sends_total", `copy="`+name+`"`, m.pieceSends[i].Load())
	}
	family("stampede_origin_piece_picks_total", "counter", "Single-piece responses that carry another piece than the one asked, picked among the request's Stampede-Candidates as the one sent least.")
	sample("stampede_origin_piece_picks_total", "", m.picksSwapped.Load())

	family("stampede_origin_transfers_active", "gauge", "File bodies being sent.")
	sample("stampede_origin_transfers_active", "", int64(g.activeCount()))
	family("stampede_origin_transfers_max", "gauge", "File bodies sent at most at once (--max-transfers).")
	sample("stampede_origin_transfers_max", "", int64(g.max))
	family("stampede_origin_overload_answers_active", "gauge", "Overload answers being sent.")
	sample("stampede_origin_overload_answers_active", "", int64(g.answeringCount()))
	family("stampede_origin_overload_answers_max", "gauge", "Overload answers sent at most at once, past --max-transfers (--overload-transfers; 0: overload mode off).")
	sample("stampede_origin_overload_answers_max", "", int64(g.maxAnswers))
	family("stampede_origin_rate_limit_bytes", "gauge", "Egress limit of file bodies in bytes per second (--rate); 0 is unlimited.")
	sample("stampede_origin_rate_limit_bytes", "", rate)

	family("stampede_origin_manifests_computed_total", "counter", "Manifests computed by hashing a file.")
	sample("stampede_origin_manifests_computed_total", "", m.manifestsComputed.Load())
	family("stampede_origin_manifest_failures_total", "counter", "Manifest computations that failed.")
	sample("stampede_origin_manifest_failures_total", "", m.manifestFailures.Load())
	family("stampede_origin_manifest_cache_hits_total", "counter", "Manifests found already computed, by where.")
	for i := range numHits {
		sample("stampede_origin_manifest_cache_hits_total", `where="`+hitNames[i]+`"`, m.manifestHits[i].Load())
	}

	family("stampede_origin_upstream_requests_total", "counter", "Requests sent to the upstream, by purpose.")
	for i := range numUpstream {
		sample("stampede_origin_upstream_requests_total", `purpose="`+upstreamNames[i]+`"`, m.upstreamRequests[i].Load())
	}
	_, err := w.Write(b.Bytes())
	return err
}
