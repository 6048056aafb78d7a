package codns

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stampede-dev/stampede/internal/metrics"
)

// BenchmarkSickResolver measures issue #32's DNS aim: a local resolver
// made sick (it stalls 20% of queries for 5 s and answers the rest at
// once) and a replay of 10,000 lookups, answered (a) by that resolver
// alone, (b) by a forwarder in front of it with 3 peers, each a forwarder
// whose own resolver is healthy, and (c) by dnsmasq --all-servers given
// the sick resolver and the peers' healthy ones. Whether a query stalls is
// a hash of its name and of how many times that server was asked it
// before, so every system meets the same stalls.
//
// Two workloads: "zipf", 10,000 lookups of names drawn from 100,000 with
// Zipf popularity (s = 1.1), answers with a TTL of 300 s, so caches
// answer the repeats; and "unique", 10,000 names each looked up once (as
// the CoDNS thesis replayed), where no cache helps. The replay is an open
// loop at a fixed rate, 500 lookups a second, each lookup from its own
// client whether or not the others are answered (UDP, a 10 s timeout):
// each system's run takes 20 s, and 5 s more for the last stalls.
// The forwarders run in this process, on 127.0.0.10-13; dnsmasq (skipped
// when not installed) on 127.0.0.20:15353.
//
// It takes about three minutes; it runs only with STAMPEDETEST_CODNS=1:
//
//	STAMPEDETEST_CODNS=1 go test ./codns -run '^$' -bench SickResolver -benchtime 1x -v
//
// STAMPEDETEST_CODNS_LOOKUPS, _RATE and _PEERS change the figures;
// STAMPEDETEST_CODNS_DEBUG=1 prints the forwarders' series after their run.
func BenchmarkSickResolver(b *testing.B) {
	if os.Getenv("STAMPEDETEST_CODNS") != "1" {
		b.Skip("set STAMPEDETEST_CODNS=1 to run (minutes)")
	}
	lookups := envInt(b, "STAMPEDETEST_CODNS_LOOKUPS", 10000)
	rate := envInt(b, "STAMPEDETEST_CODNS_RATE", 500)
	npeers := envInt(b, "STAMPEDETEST_CODNS_PEERS", 3)
	var rows []benchRow
	for _, workload := range []string{"zipf", "unique"} {
		names := benchNames(workload, lookups)
		plain := replayPlain(b, names, rate)
		plain.workload = workload
		rows = append(rows, plain)
		co := replayCoDNS(b, names, rate, npeers)
		co.workload = workload
		rows = append(rows, co)
		if _, err := exec.LookPath("dnsmasq"); err != nil {
			b.Logf("no dnsmasq: its run skipped")
		} else {
			dm := replayDnsmasq(b, names, rate, npeers)
			dm.workload = workload
			rows = append(rows, dm)
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%d lookups at %d a second, %d peers; the local resolver stalls 20%% of queries for 5 s\n\n", lookups, rate, npeers)
	sb.WriteString("| workload | system | mean | p50 | p99 | over 1 s | failed | sent to peers | won by peers | from cache | local resolver queries | peer queries | run |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %.2f%% | %d | %s | %s | %s | %d | %d | %.0f s |\n",
			r.workload, r.system, ms(r.mean), ms(r.p50), ms(r.p99), 100*r.over1s, r.failed,
			pct(r.sentToPeers), pct(r.wonByPeers), pct(r.fromCache), r.localQueries, r.peerQueries, r.run.Seconds())
	}
	for i := 0; i+1 < len(rows); i++ {
		if rows[i].system != "plain" || rows[i+1].system != "stampede dns" {
			continue
		}
		p, c := rows[i], rows[i+1]
		fmt.Fprintf(&sb, "\n%s: stampede dns mean %.2f × plain (aim ≤ 0.5), over 1 s %.2f × plain (aim ≤ 0.2), %.1f%% sent to peers (aim ≤ 25%%)",
			p.workload, float64(c.mean)/float64(p.mean), c.over1s/max(p.over1s, 1e-9), 100*c.sentToPeers)
	}
	b.Log(sb.String())
}

type benchRow struct {
	workload, system          string
	mean, p50, p99            time.Duration
	over1s                    float64
	failed                    int
	sentToPeers, wonByPeers   float64 // shares of the lookups; -1: not known
	fromCache                 float64
	localQueries, peerQueries int64
	run                       time.Duration
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

func pct(f float64) string {
	if f < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// benchNames returns the names of the replay, in order.
func benchNames(workload string, n int) []string {
	names := make([]string, n)
	r := rand.New(rand.NewPCG(32, 2026))
	z := rand.NewZipf(r, 1.1, 1, 99_999)
	for i := range names {
		k := uint64(i)
		if workload == "zipf" {
			k = z.Uint64()
		}
		names[i] = fmt.Sprintf("n%06d.bench.example.", k)
	}
	return names
}

// benchServer is a resolver for the benchmark: healthy, it answers every
// A query at once (TTL 300 s); sick, it first stalls 20% of them for 5 s.
type benchServer struct {
	*fakeDNS
	mu   sync.Mutex     // guards seen
	seen map[string]int // times each name was asked
}

func startBenchServer(b *testing.B, sick bool) *benchServer {
	s := &benchServer{seen: make(map[string]int)}
	s.fakeDNS = startFake(b, "127.0.0.1", func(w dns.ResponseWriter, r *dns.Msg) {
		name := strings.ToLower(r.Question[0].Name)
		if sick {
			s.mu.Lock()
			n := s.seen[name]
			s.seen[name]++
			s.mu.Unlock()
			h := fnv.New64a()
			fmt.Fprintf(h, "%s#%d", name, n)
			if h.Sum64()%100 < 20 {
				time.Sleep(5 * time.Second)
			}
		}
		m := new(dns.Msg).SetReply(r)
		m.RecursionAvailable = true
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(192, 0, 2, 1)})
		w.WriteMsg(m)
	})
	return s
}

// replay sends the lookups of names to addr at rate lookups a second,
// each from its own client whatever the others wait for (an open loop),
// and returns the latencies' figures.
func replay(b *testing.B, addr string, names []string, rate int) benchRow {
	lat := make([]time.Duration, len(names))
	var failed atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	c := &dns.Client{Timeout: 10 * time.Second}
	for i, name := range names {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		wg.Go(func() {
			m := new(dns.Msg).SetQuestion(name, dns.TypeA)
			t0 := time.Now()
			r, _, err := c.Exchange(m, addr)
			lat[i] = time.Since(t0)
			if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	row := benchRow{run: time.Since(start), failed: int(failed.Load()), sentToPeers: -1, wonByPeers: -1, fromCache: -1}
	var sum time.Duration
	over := 0
	for _, l := range lat {
		sum += l
		if l > time.Second {
			over++
		}
	}
	row.mean = sum / time.Duration(len(lat))
	row.over1s = float64(over) / float64(len(lat))
	s := slices.Clone(lat)
	slices.Sort(s)
	row.p50 = s[len(s)/2]
	row.p99 = s[len(s)*99/100]
	return row
}

func replayPlain(b *testing.B, names []string, rate int) benchRow {
	sick := startBenchServer(b, true)
	row := replay(b, sick.addr, names, rate)
	row.system, row.localQueries, row.sentToPeers, row.wonByPeers = "plain", sick.queries.Load(), 0, 0
	return row
}

func replayCoDNS(b *testing.B, names []string, rate, npeers int) benchRow {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	serve := func(ip string, cfg Config) *Forwarder {
		cfg.Logger = log
		f, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		pc, ln, err := Listen(ip + ":5353")
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { f.Serve(ctx, pc, ln) })
		return f
	}
	sick := startBenchServer(b, true)
	var peers []netip.AddrPort
	var healthy []*benchServer
	for i := range npeers {
		ip := fmt.Sprintf("127.0.0.%d", 11+i)
		peers = append(peers, netip.MustParseAddrPort(ip+":5353"))
		healthy = append(healthy, startBenchServer(b, false))
	}
	// Every node is given the same list, itself included.
	all := append([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.10:5353")}, peers...)
	var others []*Forwarder
	for i := range npeers {
		others = append(others, serve(peers[i].Addr().String(), Config{Upstream: healthy[i].addr, Peers: all}))
	}
	f := serve("127.0.0.10", Config{Upstream: sick.addr, Peers: all})
	row := replay(b, "127.0.0.10:5353", names, rate)
	row.system = "stampede dns"
	row.localQueries = sick.queries.Load()
	n := float64(len(names))
	row.sentToPeers = testutil.ToFloat64(f.m.sentToPeers) / n
	row.wonByPeers = testutil.ToFloat64(f.m.clientLookups[byPeer]) / n
	row.fromCache = testutil.ToFloat64(f.m.clientLookups[byCache]) / n
	for _, c := range f.m.peerQueries {
		row.peerQueries += int64(testutil.ToFloat64(c))
	}
	if os.Getenv("STAMPEDETEST_CODNS_DEBUG") != "" {
		metrics.WriteText(os.Stderr, f.reg, "stampede_dns")
		for _, o := range others {
			metrics.WriteText(os.Stderr, o.reg, "stampede_dns_peer_requests")
			metrics.WriteText(os.Stderr, o.reg, "stampede_dns_refused")
		}
	}
	return row
}

func replayDnsmasq(b *testing.B, names []string, rate, npeers int) benchRow {
	sick := startBenchServer(b, true)
	args := []string{"--no-daemon", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--all-servers",
		"--listen-address=127.0.0.20", "--bind-interfaces", "--port=15353", "--cache-size=10000", "--dns-forward-max=1000",
		"--server=" + strings.Replace(sick.addr, ":", "#", 1)}
	var healthy []*benchServer
	for range npeers {
		h := startBenchServer(b, false)
		healthy = append(healthy, h)
		args = append(args, "--server="+strings.Replace(h.addr, ":", "#", 1))
	}
	cmd := exec.Command("dnsmasq", args...)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	// Ready when it answers a name the replay does not ask.
	c := &dns.Client{Timeout: 200 * time.Millisecond}
	for i := 0; ; i++ {
		m := new(dns.Msg).SetQuestion("ready.example.", dns.TypeA)
		if _, _, err := c.Exchange(m, "127.0.0.20:15353"); err == nil {
			break
		}
		if i == 50 {
			b.Fatal("dnsmasq does not answer on 127.0.0.20:15353")
		}
		time.Sleep(100 * time.Millisecond)
	}
	before := sick.queries.Load()
	var hbefore int64
	for _, h := range healthy {
		hbefore += h.queries.Load()
	}
	row := replay(b, "127.0.0.20:15353", names, rate)
	row.system = "dnsmasq --all-servers"
	row.localQueries = sick.queries.Load() - before
	for _, h := range healthy {
		row.peerQueries += h.queries.Load()
	}
	row.peerQueries -= hbefore
	// Every lookup dnsmasq forwards goes to every server: the lookups sent
	// to the peers' resolvers are what the sick one was asked.
	row.sentToPeers = float64(row.localQueries) / float64(len(names))
	return row
}
