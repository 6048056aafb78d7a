package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// churnBench holds what every run of one churn scenario shares: the
// network, the object, and the origin side's environment.
type churnBench struct {
	sc    *Scenario
	net   *churnNet
	env   *runEnv // the origin side's: its network shapes the origin
	bin   string
	feats Features
	dir   string
	log   *slog.Logger
}

// churnDrain is how long a rate's last arrivals get to finish after its
// arrivals end, beyond what the object takes from the origin alone.
const churnDrain = 30 * time.Second

// churnPoll is how often a stampede peer's output is looked for: the file
// appears under its name once complete and verified, while the peer may
// stay a little longer for its neighbours (get --seed-time 0).
const churnPoll = 20 * time.Millisecond

// runChurn is Run for mode = churn: sc is Run's copy of the scenario, with
// the overrides of cfg applied and validated, bin the stampede binary.
func runChurn(ctx context.Context, cfg Config, sc *Scenario, bin string, feats Features, log *slog.Logger) (*Report, error) {
	rep := &Report{Scenario: sc, Backend: BackendNetns, Command: cfg.Command, Started: time.Now().UTC(),
		Machine: machine(), Bin: bin, Features: feats}
	lookPath := cfg.LookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	unavail := Check(sc, BackendNetns, nil, lookPath, os.Geteuid() == 0)
	if sc.hasNAT() {
		if m := missingPrograms(lookPath, []Program{{"nft", "nftables"}}); len(m) > 0 {
			unavail = append(unavail, &Unavailable{Scenario: sc.Name, Backend: BackendNetns, Missing: m})
		}
	}
	if slices.Contains(sc.Systems, SysHTTP) && feats.Swarm && !feats.NoSwarm {
		if m := missingPrograms(lookPath, curlPrograms); len(m) > 0 {
			unavail = append(unavail, &Unavailable{Scenario: sc.Name, System: SysHTTP, Backend: BackendNetns, Missing: m})
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
	if sc.hasNAT() && slices.Contains(systems, SysStampede) && !slices.Contains(feats.GetFlags, "webrtc") {
		rep.note("stampede get has no --webrtc: its peers behind NATs reach only the peers they can dial.")
	}

	// The namespaces of a harness killed before it could clean up.
	if removed, err := cleanupStaleChurn(ctx, log); err != nil || len(removed) > 0 {
		log.Warn("bench: deleted the namespaces of dead churn runs", "namespaces", removed, "err", err)
	}
	dir, err := os.MkdirTemp(cfg.WorkDir, "stampede-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// opentracker drops privileges: the paths it reads must be open.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	b := &churnBench{sc: sc, bin: bin, feats: feats, dir: dir, log: log}
	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		return nil, err
	}
	file := sc.Name + ".bin"
	sum, err := writeRandomFile(filepath.Join(www, file), sc.Size, sc.Seed)
	if err != nil {
		return nil, err
	}
	if b.net, err = newChurnNet(ctx, sc.Classes, sc.OriginUp, dir, log); err != nil {
		return nil, fmt.Errorf("%s: making the network: %w", sc.Name, err)
	}
	defer func() {
		if err := b.net.Close(); err != nil {
			log.Error("bench: deleting the churn network's namespaces", "err", err)
		}
	}()
	// The origin side runs with the scenario's serve_args, and with STUN
	// and TURN on the public side when peers sit behind NATs.
	osc := *sc
	if sc.hasNAT() {
		secret := filepath.Join(dir, "turn-secret")
		if err := os.WriteFile(secret, []byte("stch-bench-secret\n"), 0o600); err != nil {
			return nil, err
		}
		ip := b.net.origin.IP
		osc.ServeArgs = append([]string{"--stun", ip + ":3478", "--turn", ip + ":3479", "--turn-secret-file", secret},
			sc.ServeArgs...)
	}
	b.env = &runEnv{sc: &osc, net: originOnly{b.net}, origin: b.net.origin, bin: bin, feats: feats, dir: dir, www: www,
		file: file, sum: sum, log: log}

	var syss []system
	for _, name := range systems {
		s, err := newSystem(name, b.env)
		if err != nil {
			return nil, err
		}
		syss = append(syss, s)
		rep.Systems = append(rep.Systems, &SystemResult{System: s.name(), Label: s.label()})
		for _, n := range s.notes() {
			rep.note("%s", n)
		}
	}
	rep.note("netns backend, mode = churn: peers pooled on a few namespaces per class (each peer a process with its own ports), "+
		"capped by their own flags (get --limit-rate and --max-upload-rate, aria2c's limits); the origin's namespace behind "+
		"tc tbf at origin_up. Origin bytes are its namespace's link counter (bytes sent, headers included): the origin, its "+
		"tracker%s, or the aria2c seeder and opentracker. Latency runs from an arrival's scheduled time to its verified "+
		"object: a stampede peer's file appearing under its name (polled every %v), another client's exit, checked by SHA-256.",
		map[bool]string{true: ", STUN and TURN", false: ""}[sc.hasNAT()], churnPoll)

	maxReps := 0
	for _, s := range syss {
		maxReps = max(maxReps, sc.RepsFor(s.name()))
	}
	for r := 1; r <= maxReps; r++ {
		for i, s := range syss {
			if r > sc.RepsFor(s.name()) {
				continue
			}
			log.Info("bench: churn run", "scenario", sc.Name, "system", s.name(), "rep", r)
			run, err := b.runOnce(ctx, s, r)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("%s, %s run %d: %w", sc.Name, s.name(), r, err)
			}
			rep.Systems[i].ChurnRuns = append(rep.Systems[i].ChurnRuns, run)
		}
	}
	for _, s := range syss {
		if a, ok := s.(*aria2Sys); ok {
			a.stop()
		}
	}
	rep.summarizeChurn()
	rep.Finished = time.Now().UTC()
	return rep, nil
}

// churnPeer is one arrival of a run, as it went.
type churnPeer struct {
	arrival churnArrival
	class   Class
	host    *Host
	dir     string
	out     string
	watch   bool // stampede: look for the output file

	proc   *proc
	stdout bytes.Buffer
	lag    time.Duration // from the scheduled arrival to the process's start

	mu     sync.Mutex // guards doneAt
	doneAt time.Time  // when its output was complete (zero: not seen)
}

// runOnce runs sys through every rate once.
func (b *churnBench) runOnce(ctx context.Context, sys system, rep int) (*ChurnRun, error) {
	if err := sys.start(ctx); err != nil {
		sys.stop()
		return nil, err
	}
	defer sys.stop()
	run := &ChurnRun{Rep: rep, Load: loadAverage()}
	next := make([]int, len(b.sc.Classes))
	nat := make([]ChurnNAT, len(b.sc.Classes))
	for i, c := range b.sc.Classes {
		nat[i] = ChurnNAT{Class: c.Name, NAT: natName(c.NAT)}
	}
	t0 := time.Now()
	for ri, rate := range b.sc.Churn.Rates {
		rng := rand.New(rand.NewPCG(b.sc.Seed, uint64(rep)<<16|uint64(ri)))
		sched := churnSchedule(rate, b.sc.Churn.Duration, b.sc.Classes, next, rng.ExpFloat64, rng.Float64)
		fig, err := b.runRate(ctx, sys, rate, sched, t0, run, nat)
		if err != nil {
			return nil, err
		}
		run.Rates = append(run.Rates, fig)
		b.log.Info("bench: churn rate done", "system", sys.name(), "rate", rate, "arrivals", fig.Arrivals,
			"completed", fig.Completed, "mean", fig.Mean, "p99", fig.P99, "cpu", fig.CPUBusy)
	}
	if sys.name() == SysStampede && b.sc.hasNAT() {
		run.NAT = nat
	}
	return run, nil
}

// runRate runs one rate's arrivals and waits for them to finish (or
// gives up on them after churnDrain past what the origin alone would
// take), adding the pool of unfinished peers to run's.
func (b *churnBench) runRate(ctx context.Context, sys system, rate float64, sched []churnArrival, t0 time.Time,
	run *ChurnRun, nat []ChurnNAT) (ChurnRate, error) {
	fig := ChurnRate{Rate: rate, Arrivals: len(sched)}
	before, err := b.net.originTxBytes(ctx)
	if err != nil {
		return fig, err
	}
	cpu0 := readCPU()
	start := time.Now()
	peers := make([]*churnPeer, len(sched))
	// Each arrival is started on its own, so that a slow start (a busy
	// machine) delays that arrival only, as it would a visitor.
	var wg, launching sync.WaitGroup
	for i, a := range sched {
		launching.Go(func() {
			if sleepUntil(ctx, start.Add(a.At)) == nil {
				peers[i] = b.launch(sys, i, a, start, &wg)
			}
		})
	}
	err = sleepUntil(ctx, start.Add(b.sc.Churn.Duration))
	launching.Wait()
	if err != nil {
		b.endPeers(peers, &wg)
		return fig, err
	}
	cpu1 := readCPU()
	fig.CPUBusy = cpu1.busySince(cpu0)
	fig.Load = loadAverage()
	// The last arrivals finish, or are given up on.
	alone := time.Duration(0)
	if b.sc.OriginUp > 0 {
		alone = time.Duration(float64(b.sc.Size) / float64(b.sc.OriginUp) * float64(len(sched)) * float64(time.Second))
	}
	drain := time.NewTimer(churnDrain + min(alone, 5*time.Minute))
	defer drain.Stop()
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-drain.C:
		fig.GaveUp = true
	case <-ctx.Done():
		b.endPeers(peers, &wg)
		return fig, ctx.Err()
	}
	b.endPeers(peers, &wg)
	after, err := b.net.originTxBytes(ctx)
	if err != nil {
		return fig, err
	}
	if len(sched) > 0 {
		fig.OriginBytesPerArrival = float64(after-before) / float64(len(sched))
	}
	fig.OriginBytes = after - before

	// Verify, and gather the figures.
	var lat, lags []float64
	arr := make([]float64, len(peers))
	done := make([]float64, len(peers))
	for i, p := range peers {
		off := start.Sub(t0).Seconds()
		arr[i] = off + p.arrival.At.Seconds()
		done[i] = -1
		lags = append(lags, p.lag.Seconds())
		ok := p.proc != nil && p.proc.exited() && p.proc.code == 0
		if ok {
			same, err := sameContent(p.out, b.env.sum)
			ok = err == nil && same
		}
		if !ok {
			fig.Failed++
			if len(fig.Errors) < 5 {
				fig.Errors = append(fig.Errors, b.describeFailure(p))
			}
		} else {
			at := p.proc.end
			p.mu.Lock()
			if !p.doneAt.IsZero() && p.doneAt.Before(at) {
				at = p.doneAt
			}
			p.mu.Unlock()
			l := at.Sub(start.Add(p.arrival.At)).Seconds()
			lat = append(lat, l)
			done[i] = arr[i] + l
			fig.Completed++
		}
		if p.watch {
			addNeighbours(&nat[p.arrival.Class], p.stdout.Bytes())
		}
		_ = os.RemoveAll(p.dir)
	}
	d := distOf(lat)
	fig.Mean, fig.P50, fig.P90, fig.P99, fig.Max = d.Mean, d.P50, d.P90, d.P99, d.Max
	ld := distOf(lags)
	fig.StartLagMean, fig.StartLagP99 = ld.Mean, ld.P99
	series := poolSeries(arr, done, time.Since(t0).Seconds(), 0.5, start.Sub(t0).Seconds())
	fig.MaxPool, fig.Stable = poolStable(series, start.Sub(t0).Seconds(), b.sc.Churn.Duration)
	run.Pool = append(run.Pool, series...)
	return fig, nil
}

// launch starts arrival i of a rate begun at start.
func (b *churnBench) launch(sys system, i int, a churnArrival, start time.Time, wg *sync.WaitGroup) *churnPeer {
	c := b.sc.Classes[a.Class]
	p := &churnPeer{arrival: a, class: c, host: b.net.hosts[a.Class][a.Host]}
	p.dir = filepath.Join(b.dir, "peers", strconv.Itoa(i))
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		p.lag = time.Since(start.Add(a.At))
		return p
	}
	argv := b.peerArgv(sys, p)
	spec := procSpec{name: fmt.Sprintf("peer %d", i), argv: argv, dir: p.dir, collect: &p.stdout}
	if sys.name() == SysAria2 {
		spec.collect, spec.stdout = nil, func(string, time.Time) {}
	}
	// STAMPEDETEST_PEER_LOGS keeps each arrival's stderr, as run.go does
	// for the crowds' peers: a debugging aid, not part of the report.
	logf := debugLog(fmt.Sprintf("churn-%s-%d.log", sys.name(), i))
	if logf != nil {
		t0 := start.Add(a.At)
		spec.stderr = func(line string, at time.Time) {
			fmt.Fprintf(logf, "%.3f %s\n", at.Sub(t0).Seconds(), line)
		}
	}
	proc, err := startProc(spec)
	p.lag = time.Since(start.Add(a.At))
	if err != nil {
		if logf != nil {
			logf.Close()
		}
		b.log.Warn("bench: churn peer did not start", "err", err)
		return p
	}
	p.proc = proc
	wg.Add(1)
	go func() {
		defer wg.Done()
		if logf != nil {
			defer logf.Close()
		}
		if !p.watch {
			<-proc.done
			return
		}
		t := time.NewTicker(churnPoll)
		defer t.Stop()
		for {
			select {
			case <-proc.done:
				return
			case now := <-t.C:
				if _, err := os.Stat(p.out); err == nil {
					p.mu.Lock()
					p.doneAt = now
					p.mu.Unlock()
					<-proc.done
					return
				}
			}
		}
	}()
	return p
}

// peerArgv is the command line of peer p: the peers cap themselves (their
// hosts are pooled), and the stampede peers of a scenario with NATs use
// WebRTC.
func (b *churnBench) peerArgv(sys system, p *churnPeer) []string {
	e, c := b.env, p.class
	switch s := sys.(type) {
	case *aria2Sys:
		p.out = filepath.Join(p.dir, e.file)
		port, err := p.host.FreePort()
		if err != nil {
			port = 20000 + p.arrival.Host
		}
		argv := append([]string{"aria2c"}, s.common()...)
		argv = append(argv, "-d", p.dir, "--listen-port="+strconv.Itoa(port), "--seed-time="+
			strconv.FormatFloat(b.sc.Departure.Linger.Minutes(), 'f', -1, 64))
		if c.Down > 0 {
			argv = append(argv, "--max-download-limit="+strconv.FormatInt(c.Down, 10))
		}
		if c.Up > 0 {
			argv = append(argv, "--max-upload-limit="+strconv.FormatInt(c.Up, 10))
		}
		return p.host.Command(append(argv, s.torrent)...)
	case *curlSys:
		p.out = filepath.Join(p.dir, e.file)
		argv := []string{"curl", "-sSf", "--retry", "5", "--retry-all-errors", "-o", p.out}
		if c.Down > 0 {
			argv = append(argv, "--limit-rate", strconv.FormatInt(c.Down, 10))
		}
		return p.host.Command(append(argv, s.origin.url("/"+e.file))...)
	case *stampedeSys:
		p.out = filepath.Join(p.dir, e.file)
		argv := []string{b.bin, "get", s.origin.url("/" + e.file), "-o", p.out, "-q", "--json"}
		if c.Down > 0 {
			argv = append(argv, "--limit-rate", strconv.FormatInt(c.Down, 10))
		}
		switch {
		case s.http && b.feats.NoSwarm:
			argv = append(argv, "--no-swarm")
		case !s.http:
			p.watch = true
			if b.feats.Swarm {
				if c.Up > 0 {
					argv = append(argv, "--max-upload-rate", strconv.FormatInt(c.Up, 10))
				}
				argv = append(argv, "--seed-time", b.sc.Departure.Linger.String())
			}
			if b.sc.hasNAT() && slices.Contains(b.feats.GetFlags, "webrtc") {
				argv = append(argv, "--webrtc")
			}
			argv = append(argv, b.sc.GetArgs...)
		}
		return p.host.Command(argv...)
	}
	return nil
}

// endPeers ends the peers still running, by PID, and waits for their
// watchers.
func (b *churnBench) endPeers(peers []*churnPeer, wg *sync.WaitGroup) {
	for _, p := range peers {
		if p != nil && p.proc != nil {
			p.proc.term(2 * time.Second)
		}
	}
	wg.Wait()
}

func (b *churnBench) describeFailure(p *churnPeer) string {
	who := fmt.Sprintf("arrival at %.2f s (%s on %s)", p.arrival.At.Seconds(), p.class.Name, p.host.Name)
	switch {
	case p.proc == nil:
		return who + ": did not start"
	case !p.proc.exited():
		return who + ": still running"
	case p.proc.code != 0:
		return who + ": " + firstLine(p.proc.describe(), 300)
	}
	return who + ": the output differs from the object"
}

// addNeighbours adds the neighbours of a stampede peer's --json summary to
// its class's.
func addNeighbours(n *ChurnNAT, summary []byte) {
	var res struct {
		Swarm *struct {
			Neighbours struct {
				Direct       int   `json:"direct"`
				Punched      int   `json:"punched"`
				Relayed      int   `json:"relayed"`
				RelayedBytes int64 `json:"relayed_bytes"`
			} `json:"neighbours"`
		} `json:"swarm"`
	}
	if json.Unmarshal(summary, &res) != nil || res.Swarm == nil {
		return
	}
	n.Peers++
	n.Direct += res.Swarm.Neighbours.Direct
	n.Punched += res.Swarm.Neighbours.Punched
	n.Relayed += res.Swarm.Neighbours.Relayed
	n.RelayedBytes += res.Swarm.Neighbours.RelayedBytes
}

func natName(kind string) string {
	if kind == "" {
		return "public"
	}
	return kind
}

// sleepUntil waits for t, or ctx's end.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
