package bench

import (
	"math"
	"testing"

	"github.com/stampede-dev/stampede/origin"
)

const MiB = 1 << 20

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func uniform(n int, size int64, originUp, up, down float64) Crowd {
	c := Crowd{Size: size, OriginUp: originUp}
	for range n {
		c.Up = append(c.Up, up)
		c.Down = append(c.Down, down)
	}
	return c
}

func TestBoundsHandWorked(t *testing.T) {
	// Rates in bytes/s: 8 Mbit/s = 1e6 B/s, 20 Mbit/s = 2.5e6 B/s.
	tests := []struct {
		name                 string
		c                    Crowd
		r                    float64
		tkr, tkrr, httpBound float64
	}{
		{
			// flash20: N=20, F=32 MiB = 33554432 B, u_s = 8 Mbit/s, u_i = 8, d_i = 20.
			//   F/u_s           = 33554432 / 1e6            = 33.554432 s
			//   F/min d         = 33554432 / 2.5e6          = 13.4217728 s
			//   N*F/(u_s+sum u) = 20*33554432 / (1e6+20e6)  = 671088640 / 21e6 = 31.956602 s
			// T_KR = 33.554432 s (the origin sending one copy binds).
			// With R = 1: (N-R)*F/sum u = 19*33554432/20e6 = 31.876710 s < T_KR, so T_KR(1) = T_KR.
			// HTTP: max(N*F/u_s, F/min d) = 20*33.554432 = 671.08864 s.
			name: "flash20", c: uniform(20, 32*MiB, 1e6, 1e6, 2.5e6), r: 1,
			tkr: 33.554432, tkrr: 33.554432, httpBound: 671.08864,
		},
		{
			// flash50: N*F/(u_s+sum u) = 50*33554432/51e6 = 32.896502 s < 33.554432 s.
			// R = 1: 49*33554432/50e6 = 32.883343 s < T_KR. HTTP: 50*33.554432 = 1677.7216 s.
			name: "flash50", c: uniform(50, 32*MiB, 1e6, 1e6, 2.5e6), r: 1,
			tkr: 33.554432, tkrr: 33.554432, httpBound: 1677.7216,
		},
		{
			// A fast origin (80 Mbit/s = 1e7 B/s), N = 20 as flash20:
			//   F/u_s = 3.3554432, F/min d = 13.4217728,
			//   N*F/(u_s+sum u) = 671088640/3e7 = 22.369621 s  -> T_KR.
			// The origin sent R = 1 copy: (20-1)*33554432/2e7 = 31.876710 s -> T_KR(R).
			// R = 5: 15*33554432/2e7 = 25.165824 s. HTTP: 671088640/1e7 = 67.108864 s.
			name: "fast origin R=1", c: uniform(20, 32*MiB, 1e7, 1e6, 2.5e6), r: 1,
			tkr: 671088640.0 / 3e7, tkrr: 19 * 33554432.0 / 2e7, httpBound: 67.108864,
		},
		{
			name: "fast origin R=5", c: uniform(20, 32*MiB, 1e7, 1e6, 2.5e6), r: 5,
			tkr: 671088640.0 / 3e7, tkrr: 15 * 33554432.0 / 2e7, httpBound: 67.108864,
		},
		{
			// The slowest download binds: d = 1 Mbit/s = 125000 B/s for one
			// of 3 peers, F = 1 MiB: F/min d = 1048576/125000 = 8.388608 s;
			// F/u_s = 1048576/1e6 = 1.048576; 3F/(1e6+3e6) = 0.786432.
			// HTTP: max(3F/u_s = 3.145728, 8.388608) = 8.388608.
			name: "slow downloader",
			c:    Crowd{Size: MiB, OriginUp: 1e6, Up: []float64{1e6, 1e6, 1e6}, Down: []float64{1e7, 125000, 1e7}},
			r:    1, tkr: 8.388608, tkrr: 8.388608, httpBound: 8.388608,
		},
		{
			// Uncapped peers: only the origin and nothing else binds.
			name: "uncapped peers", c: uniform(10, 10e6, 1e6, 0, 0), r: 1,
			tkr: 10, tkrr: 10, httpBound: 100,
		},
		{
			// R >= N: the peers need carry nothing.
			name: "R above N", c: uniform(4, 4e6, 1e6, 1e5, 1e7), r: 6,
			tkr: 16e6 / 1.4e6, tkrr: 16e6 / 1.4e6, httpBound: 16,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.TKR(); !near(got, tt.tkr) {
				t.Errorf("TKR = %.9f, want %.9f", got, tt.tkr)
			}
			if got := tt.c.TKRR(tt.r); !near(got, tt.tkrr) {
				t.Errorf("TKRR(%g) = %.9f, want %.9f", tt.r, got, tt.tkrr)
			}
			if got := tt.c.HTTP(); !near(got, tt.httpBound) {
				t.Errorf("HTTP = %.9f, want %.9f", got, tt.httpBound)
			}
			if tt.c.TKRR(tt.r) < tt.c.TKR() || tt.c.HTTP() < tt.c.TKR() {
				t.Errorf("T_KR(R) and the HTTP bound must be at least T_KR")
			}
		})
	}
}

func TestCrowdOfScenario(t *testing.T) {
	sc, err := LoadScenario("flash20")
	if err != nil {
		t.Fatal(err)
	}
	c := CrowdOf(sc)
	if len(c.Up) != 20 || c.OriginUp != 1e6 || c.Up[0] != 1e6 || c.Down[19] != 2.5e6 || c.Size != 32*MiB {
		t.Fatalf("CrowdOf(flash20) = %+v", c)
	}
	if !near(c.TKR(), 33.554432) {
		t.Errorf("flash20 T_KR = %v", c.TKR())
	}
}

func TestBudgetBoundsHandWorked(t *testing.T) {
	// adsl: N = 50, F = 16 MiB = 16777216 B, u_s = 50 Mbit/s = 6.25e6 B/s,
	// u = 1 Mbit/s = 125000 B/s, d = 16 Mbit/s = 2e6 B/s; sum u = 6.25e6.
	//   F/u_s = 2.68435456 s, F/d = 8.388608 s,
	//   N*F/(u_s+sum u) = 838860800/12.5e6 = 67.108864 s  -> T_KR.
	// B = 1.5: (N-B)*F/sum u = 48.5*16777216/6.25e6 = 130.19119616 s, which
	// binds T_KR(B) and, the crowd being uniform, the mean's bound too.
	// B = 10: 40*16777216/6.25e6 = 107.3741824 s.
	// No budget: T_KR, and the mean's bound is F/d.
	adsl := uniform(50, 16*MiB, 6.25e6, 125000, 2e6)
	tests := []struct {
		name       string
		c          Crowd
		b          float64
		tkrb, mean float64
	}{
		{"adsl B=1.5", adsl, 1.5, 130.19119616, 130.19119616},
		{"adsl B=10", adsl, 10, 107.3741824, 107.3741824},
		{"adsl off", adsl, math.Inf(1), 67.108864, 8.388608},
		// flash50 (u_s = 8, u = 8, d = 20 Mbit/s): the origin binds
		// whatever the budget; every peer waits for its copy:
		// F/u_s = 33554432/1e6 = 33.554432 s; (50-1.5)*33554432/50e6 = 32.547799 s.
		{"flash50 B=1.5", uniform(50, 32*MiB, 1e6, 1e6, 2.5e6), 1.5, 33.554432, 33.554432},
		// A mixed crowd of 3, d uncapped, F = 12e6, u_s = 1e6, B = 1:
		//   L_i = F/u_s = 12 s each, carried by then 12*(1e5+1e5+4e5) = 7.2e6
		//   of the (3-1)*12e6 = 24e6 the peers must carry; the rest, 16.8e6,
		//   at the fastest uplink 4e5 takes 42 s more: mean >= (36+42)/3 = 26 s.
		// T_KR(B): 24e6/6e5 = 40 s (N*F/(u_s+sum u) = 36e6/1.6e6 = 22.5 s).
		// The uniform formula would say 40 s for the mean, which is
		// no bound here: one peer staying 54 s carries what is needed.
		{"mixed", Crowd{Size: 12e6, OriginUp: 1e6, Up: []float64{1e5, 1e5, 4e5}, Down: []float64{0, 0, 0}}, 1, 40, 26},
		// Uncapped uplinks: no carrying term.
		{"uncapped peers", uniform(10, 10e6, 1e6, 0, 0), 1.5, 10, 10},
		{"empty crowd", Crowd{Size: 1e6, OriginUp: 1e6}, 1.5, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.TKRB(tt.b); !near(got, tt.tkrb) {
				t.Errorf("TKRB(%g) = %.9f, want %.9f", tt.b, got, tt.tkrb)
			}
			if got := tt.c.MeanBound(tt.b); !near(got, tt.mean) {
				t.Errorf("MeanBound(%g) = %.9f, want %.9f", tt.b, got, tt.mean)
			}
			if tt.c.TKRB(tt.b) < tt.c.TKR() {
				t.Errorf("T_KR(B) below T_KR")
			}
		})
	}
}

// TestMeanBoundUniform: for a uniform crowd the bound is the issue's
// max(F/u_s, F/d, (N-B)*F/sum u), whichever term binds.
func TestMeanBoundUniform(t *testing.T) {
	for _, n := range []int{1, 2, 20, 500} {
		for _, b := range []float64{1, 1.5, 4, 1000} {
			for _, rates := range [][3]float64{{1e6, 1e6, 2.5e6}, {1e7, 1e5, 2e6}, {1e5, 1e7, 1e6}, {6.25e6, 125000, 2e6}} {
				us, u, d := rates[0], rates[1], rates[2]
				c := uniform(n, 32*MiB, us, u, d)
				f, nf := float64(c.Size), float64(n)
				want := max(f/us, f/d, (nf-b)*f/(nf*u))
				if got := c.MeanBound(b); !near(got, want) {
					t.Errorf("N=%d B=%g rates %v: MeanBound = %.9f, want %.9f", n, b, rates, got, want)
				}
				if c.MeanBound(b) > c.TKRB(b)*(1+1e-9) {
					t.Errorf("N=%d B=%g rates %v: the mean's bound %.3f is above the last's %.3f", n, b, rates, c.MeanBound(b), c.TKRB(b))
				}
			}
		}
	}
}

func TestBudgetOf(t *testing.T) {
	for _, c := range []struct {
		args []string
		want float64
	}{
		{nil, math.Inf(1)}, // off by default
		{[]string{"--max-transfers", "256"}, math.Inf(1)},
		{[]string{"--max-copies", "3"}, 3},
		{[]string{"--max-copies=2.5", "--rate", "8Mbit"}, 2.5},
		{[]string{"--max-copies", "off"}, math.Inf(1)},
		{[]string{"--max-copies", "2", "--max-copies", "4"}, 4}, // the last one, as a flag parser takes it
	} {
		got, err := BudgetOf(&Scenario{ServeArgs: c.args})
		if err != nil || got != c.want {
			t.Errorf("BudgetOf(%q) = %v, %v; want %v", c.args, got, err, c.want)
		}
	}
	for _, args := range [][]string{{"--max-copies", "0.5"}, {"--max-copies"}, {"--max-copies=abc"}, {"--max-copies", "NaN"}} {
		if got, err := BudgetOf(&Scenario{ServeArgs: args}); err == nil {
			t.Errorf("BudgetOf(%q) = %v, want an error", args, got)
		}
	}
}

// TestDefaultBudgetIsServes: the bench's default budget is serve's.
func TestDefaultBudgetIsServes(t *testing.T) {
	if DefaultBudget != origin.DefaultMaxCopies {
		t.Errorf("bench.DefaultBudget %v, origin.DefaultMaxCopies %v", DefaultBudget, origin.DefaultMaxCopies)
	}
}
