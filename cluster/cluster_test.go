package cluster

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func loadExample(t *testing.T) *Cluster {
	t.Helper()
	c, err := Load("testdata/example.toml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseExample(t *testing.T) {
	c := loadExample(t)
	if got := len(c.Hosts); got != 7 {
		t.Fatalf("%d hosts, want 7", got)
	}
	if c.RackRepresentatives != DefaultRackRepresentatives || c.DCRepresentatives != DefaultDCRepresentatives {
		t.Errorf("representatives %d, %d", c.RackRepresentatives, c.DCRepresentatives)
	}
	h := c.Hosts["web-1"]
	if h.Agent != "10.0.1.1:7882" || h.Peer != "10.0.1.1:7881" {
		t.Errorf("web-1: agent %s peer %s", h.Agent, h.Peer)
	}
	if h := c.Hosts["web-2"]; h.Agent != "10.0.1.2:9000" || h.Peer != "10.0.1.2:9001" {
		t.Errorf("web-2: agent %s peer %s", h.Agent, h.Peer)
	}
	if h := c.Hosts["db-2"]; h.Agent != "[2001:db8::2]:7882" {
		t.Errorf("db-2: agent %s", h.Agent)
	}
	if h.Link.Capacity != 125_000_000 || h.Link.Budget() != 100_000_000 {
		t.Errorf("web-1's link %+v, budget %d", h.Link, h.Link.Budget())
	}
	if l := c.Hosts["db-1"].Link; l.Capacity != 12_500_000 {
		t.Errorf("db-1's link %+v", l)
	}
	r1 := c.Racks["r1"]
	if r1.Uplink.Capacity != 5_000_000 || r1.Uplink.Budget() != 4_000_000 || r1.DC.Name != "east" {
		t.Errorf("r1: %+v in %s", r1.Uplink, r1.DC.Name)
	}
	if got := []string{r1.Hosts[0].Name, r1.Hosts[1].Name, r1.Hosts[2].Name}; !slices.Equal(got, []string{"db-1", "web-1", "web-2"}) {
		t.Errorf("r1's hosts %v", got)
	}
	if r3 := c.Racks["r3"]; r3.Uplink.Reserve != 0.1 {
		t.Errorf("r3's reserve %v", r3.Uplink.Reserve)
	}
	if w := c.Datacenters["west"]; w.Link.Reserve != 0.3 || len(w.Racks) != 1 {
		t.Errorf("west: %+v, %d racks", w.Link, len(w.Racks))
	}
	if c.HostByPeer("10.0.1.2:9001") != c.Hosts["web-2"] || c.HostByPeer("10.9.9.9:1") != nil {
		t.Error("HostByPeer")
	}
}

func TestParseNoDatacenters(t *testing.T) {
	c, err := Parse([]byte(`
[rack.a]
hosts = ["h1"]
[host.h1]
agent = "127.0.0.1:1000"
peer = "127.0.0.1:1001"
`))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Racks["a"].DC; d == nil || d.Name != DefaultDatacenter || d.Link.Capacity != 0 {
		t.Fatalf("implicit datacenter %+v", d)
	}
	if c.Hosts["h1"].Link.Budget() != 0 {
		t.Error("an unlimited link has a budget")
	}
}

func TestParseErrors(t *testing.T) {
	base := `
[rack.r1]
hosts = ["a", "b"]
[host.a]
agent = "10.0.0.1"
[host.b]
agent = "10.0.0.2"
`
	for _, tc := range []struct {
		name, text, want string
	}{
		{"syntax", "[rack.r1\nhosts = 1", "line 2"},
		{"unknown key", base + "[rack.r2]\nhosts = [\"c\"]\nuplnk = \"1Gbit\"\n[host.c]\nagent = \"10.0.0.3\"\n", "unknown key rack.r2.uplnk"},
		{"unknown top key", "reserv = \"10%\"\n" + base, "unknown key reserv"},
		{"duplicate host", base + "[host.a]\nagent = \"10.0.0.9\"\n", "host.a"},
		{"host in two racks", base + "[rack.r2]\nhosts = [\"a\"]\n", "rack.r2.hosts: a is in rack r1 already"},
		{"host twice in a rack", strings.Replace(base, `["a", "b"]`, `["a", "b", "a"]`, 1), "listed twice"},
		{"host in no rack", base + "[host.c]\nagent = \"10.0.0.3\"\n", "host.c: in no rack"},
		{"unknown host", strings.Replace(base, `["a", "b"]`, `["a", "b", "zz"]`, 1), "rack.r1.hosts: no [host.zz]"},
		{"bad capacity", strings.Replace(base, "[rack.r1]", "[rack.r1]\nuplink = \"40 Mbananas\"", 1), "line 3"},
		{"capacity unit", strings.Replace(base, "[rack.r1]", "[rack.r1]\nuplink = \"40 Mbananas\"", 1), "unknown unit"},
		{"bad reserve", "reserve = \"120%\"\n" + base, "reserve"},
		{"missing agent", base + "[rack.r2]\nhosts = [\"c\"]\n[host.c]\nlink = \"1Gbit\"\n", "host.c.agent: missing"},
		{"same agent", strings.Replace(base, "10.0.0.2", "10.0.0.1", 1), "host.b.agent: 10.0.0.1:7882 is host a's agent already"},
		{"bad port", strings.Replace(base, "10.0.0.2", "10.0.0.2:99999", 1), "host.b.agent"},
		{"unknown datacenter", strings.Replace(base, "[rack.r1]", "[rack.r1]\ndatacenter = \"mars\"", 1), "no [datacenter.mars]"},
		{"rack without datacenter", "[datacenter.d]\n" + base, "rack.r1.datacenter: missing"},
		{"no hosts", "[rack.r1]\nhosts = []\n", "no [host.NAME]"},
		{"glob in a name", strings.Replace(base, "[host.b]", "[host.\"b*\"]", 1), "glob"},
		{"wrong type", strings.Replace(base, `["a", "b"]`, `"a"`, 1), "line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.text))
			if err == nil {
				t.Fatalf("no error, want one with %q", tc.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v is not ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load(t.TempDir() + "/none.toml")
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v", err)
	}
}

func TestSelect(t *testing.T) {
	c := loadExample(t)
	for _, tc := range []struct {
		specs []string
		want  string // hosts, or the error's words after "!"
	}{
		{nil, "db-1 db-2 web-1 web-2 web-3 web-4 web-5"},
		{[]string{"rack=r1"}, "db-1 web-1 web-2"},
		{[]string{"rack=r1,r3"}, "db-1 db-2 web-1 web-2 web-5"},
		{[]string{"dc=west"}, "db-2 web-5"},
		{[]string{"web-*"}, "web-1 web-2 web-3 web-4 web-5"},
		{[]string{"web-[12],db-2"}, "db-2 web-1 web-2"},
		{[]string{"rack=r1", "web-*"}, "web-1 web-2"},
		{[]string{"dc=east", "rack=r2,r3"}, "web-3 web-4"},
		{[]string{"rack=r*"}, "db-1 db-2 web-1 web-2 web-3 web-4 web-5"},
		{[]string{"host=db-1"}, "db-1"},
		{[]string{"rack=r9"}, "!no rack matches \"r9\""},
		{[]string{"web-9"}, "!no host matches"},
		{[]string{"rack=r1", "dc=west"}, "!no host is in every selection"},
		{[]string{"zone=a"}, "!want rack=NAMES"},
		{[]string{"rack=r1,"}, "!an empty name"},
		{[]string{"web-["}, "!bad glob"},
	} {
		got, err := c.Select(tc.specs)
		if want, ok := strings.CutPrefix(tc.want, "!"); ok {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Select(%q) = %v, %v; want an error saying %q", tc.specs, got, err, want)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("Select(%q) = %v, %v; want %s", tc.specs, got, err, tc.want)
		}
	}
}
