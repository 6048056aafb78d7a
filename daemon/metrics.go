package daemon

import (
	"context"
	"errors"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-dev/stampede/internal/health"
	"github.com/stampede-dev/stampede/internal/metrics"
)

// The daemon's metrics and health checks. Its /metrics, on the API and
// on the gateway alike, serves one registry: the daemon's series, read
// from Stats at each scrape, and the gateway's.

// jobStates are the states a job is counted in, all present from the
// start.
var jobStates = []string{StateQueued, StateDownloading, StatePaused, StateSeeding, StateComplete, StateFailed, StateRemoving}

var (
	jobsDesc   = prometheus.NewDesc("stampede_daemon_jobs", "Jobs (downloads and seeds) kept, by state.", []string{"state"}, nil)
	swarmsDesc = prometheus.NewDesc("stampede_daemon_swarms",
		"Swarms with a node on the peer port now (several nodes of one swarm count once).", nil, nil)
	connectionsDesc = prometheus.NewDesc("stampede_daemon_peer_connections_total",
		"Connections accepted on the peer port, by what became of them: routed (to a swarm's node), "+
			"no_swarm (for a swarm the daemon does not hold), refused (no stampede handshake in time), dropped (past the pending bounds).",
		[]string{"outcome"}, nil)
	fromPeersDesc = prometheus.NewDesc("stampede_daemon_jobs_received_from_peers_bytes",
		"Bytes the jobs kept have had from peers (a job removed takes its bytes with it).", nil, nil)
	toPeersDesc = prometheus.NewDesc("stampede_daemon_jobs_sent_to_peers_bytes",
		"Bytes the jobs kept have sent to peers (a job removed takes its bytes with it).", nil, nil)
	neighboursDesc = prometheus.NewDesc("stampede_daemon_neighbours",
		"The running jobs' neighbours now, by how their connection reaches them: direct, punched (through a NAT) or relayed (TURN; docs/nat.md).",
		[]string{"path"}, nil)
	relayedBytesDesc = prometheus.NewDesc("stampede_daemon_jobs_relayed_bytes",
		"Bytes the running jobs' relayed connections carried, both ways.", nil, nil)
	originRequestsDesc = prometheus.NewDesc("stampede_daemon_jobs_origin_requests",
		"Requests to origins of the ended downloads kept, by the reason the node gave (Stampede-Reason).", []string{"reason"}, nil)
)

// initMetrics makes the daemon's registry and registers its series.
func (s *Server) initMetrics() {
	s.reg = metrics.NewRegistry()
	s.reg.MustRegister(metrics.CollectFunc{
		Descs: []*prometheus.Desc{jobsDesc, swarmsDesc, connectionsDesc, fromPeersDesc, toPeersDesc, neighboursDesc, relayedBytesDesc, originRequestsDesc},
		F: func(ch chan<- prometheus.Metric) {
			st := s.Stats()
			for _, state := range jobStates {
				metrics.Gauge(ch, jobsDesc, float64(st.Jobs[state]), state)
			}
			metrics.Gauge(ch, swarmsDesc, float64(st.Peers.Swarms))
			for outcome, n := range map[string]int64{"routed": st.Peers.Routed, "no_swarm": st.Peers.NoSwarm,
				"refused": st.Peers.Refused, "dropped": st.Peers.Dropped} {
				metrics.Counter(ch, connectionsDesc, float64(n), outcome)
			}
			metrics.Gauge(ch, fromPeersDesc, float64(st.BytesFromPeers))
			metrics.Gauge(ch, toPeersDesc, float64(st.BytesToPeers))
			nb := st.Neighbours
			for path, n := range map[string]int{"direct": nb.Direct, "punched": nb.Punched, "relayed": nb.Relayed} {
				metrics.Gauge(ch, neighboursDesc, float64(n), path)
			}
			metrics.Gauge(ch, relayedBytesDesc, float64(nb.RelayedBytes))
			for reason, n := range st.OriginRequests {
				metrics.Gauge(ch, originRequestsDesc, float64(n), reason)
			}
		},
	})
}

// readyChecks are what the daemon needs to do its work: not stopping (a
// listener that failed stops it), and its state directory readable.
func (s *Server) readyChecks() []health.Check {
	return []health.Check{
		{Name: "daemon", Run: func(context.Context) error {
			if s.ctx.Err() != nil {
				return errors.New("stopping")
			}
			return nil
		}},
		{Name: "state directory", Run: health.DirReadable(func() (*os.File, error) { return os.Open(s.cfg.StateDir) })},
	}
}

// withHealth serves the health checks before api: without the token a TCP
// API asks for, since they tell a prober no more than "ok" or which
// check failed, and a prober has no token.
func (s *Server) withHealth(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	health.Mount(mux, s.log, s.readyChecks()...)
	mux.Handle("/", api)
	return mux
}
