package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/internal/units"
)

// PeerState is where a peer is in a run.
type PeerState string

const (
	PeerWaiting PeerState = "waiting" // not arrived yet
	PeerRunning PeerState = "running"
	PeerDone    PeerState = "done"   // exited 0 (verified after the run)
	PeerFailed  PeerState = "failed" // exited non-zero or timed out
	PeerKilled  PeerState = "killed" // by a kill fault
	PeerAbsent  PeerState = "absent" // never arrived (a stabilized pool stops arrivals)
)

// PeerResult is one peer of one run. Times are seconds since the run
// started (the first arrival).
type PeerResult struct {
	ID    int     `json:"id"`
	Class string  `json:"class"`
	Host  string  `json:"host"`
	State string  `json:"state"`
	Start float64 `json:"start"` // process started
	End   float64 `json:"end"`   // process reaped
	// Done is when the download was complete: the exit, or with linger the
	// first progress report of the whole file (±0.5 s).
	Done float64 `json:"done"`
	// Full is when progress first showed the whole file (0: never); a
	// peer that lingers on after it has not yet exited.
	Full float64 `json:"full"`
	// Seconds is the completion time: Start to Done.
	Seconds  float64 `json:"seconds"`
	Exit     int     `json:"exit"`
	Finished bool    `json:"finished"` // complete and verified
	Verified bool    `json:"verified"` // the output's SHA-256 equals the source's
	TimedOut bool    `json:"timed_out,omitempty"`
	Error    string  `json:"error,omitempty"`
	// Bytes is the last progress reported (verified bytes for stampede).
	Bytes int64 `json:"bytes"`
	// Uploaded is what the peer last reported it sent to other peers
	// (stampede get --progress-json "up"); 0 for clients that do not say.
	Uploaded int64 `json:"uploaded,omitempty"`
	// Corrupting: the peer ran with the testbed's corrupting hook (fault
	// "corrupt K"): every piece it uploaded was damaged on purpose.
	Corrupting bool            `json:"corrupting,omitempty"`
	Progress   []Point         `json:"progress"`
	Summary    json.RawMessage `json:"summary,omitempty"` // stampede get --json
}

// RunResult is one run of one system.
type RunResult struct {
	System  string        `json:"system"`
	Label   string        `json:"label"`
	Rep     int           `json:"rep"`
	Started time.Time     `json:"started"`
	Peers   []*PeerResult `json:"peers"`
	// Arrived peers (all of them unless a stabilized pool stopped arrivals).
	Arrived  int  `json:"arrived"`
	Finished int  `json:"finished"`
	Killed   int  `json:"killed"`
	Complete bool `json:"complete"` // every arrived peer not killed finished
	TimedOut bool `json:"timed_out"`
	// Completion summarises the finished peers' completion times.
	Completion Dist `json:"completion"`
	// Last is the makespan: the first arrival to the last completion.
	Last        float64 `json:"last"`
	OriginBytes int64   `json:"origin_bytes"`
	R           float64 `json:"r"` // OriginBytes / file size
	// PeerBytes is what the peers sent each other: counted by the peers
	// themselves (PeerBytesCounted: the sum of their last --progress-json
	// "up"), or, for clients that do not count it (aria2c, curl), derived:
	// PeerBytesDerived.
	PeerBytes        int64 `json:"peer_bytes"`
	PeerBytesCounted bool  `json:"peer_bytes_counted"`
	// PeerBytesDerived is the peers' verified bytes minus the origin's
	// bytes: what the peers must have carried, with no waste counted.
	PeerBytesDerived int64   `json:"peer_bytes_derived"`
	TKR              float64 `json:"tkr"`
	TKRR             float64 `json:"tkr_r"`
	HTTPBound        float64 `json:"http_bound"`
	LastOverTKR      float64 `json:"last_over_tkr"`
	LastOverTKRR     float64 `json:"last_over_tkr_r"`
	// Origin is the origin's cumulative bytes, Done the peers' summed
	// progress and Uploaded the peers' summed upload counters (only when
	// PeerBytesCounted), sampled together every 0.5 s.
	Origin   []Point `json:"origin"`
	Done     []Point `json:"done"`
	Uploaded []Point `json:"uploaded,omitempty"`
	// RestartedTrackerAnnounces is what the tracker answered after its
	// last restart (fault "restart tracker", stampede's own tracker only).
	RestartedTrackerAnnounces int64 `json:"restarted_tracker_announces,omitempty"`
	// Corrupt tells what the corrupting peers did (fault "corrupt K").
	Corrupt *CorruptInfo `json:"corrupt,omitempty"`
	Pool    *PoolInfo    `json:"pool,omitempty"`
	// MaxLoad is the highest one-minute load average seen during the run:
	// on a shared machine, other work slows every system down.
	MaxLoad float64 `json:"max_load"`
	// CPU is the share of the machine's CPU time that was busy in each
	// half second of the run (Linux only), and CPUSaturated the seconds in
	// which that share was saturatedShare or more. The load average trails
	// by a minute and counts waiting processes; these say when the CPUs,
	// shared by every emulated host, held the run back.
	CPU          []Point  `json:"cpu,omitempty"`
	CPUSaturated float64  `json:"cpu_saturated"`
	Notes        []string `json:"notes,omitempty"`
	// Push: the figures of a push-mode run (push_report.go).
	Push *PushRunFigures `json:"push,omitempty"`
}

// CorruptInfo is the outcome of a "corrupt K" fault: the peers that sent
// corrupt pieces, and how the honest ones (all the others) fared, from their
// --json summaries.
type CorruptInfo struct {
	Peers []int `json:"peers"` // the corrupting peers' ids
	// SentBytes is what the corrupting peers uploaded: every byte of it
	// failed verification at its receiver.
	SentBytes int64 `json:"sent_bytes"`
	// Honest peers that arrived and were not killed; those of them that
	// finished with a verified file; those that banned at least one peer,
	// and their bans in all (a ban counts each time a banned peer's
	// connection is refused, so it can exceed the corrupting peers).
	Honest         int `json:"honest"`
	HonestFinished int `json:"honest_finished"`
	HonestBanning  int `json:"honest_banning"`
	Bans           int `json:"bans"`
	// BansByCorrupting are the bans the corrupting peers made (they receive
	// only good data, so 0 unless an honest peer was banned).
	BansByCorrupting int `json:"bans_by_corrupting"`
}

// PoolInfo tells what became of a stabilized-pool arrival process.
type PoolInfo struct {
	Stable   bool    `json:"stable"`
	At       float64 `json:"at"`   // when arrivals stopped
	Size     int     `json:"size"` // unfinished peers then
	Arrivals int     `json:"arrivals"`
}

// runner runs one system once. One goroutine (loop) owns its state;
// process output and exits reach it as events.
type runner struct {
	b    *bencher
	sys  system
	rep  int
	run  *RunResult
	t0   time.Time
	rng  *rand.Rand
	evc  chan event
	quit chan struct{} // closed when the loop stops listening

	procs    []*proc // by peer id; nil until the peer arrives
	peerDirs []string
	outputs  []string       // the peers' output files
	kinds    []progressKind // where each peer's progress comes from
	exited   []bool         // the exit was applied
	done     []int64        // latest progress per peer
	up       []int64        // latest upload count per peer (progressJSON)
	upSeen   bool           // some peer reported its upload
	corrupt  []bool         // peers running the corrupting hook

	originBase, originRaw, originOff int64
	originOK                         bool
	trackerRestarted                 bool

	cpuAt   time.Time // when cpuLast was read
	cpuLast cpuStat
	cpuOK   bool // cpuLast was read
}

type event interface{}

type evProgress struct {
	peer  int
	at    time.Time
	done  int64
	phase string
	up    int64 // bytes sent to peers, when counted
	hasUp bool
}

type evExit struct {
	peer    int
	summary []byte // stdout: stampede get's --json summary
}

type evOrigin struct {
	at  time.Time
	raw int64
}

func (r *runner) send(ev event) {
	select {
	case r.evc <- ev:
	case <-r.quit:
	}
}

func (r *runner) since(t time.Time) float64 { return t.Sub(r.t0).Seconds() }

// runTimeout is how long one run may take before its peers are killed:
// three times the slower of the bounds, plus the arrivals and lingering.
func runTimeout(sc *Scenario, offsets []time.Duration) time.Duration {
	if sc.Timeout > 0 {
		return sc.Timeout
	}
	c := CrowdOf(sc)
	worst := time.Duration(3 * max(c.HTTP(), c.TKR()) * float64(time.Second))
	return worst + offsets[len(offsets)-1] + sc.Departure.Linger + time.Minute
}

func (b *bencher) runOnce(ctx context.Context, sys system, rep int) (*RunResult, error) {
	sc := b.sc
	n := sc.Peers()
	r := &runner{b: b, sys: sys, rep: rep,
		run: &RunResult{System: sys.name(), Label: sys.label(), Rep: rep, Started: time.Now()},
		rng: rand.New(rand.NewPCG(sc.Seed, uint64(rep))),
		evc: make(chan event, 4096), quit: make(chan struct{}),
		procs: make([]*proc, n), peerDirs: make([]string, n), outputs: make([]string, n),
		kinds: make([]progressKind, n), exited: make([]bool, n), done: make([]int64, n), up: make([]int64, n),
		corrupt: make([]bool, n)}
	for i := range n {
		h := b.peers[i]
		r.run.Peers = append(r.run.Peers, &PeerResult{ID: i, Class: b.classOf[i].Name, Host: h.Name, State: string(PeerWaiting)})
	}
	offsets := sc.Arrivals.Offsets(n, r.rng)
	r.chooseCorrupt()
	ctx, cancel := context.WithTimeout(ctx, runTimeout(sc, offsets))
	defer cancel()

	if err := sys.start(ctx); err != nil {
		sys.stop()
		return nil, fmt.Errorf("%s: %w", sys.name(), err)
	}
	defer sys.stop()
	base, err := sys.originBytes(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: reading the origin's counter: %w", sys.name(), err)
	}
	r.originBase, r.originRaw = base, base

	err = r.loop(ctx, offsets)
	close(r.quit)
	r.endAll()
	if r.trackerRestarted && b.parent.Err() == nil {
		if n, ok := r.trackerAnnounces(context.Background()); ok {
			r.run.RestartedTrackerAnnounces = n
			r.note("the restarted tracker answered %d announces", n)
		}
	}
	if b.parent.Err() != nil {
		r.removeOutputs()
		return nil, b.parent.Err() // interrupted: no report
	}
	// The final reading, once every peer is gone.
	if v, err := sys.originBytes(context.Background()); err == nil {
		r.observeOrigin(time.Now(), v)
	}
	if d, ok := sys.(metricsDumper); ok {
		if f := debugLog(fmt.Sprintf("origin-metrics-%s-%d.txt", r.run.Label, r.run.Rep)); f != nil {
			d.dumpMetrics(context.Background(), f)
			f.Close()
		}
	}
	r.finish()
	r.removeOutputs()
	return r.run, err
}

// loop launches peers on schedule, applies faults and events, and returns
// when every arrived peer has exited (or the run times out).
func (r *runner) loop(ctx context.Context, offsets []time.Duration) error {
	sc := r.b.sc
	r.t0 = time.Now()
	next := 0 // next peer to arrive
	arrivalsOver := false
	var pool *poolWatch
	if sc.Arrivals.Kind == ArrivePool {
		pool = &poolWatch{window: sc.Arrivals.Window}
		r.run.Pool = &PoolInfo{}
	}
	arrive := time.NewTimer(0)
	defer arrive.Stop()

	faults := slices.Clone(sc.Faults)
	slices.SortStableFunc(faults, func(a, b Fault) int { return cmp.Compare(a.At, b.At) })
	faults = slices.DeleteFunc(faults, func(f Fault) bool { return f.Kind == FaultCorrupt })
	faultTimer := time.NewTimer(time.Hour)
	defer faultTimer.Stop()
	armFault := func() {
		if len(faults) > 0 {
			faultTimer.Reset(time.Until(r.t0.Add(faults[0].At)))
		}
	}
	armFault()

	// Both series start from nothing at the first arrival.
	r.run.Origin = append(r.run.Origin, Point{})
	r.run.Done = append(r.run.Done, Point{})
	r.run.Uploaded = append(r.run.Uploaded, Point{})
	r.cpuLast, r.cpuOK = readCPUStat()
	r.cpuAt = time.Now()
	// The origin's counter is polled on its own goroutine, so a slow answer
	// never holds up the loop.
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	go r.pollOrigin(pollCtx)

	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	running := 0
	for {
		if arrivalsOver && running == 0 {
			for _, f := range faults {
				r.note("fault %q not applied: every peer had left after %.1f s", f, time.Since(r.t0).Seconds())
			}
			r.observe(false)
			return nil
		}
		select {
		case <-ctx.Done():
			if r.b.parent.Err() == nil {
				r.run.TimedOut = true
				r.note("run timed out after %.0f s: peers still running were killed", time.Since(r.t0).Seconds())
				for _, f := range faults {
					r.note("fault %q not applied: the run timed out first", f)
				}
			}
			return nil
		case <-arrive.C:
			if arrivalsOver {
				break // the pool stabilized: no more arrivals
			}
			now := time.Since(r.t0)
			for next < len(offsets) && offsets[next] <= now {
				if err := r.launch(next); err != nil {
					return err
				}
				next++
				running++
			}
			if next == len(offsets) {
				arrivalsOver = true
			} else {
				arrive.Reset(offsets[next] - time.Since(r.t0))
			}
		case <-faultTimer.C:
			f := faults[0]
			faults = faults[1:]
			r.applyFault(ctx, f)
			armFault()
		case ev := <-r.evc:
			switch ev := ev.(type) {
			case evProgress:
				r.onProgress(ev)
			case evExit:
				r.onExit(ev.peer, ev.summary)
				running--
			case evOrigin:
				r.observeOrigin(ev.at, ev.raw)
			}
		case now := <-tick.C:
			r.pollFileSizes(now)
			r.run.MaxLoad = max(r.run.MaxLoad, loadAverage())
			r.sampleCPU(now)
			if pool != nil && !arrivalsOver && pool.Observe(now.Sub(r.t0), running) {
				arrivalsOver = true
				arrive.Stop()
				*r.run.Pool = PoolInfo{Stable: true, At: r.since(now), Size: running, Arrivals: next}
				r.note("the pool stabilized at %d unfinished peers after %.1f s; arrivals stopped after %d peers",
					running, r.since(now), next)
			}
			r.observe(false)
		}
		if pool != nil && arrivalsOver && r.run.Pool.Arrivals == 0 {
			*r.run.Pool = PoolInfo{At: time.Since(r.t0).Seconds(), Size: running, Arrivals: next}
			r.note("the pool did not stabilize before all %d peers had arrived", next)
		}
	}
}

func (r *runner) note(format string, args ...any) {
	r.run.Notes = append(r.run.Notes, fmt.Sprintf(format, args...))
}

// launch starts peer id.
func (r *runner) launch(id int) error {
	b := r.b
	dir := filepath.Join(b.dir, "peers", strconv.Itoa(id))
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r.peerDirs[id] = dir
	pc := r.sys.peer(id, b.peers[id], b.classOf[id], dir)
	r.outputs[id], r.kinds[id] = pc.output, pc.progress
	spec := procSpec{name: fmt.Sprintf("peer %d", id), argv: pc.argv, dir: dir}
	pr := r.run.Peers[id]
	if r.corrupt[id] {
		spec.extraEnv = append(spec.extraEnv, corruptEnv)
		pr.Corrupting = true
	}
	var summary *bytes.Buffer
	var logf *os.File // STAMPEDETEST_PEER_LOGS; closed when the peer exits
	switch pc.progress {
	case progressJSON:
		summary = new(bytes.Buffer)
		spec.collect = summary
		logf = peerLog(id)
		spec.stderr = func(line string, at time.Time) {
			if p, ok := parseProgressJSON(line); ok {
				ev := evProgress{peer: id, at: at, done: p.Done, phase: p.Phase}
				if p.Up != nil {
					ev.up, ev.hasUp = *p.Up, true
				}
				r.send(ev)
			} else if logf != nil {
				fmt.Fprintf(logf, "%.3f %s\n", r.since(at), line)
			}
		}
	case progressAria2:
		spec.stdout = func(line string, at time.Time) {
			if done, ok := parseAria2Progress(line); ok {
				r.send(evProgress{peer: id, at: at, done: done})
			}
		}
	}
	p, err := startProc(spec)
	if err != nil {
		if logf != nil {
			logf.Close()
		}
		pr.State, pr.Error = string(PeerFailed), err.Error()
		go r.send(evExit{peer: id})
		return nil
	}
	r.procs[id] = p
	pr.State = string(PeerRunning)
	pr.Start = r.since(p.start)
	pr.Progress = []Point{{T: pr.Start, V: 0}}
	go func() {
		<-p.done
		if logf != nil {
			logf.Close() // the copying ended before done closed
		}
		ev := evExit{peer: id}
		if summary != nil {
			ev.summary = summary.Bytes() // the copying ended before done closed
		}
		r.send(ev)
	}()
	return nil
}

func jsonOrNil(b []byte) json.RawMessage {
	if json.Valid(b) && len(b) > 0 {
		return json.RawMessage(b)
	}
	return nil
}

func (r *runner) onProgress(ev evProgress) {
	pr := r.run.Peers[ev.peer]
	r.done[ev.peer] = ev.done
	pr.Bytes = ev.done
	if ev.hasUp {
		r.up[ev.peer], pr.Uploaded, r.upSeen = ev.up, ev.up, true
	}
	t := r.since(ev.at)
	pr.Progress = append(pr.Progress, Point{T: t, V: float64(ev.done)})
	complete := ev.done >= r.b.sc.Size || ev.phase == "seeding"
	if complete && pr.Full == 0 {
		pr.Full = t
		if r.b.sc.Departure.Linger > 0 {
			pr.Done = t
		}
	}
}

func (r *runner) onExit(id int, summary []byte) {
	pr := r.run.Peers[id]
	p := r.procs[id]
	if p == nil || r.exited[id] {
		return
	}
	r.exited[id] = true
	pr.End = r.since(p.end)
	pr.Exit = p.code
	pr.Summary = jsonOrNil(summary)
	switch {
	case pr.State == string(PeerKilled):
	case p.code == 0:
		pr.State = string(PeerDone)
		if pr.Done == 0 || pr.Done > pr.End {
			pr.Done = pr.End
		}
		pr.Seconds = pr.Done - pr.Start
		r.done[id] = r.b.sc.Size
		pr.Bytes = r.b.sc.Size
		pr.Progress = append(pr.Progress, Point{T: pr.Done, V: float64(r.b.sc.Size)})
		if pr.Full == 0 {
			pr.Full = pr.Done
		}
	default:
		pr.State = string(PeerFailed)
		pr.Error = p.describe()
	}
}

// pollFileSizes reads the progress of peers whose client reports none.
func (r *runner) pollFileSizes(now time.Time) {
	for id, p := range r.procs {
		if p == nil || p.exited() || r.kinds[id] != progressFileSize {
			continue
		}
		r.onProgress(evProgress{peer: id, at: now, done: fileSize(r.outputs[id])})
	}
}

func (r *runner) pollOrigin(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if v, err := r.sys.originBytes(ctx); err == nil {
				r.send(evOrigin{at: time.Now(), raw: v})
			}
		}
	}
}

// observeOrigin records the origin's counter, carrying it over restarts
// (a restarted origin counts from zero again).
func (r *runner) observeOrigin(at time.Time, raw int64) {
	if raw < r.originRaw {
		r.originOff += r.originRaw
	}
	r.originRaw = raw
	r.originOK = true
	total := r.originOff + raw - r.originBase
	t := max(r.since(at), 0)
	r.run.Origin = append(r.run.Origin, Point{T: t, V: float64(total)})
	var sum int64
	for _, d := range r.done {
		sum += d
	}
	r.run.Done = append(r.run.Done, Point{T: t, V: float64(sum)})
	var up int64
	for _, u := range r.up {
		up += u
	}
	r.run.Uploaded = append(r.run.Uploaded, Point{T: t, V: float64(up)})
}

func (r *runner) applyFault(ctx context.Context, f Fault) {
	switch f.Kind {
	case FaultKill:
		var alive []int
		for id, p := range r.procs {
			if p != nil && !p.exited() {
				alive = append(alive, id)
			}
		}
		r.rng.Shuffle(len(alive), func(i, j int) { alive[i], alive[j] = alive[j], alive[i] })
		k := min(f.Count, len(alive))
		for _, id := range alive[:k] {
			r.run.Peers[id].State = string(PeerKilled)
			r.procs[id].kill()
		}
		r.note("fault %q: killed peers %v", f, alive[:k])
		if k < f.Count {
			r.note("fault %q: only %d peers were running", f, k)
		}
	case FaultRestartOrigin:
		if v, err := r.sys.originBytes(ctx); err == nil {
			r.observeOrigin(time.Now(), v)
		}
		start := time.Now()
		if err := r.sys.restartOrigin(ctx); err != nil {
			r.note("fault %q failed: %v", f, err)
			return
		}
		r.note("fault %q: the origin was down %.2f s", f, time.Since(start).Seconds())
	case FaultRestartTracker:
		before, counted := r.trackerAnnounces(ctx)
		start := time.Now()
		err := r.sys.restartTracker(ctx)
		switch {
		case errors.Is(err, errUnsupported):
			r.note("fault %q not applied: %s has no tracker", f, r.sys.label())
		case err != nil:
			r.note("fault %q failed: %v", f, err)
		case counted:
			r.trackerRestarted = true
			r.note("fault %q: the tracker was down %.2f s, after %d announces; the new one knew no peer", f,
				time.Since(start).Seconds(), before)
		default:
			r.trackerRestarted = true
			r.note("fault %q: the tracker was down %.2f s", f, time.Since(start).Seconds())
		}
	}
}

// endAll kills the peers still running, by PID, waits for them, and
// applies the exits the loop did not see.
func (r *runner) endAll() {
	for id, p := range r.procs {
		if p == nil {
			continue
		}
		pr := r.run.Peers[id]
		if !p.exited() {
			if pr.State == string(PeerRunning) {
				pr.TimedOut = true
			}
			p.kill()
		}
		if !r.exited[id] {
			r.onExit(id, nil)
		}
		if pr.TimedOut {
			pr.State = string(PeerFailed)
			pr.Error = "still running at the end of the run: " + p.describe()
		}
	}
}

// finish verifies the outputs and computes the run's figures.
func (r *runner) finish() {
	b, run := r.b, r.run
	for id, pr := range run.Peers {
		if r.procs[id] == nil && pr.State == string(PeerWaiting) {
			pr.State = string(PeerAbsent)
			continue
		}
		run.Arrived++
		if pr.State == string(PeerKilled) {
			run.Killed++
			continue
		}
		if pr.State != string(PeerDone) {
			continue
		}
		ok, err := sameContent(r.outputs[id], b.sum)
		pr.Verified = ok
		switch {
		case err != nil:
			pr.Error = err.Error()
		case !ok:
			pr.Error = "the output differs from the source"
		}
		pr.Finished = ok
		if ok {
			run.Finished++
		} else {
			pr.State = string(PeerFailed)
		}
	}
	run.Complete = run.Finished == run.Arrived-run.Killed && !run.TimedOut
	var secs []float64
	for _, pr := range run.Peers {
		if pr.Finished {
			secs = append(secs, pr.Seconds)
			run.Last = max(run.Last, pr.Done)
		}
	}
	run.Completion = distOf(secs)
	if len(run.Origin) > 0 {
		run.OriginBytes = int64(run.Origin[len(run.Origin)-1].V)
	}
	var delivered int64
	for _, d := range r.done {
		delivered += d
	}
	run.PeerBytesDerived = max(delivered-run.OriginBytes, 0)
	r.peerBytes()
	r.corruptOutcome()
	run.R = float64(run.OriginBytes) / float64(b.sc.Size)
	crowd := b.crowd(run.Arrived)
	run.TKR, run.TKRR, run.HTTPBound = crowd.TKR(), crowd.TKRR(run.R), crowd.HTTP()
	if run.TKR > 0 {
		run.LastOverTKR = run.Last / run.TKR
	}
	if run.TKRR > 0 {
		run.LastOverTKRR = run.Last / run.TKRR
	}
	if run.Pool != nil && run.Arrived > 0 {
		r.note("stabilized pool: %d arrivals; completion mean %.2f s, p90 %.2f s, p99 %.2f s; origin bytes per arrival %s (%.2f copies)",
			run.Arrived, run.Completion.Mean, run.Completion.P90, run.Completion.P99,
			units.Bytes(run.OriginBytes/int64(run.Arrived)), run.R/float64(run.Arrived))
	}
	if cpus := runtime.NumCPU(); r.run.MaxLoad > 2*float64(cpus) {
		r.note("the machine was busy: load average up to %.0f on %d CPUs during the run (times are inflated)", r.run.MaxLoad, cpus)
	}
	if r.run.Last > 0 && r.run.CPUSaturated >= 0.1*r.run.Last {
		r.note("the CPUs were %.0f%% busy or more for %.1f s of the run's %.1f s: in those seconds the run measured the machine as much as the links",
			100*saturatedShare, r.run.CPUSaturated, r.run.Last)
	}
	if !r.originOK {
		r.note("the origin's counter could not be read during the run")
	}
	r.observe(true)
}

func (r *runner) removeOutputs() {
	for _, d := range r.peerDirs {
		if d != "" {
			_ = os.RemoveAll(d)
		}
	}
}

// observe hands a snapshot to the observer, if any.
func (r *runner) observe(final bool) {
	if r.b.observe == nil {
		return
	}
	s := Snapshot{Scenario: r.b.sc.Name, System: r.sys.name(), Label: r.sys.label(), Rep: r.rep,
		Reps: r.b.sc.RepsFor(r.sys.name()), Elapsed: time.Since(r.t0).Seconds(), Size: r.b.sc.Size, Final: final}
	for id, pr := range r.run.Peers {
		s.Peers = append(s.Peers, PeerView{State: PeerState(pr.State), Done: r.done[id]})
	}
	if len(r.run.Origin) > 0 {
		s.OriginBytes = int64(r.run.Origin[len(r.run.Origin)-1].V)
	}
	if final {
		s.Run = r.run
	}
	r.b.observe(s)
}

// Snapshot is the state of a run, handed to Config.Observe every half
// second and once at the end (Final, with Run set).
type Snapshot struct {
	Scenario    string
	System      string
	Label       string
	Rep, Reps   int
	Elapsed     float64 // seconds since the first arrival
	Size        int64
	Peers       []PeerView
	OriginBytes int64
	Final       bool
	Run         *RunResult
}

// PeerView is one peer in a Snapshot.
type PeerView struct {
	State PeerState
	Done  int64
}

// swarmSummary is what the harness reads from a stampede peer's --json
// summary.
type swarmSummary struct {
	BytesToPeers int64 `json:"bytes_to_peers"`
	PeersBanned  int   `json:"peers_banned"`
}

// summaryOf reads p's --json summary; false when it has no swarm part
// (a killed peer, a plain HTTP client, another client).
func summaryOf(p *PeerResult) (swarmSummary, bool) {
	var sum struct {
		Swarm *swarmSummary `json:"swarm"`
	}
	if len(p.Summary) == 0 || json.Unmarshal(p.Summary, &sum) != nil || sum.Swarm == nil {
		return swarmSummary{}, false
	}
	return *sum.Swarm, true
}

// peerBytes sets the run's PeerBytes: the peers' own counters when they
// report them, else the derived figure. A peer's last progress line comes
// after its download ended, so it must agree with its --json summary.
func (r *runner) peerBytes() {
	run := r.run
	if !r.upSeen {
		run.PeerBytes, run.Uploaded = run.PeerBytesDerived, nil
		return
	}
	run.PeerBytesCounted = true
	var total int64
	for _, u := range r.up {
		total += u
	}
	run.PeerBytes = total
	var differ []int
	for _, p := range run.Peers {
		if s, ok := summaryOf(p); ok && s.BytesToPeers != p.Uploaded {
			differ = append(differ, p.ID)
		}
	}
	if len(differ) > 0 {
		r.note("peers %v: the upload in their last progress line differs from their --json summary's bytes_to_peers", differ)
	}
	if total > 0 {
		r.note("the peers counted %s sent to each other; their verified bytes minus the origin's bytes give %s "+
			"(counted minus derived: upload that did not become a verified piece, such as duplicates, pieces cut short "+
			"or corrupt data, less what the origin sent that was never used)",
			units.Bytes(total), units.Bytes(run.PeerBytesDerived))
	}
}

// trackerAnnounces reads the announces a system's own tracker answered,
// where the harness can (stampede's standalone tracker).
func (r *runner) trackerAnnounces(ctx context.Context) (int64, bool) {
	s, ok := r.sys.(*stampedeSys)
	if !ok || s.origin.tracker == nil {
		return 0, false
	}
	n, err := s.origin.tracker.announces(ctx)
	return n, err == nil
}

// corruptEnv turns on the corrupting hook of a stampede peer (node/testbed.go).
const corruptEnv = "STAMPEDETEST_CORRUPT_UPLOADS=1"

// chooseCorrupt makes the first K peers to arrive (ids 0..K-1) the
// corrupting ones of the "corrupt K" faults, for systems whose peers trade
// pieces; for the others it says why the fault is not applied. The first
// arrivals hold pieces before anyone else, so they are asked for them:
// the worst place for a corrupting peer to be, and one that makes the
// fault bite in every run.
func (r *runner) chooseCorrupt() {
	k := 0
	for _, f := range r.b.sc.Faults {
		if f.Kind == FaultCorrupt {
			k += f.Count
		}
	}
	if k == 0 {
		return
	}
	if why := r.sys.corruptible(); why != "" {
		r.note("fault %q not applied: %s", fmt.Sprintf("corrupt %d", k), why)
		return
	}
	c := &CorruptInfo{}
	for id := range min(k, len(r.corrupt)) {
		r.corrupt[id] = true
		c.Peers = append(c.Peers, id)
	}
	r.run.Corrupt = c
}

// corruptOutcome tells what the corrupting peers did and whether the
// others defended themselves: they must all finish with a verified file.
func (r *runner) corruptOutcome() {
	c := r.run.Corrupt
	if c == nil {
		return
	}
	for _, p := range r.run.Peers {
		s, _ := summaryOf(p)
		if p.Corrupting {
			c.SentBytes += p.Uploaded
			c.BansByCorrupting += s.PeersBanned
			continue
		}
		if p.State == string(PeerAbsent) || p.State == string(PeerKilled) {
			continue
		}
		c.Honest++
		if p.Finished {
			c.HonestFinished++
		}
		if s.PeersBanned > 0 {
			c.HonestBanning++
			c.Bans += s.PeersBanned
		}
	}
	r.note("fault \"corrupt %d\": peers %v uploaded only corrupt pieces (%s in all); %d of the %d honest peers banned a peer "+
		"(%d bans in all) and %d of the %d finished with a verified file; the corrupting peers banned %d",
		len(c.Peers), c.Peers, units.Bytes(c.SentBytes), c.HonestBanning, c.Honest, c.Bans, c.HonestFinished, c.Honest,
		c.BansByCorrupting)
}

// sampleCPU adds the machine's busy share since the last sample to the
// run's CPU series.
func (r *runner) sampleCPU(now time.Time) {
	if !r.cpuOK {
		return
	}
	cur, ok := readCPUStat()
	if !ok {
		return
	}
	share, ok := busyShare(r.cpuLast, cur)
	if !ok {
		return
	}
	r.run.CPU = append(r.run.CPU, Point{T: r.since(now), V: share})
	if share >= saturatedShare {
		r.run.CPUSaturated += now.Sub(r.cpuAt).Seconds()
	}
	r.cpuLast, r.cpuAt = cur, now
}

// loadAverage is the one-minute load average (0 where unknown).
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// peerLog opens the file that keeps peer id's stderr (other than progress
// lines) when STAMPEDETEST_PEER_LOGS names a directory: a debugging aid
// for the scheduler (add --get-args=-v for its decisions), not part of the
// report. nil when unset or on error.
func peerLog(id int) *os.File {
	return debugLog(fmt.Sprintf("peer-%d.log", id))
}

// debugLog opens name in the STAMPEDETEST_PEER_LOGS directory for
// appending, making the directory if need be; nil when unset or on error,
// which is said once on stderr (a run meant to be debugged that logs
// nothing is a run lost). Besides the peers' logs it keeps the origin's
// stderr (origin.log, one file appended to by every run and restart) and
// its last /metrics of each run (metricsDumper).
func debugLog(name string) *os.File {
	dir := os.Getenv("STAMPEDETEST_PEER_LOGS")
	if dir == "" {
		return nil
	}
	f, err := openDebugLog(dir, name)
	if err != nil {
		debugLogFailed.Do(func() {
			fmt.Fprintf(os.Stderr, "stampede bench: STAMPEDETEST_PEER_LOGS: %v; no peer logs are kept\n", err)
		})
		return nil
	}
	return f
}

// debugLogFailed says a failed debugLog once per process.
var debugLogFailed sync.Once

func openDebugLog(dir, name string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}
