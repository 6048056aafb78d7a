package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/daemon"
	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/sign"
	"github.com/stampede-dev/stampede/tracker"
)

// Exit codes of push (docs/push.md): how many hosts got the file.
const (
	exitPushSome = 11 // some hosts did not get the file, or their --then failed
	exitPushNone = 12 // no host got the file
)

// Defaults of push's flags.
const (
	defaultPushDeadline = 30 * time.Minute
	defaultDeadAfter    = 15 * time.Second
	pushPoll            = 500 * time.Millisecond
)

func runPush(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "push", "FILE --cluster FILE --dest PATH --key KEY [flags]", `Push FILE to every host of a cluster, or a selection (--hosts), through the
push service of "stampede daemon --cluster" on each: per rack, representatives
fetch across the rack's uplink and the others inside the rack; every shared
link stays within its capacity less its reserve. The file is installed
atomically at --dest, verified, and --then's command run after. push serves
the file itself (an origin with its tracker), shows the progress per rack and
host, and ends with a report: each host's completion time and bytes from its
rack, from other racks and from the origin, and each failure with its cause.
Exit codes: 0 every host got the file (and its --then succeeded), 11 some did
not, 12 none did, 2 bad flags, cluster file, selection, key or FILE (missing,
or not a regular file), 3 the origin could not be set up. See docs/push.md.`)
	var (
		clusterFile, dest, keyFile, then, statusListen, originListen, originURL string
		hosts                                                                   []string
		jsonOut, quiet, verbose                                                 bool
		deadline, deadAfter, behindAfter                                        time.Duration
	)
	fs.StringVar(&clusterFile, "cluster", "", "the cluster file, TOML `FILE` (docs/push.md; required)")
	fs.StringVar(&dest, "dest", "", "install the file at `PATH` on each host (absolute; under the agents' --push-dest-prefix; required)")
	fs.StringVar(&keyFile, "key", "", "sign the push with the cluster's private key `FILE` (stampede keygen; required)")
	fs.StringArrayVar(&hosts, "hosts", nil, "push only to the hosts `SPEC` picks: rack=R1,R2, dc=D1, or host names, NAMES or host=NAMES (globs: 'web-*'); repeated, each narrows")
	fs.StringVar(&then, "then", "", "run `CMD` with /bin/sh -c on each host after the install (in --dest's directory)")
	fs.BoolVar(&jsonOut, "json", false, "write progress and the report as JSON lines on stdout")
	fs.DurationVar(&deadline, "deadline", defaultPushDeadline, "give up on hosts not done after `DUR`; the push's signature expires then too")
	fs.DurationVar(&deadAfter, "dead-after", defaultDeadAfter, "report a host that stops answering for `DUR` as died mid-push")
	fs.DurationVar(&behindAfter, "behind-after", defaultBehindAfter, "a rack under a third of the median rack's rate for `DUR` is behind: its standby representatives take over (0: never)")
	fs.StringVar(&statusListen, "status-listen", "", "serve a live status page on `HOST:PORT`")
	fs.StringVar(&originListen, "origin-listen", ":0", "serve the file to the agents on `HOST:PORT`")
	fs.StringVar(&originURL, "origin-url", "", "the agents reach the origin at `URL` (default: this host's address toward the first agent, and --origin-listen's port)")
	fs.BoolVarP(&quiet, "quiet", "q", false, "no progress, only the report")
	fs.BoolVarP(&verbose, "verbose", "v", false, "log every decision")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return usageErrorf("push takes one FILE, got %q", pos)
	case clusterFile == "":
		return usageErrorf("say which cluster: --cluster FILE")
	case dest == "" || !filepath.IsAbs(dest):
		return usageErrorf("--dest %q: want the absolute path to install the file at on each host", dest)
	case keyFile == "":
		return usageErrorf("say which key signs the push: --key FILE (stampede keygen)")
	case deadline <= 0 || deadline > cluster.MaxLifetime:
		return usageErrorf("--deadline %v: want more than 0 and at most %v", deadline, cluster.MaxLifetime)
	case deadAfter <= 0:
		return usageErrorf("--dead-after %v: want more than 0", deadAfter)
	case behindAfter < 0:
		return usageErrorf("--behind-after %v: want 0 (never) or more", behindAfter)
	}
	if originURL != "" {
		if u, err := url.Parse(originURL); err != nil || u.Scheme != "http" || u.Host == "" {
			return usageErrorf("--origin-url %q: want http://HOST:PORT", originURL)
		}
	}
	c, err := cluster.Load(clusterFile)
	if err != nil {
		return usageErrorf("--cluster: %v", err)
	}
	chosen, err := c.Select(hosts)
	if err != nil {
		return usageErrorf("%v", err)
	}
	priv, err := readPushKey(keyFile)
	if err != nil {
		return err
	}
	file, err := filepath.Abs(pos[0])
	if err != nil {
		return withCode(exitIO, err)
	}
	if fi, err := os.Stat(file); err != nil || !fi.Mode().IsRegular() {
		return usageErrorf("%s: not a regular file", pos[0])
	}
	p := &pusher{
		e: e, c: c, hosts: chosen, file: file, dest: dest, then: then, priv: priv,
		deadline: deadline, deadAfter: deadAfter, behindAfter: behindAfter, originListen: originListen, originURL: originURL,
		json: jsonOut, quiet: quiet, log: e.logger(true, verbose),
	}
	if verbose {
		p.log = e.logger(false, true)
	}
	if statusListen != "" {
		ln, err := net.Listen("tcp", statusListen)
		if err != nil {
			return usageErrorf("--status-listen: %v", err)
		}
		p.statusLn = ln
	}
	rep, err := p.run(ctx)
	if err != nil {
		return err
	}
	return rep.exitError()
}

// readPushKey reads the cluster's private key.
func readPushKey(path string) (ed25519.PrivateKey, error) {
	priv, err := sign.ReadPrivateKey(path)
	if err != nil {
		return nil, usageErrorf("--key: %v", err)
	}
	return priv, nil
}

// pusher is one push: the origin serving the file, the agents' states.
type pusher struct {
	e                       *env
	c                       *cluster.Cluster
	hosts                   []string
	file, dest, then        string
	priv                    ed25519.PrivateKey
	deadline, deadAfter     time.Duration
	behindAfter             time.Duration // 0: racks behind are not looked for
	originListen, originURL string
	json, quiet             bool
	log                     *slog.Logger
	statusLn                net.Listener
	client                  *http.Client

	mu     sync.Mutex // guards the following
	start  time.Time
	req    cluster.Request
	plan   *cluster.Plan
	agents map[string]*agentState
	// watchRacks finds the racks behind; behind are those found, in order.
	watchRacks *rackWatch
	behind     []pushBehind
}

// agentState is what the pusher knows of one host.
type agentState struct {
	st       daemon.PushStatus
	accepted bool
	final    bool
	cause    string    // why it failed, for the report
	lastSeen time.Time // the last status read
}

func (p *pusher) run(ctx context.Context) (*pushReport, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.client = &http.Client{Timeout: 5 * time.Second}
	p.agents = map[string]*agentState{}
	for _, h := range p.hosts {
		p.agents[h] = &agentState{st: daemon.PushStatus{Host: h, State: "pending"}}
	}
	p.start = time.Now()

	srvURL, stopOrigin, err := p.serveFile(ctx)
	if err != nil {
		return nil, err
	}
	defer stopOrigin()
	if p.statusLn != nil {
		stop := p.serveStatus(ctx)
		defer stop()
	}
	m, _, err := fetch.Join(ctx, p.client, srvURL)
	if err != nil {
		return nil, withCode(exitIO, fmt.Errorf("push: the file's manifest: %w", err))
	}
	alive, local := p.hello(ctx)
	fileURL := p.originURL
	if fileURL == "" {
		_, port, _ := net.SplitHostPort(mustURL(srvURL).Host)
		host := local
		if host == "" {
			host = "127.0.0.1"
		}
		fileURL = "http://" + net.JoinHostPort(host, port)
	}
	fileURL += "/" + url.PathEscape(filepath.Base(p.file))
	if len(alive) > 0 {
		req := cluster.Request{Root: m.Root.String(), Size: m.Size, URL: fileURL, Dest: p.dest, Then: p.then, Hosts: alive}
		req.Sign(p.priv, time.Now(), p.deadline)
		plan, err := cluster.NewPlan(p.c, alive, m.Root[:])
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		p.req, p.plan = req, plan
		p.mu.Unlock()
		p.send(ctx)
		p.watch(ctx)
	}
	rep := p.report(m.Size)
	p.printReport(rep)
	return rep, nil
}

func mustURL(s string) *url.URL {
	u, _ := url.Parse(s)
	return u
}

// serveFile runs an origin for the file alone: a directory beside it
// holding a hard link to it (the file's own directory when a link cannot
// be made there), with its tracker. It returns the file's URL on
// loopback, for the pusher itself.
func (p *pusher) serveFile(ctx context.Context) (string, func(), error) {
	name := filepath.Base(p.file)
	dir, err := os.MkdirTemp(filepath.Dir(p.file), ".stampede-push-")
	cleanup := func() {}
	if err == nil {
		if lerr := os.Link(p.file, filepath.Join(dir, name)); lerr != nil {
			os.RemoveAll(dir)
			err = lerr
		} else {
			cleanup = func() { os.RemoveAll(dir) }
		}
	}
	if err != nil {
		p.log.Warn("serving the file's whole directory: no hard link beside it", "err", err)
		dir = filepath.Dir(p.file)
	}
	cache, err := os.MkdirTemp("", "stampede-push-cache-")
	if err != nil {
		cleanup()
		return "", nil, withCode(exitIO, err)
	}
	srv, err := origin.New(origin.Config{
		Dir: dir, NoListing: true, CacheDir: cache, Logger: p.log.With("part", "origin"),
		Tracker: tracker.New(tracker.Config{Logger: p.log.With("part", "tracker")}),
	})
	if err != nil {
		cleanup()
		os.RemoveAll(cache)
		return "", nil, withCode(exitIO, err)
	}
	ln, err := net.Listen("tcp", p.originListen)
	if err != nil {
		cleanup()
		os.RemoveAll(cache)
		return "", nil, usageErrorf("--origin-listen: %v", err)
	}
	octx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(octx, ln); err != nil {
			p.log.Error("origin", "err", err)
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/" + url.PathEscape(name), func() {
		stop()
		<-done
		srv.Close()
		cleanup()
		os.RemoveAll(cache)
	}, nil
}

// hello probes every chosen host's agent at once; those that do not answer
// are down. It returns the hosts alive and this host's address toward the
// first of them (for the origin's URL).
func (p *pusher) hello(ctx context.Context) (alive []string, local string) {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for _, h := range p.hosts {
		wg.Go(func() {
			var la string
			tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
				la = i.Conn.LocalAddr().String()
			}})
			var hello struct{ Host string }
			err := p.getJSON(tctx, "http://"+p.c.Hosts[h].Agent+"/v1/hello", &hello)
			if err == nil && hello.Host != h {
				err = fmt.Errorf("the agent at %s says it is %q", p.c.Hosts[h].Agent, hello.Host)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				p.fail(h, "host down: "+err.Error())
				return
			}
			if local == "" {
				local, _, _ = net.SplitHostPort(la)
			}
		})
	}
	wg.Wait()
	for _, h := range p.hosts {
		if !p.agents[h].final {
			alive = append(alive, h)
		}
	}
	return alive, local
}

// fail records host h's failure.
func (p *pusher) fail(h, cause string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.agents[h]
	if a.final {
		return
	}
	a.final, a.cause = true, cause
	if a.st.State != daemon.PushDone {
		a.st.State = daemon.PushFailed
	}
}

func (p *pusher) getJSON(ctx context.Context, u string, v any) error {
	return p.callJSON(ctx, http.MethodGet, u, nil, v)
}

// callJSON sends in (nil: no body) and decodes an answer of 200 OK into
// out (nil: read no further); anything else is the agent's error.
func (p *pusher) callJSON(ctx context.Context, method, u string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return agentError(resp)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out)
}

// agentError is an agent's refusal, with its message.
func agentError(resp *http.Response) error {
	var e struct{ Error string }
	json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
	if e.Error == "" {
		e.Error = resp.Status
	}
	return fmt.Errorf("%s (%d)", e.Error, resp.StatusCode)
}

// send posts the signed request to every live host at once.
func (p *pusher) send(ctx context.Context) {
	body, _ := json.Marshal(p.req)
	var wg sync.WaitGroup
	for _, h := range p.req.Hosts {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.c.Hosts[h].Agent+"/v1/push", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := p.client.Do(req)
			if err != nil {
				p.fail(h, "host down: "+err.Error())
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				p.fail(h, "refused the push: "+agentError(resp).Error())
				return
			}
			p.mu.Lock()
			a := p.agents[h]
			a.accepted, a.lastSeen, a.st.State = true, time.Now(), daemon.PushFetching
			p.mu.Unlock()
		})
	}
	wg.Wait()
}

// watch polls the agents until every one has ended, or the deadline.
func (p *pusher) watch(ctx context.Context) {
	end := time.NewTimer(p.deadline)
	defer end.Stop()
	t := time.NewTicker(pushPoll)
	defer t.Stop()
	view := p.newView()
	for {
		p.poll(ctx)
		p.checkBehind(ctx, time.Now())
		view.draw(p.snapshot(), false)
		if p.allFinal() {
			view.draw(p.snapshot(), true)
			return
		}
		select {
		case <-ctx.Done():
			p.failRest("the push was interrupted")
			return
		case <-end.C:
			p.failRest(fmt.Sprintf("deadline passed (%v)", p.deadline))
			view.draw(p.snapshot(), true)
			return
		case <-t.C:
		}
	}
}

// poll reads every unfinished agent's status once.
func (p *pusher) poll(ctx context.Context) {
	var wg sync.WaitGroup
	p.mu.Lock()
	var todo []string
	for h, a := range p.agents {
		if a.accepted && !a.final {
			todo = append(todo, h)
		}
	}
	id := p.req.ID()
	p.mu.Unlock()
	for _, h := range todo {
		wg.Go(func() {
			var st daemon.PushStatus
			err := p.getJSON(ctx, "http://"+p.c.Hosts[h].Agent+"/v1/push/"+id, &st)
			p.mu.Lock()
			a := p.agents[h]
			if err != nil {
				down := time.Since(a.lastSeen) > p.deadAfter
				p.mu.Unlock()
				if down && ctx.Err() == nil {
					p.fail(h, fmt.Sprintf("died mid-push: no answer for %v (%v)", p.deadAfter, err))
				}
				return
			}
			a.st, a.lastSeen = st, time.Now()
			switch st.State {
			case daemon.PushDone:
				a.final = true
			case daemon.PushFailed:
				a.final, a.cause = true, failureCause(st)
			}
			p.mu.Unlock()
		})
	}
	wg.Wait()
}

// failureCause says why an agent's push failed.
func failureCause(st daemon.PushStatus) string {
	if st.Then != nil && st.Then.Exit != 0 {
		return "--then failed with status " + strconv.Itoa(st.Then.Exit)
	}
	return st.Error
}

func (p *pusher) allFinal() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.agents {
		if !a.final {
			return false
		}
	}
	return true
}

// failRest fails every host not done, with cause.
func (p *pusher) failRest(cause string) {
	p.mu.Lock()
	var rest []string
	for h, a := range p.agents {
		if !a.final {
			rest = append(rest, h)
		}
	}
	p.mu.Unlock()
	for _, h := range rest {
		p.fail(h, cause)
	}
}

// ErrPushIncomplete is push's error when not every host got the file.
var ErrPushIncomplete = errors.New("not every host got the file")
