package rtcpeer

import (
	"context"
	"net"

	"github.com/stampede-dev/stampede/host"
	"github.com/stampede-dev/stampede/node"
)

// JoinNode joins the signalling of n's swarm on every tracker of its
// manifest, announcing what n still lacks, until leave is called; the
// channels it offers are n's outbound connections (node.Node.Opened). It is
// host.Config.OnAttach's shape, so that a host.Host carrying this
// Transport has its swarms join.
func (t *Transport) JoinNode(n *node.Node) (leave func()) {
	ctx, cancel := context.WithCancel(context.Background())
	root, size := n.Swarm()
	for _, tr := range n.Manifest().Trackers {
		t.join(ctx, tr, root, size, n.Left, n.Opened)
	}
	return cancel
}

// NewHost returns a host carrying peers over TCP, accepted on ln, and over
// a Transport of cfg, whose every swarm attached joins its trackers'
// signalling (JoinNode). hc sets the rest of the host: its upload rate
// for all (UploadRate), whether it paces (NoPacing), its logger, which
// the transport shares; its transports and OnAttach are these. It runs
// until ctx ends, and then closes ln.
func NewHost(ctx context.Context, ln net.Listener, cfg Config, hc host.Config) (*host.Host, error) {
	cfg.Logger = hc.Logger
	rt := New(cfg)
	hc.Transports, hc.OnAttach = []host.Transport{host.TCP(ln), rt}, rt.JoinNode
	h, err := host.New(hc)
	if err != nil {
		return nil, err
	}
	go h.Run(ctx)
	return h, nil
}
