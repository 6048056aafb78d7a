package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The push mode's systems, each run by one method of pushRun: it starts
// what the system needs, calls begin when the transfer starts, records
// every host's progress and completion, and returns once no host is
// pending (or ctx ends), having ended every process it started.

// Ports on the cluster's hosts.
const (
	pushPeerPort   = 7881 // stampede daemon's peer port
	pushAgentPort  = 7882 // its push service
	pushOriginPort = 7880 // stampede push's origin
	pushHTTPPort   = 8080 // nginx on the origin host (http, tree)
	pushTreePort   = 8081 // nginx on a rack's head (tree)
)

// preparePush writes the cluster file and makes the cluster's key, once
// for all runs.
func (b *pushBench) preparePush(ctx context.Context) error {
	if b.cluster != "" {
		return nil
	}
	t := b.sc.Push
	// A cluster file gives a host one link, the same each way: the
	// smaller of the scenario's two, so that no budget is past a cap.
	var c strings.Builder
	fmt.Fprintf(&c, "# written by stampede bench for %s\nreserve = %q\nhost_link = \"%d\"\n", b.sc.Name,
		formatFloat(t.Reserve*100)+"%", min(t.HostUp, t.HostDown))
	if t.RackRepresentatives > 0 {
		fmt.Fprintf(&c, "rack_representatives = %d\n", t.RackRepresentatives)
	}
	for d := range t.Datacenters {
		fmt.Fprintf(&c, "\n[datacenter.d%d]\nlink = \"%d\"\n", d, t.DCUplink)
	}
	for k, hs := range b.net.racks {
		var names []string
		for _, h := range hs {
			names = append(names, strconv.Quote(h.Name))
			fmt.Fprintf(&c, "\n[host.%s]\nagent = %q\npeer = %q\n", h.Name, h.Addr(pushAgentPort), h.Addr(pushPeerPort))
		}
		fmt.Fprintf(&c, "\n[rack.r%d]\nuplink = \"%d\"\nhosts = [%s]\n", k, t.RackUplink, strings.Join(names, ", "))
		if d := b.net.rackDC[k]; d >= 0 {
			fmt.Fprintf(&c, "datacenter = \"d%d\"\n", d)
		}
	}
	cluster := filepath.Join(b.dir, "cluster.toml")
	if err := os.WriteFile(cluster, []byte(c.String()), 0o644); err != nil {
		return err
	}
	key := filepath.Join(b.dir, "cluster.key")
	if _, err := runTool(ctx, b.bin, "keygen", "-o", key); err != nil {
		return err
	}
	b.cluster, b.key = cluster, key
	return nil
}

// pushLine is what the harness reads of stampede push's --json lines.
type pushLine struct {
	Type  string `json:"type"`
	Racks []struct {
		Hosts []struct {
			Host      string  `json:"host"`
			Done      int64   `json:"done"`
			Seconds   float64 `json:"seconds"`
			Installed bool    `json:"installed"`
			Cause     string  `json:"cause"`
		} `json:"hosts"`
	} `json:"racks"`
}

// push runs a daemon with --cluster on every host, then stampede push on
// the origin host.
func (r *pushRun) push(ctx context.Context) error {
	b := r.b
	if err := b.preparePush(ctx); err != nil {
		return err
	}
	index := map[string]int{}
	agents := make([]*proc, len(r.host))
	defer func() { endAll(agents) }()
	for i, h := range r.host {
		index[h.Name] = i
		hd := r.hostDir(i)
		if err := os.MkdirAll(filepath.Join(hd, "dest"), 0o755); err != nil {
			return err
		}
		p, err := r.start(procSpec{name: "daemon on " + h.Name, argv: h.Command(b.bin, "daemon",
			"--state-dir", filepath.Join(hd, "state"), "--api", filepath.Join(hd, "api.sock"),
			"--peer-listen", h.Addr(pushPeerPort), "--cluster", b.cluster, "--cluster-key", b.key+".pub",
			"--cluster-host", h.Name, "--push-dest-prefix", filepath.Join(hd, "dest"), "-q")})
		if err != nil {
			return err
		}
		agents[i] = p
	}
	for i, h := range r.host {
		if err := waitServing(ctx, b.net.origin, h.Addr(pushAgentPort), agents[i], time.Minute); err != nil {
			return err
		}
	}
	time.Sleep(600 * time.Millisecond) // a first reading of the links
	var (
		mu   sync.Mutex // guards last
		last pushLine
	)
	r.begin()
	p, err := r.start(procSpec{name: "stampede push", argv: b.net.origin.Command(b.bin, "push", filepath.Join(b.www, b.file),
		"--cluster", b.cluster, "--key", b.key, "--json", "--dest", filepath.Join(r.dir, "{host}", "dest", b.file),
		"--origin-listen", b.net.origin.Addr(pushOriginPort), "--deadline", b.timeout(r.sys).String()),
		stdout: func(line string, _ time.Time) {
			var l pushLine
			if json.Unmarshal([]byte(line), &l) != nil {
				return
			}
			for _, rk := range l.Racks {
				for _, h := range rk.Hosts {
					if i, ok := index[h.Host]; ok {
						r.progress(i, h.Done)
						if h.Installed {
							r.finished(i, h.Seconds, "")
						}
					}
				}
			}
			if l.Type == "report" {
				mu.Lock()
				last = l
				mu.Unlock()
			}
		}})
	if err != nil {
		return err
	}
	if p.wait(ctx) != nil {
		p.term(3 * time.Second)
	}
	<-p.done
	mu.Lock()
	defer mu.Unlock()
	if last.Type != "report" {
		for i := range r.host {
			r.finished(i, 0, "stampede push gave no report: "+p.describe())
		}
		return nil
	}
	for _, rk := range last.Racks {
		for _, h := range rk.Hosts {
			i, ok := index[h.Host]
			switch {
			case !ok:
			case h.Installed:
				r.finished(i, h.Seconds, "")
			default:
				r.finished(i, 0, "push: "+cmp.Or(h.Cause, "not installed"))
			}
		}
	}
	return nil
}

// bittorrent runs aria2c on every host, the origin seeding (aria2.go's
// setup: mktorrent, opentracker, the seeder), every host seeding on until
// all are done.
func (r *pushRun) bittorrent(ctx context.Context) error {
	b := r.b
	if b.aria2 == nil {
		sc := *b.sc
		sc.Departure.Linger = 24 * time.Hour // seed on: the harness ends them
		a, err := newAria2(&runEnv{sc: &sc, net: b.net, origin: b.net.origin, bin: b.bin, dir: b.dir, www: b.www,
			file: b.file, sum: b.sum, log: b.log})
		if err != nil {
			return err
		}
		b.aria2 = a
	}
	a := b.aria2
	if err := a.start(ctx); err != nil {
		return err
	}
	defer a.stop()
	r.keep(a.seeder)
	r.keep(a.tracker)
	hook := filepath.Join(r.dir, "done.sh")
	// aria2c passes the file's path as $3; the hook notes the time beside it.
	if err := os.WriteFile(hook, []byte("#!/bin/sh\ndate +%s.%N > \"$(dirname \"$3\")/done\"\n"), 0o755); err != nil {
		return err
	}
	time.Sleep(600 * time.Millisecond) // a first reading of the links
	r.begin()
	leechers := make([]*proc, len(r.host))
	defer func() { endAll(leechers) }()
	for i, h := range r.host {
		pc := a.peer(i, h, Class{}, r.hostDir(i))
		argv := append(pc.argv[:len(pc.argv)-1:len(pc.argv)-1], "--on-bt-download-complete="+hook, pc.argv[len(pc.argv)-1])
		p, err := r.start(procSpec{name: "aria2c on " + h.Name, argv: argv, stdout: func(line string, _ time.Time) {
			if n, ok := parseAria2Progress(line); ok {
				r.progress(i, n)
			}
		}})
		if err != nil {
			r.finished(i, 0, err.Error())
			continue
		}
		leechers[i] = p
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for r.pending() > 0 {
		for i := range r.host {
			if data, err := os.ReadFile(filepath.Join(r.hostDir(i), "done")); err == nil {
				if f, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64); err == nil {
					r.finished(i, time.Unix(0, int64(f*1e9)).Sub(r.t0).Seconds(), "")
				}
			} else if p := leechers[i]; p != nil && p.exited() {
				r.finished(i, 0, "aria2c exited before it was done: "+p.describe())
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	return nil
}

// overHTTP serves the file with nginx on the origin host. Without tree,
// every host curls it from there (plain HTTP, direct); with tree, the
// first host of every rack does, then serves it with nginx to the others
// of its rack, which curl it from there.
func (r *pushRun) overHTTP(ctx context.Context, tree bool) error {
	b := r.b
	srv, err := startNginx(ctx, b.net.origin, filepath.Join(r.dir, "nginx-origin"), b.www, pushHTTPPort)
	if err != nil {
		return err
	}
	r.keep(srv)
	defer srv.term(3 * time.Second)
	time.Sleep(600 * time.Millisecond) // a first reading of the links
	r.begin()
	if !tree {
		var wg sync.WaitGroup
		for i := range r.host {
			wg.Go(func() { r.curl(ctx, i, b.net.origin, pushHTTPPort) })
		}
		wg.Wait()
		return nil
	}
	var wg sync.WaitGroup
	first := 0
	for _, rk := range b.net.racks {
		head, n := first, len(rk)
		first += n
		wg.Go(func() {
			if !r.curl(ctx, head, b.net.origin, pushHTTPPort) {
				for i := head + 1; i < head+n; i++ {
					r.finished(i, 0, "the rack's head did not get the file")
				}
				return
			}
			h := r.host[head]
			hs, err := startNginx(ctx, h, filepath.Join(r.dir, "nginx-"+h.Name), r.hostDir(head), pushTreePort)
			if err != nil {
				for i := head + 1; i < head+n; i++ {
					r.finished(i, 0, "the rack's head could not serve the file: "+err.Error())
				}
				return
			}
			defer hs.term(3 * time.Second)
			r.keep(hs)
			var inner sync.WaitGroup
			for i := head + 1; i < head+n; i++ {
				inner.Go(func() { r.curl(ctx, i, h, pushTreePort) })
			}
			inner.Wait()
		})
	}
	wg.Wait()
	return nil
}

// curl fetches the file on host i from nginx on from's port, and records
// how it went; true if it got the file.
func (r *pushRun) curl(ctx context.Context, i int, from *Host, port int) bool {
	out := r.output(i)
	p, err := r.start(procSpec{name: "curl on " + r.host[i].Name, argv: r.host[i].Command("curl", "-sSf",
		"--retry", "5", "--retry-all-errors", "-o", out, "http://"+from.Addr(port)+"/"+r.b.file)})
	if err != nil {
		r.finished(i, 0, err.Error())
		return false
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for !p.exited() {
		select {
		case <-ctx.Done():
			p.kill()
			return false
		case <-p.done:
		case <-tick.C:
			r.progress(i, fileSize(out))
		}
	}
	if p.code != 0 {
		r.finished(i, 0, "curl: "+p.describe())
		return false
	}
	r.finished(i, p.end.Sub(r.t0).Seconds(), "")
	return true
}

// startNginx runs nginx on h, serving root on port, its files under
// prefix, and returns once it accepts connections.
func startNginx(ctx context.Context, h *Host, prefix, root string, port int) (*proc, error) {
	if err := os.MkdirAll(filepath.Join(prefix, "tmp"), 0o755); err != nil {
		return nil, err
	}
	var conf strings.Builder
	conf.WriteString("# written by stampede bench\ndaemon off;\nmaster_process off;\n")
	if os.Geteuid() == 0 {
		conf.WriteString("user root;\n") // the files are in the harness's scratch directory
	}
	fmt.Fprintf(&conf, "pid %s/nginx.pid;\nerror_log stderr warn;\nevents { worker_connections 1024; }\n", prefix)
	fmt.Fprintf(&conf, "http {\n  access_log off;\n  sendfile on;\n  default_type application/octet-stream;\n")
	for _, t := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&conf, "  %s_temp_path %s/tmp;\n", t, prefix)
	}
	fmt.Fprintf(&conf, "  server { listen %s; root %s; }\n}\n", h.Addr(port), root)
	file := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(file, []byte(conf.String()), 0o644); err != nil {
		return nil, err
	}
	p, err := startProc(procSpec{name: "nginx on " + h.Name, argv: h.Command("nginx", "-p", prefix, "-c", file, "-e", "stderr")})
	if err != nil {
		return nil, err
	}
	if err := waitServing(ctx, h, h.Addr(port), p, 10*time.Second); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// waitServing returns once addr accepts connections from host from, or
// fails when p exits first or limit passes.
func waitServing(ctx context.Context, from *Host, addr string, p *proc, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := from.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s did not start: %s", p.name, p.describe())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not listening on %s after %v: %w", p.name, addr, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// endAll asks every process of ps to end (SIGTERM, then SIGKILL), all at
// once, and waits for them.
func endAll(ps []*proc) {
	var wg sync.WaitGroup
	for _, p := range ps {
		if p != nil {
			wg.Go(func() { p.term(5 * time.Second) })
		}
	}
	wg.Wait()
}
