// Package bench is stampede's testbed: it runs a flash crowd against an
// origin on an emulated network, for stampede and for the baselines side
// by side (plain HTTP from the same origin or from nginx, BitTorrent with
// aria2c), with faults (killed peers, a corrupting peer, restarts of the
// origin and the tracker), and reports what happened against the bounds of
// ../shared/BENCHMARKS.md.
//
// Every host of a scenario is a real OS process tree: the origin is
// "stampede serve", a peer is "stampede get" (or curl, or aria2c), so the
// same code drives both backends of [Network]: loopback (no privileges, the
// programs cap their own rates with their flags) and netns (root: one
// network namespace per host on a bridge, tc tbf caps on both ends of each
// link). A run measures each peer's completion time (process start to a
// verified exit), the origin's bytes over time (its /metrics counter, the
// aria2 seeder's upload, or the nginx relay's count), and the peers'
// progress and upload over time (stampede get --progress-json); [Report] turns runs into a table, report.json and a
// self-contained report.html.
//
// The stampede binary under test is probed for its flags ([Probe]): until
// "stampede get" has --max-upload-rate and --seed-time, its peers cannot
// trade pieces and the report says "stampede (no swarm yet)". When the
// swarm lands, only the command lines change.
//
// Scenarios are files (see [ParseScenario]); the standard ones live in
// bench/scenarios and are built into the binary.
package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"time"
)

// Config is one bench invocation: a scenario on a backend.
type Config struct {
	Scenario *Scenario
	// Backend overrides the scenario's ("loopback" or "netns").
	Backend string
	// Systems and Reps override the scenario's when set.
	Systems []string
	Reps    int
	// Bin is the stampede binary (default: the running executable).
	Bin string
	// WorkDir is where the scratch directory is made (default: the
	// system's temporary directory); it is removed at the end.
	WorkDir string
	// SkipUnavailable leaves out, with a note in the report, the systems
	// whose programs are not installed; without it they fail the run
	// (see [Check]).
	SkipUnavailable bool
	// LookPath finds the programs the systems run (default exec.LookPath).
	LookPath func(string) (string, error)
	// Command is the command line, recorded in the report.
	Command string
	Logger  *slog.Logger
	// Observe, if set, sees every run's state every half second and at its
	// end. It is called from the run's loop and must return quickly.
	Observe func(Snapshot)
}

// bencher holds what every run of one scenario shares.
type bencher struct {
	parent  context.Context
	sc      *Scenario
	net     Network
	origin  *Host
	peers   []*Host
	classOf []Class
	dir     string
	file    string
	sum     [32]byte
	log     *slog.Logger
	observe func(Snapshot)
}

// crowd is the crowd of the first n peers (peers arrive in id order).
func (b *bencher) crowd(n int) Crowd {
	c := Crowd{Size: b.sc.Size, OriginUp: float64(b.sc.OriginUp)}
	for _, cl := range b.classOf[:n] {
		c.Up = append(c.Up, float64(cl.Up))
		c.Down = append(c.Down, float64(cl.Down))
	}
	return c
}

// Run runs every system of the scenario its number of times, interleaving
// the repetitions (rep 1 of each system, then rep 2...) so that drift on a
// shared machine spreads over all of them. Everything it starts or creates
// (processes, namespaces, files) is gone when it returns, also when ctx is
// cancelled.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	sc := *cfg.Scenario
	if cfg.Backend != "" {
		sc.Backend = cfg.Backend
	}
	if len(cfg.Systems) > 0 {
		sc.Systems = cfg.Systems
	}
	if cfg.Reps > 0 {
		sc.Reps, sc.RepsBy = cfg.Reps, nil
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bin := cfg.Bin
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding the stampede binary: %w", err)
		}
	}
	if abs, err := filepath.Abs(bin); err == nil {
		bin = abs
	}
	feats, err := Probe(ctx, bin)
	if err != nil {
		return nil, err
	}
	if sc.Mode == ModePush {
		return runPush(ctx, cfg, &sc, bin, feats, log)
	}
	if sc.Mode == ModeChurn {
		return runChurn(ctx, cfg, &sc, bin, feats, log)
	}

	rep := &Report{Scenario: &sc, Backend: sc.Backend, Command: cfg.Command, Started: time.Now().UTC(),
		Machine: machine(), Bin: bin, Features: feats}
	crowd := CrowdOf(&sc)
	rep.TKR, rep.HTTPBound = crowd.TKR(), crowd.HTTP()
	if sc.Arrivals.Kind != ArriveAll {
		rep.note("The bounds assume every peer is there from the start; with staggered arrivals they are loose " +
			"lower bounds on the last completion (counted from the first arrival).")
	}

	// A system whose programs are missing fails the run, or with
	// SkipUnavailable is left out with a note; a backend that cannot run
	// here always fails it.
	lookPath := cfg.LookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	unavail := Check(&sc, sc.Backend, nil, lookPath, os.Geteuid() == 0)
	if slices.Contains(sc.Systems, SysHTTP) && feats.Swarm && !feats.NoSwarm {
		// Without get --no-swarm the HTTP baseline's peers are curl.
		if m := missingPrograms(lookPath, curlPrograms); len(m) > 0 {
			unavail = append(unavail, &Unavailable{Scenario: sc.Name, System: SysHTTP, Backend: sc.Backend, Missing: m})
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
			v.Scenario = "" // the report's own
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

	network, err := NewNetwork(ctx, sc.Backend, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := network.Close(); err != nil {
			log.Error("bench: cleaning up the network", "err", err)
		}
	}()

	b := &bencher{parent: ctx, sc: &sc, net: network, dir: dir, file: sc.Name + ".bin", log: log, observe: cfg.Observe}
	if b.origin, err = network.AddHost(ctx, "origin", sc.OriginUp, 0); err != nil {
		return nil, err
	}
	for _, c := range sc.Classes {
		for range c.Count {
			h, err := network.AddHost(ctx, fmt.Sprintf("peer%d", len(b.peers)), c.Up, c.Down)
			if err != nil {
				return nil, err
			}
			b.peers = append(b.peers, h)
			b.classOf = append(b.classOf, c)
		}
	}
	// Classes are spread over the arrival order, the same in every run.
	perm := rand.New(rand.NewPCG(sc.Seed, 0)).Perm(len(b.peers))
	peers, classes := slices.Clone(b.peers), slices.Clone(b.classOf)
	for i, j := range perm {
		b.classOf[i], b.peers[i] = classes[j], peers[j]
	}
	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		return nil, err
	}
	if b.sum, err = writeRandomFile(filepath.Join(www, b.file), sc.Size, sc.Seed); err != nil {
		return nil, err
	}

	env := &runEnv{sc: &sc, net: network, origin: b.origin, bin: bin, feats: feats, dir: dir, www: www, file: b.file,
		sum: b.sum, log: log}
	var syss []system
	for _, name := range systems {
		s, err := newSystem(name, env)
		if err != nil {
			return nil, err
		}
		syss = append(syss, s)
		rep.Systems = append(rep.Systems, &SystemResult{System: s.name(), Label: s.label()})
		for _, n := range s.notes() {
			rep.note("%s", n)
		}
	}
	if sc.Backend == BackendLoopback {
		how := "serve --rate, get --limit-rate"
		if feats.Swarm {
			how += " and --max-upload-rate"
		}
		if slices.Contains(systems, SysCurl) {
			how += ", curl --limit-rate"
		}
		if slices.Contains(systems, SysAria2) {
			how += ", aria2c --max-upload-limit and --max-download-limit"
		}
		if slices.Contains(systems, SysNginx) {
			how += ", the nginx relay's token bucket"
		}
		rep.note("Loopback backend: caps are the programs' own token buckets (%s).", how)
	} else {
		rep.note("netns backend: one network namespace per host; caps are tc tbf on each host's link (upload on the host side, download on the bridge side).")
	}
	upload := "Peer upload is counted by the stampede peers themselves (the bytes sent to peers in each --progress-json line)"
	if slices.Contains(systems, SysAria2) || slices.Contains(systems, SysCurl) || (slices.Contains(systems, SysHTTP) && feats.Swarm && !feats.NoSwarm) {
		upload += "; for aria2c and curl, which do not report it, it is derived: the peers' verified bytes minus the origin's bytes, per interval"
	}
	rep.note("%s.", upload)

	maxReps := 0
	for _, s := range syss {
		maxReps = max(maxReps, sc.RepsFor(s.name()))
	}
	for r := 1; r <= maxReps; r++ {
		for i, s := range syss {
			if r > sc.RepsFor(s.name()) {
				continue
			}
			log.Info("bench: run", "scenario", sc.Name, "system", s.name(), "rep", r)
			run, err := b.runOnce(ctx, s, r)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, err
			}
			rep.Systems[i].Runs = append(rep.Systems[i].Runs, run)
		}
	}
	rep.summarize()
	rep.Finished = time.Now().UTC()
	return rep, nil
}

// writeRandomFile writes size pseudo-random bytes (ChaCha8 seeded by seed,
// so reruns serve the same data) and returns their SHA-256.
func writeRandomFile(path string, size int64, seed uint64) ([32]byte, error) {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	src := rand.NewChaCha8(key)
	f, err := os.Create(path)
	if err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	_, err = io.CopyN(io.MultiWriter(f, h), src, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, err
}

// sameContent says whether the file at path hashes to sum.
func sameContent(path string, sum [32]byte) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	return string(h.Sum(nil)) == string(sum[:]), nil
}

// Machine describes where a report was made.
type Machine struct {
	Hostname string `json:"hostname"`
	CPUs     int    `json:"cpus"`
	OS       string `json:"os"`
	Go       string `json:"go"`
}

func machine() Machine {
	h, _ := os.Hostname()
	return Machine{Hostname: h, CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
}
