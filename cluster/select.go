package cluster

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Select returns the names of the hosts specs pick, sorted; every host
// when there is no spec. A spec is one of
//
//	rack=R1,R2   the hosts of these racks
//	dc=D1,D2     the hosts of these datacenters
//	host=H1,H2   these hosts
//	web-*,db-1   these hosts (host= left out)
//
// where each name may be a glob (path.Match: *, ?, [a-z]). Within a spec
// the names add up; several specs narrow each other down (rack=r1 and
// 'web-*': the web hosts of rack r1). A name that matches nothing is an
// error, so a typo never pushes to fewer hosts than meant, and so is a
// selection of no host.
func (c *Cluster) Select(specs []string) ([]string, error) {
	chosen := c.HostNames()
	for _, spec := range specs {
		kind, list, ok := strings.Cut(spec, "=")
		if !ok {
			kind, list = "host", spec
		}
		names := strings.Split(list, ",")
		var pick func(pattern string) []string
		switch kind {
		case "host":
			pick = func(p string) []string { return matching(c.HostNames(), p) }
		case "rack":
			pick = func(p string) []string {
				var hosts []string
				for _, r := range matching(sortedKeys(c.Racks), p) {
					for _, h := range c.Racks[r].Hosts {
						hosts = append(hosts, h.Name)
					}
				}
				return hosts
			}
		case "dc":
			pick = func(p string) []string {
				var hosts []string
				for _, d := range matching(sortedKeys(c.Datacenters), p) {
					for _, r := range c.Datacenters[d].Racks {
						for _, h := range r.Hosts {
							hosts = append(hosts, h.Name)
						}
					}
				}
				return hosts
			}
		default:
			return nil, fmt.Errorf("--hosts %q: want rack=NAMES, dc=NAMES or host names (globs allowed)", spec)
		}
		var union []string
		for _, n := range names {
			n = strings.TrimSpace(n)
			if n == "" {
				return nil, fmt.Errorf("--hosts %q: an empty name", spec)
			}
			if _, err := path.Match(n, ""); err != nil {
				return nil, fmt.Errorf("--hosts %q: bad glob %q: %w", spec, n, err)
			}
			got := pick(n)
			if len(got) == 0 {
				return nil, fmt.Errorf("--hosts %q: no %s matches %q", spec, kind, n)
			}
			union = append(union, got...)
		}
		chosen = slices.DeleteFunc(chosen, func(h string) bool { return !slices.Contains(union, h) })
	}
	if len(chosen) == 0 {
		return nil, fmt.Errorf("--hosts %s: no host is in every selection", strings.Join(specs, " --hosts "))
	}
	return chosen, nil
}

// matching returns the names pattern matches (a glob, or a plain name).
func matching(names []string, pattern string) []string {
	var out []string
	for _, n := range names {
		if ok, _ := path.Match(pattern, n); ok {
			out = append(out, n)
		}
	}
	return out
}
