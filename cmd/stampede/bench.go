package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"github.com/stampede-dev/stampede/bench"
	"github.com/stampede-dev/stampede/internal/units"
)

const benchAbout = `Run benchmark scenarios: every system of a scenario (stampede, plain HTTP from
the same origin or from nginx, BitTorrent with aria2c) delivers the same file to the same crowd
on the same emulated network, and the report compares them with the bounds
T_KR and T_KR(R). SCENARIO is a scenario file or the name of a standard one
(bench/scenarios: run 'stampede bench --list'). Writes NAME.json and NAME.html
to --out. The netns backend needs root; it deletes every namespace it makes,
also when interrupted. The baselines' programs (aria2c, opentracker,
mktorrent, nginx, curl) are not installed by this command: a scenario that
lists a system whose programs are missing fails, naming them, unless
--skip-unavailable; ` + bench.InstallCommand + ` installs them all.`

func runBench(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench", "SCENARIO...", benchAbout)
	var (
		backend  = fs.String("backend", "", "`loopback` or netns (default: each scenario's own)")
		reps     = fs.Int("reps", 0, "runs per system (default: the scenario's)")
		systems  = fs.String("systems", "", "comma-separated `LIST` of systems to run (default: the scenario's): stampede, http, http-nginx, curl, aria2; for a push scenario push, aria2, tree, http")
		out      = fs.String("out", ".", "write NAME.json and NAME.html to `DIR`")
		doc      = fs.String("doc", "", "also write the tables into the generated section of markdown `FILE` (docs/benchmarks.md)")
		skip     = fs.Bool("skip-unavailable", false, "leave out, with a note, what this machine cannot run (netns scenarios without root, systems whose programs are not installed) instead of failing")
		bin      = fs.String("bin", "", "the stampede binary under test (default: this one)")
		work     = fs.String("workdir", "", "make the scratch directory in `DIR` (default: the system's temporary directory)")
		list     = fs.Bool("list", false, "list the standard scenarios and exit")
		cleanup  = fs.Bool("cleanup", false, "delete network namespaces left by bench runs that died, and exit")
		quiet    = fs.BoolP("quiet", "q", false, "no live progress")
		verbose  = fs.BoolP("verbose", "v", false, "log each run")
		serveArg = fs.String("serve-args", "", "extra `ARGS` for the origin's stampede serve (added to the scenario's serve_args)")
		getArgs  = fs.String("get-args", "", "extra `ARGS` for the stampede peers' get (added to the scenario's get_args)")
		from     = fs.Bool("from-json", false, "the arguments are reports (NAME.json) to render again (html, table, --doc), not scenarios to run")
		sysNames []string
	)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case *list:
		for _, name := range bench.StandardScenarios() {
			sc, err := bench.LoadScenario(name)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%-12s %s (%s)\n", name, sc.Summary(), sc.Backend)
		}
		return nil
	case *cleanup:
		removed, err := bench.CleanupStale(ctx, e.logger(false, false))
		for _, ns := range removed {
			fmt.Fprintf(e.stdout, "deleted network namespace %s\n", ns)
		}
		return err
	}
	if *from {
		return rerender(e, pos, *out, *doc)
	}
	if len(pos) == 0 {
		return usageErrorf("want at least one SCENARIO (a file, or one of: %s)", strings.Join(bench.StandardScenarios(), ", "))
	}
	if *backend != "" && *backend != bench.BackendLoopback && *backend != bench.BackendNetns {
		return usageErrorf("--backend %q: want loopback or netns", *backend)
	}
	if *systems != "" {
		if sysNames, err = bench.ParseSystems(*systems); err != nil {
			return usageErrorf("--systems: %v", err)
		}
	}
	if *reps < 0 {
		return usageErrorf("--reps must not be negative")
	}
	var scenarios []*bench.Scenario
	var paths []string
	for _, p := range pos {
		sc, err := bench.LoadScenario(p)
		if err != nil {
			return withCode(exitUsage, err)
		}
		sc.ServeArgs = append(sc.ServeArgs, strings.Fields(*serveArg)...)
		sc.GetArgs = append(sc.GetArgs, strings.Fields(*getArgs)...)
		scenarios = append(scenarios, sc)
		if _, err := os.Stat(p); err != nil {
			p = "bench/scenarios/" + p + ".txt"
		}
		paths = append(paths, p)
	}
	runs, err := checkScenarios(e.stderr, scenarios, *backend, sysNames, *skip, exec.LookPath, os.Geteuid() == 0)
	if err != nil {
		return withCode(exitUsage, err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return withCode(exitIO, err)
	}
	for i, sc := range scenarios {
		if !runs[i] {
			continue
		}
		cmdline := "stampede bench " + strings.Join(args, " ")
		if len(scenarios) > 1 {
			cmdline = benchCommand(fs, paths[i])
		}
		rep, err := runScenario(ctx, e, bench.Config{Scenario: sc, Backend: *backend, Systems: sysNames, Reps: *reps,
			Bin: *bin, WorkDir: *work, Command: cmdline, SkipUnavailable: *skip}, !*quiet, *verbose)
		if err != nil {
			return err
		}
		if err := writeReport(rep, *out, sc.Name); err != nil {
			return withCode(exitIO, err)
		}
		fmt.Fprintf(e.stdout, "\n")
		if err := rep.WriteTable(e.stdout); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote %s and %s\n\n", filepath.Join(*out, sc.Name+".html"), filepath.Join(*out, sc.Name+".json"))
		if *doc != "" {
			// Each scenario's table goes in as soon as it is measured.
			var md strings.Builder
			if err := rep.WriteMarkdown(&md, paths[i]); err != nil {
				return err
			}
			if err := spliceDoc(*doc, sc.Name, md.String()); err != nil {
				return withCode(exitIO, err)
			}
			fmt.Fprintf(e.stdout, "updated %s's section of %s\n", sc.Name, *doc)
		}
	}
	return nil
}

// rerender writes the HTML, the table and the --doc section of saved
// reports again (after the report's format changed, say).
func rerender(e *env, files []string, out, doc string) error {
	if len(files) == 0 {
		return usageErrorf("--from-json wants report files (NAME.json)")
	}
	for _, f := range files {
		rep, err := bench.ReadReport(f)
		if err != nil {
			return withCode(exitUsage, err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if err := writeFileAtomic(filepath.Join(out, name+".html"), rep.WriteHTML); err != nil {
			return withCode(exitIO, err)
		}
		if err := rep.WriteTable(e.stdout); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote %s\n", filepath.Join(out, name+".html"))
		if doc != "" {
			var md strings.Builder
			if err := rep.WriteMarkdown(&md, "bench/scenarios/"+rep.Scenario.Name+".txt"); err != nil {
				return err
			}
			if err := spliceDoc(doc, rep.Scenario.Name, md.String()); err != nil {
				return withCode(exitIO, err)
			}
			fmt.Fprintf(e.stdout, "updated %s's section of %s\n", rep.Scenario.Name, doc)
		}
	}
	return nil
}

// benchCommand is the command that reruns one scenario of a longer
// invocation: the same flags but --doc, that scenario only.
func benchCommand(fs *flagSet, scenario string) string {
	words := []string{"stampede", "bench"}
	fs.Visit(func(f *pflag.Flag) {
		switch {
		case f.Name == "doc":
		case f.Value.Type() == "bool" && f.Value.String() == "true":
			words = append(words, "--"+f.Name)
		case f.Value.Type() == "bool":
			words = append(words, "--"+f.Name+"=false")
		default:
			words = append(words, "--"+f.Name, shellQuote(f.Value.String()))
		}
	})
	return strings.Join(append(words, shellQuote(scenario)), " ")
}

// shellQuote quotes s for a POSIX shell, if it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:,=+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// runScenario runs one scenario with the live view.
func runScenario(ctx context.Context, e *env, cfg bench.Config, live, verbose bool) (*bench.Report, error) {
	cfg.Logger = e.logger(!verbose, false)
	var view *liveView
	if live {
		view = newLiveView(e.stderr, e.stderrIsTerminal)
		cfg.Observe = view.observe
	}
	rep, err := bench.Run(ctx, cfg)
	if view != nil {
		view.close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted; everything the bench started is cleaned up: %w", ctx.Err())
		}
		return nil, err
	}
	return rep, nil
}

// writeReport writes DIR/NAME.json and DIR/NAME.html.
func writeReport(rep *bench.Report, dir, name string) error {
	for _, f := range []struct {
		ext   string
		write func(io.Writer) error
	}{{".json", rep.WriteJSON}, {".html", rep.WriteHTML}} {
		if err := writeFileAtomic(filepath.Join(dir, name+f.ext), f.write); err != nil {
			return err
		}
	}
	return nil
}

func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// spliceDoc writes the section of scenario name into the generated part
// of the markdown file at path.
func spliceDoc(path, name, section string) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	intro := "## Testbed (issue 4)\n\nThe standard scenarios of `bench/scenarios`, written here by " +
		"`make bench` (`stampede bench --doc docs/benchmarks.md ...`): every system in the same run on the " +
		"same emulated network. See docs/testbed.md for how the testbed works and what each figure means.\n\n"
	doc, err := bench.SpliceMarkdown(string(data), intro, name, section)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return writeFileAtomic(path, func(w io.Writer) error { _, err := io.WriteString(w, doc); return err })
}

// checkScenarios says, before any scenario runs, which of them this
// machine cannot run and why: a netns backend without root, or a system
// whose programs are not installed. Without skip that is one error naming
// every scenario and program; with skip it writes a note for each to w
// and returns which scenarios can still run (with their systems that
// cannot left out by bench.Run). lookPath and root are passed in so tests
// do not depend on the machine.
func checkScenarios(w io.Writer, scenarios []*bench.Scenario, backend string, systems []string, skip bool,
	lookPath func(string) (string, error), root bool) ([]bool, error) {
	runs := make([]bool, len(scenarios))
	var problems []error
	for i, sc := range scenarios {
		want := sc.Systems
		if len(systems) > 0 {
			want = systems
		}
		unavail := bench.Check(sc, cmpOr(backend, sc.Backend), want, lookPath, root)
		ok, leaveOut := bench.Runnable(unavail)
		runs[i] = ok && len(leaveOut) < len(want)
		for _, u := range unavail {
			problems = append(problems, u)
		}
		if !skip || len(unavail) == 0 {
			continue
		}
		if !runs[i] {
			fmt.Fprintf(w, "stampede bench: skipping %s:\n", sc.Name)
		} else {
			fmt.Fprintf(w, "stampede bench: %s: leaving out %s:\n", sc.Name, strings.Join(leaveOut, ", "))
		}
		for _, u := range unavail {
			fmt.Fprintf(w, "  %v\n", u)
		}
	}
	switch {
	case skip || len(problems) == 0:
		return runs, nil
	case len(problems) == 1:
		return nil, fmt.Errorf("%w; or leave it out with --skip-unavailable", problems[0])
	}
	return nil, fmt.Errorf("%w\n(--skip-unavailable leaves out what cannot run here)", errors.Join(problems...))
}

// liveView shows runs as they go: on a terminal a redrawn block with one
// character per peer; otherwise a plain line every few seconds.
type liveView struct {
	w        io.Writer
	terminal bool

	mu       sync.Mutex // guards the following
	lines    int        // lines drawn by the last redraw
	lastLine time.Time
}

func newLiveView(w io.Writer, terminal bool) *liveView { return &liveView{w: w, terminal: terminal} }

// peerGlyphs: waiting, then progress in eighths, then the end states.
var progressGlyphs = []rune(" ▁▂▃▄▅▆▇█")

func peerGlyph(p bench.PeerView, size int64) rune {
	switch p.State {
	case bench.PeerWaiting, bench.PeerAbsent:
		return '·'
	case bench.PeerDone:
		return '✓'
	case bench.PeerFailed:
		return '✗'
	case bench.PeerKilled:
		return 'k'
	}
	frac := 0.0
	if size > 0 {
		frac = min(1, float64(p.Done)/float64(size))
	}
	return progressGlyphs[int(frac*float64(len(progressGlyphs)-1))]
}

func (v *liveView) observe(s bench.Snapshot) {
	v.mu.Lock()
	defer v.mu.Unlock()
	done, running := 0, 0
	var bytes int64
	for _, p := range s.Peers {
		switch p.State {
		case bench.PeerDone:
			done++
			bytes += s.Size
		case bench.PeerRunning:
			running++
			bytes += p.Done
		default:
			bytes += p.Done
		}
	}
	frac := float64(bytes) / float64(max(s.Size*int64(len(s.Peers)), 1))
	head := fmt.Sprintf("%s · %s · run %d/%d · %5.1f s · %d/%d done · %3.0f%% of bytes · origin %s (%.1f×F)",
		s.Scenario, s.Label, s.Rep, s.Reps, s.Elapsed, done, len(s.Peers), frac*100,
		units.Bytes(s.OriginBytes), float64(s.OriginBytes)/float64(max(s.Size, 1)))
	if !v.terminal {
		if s.Final || time.Since(v.lastLine) >= 5*time.Second {
			if s.Final && s.Run != nil {
				head = fmt.Sprintf("%s · %s · run %d/%d finished: %d/%d peers, last %.1f s, origin %s (%.2f×F)",
					s.Scenario, s.Label, s.Rep, s.Reps, s.Run.Finished, s.Run.Arrived-s.Run.Killed, s.Run.Last,
					units.Bytes(s.Run.OriginBytes), s.Run.R)
			}
			fmt.Fprintln(v.w, head)
			v.lastLine = time.Now()
		}
		return
	}
	var b strings.Builder
	if v.lines > 0 {
		fmt.Fprintf(&b, "\033[%dA", v.lines)
	}
	b.WriteString("\r\033[J")
	b.WriteString(head + "\n")
	lines := 1
	const perLine = 50
	for i := 0; i < len(s.Peers); i += perLine {
		b.WriteString("  ")
		for _, p := range s.Peers[i:min(i+perLine, len(s.Peers))] {
			b.WriteRune(peerGlyph(p, s.Size))
		}
		b.WriteString("\n")
		lines++
	}
	fmt.Fprint(v.w, b.String())
	v.lines = lines
	if s.Final {
		v.lines = 0 // keep the finished run's block on screen
	}
}

func (v *liveView) close() {}
