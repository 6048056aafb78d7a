package node_test

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/internal/memnet"
)

var churnVerbose = os.Getenv("STAMPEDETEST_CHURN") != ""

// churnResult is what one run of arrivals measured.
type churnResult struct {
	arrivals         int
	failed           int
	mean, p90, p99   time.Duration
	originBytes      int64 // every byte the origin sent: files, manifests, tracker answers
	originFileBytes  int64
	originPerArrival float64 // originBytes / arrivals
	// fetches sums the peers' origin fetches by reason, inSwarm the
	// answers "in swarm" among them.
	fetches map[string]int
	inSwarm int
}

// runChurn starts peers at Poisson arrivals of rate per second for dur,
// each leaving as soon as it has the file (seed time 0), on a network of
// 8 Mbit/s up, 20 Mbit/s down peers and an 8 Mbit/s origin, all in
// synctest's time. It returns once every peer is done.
func runChurn(t *testing.T, size int, rate float64, dur time.Duration, seed uint64) churnResult {
	res := churnResult{fetches: map[string]int{}}
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		ctx := testContext(t)
		nw := memNetwork{memnet.New()}
		t0 := time.Now()
		var served []string
		o := startOrigin(t, originConfig{size: size, seed: seed, rate: 1 * MiB, net: nw, onPiece: func(int) {
			if churnVerbose {
				mu.Lock()
				served = append(served, time.Since(t0).Round(time.Millisecond).String())
				mu.Unlock()
			}
		}})
		link := memnet.HostConfig{Up: 1 * MiB, Down: 5 * MiB / 2, Latency: 10 * time.Millisecond}
		rng := rand.New(rand.NewPCG(seed, 34))
		var (
			tooks []time.Duration
			wg    sync.WaitGroup
		)
		start := time.Now()
		for i := 0; ; i++ {
			time.Sleep(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
			if time.Since(start) > dur {
				break
			}
			res.arrivals++
			arrived := time.Since(start)
			wg.Go(func() {
				r := runPeer(ctx, t, o, nw, i, peerConfig{link: link})
				mu.Lock()
				defer mu.Unlock()
				if r.err != nil {
					t.Errorf("peer %d: %v", i, r.err)
					res.failed++
					return
				}
				tooks = append(tooks, r.took)
				if sw := r.res.Swarm; sw != nil {
					for why, k := range sw.OriginFetches {
						res.fetches[why] += k
					}
					res.inSwarm += sw.OriginInSwarm
				}
				if churnVerbose && r.res.Swarm != nil {
					sw := r.res.Swarm
					t.Logf("peer %d arrived %v took %v: from peers %d pieces, origin %v, seen %d, timeouts %d, cancels %d",
						i, arrived.Round(time.Millisecond), r.took.Round(time.Millisecond), sw.PiecesFromPeer, sw.OriginFetches, sw.PeersSeen, sw.RequestTimeouts, sw.Cancels)
				}
			})
		}
		wg.Wait()
		if churnVerbose {
			t.Logf("origin pieces served at %v", served)
		}
		st := o.stats()
		res.originBytes, res.originFileBytes = st.allBytes, st.bodyBytes
		if res.arrivals > 0 {
			res.originPerArrival = float64(st.allBytes) / float64(res.arrivals)
		}
		slices.Sort(tooks)
		if len(tooks) > 0 {
			var sum time.Duration
			for _, d := range tooks {
				sum += d
			}
			res.mean = sum / time.Duration(len(tooks))
			res.p90 = tooks[min(len(tooks)-1, len(tooks)*90/100)]
			res.p99 = tooks[min(len(tooks)-1, len(tooks)*99/100)]
		}
	})
	return res
}

func (r churnResult) log(t *testing.T, size int, rate float64) {
	t.Helper()
	t.Logf("rate %g/s: %d arrivals (%d failed), latency mean %v p90 %v p99 %v; origin sent %d bytes (%d of file), %.0f per arrival (%.3f × the object); origin fetches %v, %d answered in swarm",
		rate, r.arrivals, r.failed, r.mean.Round(time.Millisecond), r.p90.Round(time.Millisecond), r.p99.Round(time.Millisecond),
		r.originBytes, r.originFileBytes, r.originPerArrival, r.originPerArrival/float64(size), r.fetches, r.inSwarm)
}

// TestChurnMeasure logs a churn run per rate (STAMPEDETEST_CHURN=1, or
// STAMPEDETEST_CHURN_RATE=r for one rate; each peer's outcome and the
// origin's sends are logged too with STAMPEDETEST_CHURN;
// STAMPEDETEST_CHURN_SEEDS=n runs seeds 1..n, not 7 alone, and logs the
// medians): go test -run TestChurnMeasure -v ./node. It checks only that
// every download completes.
func TestChurnMeasure(t *testing.T) {
	rates := []float64{1, 4, 16}
	if r, err := strconv.ParseFloat(os.Getenv("STAMPEDETEST_CHURN_RATE"), 64); err == nil {
		rates = []float64{r}
	} else if !churnVerbose {
		t.Skip("a measurement: set STAMPEDETEST_CHURN=1 or STAMPEDETEST_CHURN_RATE")
	}
	seeds := []uint64{7}
	if n, err := strconv.Atoi(os.Getenv("STAMPEDETEST_CHURN_SEEDS")); err == nil && n > 0 {
		seeds = seeds[:0]
		for k := range n {
			seeds = append(seeds, uint64(k+1))
		}
	}
	const size = 64 * KiB
	for _, rate := range rates {
		var rs []churnResult
		for _, seed := range seeds {
			r := runChurn(t, size, rate, 8*time.Second, seed)
			r.log(t, size, rate)
			rs = append(rs, r)
		}
		if len(rs) > 1 {
			med := func(f func(churnResult) float64) float64 {
				v := make([]float64, len(rs))
				for k, r := range rs {
					v[k] = f(r)
				}
				slices.Sort(v)
				return v[len(v)/2]
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			t.Logf("rate %g/s, median of %d seeds: latency mean %.0f ms p90 %.0f ms p99 %.0f ms; origin %.3f × the object per arrival",
				rate, len(rs), med(func(r churnResult) float64 { return ms(r.mean) }), med(func(r churnResult) float64 { return ms(r.p90) }),
				med(func(r churnResult) float64 { return ms(r.p99) }), med(func(r churnResult) float64 { return r.originPerArrival / size }))
		}
	}
}

// TestChurnOriginFalls: visitors fetch a 64 KiB object at Poisson arrivals
// and leave as soon as they have it. Every download completes, and the
// origin's bytes per arrival (manifests and tracker answers counted) fall
// as the rate rises (issue 34): at 16 a second the pool of peers still
// there serves most arrivals, and the origin sends well under half the
// object per arrival (0.23 measured, 0.19-0.20 the median of seeds 1-7 at
// 8 s; issue 34's aim of a tenth is not met: docs/architecture.md, "Small
// objects").
func TestChurnOriginFalls(t *testing.T) {
	const size = 64 * KiB
	var prev float64
	for k, rate := range []float64{1, 4, 16} {
		r := runChurn(t, size, rate, 4*time.Second, 11)
		r.log(t, size, rate)
		if r.failed > 0 || r.arrivals == 0 {
			t.Fatalf("rate %g: %d of %d downloads failed", rate, r.failed, r.arrivals)
		}
		per := r.originPerArrival / size
		if k > 0 && per >= prev {
			t.Errorf("rate %g: origin sent %.3f of the object per arrival, not less than %.3f at the rate before", rate, per, prev)
		}
		if want := map[float64]float64{16: 0.4}[rate]; want > 0 && per > want {
			t.Errorf("rate %g: origin sent %.3f of the object per arrival, want at most %g", rate, per, want)
		}
		prev = per
	}
}

// TestFlashSmallMeasure logs a flash crowd of 64 peers for a 128 KiB
// object, with the small-object rules and without
// (STAMPEDETEST_CHURN=1 go test -run TestFlashSmallMeasure -v ./node).
func TestFlashSmallMeasure(t *testing.T) {
	if !churnVerbose {
		t.Skip("a measurement: set STAMPEDETEST_CHURN=1")
	}
	const size, peers = 128 * KiB, 64
	for _, deadline := range []time.Duration{0, -1} {
		synctest.Test(t, func(t *testing.T) {
			ctx := testContext(t)
			nw := memNetwork{memnet.New()}
			o := startOrigin(t, originConfig{size: size, seed: 5, rate: 1 * MiB, net: nw})
			link := memnet.HostConfig{Up: 1 * MiB, Down: 5 * MiB / 2, Latency: 10 * time.Millisecond}
			results := runSwarm(ctx, t, o, nw, peers, func(int) peerConfig {
				sc := scenarioSwarm()
				sc.SmallDeadline = deadline
				return peerConfig{link: link, swarm: &sc}
			})
			checkAll(t, o, results)
			st := o.stats()
			t.Logf("small deadline %v: %v; origin sent %d bytes (%.2f × the object)", deadline, summarize(results), st.allBytes, float64(st.allBytes)/size)
		})
	}
}
