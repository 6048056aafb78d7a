package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/internal/units"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/store"
)

func runSeed(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "seed", "FILE (--url URL | --tracker URL)", `Seed a local copy of a file to its swarm until interrupted. With --url, the
file's manifest (and so its trackers) comes from the server, and FILE must be
the same content; with --tracker, the manifest is computed from FILE.`)
	var (
		src      string
		trackers []string
		listen   string
		upStr    string
		quiet    bool
	)
	fs.StringVar(&src, "url", "", "the file's `URL` on its origin (for the manifest and trackers)")
	fs.StringArrayVar(&trackers, "tracker", nil, "announce to tracker `URL` (repeatable)")
	fs.StringVar(&listen, "peer-listen", ":0", "accept peers on `HOST:PORT`")
	fs.StringVar(&upStr, "max-upload-rate", "0", "cap what we upload, `RATE` (0: unlimited)")
	fs.BoolVarP(&quiet, "quiet", "q", false, "log only warnings and errors")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("want exactly one FILE, got %d arguments", len(pos))
	}
	if (src == "") == (len(trackers) == 0) {
		return usageErrorf("give --url URL or --tracker URL")
	}
	up, err := units.ParseRate(upStr)
	if err != nil {
		return usageErrorf("--max-upload-rate: %v", err)
	}
	f, err := os.Open(pos[0])
	if err != nil {
		return withCode(exitIO, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return withCode(exitIO, err)
	}
	m, err := manifest.FromReaderAt(f, fi.Size(), filepath.Base(pos[0]), 0)
	f.Close()
	if err != nil {
		return withCode(exitIO, err)
	}
	m.Trackers = trackers
	var private *node.Private
	if src != "" {
		remote, rpriv, err := fetch.Join(ctx, http.DefaultClient, src)
		private = rpriv
		if err != nil {
			return withCode(getExitCode(err), err)
		}
		if remote.Root != m.Root || remote.Size != m.Size {
			return withCode(exitVerify, fmt.Errorf("%s (root %s, %d bytes) is not the file at %s (root %s, %d bytes)",
				pos[0], m.Root, m.Size, src, remote.Root, remote.Size))
		}
		m.Trackers = remote.Trackers
		if len(m.Trackers) == 0 {
			return withCode(exitProtocol, errors.New("the server's manifest names no tracker: nobody could find this seed"))
		}
	}
	st, err := store.OpenComplete(pos[0], m)
	if err != nil {
		return withCode(exitIO, err)
	}
	defer st.Close()
	nd, err := node.New(node.Config{
		Manifest: m, Store: st, Trackers: m.Trackers, ListenAddr: listen, Private: private,
		UploadLimit: ratelimit.New(up), SeedForever: true, Logger: e.logger(quiet, false),
	})
	if err != nil {
		return err
	}
	start := time.Now()
	fmt.Fprintf(e.stderr, "seeding %s (root %s) to %v\n", pos[0], m.Root, m.Trackers)
	err = nd.Run(ctx)
	s := nd.Stats()
	fmt.Fprintf(e.stderr, "seeded %s to %d peers in %v\n", units.Bytes(s.BytesToPeers), s.PeersSeen, time.Since(start).Round(time.Second))
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
