package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/term"
)

// env is what a subcommand may touch of the outside world, injectable so
// tests run subcommands in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// stderrIsTerminal selects progress bars over plain lines.
	stderrIsTerminal bool
	// columns, if set, tells the terminal's width (0 when unknown), read at
	// every redraw so a resized window is followed.
	columns func() int
	// ready, if set, is called by long-running servers with their listening
	// address once they accept connections (tests use it instead of polling).
	ready func(addr string)
}

func stdEnv() *env {
	return &env{
		stdin:            os.Stdin,
		stdout:           os.Stdout,
		stderr:           os.Stderr,
		stderrIsTerminal: term.IsTerminal(int(os.Stderr.Fd())),
		columns: func() int {
			w, _, err := term.GetSize(int(os.Stderr.Fd()))
			if err != nil {
				return 0
			}
			return w
		},
	}
}

// logger logs at info, at warn if quiet, at debug if verbose (which wins).
func (e *env) logger(quiet, verbose bool) *slog.Logger {
	level := slog.LevelInfo
	switch {
	case verbose:
		level = slog.LevelDebug
	case quiet:
		level = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
}

type command struct {
	name, args, summary string
	run                 func(ctx context.Context, e *env, args []string) error
}

// commands is filled in init to break the reference cycle with runHelp.
var commands []command

func init() {
	commands = []command{
		{"get", "URL [-o FILE]", "download a file in verified pieces (wget/curl-like)", runGet},
		{"serve", "DIR | --upstream URL", "serve files with manifests, as an origin that stays calm under load", runServe},
		{"manifest", "FILE", "compute and print a file's manifest (or just its root)", runManifest},
		{"tracker", "[--listen HOST:PORT]", "run only a tracker, for origins that name it with --tracker", runTracker},
		{"seed", "FILE --url URL", "seed a local copy of a file to its swarm", runSeed},
		{"daemon", "[flags]", "one process for many swarms: downloads and seeds through a control API, the gateway", runDaemon},
		{"gateway", "[--listen HOST:PORT]", "a local proxy for browsers, curl, apt and pip that fetches through the swarm", runGateway},
		{"demo", "[flags]", "show a flash crowd absorbed, side by side with plain HTTP", runDemo},
		{"bench", "SCENARIO...", "run benchmark scenarios and write reports", runBench},
		{"help", "[COMMAND]", "show help for stampede or a command", runHelp},
		{"version", "", "print the version", runVersion},
	}
}

// Exit codes, documented in README.md and "stampede help". They follow wget
// where the meanings overlap.
const (
	exitOK       = 0
	exitFailure  = 1  // generic error
	exitUsage    = 2  // bad flags, arguments or URL
	exitIO       = 3  // local file I/O error, e.g. disk full
	exitNetwork  = 4  // network failure: connection refused, reset, timeout
	exitProtocol = 7  // protocol error: bad manifest, wrong Content-Range, truncated body
	exitServer   = 8  // the server answered with an error status
	exitVerify   = 9  // data failed verification (piece hash or --sha256)
	exitChanged  = 10 // the file changed on the server during the download
)

// exitError carries an exit code through the error chain.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

func usageErrorf(format string, args ...any) error {
	return withCode(exitUsage, fmt.Errorf(format, args...))
}

// run dispatches to a subcommand and turns its error into an exit code.
func run(ctx context.Context, args []string, e *env) int {
	if len(args) == 0 {
		printUsage(e.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "--help", "-help":
		name = "help"
	case "--version", "-version":
		name = "version"
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(e.stderr, "stampede: unknown command %q; run 'stampede help'\n", name)
		return exitUsage
	}
	err := cmd.run(ctx, e, args[1:])
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(e.stderr, "stampede %s: %v\n", name, err)
	if sc, ok := errors.AsType[signalCause](context.Cause(ctx)); ok {
		return 128 + int(sc.sig)
	}
	if ee, ok := errors.AsType[*exitError](err); ok {
		return ee.code
	}
	return exitFailure
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "stampede: survive a flash crowd by turning it into the delivery network.\n\nUsage:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  stampede %-8s %-22s %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprint(w, `
Run 'stampede help COMMAND' for a command's flags.

Exit codes:
  0 success            1 generic error        2 bad flags, arguments or URL
  3 local I/O error    4 network failure      7 protocol error (bad manifest, truncated body)
  8 server error       9 verification failed  10 file changed on the server
  130 interrupted (Ctrl-C, SIGINT)            143 terminated (SIGTERM)
`)
}

func runHelp(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		printUsage(e.stdout)
		return nil
	}
	name := args[0]
	if name == "-h" || name == "--help" || name == "-help" {
		name = "help"
	}
	cmd := lookup(name)
	switch {
	case cmd == nil:
		return usageErrorf("no command %q; run 'stampede help' for the list", args[0])
	case cmd.name == "help":
		fmt.Fprint(e.stdout, "Usage: stampede help [COMMAND]\n\nWithout COMMAND, list the commands and the exit codes; with one, show its\nflags (as 'stampede COMMAND --help' does).\n")
		return nil
	}
	// Every command prints its own help, on stdout, on -h.
	return cmd.run(ctx, e, []string{"-h"})
}

// version is set at link time by the Makefile.
var version = "dev"

func runVersion(_ context.Context, e *env, _ []string) error {
	fmt.Fprintf(e.stdout, "stampede %s\n", version)
	return nil
}

// flagSet is a command's flags and the help text that goes with them.
type flagSet struct {
	*flag.FlagSet
	help func() // prints the help on stdout
}

// newFlagSet returns the flags of command name. Their errors come back to
// run, which prints them once; -h and --help print the help on stdout.
func newFlagSet(e *env, name, args, about string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the flag package's own messages are the errors run prints
	fs.Usage = func() {}     // called on errors too: help is printed by parse
	f := &flagSet{FlagSet: fs}
	f.help = func() {
		fs.SetOutput(e.stdout)
		defer fs.SetOutput(io.Discard)
		fmt.Fprintf(e.stdout, "Usage: stampede %s %s\n\n%s\n\nFlags:\n", name, args, about)
		fs.PrintDefaults()
	}
	return f
}

// parse parses flags placed anywhere among the positional arguments, as
// wget and curl allow ("stampede get URL -o FILE"); "--" ends the flags.
// -h and --help print the help and return flag.ErrHelp.
func (f *flagSet) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.help()
				return nil, err
			}
			return nil, withCode(exitUsage, fmt.Errorf("%w (run 'stampede help %s')", err, f.Name()))
		}
		rest := f.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// Parse stops at the first positional argument or after "--".
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// stringsFlag collects a repeatable flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }
