package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/host"
	"github.com/stampede-dev/stampede/internal/units"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/sign"
	"github.com/stampede-dev/stampede/store"
)

const getAbout = `Download each URL in verified pieces. From a stampede origin (or any server
publishing a manifest) every piece is checked against the file's SHA-256 merkle
root before it is written; the file appears under its final name only when
complete. From a plain web server the file streams in one piece and is checked
with --sha256 or the server's Repr-Digest; otherwise it is reported unverified.

Several URLs, as arguments or listed with -i, are downloaded one after another,
each under its remote name (in --output-dir); a failure does not stop the
others, and the exit code is the first failure's. --max-time bounds each URL's
download; past it, get exits 28 (curl's code) and keeps FILE.part.`

// errMaxTime ends a download's context when --max-time is reached.
var errMaxTime = errors.New("--max-time reached")

// getOptions are get's settings for every URL.
type getOptions struct {
	cfg        fetch.Config // the fields common to every URL
	header     http.Header  // -H, --user-agent
	creds      *getCredentials
	maxTime    time.Duration
	noClobber  bool
	createDirs bool
	quiet      bool
	asJSON     bool
	progJSON   bool
	// lines: --json prints one object per line (several URLs, or -i),
	// not one indented object.
	lines bool
}

func runGet(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "get", "URL... [-o FILE] | -i FILE", getAbout)
	var (
		output    string
		remote    bool
		cont      bool
		verbose   bool
		rateStr   string
		sum       string
		parallel  int
		retries   int
		noSwarm   bool
		listen    string
		upStr     string
		seedTime  time.Duration
		patience  time.Duration
		strict    bool
		noPacing  bool
		viaD      bool
		apiAddr   string
		apiToken  string
		inputFile string
		outputDir string
		h         getHTTP
		o         getOptions
	)
	fs.StringVarP(&output, "output", "o", "", "write to `FILE` (\"-\" streams to stdout in order); default: the remote name")
	fs.BoolVarP(&remote, "remote-name", "O", false, "save under the remote file name (the default when -o is absent)")
	fs.BoolVarP(&cont, "continue", "c", false, "continue: also when FILE is already there, complete and verified against the server's manifest, download nothing; resume FILE.part even without a validator to check it by (FILE.part is resumed without -c too, its pieces verified again)")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "no progress and no summary; errors and warnings only")
	fs.BoolVarP(&verbose, "verbose", "v", false, "log every retry and decision")
	fs.BoolVar(&o.asJSON, "json", false, "print a JSON summary on stdout (stderr with -o -): one indented object, or with several URLs or -i one object per line")
	fs.BoolVar(&o.progJSON, "progress-json", false, "report progress as one JSON object per line on stderr, every 0.5s (for harnesses)")
	fs.StringVar(&rateStr, "limit-rate", "0", "cap the download `RATE` (e.g. 2MB, 500k, 8Mbit; 0: unlimited)")
	fs.StringVar(&sum, "sha256", "", "expected SHA-256 of the whole file, in `HEX`")
	trustKey := fs.String("trust-key", "", "accept only a manifest signed by the origin key `KEY` (a file, or ed25519:... as keygen prints it); else exit 9")
	fs.IntVar(&parallel, "parallel", 16, "most Range requests in flight (the adaptive window's ceiling)")
	fs.IntVar(&retries, "retries", 5, "retries after transient failures: of the probe and the manifest; of a piece or the stream, in a row without progress")
	fs.BoolVar(&noSwarm, "no-swarm", false, "fetch from the server only, as a plain HTTP client (no peers)")
	fs.StringVar(&listen, "peer-listen", ":0", "accept peers on `HOST:PORT`")
	fs.StringVar(&upStr, "max-upload-rate", "0", "cap what we upload to peers, `RATE` (0: unlimited)")
	fs.BoolVar(&noPacing, "no-pacing", false, "upload to peers as fast as the uplink takes; by default uploads keep a little below its measured capacity, so that the acknowledgements of the download get through")
	webRTC := webrtcFlag(fs.FlagSet)
	fs.DurationVar(&seedTime, "seed-time", 0, "keep serving peers this long after completion (0: leave once no upload has been asked or under way for 1s, at most 2s after completion; -1s: until interrupted)")
	fs.DurationVar(&patience, "origin-patience", node.DefaultOriginPatience, "in the swarm, give up (exit 4) when no piece has come for `DURATION` and the origin fails (refuses, resets, times out, answers 5xx)")
	fs.BoolVar(&strict, "strict-tft", false, "strict tit-for-tat while downloading: serve a peer only while what we have sent or are sending it, less what it sent us, is under 2 pieces")
	fs.BoolVar(&viaD, "daemon", false, "hand the download to the running stampede daemon and show its progress (the daemon downloads, verifies and seeds)")
	fs.StringVar(&apiAddr, "api", "", "the daemon's API: unix socket `PATH` or HOST:PORT (default: the daemon's default, STATE-DIR/api.sock)")
	fs.StringVar(&apiToken, "api-token", "", "the `TOKEN` of a daemon's TCP API (default: read from STATE-DIR/api-token)")
	fs.StringVarP(&inputFile, "input-file", "i", "", "download the URLs listed in `FILE` too, one per line, blank lines and # comments skipped (\"-\": standard input)")
	fs.StringVarP(&outputDir, "output-dir", "P", "", "save into `DIR`, made if missing (with -o, a relative FILE is in DIR)")
	fs.BoolVar(&o.noClobber, "no-clobber", false, "leave an existing FILE alone: say so, download nothing, and count it a success")
	fs.BoolVar(&o.createDirs, "create-dirs", false, "make the missing directories of -o FILE")
	fs.DurationVar(&o.maxTime, "max-time", 0, "give up each URL after `DURATION`, retries and seeding included: exit 28, FILE.part kept (0: no limit)")
	h.define(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) == 0 && inputFile == "" {
		return usageErrorf("no URL: give one or more, or -i FILE (run 'stampede help get')")
	}
	if viaD {
		if len(pos) != 1 || inputFile != "" {
			return usageErrorf("--daemon takes one URL")
		}
		if *trustKey != "" {
			return usageErrorf("--daemon: the daemon does not check --trust-key yet; download without --daemon")
		}
		if u, err := url.Parse(pos[0]); err == nil && u.User != nil {
			return usageErrorf("--daemon: no user:password@ in the URL; the daemon's jobs are listed for every user of its API")
		}
		return getViaDaemon(ctx, e, fs, pos[0], daemonGet{output: output, api: apiAddr, token: apiToken, quiet: o.quiet, asJSON: o.asJSON})
	}
	// From a setting, they are the daemon's address for the gets that use
	// it, and no mistake here.
	if fs.onCommandLine("api") || fs.onCommandLine("api-token") {
		return usageErrorf("--api and --api-token go with --daemon")
	}
	upRate, err := units.ParseRate(upStr)
	if err != nil {
		return usageErrorf("--max-upload-rate: %v", err)
	}
	rate, err := units.ParseRate(rateStr)
	if err != nil {
		return usageErrorf("--limit-rate: %v", err)
	}
	if parallel < 1 || retries < 0 {
		return usageErrorf("--parallel must be at least 1 and --retries at least 0")
	}
	if o.maxTime < 0 {
		return usageErrorf("--max-time %v: must not be negative", o.maxTime)
	}
	// Decided by how get is called, not by how many URLs a list holds, so
	// that a script reading a list gets the same shape for any length.
	o.lines = len(pos) != 1 || inputFile != ""
	if o.lines && output != "" {
		return usageErrorf("-o names one file; with several URLs or -i, each takes its remote name (choose the directory with --output-dir)")
	}
	if o.lines && sum != "" {
		return usageErrorf("--sha256 is one file's digest; it goes with one URL")
	}
	client, err := h.client(parallel)
	if err != nil {
		return err
	}
	if o.header, err = h.header(fs.Changed("user-agent")); err != nil {
		return err
	}
	if o.creds, err = h.credentials(e); err != nil {
		return err
	}
	urls, err := getURLs(e, pos, inputFile)
	if err != nil {
		return err
	}
	if len(urls) == 0 {
		return usageErrorf("no URL in %s", inputFile)
	}
	targets, err := getTargets(urls, output, outputDir)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	switch {
	case verbose:
		level = slog.LevelDebug
	case o.quiet || e.stderrIsTerminal:
		level = slog.LevelWarn // the progress bar says the rest
	}
	var trusted ed25519.PublicKey
	if *trustKey != "" {
		if trusted, err = sign.LoadPublicKey(*trustKey); err != nil {
			return usageErrorf("--trust-key: %v", err)
		}
	}
	o.cfg = fetch.Config{
		TrustKey: trusted,
		Continue: cont, LimitRate: rate, SHA256: sum, MaxParallel: parallel, Retries: retries, NoRetries: retries == 0,
		Client: client, Logger: e.newLogger(level),
		Swarm: fetch.SwarmConfig{Disabled: noSwarm, ListenAddr: listen, MaxUploadRate: upRate, NoPacing: noPacing, SeedTime: max(seedTime, 0), SeedForever: seedTime < 0, StrictTFT: strict,
			Node: node.Config{OriginPatience: patience}},
	}
	rtcMode, err := parseWebRTC(*webRTC)
	if err != nil {
		return err
	}
	if rtcMode != webrtcOff && !noSwarm {
		if o.cfg.Swarm.Node.Host, err = webrtcHost(ctx, listen, rtcMode, host.Config{UploadRate: upRate, NoPacing: noPacing, Logger: o.cfg.Logger}); err != nil {
			return withCode(exitUsage, err)
		}
	}
	if outputDir != "" {
		if err := os.MkdirAll(outputDir, 0o777); err != nil {
			return withCode(exitIO, err)
		}
	}
	if !o.lines {
		return o.get(ctx, e, targets[0])
	}
	// One after another, not several at once: each download already keeps
	// up to --parallel requests in flight and may serve a swarm, so running
	// more would not finish the whole list sooner; it would split the link
	// and --limit-rate (which each download applies alone), interleave the
	// progress lines, and make the output's order and the exit code depend
	// on timing.
	var first error
	failed := 0
	for _, t := range targets {
		err := o.get(ctx, e, t)
		switch {
		case err == nil:
			continue
		case ctx.Err() != nil:
			return err // interrupted: the rest are not started
		}
		fmt.Fprintf(e.stderr, "stampede get: %s: %v\n", displayName(t.output), err)
		failed++
		if first == nil {
			first = err
		}
	}
	if first != nil {
		return withCode(exitCodeOf(first), fmt.Errorf("%d of %d downloads failed", failed, len(targets)))
	}
	return nil
}

// exitCodeOf is the exit code an error carries (exitFailure without one).
func exitCodeOf(err error) int {
	if ee, ok := errors.AsType[*exitError](err); ok {
		return ee.code
	}
	return exitFailure
}

// getNotDone is what --json prints for a URL not downloaded: the error
// that stopped it, or that --no-clobber left its file alone (skipped
// "exists", a success).
type getNotDone struct {
	URL      string `json:"url"`
	Path     string `json:"path"`
	Skipped  string `json:"skipped,omitempty"`
	Error    string `json:"error,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"`
}

// printJSON writes v as --json does: indented for one URL (as get always
// has), one line each for several.
func (o *getOptions) printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	if !o.lines {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return withCode(exitIO, err)
	}
	return nil
}

// get downloads one URL; with --json it prints its object, downloaded or
// not.
func (o *getOptions) get(ctx context.Context, e *env, t getTarget) error {
	w := e.stdout
	if t.output == "-" || isStdout(e, t.output) {
		w = e.stderr // stdout carries the file
	}
	res, skipped, err := o.download(ctx, e, t)
	if !o.asJSON {
		return err
	}
	switch {
	case err != nil:
		nd := getNotDone{URL: t.url.String(), Path: t.output, Error: err.Error(), ExitCode: exitCodeOf(err)}
		if ctx.Err() != nil {
			nd.ExitCode = 0 // the signal's, which run decides
		}
		if jerr := o.printJSON(w, nd); jerr != nil {
			return errors.Join(err, jerr)
		}
		return err
	case skipped:
		return o.printJSON(w, getNotDone{URL: t.url.String(), Path: res.Path, Skipped: "exists"})
	}
	return o.printJSON(w, res)
}

// download downloads one URL and prints its summary line. skipped: with
// --no-clobber, the file was there and left alone (res has its path).
func (o *getOptions) download(ctx context.Context, e *env, t getTarget) (res *fetch.Result, skipped bool, err error) {
	// --max-time counts from here: waiting for a FIFO's reader too.
	dctx := ctx
	if o.maxTime > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeoutCause(ctx, o.maxTime, errMaxTime)
		defer cancel()
	}
	output := t.output
	streamed := output == "-"
	stdout := e.stdout
	if !streamed {
		if o.createDirs {
			if err := os.MkdirAll(filepath.Dir(output), 0o777); err != nil {
				return nil, false, withCode(exitIO, err)
			}
		}
		var into bool
		if output, into, err = outputTarget(output, fetch.RemoteName(t.url), t.named); err != nil {
			return nil, false, withCode(exitIO, err)
		}
		if o.noClobber {
			if _, err := os.Lstat(output); err == nil {
				// As wget -nc: whatever is there, a file, a device or a
				// link, is the user's.
				if !o.quiet {
					fmt.Fprintf(e.stderr, "%s: already there; not downloaded (--no-clobber)\n", output)
				}
				return &fetch.Result{URL: t.url.String(), Path: output}, true, nil
			}
		}
		if into && o.cfg.Continue {
			return nil, false, usageErrorf("-c: %s is not a regular file; there is nothing to resume", output)
		}
		if into {
			f, err := openInto(dctx, output)
			if err != nil {
				if ctx.Err() != nil || errors.Is(context.Cause(dctx), errMaxTime) {
					return nil, false, o.stopped(ctx, dctx, "")
				}
				return nil, false, withCode(exitIO, err)
			}
			defer f.Close()
			stdout = intoFile{f}
		}
	}
	fetchOut := output
	if _, ok := stdout.(intoFile); ok {
		fetchOut = "-" // written in order into what -o names
	}
	cfg := o.cfg
	cfg.URL, cfg.Output, cfg.Stdout = t.url.String(), fetchOut, stdout
	cfg.Header = o.header
	if auth := o.creds.forURL(t.url, t.user); auth != "" && o.header.Get("Authorization") == "" {
		cfg.Header = o.header.Clone()
		cfg.Header.Set("Authorization", auth)
	}
	d, err := fetch.New(cfg)
	if err != nil {
		return nil, false, withCode(exitUsage, err)
	}

	stopProgress := func() {}
	switch {
	case o.progJSON:
		stopProgress = startJSONProgress(e, d)
	case !o.quiet:
		stopProgress = startProgress(e, d.Progress, displayName(output))
	}
	res, err = d.Run(dctx)
	stopProgress()
	if err != nil {
		if ctx.Err() != nil || errors.Is(context.Cause(dctx), errMaxTime) {
			kept := ""
			if _, serr := os.Stat(output + store.PartSuffix); fetchOut != "-" && serr == nil {
				kept = output + store.PartSuffix
			}
			return nil, false, o.stopped(ctx, dctx, kept)
		}
		return nil, false, withCode(getExitCode(err), err)
	}
	if f, ok := stdout.(intoFile); ok {
		if err := f.Close(); err != nil {
			return nil, false, withCode(exitIO, err)
		}
		res.Path = output
	}
	if !o.quiet {
		printSummary(e, output, res)
	}
	return res, false, nil
}

// stopped is the error of a download that Ctrl-C or --max-time ended,
// saying what a later run resumes (part: the part file kept, if any).
func (o *getOptions) stopped(ctx, dctx context.Context, part string) error {
	kept := ""
	if part != "" {
		kept = fmt.Sprintf("; %s is kept: run the same command again to resume", part)
	}
	if ctx.Err() != nil {
		return withCode(exitFailure, errors.New("interrupted"+kept))
	}
	return withCode(exitMaxTime, fmt.Errorf("--max-time %v reached%s", o.maxTime, kept))
}

// printSummary prints a download's line on stderr.
func printSummary(e *env, output string, res *fetch.Result) {
	verified := "verified: " + res.Verified
	if res.Root != "" {
		verified += " (root " + res.Root[:16] + "...)"
	}
	if res.Verified == "none" {
		verified = "UNVERIFIED"
	}
	switch {
	case res.AlreadyComplete:
		fmt.Fprintf(e.stderr, "%s: already complete (%s), %s; nothing downloaded\n", displayName(output), units.Bytes(res.Size), verified)
	case res.BytesResumed > 0:
		fmt.Fprintf(e.stderr, "%s: %s, %s of it downloaded in %s (%s) and %s resumed from %s, %s\n", displayName(output),
			units.Bytes(res.Size), units.Bytes(res.Size-res.BytesResumed),
			(time.Duration(res.Seconds * float64(time.Second))).Round(time.Millisecond), units.Rate(res.RateBps),
			units.Bytes(res.BytesResumed), filepath.Base(output)+store.PartSuffix, verified)
	default:
		fmt.Fprintf(e.stderr, "%s: %s in %s (%s), %s\n", displayName(output), units.Bytes(res.Size),
			(time.Duration(res.Seconds * float64(time.Second))).Round(time.Millisecond), units.Rate(res.RateBps), verified)
	}
}

// intoFile is the device, FIFO or descriptor (/dev/stdout) that -o names,
// written into rather than replaced.
type intoFile struct{ *os.File }

// outputTarget resolves where a download goes (README, "What -o names").
// A directory that -o named, or a link to one, takes the remote name; the
// remote name itself being a directory is an error, as for wget. Nothing
// there, a regular file, or a symbolic link to one: the download goes to a
// part file renamed over the path when complete (into false); a link is
// replaced, never followed into the rename, so a link planted where a file
// is saved cannot redirect the write. A device, a FIFO, or a link to one or
// to a process's descriptor (/dev/stdout): written into (into true), as
// curl does, since a rename would replace the device or the link (as root,
// /dev/null itself).
func outputTarget(output, remote string, named bool) (path string, into bool, err error) {
	if fi, err := os.Stat(output); err == nil && fi.IsDir() {
		if !named {
			return "", false, fmt.Errorf("%s is a directory; name the file with -o", output)
		}
		output = filepath.Join(output, remote)
	}
	fi, err := os.Lstat(output)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return output, false, nil
	case err != nil:
		return "", false, err
	case fi.Mode().IsRegular():
		return output, false, nil
	case fi.IsDir():
		return "", false, fmt.Errorf("%s is a directory", output)
	case fi.Mode()&os.ModeSymlink == 0:
		return output, true, nil // a device, a FIFO, a socket
	}
	if viaDescriptor(output) {
		return output, true, nil // /dev/stdout and the like, even redirected to a file
	}
	if to, err := os.Stat(output); err == nil && !to.Mode().IsRegular() && !to.IsDir() {
		return output, true, nil // a link to a device, a FIFO, a pipe
	}
	return output, false, nil
}

// isStdout reports whether path is the file the process's stdout is open on
// (-o /dev/stdout), where the data goes and no summary may.
func isStdout(e *env, path string) bool {
	out, ok := e.stdout.(*os.File)
	if !ok {
		return false
	}
	a, err1 := out.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// viaDescriptor reports whether path is, or leads through symbolic links
// to, a process's file descriptor (/proc/PID/fd/N, as /dev/stdout and
// /dev/fd/N are): a descriptor is written into whatever file it is open
// on, and its link must never be renamed over.
func viaDescriptor(path string) bool {
	for range 40 { // the kernel's own limit on links followed
		if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil && strings.HasPrefix(dir+"/", "/proc/") {
			return true
		}
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return false
		}
		to, err := os.Readlink(path)
		if err != nil {
			return false
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(path), to)
		}
		path = to
	}
	return false
}

// openInto opens what outputTarget chose to write into. A FIFO with no
// reader yet is waited for as curl does, but ctx still ends the wait
// (Ctrl-C, --max-time). Only a symbolic link is followed.
func openInto(ctx context.Context, path string) (*os.File, error) {
	flags := os.O_WRONLY | os.O_TRUNC | store.NonBlock
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink == 0 {
		flags |= store.NoFollow // a device or FIFO must not turn into a link meanwhile
	}
	descriptor := viaDescriptor(path) // /dev/stdout, which may be a regular file
	for {
		f, err := os.OpenFile(path, flags, 0)
		switch {
		case err == nil:
			if fi, err := f.Stat(); err != nil || fi.Mode().IsRegular() && !descriptor {
				// Swapped for a regular file since outputTarget looked:
				// that one is replaced atomically, not written into.
				f.Close()
				return nil, fmt.Errorf("%s changed while being opened; try again", path)
			}
			return f, nil
		case !errors.Is(err, syscall.ENXIO): // ENXIO: a FIFO with no reader
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func displayName(output string) string {
	if output == "-" {
		return "stdout"
	}
	name := filepath.Base(output)
	if strings.ContainsFunc(name, unicode.IsControl) {
		return strconv.Quote(name) // escapes, never a terminal's sequences
	}
	return name
}

// getExitCode maps a download error to the documented exit codes.
func getExitCode(err error) int {
	var (
		se   *fetch.StatusError
		nerr net.Error
		uerr *url.Error
	)
	// Order matters: a body cut by a connection reset is both a protocol
	// error (truncated) and a network one, and the network is the cause.
	switch {
	case errors.Is(err, fetch.ErrUsage):
		return exitUsage
	case errors.Is(err, fetch.ErrLocal):
		return exitIO
	case errors.Is(err, fetch.ErrVerify):
		return exitVerify
	case errors.Is(err, fetch.ErrChanged):
		return exitChanged
	case errors.As(err, &se):
		return exitServer
	case errors.As(err, &nerr), errors.As(err, &uerr):
		return exitNetwork
	case errors.Is(err, fetch.ErrProtocol), errors.Is(err, io.ErrUnexpectedEOF):
		return exitProtocol
	}
	return exitFailure
}
