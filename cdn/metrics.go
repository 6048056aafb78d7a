package cdn

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stampede-dev/stampede/internal/metrics"
)

// How a client's request was answered.
const (
	answerChunks  = iota // cached and shared, in chunks
	answerDirect         // passed through
	answerRefused        // refused: network, origin, CONNECT, bad URL
	answerError          // the origin could not be asked
	numAnswers
)

var answerNames = [numAnswers]string{"chunks", "direct", "refused", "error"}

// Where a chunk came from.
const (
	srcCache    = iota // this node's cache
	srcJoined          // another request's fetch under way (collapsed)
	srcNode            // another node
	srcOrigin          // the origin, by this node as the owner or a replica
	srcFallback        // the origin, by the entry node after every node failed
	numSources
)

var sourceNames = [numSources]string{"cache", "joined", "node", "origin", "origin-fallback"}

// Where a chunk that failed its check came from.
const (
	fromNode   = iota // another node (a lying or broken node)
	fromOrigin        // the origin
	fromCache         // this node's cache
	fromWhole         // the whole body against Repr-Digest
	numFroms
)

var fromNames = [numFroms]string{"node", "origin", "cache", "whole-file"}

type series struct {
	requests       [numAnswers]prometheus.Counter
	chunks         [numSources]prometheus.Counter
	rejected       [numFroms]prometheus.Counter
	lookups, hits  prometheus.Counter
	clientBytes    prometheus.Counter
	originBytes    prometheus.Counter
	originRequests prometheus.Counter
	servedNodes    prometheus.Counter
	reforwards     prometheus.Counter
	aborted        prometheus.Counter
	nodeRefused    prometheus.Counter

	handler http.Handler
}

func newSeries(n *Node) *series {
	m := new(series)
	var c metrics.Collectors
	copy(m.requests[:], c.Counters("stampede_cdn_requests_total",
		"Client requests by how they were answered: chunks (cached and shared), direct (passed through: credentials, "+
			"private, no-store, other methods), refused (network, origin, CONNECT, bad URL), error (the origin could not be asked).",
		"answer", answerNames[:]))
	copy(m.chunks[:], c.Counters("stampede_cdn_chunks_total",
		"Chunks this node got, by where from: cache, joined (another request's fetch under way), node (another node), "+
			"origin (as owner or replica), origin-fallback (every node failed the entry).", "source", sourceNames[:]))
	copy(m.rejected[:], c.Counters("stampede_cdn_chunks_rejected_total",
		"Chunks that failed verification, by where from; whole-file is a body that failed the origin's Repr-Digest.", "from", fromNames[:]))
	m.lookups = c.Counter("stampede_cdn_cache_lookups_total", "Chunks looked up in this node's cache.")
	m.hits = c.Counter("stampede_cdn_cache_hits_total", "Chunks found intact in this node's cache.")
	m.clientBytes = c.Counter("stampede_cdn_client_bytes_total", "Body bytes of chunked answers sent to clients.")
	m.originBytes = c.Counter("stampede_cdn_origin_bytes_total", "Chunk bytes this node fetched from origins.")
	m.originRequests = c.Counter("stampede_cdn_origin_requests_total", "Requests this node sent origins for cached files (HEAD, manifests, chunks).")
	m.servedNodes = c.Counter("stampede_cdn_node_bytes_served_total", "Chunk bytes this node served other nodes.")
	m.reforwards = c.Counter("stampede_cdn_reforwards_total", "Chunk fetches moved to the next node after one failed or missed its deadline.")
	m.aborted = c.Counter("stampede_cdn_responses_aborted_total", "Client responses cut short because a chunk could not be had or the body failed its check.")
	m.nodeRefused = c.Counter("stampede_cdn_node_requests_refused_total", "Node requests refused: not from a node's address, or without a valid token.")
	load := prometheus.NewDesc("stampede_cdn_node_inflight", "Chunk requests this node's clients have in flight to each node (bounded-load HRW's count).", []string{"node"}, nil)
	up := prometheus.NewDesc("stampede_cdn_peer_up", "1 when the node is on this node's ring.", []string{"node"}, nil)
	rtt := prometheus.NewDesc("stampede_cdn_peer_rtt_seconds", "Smoothed heartbeat round-trip time.", []string{"node"}, nil)
	peerLoad := prometheus.NewDesc("stampede_cdn_peer_load", "Node requests the node was serving at its last heartbeat.", []string{"node"}, nil)
	hitRatio := prometheus.NewDesc("stampede_cdn_hit_ratio", "Cache hits over lookups.", nil, nil)
	offload := prometheus.NewDesc("stampede_cdn_origin_offload_ratio", "1 - origin chunk bytes over client body bytes, this node alone.", nil, nil)
	storeBytes := prometheus.NewDesc("stampede_cdn_cache_bytes", "Bytes in the chunk cache.", nil, nil)
	storeFiles := prometheus.NewDesc("stampede_cdn_cache_chunks", "Chunks in the cache.", nil, nil)
	storeErrs := prometheus.NewDesc("stampede_cdn_cache_write_errors_total", "Chunks that could not be written to the cache (a full disk).", nil, nil)
	storeEvict := prometheus.NewDesc("stampede_cdn_cache_evictions_total", "Chunks evicted, least recently used first.", nil, nil)
	c = append(c, metrics.CollectFunc{
		Descs: []*prometheus.Desc{load, up, rtt, peerLoad, hitRatio, offload, storeBytes, storeFiles, storeErrs, storeEvict},
		F: func(ch chan<- prometheus.Metric) {
			n.mu.Lock()
			states := n.members.States()
			loads := make(map[string]int)
			for _, node := range n.ringCache.Nodes() {
				loads[node] = n.bal.Load(node)
			}
			n.mu.Unlock()
			for node, l := range loads {
				metrics.Gauge(ch, load, float64(l), node)
			}
			for _, s := range states {
				metrics.Gauge(ch, up, b2f(s.Picked), s.Node)
				metrics.Gauge(ch, rtt, s.RTT.Seconds(), s.Node)
				metrics.Gauge(ch, peerLoad, float64(s.Load), s.Node)
			}
			st := n.status()
			metrics.Gauge(ch, hitRatio, st.HitRatio)
			metrics.Gauge(ch, offload, st.OriginOffload)
			ss := n.store.stats()
			metrics.Gauge(ch, storeBytes, float64(ss.Bytes))
			metrics.Gauge(ch, storeFiles, float64(ss.Files))
			metrics.Counter(ch, storeErrs, float64(ss.WriteErrors))
			metrics.Counter(ch, storeEvict, float64(ss.Evicted))
		},
	})
	reg := metrics.NewRegistry()
	reg.MustRegister(c)
	if n.cfg.Collector != nil {
		reg.MustRegister(n.cfg.Collector)
	}
	m.handler = metrics.Handler(reg, n.log)
	return m
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ownerNote is where a chunk went: its owner by plain HRW, and the node
// that served it (another when the owner was over its bound or bypassed).
type ownerNote struct {
	Chunk    string `json:"chunk"`
	Owner    string `json:"owner"`
	ServedBy string `json:"served_by"`
}

const maxOwnerNotes = 32

func (n *Node) noteOwnerLocked(key, owner, servedBy string) {
	if len(n.owners) >= maxOwnerNotes {
		n.owners = slices.Delete(n.owners, 0, 1)
	}
	n.owners = append(n.owners, ownerNote{key, owner, servedBy})
}

// Status is the node's status page (/.cdn/status, JSON).
type Status struct {
	Self          string         `json:"self"`
	Ring          []string       `json:"ring"`
	Peers         []PeerState    `json:"peers"`
	InFlight      map[string]int `json:"inflight"`
	Serving       int64          `json:"serving"`
	HitRatio      float64        `json:"hit_ratio"`
	OriginOffload float64        `json:"origin_offload"`
	ClientBytes   float64        `json:"client_bytes"`
	OriginBytes   float64        `json:"origin_bytes"`
	Cache         storeStats     `json:"cache"`
	RecentChunks  []ownerNote    `json:"recent_chunks"`
}

func (n *Node) status() Status {
	n.mu.Lock()
	st := Status{Self: n.self, Ring: n.ringCache.Nodes(), Peers: n.members.States(), InFlight: make(map[string]int),
		RecentChunks: slices.Clone(n.owners)}
	for _, node := range st.Ring {
		st.InFlight[node] = n.bal.Load(node)
	}
	n.mu.Unlock()
	st.Serving = n.served.Load()
	lookups, hits := counterValue(n.met.lookups), counterValue(n.met.hits)
	if lookups > 0 {
		st.HitRatio = hits / lookups
	}
	st.ClientBytes, st.OriginBytes = counterValue(n.met.clientBytes), counterValue(n.met.originBytes)
	if st.ClientBytes > 0 {
		st.OriginOffload = 1 - st.OriginBytes/st.ClientBytes
	}
	st.Cache = n.store.stats()
	return st
}

// Status returns the node's status.
func (n *Node) Status() Status { return n.status() }

func (n *Node) serveStatus(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(n.status())
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil || m.Counter == nil {
		return 0
	}
	return m.Counter.GetValue()
}
