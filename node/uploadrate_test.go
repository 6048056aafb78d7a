package node_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/internal/ratelimit"
	"github.com/stampede-dev/stampede/node"
)

// TestUploadLimit: a seed capped at 64 KiB/s (get and seed's
// --max-upload-rate) sends a 256 KiB file no faster than that, whatever
// the downloader could take; uncapped, the same transfer takes a fraction
// of the time.
func TestUploadLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate = 64 * KiB
		took := func(limit *ratelimit.Limiter) time.Duration {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			nw := memnet.New()
			data, m := testFile(t, 256*KiB, 16*KiB, 27)
			m.Trackers = []string{serveTracker(t, nw)}
			seed := openStore(t, m, data, func(int) bool { return true })
			startNode(t, ctx, nw, node.Config{Manifest: m, Store: seed, Trackers: m.Trackers, SeedForever: true, UploadLimit: limit})
			st := openStore(t, m, data, func(int) bool { return false })
			// Timed from the first piece on, so the time to join (the
			// tracker may not know the seed yet) does not count.
			var first time.Time
			onPiece := func(int) {
				if first.IsZero() {
					first = time.Now()
				}
			}
			tn := startNode(t, ctx, nw, node.Config{Manifest: m, Store: st, Trackers: m.Trackers, SeedForever: true, OnPiece: onPiece})
			tn.wait(t, ctx)
			return tn.complete.Sub(first)
		}
		capped := took(ratelimit.New(rate))
		free := took(nil)
		// After the first piece, 15 more of 16 KiB; the bucket lets one
		// 16 KiB chunk through at once (ratelimit.New), the rest comes at the
		// rate.
		least := time.Second * time.Duration(15*16*KiB-16*KiB) / time.Duration(rate)
		t.Logf("the last 240 KiB capped at 64 KiB/s in %v (at least %v), uncapped in %v", capped, least, free)
		if capped < least {
			t.Errorf("capped at 64 KiB/s, the last 240 KiB went in %v, under the %v the cap allows", capped, least)
		}
		if free >= least {
			t.Errorf("uncapped, the last 240 KiB took %v: the test cannot tell the cap's effect", free)
		}
	})
}
