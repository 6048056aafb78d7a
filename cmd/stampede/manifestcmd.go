package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stampede-dev/stampede/internal/units"
	"github.com/stampede-dev/stampede/manifest"
)

func runManifest(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "manifest", "FILE", "Compute FILE's manifest (SHA-256 merkle tree over 16 KiB blocks, BEP 52 layout) and print it as JSON.")
	rootOnly := fs.Bool("root", false, "print only the root (equal to a BitTorrent v2 pieces root)")
	workers := fs.Int("workers", 0, "hashing goroutines (0: one per CPU)")
	stats := fs.Bool("stats", false, "print hashing time and throughput to stderr")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("want exactly one FILE, got %d arguments", len(pos))
	}
	f, err := os.Open(pos[0])
	if err != nil {
		return withCode(exitIO, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return withCode(exitIO, err)
	}
	if !fi.Mode().IsRegular() {
		return usageErrorf("%s is not a regular file", pos[0])
	}
	start := time.Now()
	m, err := manifest.FromReaderAt(f, fi.Size(), filepath.Base(pos[0]), *workers)
	if err != nil {
		return withCode(exitIO, err)
	}
	if *stats {
		d := time.Since(start)
		fmt.Fprintf(e.stderr, "hashed %s in %v: %s (%d pieces of %s)\n",
			units.Bytes(fi.Size()), d.Round(time.Millisecond), units.Rate(float64(fi.Size())/d.Seconds()),
			m.NumPieces(), units.Bytes(m.PieceSize))
	}
	if *rootOnly {
		fmt.Fprintln(e.stdout, m.Root)
		return nil
	}
	enc := json.NewEncoder(e.stdout)
	return enc.Encode(m)
}
