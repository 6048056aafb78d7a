package cluster

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
)

// Role is what the plan asks of one host.
type Role struct {
	Host, Rack, DC string
	// RackRep: one of its rack's representatives, which fetch across the
	// rack's uplink (from other racks' representatives, or the origin).
	RackRep bool
	// Standby: a rack representative held back while the active ones'
	// links fill the uplink's budget. Two representatives fetching across
	// one uplink fetch many pieces twice; a standby fetches inside its
	// rack until it sees no piece arrive for a while (the active ones
	// are gone or stuck), and then takes over (MayPeerActive).
	Standby bool
	// DCRep: one of its datacenter's representatives (drawn from the
	// racks' ones), which fetch across the datacenter's link: from the
	// origin, or other datacenters' representatives. They alone go to the
	// origin while their rack and datacenter have pieces to give.
	DCRep bool
	// The host's budgets in bytes/s (0: not limited). Down and Up are
	// its own link's, for everything it receives and sends. Cross is its
	// share of the rack uplink and datacenter link its downloads from
	// outside the rack cross (from other racks and the origin), max-min
	// fair among the hosts crossing them. A standby, or a member, which
	// fetch from outside only when their representatives are gone, have
	// the share of an active representative of their rack.
	Down, Up, Cross int64
}

// Plan is who fetches from whom in one push. It is a pure function of
// the cluster, the hosts pushed to and a seed (the file's root), so the
// pusher and every agent work it out alike from a signed request.
type Plan struct {
	Roles map[string]*Role
	// Racks are the racks pushed to, each with its hosts in the push, by
	// name.
	Racks map[string][]string
}

// NewPlan plans a push to hosts (names of c's hosts). Representatives are
// the hosts of a rack with the fastest links, ties broken by a hash of
// the seed and the name (rendezvous hashing: another file, other
// representatives; one host gone, the others stay).
func NewPlan(c *Cluster, hosts []string, seed []byte) (*Plan, error) {
	p := &Plan{Roles: map[string]*Role{}, Racks: map[string][]string{}}
	for _, name := range hosts {
		h := c.Hosts[name]
		if h == nil {
			return nil, fmt.Errorf("plan: no host %q in the cluster", name)
		}
		if p.Roles[name] != nil {
			return nil, fmt.Errorf("plan: host %q named twice", name)
		}
		p.Roles[name] = &Role{Host: name, Rack: h.Rack.Name, DC: h.Rack.DC.Name}
		p.Racks[h.Rack.Name] = append(p.Racks[h.Rack.Name], name)
	}
	if len(p.Roles) == 0 {
		return nil, fmt.Errorf("plan: no host to push to")
	}
	rank := func(names []string) {
		slices.SortFunc(names, func(a, b string) int {
			la, lb := linkRank(c.Hosts[a].Link), linkRank(c.Hosts[b].Link)
			if la != lb {
				return cmp.Compare(lb, la)
			}
			return strings.Compare(rendezvous(seed, a), rendezvous(seed, b))
		})
	}
	// Per datacenter, the racks' representatives in rounds: every rack's
	// first, then every rack's second, so that the datacenter's ones come
	// from as many racks as can be.
	rounds := map[string][][]string{}
	for _, rack := range sortedKeys(p.Racks) {
		names := slices.Clone(p.Racks[rack])
		slices.Sort(p.Racks[rack])
		rank(names)
		dc := c.Racks[rack].DC.Name
		reps := names[:min(len(names), c.RackRepresentatives)]
		active := activeReps(c, c.Racks[rack].Uplink, reps)
		for i, n := range reps {
			p.Roles[n].RackRep = true
			if i >= active {
				p.Roles[n].Standby = true
				continue
			}
			for len(rounds[dc]) <= i {
				rounds[dc] = append(rounds[dc], nil)
			}
			rounds[dc][i] = append(rounds[dc][i], n)
		}
	}
	for _, dc := range sortedKeys(rounds) {
		left := c.DCRepresentatives
		for _, round := range rounds[dc] {
			rank(round)
			for _, n := range round[:min(len(round), left)] {
				p.Roles[n].DCRep = true
				left--
			}
		}
	}
	p.budgets(c)
	return p, nil
}

// activeReps is how many of reps (fastest first) are active: as few as
// fill the uplink's budget with their own links' budgets, at least one;
// all of them under an uplink without a limit.
func activeReps(c *Cluster, uplink Link, reps []string) int {
	if uplink.Capacity == 0 {
		return len(reps)
	}
	var sum int64
	for i, n := range reps {
		l := c.Hosts[n].Link
		if l.Capacity == 0 {
			return i + 1
		}
		if sum += l.Budget(); sum >= uplink.Budget() {
			return i + 1
		}
	}
	return len(reps)
}

// linkRank orders links fastest first; an unlimited one is fastest.
func linkRank(l Link) int64 {
	if l.Capacity == 0 {
		return 1 << 62
	}
	return l.Budget()
}

func rendezvous(seed []byte, name string) string {
	h := sha256.New()
	h.Write(seed)
	h.Write([]byte{0})
	h.Write([]byte(name))
	return string(h.Sum(nil))
}

// MayPeer reports whether hosts a and b exchange pieces: within a rack
// anyone; across racks of a datacenter, only the racks' active
// representatives; across datacenters, only the datacenters' ones.
// Everything else stays off the uplinks.
func (p *Plan) MayPeer(a, b string) bool { return p.mayPeer(a, b, false, false) }

// MayPeerActive is MayPeer as host a sees it, a standby that has taken
// over (takenOver) counting as active, and b counted active if it is a
// representative at all: b, if a standby that has not taken over,
// refuses on its side.
func (p *Plan) MayPeerActive(a, b string, takenOver bool) bool {
	return p.mayPeer(a, b, takenOver, true)
}

// mayPeer is MayPeer with standbys a and b counted active if said so.
func (p *Plan) mayPeer(a, b string, aActive, bActive bool) bool {
	ra, rb := p.Roles[a], p.Roles[b]
	switch {
	case ra == nil || rb == nil:
		return false
	case ra.Rack == rb.Rack:
		return true
	case ra.DC == rb.DC:
		return ra.RackRep && rb.RackRep && (!ra.Standby || aActive) && (!rb.Standby || bActive)
	default:
		return ra.DCRep && rb.DCRep
	}
}

// Representatives returns the representatives that fetch from the origin
// (the datacenters'), sorted: the ones work is divided among.
func (p *Plan) Representatives() []string {
	var reps []string
	for _, n := range sortedKeys(p.Roles) {
		if p.Roles[n].DCRep {
			reps = append(reps, n)
		}
	}
	return reps
}

// budgets splits every shared link's budget (Cross) among the hosts whose
// downloads cross it, max-min fair (progressive filling): all rise
// together, and a host held down by another of its links, its own one
// say, leaves the rest of this one to the others. A slow host does not
// hold the others back.
//
// A rack's representatives cross its uplink; a datacenter's cross its
// link; every host crosses its own link.
func (p *Plan) budgets(c *Cluster) {
	type link struct {
		left  float64
		hosts []string
	}
	var links []*link
	add := func(l Link, hosts []string) {
		if l.Capacity > 0 && len(hosts) > 0 {
			links = append(links, &link{left: float64(l.Budget()), hosts: hosts})
		}
	}
	racks, dcs := map[string][]string{}, map[string][]string{}
	for _, n := range sortedKeys(p.Roles) {
		r := p.Roles[n]
		h := c.Hosts[n]
		add(h.Link, []string{n})
		r.Up, r.Down = h.Link.Budget(), h.Link.Budget()
		if r.RackRep && !r.Standby {
			racks[r.Rack] = append(racks[r.Rack], n)
		}
		if r.DCRep {
			dcs[r.DC] = append(dcs[r.DC], n)
		}
	}
	for _, rk := range sortedKeys(racks) {
		add(c.Racks[rk].Uplink, racks[rk])
	}
	for _, dc := range sortedKeys(dcs) {
		add(c.Datacenters[dc].Link, dcs[dc])
	}
	rate := map[string]float64{}
	frozen := map[string]bool{}
	limited := map[string]bool{}
	for _, l := range links {
		for _, h := range l.hosts {
			limited[h] = true
		}
	}
	for {
		// The step every host still rising can take before a link fills.
		step, any := -1.0, false
		for _, l := range links {
			n := 0
			for _, h := range l.hosts {
				if !frozen[h] {
					n++
				}
			}
			if n == 0 {
				continue
			}
			if s := l.left / float64(n); step < 0 || s < step {
				step = s
			}
			any = true
		}
		if !any {
			break
		}
		for h := range limited {
			if !frozen[h] {
				rate[h] += step
			}
		}
		for _, l := range links {
			for _, h := range l.hosts {
				if !frozen[h] {
					l.left -= step
				}
			}
		}
		for _, l := range links {
			if l.left <= 1e-6*float64(len(l.hosts)) {
				for _, h := range l.hosts {
					frozen[h] = true
				}
			}
		}
	}
	for h, v := range rate {
		if r := p.Roles[h]; (r.RackRep || r.DCRep) && !r.Standby {
			r.Cross = int64(v)
		}
	}
	// A standby that takes over takes the share of the one it replaces,
	// and so does a member that falls back to the origin.
	for _, n := range sortedKeys(p.Roles) {
		if r := p.Roles[n]; r.Standby || !r.RackRep {
			for _, o := range p.Racks[r.Rack] {
				if ro := p.Roles[o]; ro.RackRep && !ro.Standby {
					r.Cross = max(r.Cross, min(ro.Cross, c.Hosts[n].Link.Budget()))
				}
			}
		}
	}
}
