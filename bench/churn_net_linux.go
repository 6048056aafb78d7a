package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// churnNet is a churn scenario's network, in namespaces named
// "stch<pid>x<k>-...": an "internet" namespace holding bridge br0 on
// 198.20.0.0/16; the origin (198.20.0.1) on it behind origin_up; each
// public class's hosts on it (198.20.1.1 up); and for each class behind a
// NAT a router namespace, its WAN on the bridge (198.20.0.10 up), its LAN
// a bridge of its own on 10.89.K.0/24 with the class's hosts behind it.
// The NATs are nftables tables in the routers' namespaces:
//   - full-cone: masquerade (which keeps the port when it can) and every
//     TCP and UDP port of the WAN forwarded to the one host behind it:
//     endpoint-independent mapping and filtering;
//   - port-restricted: masquerade and conntrack: only the endpoints a host
//     sent to get in;
//   - symmetric: masquerade fully-random: a new port for each endpoint.
//
// Each router drops what comes unasked to its own address before
// conntrack keeps it (docs/nat.md says why). Hosts are pooled: many peer
// processes share one, each with its own ports, so the caps are the
// programs' own (AppShaping), but the origin's link is shaped with tbf.
// Everything on the bridge has permanent neighbour entries for
// everything else, so no ARP reply is lost behind a busy queue.
type churnNet struct {
	log    *slog.Logger
	prefix string
	dir    string

	origin *Host
	// hosts[c] are class c's hosts.
	hosts [][]*Host

	mu     sync.Mutex // guards made, closed
	made   []string   // namespaces, in the order made
	closed bool
}

var _ Network = (*churnNet)(nil)

// churnPrefix starts the names of the churn network's namespaces.
const churnPrefix = "stch"

func (n *churnNet) Name() string { return BackendNetns }

// AppShaping: pooled hosts share a link, so the peers cap themselves.
func (n *churnNet) AppShaping() bool { return true }
func (n *churnNet) AddHost(context.Context, string, int64, int64) (*Host, error) {
	return nil, errors.New("a churn network's hosts are made with it")
}

// originOnly is the churn network as the origin's side sees it: shaped
// by tc, so serve and the aria2 seeder get no caps of their own.
type originOnly struct{ *churnNet }

func (originOnly) AppShaping() bool { return false }

// newChurnNet makes the network for classes, the origin's link capped at
// originUp (0: uncapped).
func newChurnNet(ctx context.Context, classes []Class, originUp int64, dir string, log *slog.Logger) (_ *churnNet, err error) {
	if os.Geteuid() != 0 {
		return nil, ErrNeedRoot
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("churn network: %w", err)
		}
	}
	n := &churnNet{log: log, prefix: fmt.Sprintf("%s%dx%d", churnPrefix, os.Getpid(), netnsSeq.Add(1)), dir: dir}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	inet := n.prefix + "-inet"
	if err := n.add(ctx, inet); err != nil {
		return nil, err
	}
	if err := runTools(ctx, [][]string{
		{"ip", "-n", inet, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", inet, "link", "set", "br0", "up"},
	}); err != nil {
		return nil, err
	}
	type wired struct {
		ns, ip, mac, dev string
	}
	var onBridge []wired
	// attach puts namespace ns on the bridge by a veth (port there, eth0
	// or dev here) with address ip/16.
	attach := func(ns, port, dev, ip string, up int64) error {
		mac := fmt.Sprintf("02:53:43:00:%02x:%02x", len(onBridge)>>8&0xff, len(onBridge)&0xff)
		onBridge = append(onBridge, wired{ns, ip, mac, dev})
		cmds := [][]string{
			{"ip", "-n", inet, "link", "add", port, "type", "veth", "peer", "name", dev, "netns", ns},
			{"ip", "-n", inet, "link", "set", port, "master", "br0"},
			{"ip", "-n", inet, "link", "set", port, "up"},
			{"ip", "-n", ns, "link", "set", dev, "address", mac},
			{"ip", "-n", ns, "addr", "add", ip + "/16", "dev", dev},
			{"ip", "-n", ns, "link", "set", dev, "up"},
			{"ip", "-n", ns, "link", "set", "lo", "up"},
		}
		if up > 0 {
			cmds = append(cmds, append([]string{"tc", "-n", ns, "qdisc", "add", "dev", dev, "root"}, tbf(up)...))
		}
		return runTools(ctx, cmds)
	}
	n.origin = &Host{Name: "origin", IP: "198.20.0.1", Up: originUp, ns: n.prefix + "-origin"}
	if err := n.add(ctx, n.origin.ns); err != nil {
		return nil, err
	}
	if err := attach(n.origin.ns, "o0", "eth0", n.origin.IP, originUp); err != nil {
		return nil, err
	}
	public, lan := 0, 0
	for ci, c := range classes {
		var hs []*Host
		if c.NAT == "" {
			for k := range c.churnHosts() {
				h := &Host{Name: fmt.Sprintf("%s%d", c.Name, k), IP: fmt.Sprintf("198.20.%d.%d", 1+public/250, public%250+1),
					Up: c.Up, Down: c.Down, ns: fmt.Sprintf("%s-p%d", n.prefix, public)}
				if err := n.add(ctx, h.ns); err != nil {
					return nil, err
				}
				if err := attach(h.ns, fmt.Sprintf("p%d", public), "eth0", h.IP, 0); err != nil {
					return nil, err
				}
				public++
				hs = append(hs, h)
			}
			n.hosts = append(n.hosts, hs)
			continue
		}
		router := fmt.Sprintf("%s-n%d", n.prefix, ci)
		if err := n.add(ctx, router); err != nil {
			return nil, err
		}
		if err := attach(router, fmt.Sprintf("n%d", ci), "wan", fmt.Sprintf("198.20.0.%d", 10+lan), 0); err != nil {
			return nil, err
		}
		if err := runTools(ctx, [][]string{
			{"ip", "-n", router, "link", "add", "lan", "type", "bridge"},
			{"ip", "-n", router, "addr", "add", fmt.Sprintf("10.89.%d.1/24", lan), "dev", "lan"},
			{"ip", "-n", router, "link", "set", "lan", "up"},
			{"ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		}); err != nil {
			return nil, err
		}
		for k := range c.churnHosts() {
			h := &Host{Name: fmt.Sprintf("%s%d", c.Name, k), IP: fmt.Sprintf("10.89.%d.%d", lan, 2+k),
				Up: c.Up, Down: c.Down, ns: fmt.Sprintf("%s-c%dh%d", n.prefix, ci, k)}
			if err := n.add(ctx, h.ns); err != nil {
				return nil, err
			}
			if err := runTools(ctx, [][]string{
				{"ip", "-n", router, "link", "add", fmt.Sprintf("h%d", k), "type", "veth", "peer", "name", "eth0", "netns", h.ns},
				{"ip", "-n", router, "link", "set", fmt.Sprintf("h%d", k), "master", "lan"},
				{"ip", "-n", router, "link", "set", fmt.Sprintf("h%d", k), "up"},
				{"ip", "-n", h.ns, "addr", "add", h.IP + "/24", "dev", "eth0"},
				{"ip", "-n", h.ns, "link", "set", "eth0", "up"},
				{"ip", "-n", h.ns, "link", "set", "lo", "up"},
				{"ip", "-n", h.ns, "route", "add", "default", "via", fmt.Sprintf("10.89.%d.1", lan)},
			}); err != nil {
				return nil, err
			}
			hs = append(hs, h)
		}
		if err := natRules(ctx, router, c.NAT, hs[0].IP); err != nil {
			return nil, err
		}
		n.hosts = append(n.hosts, hs)
		lan++
	}
	// Permanent neighbour entries among everything on the bridge.
	for _, w := range onBridge {
		var b strings.Builder
		for _, o := range onBridge {
			if o != w {
				fmt.Fprintf(&b, "neigh replace %s lladdr %s dev %s nud permanent\n", o.ip, o.mac, w.dev)
			}
		}
		f := filepath.Join(dir, "neigh-"+filepath.Base(w.ns))
		if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
			return nil, err
		}
		_, err := runTool(ctx, "ip", "-n", w.ns, "-batch", f)
		os.Remove(f)
		if err != nil {
			return nil, err
		}
	}
	return n, nil
}

// natRules loads the nftables table of a NAT of kind into namespace
// router; a full-cone NAT forwards every port to host.
func natRules(ctx context.Context, router, kind, host string) error {
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("a %s NAT needs nft (Debian's nftables): %w", kind, err)
	}
	random := ""
	if kind == NATSymmetric {
		random = " fully-random"
	}
	rules := "table ip stch {\n" +
		"  chain post { type nat hook postrouting priority srcnat; oifname \"wan\" masquerade" + random + "; }\n" +
		"  chain in { type filter hook input priority filter; iifname \"wan\" ct state new drop; }\n"
	if kind == NATFullCone {
		rules += "  chain pre { type nat hook prerouting priority dstnat; iifname \"wan\" meta l4proto { tcp, udp } dnat to " + host + "; }\n"
	}
	rules += "}\n"
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", router, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	cmd.SysProcAttr = procAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %w: %s", router, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// add makes namespace ns, recorded first so that Close deletes a
// half-made one.
func (n *churnNet) add(ctx context.Context, ns string) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return errors.New("churn network closed")
	}
	n.made = append(n.made, ns)
	n.mu.Unlock()
	_, err := runTool(ctx, "ip", "netns", "add", ns)
	return err
}

// originTxBytes reads the bytes the origin's namespace has sent on its
// link (headers included): the origin's, its tracker's, STUN's and
// TURN's, or the aria2 seeder's and opentracker's.
func (n *churnNet) originTxBytes(ctx context.Context) (int64, error) {
	out, err := runTool(ctx, "ip", "-n", n.origin.ns, "-j", "-s", "link", "show", "dev", "eth0")
	if err != nil {
		return 0, err
	}
	var links []struct {
		Stats struct {
			TX struct {
				Bytes int64 `json:"bytes"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		return 0, fmt.Errorf("reading the origin's link counters: %v: %q", err, firstLine(out, 200))
	}
	return links[0].Stats.TX.Bytes, nil
}

// Close ends what still runs in the network's namespaces and deletes
// them, the last made first; the NATs' tables go with them.
func (n *churnNet) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	made := n.made
	n.mu.Unlock()
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

var staleChurnNetns = regexp.MustCompile(`^` + churnPrefix + `(\d+)x\d+-`)

// cleanupStaleChurn deletes the churn namespaces of harness processes
// that are no longer running, and returns their names.
func cleanupStaleChurn(ctx context.Context, log *slog.Logger) ([]string, error) {
	out, err := runTool(ctx, "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		m := staleChurnNetns.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		if err := deleteNetns(ctx, f[0], log); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, f[0])
	}
	return removed, errors.Join(errs...)
}
