package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The testbed runs programs it does not ship (aria2c, nginx, ip...) and
// installs none of them: scripts/install-bench-deps.sh does, and what is
// missing is named here, with that command, before anything starts.

// InstallCommand installs every program the testbed runs (Debian packages,
// from the repository's root).
const InstallCommand = "sudo scripts/install-bench-deps.sh"

// A Program is an external program the testbed runs, with the Debian
// package that provides it (the one scripts/install-deps.sh installs).
type Program struct {
	Name    string // as looked up in PATH
	Package string
}

// The programs each system and backend runs besides stampede itself.
var (
	aria2Programs = []Program{{"aria2c", "aria2"}, {"opentracker", "opentracker"}, {"mktorrent", "mktorrent"}}
	nginxPrograms = []Program{{"nginx", "nginx"}}
	curlPrograms  = []Program{{"curl", "curl"}}
	netnsPrograms = []Program{{"ip", "iproute2"}, {"tc", "iproute2"}}
)

// systemPrograms lists what system runs. The http system also runs curl
// with a stampede binary that has no get --no-swarm; Run checks that once
// it has probed the binary.
func systemPrograms(system string) []Program {
	switch system {
	case SysAria2:
		return aria2Programs
	case SysNginx:
		return nginxPrograms
	case SysCurl:
		return curlPrograms
	}
	return nil
}

// Unavailable is one part of a scenario this machine cannot run: a system
// whose programs are not installed, or the backend (its programs, or root
// for netns). It is an error naming the scenario, what is missing and how
// to get it.
type Unavailable struct {
	Scenario string
	// System is the system that cannot run; "" when the backend cannot,
	// which stops the whole scenario.
	System  string
	Backend string
	// Missing are the programs not found.
	Missing []Program
	// NeedRoot: the netns backend and not root.
	NeedRoot bool
}

func (u *Unavailable) Error() string {
	var b strings.Builder
	if u.Scenario != "" {
		b.WriteString(u.Scenario + ": ")
	}
	if u.System != "" {
		fmt.Fprintf(&b, "system %s", u.System)
	} else {
		fmt.Fprintf(&b, "the %s backend", u.Backend)
	}
	if u.NeedRoot {
		b.WriteString(" needs root (network namespaces and tc): run it as root, or with --backend loopback")
		if len(u.Missing) > 0 {
			b.WriteString("; it also")
		}
	}
	if len(u.Missing) > 0 {
		var names, pkgs []string
		for _, p := range u.Missing {
			names = append(names, p.Name)
			if !slices.Contains(pkgs, p.Package) {
				pkgs = append(pkgs, p.Package)
			}
		}
		plural := ""
		if len(pkgs) > 1 {
			plural = "s"
		}
		fmt.Fprintf(&b, " needs %s, not installed (Debian package%s %s): install with %s",
			strings.Join(names, ", "), plural, strings.Join(pkgs, ", "), InstallCommand)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrNeedRoot) hold for the netns backend run
// without root.
func (u *Unavailable) Unwrap() error {
	if u.NeedRoot {
		return ErrNeedRoot
	}
	return nil
}

// Check lists what stops sc from running here on backend with systems
// (the scenario's own when nil): the backend first, then each system in
// order. lookPath finds a program (exec.LookPath), root says whether the
// process runs as root; both are passed in so the check does not depend
// on the machine it is tested on.
func Check(sc *Scenario, backend string, systems []string, lookPath func(string) (string, error), root bool) []*Unavailable {
	if backend == "" {
		backend = sc.Backend
	}
	if systems == nil {
		systems = sc.Systems
	}
	var out []*Unavailable
	if backend == BackendNetns {
		if m := missingPrograms(lookPath, netnsPrograms); len(m) > 0 || !root {
			out = append(out, &Unavailable{Scenario: sc.Name, Backend: backend, Missing: m, NeedRoot: !root})
		}
	}
	for _, s := range systems {
		if m := missingPrograms(lookPath, systemPrograms(s)); len(m) > 0 {
			out = append(out, &Unavailable{Scenario: sc.Name, System: s, Backend: backend, Missing: m})
		}
	}
	return out
}

// missingPrograms lists the programs of progs that lookPath does not find.
func missingPrograms(lookPath func(string) (string, error), progs []Program) []Program {
	var out []Program
	for _, p := range progs {
		if _, err := lookPath(p.Name); err != nil {
			out = append(out, p)
		}
	}
	return out
}

// Runnable splits the result of Check: whether the scenario can run at all
// (its backend can), and the systems to leave out.
func Runnable(unavailable []*Unavailable) (ok bool, leaveOut []string) {
	ok = true
	for _, u := range unavailable {
		if u.System == "" {
			ok = false
		} else {
			leaveOut = append(leaveOut, u.System)
		}
	}
	return ok, leaveOut
}

// joinUnavailable is one error for all of us.
func joinUnavailable(us []*Unavailable) error {
	errs := make([]error, len(us))
	for i, u := range us {
		errs[i] = u
	}
	return errors.Join(errs...)
}
