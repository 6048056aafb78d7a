package bench

import (
	"crypto/sha1"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestDist(t *testing.T) {
	d := distOf([]float64{4, 1, 3, 2, 10})
	// Sorted 1 2 3 4 10: p50 = 3; p90 at rank 0.9*4 = 3.6: 4 + 0.6*6 = 7.6.
	// p99 at rank 3.96: 4 + 0.96*6 = 9.76.
	if d.N != 5 || d.Mean != 4 || d.P50 != 3 || !near(d.P90, 7.6) || !near(d.P99, 9.76) || d.Min != 1 || d.Max != 10 {
		t.Errorf("distOf = %+v", d)
	}
	if d := distOf([]float64{7}); d.P50 != 7 || d.P90 != 7 || d.Mean != 7 {
		t.Errorf("one value: %+v", d)
	}
	if d := distOf(nil); d.N != 0 {
		t.Errorf("empty: %+v", d)
	}
	r := rangeOf([]float64{3, 1, 2, 9})
	if r.Median != 2.5 || r.Min != 1 || r.Max != 9 {
		t.Errorf("rangeOf = %+v", r)
	}
	if r := rangeOf(nil); !math.IsNaN(r.Median) {
		t.Errorf("rangeOf(nil) = %+v", r)
	}
}

func TestRates(t *testing.T) {
	cum := []Point{{0, 0}, {0.5, 10}, {1, 100}, {1.5, 100}, {2, 300}, {2.5, 250}, {3.5, 250}}
	got := rates(cum, 1)
	want := []Point{{0, 0}, {1, 100}, {2, 200}, {3.5, 0}}
	if len(got) != len(want) {
		t.Fatalf("rates = %v, want %v", got, want)
	}
	for i := range want {
		if !near(got[i].T, want[i].T) || !near(got[i].V, want[i].V) {
			t.Errorf("rates[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestOffsets(t *testing.T) {
	rng := func() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
	if o := (Arrivals{Kind: ArriveAll}).Offsets(3, rng()); o[0] != 0 || o[2] != 0 {
		t.Errorf("all: %v", o)
	}
	if o := (Arrivals{Kind: ArriveEvery, Interval: time.Second}).Offsets(3, rng()); o[1] != time.Second || o[2] != 2*time.Second {
		t.Errorf("every: %v", o)
	}
	a := Arrivals{Kind: ArrivePoisson, Rate: 4}
	o := a.Offsets(4000, rng())
	if o[0] != 0 {
		t.Errorf("the first peer opens the run, got %v", o[0])
	}
	for i := 1; i < len(o); i++ {
		if o[i] < o[i-1] {
			t.Fatalf("offsets go back at %d", i)
		}
	}
	// 3999 gaps of mean 0.25 s: about 1000 s, within a few percent.
	if total := o[len(o)-1].Seconds(); total < 950 || total > 1050 {
		t.Errorf("4000 Poisson arrivals at 4/s took %.0f s, want about 1000", total)
	}
	o2 := a.Offsets(4000, rng())
	if o2[1234] != o[1234] {
		t.Errorf("same seed, different schedule")
	}
}

func TestPoolWatch(t *testing.T) {
	tick := 500 * time.Millisecond
	run := func(sizes func(i int) int, n int) (int, bool) {
		p := &poolWatch{window: 2 * time.Second}
		for i := range n {
			if p.Observe(time.Duration(i)*tick, sizes(i)) {
				return i, true
			}
		}
		return 0, false
	}
	// A pool that keeps growing never stabilizes.
	if i, ok := run(func(i int) int { return i }, 100); ok {
		t.Errorf("growing pool declared stable at sample %d", i)
	}
	// A pool that grows to 10 then fluctuates between 8 and 10 does,
	// two windows after it stops setting new maxima.
	i, ok := run(func(i int) int {
		if i < 10 {
			return i
		}
		return 8 + i%3
	}, 100)
	if !ok {
		t.Fatal("flat pool never declared stable")
	}
	if at := time.Duration(i) * tick; at < 4*time.Second || at > 12*time.Second {
		t.Errorf("stable at %v, want soon after the growth stops at 5s", at)
	}
	// Nothing is decided before two windows have passed.
	if _, ok := run(func(int) int { return 3 }, 7); ok {
		t.Error("declared stable within the first two windows")
	}
}

func TestAria2Progress(t *testing.T) {
	tests := []struct {
		line string
		want int64
		ok   bool
	}{
		{"[#2089b0 7.4MiB/32MiB(23%) CN:5 SD:1 DL:1.0MiB UL:256KiB ETA:24s]", 7759462, true},
		{"[#f389e9 0B/8.0MiB(0%) CN:3 SD:0 DL:0B]", 0, true},
		{"[#f389e9 16KiB/8.0MiB(0%) CN:3 SD:1 DL:15KiB ETA:8m33s]", 16 << 10, true},
		{"[#f389e9 SEED(0.0) CN:0 SD:0 UL:0B]", 0, false},
		{"FILE: l1/f.bin", 0, false},
		{" *** Download Progress Summary as of Sat Nov 21 00:05:54 2026 *** ", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseAria2Progress(tt.line)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseAria2Progress(%q) = %d, %v; want %d, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

func TestInfoHash(t *testing.T) {
	info := "d6:lengthi4e4:name1:f12:piece lengthi32768e6:pieces20:abcdefghijklmnopqrste"
	torrent := "d8:announce19:http://t:1/announce10:created by3:me!13:creation datei1700000000e4:info" + info + "e"
	got, err := infoHash([]byte(torrent))
	if err != nil {
		t.Fatal(err)
	}
	// The SHA-1 of exactly the info dictionary's bytes.
	want := sha1Hex(info)
	if got != want {
		t.Errorf("infoHash = %s, want %s", got, want)
	}
	for _, bad := range []string{"", "l1:ae", "d4:infoi3e", "d3:abc", "d4:name1:xe", "d4:infod"} {
		if _, err := infoHash([]byte(bad)); err == nil {
			t.Errorf("infoHash(%q) succeeded", bad)
		}
	}
}

func TestParseFlagNames(t *testing.T) {
	usage := `Usage: stampede get URL [-o FILE]

Flags:
  -O	save under the remote file name
  -json
    	print a JSON summary
  -limit-rate RATE
    	cap the download RATE (default "0")
  -max-upload-rate RATE
    	cap what we upload to peers
  -no-swarm
    	fetch from the server only
  -seed-time duration
    	keep serving peers
`
	got := strings.Join(parseFlagNames(usage), ",")
	if got != "O,json,limit-rate,max-upload-rate,no-swarm,seed-time" {
		t.Errorf("parseFlagNames = %s", got)
	}
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
