package storetest

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

// A workload of the benchmarks: peers over 16 swarms, each peer
// announcing once an interval of a synthetic clock, so that every
// announce is acted on (none is rate limited).
type workload struct {
	name  string
	peers int
}

const benchSwarms = 16

var workloads = []workload{
	// Every swarm holds 192 peers, within its table: the periodic
	// announces of a swarm that is there to stay.
	{"steady", 16 * 192},
	// Every swarm has four times the peers its table holds: the worst
	// case, where every announce is a newcomer pushing the oldest out
	// and feeding the estimator.
	{"churn", 16 * 1024},
}

// benchClock hands out times that advance by one interval every peers
// calls.
type benchClock struct {
	n        atomic.Int64
	start    time.Time
	interval time.Duration
	peers    int
}

func (c *benchClock) Now() time.Time {
	i := c.n.Add(1)
	return c.start.Add(time.Duration(i) * c.interval / time.Duration(c.peers))
}

func (w workload) request(i int) (tracker.AnnounceRequest, netip.AddrPort) {
	p := peer(i % w.peers)
	root := manifest.Hash{0xbe, byte(i % benchSwarms)}
	return tracker.AnnounceRequest{Root: root, Size: testSize, ID: p.id, Port: p.port, Left: 1000, NumWant: tracker.DefaultNumWant}, p.addr()
}

// latencies collects the time of each operation, per goroutine.
type latencies struct {
	mu  sync.Mutex // guards all
	all []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.mu.Unlock()
}

// report reports the rate and the p99 latency over elapsed.
func (l *latencies) report(b *testing.B, elapsed time.Duration) {
	if len(l.all) == 0 || elapsed <= 0 {
		return
	}
	slices.Sort(l.all)
	p99 := l.all[min(len(l.all)-1, len(l.all)*99/100)]
	b.ReportMetric(float64(len(l.all))/elapsed.Seconds(), "announces/s")
	b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
}

// BenchmarkStore measures announces per second and their p99 latency at
// the Store interface, from GOMAXPROCS×parallelism goroutines (a remote
// store needs several calls in flight), for each workload. newStore
// returns an empty store.
func BenchmarkStore(b *testing.B, newStore func(b *testing.B) tracker.Store, parallelism int) {
	for _, w := range workloads {
		b.Run(w.name, func(b *testing.B) { benchmarkStore(b, newStore(b), parallelism, w) })
	}
}

// ServerCPU is what a store whose work is done in another process (a
// Redis server) may implement for the benchmarks: the CPU time that
// process has used so far. BenchmarkStore then reports it per announce
// (server-cpu-µs/announce) beside this process's own (cpu-µs/announce),
// which together say how far the machine's cores bound the rate.
type ServerCPU interface {
	ServerCPU(ctx context.Context) (time.Duration, error)
}

func benchmarkStore(b *testing.B, st tracker.Store, parallelism int, w workload) {
	clock := &benchClock{start: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC), interval: tracker.DefaultInterval, peers: w.peers}
	if sc, ok := st.(ServerCPU); ok {
		before, err := sc.ServerCPU(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			after, err := sc.ServerCPU(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64((after-before).Microseconds())/float64(b.N), "server-cpu-µs/announce")
		}()
	}
	measure(b, parallelism, func(ctx context.Context, i int) error {
		req, addr := w.request(i)
		_, err := st.Announce(ctx, req, addr, clock.Now())
		return err
	})
}

// measure runs announce, numbered from 1, from parallelism×GOMAXPROCS
// goroutines for b.N calls, and reports the rate and the p99 latency.
func measure(b *testing.B, parallelism int, announce func(ctx context.Context, i int) error) {
	var next atomic.Int64
	var lat latencies
	b.SetParallelism(parallelism)
	b.ResetTimer()
	start, cpu := time.Now(), processCPU()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		var mine []time.Duration
		for pb.Next() {
			i := int(next.Add(1))
			t0 := time.Now()
			if err := announce(ctx, i); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		lat.add(mine)
	})
	elapsed, cpu := time.Since(start), processCPU()-cpu
	b.StopTimer()
	lat.report(b, elapsed)
	if cpu > 0 && b.N > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/announce")
	}
}

// BenchmarkHTTP measures announces per second and their p99 latency over
// HTTP: a tracker on st serving on a loopback listener, and the load
// generator, GOMAXPROCS×parallelism clients with keep-alive connections,
// in this process, for each workload.
func BenchmarkHTTP(b *testing.B, newStore func(b *testing.B) tracker.Store, parallelism int) {
	for _, w := range workloads {
		b.Run(w.name, func(b *testing.B) { benchmarkHTTP(b, newStore(b), parallelism, w) })
	}
}

func benchmarkHTTP(b *testing.B, st tracker.Store, parallelism int, w workload) {
	clock := &benchClock{start: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC), interval: tracker.DefaultInterval, peers: w.peers}
	tr := tracker.New(tracker.Config{Store: st, Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: tr, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	defer client.CloseIdleConnections()
	base := "http://" + ln.Addr().String() + tracker.WellKnownPath
	measure(b, parallelism, func(ctx context.Context, i int) error {
		req, _ := w.request(i)
		_, err := tracker.Announce(ctx, client, base, req)
		return err
	})
}

// processCPU is the CPU time (user and system) this process has used, or
// 0 where getrusage is missing.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
