//go:build linux

package main

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/internal/units"
)

// TestPushNetns is the push's topology bench: racks of hosts in network
// namespaces, each rack a bridge joined to a core bridge by a veth shaped
// with tbf both ways (its uplink), each host behind its own shaped link,
// the origin on the core behind origin_up. It runs stampede push, every
// host pulling over HTTP from the origin (direct), a two-level tree (curl
// to one host per rack, then curl from it inside the rack) and BitTorrent
// (aria2c, the origin seeding, opentracker; systems=...+aria2), samples
// every shared link's tc counters every 0.5 s, and reports for each
// system the hosts' completion times, the origin's bytes, the most bytes
// into one rack over its uplink in copies of the file (rack_in_copies),
// and the highest 1 s load of a shared link over its budget, capacity less
// reserve (link_max_over_budget).
//
// Off unless STAMPEDETEST_PUSH_NETNS=1 (it needs root, ip, tc, curl and
// python3, and minutes); STAMPEDETEST_PUSH_SCENARIO overrides the
// defaults, e.g. "racks=4 hosts=6 size=128MiB host=100Mbit uplink=40Mbit
// origin=40Mbit reps=3", with "datacenters=2 dc_uplink=80Mbit" for
// datacenters of racks racks each; STAMPEDETEST_PUSH_OUT names a file
// for the JSON report.
func TestPushNetns(t *testing.T) {
	if os.Getenv("STAMPEDETEST_PUSH_NETNS") != "1" {
		t.Skip("the push topology bench runs with STAMPEDETEST_PUSH_NETNS=1")
	}
	if os.Geteuid() != 0 {
		t.Skip("the push topology bench needs root")
	}
	for _, tool := range []string{"ip", "tc", "curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the push topology bench needs %s", tool)
		}
	}
	sc := pushScenario{Racks: 2, Hosts: 3, Size: 32 << 20, Host: 100e6 / 8, Uplink: 40e6 / 8, Origin: 40e6 / 8, Reserve: 0.2, Reps: 1,
		Systems: []string{"push", "tree", "http"}}
	if err := sc.parse(os.Getenv("STAMPEDETEST_PUSH_SCENARIO")); err != nil {
		t.Fatal(err)
	}
	if sc.DCs > 0 && sc.DCUplink == 0 {
		sc.DCUplink = 2 * sc.Uplink
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "stampede")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rep := pushBenchReport{Scenario: sc, BoundSeconds: sc.bound()}
	for _, system := range sc.Systems {
		for i := range sc.Reps {
			run := runPushBench(t, sc, system, bin, filepath.Join(dir, fmt.Sprintf("%s-%d", system, i)), uint64(i))
			t.Logf("%s run %d: last %.1fs, median %.1fs, origin %.2f copies, rack_in_copies %.2f, link_max_over_budget %.2f",
				system, i, run.LastSeconds, run.MedianSeconds, run.OriginCopies, run.RackInCopies, run.LinkMaxOverBudget)
			rep.Runs = append(rep.Runs, run)
		}
	}
	rep.sum()
	out, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("report:\n%s", out)
	if f := os.Getenv("STAMPEDETEST_PUSH_OUT"); f != "" {
		if err := os.WriteFile(f, out, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// pushScenario is a push bench's topology: bytes and bytes/s.
type pushScenario struct {
	Racks   int      `json:"racks"`
	Hosts   int      `json:"hosts_per_rack"`
	Size    int64    `json:"size"`
	Host    int64    `json:"host_link"`
	Uplink  int64    `json:"rack_uplink"`
	Origin  int64    `json:"origin_up"`
	Reserve float64  `json:"reserve"`
	Reps    int      `json:"reps"`
	Systems []string `json:"systems"`
	// RackReps is the cluster file's rack_representatives (0: its default).
	RackReps int `json:"rack_representatives,omitempty"`
	// DCs, when set, makes that many datacenters of Racks racks each,
	// each behind a link of DCUplink (default twice Uplink) to the core,
	// where the origin is.
	DCs      int   `json:"datacenters,omitempty"`
	DCUplink int64 `json:"dc_uplink,omitempty"`
}

func (sc *pushScenario) parse(s string) error {
	for _, kv := range strings.Fields(strings.ReplaceAll(s, ",", " ")) {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "racks":
			sc.Racks, err = strconv.Atoi(v)
		case "hosts":
			sc.Hosts, err = strconv.Atoi(v)
		case "reps":
			sc.Reps, err = strconv.Atoi(v)
		case "rack_reps":
			sc.RackReps, err = strconv.Atoi(v)
		case "datacenters":
			sc.DCs, err = strconv.Atoi(v)
		case "dc_uplink":
			sc.DCUplink, err = units.ParseRate(v)
		case "size":
			sc.Size, err = units.ParseSize(v)
		case "host":
			sc.Host, err = units.ParseRate(v)
		case "uplink":
			sc.Uplink, err = units.ParseRate(v)
		case "origin":
			sc.Origin, err = units.ParseRate(v)
		case "reserve":
			sc.Reserve, err = parseShare(v)
		case "systems":
			sc.Systems = strings.Split(v, "+")
		default:
			err = errors.New("unknown key")
		}
		if err != nil {
			return fmt.Errorf("STAMPEDETEST_PUSH_SCENARIO %q: %v", kv, err)
		}
	}
	return nil
}

// bound is the topology's bound on the last host's time for a push that
// keeps every link within its budget: each rack takes a copy in over its
// uplink's budget, each host over its link's, and the origin sends one.
func (sc pushScenario) bound() float64 {
	b := float64(sc.Size) / float64(sc.Origin)
	for _, l := range []int64{sc.Uplink, sc.Host, sc.DCUplink} {
		if l > 0 {
			b = max(b, float64(sc.Size)/(float64(l)*(1-sc.Reserve)))
		}
	}
	return b
}

// pushBenchRun is one run of one system.
type pushBenchRun struct {
	System        string             `json:"system"`
	Hosts         map[string]float64 `json:"hosts"` // completion, seconds
	Failed        []string           `json:"failed,omitempty"`
	MedianSeconds float64            `json:"median_seconds"`
	LastSeconds   float64            `json:"last_seconds"`
	OriginCopies  float64            `json:"origin_copies"`
	// RackInCopies: the most bytes into one rack over its uplink, in
	// copies; LinkMaxOverBudget: the highest 1 s load of a shared link
	// (a rack uplink, either way) over its capacity less the reserve.
	RackInCopies      float64 `json:"rack_in_copies"`
	LinkMaxOverBudget float64 `json:"link_max_over_budget"`
	// Links: each shared link's highest 1 s load over its budget.
	Links map[string]float64 `json:"links,omitempty"`
}

type pushBenchReport struct {
	Scenario     pushScenario   `json:"scenario"`
	BoundSeconds float64        `json:"bound_seconds"`
	Runs         []pushBenchRun `json:"runs"`
	// Medians of the runs, per system.
	Median map[string]pushBenchRun `json:"median"`
}

func (r *pushBenchReport) sum() {
	r.Median = map[string]pushBenchRun{}
	by := map[string][]pushBenchRun{}
	for _, run := range r.Runs {
		by[run.System] = append(by[run.System], run)
	}
	med := func(runs []pushBenchRun, f func(pushBenchRun) float64) float64 {
		v := make([]float64, len(runs))
		for i, x := range runs {
			v[i] = f(x)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	for s, runs := range by {
		r.Median[s] = pushBenchRun{System: s,
			MedianSeconds:     med(runs, func(x pushBenchRun) float64 { return x.MedianSeconds }),
			LastSeconds:       med(runs, func(x pushBenchRun) float64 { return x.LastSeconds }),
			OriginCopies:      med(runs, func(x pushBenchRun) float64 { return x.OriginCopies }),
			RackInCopies:      med(runs, func(x pushBenchRun) float64 { return x.RackInCopies }),
			LinkMaxOverBudget: med(runs, func(x pushBenchRun) float64 { return x.LinkMaxOverBudget }),
		}
	}
}

// nsTopo is the namespaces of one run.
type nsTopo struct {
	t      *testing.T
	prefix string
	core   string
	origin nsHost
	racks  [][]nsHost
	all    []string // every namespace, to delete
	links  []nsLink // the shared links, for their counters
}

type nsHost struct{ name, ns, ip, mac string }

// nsLink is one direction of a shared link: the qdisc whose bytes are
// what crossed it.
type nsLink struct {
	name, ns, dev string
	rack          int // the rack it leads into, -1 for out of a rack or the origin's
	budget        float64
	samples       []nsSample
}

type nsSample struct {
	at    time.Time
	bytes int64
}

func ns(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func tbfArgs(bps int64) []string {
	burst := max(16<<10, bps/25)
	limit := max(64<<10, bps/4) + burst
	return []string{"tbf", "rate", strconv.FormatInt(bps*8, 10) + "bit", "burst", strconv.FormatInt(burst, 10), "limit", strconv.FormatInt(limit, 10)}
}

var topoSeq int

func newTopo(t *testing.T, sc pushScenario) *nsTopo {
	topoSeq++
	tp := &nsTopo{t: t, prefix: fmt.Sprintf("spush%dx%d", os.Getpid(), topoSeq)}
	t.Cleanup(tp.close)
	tp.core = tp.prefix + "-core"
	tp.add(tp.core)
	ns(t, "ip", "-n", tp.core, "link", "add", "br0", "type", "bridge")
	ns(t, "ip", "-n", tp.core, "link", "set", "br0", "up")
	k := 0
	host := func(name, bridgeNS, veth string, ip string, up, down int64) nsHost {
		k++
		h := nsHost{name: name, ns: tp.prefix + "-" + name, ip: ip, mac: fmt.Sprintf("02:53:50:00:%02x:%02x", k>>8, k&0xff)}
		tp.add(h.ns)
		ns(t, "ip", "-n", bridgeNS, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
		ns(t, "ip", "-n", bridgeNS, "link", "set", veth, "master", "br0")
		ns(t, "ip", "-n", bridgeNS, "link", "set", veth, "up")
		ns(t, "ip", "-n", h.ns, "link", "set", "eth0", "address", h.mac)
		ns(t, "ip", "-n", h.ns, "addr", "add", ip+"/16", "dev", "eth0")
		ns(t, "ip", "-n", h.ns, "link", "set", "eth0", "up")
		ns(t, "ip", "-n", h.ns, "link", "set", "lo", "up")
		if up > 0 {
			ns(t, append([]string{"tc", "-n", h.ns, "qdisc", "add", "dev", "eth0", "root"}, tbfArgs(up)...)...)
		}
		if down > 0 {
			ns(t, append([]string{"tc", "-n", bridgeNS, "qdisc", "add", "dev", veth, "root"}, tbfArgs(down)...)...)
		}
		return h
	}
	tp.origin = host("origin", tp.core, "o0", "198.19.0.1", sc.Origin, 0)
	tp.links = append(tp.links, nsLink{name: "origin", ns: tp.origin.ns, dev: "eth0", rack: -1, budget: float64(sc.Origin)})
	// join makes a bridge in its own namespace and joins it to the bridge
	// in parent through a veth shaped with tbf both ways.
	join := func(name, parent string, bps int64, rack int) string {
		child := tp.prefix + "-" + name
		tp.add(child)
		up := "to-" + name
		for _, argv := range [][]string{
			{"ip", "-n", child, "link", "add", "br0", "type", "bridge"},
			{"ip", "-n", child, "link", "set", "br0", "up"},
			{"ip", "-n", parent, "link", "add", up, "type", "veth", "peer", "name", "upl", "netns", child},
			{"ip", "-n", parent, "link", "set", up, "master", "br0"},
			{"ip", "-n", parent, "link", "set", up, "up"},
			{"ip", "-n", child, "link", "set", "dev", "upl", "master", "br0"},
			{"ip", "-n", child, "link", "set", "dev", "upl", "up"},
			append([]string{"tc", "-n", parent, "qdisc", "add", "dev", up, "root"}, tbfArgs(bps)...),
			append([]string{"tc", "-n", child, "qdisc", "add", "dev", "upl", "root"}, tbfArgs(bps)...),
		} {
			ns(t, argv...)
		}
		budget := float64(bps) * (1 - sc.Reserve)
		tp.links = append(tp.links,
			nsLink{name: name + "-in", ns: parent, dev: up, rack: rack, budget: budget},
			nsLink{name: name + "-out", ns: child, dev: "upl", rack: -1, budget: budget})
		return child
	}
	parents := []string{tp.core}
	if sc.DCs > 0 {
		parents = nil
		for d := range sc.DCs {
			parents = append(parents, join(fmt.Sprintf("dc%d", d), tp.core, sc.DCUplink, -1))
		}
	}
	for r := range len(parents) * sc.Racks {
		rns := join(fmt.Sprintf("rack%d", r), parents[r/sc.Racks], sc.Uplink, r)
		var hs []nsHost
		for h := range sc.Hosts {
			hs = append(hs, host(fmt.Sprintf("r%dh%d", r, h), rns, fmt.Sprintf("h%d", h), fmt.Sprintf("198.19.%d.%d", r+1, h+1), sc.Host, sc.Host))
		}
		tp.racks = append(tp.racks, hs)
	}
	// Permanent neighbours: ARP must not cross the shaped links.
	every := []nsHost{tp.origin}
	for _, hs := range tp.racks {
		every = append(every, hs...)
	}
	for _, a := range every {
		for _, b := range every {
			if a != b {
				ns(t, "ip", "-n", a.ns, "neigh", "replace", b.ip, "lladdr", b.mac, "dev", "eth0", "nud", "permanent")
			}
		}
	}
	return tp
}

func (tp *nsTopo) add(name string) {
	ns(tp.t, "ip", "netns", "add", name)
	tp.all = append(tp.all, name)
}

func (tp *nsTopo) close() {
	all := tp.all
	tp.all = nil
	for _, n := range slices.Backward(all) {
		if out, _ := exec.Command("ip", "netns", "pids", n).Output(); len(out) > 0 {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		exec.Command("ip", "netns", "del", n).Run()
	}
}

// qdiscBytes reads what a link's qdisc has sent.
func qdiscBytes(l *nsLink) (int64, error) {
	out, err := exec.Command("tc", "-s", "-j", "-n", l.ns, "qdisc", "show", "dev", l.dev).Output()
	if err != nil {
		return 0, err
	}
	var qs []struct {
		Root  bool  `json:"root"`
		Bytes int64 `json:"bytes"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		return 0, err
	}
	for _, q := range qs {
		if q.Root {
			return q.Bytes, nil
		}
	}
	return 0, errors.New("no root qdisc")
}

// sample reads every link's counter every 0.5 s until stop.
func (tp *nsTopo) sample(stop <-chan struct{}) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		for i := range tp.links {
			l := &tp.links[i]
			before := time.Now()
			if b, err := qdiscBytes(l); err == nil {
				// The counter was read some time during the call: its
				// middle is the best guess.
				l.samples = append(l.samples, nsSample{before.Add(time.Since(before) / 2), b})
			}
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// figures computes rack_in_copies, link_max_over_budget and the origin's
// copies from the samples.
func (tp *nsTopo) figures(size int64, run *pushBenchRun) {
	for _, l := range tp.links {
		if len(l.samples) < 2 {
			continue
		}
		total := l.samples[len(l.samples)-1].bytes - l.samples[0].bytes
		switch {
		case l.name == "origin":
			run.OriginCopies = float64(total) / float64(size)
			continue // the origin's link is not a budgeted shared link of the cluster
		case l.rack >= 0:
			run.RackInCopies = max(run.RackInCopies, float64(total)/float64(size))
		}
		if run.Links == nil {
			run.Links = map[string]float64{}
		}
		for i := 2; i < len(l.samples); i++ {
			a, b := l.samples[i-2], l.samples[i]
			load := float64(b.bytes-a.bytes) / b.at.Sub(a.at).Seconds() / l.budget
			run.LinkMaxOverBudget = max(run.LinkMaxOverBudget, load)
			run.Links[l.name] = max(run.Links[l.name], load)
		}
	}
}

// proc is a process started in a namespace.
type proc struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	once sync.Once
}

func start(t *testing.T, nsName string, logf string, argv ...string) *proc {
	t.Helper()
	p, err := startProc(nsName, logf, argv...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	return p
}

// startProc starts argv in namespace nsName, its output to logf (or kept,
// with none); the namespace's deletion kills it if stop does not.
func startProc(nsName string, logf string, argv ...string) (*proc, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", nsName}, argv...)...)
	p := &proc{cmd: cmd, out: &bytes.Buffer{}}
	if logf != "" {
		f, err := os.Create(logf)
		if err != nil {
			return nil, err
		}
		defer f.Close() // the child has its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	} else {
		cmd.Stdout = p.out
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *proc) stop() {
	p.once.Do(p.stopOnce)
}

func (p *proc) stopOnce() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// waitHTTP polls url from namespace nsName until it answers.
func waitHTTP(t *testing.T, nsName, url string) {
	t.Helper()
	if err := waitHTTPErr(nsName, url); err != nil {
		t.Fatal(err)
	}
}

func waitHTTPErr(nsName, url string) error {
	for range 200 {
		if exec.Command("ip", "netns", "exec", nsName, "curl", "-sf", "-o", "/dev/null", "--max-time", "1", url).Run() == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s does not answer from %s", url, nsName)
}

// curl fetches url to path in namespace nsName and returns when it ended.
func curlTo(nsName, url, path string) (time.Time, error) {
	out, err := exec.Command("ip", "netns", "exec", nsName, "curl", "-sSf", "-o", path, url).CombinedOutput()
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %v: %s", url, err, out)
	}
	return time.Now(), nil
}

func runPushBench(t *testing.T, sc pushScenario, system, bin, dir string, seed uint64) pushBenchRun {
	t.Helper()
	tp := newTopo(t, sc)
	defer tp.close()
	os.MkdirAll(dir, 0o755)
	data := make([]byte, sc.Size)
	rng := rand.New(rand.NewPCG(seed, 31))
	for i := 0; i+8 <= len(data); i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			data[i+k] = byte(v >> (8 * k))
		}
	}
	file := filepath.Join(dir, "origin", "f.bin")
	os.MkdirAll(filepath.Dir(file), 0o755)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	run := pushBenchRun{System: system, Hosts: map[string]float64{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	switch system {
	case "push":
		benchPush(t, tp, sc, bin, dir, file, &run, func() { wg.Go(func() { tp.sample(stop) }) })
	case "aria2":
		wg.Go(func() { tp.sample(stop) })
		benchAria2(t, tp, dir, file, &run)
	case "http", "tree":
		srv := start(t, tp.origin.ns, filepath.Join(dir, "origin.log"), "python3", "-m", "http.server", "8080", "--bind", tp.origin.ip, "--directory", filepath.Dir(file))
		defer srv.stop()
		waitHTTP(t, tp.origin.ns, "http://"+tp.origin.ip+":8080/")
		wg.Go(func() { tp.sample(stop) })
		time.Sleep(600 * time.Millisecond) // a first sample
		started := time.Now()
		if system == "http" {
			benchHTTP(t, tp, dir, &run, started)
		} else {
			benchTree(t, tp, dir, &run, started)
		}
	default:
		t.Fatalf("unknown system %q", system)
	}
	time.Sleep(600 * time.Millisecond) // a last sample
	close(stop)
	wg.Wait()
	tp.figures(sc.Size, &run)
	var secs []float64
	for _, s := range run.Hosts {
		secs = append(secs, s)
	}
	slices.Sort(secs)
	if len(secs) > 0 {
		run.MedianSeconds, run.LastSeconds = secs[len(secs)/2], secs[len(secs)-1]
	}
	return run
}

// benchPush runs a daemon per host and stampede push from the origin's
// namespace; startSampling is called once every agent answers.
func benchPush(t *testing.T, tp *nsTopo, sc pushScenario, bin, dir, file string, run *pushBenchRun, startSampling func()) {
	var toml strings.Builder
	fmt.Fprintf(&toml, "reserve = %q\nhost_link = %q\n", fmt.Sprintf("%g%%", sc.Reserve*100), strconv.FormatInt(sc.Host, 10))
	if sc.RackReps > 0 {
		fmt.Fprintf(&toml, "rack_representatives = %d\n", sc.RackReps)
	}
	for d := range sc.DCs {
		fmt.Fprintf(&toml, "[datacenter.d%d]\nlink = \"%d\"\n", d, sc.DCUplink)
	}
	for r, hs := range tp.racks {
		var names []string
		for _, h := range hs {
			names = append(names, strconv.Quote(h.name))
			fmt.Fprintf(&toml, "[host.%s]\nagent = \"%s:7882\"\npeer = \"%s:7881\"\n", h.name, h.ip, h.ip)
		}
		fmt.Fprintf(&toml, "[rack.r%d]\nuplink = \"%d\"\nhosts = [%s]\n", r, sc.Uplink, strings.Join(names, ", "))
		if sc.DCs > 0 {
			fmt.Fprintf(&toml, "datacenter = \"d%d\"\n", r/sc.Racks)
		}
	}
	cf := filepath.Join(dir, "cluster.toml")
	os.WriteFile(cf, []byte(toml.String()), 0o644)
	key := filepath.Join(dir, "cluster.key")
	if out, err := exec.Command(bin, "keygen", "-o", key).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v %s", err, out)
	}
	var agents []*proc
	for _, hs := range tp.racks {
		for _, h := range hs {
			hd := filepath.Join(dir, h.name)
			os.MkdirAll(hd, 0o755)
			agents = append(agents, start(t, h.ns, filepath.Join(hd, "daemon.log"), bin, "daemon", "--state-dir", filepath.Join(hd, "state"),
				"--api", filepath.Join(hd, "api.sock"), "--peer-listen", h.ip+":7881", "--cluster", cf, "--cluster-key", key+".pub",
				"--cluster-host", h.name, "--push-dest-prefix", filepath.Join(hd, "dest"), "-q"))
		}
	}
	defer func() {
		for _, a := range agents {
			a.stop()
		}
	}()
	for _, hs := range tp.racks {
		for _, h := range hs {
			waitHTTP(t, tp.origin.ns, "http://"+h.ip+":7882/v1/hello")
		}
	}
	startSampling()
	time.Sleep(600 * time.Millisecond)
	p := start(t, tp.origin.ns, "", bin, "push", file, "--cluster", cf, "--key", key, "--json", "-q",
		"--dest", filepath.Join(dir, "{host}", "dest", "f.bin"), "--origin-listen", tp.origin.ip+":7880", "--deadline", "20m")
	p.cmd.Wait()
	var rep pushReport
	sc2 := bufio.NewScanner(bytes.NewReader(p.out.Bytes()))
	sc2.Buffer(nil, 16<<20)
	for sc2.Scan() {
		var line struct{ Type string }
		if json.Unmarshal(sc2.Bytes(), &line) == nil && line.Type == "report" {
			json.Unmarshal(sc2.Bytes(), &rep)
		}
	}
	if rep.Type != "report" {
		t.Fatalf("push gave no report: %s", p.out.String())
	}
	for _, rk := range rep.Racks {
		for _, h := range rk.Hosts {
			if h.Installed {
				run.Hosts[h.Host] = h.Seconds
			} else {
				run.Failed = append(run.Failed, h.Host+": "+h.Cause)
			}
		}
	}
}

func benchHTTP(t *testing.T, tp *nsTopo, dir string, run *pushBenchRun, started time.Time) {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for _, hs := range tp.racks {
		for _, h := range hs {
			wg.Go(func() {
				done, err := curlTo(h.ns, "http://"+tp.origin.ip+":8080/f.bin", filepath.Join(dir, h.name+".bin"))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					run.Failed = append(run.Failed, h.name+": "+err.Error())
					return
				}
				run.Hosts[h.name] = done.Sub(started).Seconds()
			})
		}
	}
	wg.Wait()
}

// benchTree: the origin to the first host of each rack, then that host
// to the others of its rack.
func benchTree(t *testing.T, tp *nsTopo, dir string, run *pushBenchRun, started time.Time) {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	record := func(name string, done time.Time, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			run.Failed = append(run.Failed, name+": "+err.Error())
			return
		}
		run.Hosts[name] = done.Sub(started).Seconds()
	}
	for _, hs := range tp.racks {
		wg.Go(func() {
			head := hs[0]
			hd := filepath.Join(dir, head.name)
			os.MkdirAll(hd, 0o755)
			done, err := curlTo(head.ns, "http://"+tp.origin.ip+":8080/f.bin", filepath.Join(hd, "f.bin"))
			record(head.name, done, err)
			if err != nil {
				return
			}
			srv, err := startProc(head.ns, filepath.Join(hd, "http.log"), "python3", "-m", "http.server", "8081", "--bind", head.ip, "--directory", hd)
			if err == nil {
				defer srv.stop()
				err = waitHTTPErr(head.ns, "http://"+head.ip+":8081/")
			}
			if err != nil {
				for _, h := range hs[1:] {
					record(h.name, time.Time{}, err)
				}
				return
			}
			var inner sync.WaitGroup
			for _, h := range hs[1:] {
				inner.Go(func() {
					done, err := curlTo(h.ns, "http://"+head.ip+":8081/f.bin", filepath.Join(dir, h.name+".bin"))
					record(h.name, done, err)
				})
			}
			inner.Wait()
		})
	}
	wg.Wait()
}

// benchAria2: mktorrent's torrent of the file, opentracker and an aria2c
// seeder on the origin, an aria2c on every host; a host's time is when
// aria2c calls its on-bt-download-complete hook (it goes on seeding, as
// stampede's hosts do, until every one has the file).
func benchAria2(t *testing.T, tp *nsTopo, dir, file string, run *pushBenchRun) {
	for _, tool := range []string{"aria2c", "opentracker", "mktorrent"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("aria2 baseline: %v", err)
		}
	}
	tdir := filepath.Join(dir, "tracker")
	os.MkdirAll(tdir, 0o755)
	os.Chmod(tdir, 0o755) // opentracker drops to nobody
	torrent := filepath.Join(dir, "f.torrent")
	announce := "http://" + tp.origin.ip + ":6969/announce"
	ns(t, "mktorrent", "-l", "17", "-a", announce, "-o", torrent, file)
	data, err := os.ReadFile(torrent)
	if err != nil {
		t.Fatal(err)
	}
	// mktorrent writes the info dictionary last: its bytes run from after
	// the key to the outer dictionary's end.
	i := bytes.Index(data, []byte("4:info"))
	if i < 0 || data[len(data)-1] != 'e' {
		t.Fatal("no info dictionary in the torrent")
	}
	sum := sha1.Sum(data[i+6 : len(data)-1])
	os.WriteFile(filepath.Join(tdir, "whitelist"), []byte(hex.EncodeToString(sum[:])+"\n"), 0o644)
	os.WriteFile(filepath.Join(tdir, "opentracker.conf"), []byte(fmt.Sprintf(
		"listen.tcp_udp %s:6969\naccess.whitelist whitelist\ntracker.rootdir %s\ntracker.user nobody\n", tp.origin.ip, tdir)), 0o644)
	tr := start(t, tp.origin.ns, filepath.Join(dir, "opentracker.log"), "opentracker", "-f", filepath.Join(tdir, "opentracker.conf"))
	defer tr.stop()
	common := []string{"--enable-dht=false", "--enable-dht6=false", "--bt-enable-lpd=false", "--enable-peer-exchange=true",
		"--disable-ipv6=true", "--console-log-level=warn", "--summary-interval=0", "--file-allocation=none",
		"--allow-overwrite=true", "--auto-file-renaming=false", "--bt-tracker-interval=5",
		"--bt-tracker-connect-timeout=5", "--bt-tracker-timeout=5", "--listen-port=6881", "--seed-ratio=0.0"}
	seeder := start(t, tp.origin.ns, filepath.Join(dir, "seeder.log"), append(append([]string{"aria2c"}, common...),
		"--check-integrity=true", "--bt-seed-unverified=false", "-d", filepath.Dir(file), torrent)...)
	defer seeder.stop()
	time.Sleep(2 * time.Second) // the seeder checks the file and announces
	hook := filepath.Join(dir, "done.sh")
	os.WriteFile(hook, []byte("#!/bin/sh\ndate +%s.%N > \"$(dirname \"$3\")/done\"\n"), 0o755)
	started := time.Now()
	var leechers []*proc
	for _, hs := range tp.racks {
		for _, h := range hs {
			hd := filepath.Join(dir, h.name)
			os.MkdirAll(hd, 0o755)
			leechers = append(leechers, start(t, h.ns, filepath.Join(hd, "aria2c.log"), append(append([]string{"aria2c"}, common...),
				"-d", hd, "--on-bt-download-complete="+hook, torrent)...))
		}
	}
	defer func() {
		for _, l := range leechers {
			l.stop()
		}
	}()
	deadline := time.Now().Add(20 * time.Minute)
	for time.Now().Before(deadline) {
		done := 0
		for _, hs := range tp.racks {
			for _, h := range hs {
				if _, ok := run.Hosts[h.name]; ok {
					done++
					continue
				}
				if b, err := os.ReadFile(filepath.Join(dir, h.name, "done")); err == nil {
					if f, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil {
						at := time.Unix(0, int64(f*1e9))
						run.Hosts[h.name] = at.Sub(started).Seconds()
						done++
					}
				}
			}
		}
		if done == len(tp.racks)*len(tp.racks[0]) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	run.Failed = append(run.Failed, "aria2: not every host done in 20 minutes")
}
