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

// These tests run the swarm's commands as a user would: `serve` with its
// embedded tracker, then `get` and `seed` processes in-process, trading
// pieces over loopback.

// cmdResult is what a command run by startCmd left.
type cmdResult struct {
	code           int
	stdout, stderr *syncBuffer
	ended          time.Time
}

// startCmd runs `stampede args...` in-process until ctx ends; the result
// arrives on the channel when it returns.
func startCmd(ctx context.Context, args ...string) (<-chan cmdResult, *syncBuffer) {
	res := cmdResult{stdout: new(syncBuffer), stderr: new(syncBuffer)}
	e := &env{stdin: strings.NewReader(""), stdout: res.stdout, stderr: res.stderr}
	done := make(chan cmdResult, 1)
	go func() {
		res.code = run(ctx, args, e)
		res.ended = time.Now()
		done <- res
	}()
	return done, res.stderr
}

// await waits for a command started by startCmd.
func await(t *testing.T, done <-chan cmdResult, what string) cmdResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not end", what)
		return cmdResult{}
	}
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

func decodeResult(t *testing.T, r cmdResult, what string) fetch.Result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s exited %d: %s", what, r.code, r.stderr.String())
	}
	var res fetch.Result
	if err := json.Unmarshal([]byte(r.stdout.String()), &res); err != nil {
		t.Fatalf("%s --json output %q: %v", what, r.stdout.String(), err)
	}
	if res.Swarm == nil {
		t.Fatalf("%s: no swarm in the summary %+v: it did not take the swarm path", what, res)
	}
	return res
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

	doneA, _ := startCmd(t.Context(), "get", base+"/f.bin", "-o", outA, "-q", "--json",
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
	doneB, _ := startCmd(t.Context(), "get", base+"/f.bin", "-o", outB, "-q", "--json", "--peer-listen", "127.0.0.1:0")
	resB := decodeResult(t, await(t, doneB, "the second get"), "the second get")
	rA := await(t, doneA, "the first get")
	resA := decodeResult(t, rA, "the first get")
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

// TestSeedCommand: `stampede seed FILE --url URL` checks FILE against the
// origin's manifest and serves it to the swarm until interrupted; a get
// then takes its pieces from the seed rather than from the origin.
func TestSeedCommand(t *testing.T) {
	www := t.TempDir()
	data := randomBytes(2<<20+3, 22)
	writeFile(t, www, "f.bin", data)
	base := startServe(t, www)
	local := filepath.Join(t.TempDir(), "copy.bin")
	writeFile(t, filepath.Dir(local), "copy.bin", data)
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

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	peersBefore := metric(t, base, "stampede_tracker_peers")
	doneSeed, seedErr := startCmd(ctx, "seed", local, "--url", base+"/f.bin", "--peer-listen", "127.0.0.1:0")
	waitFor(t, "the seed to announce itself", func() bool { return metric(t, base, "stampede_tracker_peers") > peersBefore })

	out := filepath.Join(t.TempDir(), "got.bin")
	doneGet, _ := startCmd(t.Context(), "get", base+"/f.bin", "-o", out, "-q", "--json", "--peer-listen", "127.0.0.1:0")
	res := decodeResult(t, await(t, doneGet, "get"), "get")
	sameFile(t, out, data)
	t.Logf("get: %d of %d bytes from peers; origin requests %v", res.Swarm.BytesFromPeers, len(data), res.OriginRequests)
	// A complete seed holds every piece: origin protection keeps the get
	// off the origin for all of them.
	if res.Swarm.BytesFromPeers != int64(len(data)) {
		t.Errorf("the get took %d of %d bytes from peers, want all from the seed", res.Swarm.BytesFromPeers, len(data))
	}
	if got := metric(t, base, `stampede_origin_file_requests_total{reason="origin:no-peer-has-it"}`) +
		metric(t, base, `stampede_origin_file_requests_total{reason="origin:no-peers"}`); got != 0 {
		t.Errorf("the origin served %v swarm piece requests while a seed had every piece", got)
	}

	stop()
	r := await(t, doneSeed, "seed")
	if r.code != 0 {
		t.Fatalf("seed exited %d after an interrupt: %s", r.code, seedErr.String())
	}
	if !strings.Contains(seedErr.String(), "seeding "+local) || !strings.Contains(seedErr.String(), "to 1 peers") {
		t.Errorf("seed's report %q: want the file it seeds and the one peer it served", seedErr.String())
	}
}
