package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"
)

// pushBench holds what every run of one push scenario shares: the cluster
// in namespaces, the file, and each system's setup.
type pushBench struct {
	parent  context.Context
	sc      *Scenario
	net     *pushNet
	bin     string
	dir     string
	www     string // the origin's directory, holding file
	file    string // the file's name
	sum     [32]byte
	log     *slog.Logger
	observe func(Snapshot)

	cluster, key string    // push: the cluster file and its private key
	aria2        *aria2Sys // aria2: the torrent, tracker and seeder
}

// pushPrograms are what each push system runs besides stampede.
func pushPrograms(system string) []Program {
	switch system {
	case SysAria2:
		return aria2Programs
	case SysTree, SysHTTP:
		return append(slices.Clone(curlPrograms), nginxPrograms...)
	}
	return nil
}

// pushLabels name the push systems in reports.
var pushLabels = map[string]string{
	SysPush:  "stampede push",
	SysAria2: "BitTorrent (aria2c)",
	SysTree:  "tree (curl)",
	SysHTTP:  "HTTP (nginx, direct)",
}

// runPush is Run for mode = push: sc is Run's copy of the scenario, with
// the overrides of cfg applied and validated, bin the stampede binary.
func runPush(ctx context.Context, cfg Config, sc *Scenario, bin string, feats Features, log *slog.Logger) (*Report, error) {
	rep := &Report{Scenario: sc, Backend: BackendNetns, Command: cfg.Command, Started: time.Now().UTC(),
		Machine: machine(), Bin: bin, Features: feats}
	lookPath := cfg.LookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	unavail := Check(sc, BackendNetns, []string{}, lookPath, os.Geteuid() == 0)
	for _, s := range sc.Systems {
		if m := missingPrograms(lookPath, pushPrograms(s)); len(m) > 0 {
			unavail = append(unavail, &Unavailable{Scenario: sc.Name, System: s, Backend: BackendNetns, Missing: m})
		}
	}
	systems := slices.Clone(sc.Systems)
	if len(unavail) > 0 {
		ok, leaveOut := Runnable(unavail)
		if !ok || !cfg.SkipUnavailable {
			return nil, joinUnavailable(unavail)
		}
		for _, u := range unavail {
			v := *u
			v.Scenario = ""
			rep.note("Left out: %v.", &v)
		}
		systems = slices.DeleteFunc(systems, func(s string) bool { return slices.Contains(leaveOut, s) })
	}
	if len(systems) == 0 {
		return nil, fmt.Errorf("%s: no system can run here: %w", sc.Name, joinUnavailable(unavail))
	}

	dir, err := os.MkdirTemp(cfg.WorkDir, "stampede-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// nginx and opentracker drop privileges: the paths they read must be
	// open to others.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	b := &pushBench{parent: ctx, sc: sc, bin: bin, dir: dir, www: filepath.Join(dir, "www"), file: sc.Name + ".bin",
		log: log, observe: cfg.Observe}
	if err := os.MkdirAll(b.www, 0o755); err != nil {
		return nil, err
	}
	if b.sum, err = writeRandomFile(filepath.Join(b.www, b.file), sc.Size, sc.Seed); err != nil {
		return nil, err
	}
	if b.net, err = newPushNet(ctx, sc.Push, sc.OriginUp, dir, log); err != nil {
		return nil, fmt.Errorf("%s: making the cluster: %w", sc.Name, err)
	}
	defer func() {
		if err := b.net.Close(); err != nil {
			log.Error("bench: deleting the cluster's namespaces", "err", err)
		}
	}()
	rep.Push = &PushReport{BoundSeconds: PushBound(sc.Size, sc.OriginUp, sc.Push)}
	for _, l := range b.net.links {
		rep.Push.Links = append(rep.Push.Links, *l)
	}
	for _, s := range systems {
		rep.Systems = append(rep.Systems, &SystemResult{System: s, Label: pushLabels[s]})
	}
	rep.note("netns backend, mode = push: each rack a bridge joined to the core (or to its datacenter's bridge, joined to the core) " +
		"by a veth shaped with tc tbf both ways; each host behind its own shaped veth; the origin on the core behind origin_up. " +
		"Every shared link's qdisc counter is read every 0.5 s: copies and loads are bytes on the wire, as tc counts them.")
	for _, s := range systems {
		rep.note("%s: %s", pushLabels[s], pushSystemHelp[s])
	}

	maxReps := 0
	for _, s := range systems {
		maxReps = max(maxReps, sc.RepsFor(s))
	}
	for r := 1; r <= maxReps; r++ {
		for i, s := range systems {
			if r > sc.RepsFor(s) {
				continue
			}
			log.Info("bench: run", "scenario", sc.Name, "system", s, "rep", r)
			run, err := b.runOnce(ctx, s, r)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("%s, %s run %d: %w", sc.Name, s, r, err)
			}
			rep.Systems[i].Runs = append(rep.Systems[i].Runs, run)
		}
	}
	if b.aria2 != nil {
		b.aria2.stop()
	}
	rep.summarize()
	rep.summarizePush()
	rep.Finished = time.Now().UTC()
	return rep, nil
}

// pushSystemHelp says how each push system runs.
var pushSystemHelp = map[string]string{
	SysPush: "stampede daemon --cluster on every host, and stampede push on the origin host (its own origin and tracker); " +
		"a host's time is when push's report says it installed the file, counted from push's start (which includes " +
		"hashing the file and probing the agents).",
	SysAria2: "mktorrent's torrent, opentracker and an aria2c seeder on the origin host, aria2c on every host (DHT and LPD off, " +
		"PEX on), each seeding on until every host is done; a host's time is when aria2c calls its on-bt-download-complete hook.",
	SysTree: "curl to one host per rack from nginx on the origin host, then curl from nginx on that host to the others of its rack; " +
		"a host's time is when its curl exits.",
	SysHTTP: "every host curls the file from nginx on the origin host at once; a host's time is when its curl exits.",
}

// pushRun is one run of one system on the cluster.
type pushRun struct {
	b    *pushBench
	sys  string
	rep  int
	dir  string  // the run's scratch directory: one per host
	host []*Host // every host, rack by rack
	run  *RunResult
	t0   time.Time // the transfer's start: completion times count from it

	mu      sync.Mutex // guards the following
	done    []int64    // bytes each host has, as far as known
	at      []float64  // completion, seconds since t0 (0: not yet)
	failed  []string   // why a host failed ("": it did not)
	started bool       // t0 is set
	samples [][]linkSample
	maxLoad float64
	prog    [][]Point // each host's progress, at each reading that changed it
	procs   []*proc   // every process the system ran, for their CPU time
}

// start starts a process of the system, kept for its CPU time.
func (r *pushRun) start(spec procSpec) (*proc, error) {
	p, err := startProc(spec)
	if err == nil {
		r.keep(p)
	}
	return p, err
}

func (r *pushRun) keep(p *proc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.procs = append(r.procs, p)
}

// cpuSeconds is the CPU time (user and system) the system's processes
// used, those that have ended.
func (r *pushRun) cpuSeconds() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t time.Duration
	for _, p := range r.procs {
		if p != nil && p.exited() && p.cmd.ProcessState != nil {
			t += p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
		}
	}
	return t.Seconds()
}

func (b *pushBench) runOnce(ctx context.Context, sys string, rep int) (*RunResult, error) {
	var hosts []*Host
	var rackOf []int
	for k, rk := range b.net.racks {
		for _, h := range rk {
			hosts, rackOf = append(hosts, h), append(rackOf, k)
		}
	}
	r := &pushRun{b: b, sys: sys, rep: rep, dir: filepath.Join(b.dir, fmt.Sprintf("%s-%d", sys, rep)), host: hosts,
		run:  &RunResult{System: sys, Label: pushLabels[sys], Rep: rep, Started: time.Now()},
		done: make([]int64, len(hosts)), at: make([]float64, len(hosts)), failed: make([]string, len(hosts)),
		prog: make([][]Point, len(hosts))}
	for i, h := range hosts {
		if err := os.MkdirAll(r.hostDir(i), 0o755); err != nil {
			return nil, err
		}
		r.run.Peers = append(r.run.Peers, &PeerResult{ID: i, Class: fmt.Sprintf("r%d", rackOf[i]), Host: h.Name,
			State: string(PeerWaiting)})
	}
	defer os.RemoveAll(r.dir)
	ctx, cancel := context.WithTimeout(ctx, b.timeout(sys))
	defer cancel()

	stop := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() { r.sample(ctx, stop) })
	var err error
	switch sys {
	case SysPush:
		err = r.push(ctx)
	case SysAria2:
		err = r.bittorrent(ctx)
	case SysHTTP, SysTree:
		err = r.overHTTP(ctx, sys == SysTree)
	default:
		err = fmt.Errorf("unknown push system %q", sys)
	}
	timedOut := ctx.Err() != nil && b.parent.Err() == nil
	// A last reading once the transfers are over.
	time.Sleep(600 * time.Millisecond)
	close(stop)
	sampling.Wait()
	if b.parent.Err() != nil {
		return nil, b.parent.Err()
	}
	if err != nil {
		// One run that could not start (an agent slow to listen on a
		// busy machine, say) fails its hosts, not the whole bench.
		r.note("%s could not run: %v", pushLabels[sys], err)
		for i := range r.host {
			r.finished(i, 0, err.Error())
		}
	}
	r.finish(timedOut)
	return r.run, nil
}

// timeout is how long one run may take: the scenario's, or three times
// the slower of the topology bound and every host pulling from the
// origin, plus two minutes.
func (b *pushBench) timeout(sys string) time.Duration {
	if b.sc.Timeout > 0 {
		return b.sc.Timeout
	}
	direct := float64(b.sc.Push.Hosts()) * float64(b.sc.Size) / float64(b.sc.OriginUp)
	worst := 3 * max(PushBound(b.sc.Size, b.sc.OriginUp, b.sc.Push), direct)
	return time.Duration(worst*float64(time.Second)) + 2*time.Minute
}

func (r *pushRun) hostDir(i int) string { return filepath.Join(r.dir, r.host[i].Name) }

// output is where host i's copy of the file ends up.
func (r *pushRun) output(i int) string {
	if r.sys == SysPush {
		return filepath.Join(r.hostDir(i), "dest", r.b.file)
	}
	return filepath.Join(r.hostDir(i), r.b.file)
}

// begin marks the transfer's start.
func (r *pushRun) begin() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t0, r.started = time.Now(), true
}

// progress records that host i has n bytes.
func (r *pushRun) progress(i int, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done[i] = max(r.done[i], n)
}

// finished records that host i got the whole file secs after t0, or
// failed with cause (cause != "").
func (r *pushRun) finished(i int, secs float64, cause string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at[i] > 0 || r.failed[i] != "" {
		return
	}
	if cause != "" {
		r.failed[i] = cause
		return
	}
	r.at[i] = max(secs, 1e-3)
	r.done[i] = r.b.sc.Size
}

// pending counts the hosts neither finished nor failed.
func (r *pushRun) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for i := range r.host {
		if r.at[i] == 0 && r.failed[i] == "" {
			n++
		}
	}
	return n
}

// sample reads the links every 0.5 s until stop, and shows the run.
func (r *pushRun) sample(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		s := r.b.net.readLinks(context.WithoutCancel(ctx))
		r.mu.Lock()
		r.samples = append(r.samples, s)
		r.maxLoad = max(r.maxLoad, loadAverage())
		if r.started {
			t := time.Since(r.t0).Seconds()
			for i, n := range r.done {
				if k := len(r.prog[i]); k == 0 || r.prog[i][k-1].V != float64(n) {
					r.prog[i] = append(r.prog[i], Point{T: t, V: float64(n)})
				}
			}
		}
		r.mu.Unlock()
		r.observe(false)
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// observe hands a snapshot of the run to the observer, if any.
func (r *pushRun) observe(final bool) {
	b := r.b
	if b.observe == nil {
		return
	}
	r.mu.Lock()
	s := Snapshot{Scenario: b.sc.Name, System: r.sys, Label: pushLabels[r.sys], Rep: r.rep, Reps: b.sc.RepsFor(r.sys),
		Size: b.sc.Size, Final: final}
	if r.started {
		s.Elapsed = time.Since(r.t0).Seconds()
	}
	for i := range r.host {
		st := PeerRunning
		switch {
		case r.at[i] > 0:
			st = PeerDone
		case r.failed[i] != "":
			st = PeerFailed
		case !r.started:
			st = PeerWaiting
		}
		s.Peers = append(s.Peers, PeerView{State: st, Done: r.done[i]})
	}
	if n := len(r.samples); n > 1 {
		for k, l := range b.net.links {
			if l.Kind == linkOrigin && r.samples[n-1][k].ok && r.samples[0][k].ok {
				s.OriginBytes = r.samples[n-1][k].bytes - r.samples[0][k].bytes
			}
		}
	}
	r.mu.Unlock()
	if final {
		s.Run = r.run
	}
	b.observe(s)
}

// finish verifies every host's copy and computes the run's figures.
func (r *pushRun) finish(timedOut bool) {
	b, run := r.b, r.run
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(runtime.NumCPU()/2, 1))
	for i, pr := range run.Peers {
		pr.Done, pr.Seconds, pr.Bytes = r.at[i], r.at[i], r.done[i]
		pr.End = pr.Done
		run.Arrived++
		switch {
		case r.failed[i] != "":
			pr.State, pr.Error = string(PeerFailed), r.failed[i]
			continue
		case r.at[i] == 0:
			pr.State, pr.TimedOut = string(PeerFailed), true
			pr.Error = "not done at the end of the run"
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ok, err := sameContent(r.output(i), b.sum)
			pr.Verified, pr.Finished = ok, ok
			switch {
			case err != nil:
				pr.Error = err.Error()
			case !ok:
				pr.Error = "the file differs from the source"
			}
			pr.State = string(PeerDone)
			if !ok {
				pr.State = string(PeerFailed)
			}
		})
	}
	wg.Wait()
	var secs []float64
	for _, pr := range run.Peers {
		if pr.Finished {
			run.Finished++
			secs = append(secs, pr.Seconds)
			run.Last = max(run.Last, pr.Seconds)
			pr.Full = pr.Done
			pr.Progress = append(slices.DeleteFunc(r.prog[pr.ID], func(p Point) bool { return p.T >= pr.Done }),
				Point{T: pr.Done, V: float64(b.sc.Size)})
		}
	}
	run.TimedOut = timedOut
	if timedOut {
		r.note("the run timed out after %s", b.timeout(r.sys))
	}
	run.Complete = run.Finished == run.Arrived && !timedOut
	run.Completion = distOf(secs)
	series, f := linkFigures(b.net.links, r.samples, r.t0, b.sc.Size)
	for k, l := range b.net.links {
		if l.Kind == linkOrigin {
			run.Origin = series[k]
			if len(series[k]) > 0 {
				run.OriginBytes = int64(series[k][len(series[k])-1].V)
			}
		}
	}
	run.R = float64(run.OriginBytes) / float64(b.sc.Size)
	f.MedianSeconds, f.LastSeconds, f.SlowestOverMedian = hostTimes(secs)
	f.BoundSeconds = PushBound(b.sc.Size, b.sc.OriginUp, b.sc.Push)
	if f.BoundSeconds > 0 {
		f.LastOverBound = f.LastSeconds / f.BoundSeconds
	}
	f.CPUSeconds = r.cpuSeconds()
	run.Push = &f
	run.MaxLoad = r.maxLoad
	if cpus := runtime.NumCPU(); run.MaxLoad > 2*float64(cpus) {
		r.note("the machine was busy: load average up to %.0f on %d CPUs during the run (times are inflated)", run.MaxLoad, cpus)
	}
	r.observe(true)
}

func (r *pushRun) note(format string, args ...any) {
	r.run.Notes = append(r.run.Notes, fmt.Sprintf(format, args...))
}

// waitAll returns when no host is pending, or ctx ends.
func (r *pushRun) waitAll(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for r.pending() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
