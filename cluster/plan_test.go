package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testCluster has dcs datacenters of racks racks of hosts hosts each:
// hosts h<dc><rack><n> with 100Mbit links, uplinks of 40Mbit, datacenter
// links of 80Mbit; slow hosts get 10Mbit.
func testCluster(t *testing.T, dcs, racks, hosts int, slow ...string) *Cluster {
	t.Helper()
	var b strings.Builder
	b.WriteString("host_link = \"100Mbit\"\n")
	for d := range dcs {
		fmt.Fprintf(&b, "[datacenter.d%d]\nlink = \"80Mbit\"\n", d)
		for r := range racks {
			var names []string
			for h := range hosts {
				n := fmt.Sprintf("h%d%d%d", d, r, h)
				names = append(names, `"`+n+`"`)
				fmt.Fprintf(&b, "[host.%s]\nagent = \"10.%d.%d.%d\"\n", n, d, r, h+1)
				if slices.Contains(slow, n) {
					b.WriteString("link = \"10Mbit\"\n")
				}
			}
			fmt.Fprintf(&b, "[rack.r%d%d]\ndatacenter = \"d%d\"\nuplink = \"40Mbit\"\nhosts = [%s]\n", d, r, d, strings.Join(names, ", "))
		}
	}
	c, err := Parse([]byte(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return c
}

// roles sums a plan up: each rack's representatives (R), the
// datacenters' (D) and each host's budgets in kB/s: across the uplinks,
// and its own link's.
func roles(p *Plan) string {
	var out []string
	for _, rack := range sortedKeys(p.Racks) {
		var hs []string
		for _, n := range p.Racks[rack] {
			r := p.Roles[n]
			tag := ""
			if r.RackRep {
				tag += "R"
			}
			if r.Standby {
				tag += "S"
			}
			if r.DCRep {
				tag += "D"
			}
			hs = append(hs, fmt.Sprintf("%s%s:%d/%d", n, tag, r.Cross/1000, r.Down/1000))
		}
		out = append(out, rack+"["+strings.Join(hs, " ")+"]")
	}
	return strings.Join(out, " ")
}

func TestPlan(t *testing.T) {
	seed := []byte("root")
	for _, tc := range []struct {
		name              string
		dcs, racks, hosts int
		slow, dead, pick  []string
		rackReps, dcReps  int
		want              string
	}{
		{
			// Two racks of three: one representative's 10 MB/s link fills
			// the uplink's 4 MB/s budget, so the second stands by (S),
			// ready with the same share; the active ones fetch from the
			// origin (fewer than 5); the members fetch inside the rack, and
			// have the same share for when they fall back to the origin.
			name: "2x3", dcs: 1, racks: 2, hosts: 3,
			want: "r00[h000:4000/10000 h001RS:4000/10000 h002RD:4000/10000] r01[h010RD:4000/10000 h011RS:4000/10000 h012:4000/10000]",
		},
		{
			// A slow host is never a representative while a faster one is
			// there, and its 1 MB/s takes nothing from the others.
			name: "slow host", dcs: 1, racks: 2, hosts: 3, slow: []string{"h001", "h012"},
			want: "r00[h000RS:4000/10000 h001:1000/1000 h002RD:4000/10000] r01[h010RD:4000/10000 h011RS:4000/10000 h012:1000/1000]",
		},
		{
			// A dead representative's place goes to the rack's other host;
			// the other rack's keep theirs.
			name: "dead representative", dcs: 1, racks: 2, hosts: 3, dead: []string{"h001"},
			want: "r00[h000RS:4000/10000 h002RD:4000/10000] r01[h010RD:4000/10000 h011RS:4000/10000 h012:4000/10000]",
		},
		{
			// One representative per rack, three racks: five per
			// datacenter would be more than there are, so all three are,
			// and share the datacenter link's 8 MB/s.
			name: "one per rack", dcs: 1, racks: 3, hosts: 2, rackReps: 1,
			want: "r00[h000:2666/10000 h001RD:2666/10000] r01[h010RD:2666/10000 h011:2666/10000] r02[h020:2666/10000 h021RD:2666/10000]",
		},
		{
			// Two datacenters of three racks: three active representatives
			// in each, all the datacenter's (fewer than 5), who share its
			// link's 8 MB/s.
			name: "two datacenters", dcs: 2, racks: 3, hosts: 2,
			want: "r00[h000RS:2666/10000 h001RD:2666/10000] r01[h010RD:2666/10000 h011RS:2666/10000] r02[h020RS:2666/10000 h021RD:2666/10000] " +
				"r10[h100RD:2666/10000 h101RS:2666/10000] r11[h110RD:2666/10000 h111RS:2666/10000] r12[h120RS:2666/10000 h121RD:2666/10000]",
		},
		{
			// Hosts of 10 Mbit: both representatives are needed to fill a
			// 4 MB/s uplink budget, each held to its own link's 1 MB/s.
			name: "slow links", dcs: 1, racks: 1, hosts: 3, slow: []string{"h000", "h001", "h002"},
			want: "r00[h000:1000/1000 h001RD:1000/1000 h002RD:1000/1000]",
		},
		{
			name: "a selection", dcs: 1, racks: 2, hosts: 3, pick: []string{"h000", "h011", "h012"},
			want: "r00[h000RD:4000/10000] r01[h011RD:4000/10000 h012RS:4000/10000]",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCluster(t, tc.dcs, tc.racks, tc.hosts, tc.slow...)
			if tc.rackReps > 0 {
				c.RackRepresentatives = tc.rackReps
			}
			if tc.dcReps > 0 {
				c.DCRepresentatives = tc.dcReps
			}
			hosts := tc.pick
			if hosts == nil {
				hosts = c.HostNames()
			}
			p, err := NewPlan(c, hosts, seed)
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.dead) > 0 {
				// The pusher plans again with the hosts that answered.
				before := p
				var alive []string
				for _, n := range hosts {
					if !slices.Contains(tc.dead, n) {
						alive = append(alive, n)
					}
				}
				if p, err = NewPlan(c, alive, seed); err != nil {
					t.Fatal(err)
				}
				// Representatives that did not die stay.
				for n, r := range before.Roles {
					if r.RackRep && !slices.Contains(tc.dead, n) && !p.Roles[n].RackRep {
						t.Errorf("%s lost its place when %v died", n, tc.dead)
					}
				}
			}
			if got := roles(p); got != tc.want {
				t.Errorf("plan\n got %s\nwant %s", got, tc.want)
			}
			// No link over its budget: each rack's representatives and each
			// datacenter's within their link.
			for rk, hs := range p.Racks {
				var sum int64
				for _, h := range hs {
					if p.Roles[h].RackRep && !p.Roles[h].Standby {
						sum += p.Roles[h].Cross
					}
				}
				if b := c.Racks[rk].Uplink.Budget(); sum > b {
					t.Errorf("rack %s's representatives take %d of %d", rk, sum, b)
				}
			}
		})
	}
}

func TestPlanSeedChangesRepresentatives(t *testing.T) {
	c := testCluster(t, 1, 1, 8)
	seen := map[string]bool{}
	for i := range 20 {
		p, err := NewPlan(c, c.HostNames(), []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		for n, r := range p.Roles {
			if r.RackRep {
				seen[n] = true
			}
		}
	}
	if len(seen) < 5 {
		t.Errorf("20 files had their representatives among %d hosts of 8", len(seen))
	}
}

func TestMayPeer(t *testing.T) {
	c := testCluster(t, 2, 2, 3)
	p, err := NewPlan(c, c.HostNames(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range c.HostNames() {
		for _, b := range c.HostNames() {
			ra, rb := p.Roles[a], p.Roles[b]
			got := p.MayPeer(a, b)
			want := ra.Rack == rb.Rack || (ra.DC == rb.DC && ra.RackRep && rb.RackRep && !ra.Standby && !rb.Standby) || (ra.DCRep && rb.DCRep)
			if got != want || got != p.MayPeer(b, a) {
				t.Errorf("MayPeer(%s, %s) = %v", a, b, got)
			}
			if ra.Rack != rb.Rack && !ra.RackRep && got {
				t.Errorf("%s, no representative, peers across its uplink with %s", a, b)
			}
		}
	}
	// A standby peers across its uplink only once it has taken over; an
	// active representative lets it (the standby refuses on its side
	// until then).
	var standby, active, other string
	for _, n := range c.HostNames() {
		switch r := p.Roles[n]; {
		case r.Standby && r.Rack == "r00":
			standby = n
		case r.RackRep && !r.Standby && r.Rack == "r01":
			active = n
		case r.RackRep && !r.Standby && r.Rack == "r00":
			other = n
		}
	}
	if standby == "" || active == "" || other == "" {
		t.Fatalf("no standby in %s", roles(p))
	}
	if p.MayPeer(standby, active) || p.MayPeerActive(standby, active, false) {
		t.Errorf("%s, standing by, peers across its uplink", standby)
	}
	if !p.MayPeerActive(standby, active, true) || !p.MayPeerActive(active, standby, false) || !p.MayPeerActive(standby, other, false) {
		t.Errorf("%s, taking over, may not peer with %s", standby, active)
	}
	if p.MayPeer("h000", "nobody") {
		t.Error("a host not in the push may peer")
	}
	if _, err := NewPlan(c, []string{"h000", "zz"}, nil); err == nil {
		t.Error("a plan with an unknown host")
	}
}

func TestWork(t *testing.T) {
	w := NewWork([]string{"a", "b", "c"}, 12) // a: 0-3, b: 4-7, c: 8-11
	for _, tc := range []struct {
		name  string
		rep   string
		asked int
		cands []int
		piece int
		offer []int
		ok    bool
	}{
		{"the piece asked, in its share", "a", 2, []int{0, 5, 3}, 2, []int{0, 2, 3}, true},
		{"the first free of its share, in place of another's", "a", 6, []int{9, 3, 1}, 1, []int{1, 3}, true},
		{"its share done: the far end of the one most behind", "a", 5, []int{4, 9, 10, 7}, 7, []int{4, 5, 7}, true},
		{"a tie: the first representative's", "b", 0, []int{10}, 0, []int{0}, true},
		{"a tie, from the far end", "b", 2, []int{10, 1, 11}, 2, []int{1, 2}, true},
		{"the most free", "b", 2, []int{10, 9, 11}, 11, []int{9, 10, 11}, true},
		{"nothing known", "c", -1, nil, -1, nil, false},
		{"not a representative", "z", 1, []int{2}, -1, nil, false},
		{"out of range ignored", "c", 40, []int{-3, 8}, 8, []int{8}, true},
	} {
		piece, offer, ok := w.Pick(tc.rep, tc.asked, tc.cands)
		if piece != tc.piece || !slices.Equal(offer, tc.offer) || ok != tc.ok {
			t.Errorf("%s: %s asks %d offering %v: got %d, %v, %v; want %d, %v, %v",
				tc.name, tc.rep, tc.asked, tc.cands, piece, offer, ok, tc.piece, tc.offer, tc.ok)
		}
	}
	w = NewWork([]string{"a", "b", "c"}, 10)
	var all []int
	for _, r := range []string{"a", "b", "c"} {
		f, to := w.Share(r)
		for i := f; i < to; i++ {
			all = append(all, i)
		}
	}
	if len(all) != 10 || !slices.IsSorted(all) {
		t.Errorf("shares cover %v", all)
	}
	if f, to := w.Share("z"); f != 0 || to != 0 {
		t.Errorf("not a representative: share %d-%d", f, to)
	}
}
