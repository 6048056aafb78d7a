package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stampede-dev/stampede/bench"
	"github.com/stampede-dev/stampede/internal/units"
)

const demoAbout = `Show a flash crowd being absorbed. An origin with a generated file and a crowd
of peers start on this machine (loopback, each peer a real process with its own
bandwidth caps; no root needed); all peers ask for the file at once. The same
crowd then downloads from the same capped origin over plain HTTP. Live progress
shows one character per peer; at the end a table compares completion times, the
origin's bytes and the bounds T_KR and T_KR(R), and report.html (charts, readable
offline) and report.json are written. The defaults take about a minute per system.`

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "demo", "[flags]", demoAbout)
	var (
		peers     = fs.Int("peers", 20, "peers in the crowd")
		size      = fs.String("size", "5MiB", "file `SIZE`")
		originUp  = fs.String("origin-up", "16Mbit", "the origin's upload cap, `RATE`")
		peerUp    = fs.String("peer-up", "16Mbit", "each peer's upload cap, `RATE` (0: uncapped)")
		peerDown  = fs.String("peer-down", "40Mbit", "each peer's download cap, `RATE` (0: uncapped)")
		arrivals  = fs.String("arrivals", "all", "how peers arrive: all, every=DURATION, poisson=RATE/s")
		departure = fs.String("departure", "leave", "when peers leave: leave (on completion) or linger=DURATION")
		systems   = fs.String("systems", "stampede,http", "comma-separated systems: stampede, http, http-nginx, curl, aria2 (BitTorrent)")
		backend   = fs.String("backend", bench.BackendLoopback, "loopback, or netns (root: namespaces and tc caps)")
		reps      = fs.Int("reps", 1, "runs per system")
		seed      = fs.Uint64("seed", 1, "seed for the data and the arrivals")
		out       = fs.String("out", ".", "write report.html and report.json to `DIR`")
		bin       = fs.String("bin", "", "the stampede binary to run as origin and peers (default: this one)")
		quiet     = fs.BoolP("quiet", "q", false, "no live progress")
		serveArgs = fs.String("serve-args", "", "extra `ARGS` for the origin's stampede serve")
		getArgs   = fs.String("get-args", "", "extra `ARGS` for the stampede peers' get")
	)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("demo takes flags only, got %q", strings.Join(pos, " "))
	}
	sc, err := demoScenario(*peers, *size, *originUp, *peerUp, *peerDown, *arrivals, *departure, *systems, *backend, *reps, *seed)
	if err != nil {
		return withCode(exitUsage, err)
	}
	sc.ServeArgs, sc.GetArgs = strings.Fields(*serveArgs), strings.Fields(*getArgs)
	if *backend == bench.BackendNetns && os.Geteuid() != 0 {
		return withCode(exitUsage, bench.ErrNeedRoot)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return withCode(exitIO, err)
	}
	c := bench.CrowdOf(sc)
	fmt.Fprintf(e.stderr, "stampede demo: %s\nbounds: T_KR %.1f s, plain HTTP at least %.1f s\n\n", sc.Summary(), c.TKR(), c.HTTP())
	rep, err := runScenario(ctx, e, bench.Config{Scenario: sc, Bin: *bin, Command: "stampede demo " + strings.Join(args, " ")},
		!*quiet, false)
	if err != nil {
		return err
	}
	rep.Demo = true // titled as the demo, not as a bench scenario
	fmt.Fprintln(e.stdout)
	if err := rep.WriteTable(e.stdout); err != nil {
		return err
	}
	if err := writeReport(rep, *out, "report"); err != nil {
		return withCode(exitIO, err)
	}
	fmt.Fprintf(e.stdout, "wrote %s and %s\n", filepath.Join(*out, "report.html"), filepath.Join(*out, "report.json"))
	return nil
}

// demoScenario builds the demo's scenario from its flags.
func demoScenario(peers int, size, originUp, peerUp, peerDown, arrivals, departure, systems, backend string,
	reps int, seed uint64) (*bench.Scenario, error) {
	sc := &bench.Scenario{Name: "demo", Reps: reps, Seed: seed, Backend: backend,
		Description: "stampede demo: a flash crowd on one machine."}
	var err error
	if peers < 1 {
		return nil, fmt.Errorf("--peers must be at least 1")
	}
	if sc.Size, err = units.ParseSize(size); err != nil {
		return nil, fmt.Errorf("--size: %w", err)
	}
	if sc.OriginUp, err = units.ParseRate(originUp); err != nil {
		return nil, fmt.Errorf("--origin-up: %w", err)
	}
	c := bench.Class{Name: "peer", Count: peers}
	if c.Up, err = units.ParseRate(peerUp); err != nil {
		return nil, fmt.Errorf("--peer-up: %w", err)
	}
	if c.Down, err = units.ParseRate(peerDown); err != nil {
		return nil, fmt.Errorf("--peer-down: %w", err)
	}
	sc.Classes = []bench.Class{c}
	if sc.Arrivals, err = bench.ParseArrivals(arrivals); err != nil {
		return nil, fmt.Errorf("--arrivals: %w", err)
	}
	if sc.Departure, err = bench.ParseDeparture(departure); err != nil {
		return nil, fmt.Errorf("--departure: %w", err)
	}
	if sc.Systems, err = bench.ParseSystems(systems); err != nil {
		return nil, fmt.Errorf("--systems: %w", err)
	}
	if reps < 1 {
		return nil, fmt.Errorf("--reps must be at least 1")
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	return sc, nil
}
