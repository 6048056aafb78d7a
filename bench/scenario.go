package bench

import (
	"bufio"
	"cmp"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/internal/units"
)

// Scenario is one experiment: a file, an origin, a crowd of peers in host
// classes, how they arrive and leave, what goes wrong, and which systems
// deliver the file. It is read from a scenario file (see ParseScenario);
// cmd/stampede's demo builds one from flags.
type Scenario struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Size of the file in bytes.
	Size int64 `json:"size"`
	// OriginUp caps the origin's upload in bytes/s (0: uncapped).
	OriginUp int64 `json:"origin_up"`
	// Classes of peers; their counts add up to the crowd.
	Classes   []Class   `json:"classes"`
	Arrivals  Arrivals  `json:"arrivals"`
	Departure Departure `json:"departure"`
	Faults    []Fault   `json:"faults,omitempty"`
	// Reps is how many times each system runs (default 1); RepsBy overrides
	// it per system (e.g. one HTTP run is enough when it is origin-bound).
	Reps   int            `json:"reps"`
	RepsBy map[string]int `json:"reps_by,omitempty"`
	// Systems to run side by side, in order (default stampede,http).
	Systems []string `json:"systems"`
	// Backend the scenario is meant for ("loopback" or "netns"); a command
	// line may override it.
	Backend string `json:"backend"`
	// Timeout of one run (0: computed from the HTTP bound, see runTimeout).
	Timeout time.Duration `json:"timeout,omitempty"`
	// Seed for the arrival process, the data and the choice of peers to kill.
	Seed uint64 `json:"seed"`
	// ServeArgs and GetArgs are appended to the origin's and the stampede
	// peers' command lines (for swarm settings the harness does not know).
	ServeArgs []string `json:"serve_args,omitempty"`
	GetArgs   []string `json:"get_args,omitempty"`
	// Source is the scenario file's text, kept in reports.
	Source string `json:"source,omitempty"`
	// Mode is ModeCrowd (a flash crowd; "" in scenarios built in code) or
	// ModePush (one file to every host of Push's cluster: push.go).
	Mode string        `json:"mode,omitempty"`
	Push *PushTopology `json:"push,omitempty"`
	// Churn is a churn scenario's rates (ModeChurn: churn.go).
	Churn *ChurnSpec `json:"churn,omitempty"`
}

// Class is a group of identical peers.
type Class struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	Up    int64  `json:"up"`   // bytes/s, 0: uncapped
	Down  int64  `json:"down"` // bytes/s, 0: uncapped
	// NAT and Hosts are for mode = churn (churn.go): the NAT the class
	// sits behind ("": public) and the hosts its peers are pooled on.
	NAT   string `json:"nat,omitempty"`
	Hosts int    `json:"hosts,omitempty"`
}

// ArrivalKind says how peers join.
type ArrivalKind string

const (
	ArriveAll     ArrivalKind = "all"     // all at once
	ArriveEvery   ArrivalKind = "every"   // one every Interval
	ArrivePoisson ArrivalKind = "poisson" // a Poisson process of Rate per second
	// ArrivePool is Flashback's stabilized pool: Poisson arrivals at Rate
	// until the pool of unfinished peers stops growing (see poolWatch).
	ArrivePool ArrivalKind = "pool"
)

// Arrivals describes the arrival process.
type Arrivals struct {
	Kind     ArrivalKind   `json:"kind"`
	Interval time.Duration `json:"interval,omitempty"` // every
	Rate     float64       `json:"rate,omitempty"`     // poisson, pool: peers per second
	Window   time.Duration `json:"window,omitempty"`   // pool: the stability window
}

func (a Arrivals) String() string {
	switch a.Kind {
	case ArriveEvery:
		return "every=" + a.Interval.String()
	case ArrivePoisson:
		return "poisson=" + formatFloat(a.Rate) + "/s"
	case ArrivePool:
		return "pool=" + formatFloat(a.Rate) + "/s window=" + a.Window.String()
	}
	return string(a.Kind)
}

// Departure says when a peer leaves: on completion, or Linger after it.
type Departure struct {
	Linger time.Duration `json:"linger"`
}

func (d Departure) String() string {
	if d.Linger == 0 {
		return "leave"
	}
	return "linger=" + d.Linger.String()
}

// FaultKind names a fault.
type FaultKind string

const (
	FaultKill           FaultKind = "kill"            // SIGKILL Count running peers At
	FaultCorrupt        FaultKind = "corrupt"         // Count peers send corrupt pieces
	FaultRestartOrigin  FaultKind = "restart-origin"  // kill and restart the origin At
	FaultRestartTracker FaultKind = "restart-tracker" // kill and restart the tracker At
)

// Fault is something that goes wrong during a run.
type Fault struct {
	Kind  FaultKind     `json:"kind"`
	Count int           `json:"count,omitempty"`
	At    time.Duration `json:"at,omitempty"`
}

func (f Fault) String() string {
	switch f.Kind {
	case FaultKill:
		return fmt.Sprintf("kill %d at %v", f.Count, f.At)
	case FaultCorrupt:
		return fmt.Sprintf("corrupt %d", f.Count)
	case FaultRestartOrigin:
		return fmt.Sprintf("restart origin at %v", f.At)
	case FaultRestartTracker:
		return fmt.Sprintf("restart tracker at %v", f.At)
	}
	return string(f.Kind)
}

// Known systems, in the order reports list them.
const (
	SysStampede = "stampede" // stampede get peers (the swarm, once it exists)
	SysHTTP     = "http"     // stampede get --no-swarm: every peer from the origin
	SysCurl     = "curl"     // curl: every peer from the origin
	SysAria2    = "aria2"    // BitTorrent: aria2c seeder and leechers, opentracker
	// SysNginx: every peer from nginx, a second HTTP origin, capped as the
	// stampede origin is (see nginx.go).
	SysNginx = "http-nginx"
)

var knownSystems = []string{SysStampede, SysHTTP, SysNginx, SysCurl, SysAria2}

// Backends.
const (
	BackendLoopback = "loopback"
	BackendNetns    = "netns"
)

// Peers is the size of the crowd (of the cluster, in mode = push).
func (s *Scenario) Peers() int {
	if s.Mode == ModePush && s.Push != nil {
		return s.Push.Hosts()
	}
	n := 0
	for _, c := range s.Classes {
		n += c.Count
	}
	return n
}

// hasFault says whether the scenario has a fault of kind k.
func (s *Scenario) hasFault(k FaultKind) bool {
	return slices.ContainsFunc(s.Faults, func(f Fault) bool { return f.Kind == k })
}

// RepsFor is how many runs system gets.
func (s *Scenario) RepsFor(system string) int {
	if n, ok := s.RepsBy[system]; ok {
		return n
	}
	return max(s.Reps, 1)
}

// Summary is a one-line description of the setup.
func (s *Scenario) Summary() string {
	if s.Mode == ModePush && s.Push != nil {
		return s.pushSummary()
	}
	if s.Mode == ModeChurn && s.Churn != nil {
		return s.churnSummary()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d peers, %s, origin %s up", s.Peers(), units.Bytes(s.Size), rateString(s.OriginUp))
	for _, c := range s.Classes {
		if len(s.Classes) > 1 {
			fmt.Fprintf(&b, "; %d %s", c.Count, c.Name)
		} else {
			b.WriteString("; peers")
		}
		fmt.Fprintf(&b, " %s up / %s down", rateString(c.Up), rateString(c.Down))
	}
	fmt.Fprintf(&b, "; arrivals %s; %s", s.Arrivals, s.Departure)
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "; %s", f)
	}
	return b.String()
}

// rateString prints a rate as link speeds are quoted: "8 Mbit/s".
func rateString(bps int64) string {
	if bps <= 0 {
		return "uncapped"
	}
	return formatFloat(float64(bps)*8/1e6) + " Mbit/s"
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', 4, 64) }

// Validate checks a scenario built in code (ParseScenario calls it too).
func (s *Scenario) Validate() error {
	if s.Mode == ModePush {
		return s.validatePush()
	}
	if s.Mode == ModeChurn {
		return s.validateChurn()
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Size <= 0 {
		bad("size must be positive")
	}
	if s.OriginUp < 0 {
		bad("origin_up must not be negative")
	}
	if len(s.Classes) == 0 || s.Peers() == 0 {
		bad("no peers: give peers = N (with peer_up, peer_down) or class lines")
	}
	for _, c := range s.Classes {
		if c.Count < 0 || c.Up < 0 || c.Down < 0 {
			bad("class %s: count and caps must not be negative", c.Name)
		}
		if c.NAT != "" || c.Hosts != 0 {
			bad("class %s: nat= and hosts= are for mode = churn only", c.Name)
		}
	}
	switch s.Arrivals.Kind {
	case ArriveAll:
	case ArriveEvery:
		if s.Arrivals.Interval <= 0 {
			bad("arrivals every=D needs a positive D")
		}
	case ArrivePoisson, ArrivePool:
		if s.Arrivals.Rate <= 0 {
			bad("arrivals %s needs a positive rate", s.Arrivals.Kind)
		}
		if s.Arrivals.Kind == ArrivePool && s.Arrivals.Window <= 0 {
			bad("arrivals pool needs a positive window")
		}
	default:
		bad("arrivals %q: want all, every=D, poisson=R/s or pool=R/s", s.Arrivals.Kind)
	}
	if s.Departure.Linger < 0 {
		bad("departure linger must not be negative")
	}
	corrupt := 0
	for _, f := range s.Faults {
		if f.Kind == FaultKill && f.Count > s.Peers() {
			bad("fault %q: only %d peers", f, s.Peers())
		}
		if f.Kind == FaultCorrupt {
			corrupt += f.Count
		}
	}
	if corrupt > 0 && corrupt >= s.Peers() {
		bad("%d corrupting peers leave no honest one among %d peers", corrupt, s.Peers())
	}
	if len(s.Systems) == 0 {
		bad("no systems")
	}
	for _, sys := range s.Systems {
		if !slices.Contains(knownSystems, sys) {
			bad("unknown system %q (known: %s)", sys, strings.Join(knownSystems, ", "))
		}
	}
	if s.Backend != BackendLoopback && s.Backend != BackendNetns {
		bad("backend %q: want loopback or netns", s.Backend)
	}
	return errors.Join(errs...)
}

// ParseScenario reads a scenario file: one "key = value" per line, "#"
// starts a comment. Rates and sizes take stampede's units (8Mbit, 32MiB).
//
//	name      = flash20
//	size      = 32MiB
//	origin_up = 8Mbit
//	peers     = 20            # or class lines: class = fast count=10 up=20Mbit down=50Mbit
//	peer_up   = 8Mbit
//	peer_down = 20Mbit
//	arrivals  = all           # every=1s | poisson=2/s | pool=4/s window=5s
//	departure = leave         # linger=5s
//	fault     = kill 3 at 10s # corrupt 1 | restart origin at 20s | restart tracker at 20s
//	systems   = stampede,http,aria2
//	reps      = 3             # reps.http = 1 overrides per system
//	backend   = netns         # the backend it is meant for; default loopback
//	timeout   = 20m           # per run; default from the HTTP bound
//	seed      = 1
//	serve_args = --max-transfers 256   # appended to stampede serve
//	get_args   = --parallel 8          # appended to the stampede peers' get
//
// With "mode = push" the scenario is a cluster instead of a crowd (see
// push.go): peers, peer_up, peer_down, class, arrivals, departure, fault,
// serve_args and get_args give way to
//
//	mode           = push
//	racks          = 4        # per datacenter, with datacenters
//	hosts_per_rack = 6
//	host_up        = 100Mbit
//	host_down      = 100Mbit
//	rack_uplink    = 40Mbit   # each way
//	reserve        = 20%      # of every shared link (the default)
//	datacenters    = 2        # optional, with dc_uplink
//	dc_uplink      = 80Mbit
//	rack_representatives = 2  # optional: the cluster file's
//	systems        = push,aria2,tree,http   # the default
//
// and the backend is netns. With "mode = churn" (see churn.go) size,
// arrivals and fault give way to
//
//	mode     = churn
//	object   = 64KiB        # the object's size
//	rates    = 1,2,4,8,16   # Poisson arrivals per second, one rate after the other
//	duration = 30s          # of arrivals at each rate
//	class    = home count=10 up=8Mbit down=20Mbit nat=port-restricted hosts=2
//
// where a class's count weighs its share of the arrivals, hosts= is how
// many namespaces its peers are pooled on (default min(count, 4)) and nat=
// (full-cone, port-restricted, symmetric; default public) the NAT it sits
// behind; the backend is netns.
//
// Errors name the file and line.
func ParseScenario(name string, r io.Reader) (*Scenario, error) {
	p := parser{name: name, seen: map[string]int{}}
	s := &Scenario{Reps: 1, Systems: []string{SysStampede, SysHTTP}, Backend: BackendLoopback,
		Arrivals: Arrivals{Kind: ArriveAll}, Seed: 1}
	var (
		src               strings.Builder
		peers             = -1
		peerUp, peerDown  int64
		upSeen, downSeen  bool
		descr             []string
		sawKey            bool
		sizeSeen, originS bool
		push              PushTopology
		churn             ChurnSpec
		systemsVal        string
		lineOf            = map[string]int{} // each key's first line
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		p.line++
		raw := sc.Text()
		src.WriteString(raw + "\n")
		line := raw
		if i := strings.Index(line, "#"); i >= 0 {
			if !sawKey && strings.TrimSpace(line[:i]) == "" {
				descr = append(descr, strings.TrimSpace(line[i+1:]))
			}
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		sawKey = true
		key, val, ok := strings.Cut(line, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok || key == "" {
			p.errorf("want key = value, got %q", line)
			continue
		}
		if val == "" {
			p.errorf("%s: empty value", key)
			continue
		}
		if _, ok := lineOf[key]; !ok {
			lineOf[key] = p.line
		}
		if key != "class" && key != "fault" {
			if prev, dup := p.seen[key]; dup {
				p.errorf("%s given twice (first on line %d)", key, prev)
				continue
			}
			p.seen[key] = p.line
		}
		var err error
		switch {
		case key == "name":
			s.Name = val
		case key == "description":
			s.Description = val
		case key == "size":
			s.Size, err = units.ParseSize(val)
			sizeSeen = true
		case key == "object": // mode = churn's size
			s.Size, err = units.ParseSize(val)
		case key == "origin_up":
			s.OriginUp, err = units.ParseRate(val)
			originS = true
		case key == "peers":
			peers, err = strconv.Atoi(val)
			if err == nil && peers < 1 {
				err = fmt.Errorf("want at least 1, got %d", peers)
			}
		case key == "peer_up":
			peerUp, err = units.ParseRate(val)
			upSeen = true
		case key == "peer_down":
			peerDown, err = units.ParseRate(val)
			downSeen = true
		case key == "class":
			var c Class
			c, err = parseClass(val)
			if err == nil && slices.ContainsFunc(s.Classes, func(o Class) bool { return o.Name == c.Name }) {
				err = fmt.Errorf("class %s defined twice", c.Name)
			}
			s.Classes = append(s.Classes, c)
		case key == "arrivals":
			s.Arrivals, err = ParseArrivals(val)
		case key == "departure":
			s.Departure, err = ParseDeparture(val)
		case key == "fault":
			var f Fault
			f, err = ParseFault(val)
			s.Faults = append(s.Faults, f)
		case key == "systems":
			s.Systems, err = ParseSystems(val)
			systemsVal = val
		case key == "mode":
			s.Mode = val
			if val != ModeCrowd && val != ModePush && val != ModeChurn {
				err = fmt.Errorf("want %s or %s or %s, got %q", ModeCrowd, ModePush, ModeChurn, val)
			}
		case key == "reps":
			s.Reps, err = parsePositive(val)
		case strings.HasPrefix(key, "reps."):
			sys := strings.TrimPrefix(key, "reps.")
			if !slices.Contains(knownSystems, sys) && !slices.Contains(pushSystems, sys) {
				err = fmt.Errorf("unknown system %q (known: %s)", sys, strings.Join(knownSystems, ", "))
				break
			}
			var n int
			n, err = parsePositive(val)
			if s.RepsBy == nil {
				s.RepsBy = map[string]int{}
			}
			s.RepsBy[sys] = n
		case key == "backend":
			s.Backend = val
			if val != BackendLoopback && val != BackendNetns {
				err = fmt.Errorf("want loopback or netns, got %q", val)
			}
		case key == "timeout":
			s.Timeout, err = time.ParseDuration(val)
		case key == "seed":
			s.Seed, err = strconv.ParseUint(val, 10, 64)
		case key == "serve_args":
			s.ServeArgs = strings.Fields(val)
		case key == "get_args":
			s.GetArgs = strings.Fields(val)
		default:
			var known bool
			if known, err = churn.set(key, val); known {
				break
			}
			if known, err = push.set(key, val); !known {
				err = fmt.Errorf("unknown key (known: name, description, mode, size, origin_up, peers, peer_up, peer_down, "+
					"class, arrivals, departure, fault, systems, reps, reps.SYSTEM, backend, timeout, seed, serve_args, get_args; "+
					"with mode = push: %s; with mode = churn: %s)", strings.Join(pushKeys, ", "), strings.Join(churnKeys, ", "))
			}
		}
		if err != nil {
			p.errorf("%s: %v", key, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s.Source = src.String()
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
	}
	if s.Description == "" {
		s.Description = strings.TrimSpace(strings.Join(descr, " "))
	}
	if s.Mode == ModePush {
		return p.finishPush(s, &push, systemsVal, lineOf)
	}
	for _, k := range pushKeys {
		if line, ok := p.seen[k]; ok {
			p.line = line
			p.errorf("%s: a key of mode = push only (add mode = push)", k)
		}
	}
	for _, k := range churnKeys {
		if line, ok := p.seen[k]; ok && s.Mode != ModeChurn {
			p.line = line
			p.errorf("%s: a key of mode = churn only (add mode = churn)", k)
		}
	}
	for _, sys := range s.Systems {
		if !slices.Contains(knownSystems, sys) && s.Mode != ModeChurn {
			p.line = lineOf["systems"]
			p.errorf("systems: %q is a system of mode = push only (known: %s)", sys, strings.Join(knownSystems, ", "))
		}
	}
	p.line = 0 // whole-file errors name no line
	switch {
	case s.Mode == ModeChurn: // finishChurn says what it misses
	case !sizeSeen:
		p.errorf("missing size (e.g. size = 32MiB)")
	case !originS:
		p.errorf("missing origin_up (e.g. origin_up = 8Mbit)")
	}
	switch {
	case len(s.Classes) > 0 && (peers >= 0 || upSeen || downSeen):
		p.errorf("give either peers, peer_up and peer_down, or class lines, not both")
	case len(s.Classes) == 0 && peers < 0:
		p.errorf("missing peers (or class lines)")
	case len(s.Classes) == 0 && (!upSeen || !downSeen):
		p.errorf("peers needs peer_up and peer_down (0 for uncapped)")
	case len(s.Classes) == 0:
		s.Classes = []Class{{Name: "peer", Count: peers, Up: peerUp, Down: peerDown}}
	}
	if s.Mode == ModeChurn {
		return p.finishChurn(s, &churn, systemsVal, lineOf)
	}
	if len(p.errs) == 0 {
		if err := s.Validate(); err != nil {
			p.errs = append(p.errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return s, nil
}

type parser struct {
	name string
	line int
	seen map[string]int // key -> line
	errs []error
}

func (p *parser) errorf(format string, args ...any) {
	where := p.name
	if p.line > 0 {
		where += ":" + strconv.Itoa(p.line)
	}
	p.errs = append(p.errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
}

func parsePositive(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("want a positive integer, got %q", s)
	}
	return n, nil
}

// parseClass parses "NAME count=N up=RATE down=RATE".
func parseClass(s string) (Class, error) {
	f := strings.Fields(s)
	if len(f) == 0 || strings.Contains(f[0], "=") {
		return Class{}, fmt.Errorf("want NAME count=N up=RATE down=RATE, got %q", s)
	}
	c := Class{Name: f[0], Count: -1, Up: -1, Down: -1}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "count":
			c.Count, err = parsePositive(v)
		case "up":
			c.Up, err = units.ParseRate(v)
		case "down":
			c.Down, err = units.ParseRate(v)
		default:
			var known bool
			if known, err = churnClassField(&c, k, v); !known {
				err = fmt.Errorf("unknown field %q (want count=, up=, down=; with mode = churn also nat=, hosts=)", k)
			}
		}
		if err != nil {
			return c, fmt.Errorf("class %s: %w", c.Name, err)
		}
	}
	if c.Count < 0 || c.Up < 0 || c.Down < 0 {
		return c, fmt.Errorf("class %s: needs count=, up= and down=", c.Name)
	}
	return c, nil
}

// ParseArrivals parses "all", "every=1s", "poisson=2/s" or
// "pool=4/s [window=5s]" (rates per second; "/m" for per minute).
func ParseArrivals(s string) (Arrivals, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return Arrivals{}, errors.New("empty")
	}
	kind, arg, _ := strings.Cut(f[0], "=")
	a := Arrivals{Kind: ArrivalKind(kind)}
	var err error
	switch a.Kind {
	case ArriveAll:
		if arg != "" || len(f) > 1 {
			return a, fmt.Errorf("all takes no argument, got %q", s)
		}
		return a, nil
	case ArriveEvery:
		if len(f) > 1 {
			return a, fmt.Errorf("every takes one argument, got %q", s)
		}
		a.Interval, err = time.ParseDuration(arg)
		if err == nil && a.Interval <= 0 {
			err = fmt.Errorf("interval must be positive")
		}
	case ArrivePoisson, ArrivePool:
		a.Rate, err = parsePerSecond(arg)
		if a.Kind == ArrivePool {
			a.Window = 5 * time.Second
		}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			if a.Kind != ArrivePool || k != "window" {
				return a, fmt.Errorf("unexpected %q", kv)
			}
			if a.Window, err = time.ParseDuration(v); err == nil && a.Window <= 0 {
				err = fmt.Errorf("window must be positive")
			}
		}
	default:
		return a, fmt.Errorf("%q: want all, every=D, poisson=R/s or pool=R/s", s)
	}
	if err != nil {
		return a, fmt.Errorf("%q: %w", s, err)
	}
	return a, nil
}

// parsePerSecond parses "2", "2/s", "0.5/s" or "30/m".
func parsePerSecond(s string) (float64, error) {
	num, unit, _ := strings.Cut(s, "/")
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("want a positive rate such as 2/s, got %q", s)
	}
	switch unit {
	case "", "s":
		return f, nil
	case "m", "min":
		return f / 60, nil
	}
	return 0, fmt.Errorf("rate %q: unit must be /s or /m", s)
}

// ParseDeparture parses "leave" or "linger=5s".
func ParseDeparture(s string) (Departure, error) {
	if s == "leave" {
		return Departure{}, nil
	}
	if v, ok := strings.CutPrefix(s, "linger="); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return Departure{}, fmt.Errorf("linger wants a duration such as 5s, got %q", v)
		}
		return Departure{Linger: d}, nil
	}
	return Departure{}, fmt.Errorf("%q: want leave or linger=D", s)
}

// ParseFault parses "kill K at T", "corrupt K", "restart origin at T" or
// "restart tracker at T".
func ParseFault(s string) (Fault, error) {
	f := strings.Fields(s)
	bad := fmt.Errorf("%q: want kill K at T, corrupt K, restart origin at T or restart tracker at T", s)
	at := func(i int) (time.Duration, error) {
		if len(f) != i+2 || f[i] != "at" {
			return 0, bad
		}
		d, err := time.ParseDuration(f[i+1])
		if err != nil || d < 0 {
			return 0, fmt.Errorf("%q: bad time %q", s, f[i+1])
		}
		return d, nil
	}
	switch {
	case len(f) >= 2 && f[0] == "kill":
		n, err := parsePositive(f[1])
		if err != nil {
			return Fault{}, fmt.Errorf("%q: %w", s, err)
		}
		t, err := at(2)
		return Fault{Kind: FaultKill, Count: n, At: t}, err
	case len(f) == 2 && f[0] == "corrupt":
		n, err := parsePositive(f[1])
		if err != nil {
			return Fault{}, fmt.Errorf("%q: %w", s, err)
		}
		return Fault{Kind: FaultCorrupt, Count: n}, nil
	case len(f) >= 2 && f[0] == "restart" && (f[1] == "origin" || f[1] == "tracker"):
		t, err := at(2)
		return Fault{Kind: FaultKind("restart-" + f[1]), At: t}, err
	}
	return Fault{}, bad
}

// ParseSystems parses a comma-separated list of systems, of either mode
// (Validate checks them against the scenario's).
func ParseSystems(s string) ([]string, error) {
	var out []string
	for _, sys := range strings.Split(s, ",") {
		sys = strings.TrimSpace(sys)
		if !slices.Contains(knownSystems, sys) && !slices.Contains(pushSystems, sys) {
			return nil, fmt.Errorf("unknown system %q (known: %s; with mode = push: %s)", sys,
				strings.Join(knownSystems, ", "), strings.Join(pushSystems, ", "))
		}
		if slices.Contains(out, sys) {
			return nil, fmt.Errorf("system %q listed twice", sys)
		}
		out = append(out, sys)
	}
	return out, nil
}

//go:embed scenarios/*.txt
var scenarioFiles embed.FS

// StandardScenarios lists the scenarios shipped in bench/scenarios, by name.
func StandardScenarios() []string {
	ents, _ := scenarioFiles.ReadDir("scenarios")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".txt"))
	}
	slices.SortFunc(names, cmp.Compare)
	return names
}

// LoadScenario reads the scenario file at path, or, when no such file
// exists and path is a bare name, the standard scenario of that name.
func LoadScenario(path string) (*Scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) || strings.ContainsAny(path, `/\.`) {
			return nil, err
		}
		data, ferr := scenarioFiles.ReadFile("scenarios/" + path + ".txt")
		if ferr != nil {
			return nil, fmt.Errorf("no scenario file %s and no standard scenario of that name (standard: %s)",
				path, strings.Join(StandardScenarios(), ", "))
		}
		return ParseScenario("bench/scenarios/"+path+".txt", strings.NewReader(string(data)))
	}
	defer f.Close()
	return ParseScenario(path, f)
}
