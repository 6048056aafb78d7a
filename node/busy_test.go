package node

import (
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/swarm"
)

// TestUploadsFull: while we hold fewer than rampPieces pieces and lack
// some, the busy bound counts the pieces waiting for a turn or being sent
// as well as those queued, and is rampQueueTime of upload, at least
// rampMinQueued; from rampPieces on, or with a small file complete, it
// counts the queued pieces only, up to uploadQueueTime of upload, at
// least minUploadsQueued.
func TestUploadsFull(t *testing.T) {
	const pieces, size = rampPieces + 1, 64 << 10
	now := time.Now()
	schedOf := func(pieces, have int) *swarm.Scheduler {
		set := pieceset.New(pieces)
		for i := range have {
			set.Add(i)
		}
		return swarm.New(swarm.Config{NumPieces: pieces, PieceLen: func(int) int64 { return size }}, set, now)
	}
	sched := func(have int) *swarm.Scheduler { return schedOf(pieces, have) }
	p := &peerConn{uploads: make(chan upload, uploadQueue)}
	n := &Node{
		m:     &manifest.Manifest{PieceSize: size},
		peers: map[swarm.PeerID]*peerConn{1: p},
	}
	check := func(what string, want bool) {
		t.Helper()
		if got := n.uploadsFull(); got != want {
			t.Errorf("%s: full %v, want %v", what, got, want)
		}
	}
	queue := func(k int) {
		for len(p.uploads) > 0 {
			<-p.uploads
		}
		for range k {
			p.uploads <- upload{}
		}
	}

	n.sched = sched(rampPieces - 1)
	n.uploading.Store(rampMinQueued - 1) // sent, or waiting for a turn
	check("ramp, uploads below the bound", false)
	n.uploading.Add(1)
	check("ramp, uploads at the bound", true)
	n.sched = schedOf(4, 4)
	check("a small file complete, uploads not counted", false)
	n.sched = sched(rampPieces - 1)
	n.upRate = 2 * rampMinQueued * size / rampQueueTime.Seconds()
	check("ramp, faster link", false)
	queue(rampMinQueued)
	check("ramp, faster link, queued pieces too", true)

	n.sched = sched(rampPieces)
	n.upRate = 0
	queue(minUploadsQueued - 1)
	check("past the ramp, uploads not counted", false)
	queue(minUploadsQueued)
	check("past the ramp, queue at the bound", true)
	n.upRate = 2 * minUploadsQueued * size / uploadQueueTime.Seconds()
	check("past the ramp, faster link", false)
}
