package bench

import (
	"math"
	"testing"
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
