package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"github.com/stampede-dev/stampede/daemon"
	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/internal/units"
)

// daemonGet is what "get --daemon" takes from get's flags.
type daemonGet struct {
	output, api, token string
	quiet, asJSON      bool
}

// daemonGetFlags are the get flags that go with --daemon; the others shape
// a download in this process, which --daemon does not run.
var daemonGetFlags = []string{"daemon", "api", "api-token", "output", "remote-name", "quiet", "json", "config", "log-format"}

// getViaDaemon hands the download of rawURL to the daemon and shows its
// progress until the file is complete (the daemon then seeds it) or the
// job fails. Interrupted, it stops watching; the daemon goes on.
func getViaDaemon(ctx context.Context, e *env, fs *flagSet, rawURL string, g daemonGet) error {
	var other []string
	fs.Visit(func(f *pflag.Flag) {
		// Settings from the config file or the environment are for gets
		// run here; only the command line's own choices are refused.
		if !slices.Contains(daemonGetFlags, f.Name) && fs.onCommandLine(f.Name) {
			other = append(other, "--"+f.Name)
		}
	})
	if len(other) > 0 {
		return usageErrorf("%s: not with --daemon (the daemon's settings apply)", strings.Join(other, ", "))
	}
	if g.output == "-" {
		return usageErrorf("-o - (stdout) is not for --daemon: the daemon writes files")
	}
	if _, err := fetch.ParseURL(rawURL); err != nil {
		return withCode(exitUsage, err)
	}
	if g.output != "" {
		abs, err := filepath.Abs(g.output)
		if err != nil {
			return withCode(exitUsage, err)
		}
		g.output = abs
	}
	dir, derr := daemon.DefaultStateDir()
	if g.api == "" {
		if derr != nil {
			return withCode(exitUsage, derr)
		}
		g.api = filepath.Join(dir, daemon.APISocket)
	}
	if g.token == "" && daemon.IsTCP(g.api) && derr == nil {
		// A TCP API's token, where a daemon of the same user keeps it.
		if b, err := os.ReadFile(filepath.Join(dir, daemon.TokenFile)); err == nil {
			g.token = strings.TrimSpace(string(b))
		}
	}
	c := daemon.NewClient(g.api, g.token)
	j, err := c.Download(ctx, rawURL, g.output)
	if err != nil {
		return withCode(apiExitCode(err), err)
	}
	name := filepath.Base(j.Path)
	var seen atomic.Pointer[daemon.Job]
	seen.Store(&j)
	progress := func() fetch.Progress {
		l := seen.Load()
		return fetch.Progress{Phase: l.Phase, Size: l.Size, Done: l.Done, Uploaded: l.Uploaded}
	}
	stop := func() {}
	if !g.quiet {
		fmt.Fprintf(e.stderr, "daemon job %s: %s -> %s\n", j.ID, rawURL, j.Path)
		stop = startProgress(e, progress, name)
	}
	last, err := watchJob(ctx, c, j.ID, func(j daemon.Job) { seen.Store(&j) })
	stop()
	switch {
	case ctx.Err() != nil:
		return withCode(exitFailure, fmt.Errorf("stopped watching; the daemon goes on with job %s", j.ID))
	case err != nil:
		return withCode(exitNetwork, err)
	case last.State == daemon.StateFailed:
		return withCode(exitFailure, fmt.Errorf("the daemon's download failed: %s", last.Error))
	case last.State == daemon.StatePaused:
		return withCode(exitFailure, fmt.Errorf("job %s was paused", j.ID))
	}
	if g.asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(last); err != nil {
			return withCode(exitIO, err)
		}
	}
	if !g.quiet {
		fmt.Fprintf(e.stderr, "%s: %s, verified (root %.16s...), %s from peers; the daemon seeds it\n",
			name, units.Bytes(last.Size), last.Root, units.Bytes(last.FromPeers))
	}
	return nil
}

// apiExitCode maps an error of the daemon's API to get's exit codes: a
// request the daemon refused is a usage error (2), no answer a network one
// (4).
func apiExitCode(err error) int {
	var api *daemon.APIError
	if !errors.As(err, &api) {
		return exitNetwork
	}
	switch api.Status {
	case 400, 401, 403, 409, 429:
		return exitUsage
	}
	return exitFailure
}

// watchJob polls job id until it is complete, seeding, failed, paused or
// gone, calling seen with each state, and returns the last.
func watchJob(ctx context.Context, c *daemon.Client, id string, seen func(daemon.Job)) (daemon.Job, error) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		j, err := c.Job(ctx, id)
		if err != nil {
			return j, err
		}
		seen(j)
		switch j.State {
		case daemon.StateSeeding, daemon.StateComplete, daemon.StateFailed, daemon.StatePaused:
			return j, nil
		}
		select {
		case <-ctx.Done():
			return j, nil
		case <-t.C:
		}
	}
}
