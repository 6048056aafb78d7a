package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The netns backend: one network namespace per host, each joined by a veth
// pair to a bridge that lives in a namespace of its own. Upload caps are a
// tbf qdisc on the host's end of its veth, download caps one on the
// bridge's end. Addresses come from 198.18.0.0/15, the range RFC 2544
// reserves for benchmarks; no namespace has a route outside, and nothing
// is created in the harness's own namespace. Namespaces are named
// "stb<pid>x<k>-...", so CleanupStale can find those of a harness that died
// without cleaning up.

var netnsSeq atomic.Int64

type netns struct {
	log    *slog.Logger
	prefix string
	bridge string // namespace of the bridge

	mu     sync.Mutex // guards the following
	hosts  []*Host
	closed bool
}

func newNetns(ctx context.Context, log *slog.Logger) (*netns, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNeedRoot
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("netns backend: %w", err)
		}
	}
	n := &netns{log: log, prefix: fmt.Sprintf("stb%dx%d", os.Getpid(), netnsSeq.Add(1))}
	n.bridge = n.prefix + "-br"
	if _, err := runTool(ctx, "ip", "netns", "add", n.bridge); err != nil {
		return nil, err
	}
	for _, argv := range [][]string{
		{"ip", "-n", n.bridge, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", n.bridge, "link", "set", "br0", "up"},
	} {
		if _, err := runTool(ctx, argv...); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

func (n *netns) Name() string     { return BackendNetns }
func (n *netns) AppShaping() bool { return false }

// hostIP is the i-th address of 198.18.0.0/16 (leaving .0 and .255 alone).
func hostIP(i int) string { return fmt.Sprintf("198.18.%d.%d", i/250, i%250+1) }

func (n *netns) AddHost(ctx context.Context, name string, up, down int64) (*Host, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errors.New("netns: network closed")
	}
	i := len(n.hosts)
	h := &Host{Name: name, IP: hostIP(i), Up: up, Down: down, ns: fmt.Sprintf("%s-h%d", n.prefix, i)}
	n.hosts = append(n.hosts, h) // before creating it, so Close removes a half-made host
	n.mu.Unlock()

	veth := "h" + strconv.Itoa(i)
	cmds := [][]string{
		{"ip", "netns", "add", h.ns},
		{"ip", "-n", n.bridge, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"ip", "-n", n.bridge, "link", "set", veth, "master", "br0"},
		{"ip", "-n", n.bridge, "link", "set", veth, "up"},
		{"ip", "-n", h.ns, "link", "set", "eth0", "address", hostMAC(i)},
		{"ip", "-n", h.ns, "addr", "add", h.IP + "/16", "dev", "eth0"},
		{"ip", "-n", h.ns, "link", "set", "eth0", "up"},
		{"ip", "-n", h.ns, "link", "set", "lo", "up"},
	}
	if up > 0 {
		cmds = append(cmds, append([]string{"tc", "-n", h.ns, "qdisc", "add", "dev", "eth0", "root"}, tbf(up)...))
	}
	if down > 0 {
		cmds = append(cmds, append([]string{"tc", "-n", n.bridge, "qdisc", "add", "dev", veth, "root"}, tbf(down)...))
	}
	// Permanent neighbour entries both ways with every host made before:
	// ARP would cross the tbf queues, and a saturated uplink drops ARP
	// replies, so that a host arriving late could reach nobody whose
	// uplink was busy (on the Internet, peers never ARP each other across
	// their bottlenecks).
	n.mu.Lock()
	prev := slices.Clone(n.hosts[:i])
	n.mu.Unlock()
	for k, o := range prev {
		cmds = append(cmds,
			[]string{"ip", "-n", h.ns, "neigh", "replace", o.IP, "lladdr", hostMAC(k), "dev", "eth0", "nud", "permanent"},
			[]string{"ip", "-n", o.ns, "neigh", "replace", h.IP, "lladdr", hostMAC(i), "dev", "eth0", "nud", "permanent"})
	}
	for _, argv := range cmds {
		if _, err := runTool(ctx, argv...); err != nil {
			return nil, fmt.Errorf("netns host %s: %w", name, err)
		}
	}
	return h, nil
}

// hostMAC is the i-th host's MAC address (locally administered).
func hostMAC(i int) string {
	return fmt.Sprintf("02:53:54:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)
}

// tbf returns the qdisc arguments capping a link at bps bytes/s: a bucket
// of 40 ms of traffic (at least 16 KiB, so a full-size segment always fits)
// and a queue of 250 ms, enough for TCP to keep the link busy. The rate
// counts whole frames: TCP payload can reach 1448/1514 = 95.6% of it (the
// smoke test measures 88-94%).
func tbf(bps int64) []string {
	burst := max(16<<10, bps/25)
	limit := max(64<<10, bps/4) + burst
	return []string{"tbf", "rate", strconv.FormatInt(bps*8, 10) + "bit",
		"burst", strconv.FormatInt(burst, 10), "limit", strconv.FormatInt(limit, 10)}
}

// Close ends any process still running in the network's namespaces (only
// the harness's children run there) and deletes the namespaces; the veth
// pairs and the bridge go with them.
func (n *netns) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	hosts := n.hosts
	n.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errs []error
	names := []string{}
	for _, h := range hosts {
		names = append(names, h.ns)
	}
	names = append(names, n.bridge)
	for _, ns := range names {
		if err := deleteNetns(ctx, ns, n.log); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteNetns kills what still runs in ns (by PID) and deletes it. A
// namespace that does not exist is not an error.
func deleteNetns(ctx context.Context, ns string, log *slog.Logger) error {
	if _, err := os.Stat("/run/netns/" + ns); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	out, _ := runTool(ctx, "ip", "netns", "pids", ns)
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			log.Warn("netns: killing a leftover process", "netns", ns, "pid", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_, err := runTool(ctx, "ip", "netns", "del", ns)
	return err
}

// staleNetns matches the namespaces the harness makes, named after the
// process that made them: "stb<pid>x<k>-..." for crowds and pushes,
// "stch<pid>x<k>-..." for churn runs (churn_net_linux.go).
var staleNetns = regexp.MustCompile(`^st(?:b|ch)(\d+)x\d+-`)

// ListNetns lists the network namespaces made by stampede's harness, by
// any process.
func ListNetns(ctx context.Context) ([]string, error) {
	out, err := runTool(ctx, "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && staleNetns.MatchString(f[0]) {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// CleanupStale deletes the namespaces left by harness processes that are no
// longer running (killed before they could clean up) and returns their
// names. Those of a live harness are left alone.
func CleanupStale(ctx context.Context, log *slog.Logger) ([]string, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNeedRoot
	}
	names, err := ListNetns(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, ns := range names {
		pid, _ := strconv.Atoi(staleNetns.FindStringSubmatch(ns)[1])
		if pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue // its harness is alive
		}
		if err := deleteNetns(ctx, ns, log); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, ns)
	}
	return removed, errors.Join(errs...)
}

// inNetns runs fn on an OS thread moved into the network namespace ns;
// sockets fn creates belong to ns for their whole life. If the thread
// cannot be moved back it is left locked, so the Go runtime discards it.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := setns(self); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("setns back: %w", err)) // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func setns(f *os.File) error { return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET) }
