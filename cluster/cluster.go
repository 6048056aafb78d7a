// Package cluster is what "stampede push" knows of a cluster: its file
// (hosts, topology, shared links), the push plan, the signed push request
// and the load-aware throttle of an agent.
//
//   - The cluster file (cluster.go) is TOML: hosts with the addresses of
//     their agents (the push service of "stampede daemon") and peer ports;
//     datacenters, racks listing their hosts; the capacity of every shared
//     link (each host's link, each rack's uplink, each datacenter's link)
//     and the reserve left free on it. Select (select.go) picks hosts by
//     rack, datacenter or name glob.
//   - The plan (plan.go) is a pure function of the cluster, the hosts
//     pushed to and the file's root: per rack, representatives fetch across
//     the rack's uplink and the others only inside the rack; per
//     datacenter, representatives drawn from the racks' ones fetch across
//     its link; each shared link's budget (capacity less reserve) is split
//     among the agents that cross it. Work (work.go) divides the file's
//     pieces among representatives and lets one that is done take claims
//     from one that is behind (the Hyves thesis's START).
//   - A push request (request.go) is signed with the cluster's ed25519 key
//     (package sign's files, "stampede keygen") over everything an agent
//     acts on; agents check it, its expiry and its nonce.
//   - The throttle (throttle.go) slows an agent's disk writes and uploads
//     while the host's load or IO pressure is past a threshold, reading a
//     LoadSource that tests drive.
//
// Nothing here does I/O but Load and the Linux load source; docs/push.md
// documents the file and the protocol.
package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/stampede-dev/stampede/internal/units"
)

// Defaults of the cluster file.
const (
	// DefaultReserve is the share of each link left free: the thesis's
	// queuing argument (a link run near capacity queues without bound).
	DefaultReserve = 0.20
	// DefaultRackRepresentatives per rack fetch across its uplink.
	DefaultRackRepresentatives = 2
	// DefaultDCRepresentatives per datacenter fetch across its link, drawn
	// from its racks' representatives (all of them where there are fewer).
	DefaultDCRepresentatives = 5
	// DefaultAgentPort and DefaultPeerPort complete a host's address given
	// without a port.
	DefaultAgentPort = 7882
	DefaultPeerPort  = 7881
	// DefaultDatacenter names the datacenter of a file that declares none.
	DefaultDatacenter = "default"
)

// ErrInvalid wraps every error of a cluster file that parses but does not
// make sense; test with errors.Is.
var ErrInvalid = errors.New("invalid cluster file")

// Link is a shared link: its capacity each way in bytes/s (0: not
// limited) and the share of it left free.
type Link struct {
	Capacity int64
	Reserve  float64
}

// Budget is what pushes may use of l: its capacity less the reserve, 0
// when l is not limited.
func (l Link) Budget() int64 {
	return int64(float64(l.Capacity) * (1 - l.Reserve))
}

// Host is one host of the cluster.
type Host struct {
	Name  string
	Agent string // HOST:PORT of its push service
	Peer  string // HOST:PORT of its daemon's peer port
	Link  Link
	Rack  *Rack
}

// Rack is a set of hosts behind one uplink.
type Rack struct {
	Name   string
	Uplink Link
	DC     *Datacenter
	Hosts  []*Host // by name
}

// Datacenter is a set of racks behind one link.
type Datacenter struct {
	Name  string
	Link  Link
	Racks []*Rack // by name
}

// Cluster is a checked cluster file.
type Cluster struct {
	Hosts       map[string]*Host
	Racks       map[string]*Rack
	Datacenters map[string]*Datacenter
	// RackRepresentatives and DCRepresentatives are the plan's numbers of
	// representatives per rack and per datacenter.
	RackRepresentatives int
	DCRepresentatives   int
}

// HostNames returns every host's name, sorted.
func (c *Cluster) HostNames() []string {
	names := make([]string, 0, len(c.Hosts))
	for n := range c.Hosts {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// HostByPeer returns the host whose peer address is addr, nil if none.
func (c *Cluster) HostByPeer(addr string) *Host {
	for _, h := range c.Hosts {
		if h.Peer == addr {
			return h
		}
	}
	return nil
}

// rate is a capacity as the file writes it: "40Mbit", "1Gbit", "12MB".
type rate int64

func (r *rate) UnmarshalText(b []byte) error {
	v, err := units.ParseRate(string(b))
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("capacity %q is negative", b)
	}
	*r = rate(v)
	return nil
}

// reserve is a share: "20%" or 0.2.
type reserve struct {
	v   float64
	set bool
}

func (r *reserve) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil {
		return fmt.Errorf("reserve %q: want a share such as 20%% or 0.2", b)
	}
	if pct {
		v /= 100
	}
	if v < 0 || v >= 1 {
		return fmt.Errorf("reserve %q: want at least 0%% and less than 100%%", b)
	}
	*r = reserve{v: v, set: true}
	return nil
}

// The file's shape. Every table is keyed by name.
type (
	fileTop struct {
		Reserve             reserve             `toml:"reserve"`
		HostLink            rate                `toml:"host_link"`
		RackRepresentatives int                 `toml:"rack_representatives"`
		DCRepresentatives   int                 `toml:"dc_representatives"`
		Hosts               map[string]fileHost `toml:"host"`
		Racks               map[string]fileRack `toml:"rack"`
		Datacenters         map[string]fileDC   `toml:"datacenter"`
	}
	fileHost struct {
		Agent   string  `toml:"agent"`
		Peer    string  `toml:"peer"`
		Link    *rate   `toml:"link"`
		Reserve reserve `toml:"reserve"`
	}
	fileRack struct {
		Datacenter string   `toml:"datacenter"`
		Uplink     rate     `toml:"uplink"`
		Reserve    reserve  `toml:"reserve"`
		Hosts      []string `toml:"hosts"`
	}
	fileDC struct {
		Link    rate    `toml:"link"`
		Reserve reserve `toml:"reserve"`
	}
)

// Load reads and checks the cluster file at path.
func Load(path string) (*Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster file: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse checks a cluster file's text. Its errors name the line (syntax,
// types, capacities) or the key (everything else); unknown keys are
// refused, so that a misspelt "uplnk" is not a rack without a limit.
func Parse(data []byte) (*Cluster, error) {
	var f fileTop
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		keys := make([]string, len(u))
		for i, k := range u {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("%w: unknown key %s", ErrInvalid, strings.Join(keys, ", "))
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
	}
	def := DefaultReserve
	if f.Reserve.set {
		def = f.Reserve.v
	}
	share := func(r reserve) float64 {
		if r.set {
			return r.v
		}
		return def
	}
	c := &Cluster{
		Hosts: map[string]*Host{}, Racks: map[string]*Rack{}, Datacenters: map[string]*Datacenter{},
		RackRepresentatives: f.RackRepresentatives, DCRepresentatives: f.DCRepresentatives,
	}
	if c.RackRepresentatives < 0 || c.DCRepresentatives < 0 {
		return nil, bad("rack_representatives and dc_representatives must not be negative")
	}
	if c.RackRepresentatives == 0 {
		c.RackRepresentatives = DefaultRackRepresentatives
	}
	if c.DCRepresentatives == 0 {
		c.DCRepresentatives = DefaultDCRepresentatives
	}
	if len(f.Hosts) == 0 {
		return nil, bad("no [host.NAME] table: a cluster needs hosts")
	}
	if len(f.Racks) == 0 {
		return nil, bad("no [rack.NAME] table: every host must be in a rack")
	}
	for _, name := range sortedKeys(f.Datacenters) {
		d := f.Datacenters[name]
		if err := checkName("datacenter", name); err != nil {
			return nil, bad("%v", err)
		}
		c.Datacenters[name] = &Datacenter{Name: name, Link: Link{Capacity: int64(d.Link), Reserve: share(d.Reserve)}}
	}
	for _, name := range sortedKeys(f.Hosts) {
		h := f.Hosts[name]
		if err := checkName("host", name); err != nil {
			return nil, bad("%v", err)
		}
		agent, err := hostPort(h.Agent, DefaultAgentPort)
		if err != nil {
			return nil, bad("host.%s.agent: %v", name, err)
		}
		peer := h.Peer
		if peer == "" {
			ah, _, _ := net.SplitHostPort(agent)
			peer = ah
		}
		if peer, err = hostPort(peer, DefaultPeerPort); err != nil {
			return nil, bad("host.%s.peer: %v", name, err)
		}
		link := int64(f.HostLink)
		if h.Link != nil {
			link = int64(*h.Link)
		}
		c.Hosts[name] = &Host{Name: name, Agent: agent, Peer: peer, Link: Link{Capacity: link, Reserve: share(h.Reserve)}}
	}
	byAgent, byPeer := map[string]string{}, map[string]string{}
	for _, name := range c.HostNames() {
		h := c.Hosts[name]
		if o, ok := byAgent[h.Agent]; ok {
			return nil, bad("host.%s.agent: %s is host %s's agent already", name, h.Agent, o)
		}
		if o, ok := byPeer[h.Peer]; ok {
			return nil, bad("host.%s.peer: %s is host %s's peer port already", name, h.Peer, o)
		}
		byAgent[h.Agent], byPeer[h.Peer] = name, name
	}
	for _, name := range sortedKeys(f.Racks) {
		r := f.Racks[name]
		if err := checkName("rack", name); err != nil {
			return nil, bad("%v", err)
		}
		dcName := r.Datacenter
		switch {
		case dcName == "" && len(f.Datacenters) > 0:
			return nil, bad("rack.%s.datacenter: missing (the file declares datacenters: %s)", name, strings.Join(sortedKeys(f.Datacenters), ", "))
		case dcName == "":
			dcName = DefaultDatacenter
			if c.Datacenters[dcName] == nil {
				c.Datacenters[dcName] = &Datacenter{Name: dcName, Link: Link{Reserve: def}}
			}
		case c.Datacenters[dcName] == nil:
			return nil, bad("rack.%s.datacenter: no [datacenter.%s]", name, dcName)
		}
		dc := c.Datacenters[dcName]
		rk := &Rack{Name: name, Uplink: Link{Capacity: int64(r.Uplink), Reserve: share(r.Reserve)}, DC: dc}
		if len(r.Hosts) == 0 {
			return nil, bad("rack.%s.hosts: empty", name)
		}
		for _, hn := range r.Hosts {
			h := c.Hosts[hn]
			switch {
			case h == nil:
				return nil, bad("rack.%s.hosts: no [host.%s]", name, hn)
			case h.Rack == rk:
				return nil, bad("rack.%s.hosts: %s is listed twice", name, hn)
			case h.Rack != nil:
				return nil, bad("rack.%s.hosts: %s is in rack %s already", name, hn, h.Rack.Name)
			}
			h.Rack = rk
			rk.Hosts = append(rk.Hosts, h)
		}
		slices.SortFunc(rk.Hosts, func(a, b *Host) int { return strings.Compare(a.Name, b.Name) })
		c.Racks[name] = rk
		dc.Racks = append(dc.Racks, rk)
	}
	for _, name := range c.HostNames() {
		if c.Hosts[name].Rack == nil {
			return nil, bad("host.%s: in no rack (list it in a rack's hosts)", name)
		}
	}
	for _, name := range sortedKeys(c.Datacenters) {
		if len(c.Datacenters[name].Racks) == 0 {
			return nil, bad("datacenter.%s: no rack names it", name)
		}
	}
	return c, nil
}

// checkName refuses names Select could not tell from its syntax.
func checkName(kind, name string) error {
	if name == "" || strings.ContainsAny(name, "=,*?[] \t") {
		return fmt.Errorf("%s %q: a name must not be empty nor hold '=', ',', spaces or glob characters", kind, name)
	}
	return nil
}

// hostPort returns s as HOST:PORT, with port def when s has none.
func hostPort(s string, def int) (string, error) {
	if s == "" {
		return "", errors.New("missing")
	}
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		// No port: the whole of s is the host (brackets off an IPv6 one).
		h, p = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), strconv.Itoa(def)
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 || h == "" {
		return "", fmt.Errorf("%q is not HOST or HOST:PORT", s)
	}
	return net.JoinHostPort(h, p), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
