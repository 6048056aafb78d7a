package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/daemon"
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
		if n == slow {
			cfg.Push.MaxLoad, cfg.Push.LoadSource = 1, heavyLoad{}
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
