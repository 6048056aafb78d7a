package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// pushNet is a push scenario's cluster in network namespaces, named as the
// netns backend's are ("stb<pid>x<k>-...", so CleanupStale finds those of
// a harness that died). The core namespace holds the core bridge; each
// datacenter and each rack is a namespace with a bridge of its own, joined
// to its parent's bridge by a veth whose two ends are shaped with tbf (the
// parent's end: what goes into it; its own end: what comes out); each host
// is a namespace on its rack's bridge behind a veth shaped both ways; the
// origin is a host on the core bridge. Addresses: the origin 198.19.0.1,
// host h of rack r 198.19.(r+1).(h+1), all in one /16, so that no route is
// needed; the neighbour entries are permanent, so ARP never crosses a
// shaped link.
type pushNet struct {
	log    *slog.Logger
	prefix string
	dir    string // for the ip -batch files

	origin *Host
	// racks[r] are rack r's hosts; rackDC[r] its datacenter (-1: none).
	racks  [][]*Host
	rackDC []int
	links  []*PushLink
	// readers read the links' counters, by namespace.
	readers map[string]*qdiscReader

	mu     sync.Mutex // guards made
	made   []string   // namespaces, in the order made
	closed bool
}

var _ Network = (*pushNet)(nil)

func (n *pushNet) Name() string     { return BackendNetns }
func (n *pushNet) AppShaping() bool { return false }
func (n *pushNet) AddHost(context.Context, string, int64, int64) (*Host, error) {
	return nil, errors.New("a push cluster's hosts are made with it")
}

// newPushNet makes the cluster of t with the origin's link at originUp.
func newPushNet(ctx context.Context, t *PushTopology, originUp int64, dir string, log *slog.Logger) (_ *pushNet, err error) {
	if os.Geteuid() != 0 {
		return nil, ErrNeedRoot
	}
	n := &pushNet{log: log, prefix: fmt.Sprintf("stb%dx%d", os.Getpid(), netnsSeq.Add(1)), dir: dir}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	core, err := n.bridge(ctx, "core")
	if err != nil {
		return nil, err
	}
	mac := 0
	host := func(name, bridgeNS, veth, ip string, up, down int64) (*Host, error) {
		mac++
		h := &Host{Name: name, IP: ip, Up: up, Down: down, ns: n.prefix + "-" + name}
		if err := n.add(ctx, h.ns); err != nil {
			return nil, err
		}
		cmds := [][]string{
			{"ip", "-n", bridgeNS, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
			{"ip", "-n", bridgeNS, "link", "set", veth, "master", "br0"},
			{"ip", "-n", bridgeNS, "link", "set", veth, "up"},
			{"ip", "-n", h.ns, "link", "set", "eth0", "address", pushMAC(mac)},
			{"ip", "-n", h.ns, "addr", "add", ip + "/16", "dev", "eth0"},
			{"ip", "-n", h.ns, "link", "set", "eth0", "up"},
			{"ip", "-n", h.ns, "link", "set", "lo", "up"},
			append([]string{"tc", "-n", h.ns, "qdisc", "add", "dev", "eth0", "root"}, tbf(up)...),
		}
		if down > 0 {
			cmds = append(cmds, append([]string{"tc", "-n", bridgeNS, "qdisc", "add", "dev", veth, "root"}, tbf(down)...))
		}
		return h, runTools(ctx, cmds)
	}
	if n.origin, err = host("origin", core, "o0", "198.19.0.1", originUp, 0); err != nil {
		return nil, err
	}
	n.links = append(n.links, &PushLink{Name: "origin", Kind: linkOrigin, Rack: -1, Capacity: originUp,
		Budget: float64(originUp), ns: n.origin.ns, dev: "eth0"})
	parents := []string{core}
	if t.Datacenters > 0 {
		parents = nil
		for d := range t.Datacenters {
			ns, err := n.join(ctx, fmt.Sprintf("dc%d", d), core, t.DCUplink, t.Reserve, linkDCIn, -1)
			if err != nil {
				return nil, err
			}
			parents = append(parents, ns)
		}
	}
	for r := range t.RackCount() {
		dc := -1
		if t.Datacenters > 0 {
			dc = r / t.Racks
		}
		rns, err := n.join(ctx, fmt.Sprintf("rack%d", r), parents[max(dc, 0)], t.RackUplink, t.Reserve, linkRackIn, r)
		if err != nil {
			return nil, err
		}
		var hs []*Host
		for i := range t.HostsPerRack {
			h, err := host(fmt.Sprintf("r%dh%d", r, i), rns, fmt.Sprintf("h%d", i), fmt.Sprintf("198.19.%d.%d", r+1, i+1),
				t.HostUp, t.HostDown)
			if err != nil {
				return nil, err
			}
			hs = append(hs, h)
		}
		n.racks = append(n.racks, hs)
		n.rackDC = append(n.rackDC, dc)
	}
	if err := n.neighbours(ctx); err != nil {
		return nil, err
	}
	n.readers = map[string]*qdiscReader{}
	for _, l := range n.links {
		if n.readers[l.ns] == nil {
			if n.readers[l.ns], err = openQdiscReader(l.ns); err != nil {
				return nil, err
			}
		}
	}
	return n, nil
}

// pushMAC is the k-th host's MAC address (locally administered).
func pushMAC(k int) string { return fmt.Sprintf("02:53:50:00:%02x:%02x", k>>8&0xff, k&0xff) }

// all lists every host but the origin, rack by rack.
func (n *pushNet) all() []*Host {
	var hs []*Host
	for _, r := range n.racks {
		hs = append(hs, r...)
	}
	return hs
}

// add makes namespace ns, recorded first so that Close deletes a
// half-made one.
func (n *pushNet) add(ctx context.Context, ns string) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return errors.New("push network closed")
	}
	n.made = append(n.made, ns)
	n.mu.Unlock()
	_, err := runTool(ctx, "ip", "netns", "add", ns)
	return err
}

// bridge makes namespace PREFIX-name holding bridge br0.
func (n *pushNet) bridge(ctx context.Context, name string) (string, error) {
	ns := n.prefix + "-" + name
	if err := n.add(ctx, ns); err != nil {
		return "", err
	}
	return ns, runTools(ctx, [][]string{
		{"ip", "-n", ns, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", ns, "link", "set", "br0", "up"},
	})
}

// join makes a bridge of its own for name and joins it to the bridge in
// namespace parent through a veth shaped at bps both ways: the parent's
// end ("to-NAME") carries what goes in, the child's ("upl") what comes
// out. It records both directions as shared links.
func (n *pushNet) join(ctx context.Context, name, parent string, bps int64, reserve float64, in linkKind, rack int) (string, error) {
	child, err := n.bridge(ctx, name)
	if err != nil {
		return "", err
	}
	up := "to-" + name
	err = runTools(ctx, [][]string{
		{"ip", "-n", parent, "link", "add", up, "type", "veth", "peer", "name", "upl", "netns", child},
		{"ip", "-n", parent, "link", "set", up, "master", "br0"},
		{"ip", "-n", parent, "link", "set", up, "up"},
		{"ip", "-n", child, "link", "set", "dev", "upl", "master", "br0"},
		{"ip", "-n", child, "link", "set", "dev", "upl", "up"},
		append([]string{"tc", "-n", parent, "qdisc", "add", "dev", up, "root"}, tbf(bps)...),
		append([]string{"tc", "-n", child, "qdisc", "add", "dev", "upl", "root"}, tbf(bps)...),
	})
	budget := float64(bps) * (1 - reserve)
	n.links = append(n.links,
		&PushLink{Name: name + " in", Kind: in, Rack: rack, Capacity: bps, Budget: budget, ns: parent, dev: up},
		&PushLink{Name: name + " out", Kind: in + 1, Rack: rack, Capacity: bps, Budget: budget, ns: child, dev: "upl"})
	return child, err
}

// neighbours gives every host a permanent neighbour entry for every other,
// one ip -batch per host.
func (n *pushNet) neighbours(ctx context.Context) error {
	every := append([]*Host{n.origin}, n.all()...)
	macs := map[*Host]string{}
	for i, h := range every {
		macs[h] = pushMAC(i + 1) // the order the hosts were made in
	}
	for _, h := range every {
		var b strings.Builder
		for _, o := range every {
			if o != h {
				fmt.Fprintf(&b, "neigh replace %s lladdr %s dev eth0 nud permanent\n", o.IP, macs[o])
			}
		}
		f := filepath.Join(n.dir, "neigh-"+h.Name)
		if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
			return err
		}
		_, err := runTool(ctx, "ip", "-n", h.ns, "-batch", f)
		os.Remove(f)
		if err != nil {
			return err
		}
	}
	return nil
}

func runTools(ctx context.Context, cmds [][]string) error {
	for _, argv := range cmds {
		if _, err := runTool(ctx, argv...); err != nil {
			return err
		}
	}
	return nil
}

// Close ends what still runs in the cluster's namespaces and deletes them,
// the last made first.
func (n *pushNet) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	made := n.made
	n.mu.Unlock()
	for _, q := range n.readers {
		if q != nil {
			q.close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errs []error
	for _, ns := range slices.Backward(made) {
		if err := deleteNetns(ctx, ns, n.log); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// readLinks reads every watched link's qdisc counter, each namespace's
// at once over its netlink socket.
func (n *pushNet) readLinks(context.Context) []linkSample {
	out := make([]linkSample, len(n.links))
	byNS := map[string]map[string]int64{}
	at := map[string]time.Time{}
	for i, l := range n.links {
		if _, ok := byNS[l.ns]; !ok {
			byNS[l.ns], at[l.ns], _ = n.readers[l.ns].read()
		}
		if b, ok := byNS[l.ns][l.dev]; ok {
			out[i] = linkSample{at: at[l.ns], bytes: b, ok: true}
		}
	}
	return out
}
