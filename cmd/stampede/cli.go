package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
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
	// describe, if set, is handed the command's flags by parse, and the
	// command returns errDescribed without running (see describe).
	describe func(*flagSet)
	// getenv reads the environment for settings (settings.go); nil reads
	// none, so in-process tests are not steered by the machine's.
	getenv func(string) string
	// logFormat is --log-format: "text" (the default) or "json".
	logFormat string
}

func stdEnv() *env {
	return &env{
		stdin:            os.Stdin,
		stdout:           os.Stdout,
		stderr:           os.Stderr,
		stderrIsTerminal: term.IsTerminal(int(os.Stderr.Fd())),
		getenv:           stdGetenv,
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
	return e.newLogger(level)
}

// newLogger logs at level and above to stderr, in the format --log-format
// chose: text (key=value) or JSON lines.
func (e *env) newLogger(level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if e.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(e.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(e.stderr, opts))
}

type command struct {
	name, args, summary string
	run                 func(ctx context.Context, e *env, args []string) error
}

// commands is filled in init to break the reference cycle with runHelp.
var commands []command

func init() {
	commands = []command{
		{"get", "URL... [-o FILE] | -i FILE", "download a file in verified pieces (wget/curl-like)", runGet},
		{"serve", "DIR | --upstream URL", "serve files with manifests, as an origin that stays calm under load", runServe},
		{"manifest", "FILE", "compute and print a file's manifest (or just its root)", runManifest},
		{"keygen", "-o FILE", "make an ed25519 key pair: an origin's signing key for private swarms", runKeygen},
		{"tracker", "[--listen HOST:PORT]", "run only a tracker, for origins that name it with --tracker", runTracker},
		{"seed", "FILE --url URL", "seed a local copy of a file to its swarm", runSeed},
		{"daemon", "[flags]", "one process for many swarms: downloads and seeds through a control API, the gateway", runDaemon},
		{"push", "FILE --cluster FILE --dest PATH --key KEY", "push a file to every host of a cluster, topology-aware, then run a command", runPush},
		{"gateway", "[--listen HOST:PORT]", "a local proxy for browsers, curl, apt and pip that fetches through the swarm", runGateway},
		{"cdn", "--listen HOST:PORT --nodes HOST:PORT,... --cache-dir DIR", "a cache node of a cooperating CDN: each file fetched from its origin about once", runCDN},
		{"dns", "[--listen HOST:PORT] [--upstream HOST:PORT] [--peers HOST:PORT,...]", "a cooperative DNS forwarder: slow lookups also go to peer nodes (CoDNS)", runDNS},
		{"demo", "[flags]", "show a flash crowd absorbed, side by side with plain HTTP", runDemo},
		{"bench", "SCENARIO...", "run benchmark scenarios and write reports", runBench},
		{"sim", "SCENARIO", "simulate a scenario's swarm at scale: the real scheduler and tracker on a simulated network", runSim},
		{"completion", "bash|zsh|fish", "print a shell completion script for commands and flags", runCompletion},
		{"help", "[COMMAND | --man]", "show help for stampede or a command, or the manual page", runHelp},
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
	// exitMaxTime: get's --max-time reached. curl's code for it, which
	// scripts test for; not a network failure (4): the network may be fine
	// and the file merely too large for the time given.
	exitMaxTime = 28
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
	if errors.Is(err, pflag.ErrHelp) {
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

// tagline is what stampede is for: the first line of its help and the NAME
// of its manual page.
const tagline = "survive a flash crowd by turning it into the delivery network"

// flagSyntax says how flags are written, in the help and the manual page.
const flagSyntax = `Flags are GNU style: a long flag has two dashes (--output FILE or
--output=FILE), a short one has one (-o FILE), and short ones combine (-qc).
Flags go anywhere among the arguments; "--" ends them.`

// exitCodes is the table of exit codes, in the help and the manual page.
const exitCodes = `  0 success            1 generic error        2 bad flags, arguments or URL
  3 local I/O error    4 network failure      7 protocol error (bad manifest, truncated body)
  8 server error       9 verification failed  10 file changed on the server
  28 --max-time reached                       130 interrupted (Ctrl-C, SIGINT)
  143 terminated (SIGTERM)
`

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "stampede: %s.\n\nUsage:\n", tagline)
	for _, c := range commands {
		fmt.Fprintf(w, "  stampede %-10s %-22s %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintf(w, `
Run 'stampede help COMMAND' for a command's flags, 'stampede help --man' for the
manual page, 'stampede completion bash' (or zsh, fish) for shell completion.

%s

Exit codes:
%s`, flagSyntax, exitCodes)
}

const helpAbout = `Without COMMAND, list the commands and the exit codes; with one, show its
flags (as 'stampede COMMAND --help' does). With --man, print the manual page
stampede(1): this help and every command's, in man(7) format. Read it with
'stampede help --man | man -l -'; 'make man' writes it to docs/stampede.1.`

func runHelp(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "help", "[COMMAND | --man]", helpAbout)
	man := fs.Bool("man", false, "print the manual page, in roff")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 1, *man && len(pos) > 0:
		return usageErrorf("want one COMMAND or --man, got %q (run 'stampede help help')", args)
	case *man:
		_, err := io.WriteString(e.stdout, manPage())
		return err
	case len(pos) == 0:
		printUsage(e.stdout)
		return nil
	}
	cmd := lookup(pos[0])
	if cmd == nil {
		return usageErrorf("no command %q; run 'stampede help' for the list", pos[0])
	}
	describe(cmd).writeHelp(e.stdout)
	return nil
}

// version is set at link time by the Makefile.
var version = "dev"

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", "", "Print the version: the commit stampede was built from (git describe).")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("version takes no arguments, got %q", pos)
	}
	fmt.Fprintf(e.stdout, "stampede %s\n", version)
	return nil
}

// flagSet is a command's flags and the rest of its help: the usage line and
// what the command does. It is the one source of the help, the completion
// scripts and the manual page.
type flagSet struct {
	*pflag.FlagSet
	e           *env
	args, about string
	help        bool // -h, --help
	// settings are the values flags got from the config file and the
	// environment (settings.go), to tell them from the command line's.
	settings map[string]string
}

// onCommandLine reports whether the flag name was given on the command
// line, rather than left at its default or set by a setting.
func (f *flagSet) onCommandLine(name string) bool {
	fl := f.Lookup(name)
	if fl == nil || !fl.Changed {
		return false
	}
	v, set := f.settings[name]
	return !set || v != fl.Value.String()
}

// helpColumns is the width the help's flag lines are wrapped to.
const helpColumns = 80

// newFlagSet returns the flags of command name, taking positional
// arguments args, with -h, --help. Their errors come back to run, which
// prints them once.
func newFlagSet(e *env, name, args, about string) *flagSet {
	f := &flagSet{FlagSet: pflag.NewFlagSet(name, pflag.ContinueOnError), e: e, args: args, about: about}
	f.BoolVarP(&f.help, "help", "h", false, "show this help")
	if !slices.Contains(noSettings, name) {
		// Read by applySettings before the rest of the command line.
		f.String("config", "", "read settings from the TOML `FILE` (default $STAMPEDE_CONFIG, else ~/.config/stampede/config.toml if there); see README, Configuration")
		f.StringVar(&e.logFormat, "log-format", "text", "write log lines as `text` (key=value) or json (one object per line, for journald, Loki or jq)")
	}
	return f
}

// usage is the command's usage line, "stampede NAME ARGS".
func (f *flagSet) usage() string {
	return strings.TrimSpace("stampede " + f.Name() + " " + f.args)
}

func (f *flagSet) writeHelp(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n\nFlags:\n", f.usage(), f.about)
	type line struct{ names, usage string }
	var lines []line
	width := 0
	f.VisitAll(func(fl *pflag.Flag) {
		names := "    --" + fl.Name
		if fl.Shorthand != "" {
			names = "-" + fl.Shorthand + ", --" + fl.Name
		}
		if value := flagValue(fl); value != "" {
			names += " " + value
		}
		_, usage := pflag.UnquoteUsage(fl)
		lines = append(lines, line{names, usage + defaultText(fl)})
		width = max(width, len(names))
	})
	// Usage wraps beside the names; pflag's own layout would add
	// "[=true|false]" to every switch.
	for _, l := range lines {
		fmt.Fprintf(w, "  %-*s  %s\n", width, l.names, wrapWords(l.usage, helpColumns-width-4, width+4))
	}
}

// flagValue is the name of a flag's value in the help (FILE, HOST:PORT,
// duration); "" for a bool flag, which takes none.
func flagValue(f *pflag.Flag) string {
	if f.Value.Type() == "bool" {
		return ""
	}
	name, _ := pflag.UnquoteUsage(f)
	return name
}

// defaultText is the " (default X)" after a flag's usage, in the help and
// the manual page; none for a zero default.
func defaultText(f *pflag.Flag) string {
	switch {
	case f.Value.Type() == "string" && f.DefValue != "":
		return fmt.Sprintf(" (default %q)", f.DefValue)
	case f.Value.Type() == "string", slices.Contains([]string{"0", "0s", "false", "[]"}, f.DefValue):
		return ""
	}
	return " (default " + f.DefValue + ")"
}

// wrapWords breaks s into lines of at most width columns (a longer word
// has one to itself), each after the first indented by indent spaces.
func wrapWords(s string, width, indent int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		switch {
		case i == 0:
		case n+1+len(word) > width:
			b.WriteString("\n" + strings.Repeat(" ", indent))
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

// parse parses the flags GNU style: anywhere among the positional
// arguments, as wget and curl allow ("stampede get URL -o FILE"), short
// ones combined ("-qc"), "--" ending them. It returns the positional
// arguments. -h and --help print the help on stdout and return
// pflag.ErrHelp.
func (f *flagSet) parse(args []string) ([]string, error) {
	if f.e.describe != nil {
		f.e.describe(f)
		return nil, errDescribed
	}
	var err error
	switch name := f.singleDashLong(args); name {
	case "help":
		f.help = true // asking for help in the old syntax gets it
	case "":
		if err := f.applySettings(args); err != nil {
			return nil, err
		}
		err = f.Parse(args)
	default:
		err = fmt.Errorf("-%s: a long flag takes two dashes: --%s", name, name)
	}
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("%w (run 'stampede help %s')", err, f.Name()))
	}
	if f.help {
		f.writeHelp(f.e.stdout)
		return nil, pflag.ErrHelp
	}
	if lf := f.e.logFormat; lf != "" && lf != "text" && lf != "json" {
		return nil, usageErrorf("--log-format %q: want text or json", lf)
	}
	return f.Args(), nil
}

// singleDashLong returns the first long flag in args written with one dash,
// as Go's flag package allowed. GNU syntax reads "-continue" as -c and
// -o ntinue; saying so is kinder than a file named "ntinue".
func (f *flagSet) singleDashLong(args []string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			if name, _, _ := strings.Cut(a[1:], "="); f.Lookup(name) != nil {
				return name
			}
		}
	}
	return ""
}

// errDescribed is what a command returns when it was run only to define
// its flags.
var errDescribed = errors.New("flags described; command not run")

// describe returns the flags of c, ready to parse, by running c with
// env.describe set. Every command defines its flags and calls parse before
// it does anything else, so the help, the completion scripts and the
// manual page show the flags each command parses, from their one
// definition, without a second list to keep in step.
func describe(c *command) *flagSet {
	var fs *flagSet
	e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	e.describe = func(f *flagSet) { fs, e.describe = f, nil }
	// Cancelled, so that a command breaking the rule stops at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.run(ctx, e, nil); !errors.Is(err, errDescribed) {
		panic("stampede " + c.name + " must define its flags with newFlagSet and call parse before anything else")
	}
	return fs
}
