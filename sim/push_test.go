package sim

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/bench"
)

// TestPushSmall: a push over 2 racks of 3 hosts completes; the origin
// sends about one copy; each rack takes about one in over its uplink; the
// members stay inside their racks.
func TestPushSmall(t *testing.T) {
	topo := bench.PushTopology{Racks: 2, HostsPerRack: 3, HostUp: 100e6 / 8, HostDown: 100e6 / 8,
		RackUplink: 40e6 / 8, Reserve: 0.2}
	r, s := runPush(t, topo, 4<<20)
	if !r.Complete {
		t.Fatal("incomplete")
	}
	p := r.Push
	if r.OriginCopies > 1.1 || p.RackInCopies > 1.2 {
		t.Errorf("origin %.3f copies (want ≤ 1.1), rack in %.3f (want ≤ 1.2)", r.OriginCopies, p.RackInCopies)
	}
	if p.Roles["dc_representative"] != 2 || p.Roles["standby"] != 2 || p.Roles["member"] != 2 {
		t.Errorf("roles %v: want a representative, a standby and a member per rack", p.Roles)
	}
	for i, n := range s.nodes {
		for _, e := range n.ends {
			o := e.peer.n
			if a, b := s.push.roles[i], s.push.roles[o.idx]; a.Rack != b.Rack && (!a.RackRep || !b.RackRep) {
				t.Errorf("%s and %s, not both representatives, were connected across racks", s.push.Hosts[i], s.push.Hosts[o.idx])
			}
		}
	}
}

func runPush(t *testing.T, topo bench.PushTopology, size int64) (*Result, *Sim) {
	t.Helper()
	cfg, err := NewPushConfig(topo, size, 40e6/8)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Seed = 1
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("STAMPEDETEST_SIM_TRACE") == "1" {
		pushTrace(t, s)
	}
	r, err := s.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r.WriteText(&b)
	t.Log("\n" + b.String())
	return r, s
}

// TestPushTopology checks NewPushConfig's errors.
func TestPushTopology(t *testing.T) {
	for _, tc := range []struct {
		topo bench.PushTopology
		size int64
	}{
		{bench.PushTopology{Racks: 0, HostsPerRack: 3}, 1},
		{bench.PushTopology{Racks: 2, HostsPerRack: 3}, 0},
		{bench.PushTopology{Racks: 2, HostsPerRack: 3, Reserve: 1}, 1},
	} {
		if _, err := NewPushConfig(tc.topo, tc.size, 0); err == nil {
			t.Errorf("%+v, %d bytes: no error", tc.topo, tc.size)
		}
	}
}

// TestPushBig runs a larger push on demand:
// STAMPEDETEST_SIM_PUSH=RACKSxHOSTS,MiB[,DATACENTERS]; hosts 100 Mbit/s,
// rack uplinks and the origin 40 Mbit/s, datacenter links 80 Mbit/s, 20%
// reserve, as the push bench's scenarios (docs/sim.md).
func TestPushBig(t *testing.T) {
	spec := os.Getenv("STAMPEDETEST_SIM_PUSH")
	if spec == "" {
		t.Skip("set STAMPEDETEST_SIM_PUSH=RACKSxHOSTS,MiB[,DATACENTERS]")
	}
	var racks, hosts, mib, dcs int
	if n, _ := fmt.Sscanf(spec, "%dx%d,%d,%d", &racks, &hosts, &mib, &dcs); n < 3 {
		t.Fatalf("STAMPEDETEST_SIM_PUSH=%q: want RACKSxHOSTS,MiB[,DATACENTERS]", spec)
	}
	topo := bench.PushTopology{Racks: racks, HostsPerRack: hosts, HostUp: 100e6 / 8, HostDown: 100e6 / 8,
		RackUplink: 40e6 / 8, Reserve: 0.2, Datacenters: dcs}
	if dcs > 0 {
		topo.DCUplink = 80e6 / 8
	}
	runPush(t, topo, int64(mib)<<20)
}

// pushTrace logs, every simulated second, the origin's copies so far, the
// bytes into each group over the second, and the representatives' pieces
// (STAMPEDETEST_SIM_TRACE=1).
func pushTrace(t *testing.T, s *Sim) {
	last := map[string]float64{}
	s.cfg.Progress = func(p Progress) {
		var line strings.Builder
		fmt.Fprintf(&line, "%5.1f s: origin %5.2f copies; in", p.SimTime.Seconds(), p.OriginCopies)
		for _, g := range s.cfg.Groups {
			if l := s.groups[g.Name].down; l != nil {
				fmt.Fprintf(&line, " %s %.2f MB/s", g.Name, (l.bytes-last[g.Name])/1e6)
				last[g.Name] = l.bytes
			}
		}
		line.WriteString("; representatives' pieces")
		for i, n := range s.nodes {
			if s.push.roles[i].DCRep && n.have != nil {
				fmt.Fprintf(&line, " %d", n.have.Count())
			}
		}
		t.Log(line.String())
	}
}
