//go:build linux

package rtcpeer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/node"
)

// The NAT testbed: network namespaces named natPrefix+..., an "internet"
// bridge on 198.19.0.0/24 (natInet) with stampede serve on it (origin,
// tracker, STUN and TURN at 198.19.0.1), and peers behind NATs made with
// nftables, each NAT a namespace with its WAN on the bridge and its peers
// on its LAN (a bridge there, 10.88.K.0/24):
//   - full-cone: masquerade (the port kept) and every UDP port of the WAN
//     forwarded to the peer: endpoint-independent mapping and filtering;
//   - port-restricted: masquerade with conntrack (the port kept): only
//     the endpoints the peer sent to get in;
//   - symmetric: masquerade fully-random: a new port for each endpoint.
//
// Public peers sit on the bridge itself.
const (
	natPrefix = "stnat-"
	natInet   = natPrefix + "inet"
	natOrigin = "198.19.0.1"
)

// natPeer is one peer of the testbed: the NAT it sits behind ("" for a
// public address).
type natPeer struct {
	name   string
	nat    string // "full-cone", "port-restricted", "symmetric" or ""
	behind string // the peer whose NAT it shares; "": its own
	ns     string
	ip     string
}

// natOf names the NAT p sits behind ("" for none).
func (p *natPeer) natOf() string {
	switch {
	case p.nat == "":
		return ""
	case p.behind != "":
		return p.behind
	}
	return p.name
}

// TestNATTraversal: native peers behind each kind of NAT, and public
// ones, download one file with get --webrtc (or without it, for its
// default, auto: on behind a NAT, off on a public address), finding each
// other through the tracker and the origin's STUN and TURN (named in its
// peer.json).
// Every peer tells its NAT's kind (probeNAT); every download completes,
// verified; every two peers behind NATs pair, each pair by the path its
// NATs allow: punched (direct behind the same NAT), or through the relay
// for a symmetric NAT's peer with a port-restricted or symmetric one;
// the pairs with public peers that pair do so by a punched path; the
// --json counts show the mix, and serve's /metrics the bytes relayed.
// Root only, with ip and nft (scripts/install-test-deps.sh installs
// nftables); about 40 s.
func TestNATTraversal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the NAT testbed needs root (network namespaces)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the NAT testbed needs %s (scripts/install-test-deps.sh)", tool)
		}
	}
	if testing.Short() {
		t.Skip("the NAT testbed takes about 40 s")
	}
	dir := t.TempDir()
	if keep := os.Getenv("STAMPEDETEST_NAT_DIR"); keep != "" {
		dir = keep // its logs stay, to be read after
		os.MkdirAll(dir, 0o755)
	}
	bin := filepath.Join(dir, "stampede")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/stampede").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	peers := []*natPeer{
		{name: "fc", nat: "full-cone"}, {name: "pr1", nat: "port-restricted"}, {name: "pr1b", nat: "port-restricted", behind: "pr1"},
		{name: "pr2", nat: "port-restricted"},
		{name: "sym1", nat: "symmetric"}, {name: "sym2", nat: "symmetric"}, {name: "pub1"}, {name: "pub2"},
	}
	natTestbed(t, peers)

	www := filepath.Join(dir, "www")
	os.Mkdir(www, 0o755)
	obj := make([]byte, 6<<20)
	rand.Read(obj)
	if err := os.WriteFile(filepath.Join(www, "obj.bin"), obj, 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "turn-secret")
	os.WriteFile(secret, []byte("stnat-test-secret\n"), 0o600)
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second) // room for a loaded machine: about 30 s at load 20
	defer cancel()
	// The origin's 4 Mbit/s keeps the peers downloading (and offering)
	// for about 12 s, long enough for every pair to meet.
	serve := natStart(t, ctx, natInet, filepath.Join(dir, "serve.log"), bin, "serve", www, "--listen", natOrigin+":8080",
		"--cache-dir", filepath.Join(dir, "cache"), "--rate", "4Mbit",
		"--stun", natOrigin+":3478", "--turn", natOrigin+":3479", "--turn-secret-file", secret)
	if !natWaitLine(serve.log, "serving ", 20*time.Second) {
		t.Fatalf("stampede serve did not start:\n%s", natTail(serve.log))
	}

	start := time.Now()
	var wg sync.WaitGroup
	results := make([]natResult, len(peers))
	for i, p := range peers {
		wg.Go(func() {
			out := filepath.Join(dir, p.name+".bin")
			logf := filepath.Join(dir, p.name+".log")
			args := []string{"get", "-v", "--json", "--seed-time", "12s", "-o", out, "http://" + natOrigin + ":8080/obj.bin"}
			if !natAuto[p.name] {
				args = append(args, "--webrtc")
			}
			r := natStart(t, ctx, p.ns, logf, bin, args...)
			results[i] = natResult{err: r.cmd.Wait(), stdout: r.stdout.Bytes(), log: logf, out: out}
		})
	}
	wg.Wait()
	t.Logf("the downloads and their seeding took %v", time.Since(start).Round(100*time.Millisecond))
	turnBytes := natTURNMetrics(t)

	// Every download completes, verified.
	ids := map[string]string{} // signalling ID: peer name
	var total node.Paths
	for i, p := range peers {
		r := results[i]
		if r.err != nil {
			t.Errorf("%s (%s): get: %v\n%s", p.name, natKind(p), r.err, natTail(r.log))
			continue
		}
		var res struct {
			Verified string `json:"verified"`
			Size     int64  `json:"size"`
			Swarm    *struct {
				Neighbours node.Paths `json:"neighbours"`
			} `json:"swarm"`
		}
		if err := json.Unmarshal(r.stdout, &res); err != nil || res.Swarm == nil {
			t.Errorf("%s: --json: %v\n%s", p.name, err, r.stdout)
			continue
		}
		got, _ := os.ReadFile(r.out)
		if res.Verified != "merkle" || !bytes.Equal(got, obj) {
			t.Errorf("%s: verified %q, %d bytes, the file's own: %v", p.name, res.Verified, len(got), bytes.Equal(got, obj))
		}
		n := res.Swarm.Neighbours
		t.Logf("%-4s %-15s neighbours: %d direct, %d punched, %d relayed (%d bytes relayed)", p.name, natKind(p), n.Direct, n.Punched, n.Relayed, n.RelayedBytes)
		total.Direct += n.Direct
		total.Punched += n.Punched
		total.Relayed += n.Relayed
		total.RelayedBytes += n.RelayedBytes
		for _, id := range natLogMatches(r.log, reJoining) {
			ids[id[1]] = p.name
		}
		// Each peer tells its NAT by the site's STUN and TURN servers.
		want := map[string]string{"": "none", "full-cone": "mapping", "port-restricted": "mapping", "symmetric": "symmetric"}[p.nat]
		for _, m := range natLogMatches(r.log, reNAT) {
			if m[1] != want {
				t.Errorf("%s (%s): NAT probed as %s, want %s", p.name, natKind(p), m[1], want)
			}
		}
		// Without --webrtc (auto), a public peer keeps to TCP.
		if skipped := len(natLogMatches(r.log, reNotNeeded)) > 0; natAuto[p.name] && skipped != (p.nat == "") {
			t.Errorf("%s (%s), --webrtc=auto: WebRTC not needed: %v", p.name, natKind(p), skipped)
		}
	}
	t.Logf("all:                 neighbours: %d direct, %d punched, %d relayed (%d bytes relayed)", total.Direct, total.Punched, total.Relayed, total.RelayedBytes)
	if t.Failed() {
		return
	}

	// The channels opened, as each end saw them.
	byName := map[string]*natPeer{}
	for _, p := range peers {
		byName[p.name] = p
	}
	paths := map[[2]string]map[string]bool{} // pair (names in order): paths seen
	for i, p := range peers {
		for _, m := range natLogMatches(results[i].log, reOpen) {
			other := ids[m[2]]
			if other == "" {
				t.Errorf("%s: a channel to an unknown peer %s", p.name, m[2])
				continue
			}
			k := [2]string{p.name, other}
			if other < p.name {
				k = [2]string{other, p.name}
			}
			if paths[k] == nil {
				paths[k] = map[string]bool{}
			}
			paths[k][m[3]] = true
		}
	}
	for i, a := range peers {
		for _, b := range peers[i+1:] {
			k := [2]string{a.name, b.name}
			if b.name < a.name {
				k = [2]string{b.name, a.name}
			}
			want := natWant(a, b)
			seen := slices.Sorted(func(yield func(string) bool) {
				for p := range paths[k] {
					if !yield(p) {
						return
					}
				}
			})
			t.Logf("%s (%s) - %s (%s): want %s, seen %v", a.name, natKind(a), b.name, natKind(b), want, seen)
			switch {
			case len(seen) == 0 && natMustPair(a, b):
				t.Errorf("%s (%s) and %s (%s) never paired", a.name, natKind(a), b.name, natKind(b))
			case len(seen) > 1 || len(seen) == 1 && seen[0] != want:
				t.Errorf("%s (%s) - %s (%s): paths %v, want %s", a.name, natKind(a), b.name, natKind(b), seen, want)
			}
		}
	}
	if total.Punched == 0 || total.Relayed == 0 || total.RelayedBytes == 0 {
		t.Errorf("the counts show no mix: %+v", total)
	}
	if turnBytes == 0 {
		t.Error("the TURN relay counted no bytes")
	}
}

// natTURNMetrics reads serve's TURN series (stampede_origin_turn_*) on its
// /metrics, logs them and returns the bytes relayed both ways; -1
// without curl to read them.
func natTURNMetrics(t *testing.T) int64 {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Log("no curl: serve's TURN counts not read")
		return -1
	}
	out, err := exec.Command("ip", "netns", "exec", natInet, "curl", "-sS", "http://"+natOrigin+":8080/metrics").Output()
	if err != nil {
		t.Errorf("serve's /metrics: %v", err)
		return -1
	}
	var relayed int64
	for line := range strings.Lines(string(out)) {
		if !strings.HasPrefix(line, "stampede_origin_turn_") {
			continue
		}
		t.Logf("serve: %s", strings.TrimSpace(line))
		var n float64
		if strings.HasPrefix(line, "stampede_origin_turn_relayed_bytes_total") {
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &n)
			relayed += int64(n)
		}
	}
	return relayed
}

// natAuto are the peers run without --webrtc: its default, auto, turns
// it on behind a NAT and leaves it off on a public address.
var natAuto = map[string]bool{"pr2": true, "sym2": true, "pub2": true}

var (
	reJoining   = regexp.MustCompile(`msg="webrtc: joining".* id=([0-9a-f]+)`)
	reNotNeeded = regexp.MustCompile(`msg="webrtc: not needed`)
	reNAT       = regexp.MustCompile(`msg="webrtc: NAT" id=[0-9a-f]+ kind=(\w+)`)
	reOpen      = regexp.MustCompile(`msg="webrtc: channel open" id=([0-9a-f]+) peer=([0-9a-f]+) offered=\w+ path=(\w+)`)
)

func natKind(p *natPeer) string {
	if p.nat == "" {
		return "public"
	}
	return p.nat
}

// natWant is the path two peers should pair by.
func natWant(a, b *natPeer) string {
	hard := func(p *natPeer) bool { return p.nat == "symmetric" }
	closed := func(p *natPeer) bool { return p.nat == "symmetric" || p.nat == "port-restricted" }
	switch {
	case a.natOf() == b.natOf(): // public both, or on one LAN
		return node.PathDirect
	case hard(a) && closed(b) || hard(b) && closed(a):
		return node.PathRelayed
	}
	return node.PathPunched
}

// natMustPair: the pairs the test insists meet: every two peers behind
// NATs. A public peer may have all it needs of another over TCP (the
// tracker relays no offer of a native peer that knows it is public to
// another such: tracker/ws.go), and the NATed peers dial it over TCP.
func natMustPair(a, b *natPeer) bool { return a.nat != "" && b.nat != "" }

type natResult struct {
	err    error
	stdout []byte
	log    string
	out    string
}

type natProc struct {
	cmd    *exec.Cmd
	stdout *bytes.Buffer
	log    string
}

// natStart runs bin args in namespace ns, its stderr into logf, and ends
// it with the test.
func natStart(t *testing.T, ctx context.Context, ns, logf, bin string, args ...string) *natProc {
	t.Helper()
	f, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	p := &natProc{stdout: new(bytes.Buffer), log: logf}
	p.cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, f
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
		f.Close()
	})
	return p
}

// natWaitLine waits up to d for a line of file logf that starts with
// prefix.
func natWaitLine(logf, prefix string, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) { // a log file has no event to wait on
		b, _ := os.ReadFile(logf)
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, prefix) {
				return true
			}
		}
	}
	return false
}

func natLogMatches(logf string, re *regexp.Regexp) [][]string {
	f, err := os.Open(logf)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			out = append(out, m)
		}
	}
	return out
}

// natTail is the end of a log file, for a failure's message.
func natTail(logf string) string {
	b, _ := os.ReadFile(logf)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// natTestbed makes the namespaces, the bridge and the NATs for peers
// (setting their ns and ip), and removes them all when the test ends,
// failed or not.
func natTestbed(t *testing.T, peers []*natPeer) {
	t.Helper()
	natCleanup() // what a killed run left
	t.Cleanup(natCleanup)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	in := func(ns string, args ...string) {
		t.Helper()
		run(append([]string{"ip", "netns", "exec", ns}, args...)...)
	}
	addNS := func(ns string) {
		t.Helper()
		run("ip", "netns", "add", ns)
		in(ns, "ip", "link", "set", "lo", "up")
	}
	addNS(natInet)
	in(natInet, "ip", "link", "add", "br0", "type", "bridge")
	in(natInet, "ip", "addr", "add", natOrigin+"/24", "dev", "br0")
	in(natInet, "ip", "link", "set", "br0", "up")
	// onBridge links namespace ns to the bridge by a veth named dev there,
	// with address ip.
	onBridge := func(ns, dev, port, ip string) {
		t.Helper()
		run("ip", "link", "add", "name", dev, "netns", ns, "type", "veth", "peer", "name", port, "netns", natInet)
		in(natInet, "ip", "link", "set", port, "master", "br0", "up")
		in(ns, "ip", "addr", "add", ip+"/24", "dev", dev)
		in(ns, "ip", "link", "set", dev, "up")
	}
	lans := map[string]int{} // the NATs made: their LAN's number
	for k, p := range peers {
		p.ns = natPrefix + p.name
		addNS(p.ns)
		if p.nat == "" {
			p.ip = fmt.Sprintf("198.19.0.%d", 100+k)
			onBridge(p.ns, "eth0", "p"+p.name, p.ip)
			continue
		}
		nat := natPrefix + "n" + p.natOf()
		lan, made := lans[p.natOf()]
		if !made {
			lan = k
			lans[p.natOf()] = lan
		}
		p.ip = fmt.Sprintf("10.88.%d.%d", lan, 2+k)
		if !made {
			natMake(t, in, onBridge, nat, p, lan)
		}
		// The LAN is a bridge in the NAT's namespace.
		run("ip", "link", "add", "name", "eth0", "netns", p.ns, "type", "veth", "peer", "name", "h"+p.name, "netns", nat)
		in(nat, "ip", "link", "set", "h"+p.name, "master", "lan", "up")
		in(p.ns, "ip", "addr", "add", p.ip+"/24", "dev", "eth0")
		in(p.ns, "ip", "link", "set", "eth0", "up")
		in(p.ns, "ip", "route", "add", "default", "via", fmt.Sprintf("10.88.%d.1", lan))
	}
}

// natMake makes the NAT of namespace nat in front of LAN 10.88.lan.0/24,
// of the kind p's, its WAN on the bridge; a full-cone one forwards to p.
func natMake(t *testing.T, in func(string, ...string), onBridge func(ns, dev, port, ip string), nat string, p *natPeer, lan int) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", nat).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", nat, err, out)
	}
	in(nat, "ip", "link", "set", "lo", "up")
	onBridge(nat, "wan", "n"+p.name, fmt.Sprintf("198.19.0.%d", 10+lan))
	in(nat, "ip", "link", "add", "lan", "type", "bridge")
	in(nat, "ip", "addr", "add", fmt.Sprintf("10.88.%d.1/24", lan), "dev", "lan")
	in(nat, "ip", "link", "set", "lan", "up")
	in(nat, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	// What comes unasked to the NAT's own address is dropped before
	// conntrack keeps it: a kept entry would take the port the peer's own
	// packets to that sender are about to be mapped to, and they would go
	// out from another (a port-restricted NAT then behaves as a symmetric
	// one to a peer whose first packet came first).
	rules := "table ip stnat {\n" +
		"  chain post { type nat hook postrouting priority srcnat; oifname \"wan\" masquerade" + map[string]string{"symmetric": " fully-random"}[p.nat] + "; }\n" +
		"  chain in { type filter hook input priority filter; iifname \"wan\" ct state new drop; }\n"
	if p.nat == "full-cone" {
		// Whatever comes to a port of the WAN goes to the peer at the
		// same port, which masquerade keeps for it.
		rules += "  chain pre { type nat hook prerouting priority dstnat; iifname \"wan\" meta l4proto udp dnat to " + p.ip + "; }\n"
	}
	rules += "}\n"
	cmd := exec.Command("ip", "netns", "exec", nat, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v\n%s\n%s", nat, err, out, rules)
	}
}

// natCleanup deletes the testbed's namespaces (and so its links and NAT
// tables), those of an earlier run killed too.
func natCleanup() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], natPrefix) {
			exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}
