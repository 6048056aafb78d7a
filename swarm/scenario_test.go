package swarm

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/internal/golden"
	"github.com/stampede-dev/stampede/pieceset"
)

// TestScenarios runs every testdata/scenarios/*.txt script and compares the
// actions it produced with the .golden file next to it. Run with -rewrite
// to regenerate them, then review the diff.
//
// A script is one command per line, optionally prefixed with "at DURATION"
// (time since the start; time never goes back). Lines starting with # and
// blank lines are copied to the output. Commands:
//
//	config pieces=16 k=3 min=2 max=8 seed=1 ...   New + Start (see applyConfig)
//	up ID [addr=A] [out]        PeerUp
//	down ID [REASON]            PeerDown (Left if REASON has "left")
//	haveset ID 0-7,9|all|none   HaveSet
//	have ID P                   Have
//	started ID P                Started (START)
//	choked ID / unchoked ID     Choked / Unchoked
//	received ID P [bytes=N]     Received
//	corrupt ID P                Corrupt
//	rejected ID P [REASON]      Rejected
//	origin P ok|fail|busy=2s    OriginResult
//	origin P ok got=Q           OriginResult: the origin picked Q instead
//	request ID P                PeerRequest (the peer asks us)
//	uploaded ID P [bytes=N]     Uploaded
//	recommended ID A,B          Recommended
//	rtt ID D                    PathRTT
//	tracker size=N [peers=A,B]  TrackerPeers
//	dialfailed A                DialFailed
//	tick                        Tick
//	deliver ID [n=N] [every=D]  N times: advance D, ID delivers its oldest request
//	ticks N every=D             N times: advance D, Tick (prints only ticks with actions)
//	stats                       print the counters
//	peers                       print per-peer state
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenarios")
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".txt")
		t.Run(name, func(t *testing.T) {
			script, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := runScenario(string(script))
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, strings.TrimSuffix(file, ".txt")+".golden", []byte(got))
		})
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type scenario struct {
	s   *Scheduler
	now time.Time
	out strings.Builder
}

func runScenario(script string) (string, error) {
	var sc scenario
	sc.now = t0
	r := bufio.NewScanner(strings.NewReader(script))
	for ln := 1; r.Scan(); ln++ {
		line := strings.TrimSpace(r.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			sc.out.WriteString(line + "\n")
			continue
		}
		if err := sc.exec(line); err != nil {
			return "", fmt.Errorf("line %d %q: %w", ln, line, err)
		}
	}
	return sc.out.String(), r.Err()
}

func (sc *scenario) exec(line string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	sc.out.WriteString(line + "\n")
	f := strings.Fields(line)
	if f[0] == "at" {
		if len(f) < 3 {
			return fmt.Errorf("at needs a time and a command")
		}
		d, err := time.ParseDuration(f[1])
		if err != nil {
			return err
		}
		at := t0.Add(d)
		if at.Before(sc.now) {
			return fmt.Errorf("time goes back: %v < %v", d, sc.now.Sub(t0))
		}
		sc.now = at
		f = f[2:]
	}
	cmd, args := f[0], f[1:]
	if cmd == "config" {
		return sc.config(args)
	}
	if sc.s == nil {
		return fmt.Errorf("config first")
	}
	kv, pos := splitArgs(args)
	num := func(k int) int {
		if k >= len(pos) {
			panic(fmt.Sprintf("%s: missing argument %d", cmd, k+1))
		}
		v, err := strconv.Atoi(pos[k])
		if err != nil {
			panic(fmt.Sprintf("%s: %v", cmd, err))
		}
		return v
	}
	id := func() PeerID { return PeerID(num(0)) }
	var ev Event
	switch cmd {
	case "up":
		ev = PeerUp{Peer: id(), Addr: kv["addr"], Outbound: slices.Contains(pos, "out")}
	case "down":
		ev = PeerDown{Peer: id(), Reason: strings.Join(pos[1:], " "), Left: slices.Contains(pos, "left")}
	case "haveset":
		set, err := parseSet(pos[1], len(sc.s.pieces))
		if err != nil {
			return err
		}
		ev = HaveSet{Peer: id(), Set: set}
	case "have":
		ev = Have{Peer: id(), Piece: num(1)}
	case "started":
		ev = Started{Peer: id(), Piece: num(1)}
	case "stopped":
		ev = Stopped{Peer: id(), Piece: num(1)}
	case "choked":
		ev = Choked{Peer: id()}
	case "unchoked":
		ev = Unchoked{Peer: id()}
	case "received":
		ev = Received{Peer: id(), Piece: num(1), Bytes: parseInt(kv["bytes"])}
	case "corrupt":
		ev = Corrupt{Peer: id(), Piece: num(1)}
	case "rejected":
		ev = Rejected{Peer: id(), Piece: num(1), Reason: strings.Join(pos[2:], " ")}
	case "origin":
		e := OriginResult{Piece: num(0), OK: slices.Contains(pos, "ok")}
		if g, ok := kv["got"]; ok {
			e.Picked, e.Got = true, int(parseInt(g))
		}
		if b, ok := kv["busy"]; ok {
			d, err := time.ParseDuration(b)
			if err != nil {
				return err
			}
			e.Busy = d
		}
		ev = e
	case "request":
		ev = PeerRequest{Peer: id(), Piece: num(1)}
	case "uploaded":
		ev = Uploaded{Peer: id(), Piece: num(1), Bytes: parseInt(kv["bytes"])}
	case "recommended":
		ev = Recommended{Peer: id(), Addrs: splitList(pos[1])}
	case "rtt":
		d, err := time.ParseDuration(pos[1])
		if err != nil {
			return err
		}
		ev = PathRTT{Peer: id(), RTT: d}
	case "tracker":
		ev = TrackerPeers{Addrs: splitList(kv["peers"]), SwarmSize: int(parseInt(kv["size"]))}
	case "dialfailed":
		ev = DialFailed{Addr: pos[0]}
	case "prefer":
		ev = Prefer{From: num(0), Count: num(1)}
	case "tick":
		ev = Tick{}
	case "ticks":
		every, err := time.ParseDuration(kv["every"])
		if err != nil {
			return err
		}
		for range num(0) {
			sc.now = sc.now.Add(every)
			acts := sc.s.Step(Tick{}, sc.now)
			for _, a := range acts {
				fmt.Fprintf(&sc.out, "  @%v %s\n", sc.now.Sub(t0), formatAction(a))
			}
		}
		return nil
	case "deliver":
		// The peer delivers its oldest outstanding request, n times, every
		// D (time advances before each delivery).
		n, every := 1, time.Duration(0)
		if v, ok := kv["n"]; ok {
			n = int(parseInt(v))
		}
		if v, ok := kv["every"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			every = d
		}
		for range n {
			sc.now = sc.now.Add(every)
			p := sc.s.peers[id()]
			if p == nil || len(p.reqs) == 0 {
				fmt.Fprintf(&sc.out, "  @%v peer %d has nothing to deliver\n", sc.now.Sub(t0), id())
				continue
			}
			piece := p.reqs[0].piece
			fmt.Fprintf(&sc.out, "  @%v received %d %d\n", sc.now.Sub(t0), id(), piece)
			for _, a := range sc.s.Step(Received{Peer: id(), Piece: piece}, sc.now) {
				fmt.Fprintf(&sc.out, "    %s\n", formatAction(a))
			}
		}
		return nil
	case "stats":
		sc.printStats()
		return nil
	case "peers":
		for _, p := range sc.s.Stats().PerPeer {
			fmt.Fprintf(&sc.out, "  peer %d %s: down=%d up=%d inflight=%d depth=%d rate=%.0fB/s lat=%v unchoked=%v unchokes-us=%v\n",
				p.ID, p.Addr, p.Down, p.Up, p.InFlight, p.Depth, p.Rate, p.Latency, p.Unchoked, p.UnchokeUs)
		}
		return nil
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	for _, a := range sc.s.Step(ev, sc.now) {
		fmt.Fprintf(&sc.out, "  %s\n", formatAction(a))
	}
	return nil
}

// config keys: pieces, piecelen, have (ranges), k, slice, pipeline, start
// (StartTimeout), quiet, trackerwait, min, max, want, slots, opt (negative:
// none), optint, choke, tft, tab, repair, refill, dialbackoff, grace,
// timeout, mintimeout, depth, endgame, strikes, stall, seed.
func (sc *scenario) config(args []string) error {
	kv, _ := splitArgs(args)
	// The scripts were written with 1 s origin slices, which their
	// narratives count in; "slice=" still overrides it.
	c := Config{OriginSlice: time.Second}
	dur := func(k string, d *time.Duration) error {
		if v, ok := kv[k]; ok {
			x, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			*d = x
		}
		return nil
	}
	ints := map[string]*int{
		"pieces": &c.NumPieces, "k": &c.OriginK, "pipeline": &c.OriginPipeline,
		"min": &c.MinPeers, "max": &c.MaxPeers, "want": &c.WantPeers,
		"slots": &c.UploadSlots, "opt": &c.OptimisticSlots, "depth": &c.MaxDepth,
		"endgame": &c.EndgameMax, "strikes": &c.Strikes,
	}
	for k, p := range ints {
		if v, ok := kv[k]; ok {
			*p = int(parseInt(v))
		}
	}
	durs := map[string]*time.Duration{
		"slice": &c.OriginSlice, "start": &c.StartTimeout, "trackerwait": &c.TrackerWait,
		"optint": &c.OptimisticInterval, "choke": &c.ChokeInterval, "repair": &c.RepairAfter,
		"timeout": &c.RequestTimeout, "mintimeout": &c.MinRequestTimeout, "stall": &c.StallAfter,
		"dialbackoff": &c.DialBackoff, "refill": &c.RefillEvery, "grace": &c.PeerGrace,
	}
	for k, p := range durs {
		if err := dur(k, p); err != nil {
			return err
		}
	}
	c.StrictTFT = kv["tft"] == "1"
	c.QuietRequests = kv["quiet"] == "1"
	c.TFTTab = parseInt(kv["tab"])
	c.Seed = uint64(parseInt(kv["seed"]))
	if v, ok := kv["piecelen"]; ok {
		n := parseInt(v)
		c.PieceLen = func(int) int64 { return n }
	}
	have := pieceset.New(c.NumPieces)
	if v, ok := kv["have"]; ok {
		var err error
		if have, err = parseSet(v, c.NumPieces); err != nil {
			return err
		}
	}
	sc.s = New(c, have, sc.now)
	for _, a := range sc.s.Start(sc.now) {
		fmt.Fprintf(&sc.out, "  %s\n", formatAction(a))
	}
	return nil
}

func (sc *scenario) printStats() {
	st := sc.s.Stats()
	keys := make([]string, 0, len(st.OriginFetches))
	for k := range st.OriginFetches {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var of []string
	for _, k := range keys {
		of = append(of, fmt.Sprintf("%s=%d", k, st.OriginFetches[k]))
	}
	fmt.Fprintf(&sc.out, "  have=%d/%d complete=%v peers=%d origin-fetches[%s] origin-ok=%d busy=%d errors=%d slices=%d/%d/%d\n",
		st.Have, st.Pieces, st.Complete, st.Peers, strings.Join(of, " "), st.OriginOK, st.OriginBusy, st.OriginErrors,
		st.OriginSlicesUsed, st.OriginSlicesWon, st.OriginSlicesDrawn)
	fmt.Fprintf(&sc.out, "  requests=%d cancels=%d timeouts=%d rejects=%d received=%d duplicates=%d served=%d refused=%d dials=%d dial-failures=%d evicted=%d banned=%d\n",
		st.Requests, st.Cancels, st.Timeouts, st.Rejects, st.Received, st.Duplicates, st.Served, st.Refused,
		st.Dials, st.DialFailures, st.Evicted, st.Banned)
}

func formatAction(a Action) string {
	switch a := a.(type) {
	case Request:
		return fmt.Sprintf("request %d %d", a.Peer, a.Piece)
	case Cancel:
		return fmt.Sprintf("cancel %d %d", a.Peer, a.Piece)
	case FetchOrigin:
		if len(a.Candidates) > 0 {
			return fmt.Sprintf("fetch-origin %d (%s) or %s", a.Piece, a.Reason, pieceset.FormatList(a.Candidates))
		}
		return fmt.Sprintf("fetch-origin %d (%s)", a.Piece, a.Reason)
	case Announce:
		return fmt.Sprintf("announce %d", a.Piece)
	case AnnounceStart:
		return fmt.Sprintf("announce-start %d", a.Piece)
	case AnnounceStop:
		return fmt.Sprintf("announce-stop %d", a.Piece)
	case Choke:
		return fmt.Sprintf("choke %d", a.Peer)
	case Unchoke:
		return fmt.Sprintf("unchoke %d", a.Peer)
	case Serve:
		return fmt.Sprintf("serve %d %d", a.Peer, a.Piece)
	case Reject:
		return fmt.Sprintf("reject %d %d %s", a.Peer, a.Piece, a.Reason)
	case Connect:
		return "connect " + a.Addr
	case Disconnect:
		s := fmt.Sprintf("disconnect %d %s", a.Peer, a.Reason)
		if a.Ban {
			s += " ban"
		}
		return s
	case AskTracker:
		return "ask-tracker " + a.Why
	case Recommend:
		return fmt.Sprintf("recommend %d %s", a.Peer, strings.Join(a.Addrs, ","))
	case Complete:
		return "complete"
	}
	return fmt.Sprintf("%#v", a)
}

func splitArgs(args []string) (map[string]string, []string) {
	kv := map[string]string{}
	var pos []string
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	return kv, pos
}

func splitList(s string) []string {
	if s == "" || s == "-" {
		return nil
	}
	return strings.Split(s, ",")
}

func parseInt(s string) int64 {
	if s == "" {
		return 0
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return v
}

// parseSet reads "0-7,9", "all" or "none".
func parseSet(s string, n int) (*pieceset.Set, error) {
	switch s {
	case "all":
		return pieceset.Full(n), nil
	case "none", "-":
		return pieceset.New(n), nil
	}
	set := pieceset.New(n)
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, err
			}
		}
		if a < 0 || b >= n || a > b {
			return nil, fmt.Errorf("range %q outside [0,%d)", part, n)
		}
		for i := a; i <= b; i++ {
			set.Add(i)
		}
	}
	return set, nil
}
