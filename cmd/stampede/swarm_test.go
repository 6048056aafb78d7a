package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/fetch"
)

// These tests run the swarm's commands as a user would, in-process:
// `serve` (with its embedded tracker, or naming a standalone `tracker`),
// then `get` and `seed` trading pieces over loopback.

// result waits for a `get --json` and decodes its summary, which must
// say it took the swarm path.
func (r *running) result(t *testing.T, what string) (fetch.Result, cmdResult) {
	t.Helper()
	c := r.wait(t, what)
	if c.code != 0 {
		t.Fatalf("%s exited %d: %s", what, c.code, r.stderr.String())
	}
	var res fetch.Result
	if err := json.Unmarshal([]byte(c.stdout), &res); err != nil {
		t.Fatalf("%s --json output %q: %v", what, c.stdout, err)
	}
	if res.Swarm == nil {
		t.Fatalf("%s: no swarm in the summary %+v: it did not take the swarm path", what, res)
	}
	return res, c
}

// waitFor polls cond every 10 ms for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestGetSeedTimeAndOriginReasons: a first `get --seed-time 3s` stays a
// seed for 3 s after its file is complete, and a second `get` started in
// that time takes its pieces from it. What both say in --json about why
// they went to the origin is what the origin's /metrics counted.
func TestGetSeedTimeAndOriginReasons(t *testing.T) {
	const seedTime = 3 * time.Second
	www := t.TempDir()
	data := randomBytes(3<<20+5, 21)
	writeFile(t, www, "f.bin", data)
	base := startServe(t, www)
	dir := t.TempDir()
	outA, outB := filepath.Join(dir, "a.bin"), filepath.Join(dir, "b.bin")

	a := startCmd(t, t.Context(), "get", base+"/f.bin", "-o", outA, "-q", "--json",
		"--peer-listen", "127.0.0.1:0", "--seed-time", seedTime.String())
	// The file appears under its name once complete; A goes on seeding.
	// Its last write is when it was complete, or just before.
	var completeA time.Time
	waitFor(t, "the first download to complete", func() bool {
		fi, err := os.Stat(outA)
		if err == nil {
			completeA = fi.ModTime()
		}
		return err == nil
	})
	b := startCmd(t, t.Context(), "get", base+"/f.bin", "-o", outB, "-q", "--json", "--peer-listen", "127.0.0.1:0")
	resB, _ := b.result(t, "the second get")
	resA, rA := a.result(t, "the first get")
	sameFile(t, outA, data)
	sameFile(t, outB, data)

	seeded := rA.ended.Sub(completeA)
	t.Logf("A: complete, then left %v later; sent %d bytes to peers; origin requests %v", seeded.Round(time.Millisecond), resA.Swarm.BytesToPeers, resA.OriginRequests)
	t.Logf("B: %d of %d bytes from peers; origin requests %v", resB.Swarm.BytesFromPeers, len(data), resB.OriginRequests)
	if seeded < seedTime || seeded > seedTime+3*time.Second {
		t.Errorf("the first get left %v after its file was complete, --seed-time %v", seeded, seedTime)
	}
	if resA.Swarm.BytesToPeers == 0 || resB.Swarm.BytesFromPeers == 0 {
		t.Errorf("A sent %d bytes to peers and B got %d from peers: the seed did not serve", resA.Swarm.BytesToPeers, resB.Swarm.BytesFromPeers)
	}

	// Every file GET both made, by the reason they gave, is what the origin
	// counted ("probe" is a HEAD and "manifest" not a file request).
	sum := map[string]int{}
	for _, res := range []fetch.Result{resA, resB} {
		for reason, n := range res.OriginRequests {
			if reason != "probe" && reason != "manifest" {
				sum[reason] += n
			}
		}
	}
	total := 0
	for reason, n := range sum {
		total += n
		if got := metric(t, base, fmt.Sprintf(`stampede_origin_file_requests_total{reason=%q}`, reason)); int(got) != n {
			t.Errorf("reason %s: the gets made %d requests, the origin counted %v", reason, n, got)
		}
	}
	if sum["origin:no-peers"] == 0 {
		t.Errorf("origin requests %v: the first get, alone, should have gone to the origin as origin:no-peers", sum)
	}
	if got := metric(t, base, `stampede_origin_file_requests_total{reason="other"}`); got != 0 {
		t.Errorf("the origin counted %v requests with an unknown reason", got)
	}
	counted := 0.0
	for _, r := range []string{"none", "piece", "retry-late", "retry-error", "stream",
		"origin:no-peer-has-it", "origin:no-peers", "origin:stalled", "origin:peers-failing"} {
		counted += metric(t, base, fmt.Sprintf(`stampede_origin_file_requests_total{reason=%q}`, r))
	}
	if int(counted) != total {
		t.Errorf("the origin counted %v file requests, the gets made %d", counted, total)
	}
}

// TestSeedCommand: `stampede seed FILE` serves FILE to its swarm until
// interrupted: with --url it checks FILE against the origin's manifest and
// takes the trackers from there; with --tracker it computes the manifest
// and announces to the trackers named. A get then takes every piece from
// the seed rather than from the origin.
func TestSeedCommand(t *testing.T) {
	data := randomBytes(2<<20+3, 22)
	local := filepath.Join(t.TempDir(), "copy.bin")
	writeFile(t, filepath.Dir(local), "copy.bin", data)

	t.Run("errors", func(t *testing.T) {
		www := t.TempDir()
		writeFile(t, www, "f.bin", data)
		base := startServe(t, www)
		other := filepath.Join(t.TempDir(), "other.bin")
		writeFile(t, filepath.Dir(other), "other.bin", randomBytes(len(data), 23))
		for _, tc := range []struct {
			args []string
			code int
			msg  string
		}{
			{[]string{"seed"}, exitUsage, "want exactly one FILE"},
			{[]string{"seed", local}, exitUsage, "give --url URL or --tracker URL"},
			{[]string{"seed", local, "--url", base + "/f.bin", "--tracker", "http://127.0.0.1:1/announce"}, exitUsage, "give --url URL or --tracker URL"},
			{[]string{"seed", local, "--url", base + "/f.bin", "--max-upload-rate", "fast"}, exitUsage, "--max-upload-rate"},
			{[]string{"seed", filepath.Join(t.TempDir(), "absent"), "--url", base + "/f.bin"}, exitIO, "no such file"},
			{[]string{"seed", other, "--url", base + "/f.bin"}, exitVerify, "is not the file at"},
		} {
			code, _, stderr := runCmd(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.msg) {
				t.Errorf("%v: exit %d, %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.msg)
			}
		}
	})

	// seedAndGet starts the seed with args, waits until the tracker at
	// trackerBase counts it, then downloads from the origin at base.
	seedAndGet := func(t *testing.T, base, trackerBase string, args ...string) {
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		before := metric(t, trackerBase, "stampede_tracker_peers")
		seed := startCmd(t, ctx, append([]string{"seed", local, "--peer-listen", "127.0.0.1:0"}, args...)...)
		waitFor(t, "the seed to announce itself", func() bool { return metric(t, trackerBase, "stampede_tracker_peers") > before })

		out := filepath.Join(t.TempDir(), "got.bin")
		res, _ := startCmd(t, t.Context(), "get", base+"/f.bin", "-o", out, "-q", "--json", "--peer-listen", "127.0.0.1:0").result(t, "get")
		sameFile(t, out, data)
		t.Logf("get: %d of %d bytes from peers; origin requests %v", res.Swarm.BytesFromPeers, len(data), res.OriginRequests)
		// A complete seed holds every piece: origin protection keeps the
		// get off the origin for all of them.
		if res.Swarm.BytesFromPeers != int64(len(data)) {
			t.Errorf("the get took %d of %d bytes from peers, want all from the seed", res.Swarm.BytesFromPeers, len(data))
		}
		if got := metric(t, base, `stampede_origin_file_requests_total{reason="origin:no-peer-has-it"}`) +
			metric(t, base, `stampede_origin_file_requests_total{reason="origin:no-peers"}`); got != 0 {
			t.Errorf("the origin served %v swarm piece requests while a seed had every piece", got)
		}

		stop()
		if r := seed.wait(t, "seed"); r.code != 0 {
			t.Fatalf("seed exited %d after an interrupt: %s", r.code, seed.stderr.String())
		}
		if msg := seed.stderr.String(); !strings.Contains(msg, "seeding "+local) || !strings.Contains(msg, "to 1 peers") {
			t.Errorf("seed's report %q: want the file it seeds and the one peer it served", msg)
		}
	}

	t.Run("url", func(t *testing.T) {
		www := t.TempDir()
		writeFile(t, www, "f.bin", data)
		base := startServe(t, www)
		seedAndGet(t, base, base, "--url", base+"/f.bin")
	})

	// A standalone tracker, named by the origin's manifests and by the
	// seed, which computes the same manifest from its copy.
	t.Run("tracker", func(t *testing.T) {
		addr, _ := startDaemon(t, "tracker", "--listen", "127.0.0.1:0", "-q")
		trackerBase := "http://" + addr
		www := t.TempDir()
		writeFile(t, www, "f.bin", data)
		base := startServe(t, www, "--tracker", trackerBase+"/announce")
		seedAndGet(t, base, trackerBase, "--tracker", trackerBase+"/announce")
	})
}
