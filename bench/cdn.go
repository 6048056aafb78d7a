package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
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

// The CDN mode's testbed (issue 32, docs/cdn.md): a cluster of cache nodes
// between one origin and a crowd of clients, each a host of the network,
// run for one system at a time:
//
//   - stampede-cdn: "stampede cdn" on every node, every node given all;
//   - nginx-cdn, the baseline: nginx on every node, two servers each. The
//     front one answers clients, cutting each request into 1 MiB slices
//     (slice 1m) sent to the slice's owner among the nodes' back servers
//     (hash $uri$slice_range consistent); the back one caches the slice,
//     asking the origin once however many wait (proxy_cache_lock, its
//     timeout raised so that the baseline is at its best);
//   - nginx-solo: the same without cooperation, each node the owner of
//     every slice it is asked;
//   - varnish-cdn: Varnish on every node, with a front and a back socket.
//     The front sends each request to the URL's owner among the nodes'
//     backs (the shard director: consistent hashing, health probes) and
//     caches what it gets; the back caches it from the origin, one fetch
//     however many wait (Varnish's request coalescing). Open-source
//     Varnish has no slicing: a file travels whole, from one owner.
//
// The origin is "stampede serve" for both (it publishes manifests, which
// only stampede's nodes use), capped at OriginUp; its bytes are its own
// count. Clients are curl, each asking one node (the i-th client the node
// i mod nodes), all at once; a client's file is checked against the
// source's SHA-256 after. With KillAt, the last node is killed (SIGKILL)
// that long after the start, and clients ask only the others: what is
// measured is the cluster losing an owner, not a client losing its node.
// It is not a scenario of "stampede bench" yet: RunCDN is called by
// TestCDNBench (cdn_test.go).

// CDN systems.
const (
	CDNStampede = "stampede-cdn"
	CDNNginx    = "nginx-cdn"
	// CDNNginxSolo is the baseline without cooperation: each nginx node
	// its own owner of every slice.
	CDNNginxSolo = "nginx-solo"
	CDNVarnish   = "varnish-cdn"
)

// CDNConfig is one CDN experiment.
type CDNConfig struct {
	Binary  string // the stampede binary
	Backend string // BackendLoopback or BackendNetns
	Dir     string // scratch directory, emptied after
	Nodes   int
	Clients int
	Size    int64
	// Files is how many files are asked: 1, or more for the hot-spot
	// mix, where three clients in four ask the first and the others the
	// rest in turn.
	Files int
	// Caps, bytes/s (0: uncapped; on loopback only the origin's is
	// applied, by serve --rate).
	NodeUp, NodeDown, ClientUp, ClientDown, OriginUp int64
	// KillAt, if set, kills the last node that long after the clients
	// start.
	KillAt  time.Duration
	Timeout time.Duration // of the whole run (default 5 minutes)
	Seed    uint64
	Log     *slog.Logger
}

// CDNResult is what one run measured.
type CDNResult struct {
	System string `json:"system"`
	// Times are the completion times of the clients that completed with
	// the right bytes, sorted.
	Times  []time.Duration `json:"times"`
	Failed int             `json:"failed"`
	// OriginBytes is what the origin sent; Copies that over the bytes of
	// the files asked.
	OriginBytes int64   `json:"origin_bytes"`
	Copies      float64 `json:"copies"`
	// Egress is each node's upload (netns: its link's transmitted bytes),
	// nil when not measured; BusiestOverMean its largest over its mean.
	Egress          []int64 `json:"egress,omitempty"`
	BusiestOverMean float64 `json:"busiest_over_mean,omitempty"`
	// Counters are stampede's nodes' counters summed over the nodes alive
	// at the end (stampede_cdn_ series without their prefix, labels kept).
	Counters map[string]float64 `json:"counters,omitempty"`
}

// Quantile is the q-quantile of the completion times (q in [0,1]), failed
// clients counted as slower than any: 0 when it falls on one.
func (r *CDNResult) Quantile(q float64) time.Duration {
	n := len(r.Times) + r.Failed
	if n == 0 {
		return 0
	}
	i := int(q*float64(n)+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(r.Times) {
		return 0
	}
	return r.Times[i]
}

func (r *CDNResult) String() string {
	p := func(q float64) string {
		if d := r.Quantile(q); d > 0 {
			return d.Round(10 * time.Millisecond).String()
		}
		return "failed"
	}
	s := fmt.Sprintf("%s: p50 %s, p90 %s, %d failed, origin %.2f copies", r.System, p(0.5), p(0.9), r.Failed, r.Copies)
	if r.Egress != nil {
		s += fmt.Sprintf(", busiest node %.2f x the mean", r.BusiestOverMean)
	}
	return s
}

var cdnNodeLine = regexp.MustCompile(`cdn node \S+ on http://([^/\s]+)/`)

// RunCDN runs system once under cfg.
func RunCDN(ctx context.Context, cfg CDNConfig, system string) (res *CDNResult, err error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	cfg.Files = max(cfg.Files, 1)
	if cfg.Nodes < 2 || cfg.Clients < 1 || cfg.Size <= 0 {
		return nil, errors.New("cdn bench: want 2 nodes or more, a client, a size")
	}
	if prog := cdnProgram(system); prog != "" {
		if _, err := exec.LookPath(prog); err != nil {
			return nil, fmt.Errorf("cdn bench: %s needs %s: %w", system, prog, err)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if rerr := os.RemoveAll(cfg.Dir); err == nil && rerr != nil {
			err = rerr
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	nw, err := NewNetwork(ctx, cfg.Backend, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer nw.Close()
	r := &cdnRun{cfg: cfg, nw: nw}
	defer r.stop()
	if err := r.setup(ctx, system); err != nil {
		return nil, err
	}
	return r.run(ctx, system)
}

type cdnRun struct {
	cfg    CDNConfig
	nw     Network
	origin *Host
	nodes  []*Host
	peers  []*Host

	www    string
	sums   [][sha256.Size]byte
	oaddr  string
	oproc  *proc
	nprocs []*proc
	naddrs []string // where clients ask each node
}

func (r *cdnRun) stop() {
	for _, p := range r.nprocs {
		if p != nil {
			p.term(3 * time.Second)
		}
	}
	if r.oproc != nil {
		r.oproc.term(3 * time.Second)
	}
}

// setup makes the hosts and the files, and starts the origin and the nodes.
func (r *cdnRun) setup(ctx context.Context, system string) error {
	c := r.cfg
	var err error
	if r.origin, err = r.nw.AddHost(ctx, "origin", c.OriginUp, 0); err != nil {
		return err
	}
	for i := range c.Nodes {
		h, err := r.nw.AddHost(ctx, fmt.Sprintf("node%d", i), c.NodeUp, c.NodeDown)
		if err != nil {
			return err
		}
		r.nodes = append(r.nodes, h)
	}
	for i := range c.Clients {
		h, err := r.nw.AddHost(ctx, fmt.Sprintf("client%d", i), c.ClientUp, c.ClientDown)
		if err != nil {
			return err
		}
		r.peers = append(r.peers, h)
	}
	r.www = filepath.Join(c.Dir, "www")
	if err := os.MkdirAll(r.www, 0o755); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 32))
	for f := range c.Files {
		data := make([]byte, c.Size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		r.sums = append(r.sums, sha256.Sum256(data))
		if err := os.WriteFile(filepath.Join(r.www, cdnFile(f)), data, 0o644); err != nil {
			return err
		}
	}
	argv := []string{c.Binary, "serve", r.www, "--listen", r.origin.IP + ":0", "--cache-dir", filepath.Join(c.Dir, "origin-cache"),
		"--no-tracker", "--max-transfers", "1024", "-q"}
	if r.nw.AppShaping() && c.OriginUp > 0 {
		argv = append(argv, "--rate", strconv.FormatInt(c.OriginUp, 10))
	}
	if r.oproc, err = startListening(ctx, "origin", r.origin.Command(argv...), servingLine, &r.oaddr, nil); err != nil {
		return fmt.Errorf("origin: %w", err)
	}
	client := r.origin.HTTPClient()
	client.Timeout = time.Minute
	for f := range c.Files { // the manifests, computed before the clock starts
		resp, err := client.Get("http://" + r.oaddr + "/.well-known/stampede/manifest/" + cdnFile(f))
		if err != nil {
			return fmt.Errorf("origin: manifest: %w", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	switch system {
	case CDNNginx, CDNNginxSolo:
		return r.startNginx(ctx, system == CDNNginxSolo)
	case CDNVarnish:
		return r.startVarnish(ctx)
	case CDNStampede:
		return r.startStampede(ctx)
	}
	return fmt.Errorf("cdn bench: no system %q", system)
}

func cdnFile(i int) string { return fmt.Sprintf("f%d.bin", i) }

// cdnProgram is the program a baseline system needs, "" for stampede.
func cdnProgram(system string) string {
	switch system {
	case CDNNginx, CDNNginxSolo:
		return "nginx"
	case CDNVarnish:
		return "varnishd"
	}
	return ""
}

// nodePorts picks each node's port(s): fixed on netns, where every node
// has its own address; free ones on loopback.
func (r *cdnRun) nodePorts(fixed int) ([]int, error) {
	ports := make([]int, len(r.nodes))
	for i, h := range r.nodes {
		if r.nw.Name() == BackendNetns {
			ports[i] = fixed
			continue
		}
		p, err := h.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

func (r *cdnRun) startStampede(ctx context.Context) error {
	c := r.cfg
	ports, err := r.nodePorts(8480)
	if err != nil {
		return err
	}
	var all []string
	for i, h := range r.nodes {
		all = append(all, h.Addr(ports[i]))
	}
	allow := "127.0.0.0/8"
	if r.nw.Name() == BackendNetns {
		allow = "198.18.0.0/16"
	}
	for i, h := range r.nodes {
		argv := []string{c.Binary, "cdn", "--listen", all[i], "--nodes", strings.Join(all, ","),
			"--cache-dir", filepath.Join(c.Dir, fmt.Sprintf("node%d", i)), "--allow-origin", r.oaddr, "--allow", allow, "-q"}
		var addr string
		p, err := startListening(ctx, h.Name, h.Command(argv...), cdnNodeLine, &addr, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		r.nprocs = append(r.nprocs, p)
		r.naddrs = append(r.naddrs, addr)
	}
	// The crowd comes to a cluster whose nodes all see each other, as it
	// would to one running before the rush.
	deadline := time.Now().Add(15 * time.Second)
	for i, h := range r.nodes {
		for {
			var st struct {
				Ring []string `json:"ring"`
			}
			resp, err := h.HTTPClient().Get("http://" + r.naddrs[i] + "/.cdn/status")
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&st)
				resp.Body.Close()
			}
			if err == nil && len(st.Ring) == len(r.nodes) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s sees %d nodes of %d after 15s (%v)", h.Name, len(st.Ring), len(r.nodes), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// nginxConf is a node's nginx configuration: the front server (clients)
// and the back one (the owner of its slices).
const nginxConf = `# written by stampede bench (cdn)
daemon off;
master_process off;
%[1]spid %[2]s/nginx.pid;
error_log stderr error;
events { worker_connections 4096; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_timeout 60s;
	client_body_temp_path %[2]s/tmp;
	proxy_temp_path %[2]s/tmp;
	fastcgi_temp_path %[2]s/tmp;
	uwsgi_temp_path %[2]s/tmp;
	scgi_temp_path %[2]s/tmp;
	proxy_cache_path %[2]s/cache levels=1:2 keys_zone=slices:32m max_size=16g inactive=1h use_temp_path=off;
	upstream owners {
		hash $uri$slice_range consistent;
%[3]s		keepalive 64;
	}
	server {
		listen %[4]s;
		location / {
			slice 1m;
			proxy_set_header Range $slice_range;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_pass http://owners;
			proxy_next_upstream error timeout http_502 http_503 http_504;
			proxy_connect_timeout 2s;
			proxy_read_timeout 60s;
		}
	}
	server {
		listen %[5]s;
		location / {
			slice 1m;
			proxy_cache slices;
			proxy_cache_key $uri$slice_range;
			proxy_set_header Range $slice_range;
			proxy_cache_valid 200 206 1h;
			proxy_cache_lock on;
			proxy_cache_lock_timeout 300s;
			proxy_cache_lock_age 300s;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_pass http://%[6]s;
			proxy_read_timeout 300s;
		}
	}
}
`

// startNginx starts nginx on every node; solo, each node is the owner of
// every slice it is asked.
func (r *cdnRun) startNginx(ctx context.Context, solo bool) error {
	c := r.cfg
	front, err := r.nodePorts(8080)
	if err != nil {
		return err
	}
	back, err := r.nodePorts(8081)
	if err != nil {
		return err
	}
	var servers strings.Builder
	for i, h := range r.nodes {
		fmt.Fprintf(&servers, "\t\tserver %s max_fails=1 fail_timeout=10s;\n", h.Addr(back[i]))
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;\n" // the files live in the harness's private scratch directory
	}
	for i, h := range r.nodes {
		owners := servers.String()
		if solo {
			owners = fmt.Sprintf("\t\tserver %s;\n", h.Addr(back[i]))
		}
		dir := filepath.Join(c.Dir, fmt.Sprintf("nginx%d", i))
		if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
			return err
		}
		conf := fmt.Sprintf(nginxConf, user, dir, owners, h.Addr(front[i]), h.Addr(back[i]), r.oaddr)
		if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
			return err
		}
		p, err := startProc(procSpec{name: h.Name, argv: h.Command("nginx", "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", "stderr")})
		if err != nil {
			return err
		}
		r.nprocs = append(r.nprocs, p)
		r.naddrs = append(r.naddrs, h.Addr(front[i]))
	}
	for i, h := range r.nodes {
		for _, port := range []int{front[i], back[i]} {
			if err := waitListening(ctx, h, h.Addr(port), r.nprocs[i]); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		}
	}
	return nil
}

// varnishVCL is a node's Varnish configuration: the front socket sends a
// request to the URL's owner among the backs (a retry to the next one),
// the back to the origin; both cache what they get for an hour.
const varnishVCL = `vcl 4.1;
# written by stampede bench (cdn)
import directors;
import std;

backend origin {
	.host = "%[1]s";
	.port = "%[2]s";
	.connect_timeout = 2s;
	.first_byte_timeout = 300s;
	.between_bytes_timeout = 300s;
}
%[3]s
sub vcl_init {
	new owners = directors.shard();
%[4]s	owners.reconfigure();
}

sub vcl_recv {
	if (req.url == "/.probe") {
		return (synth(200));
	}
	if (req.url == "/.ready") {
		if (%[5]s) {
			return (synth(200));
		}
		return (synth(503));
	}
	# One object per URL and socket, whichever node the client asked: a
	# front and a back object of the same node must differ, or a front
	# that owns its URL would wait on itself.
	set req.http.Host = "stampede-bench-" + local.socket;
	unset req.http.X-Tier;
	if (local.socket == "back") {
		set req.backend_hint = origin;
	} else {
		set req.http.X-Tier = "front";
		set req.backend_hint = owners.backend(by=URL);
	}
	return (hash);
}

sub vcl_backend_fetch {
	if (bereq.http.X-Tier == "front" && bereq.retries > 0) {
		set bereq.backend = owners.backend(by=URL, alt=bereq.retries);
	}
}

sub vcl_backend_error {
	if (bereq.retries < 2) {
		return (retry);
	}
}

sub vcl_backend_response {
	set beresp.ttl = 1h;
	set beresp.grace = 0s;
	set beresp.do_stream = true;
	unset beresp.http.Set-Cookie;
	return (deliver);
}
`

const varnishBackend = `backend n%[1]d {
	.host = "%[2]s";
	.port = "%[3]d";
	.connect_timeout = 2s;
	.first_byte_timeout = 300s;
	.between_bytes_timeout = 60s;
	.probe = { .url = "/.probe"; .interval = 1s; .timeout = 1s; .window = 3; .threshold = 2; .initial = 2; }
}
`

// startVarnish starts varnishd on every node, its front socket for the
// clients and its back one for the other nodes.
func (r *cdnRun) startVarnish(ctx context.Context) error {
	c := r.cfg
	front, err := r.nodePorts(8080)
	if err != nil {
		return err
	}
	back, err := r.nodePorts(8081)
	if err != nil {
		return err
	}
	var backends, adds strings.Builder
	var healthy []string
	for i, h := range r.nodes {
		fmt.Fprintf(&backends, varnishBackend, i, h.IP, back[i])
		fmt.Fprintf(&adds, "\towners.add_backend(n%d);\n", i)
		healthy = append(healthy, fmt.Sprintf("std.healthy(n%d)", i))
	}
	ohost, oport, err := net.SplitHostPort(r.oaddr)
	if err != nil {
		return err
	}
	vcl := fmt.Sprintf(varnishVCL, ohost, oport, backends.String(), adds.String(), strings.Join(healthy, " && "))
	for i, h := range r.nodes {
		dir := filepath.Join(c.Dir, fmt.Sprintf("varnish%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		conf := filepath.Join(dir, "cdn.vcl")
		if err := os.WriteFile(conf, []byte(vcl), 0o644); err != nil {
			return err
		}
		argv := h.Command("varnishd", "-F", "-n", filepath.Join(dir, "work"), "-f", conf, "-j", "none",
			"-a", "front="+h.Addr(front[i]), "-a", "back="+h.Addr(back[i]), "-T", "none", "-s", "malloc,1G",
			"-p", "default_grace=0", "-p", "thread_pool_min=50",
			// A failed connection to a node does not fail the next ones
			// at once for a while: the retry goes to the next owner.
			"-p", "backend_remote_error_holddown=0", "-p", "backend_local_error_holddown=0")
		p, err := startProc(procSpec{name: h.Name, argv: argv})
		if err != nil {
			return err
		}
		r.nprocs = append(r.nprocs, p)
		r.naddrs = append(r.naddrs, h.Addr(front[i]))
	}
	for i, h := range r.nodes {
		for _, port := range []int{front[i], back[i]} {
			// varnishd compiles the VCL first (cc), a few seconds.
			if err := waitListening(ctx, h, h.Addr(port), r.nprocs[i]); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		}
	}
	// As for stampede, the crowd comes to a cluster whose nodes all see
	// each other: probes that failed while the others started take a few
	// seconds to pass again.
	deadline := time.Now().Add(15 * time.Second)
	for i, h := range r.nodes {
		for {
			resp, err := h.HTTPClient().Get("http://" + r.naddrs[i] + "/.ready")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				err = errors.New(resp.Status)
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s does not see every node healthy after 15s: %v", h.Name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func waitListening(ctx context.Context, h *Host, addr string, p *proc) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := h.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("exited: %s", p.describe())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not listening on %s after 30s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run starts the clients together and measures.
func (r *cdnRun) run(ctx context.Context, system string) (*CDNResult, error) {
	c := r.cfg
	res := &CDNResult{System: system}
	before, _ := r.egress(ctx)
	served := len(r.nodes)
	if c.KillAt > 0 {
		served-- // the clients ask the others
	}
	asked := map[int]bool{}
	type outcome struct {
		took time.Duration
		err  error
	}
	out := make([]outcome, c.Clients)
	var wg sync.WaitGroup
	for i, h := range r.peers {
		f := 0
		if c.Files > 1 && i%4 == 3 {
			f = 1 + (i/4)%(c.Files-1)
		}
		asked[f] = true
		file := filepath.Join(c.Dir, fmt.Sprintf("client%d.out", i))
		url := "http://" + r.naddrs[i%served] + "/"
		if system == CDNStampede {
			url += "http://" + r.oaddr + "/"
		}
		url += cdnFile(f)
		argv := []string{"curl", "-sSf", "-o", file, url}
		if r.nw.AppShaping() && c.ClientDown > 0 {
			argv = append(argv, "--limit-rate", strconv.FormatInt(c.ClientDown, 10))
		}
		p, err := startProc(procSpec{name: h.Name, argv: h.Command(argv...)})
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			if err := p.wait(ctx); err != nil {
				p.kill()
				out[i].err = err
				return
			}
			out[i].took = p.end.Sub(p.start)
			if p.code != 0 {
				out[i].err = fmt.Errorf("curl: %s: %s", p.state, p.describe())
				return
			}
			data, err := os.ReadFile(file)
			os.Remove(file)
			if err == nil && sha256.Sum256(data) != r.sums[f] {
				err = errors.New("the file differs from the source")
			}
			out[i].err = err
		})
	}
	if c.KillAt > 0 {
		select {
		case <-time.After(c.KillAt):
			p := r.nprocs[len(r.nprocs)-1]
			// The whole group: varnishd's worker is a child of its manager.
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			p.kill()
		case <-ctx.Done():
		}
	}
	wg.Wait()
	for i, o := range out {
		if o.err != nil {
			res.Failed++
			c.Log.Warn("cdn bench: client failed", "system", system, "client", i, "err", o.err)
			continue
		}
		res.Times = append(res.Times, o.took)
	}
	slices.Sort(res.Times)
	if b, err := r.originBytes(ctx); err == nil {
		res.OriginBytes = b
		res.Copies = float64(b) / float64(int64(len(asked))*c.Size)
	} else {
		c.Log.Warn("cdn bench: origin bytes", "err", err)
	}
	if system == CDNStampede {
		res.Counters = r.nodeCounters(ctx)
	}
	if after, err := r.egress(ctx); err == nil && before != nil {
		var total, most int64
		for i := range after {
			e := after[i] - before[i]
			res.Egress = append(res.Egress, e)
			total += e
			most = max(most, e)
		}
		if total > 0 {
			res.BusiestOverMean = float64(most) / (float64(total) / float64(len(after)))
		}
	}
	return res, nil
}

func (r *cdnRun) originBytes(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.oaddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := r.origin.HTTPClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	return bytesSent(body)
}

// egress reads each node's transmitted bytes from its link (netns only:
// on loopback every host shares one interface).
func (r *cdnRun) egress(ctx context.Context) ([]int64, error) {
	if r.nw.Name() != BackendNetns {
		return nil, errors.New("egress is measured on netns only")
	}
	out := make([]int64, len(r.nodes))
	for i, h := range r.nodes {
		b, err := exec.CommandContext(ctx, "ip", "-n", h.ns, "-s", "-j", "link", "show", "dev", "eth0").Output()
		if err != nil {
			return nil, err
		}
		var links []struct {
			Stats64 struct {
				TX struct {
					Bytes int64 `json:"bytes"`
				} `json:"tx"`
			} `json:"stats64"`
		}
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(&links); err != nil || len(links) != 1 {
			return nil, fmt.Errorf("ip link stats of %s: %v", h.Name, err)
		}
		out[i] = links[0].Stats64.TX.Bytes
	}
	return out, nil
}

var cdnCounterLine = regexp.MustCompile(`(?m)^stampede_cdn_((?:chunks|chunks_rejected|reforwards|requests|responses_aborted)_total(?:\{[^}]*\})?) (\S+)$`)

// nodeCounters sums a few of the stampede nodes' counters over the nodes
// that answer.
func (r *cdnRun) nodeCounters(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for i, h := range r.nodes {
		if r.nprocs[i].exited() {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.naddrs[i]+"/.cdn/metrics", nil)
		if err == nil {
			var resp *http.Response
			if resp, err = h.HTTPClient().Do(req); err == nil {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
				for _, m := range cdnCounterLine.FindAllSubmatch(body, -1) {
					if v, err := strconv.ParseFloat(string(m[2]), 64); err == nil {
						out[string(m[1])] += v
					}
				}
			}
		}
		cancel()
	}
	return out
}
