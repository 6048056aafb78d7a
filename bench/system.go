package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Features are what the stampede binary under test can do, read from its
// "help get" output: the harness adapts its command lines, so when the
// swarm lands only the flags change.
type Features struct {
	Version string `json:"version"`
	// Swarm: get has --max-upload-rate and --seed-time (peers trade pieces).
	Swarm bool `json:"swarm"`
	// NoSwarm: get has --no-swarm (a plain HTTP client on demand).
	NoSwarm  bool     `json:"no_swarm"`
	GetFlags []string `json:"get_flags"`
}

var flagLine = regexp.MustCompile(`(?m)^\s+--?([A-Za-z0-9][\w-]*)`)

// Probe runs "BIN help get" and "BIN version".
func Probe(ctx context.Context, bin string) (Features, error) {
	out, err := runTool(ctx, bin, "help", "get")
	if err != nil {
		return Features{}, fmt.Errorf("probing %s: %w", bin, err)
	}
	f := Features{GetFlags: parseFlagNames(out)}
	f.Swarm = slices.Contains(f.GetFlags, "max-upload-rate") && slices.Contains(f.GetFlags, "seed-time")
	f.NoSwarm = slices.Contains(f.GetFlags, "no-swarm")
	if v, err := runTool(ctx, bin, "version"); err == nil {
		f.Version = strings.TrimSpace(v)
	}
	return f, nil
}

// parseFlagNames lists the flags of a Go flag package usage text.
func parseFlagNames(usage string) []string {
	var names []string
	for _, m := range flagLine.FindAllStringSubmatch(usage, -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

// runEnv is what a system needs to set up one run.
type runEnv struct {
	sc     *Scenario
	net    Network
	origin *Host // the origin's host (and the tracker's)
	bin    string
	feats  Features
	dir    string   // this scenario's scratch directory
	www    string   // directory holding the file
	file   string   // the file's name in www
	sum    [32]byte // the file's SHA-256
	log    *slog.Logger
}

func (e *runEnv) shaping() bool { return e.net.AppShaping() }

// system is one way of delivering the file to the crowd: its origin side
// (origin, tracker, seeder) and the command each peer runs.
type system interface {
	name() string
	label() string
	// notes say what a reader of the report must know about this system.
	notes() []string
	// start starts the origin side for one run and returns once it serves.
	start(ctx context.Context) error
	// originBytes reads the origin side's upload counter. It may go back
	// to zero when the origin restarts; the runner accounts for that.
	originBytes(ctx context.Context) (int64, error)
	restartOrigin(ctx context.Context) error
	restartTracker(ctx context.Context) error
	// corruptible says why peers of this system cannot run the corrupting
	// hook ("" when they can).
	corruptible() string
	peer(id int, h *Host, c Class, dir string) peerCmd
	// stop ends the origin side.
	stop()
}

// errUnsupported marks a fault a system cannot take yet.
var errUnsupported = errors.New("not supported by this system")

// progressKind says where a peer's progress comes from.
type progressKind int

const (
	progressJSON     progressKind = iota // stampede get --progress-json on stderr
	progressAria2                        // aria2c's summary lines on stdout
	progressFileSize                     // the output file's size (curl)
)

// peerCmd is what a peer runs.
type peerCmd struct {
	argv     []string
	output   string // the downloaded file, once complete
	progress progressKind
}

func newSystem(name string, e *runEnv) (system, error) {
	switch name {
	case SysStampede:
		o := &stampedeOrigin{env: e}
		if e.sc.hasFault(FaultRestartTracker) && e.feats.Swarm {
			// The tracker must be restartable apart from the origin.
			o.tracker = &stampedeTracker{env: e}
		}
		return &stampedeSys{env: e, origin: o}, nil
	case SysHTTP:
		if e.feats.Swarm && !e.feats.NoSwarm {
			return &curlSys{env: e, origin: &stampedeOrigin{env: e}, asHTTP: true}, nil
		}
		return &stampedeSys{env: e, origin: &stampedeOrigin{env: e}, http: true}, nil
	case SysCurl:
		return &curlSys{env: e, origin: &stampedeOrigin{env: e}}, nil
	case SysAria2:
		return newAria2(e)
	case SysNginx:
		return newNginx(e)
	}
	return nil, fmt.Errorf("unknown system %q", name)
}

// stampedeOrigin is "stampede serve" on the origin host, capped at the
// origin's upload (by --rate on loopback, by the network on netns).
type stampedeOrigin struct {
	env  *runEnv
	addr string // host:port, fixed at the first start (read by the poller)
	proc *proc  // the loop's only
	// tracker, when set, is a "stampede tracker" of its own that serve
	// names with --tracker, instead of the one serve runs inside.
	tracker *stampedeTracker
}

var servingLine = regexp.MustCompile(`serving .* on http://([^/\s]+)/`)

func (o *stampedeOrigin) start(ctx context.Context) error {
	e := o.env
	listen := e.origin.IP + ":0"
	if o.addr != "" {
		listen = o.addr // a restart keeps the address the peers know
	}
	argv := []string{e.bin, "serve", e.www, "--listen", listen, "--cache-dir", filepath.Join(e.dir, "manifests")}
	if o.tracker != nil {
		if o.tracker.proc == nil || o.tracker.proc.exited() {
			if err := o.tracker.start(ctx); err != nil {
				return err
			}
		}
		argv = append(argv, "--tracker", o.tracker.url())
	}
	// With STAMPEDETEST_PEER_LOGS set, the origin logs at debug level
	// (-v: every request) to origin.log there, next to the peers' logs.
	logf := debugLog("origin.log")
	if logf != nil {
		argv = append(argv, "-v")
	} else {
		argv = append(argv, "-q")
	}
	if e.shaping() && e.sc.OriginUp > 0 {
		argv = append(argv, "--rate", strconv.FormatInt(e.sc.OriginUp, 10))
	}
	argv = append(argv, e.sc.ServeArgs...)
	p, err := startListening(ctx, "origin", e.origin.Command(argv...), servingLine, &o.addr, logf)
	if err != nil {
		return err
	}
	o.proc = p
	// Have the manifest computed (or read from the cache) before the clock
	// starts: hashing is not delivery.
	resp, err := o.get(ctx, "/.well-known/stampede/manifest/"+e.file)
	if err != nil {
		return fmt.Errorf("origin: fetching the manifest: %w", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("origin: manifest: %s %v", resp.Status, err)
	}
	return nil
}

func (o *stampedeOrigin) get(ctx context.Context, path string) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.url(path), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	c := o.env.origin.HTTPClient()
	c.Timeout = 60 * time.Second
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }

func (o *stampedeOrigin) url(path string) string { return "http://" + o.addr + path }

// A sample's value is a float in the exposition format: Prometheus' client
// writes 123456789 as 1.23456789e+08.
var bytesSentLine = regexp.MustCompile(`(?m)^stampede_origin_bytes_sent_total (\S+)`)

// metrics reads the origin's /metrics.
func (o *stampedeOrigin) metrics(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.url("/metrics"), nil)
	if err != nil {
		return nil, err
	}
	resp, err := o.env.origin.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}

// metricsDumper is a system whose origin has Prometheus metrics worth
// keeping for debugging (STAMPEDETEST_PEER_LOGS).
type metricsDumper interface {
	dumpMetrics(ctx context.Context, w io.Writer)
}

func (s *stampedeSys) dumpMetrics(ctx context.Context, w io.Writer) {
	if body, err := s.origin.metrics(ctx); err == nil {
		w.Write(body)
	}
}

// originBytes reads stampede_origin_bytes_sent_total from /metrics.
func (o *stampedeOrigin) originBytes(ctx context.Context) (int64, error) {
	body, err := o.metrics(ctx)
	if err != nil {
		return 0, err
	}
	return bytesSent(body)
}

// bytesSent reads stampede_origin_bytes_sent_total from a /metrics page.
func bytesSent(metrics []byte) (int64, error) {
	m := bytesSentLine.FindSubmatch(metrics)
	if m == nil {
		return 0, errors.New("/metrics has no stampede_origin_bytes_sent_total")
	}
	return sampleValue(m[1])
}

func (o *stampedeOrigin) stop() {
	if o.proc != nil {
		o.proc.term(3 * time.Second)
	}
	if o.tracker != nil && o.tracker.proc != nil {
		o.tracker.proc.term(3 * time.Second)
	}
}

func (o *stampedeOrigin) restart(ctx context.Context) error {
	o.proc.kill()
	return o.start(ctx)
}

// stampedeTracker is "stampede tracker" on the origin host. A restart
// listens on the address of the first start, which the manifest names.
type stampedeTracker struct {
	env  *runEnv
	addr string // host:port, fixed at the first start
	proc *proc
}

var trackerLine = regexp.MustCompile(`tracker on http://([^/\s]+)/announce`)

func (t *stampedeTracker) url() string { return "http://" + t.addr + "/announce" }

func (t *stampedeTracker) start(ctx context.Context) error {
	e := t.env
	listen := e.origin.IP + ":0"
	if t.addr != "" {
		listen = t.addr
	}
	p, err := startListening(ctx, "tracker", e.origin.Command(e.bin, "tracker", "--listen", listen, "-q"), trackerLine, &t.addr, nil)
	if err != nil {
		return err
	}
	t.proc = p
	return nil
}

// startListening starts a server process and waits for the stderr line
// (matching line, whose first group is host:port) that says where it
// listens. *addr is set at the first start; a restart must listen on the
// same address, which the peers (or the manifest) already know. If logf is
// not nil, every stderr line is copied to it, and it is closed when the
// process exits.
func startListening(ctx context.Context, name string, argv []string, line *regexp.Regexp, addr *string, logf *os.File) (*proc, error) {
	ready := make(chan string, 1)
	p, err := startProc(procSpec{name: name, argv: argv, stderr: func(l string, _ time.Time) {
		if logf != nil {
			fmt.Fprintln(logf, l)
		}
		if m := line.FindStringSubmatch(l); m != nil {
			select {
			case ready <- m[1]:
			default:
			}
		}
	}})
	if err != nil {
		if logf != nil {
			logf.Close()
		}
		return nil, err
	}
	if logf != nil {
		go func() {
			<-p.done
			logf.Close() // the copying ended before done closed
		}()
	}
	select {
	case got := <-ready:
		// The poller reads *addr meanwhile, so it is written only once.
		if *addr == "" {
			*addr = got
		} else if got != *addr {
			p.kill()
			return nil, fmt.Errorf("the restarted %s listens on %s, not %s", name, got, *addr)
		}
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s did not start: %s", name, p.describe())
	case <-time.After(30 * time.Second):
		p.kill()
		return nil, fmt.Errorf("%s did not print its address within 30s", name)
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

func (t *stampedeTracker) restart(ctx context.Context) error {
	t.proc.kill()
	return t.start(ctx)
}

var announcesLine = regexp.MustCompile(`(?m)^stampede_tracker_announces_total\{[^}]*\} (\S+)`)

// sampleValue reads a counter's value from /metrics, where it may be written
// as a float (1.23456789e+08).
func sampleValue(b []byte) (int64, error) {
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil || v < 0 || v > 1<<62 {
		return 0, fmt.Errorf("/metrics: bad counter value %q", b)
	}
	return int64(v), nil
}

// announces is the tracker's count of announces since it started.
func (t *stampedeTracker) announces(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := t.env.origin.HTTPClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	ms := announcesLine.FindAllSubmatch(body, -1)
	if len(ms) == 0 {
		return 0, errors.New("tracker /metrics has no stampede_tracker_announces_total")
	}
	var n int64
	for _, m := range ms {
		v, err := sampleValue(m[1])
		if err != nil {
			return 0, err
		}
		n += v
	}
	return n, nil
}

// stampedeSys: every peer runs "stampede get". With the swarm they trade
// pieces; as the HTTP baseline (http) they fetch from the origin only.
type stampedeSys struct {
	env    *runEnv
	origin *stampedeOrigin
	http   bool
}

func (s *stampedeSys) name() string {
	if s.http {
		return SysHTTP
	}
	return SysStampede
}

func (s *stampedeSys) label() string {
	switch {
	case s.http && s.env.feats.NoSwarm:
		return "HTTP (stampede get --no-swarm)"
	case s.http:
		return "HTTP (stampede get)"
	case !s.env.feats.Swarm:
		return "stampede (no swarm yet)"
	}
	return "stampede"
}

func (s *stampedeSys) notes() []string {
	if !s.http && !s.env.feats.Swarm {
		return []string{"stampede get has no --max-upload-rate/--seed-time yet: its peers fetch from the origin only, " +
			"as the HTTP baseline does."}
	}
	if s.origin.tracker != nil {
		return []string{"stampede: the tracker runs as a process of its own on the origin host (stampede tracker, " +
			"named in the manifest with serve --tracker), so that the restart tracker fault can restart it alone."}
	}
	return nil
}

func (s *stampedeSys) start(ctx context.Context) error { return s.origin.start(ctx) }
func (s *stampedeSys) originBytes(ctx context.Context) (int64, error) {
	return s.origin.originBytes(ctx)
}
func (s *stampedeSys) restartOrigin(ctx context.Context) error { return s.origin.restart(ctx) }
func (s *stampedeSys) restartTracker(ctx context.Context) error {
	if s.origin.tracker == nil {
		return errUnsupported
	}
	return s.origin.tracker.restart(ctx)
}
func (s *stampedeSys) stop() { s.origin.stop() }

func (s *stampedeSys) corruptible() string {
	switch {
	case s.http:
		return "the HTTP baseline's peers do not upload"
	case !s.env.feats.Swarm:
		return "this stampede get has no swarm"
	}
	return ""
}

func (s *stampedeSys) peer(id int, h *Host, c Class, dir string) peerCmd {
	e := s.env
	out := filepath.Join(dir, e.file)
	argv := []string{e.bin, "get", s.origin.url("/" + e.file), "-o", out, "-q", "--json", "--progress-json"}
	if e.shaping() && c.Down > 0 {
		argv = append(argv, "--limit-rate", strconv.FormatInt(c.Down, 10))
	}
	switch {
	case s.http && e.feats.NoSwarm:
		argv = append(argv, "--no-swarm")
	case !s.http && e.feats.Swarm:
		if e.shaping() && c.Up > 0 {
			argv = append(argv, "--max-upload-rate", strconv.FormatInt(c.Up, 10))
		}
		argv = append(argv, "--seed-time", e.sc.Departure.Linger.String())
	}
	if !s.http {
		argv = append(argv, e.sc.GetArgs...)
	}
	return peerCmd{argv: h.Command(argv...), output: out, progress: progressJSON}
}

// curlSys: every peer runs curl against the same stampede origin.
type curlSys struct {
	env    *runEnv
	origin *stampedeOrigin
	asHTTP bool // standing in for the HTTP baseline
}

func (s *curlSys) name() string {
	if s.asHTTP {
		return SysHTTP
	}
	return SysCurl
}
func (s *curlSys) label() string { return "HTTP (curl)" }
func (s *curlSys) notes() []string {
	if s.asHTTP {
		return []string{"stampede get has the swarm but no --no-swarm: the HTTP baseline is curl."}
	}
	return nil
}
func (s *curlSys) start(ctx context.Context) error                { return s.origin.start(ctx) }
func (s *curlSys) originBytes(ctx context.Context) (int64, error) { return s.origin.originBytes(ctx) }
func (s *curlSys) restartOrigin(ctx context.Context) error        { return s.origin.restart(ctx) }
func (s *curlSys) restartTracker(context.Context) error           { return errUnsupported }
func (s *curlSys) stop()                                          { s.origin.stop() }
func (s *curlSys) corruptible() string                            { return "curl's peers do not upload" }

func (s *curlSys) peer(id int, h *Host, c Class, dir string) peerCmd {
	out := filepath.Join(dir, s.env.file)
	argv := []string{"curl", "-sSf", "--retry", "5", "--retry-all-errors", "-o", out}
	if s.env.shaping() && c.Down > 0 {
		argv = append(argv, "--limit-rate", strconv.FormatInt(c.Down, 10))
	}
	argv = append(argv, s.origin.url("/"+s.env.file))
	return peerCmd{argv: h.Command(argv...), output: out, progress: progressFileSize}
}

// progressLine is one line of stampede get --progress-json.
type progressLine struct {
	T     float64 `json:"t"`
	Phase string  `json:"phase"`
	Size  int64   `json:"size"`
	Done  int64   `json:"done"`
	Up    *int64  `json:"up"` // bytes sent to peers; absent from older binaries
}

// parseProgressJSON reads one --progress-json line; ok is false for any
// other line (warnings share stderr).
func parseProgressJSON(line string) (progressLine, bool) {
	var p progressLine
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &p) != nil || p.Phase == "" {
		return p, false
	}
	return p, true
}

// fileSize is the size of path, 0 when it does not exist yet.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
