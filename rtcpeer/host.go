package rtcpeer

import (
	"context"
	"log/slog"
	"net"

	"github.com/stampede-dev/stampede/host"
	"github.com/stampede-dev/stampede/node"
)

// Host is a node.Host (package host's, over TCP and this Transport) whose
// every swarm attached also joins the WebRTC signalling of its manifest's
// trackers, so that browsers reach its nodes, until it is detached.
type Host struct {
	node.Host
	T *Transport
}

// Attach attaches n to the inner host and joins its swarm's signalling.
func (h Host) Attach(n *node.Node) (detach func(), err error) {
	d, err := h.Host.Attach(n)
	if err != nil {
		return nil, err
	}
	leave := h.T.JoinNode(n)
	return func() { leave(); d() }, nil
}

// JoinNode joins the signalling of n's swarm on every tracker of its
// manifest, announcing what n still lacks, until leave is called. It is
// host.Config.OnAttach's shape, so that a host.Host carrying this
// Transport has its swarms join.
func (t *Transport) JoinNode(n *node.Node) (leave func()) {
	ctx, cancel := context.WithCancel(context.Background())
	root, size := n.Swarm()
	for _, tr := range n.Manifest().Trackers {
		t.Join(ctx, tr, root, size, n.Left)
	}
	return cancel
}

// NewHost returns a Host carrying peers over TCP, accepted on ln, and over
// a Transport of cfg, with upRate bytes per second of upload for all (0:
// unlimited). It runs until ctx ends, and then closes ln.
func NewHost(ctx context.Context, ln net.Listener, cfg Config, upRate int64, log *slog.Logger) (Host, error) {
	cfg.Logger = log
	rt := New(cfg)
	h, err := host.New(host.Config{Transports: []host.Transport{host.TCP(ln), rt}, UploadRate: upRate, Logger: log})
	if err != nil {
		return Host{}, err
	}
	go h.Run(ctx)
	return Host{Host: h, T: rt}, nil
}
