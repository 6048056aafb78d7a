package bench

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/internal/ratelimit"
)

// The second HTTP baseline: nginx serves the file on the origin host and
// every peer downloads it from there with stampede get.
//
// nginx's limit_rate caps each connection, not the server, so it cannot
// give the origin the one shared cap that stampede serve --rate does.
// Instead the peers reach nginx through a TCP relay run by the harness on
// the origin host: on loopback the relay passes what nginx sends through
// one token bucket for all connections (internal/ratelimit, the bucket
// behind serve --rate), so the whole origin is capped at origin_up; on
// netns the origin host's link is capped by tc tbf as for every system and
// the relay only forwards. Either way the relay counts the bytes it hands
// to the peers' connections: the origin's bytes, counted where stampede
// serve counts its own.

type nginxSys struct {
	env    *runEnv
	prefix string // nginx's prefix: configuration, pid, temp paths
	port   int    // nginx's own port on the origin host
	proc   *proc
	relay  *relay
}

func newNginx(e *runEnv) (*nginxSys, error) {
	if m := missingPrograms(exec.LookPath, nginxPrograms); len(m) > 0 {
		return nil, &Unavailable{Scenario: e.sc.Name, System: SysNginx, Backend: e.sc.Backend, Missing: m}
	}
	return &nginxSys{env: e, prefix: filepath.Join(e.dir, "nginx")}, nil
}

func (n *nginxSys) name() string  { return SysNginx }
func (n *nginxSys) label() string { return "HTTP (nginx)" }
func (n *nginxSys) notes() []string {
	how := "on netns the origin host's link caps it and the relay only forwards"
	if n.env.shaping() {
		how = "on loopback the relay caps all of them together at the origin's upload with the token bucket of serve --rate"
	}
	return []string{"HTTP (nginx): nginx (one process, sendfile) serves the file on the origin host; peers reach it through a " +
		"TCP relay of the harness that counts the bytes sent to them (the origin's bytes); " + how + ". " +
		"Peers run stampede get, which without a manifest streams the file in one response and checks it against --sha256."}
}

// prepare writes nginx's configuration and picks its port, once for all
// runs.
func (n *nginxSys) prepare() error {
	if n.port != 0 {
		return nil
	}
	e := n.env
	tmp := filepath.Join(n.prefix, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	port, err := e.origin.FreePort()
	if err != nil {
		return fmt.Errorf("nginx: picking a port: %w", err)
	}
	user := ""
	if os.Geteuid() == 0 {
		// The files live in the harness's private scratch directory.
		user = "user root;\n"
	}
	conf := fmt.Sprintf(`# written by stampede bench
daemon off;
master_process off;
%spid %s;
error_log stderr warn;
events { worker_connections 4096; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_timeout 30s;
	default_type application/octet-stream;
	client_body_temp_path %[3]s;
	proxy_temp_path %[3]s;
	fastcgi_temp_path %[3]s;
	uwsgi_temp_path %[3]s;
	scgi_temp_path %[3]s;
	server {
		listen %s;
		root %s;
	}
}
`, user, filepath.Join(n.prefix, "nginx.pid"), tmp, e.origin.Addr(port), e.www)
	if err := os.WriteFile(filepath.Join(n.prefix, "nginx.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	n.port = port
	return nil
}

func (n *nginxSys) start(ctx context.Context) error {
	if err := n.prepare(); err != nil {
		return err
	}
	if n.relay == nil {
		var lim *ratelimit.Limiter
		if n.env.shaping() {
			lim = ratelimit.New(n.env.sc.OriginUp)
		}
		r, err := newRelay(n.env.origin, n.env.origin.Addr(n.port), lim)
		if err != nil {
			return fmt.Errorf("nginx relay: %w", err)
		}
		n.relay = r
	}
	return n.startNginx(ctx)
}

// startNginx starts nginx and returns once it accepts connections.
func (n *nginxSys) startNginx(ctx context.Context) error {
	e := n.env
	// One process (master_process off): a SIGKILL by PID ends all of it.
	p, err := startProc(procSpec{name: "nginx", argv: e.origin.Command("nginx", "-p", n.prefix,
		"-c", filepath.Join(n.prefix, "nginx.conf"), "-e", "stderr")})
	if err != nil {
		return err
	}
	n.proc = p
	deadline := time.Now().Add(10 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := e.origin.DialContext(dctx, "tcp", e.origin.Addr(n.port))
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("nginx did not start: %s", p.describe())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.kill()
			return fmt.Errorf("nginx not listening after 10s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *nginxSys) originBytes(context.Context) (int64, error) {
	if n.relay == nil {
		return 0, errors.New("nginx relay not running")
	}
	return n.relay.sent.Load(), nil
}

// restartOrigin restarts nginx; the relay stays (it stands for the
// network), and the connections it relayed end with nginx's.
func (n *nginxSys) restartOrigin(ctx context.Context) error {
	n.proc.kill()
	return n.startNginx(ctx)
}

func (n *nginxSys) restartTracker(context.Context) error { return errUnsupported }
func (n *nginxSys) corruptible() string                  { return "the HTTP baseline's peers do not upload" }

func (n *nginxSys) stop() {
	if n.proc != nil {
		n.proc.term(3 * time.Second)
	}
	if n.relay != nil {
		n.relay.close()
		n.relay = nil
	}
}

func (n *nginxSys) peer(id int, h *Host, c Class, dir string) peerCmd {
	e := n.env
	out := filepath.Join(dir, e.file)
	argv := []string{e.bin, "get", "http://" + n.relay.addr() + "/" + e.file, "-o", out, "-q", "--json", "--progress-json",
		"--sha256", hex.EncodeToString(e.sum[:])}
	if e.shaping() && c.Down > 0 {
		argv = append(argv, "--limit-rate", strconv.FormatInt(c.Down, 10))
	}
	return peerCmd{argv: h.Command(argv...), output: out, progress: progressJSON}
}

// relay forwards TCP connections from its listener on a host to target on
// the same host, passing what target sends back through lim (nil: no cap)
// and counting it.
type relay struct {
	ln     net.Listener
	host   *Host
	target string
	lim    *ratelimit.Limiter
	sent   atomic.Int64 // bytes written to the clients' connections

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func newRelay(h *Host, target string, lim *ratelimit.Limiter) (*relay, error) {
	ln, err := h.Listen(0)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &relay{ln: ln, host: h, target: target, lim: lim, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	r.wg.Go(r.accept)
	return r, nil
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(c) {
			c.Close()
			return
		}
		r.wg.Go(func() { r.serve(c) })
	}
}

// track registers c for close; false once the relay is closing.
func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) untrack(c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns != nil {
		delete(r.conns, c)
	}
}

// serve relays one client connection; when either side ends, both close.
func (r *relay) serve(client net.Conn) {
	defer r.untrack(client)
	defer client.Close()
	dctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	up, err := r.host.DialContext(dctx, "tcp", r.target)
	cancel()
	if err != nil {
		return
	}
	if !r.track(up) {
		up.Close()
		return
	}
	defer r.untrack(up)
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(up, client)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(r.lim.Writer(r.ctx, countingWriter{client, &r.sent}), up)
		done <- struct{}{}
	}()
	<-done
	client.Close()
	up.Close()
	<-done
}

// close stops accepting, ends every relayed connection and waits for the
// relay's goroutines.
func (r *relay) close() {
	r.cancel()
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}

// countingWriter counts the bytes written to w.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}
