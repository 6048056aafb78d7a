package sim

import (
	"os"
	"strconv"
	"testing"

	"github.com/stampede-dev/stampede/bench"
)

// BenchmarkFlashCrowd runs bench's flash50 crowd scaled to
// $STAMPEDE_SIM_BENCH_PEERS peers (default 100), as `stampede sim --peers
// N flash50` does: for a CPU profile of the simulator at scale,
//
//	STAMPEDE_SIM_BENCH_PEERS=1000 go test -run '^$' -bench FlashCrowd \
//	    -benchtime 1x -cpuprofile cpu.out ./sim
func BenchmarkFlashCrowd(b *testing.B) {
	peers := 100
	if v := os.Getenv("STAMPEDE_SIM_BENCH_PEERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("STAMPEDE_SIM_BENCH_PEERS=%q: want a number of peers", v)
		}
		peers = n
	}
	sc, err := bench.LoadScenario("flash50")
	if err != nil {
		b.Fatal(err)
	}
	cfg, _, err := FromScenario(sc, Options{Peers: peers})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		r, err := Run(b.Context(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		if !r.Complete {
			b.Fatalf("%d of %d peers finished", r.Finished, r.Peers)
		}
		b.ReportMetric(r.LastOverTKR, "last/T_KR")
		b.ReportMetric(float64(r.Engine.Events)/float64(peers), "events/peer")
	}
}
