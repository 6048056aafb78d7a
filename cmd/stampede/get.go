package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/internal/units"
	"github.com/stampede-dev/stampede/store"
)

const getAbout = `Download URL in verified pieces. From a stampede origin (or any server
publishing a manifest) every piece is checked against the file's SHA-256 merkle
root before it is written; the file appears under its final name only when
complete. From a plain web server the file streams in one piece and is checked
with --sha256 or the server's Repr-Digest; otherwise it is reported unverified.`

func runGet(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "get", "URL [-o FILE]", getAbout)
	var (
		output   string
		remote   bool
		cont     bool
		quiet    bool
		verbose  bool
		asJSON   bool
		progJSON bool
		rateStr  string
		sum      string
		parallel int
		retries  int
		noSwarm  bool
		listen   string
		upStr    string
		seedTime time.Duration
		strict   bool
		viaD     bool
		apiAddr  string
		apiToken string
	)
	fs.StringVarP(&output, "output", "o", "", "write to `FILE` (\"-\" streams to stdout in order); default: the remote name")
	fs.BoolVarP(&remote, "remote-name", "O", false, "save under the remote file name (the default when -o is absent)")
	fs.BoolVarP(&cont, "continue", "c", false, "continue: also when FILE is already there, complete and verified, download nothing (FILE.part is always resumed, its pieces verified again)")
	fs.BoolVarP(&quiet, "quiet", "q", false, "no progress and no summary; errors and warnings only")
	fs.BoolVarP(&verbose, "verbose", "v", false, "log every retry and decision")
	fs.BoolVar(&asJSON, "json", false, "print a JSON summary on stdout (stderr with -o -)")
	fs.BoolVar(&progJSON, "progress-json", false, "report progress as one JSON object per line on stderr, every 0.5s (for harnesses)")
	fs.StringVar(&rateStr, "limit-rate", "0", "cap the download `RATE` (e.g. 2MB, 500k, 8Mbit; 0: unlimited)")
	fs.StringVar(&sum, "sha256", "", "expected SHA-256 of the whole file, in `HEX`")
	fs.IntVar(&parallel, "parallel", 16, "most Range requests in flight (the adaptive window's ceiling)")
	fs.IntVar(&retries, "retries", 5, "retries after transient failures: of the probe and the manifest; of a piece or the stream, in a row without progress")
	fs.BoolVar(&noSwarm, "no-swarm", false, "fetch from the server only, as a plain HTTP client (no peers)")
	fs.StringVar(&listen, "peer-listen", ":0", "accept peers on `HOST:PORT`")
	fs.StringVar(&upStr, "max-upload-rate", "0", "cap what we upload to peers, `RATE` (0: unlimited)")
	fs.DurationVar(&seedTime, "seed-time", 0, "keep serving peers this long after completion (0: leave once no upload has been asked or under way for 1s, at most 2s after completion; -1s: until interrupted)")
	fs.BoolVar(&strict, "strict-tft", false, "strict tit-for-tat while downloading: serve a peer only while what we have sent or are sending it, less what it sent us, is under 2 pieces")
	fs.BoolVar(&viaD, "daemon", false, "hand the download to the running stampede daemon and show its progress (the daemon downloads, verifies and seeds)")
	fs.StringVar(&apiAddr, "api", "", "the daemon's API: unix socket `PATH` or HOST:PORT (default: the daemon's default, STATE-DIR/api.sock)")
	fs.StringVar(&apiToken, "api-token", "", "the `TOKEN` of a daemon's TCP API (default: read from STATE-DIR/api-token)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("want exactly one URL, got %d arguments (run 'stampede help get')", len(pos))
	}
	if viaD {
		return getViaDaemon(ctx, e, fs.FlagSet, pos[0], daemonGet{output: output, api: apiAddr, token: apiToken, quiet: quiet, asJSON: asJSON})
	}
	if apiAddr != "" || apiToken != "" {
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
	u, err := fetch.ParseURL(pos[0])
	if err != nil {
		return withCode(exitUsage, err)
	}
	if output == "" {
		output = fetch.RemoteName(u)
	}
	streamed := output == "-"
	stdout := e.stdout
	if !streamed {
		var into bool
		if output, into, err = outputTarget(output, fetch.RemoteName(u)); err != nil {
			return withCode(exitIO, err)
		}
		if into && cont {
			return usageErrorf("-c: %s is not a regular file; there is nothing to resume", output)
		}
		if into {
			// Opening a FIFO waits for its reader, as it does for curl.
			f, err := os.OpenFile(output, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
			if err != nil {
				return withCode(exitIO, err)
			}
			defer f.Close()
			stdout = intoFile{f}
		}
	}
	level := slog.LevelInfo
	switch {
	case verbose:
		level = slog.LevelDebug
	case quiet || e.stderrIsTerminal:
		level = slog.LevelWarn // the progress bar says the rest
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	fetchOut := output
	if _, ok := stdout.(intoFile); ok {
		fetchOut = "-" // written in order into what -o names
	}
	d, err := fetch.New(fetch.Config{
		URL: u.String(), Output: fetchOut, Stdout: stdout, Continue: cont,
		LimitRate: rate, SHA256: sum, MaxParallel: parallel, Retries: retries, NoRetries: retries == 0,
		Logger: log,
		Swarm:  fetch.SwarmConfig{Disabled: noSwarm, ListenAddr: listen, MaxUploadRate: upRate, SeedTime: max(seedTime, 0), SeedForever: seedTime < 0, StrictTFT: strict},
	})
	if err != nil {
		return withCode(exitUsage, err)
	}

	stopProgress := func() {}
	switch {
	case progJSON:
		stopProgress = startJSONProgress(e, d)
	case !quiet:
		stopProgress = startProgress(e, d.Progress, displayName(output))
	}
	res, err := d.Run(ctx)
	stopProgress()
	if err != nil {
		if ctx.Err() != nil {
			msg := "interrupted"
			if _, serr := os.Stat(output + store.PartSuffix); fetchOut != "-" && serr == nil {
				msg += fmt.Sprintf("; %s%s is kept: resume with -c", output, store.PartSuffix)
			}
			return withCode(exitFailure, errors.New(msg))
		}
		return withCode(getExitCode(err), err)
	}
	if f, ok := stdout.(intoFile); ok {
		if err := f.Close(); err != nil {
			return withCode(exitIO, err)
		}
		res.Path = output
	}
	if asJSON {
		w := e.stdout
		if streamed {
			w = e.stderr
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return withCode(exitIO, err)
		}
	}
	if !quiet {
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
	return nil
}

// intoFile is the device, FIFO or file behind a symbolic link that -o names,
// written into rather than replaced.
type intoFile struct{ *os.File }

// outputTarget resolves what -o names. A directory, or a link to one, takes
// the remote name. Nothing there, or a regular file: the download goes to a
// part file renamed over it when complete (into false). Anything else is
// written into (into true), as curl does, and never renamed over: a rename
// would replace a device (as root, /dev/null itself) or a symbolic link (as
// /dev/stdout is) with a regular file.
func outputTarget(output, remote string) (path string, into bool, err error) {
	if fi, err := os.Stat(output); err == nil && fi.IsDir() {
		output = filepath.Join(output, remote)
	}
	fi, err := os.Lstat(output)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return output, false, nil
	case err != nil:
		return "", false, err
	}
	return output, !fi.Mode().IsRegular(), nil
}

func displayName(output string) string {
	if output == "-" {
		return "stdout"
	}
	return filepath.Base(output)
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
