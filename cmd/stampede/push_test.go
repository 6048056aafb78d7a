package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/daemon"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/sign"
)

// pushBed is a cluster of daemons in this process: racks × hosts, hosts
// r<rack>h<n>, each installing under root/<host>/; down hosts have an
// agent address nothing listens on.
type pushBed struct {
	dir, clusterFile, key string
	srv                   map[string]*daemon.Server
}

// heavyLoad is a load source saying the host is loaded.
type heavyLoad struct{}

func (heavyLoad) Load() (cluster.HostLoad, error) { return cluster.HostLoad{CPU: 100}, nil }

func startPushBed(t *testing.T, racks, hosts int, down []string, slow string) *pushBed {
	t.Helper()
	return startPushBedLoad(t, racks, hosts, down, func(_ *cluster.Cluster, host string) cluster.LoadSource {
		if host == slow {
			return heavyLoad{}
		}
		return nil
	})
}

// startPushBedLoad is startPushBed with each host's load source (nil:
// not throttled) from load.
func startPushBedLoad(t *testing.T, racks, hosts int, down []string, load func(c *cluster.Cluster, host string) cluster.LoadSource) *pushBed {
	t.Helper()
	b := &pushBed{dir: t.TempDir(), srv: map[string]*daemon.Server{}}
	b.key = filepath.Join(b.dir, "cluster.key")
	if code, _, stderr := runCmd(t, "keygen", "-o", b.key); code != 0 {
		t.Fatalf("keygen: %s", stderr)
	}
	pub, err := sign.LoadPublicKey(b.key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	var (
		toml       strings.Builder
		peers, pls = map[string]net.Listener{}, map[string]net.Listener{}
		names      []string
	)
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	for r := range racks {
		var rack []string
		for h := range hosts {
			n := fmt.Sprintf("r%dh%d", r, h)
			names, rack = append(names, n), append(rack, strconv.Quote(n))
			peers[n], pls[n] = listen(), listen()
			fmt.Fprintf(&toml, "[host.%s]\nagent = %q\npeer = %q\n", n, pls[n].Addr(), peers[n].Addr())
		}
		fmt.Fprintf(&toml, "[rack.r%d]\nuplink = \"1Gbit\"\nhosts = [%s]\n", r, strings.Join(rack, ", "))
	}
	b.clusterFile = filepath.Join(b.dir, "cluster.toml")
	if err := os.WriteFile(b.clusterFile, []byte(toml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Load(b.clusterFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if contains(down, n) {
			peers[n].Close()
			pls[n].Close()
			continue
		}
		cfg := daemon.Config{
			StateDir: t.TempDir(), PeerListener: peers[n], NoAPI: true,
			Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			Push: daemon.PushConfig{Cluster: c, Key: pub, Host: n, Listener: pls[n],
				DestPrefixes: []string{filepath.Join(b.dir, "root", n)}, Fallback: time.Minute},
		}
		if ls := load(c, n); ls != nil {
			cfg.Push.MaxLoad, cfg.Push.LoadSource = 1, ls
		}
		srv, err := daemon.Start(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		b.srv[n] = srv
		t.Cleanup(func() { srv.Close() })
	}
	return b
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// push runs stampede push with --json and returns the exit code, the
// report and the progress lines.
func (b *pushBed) push(t *testing.T, file string, args ...string) (int, pushReport, int) {
	t.Helper()
	all := append([]string{"push", file, "--cluster", b.clusterFile, "--key", b.key, "--json",
		"--dest", filepath.Join(b.dir, "root", "{host}", "app.bin"), "--origin-listen", "127.0.0.1:0"}, args...)
	code, stdout, stderr := runCmd(t, all...)
	var (
		rep      pushReport
		progress int
	)
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct{ Type string }
		json.Unmarshal(sc.Bytes(), &line)
		switch line.Type {
		case "progress":
			progress++
		case "report":
			if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("stdout line %q", sc.Text())
		}
	}
	if rep.Type != "report" {
		t.Fatalf("push exited %d with no report; stderr:\n%s", code, stderr)
	}
	return code, rep, progress
}

func pushFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	rng := rand.New(rand.NewPCG(uint64(n), 9))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	path := filepath.Join(t.TempDir(), "app.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// TestPushCommand: a push to 2 racks of 3, one host down from the start
// and one killed mid-push (a slow one, held down by its load): the four
// others get the file and run --then; the report says who failed and why,
// the bytes add up, and the exit code says "some".
func TestPushCommand(t *testing.T) {
	b := startPushBed(t, 2, 3, []string{"r1h2"}, "r0h0")
	file, data := pushFile(t, 4<<20+17)
	// Kill the slow host once it has some of the file.
	var kill sync.WaitGroup
	kill.Go(func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if fi, err := os.Stat(filepath.Join(b.dir, "root", "r0h0", "app.bin.part")); err == nil && fi.Size() > 0 {
				time.Sleep(300 * time.Millisecond)
				b.srv["r0h0"].Close()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	code, rep, progress := b.push(t, file, "--then", "wc -c < app.bin > count", "--dead-after", "2s", "--deadline", "90s")
	kill.Wait()
	if code != exitPushSome {
		t.Errorf("exit %d, want %d (some)", code, exitPushSome)
	}
	if rep.Hosts != 6 || rep.Got != 4 || progress == 0 {
		t.Errorf("report: %d of %d got it, %d progress lines", rep.Got, rep.Hosts, progress)
	}
	causes := map[string]string{}
	for _, f := range rep.Failures {
		causes[f.Host] = f.Cause
	}
	if !strings.Contains(causes["r1h2"], "host down") || !strings.Contains(causes["r0h0"], "died mid-push") || len(causes) != 2 {
		t.Errorf("failures %v: want r1h2 down and r0h0 died mid-push", causes)
	}
	var rackBytes int64
	for _, r := range rep.Racks {
		for _, h := range r.Hosts {
			if h.Host == "r1h2" || h.Host == "r0h0" {
				continue
			}
			sameFile(t, filepath.Join(b.dir, "root", h.Host, "app.bin"), data)
			count, _ := os.ReadFile(filepath.Join(b.dir, "root", h.Host, "count"))
			if strings.TrimSpace(string(count)) != strconv.Itoa(len(data)) || h.Then == nil || h.Then.Exit != 0 {
				t.Errorf("%s: --then wrote %q, %+v", h.Host, count, h.Then)
			}
			if !h.Installed || h.Seconds <= 0 || h.State != daemon.PushDone {
				t.Errorf("%s: %+v", h.Host, h)
			}
			if got := h.FromRack + h.FromOtherRacks + h.FromOrigin; got < int64(len(data)) {
				t.Errorf("%s: %d bytes in all, less than the file", h.Host, got)
			}
			rackBytes += h.FromRack
		}
	}
	// The killed host's bytes are not counted: it could not say.
	if rep.OriginCopies < 0.8 || rep.OriginCopies > 1.6 || rackBytes == 0 {
		t.Errorf("origin %.2f copies, %d bytes within racks", rep.OriginCopies, rackBytes)
	}
	t.Logf("origin %.2f copies; median %.2fs, last %.2fs; racks %+v", rep.OriginCopies, rep.MedianSeconds, rep.LastSeconds, rep.Racks)
}

// TestPushSelection: --hosts rack=r1 pushes to r1's hosts alone; every
// host gets it, so the exit code is 0; a selection naming nothing is a
// usage error.
func TestPushSelection(t *testing.T) {
	b := startPushBed(t, 2, 2, nil, "")
	file, data := pushFile(t, 1<<20)
	code, rep, _ := b.push(t, file, "--hosts", "rack=r1")
	if code != exitOK || rep.Got != 2 || rep.Hosts != 2 {
		t.Fatalf("exit %d, %d of %d; %+v", code, rep.Got, rep.Hosts, rep.Failures)
	}
	for _, h := range []string{"r1h0", "r1h1"} {
		sameFile(t, filepath.Join(b.dir, "root", h, "app.bin"), data)
	}
	for _, h := range []string{"r0h0", "r0h1"} {
		if _, err := os.Stat(filepath.Join(b.dir, "root", h, "app.bin")); err == nil {
			t.Errorf("%s got the file, not being selected", h)
		}
	}
	// Again, the same file: nothing moves.
	code, rep, _ = b.push(t, file, "--hosts", "r1h*")
	if code != exitOK || rep.OriginBytes != 0 {
		t.Errorf("the same file again: exit %d, %d bytes from the origin", code, rep.OriginBytes)
	}
	for _, r := range rep.Racks {
		for _, h := range r.Hosts {
			if h.Reused != int64(len(data)) || h.FromRack != 0 {
				t.Errorf("the same file again: %s reused %d, %d from its rack", h.Host, h.Reused, h.FromRack)
			}
		}
	}
	for _, args := range [][]string{
		{"--hosts", "rack=r9"},
		{"--hosts", "rack=r0", "--hosts", "r1h0"},
		{"--dest", "relative/app.bin"},
	} {
		all := append([]string{"push", file, "--cluster", b.clusterFile, "--key", b.key, "--dest", "/tmp/x"}, args...)
		if code, _, stderr := runCmd(t, all...); code != exitUsage {
			t.Errorf("%v: exit %d, want 2: %s", args, code, stderr)
		}
	}
	// A FILE missing, or not a regular file, is bad input too (docs/push.md).
	for _, f := range []string{filepath.Join(b.dir, "none.bin"), b.dir} {
		code, _, stderr := runCmd(t, "push", f, "--cluster", b.clusterFile, "--key", b.key, "--dest", "/tmp/x")
		if code != exitUsage || !strings.Contains(stderr, "not a regular file") {
			t.Errorf("push %s: exit %d, want 2: %s", f, code, stderr)
		}
	}
}

// TestPushAllDown: no agent answers: exit 12, each host down.
func TestPushAllDown(t *testing.T) {
	b := startPushBed(t, 1, 2, []string{"r0h0", "r0h1"}, "")
	file, _ := pushFile(t, 64<<10)
	code, rep, _ := b.push(t, file)
	if code != exitPushNone || rep.Got != 0 || len(rep.Failures) != 2 {
		t.Errorf("exit %d, report %+v", code, rep)
	}
}

// TestPushThenFails: --then fails on one host: both hosts installed the
// file, the report gives the failing one's cause and its command's
// output, and the exit code is 11 (some), not 12 (none installed).
func TestPushThenFails(t *testing.T) {
	b := startPushBed(t, 1, 2, nil, "")
	file, data := pushFile(t, 256<<10)
	then := `case "$STAMPEDE_PUSH_DEST" in */r0h1/*) echo boom on r0h1; exit 3;; esac; echo fine`
	code, rep, _ := b.push(t, file, "--then", then)
	if code != exitPushSome || rep.Exit != exitPushSome {
		t.Errorf("exit %d (report %d), want %d", code, rep.Exit, exitPushSome)
	}
	if rep.Got != 1 || rep.Installed != 2 || rep.Hosts != 2 {
		t.Errorf("report: %d got it, %d installed, of %d", rep.Got, rep.Installed, rep.Hosts)
	}
	if len(rep.Failures) != 1 || rep.Failures[0].Host != "r0h1" || rep.Failures[0].Cause != "--then failed with status 3" {
		t.Errorf("failures %+v: want r0h1's --then, status 3", rep.Failures)
	}
	for _, h := range rep.Racks[0].Hosts {
		sameFile(t, filepath.Join(b.dir, "root", h.Host, "app.bin"), data)
		want, exit, state := "fine", 0, daemon.PushDone
		if h.Host == "r0h1" {
			want, exit, state = "boom on r0h1", 3, daemon.PushFailed
		}
		if h.Then == nil || h.Then.Exit != exit || strings.TrimSpace(h.Then.Output) != want || h.State != state || !h.Installed {
			t.Errorf("%s: %+v, then %+v", h.Host, h, h.Then)
		}
	}
	// The table says it too.
	var out bytes.Buffer
	(&pusher{e: &env{stdout: &out}, file: file, dest: "/d"}).printReport(&rep)
	if !strings.Contains(out.String(), "1 of 2 hosts got it") || !strings.Contains(out.String(), "FAILED r0h1: --then failed with status 3") {
		t.Errorf("the report's table:\n%s", out.String())
	}
}

// TestPushAgentFlags: the daemon's push flags fill its PushConfig, and
// their mistakes are usage errors.
func TestPushAgentFlags(t *testing.T) {
	dir := t.TempDir()
	clusterFile := filepath.Join(dir, "cluster.toml")
	if err := os.WriteFile(clusterFile, []byte("[rack.r1]\nhosts = [\"web-1\"]\n[host.web-1]\nagent = \"10.0.0.1\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[rack.r1]\nhosts = [\"web-1\"]\nuplnk = \"1Gbit\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	priv := sign.GenerateKey()
	pub := priv.Public().(ed25519.PublicKey)
	pubFile := filepath.Join(dir, "cluster.key.pub")
	if err := os.WriteFile(pubFile, sign.MarshalPublicKey(pub), 0o644); err != nil {
		t.Fatal(err)
	}
	apply := func(args ...string) (daemon.Config, error) {
		t.Helper()
		fs := newFlagSet(&env{}, "daemon", "", "")
		f := addPushAgentFlags(fs)
		if err := fs.FlagSet.Parse(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var cfg daemon.Config
		return cfg, f.apply(&cfg)
	}
	cfg, err := apply()
	if err != nil || cfg.Push.Cluster != nil {
		t.Errorf("no flags: %v, %+v", err, cfg.Push)
	}
	cfg, err = apply("--cluster", clusterFile, "--cluster-key", pubFile, "--cluster-host", "web-1", "--push-listen", "127.0.0.1:7999",
		"--push-dest-prefix", "/srv/a", "--push-dest-prefix", "/srv/b", "--max-load", "1.5", "--max-iowait", "30%")
	p := cfg.Push
	if err != nil || p.Cluster == nil || p.Cluster.Hosts["web-1"] == nil || !pub.Equal(p.Key) || p.Host != "web-1" || p.Listen != "127.0.0.1:7999" ||
		strings.Join(p.DestPrefixes, ",") != "/srv/a,/srv/b" || p.MaxLoad != 1.5 || p.MaxIOWait != 0.3 {
		t.Errorf("every flag: %v, %+v", err, p)
	}
	// The key in its one-line form; a share without %; the defaults.
	cfg, err = apply("--cluster", clusterFile, "--cluster-key", sign.FormatPublicKey(pub), "--push-dest-prefix", "/srv", "--max-iowait", "0.25")
	if p := cfg.Push; err != nil || !pub.Equal(p.Key) || p.MaxIOWait != 0.25 || p.MaxLoad != 0 || p.Host != "" || p.Listen != "" {
		t.Errorf("one-line key: %v, %+v", err, p)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--cluster-key", pubFile}, "--cluster-key configures the push service: it needs --cluster FILE"},
		{[]string{"--push-dest-prefix", "/srv"}, "--push-dest-prefix configures"},
		{[]string{"--cluster-host", "web-1", "--push-listen", ":7882"}, "--cluster-host, --push-listen configure the push service: they need --cluster"},
		{[]string{"--max-load", "2"}, "--max-load configures the push service: it needs --cluster"},
		{[]string{"--max-iowait", "30%"}, "--max-iowait configures"},
		{[]string{"--max-load", "0"}, "--max-load configures"},
		{[]string{"--cluster", clusterFile, "--push-dest-prefix", "/srv"}, "needs --cluster-key"},
		{[]string{"--cluster", clusterFile, "--cluster-key", pubFile}, "needs --push-dest-prefix"},
		{[]string{"--cluster", bad, "--cluster-key", pubFile, "--push-dest-prefix", "/srv"}, "uplnk"},
		{[]string{"--cluster", filepath.Join(dir, "none.toml"), "--cluster-key", pubFile, "--push-dest-prefix", "/srv"}, "--cluster"},
		{[]string{"--cluster", clusterFile, "--cluster-key", "ed25519:nonsense", "--push-dest-prefix", "/srv"}, "--cluster-key"},
		{[]string{"--cluster", clusterFile, "--cluster-key", pubFile, "--push-dest-prefix", "/srv", "--max-load", "-1"}, "--max-load"},
		{[]string{"--cluster", clusterFile, "--cluster-key", pubFile, "--push-dest-prefix", "/srv", "--max-load", "high"}, "--max-load"},
		{[]string{"--cluster", clusterFile, "--cluster-key", pubFile, "--push-dest-prefix", "/srv", "--max-iowait", "120%"}, "--max-iowait"},
		{[]string{"--cluster", clusterFile, "--cluster-key", pubFile, "--push-dest-prefix", "/srv", "--max-iowait", "some"}, "--max-iowait"},
	} {
		_, err := apply(c.args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v; want a usage error saying %q", c.args, err, c.says)
		}
	}
	// The daemon does not start with a push flag and no --cluster (bounded:
	// were it to start, it would stop at the timeout, with another code).
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	code := run(ctx, []string{"daemon", "--state-dir", t.TempDir(), "--peer-listen", "127.0.0.1:0", "--max-iowait", "30%"},
		&env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr})
	if code != exitUsage || !strings.Contains(stderr.String(), "--max-iowait configures the push service") {
		t.Errorf("daemon --max-iowait without --cluster: exit %d, %s", code, stderr.String())
	}
}

// loadKnob is a load source a test turns: loaded or not.
type loadKnob struct{ loaded atomic.Bool }

func (k *loadKnob) Load() (cluster.HostLoad, error) {
	if k.loaded.Load() {
		return cluster.HostLoad{CPU: 100}, nil
	}
	return cluster.HostLoad{}, nil
}

// TestPushSlowRack: a rack's active representative is held near the
// throttle's floor by its load, slow but not stopped. push finds the rack
// behind the others and tells its standby to take over: the rack's
// other hosts finish long before the slow one could have brought the
// file in; the report says which rack was behind, when, and who took
// over.
func TestPushSlowRack(t *testing.T) {
	file, data := pushFile(t, 2<<20)
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "app.bin")
	if err != nil {
		t.Fatal(err)
	}
	knob := &loadKnob{}
	knob.loaded.Store(true)
	var slow, standby string
	b := startPushBedLoad(t, 2, 3, nil, func(c *cluster.Cluster, host string) cluster.LoadSource {
		plan, err := cluster.NewPlan(c, c.HostNames(), m.Root[:])
		if err != nil {
			t.Fatal(err)
		}
		switch r := plan.Roles[host]; {
		case r.Rack != "r0":
		case r.Standby:
			standby = host
		case r.RackRep:
			slow = host
			return knob
		}
		return nil
	})
	if slow == "" || standby == "" {
		t.Fatal("rack r0 has no active and standby representatives")
	}
	// Once the rest of its rack has the file, the slow one is let go, so
	// the push ends.
	var release sync.WaitGroup
	release.Go(func() {
		defer knob.loaded.Store(false)
		deadline := time.Now().Add(60 * time.Second)
		for _, h := range []string{"r0h0", "r0h1", "r0h2"} {
			for h != slow && time.Now().Before(deadline) {
				if _, err := os.Stat(filepath.Join(b.dir, "root", h, "app.bin")); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	code, rep, _ := b.push(t, file, "--behind-after", "1s", "--deadline", "90s")
	release.Wait()
	if code != exitOK || rep.Got != 6 {
		t.Fatalf("exit %d, %d of %d got it: %+v", code, rep.Got, rep.Hosts, rep.Failures)
	}
	t.Logf("behind: %+v", rep.Behind)
	var r0 *pushBehind
	for i := range rep.Behind {
		if rep.Behind[i].Rack == "r0" {
			r0 = &rep.Behind[i]
		}
	}
	if r0 == nil || !slices.Equal(r0.TookOver, []string{standby}) || r0.Seconds <= 0 {
		t.Fatalf("rack r0 not found behind, or %s did not take over: %+v", standby, rep.Behind)
	}
	floor := float64(len(data)) / (64 << 10)
	for _, r := range rep.Racks {
		for _, h := range r.Hosts {
			sameFile(t, filepath.Join(b.dir, "root", h.Host, "app.bin"), data)
			t.Logf("%s (%s): done at %.1fs; rack %d, other racks %d, origin %d", h.Host, h.Role, h.Seconds, h.FromRack, h.FromOtherRacks, h.FromOrigin)
			if h.Rack != "r0" || h.Host == slow {
				continue
			}
			if h.Host == standby && (h.Role != "standby representative (took over)" || h.FromOtherRacks+h.FromOrigin == 0) {
				t.Errorf("the standby did not take over: %+v", h)
			}
			if h.Seconds > floor/2 {
				t.Errorf("%s done at %.1fs: not much sooner than through the slow representative (%.0fs)", h.Host, h.Seconds, floor)
			}
		}
	}
}
