package daemon

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/internal/httpserve"
	"github.com/stampede-dev/stampede/store"
)

// The push service: the agent of "stampede push" on each host of a
// cluster (docs/push.md). It takes signed push requests on its own port
// (the host's agent address in the cluster file), fetches the file from
// the pusher's origin through the swarm with peers chosen by the
// topology (pushrun.go), installs it atomically at the destination, runs
// the request's command and reports each push's status.
//
// Its HTTP API, plain JSON (a request is signed, so the channel need
// not be):
//
//	GET  /v1/hello       {"host", "peer"}: the pusher's liveness probe
//	POST /v1/push        a cluster.Request: 202 {"id"}; 401 unsigned or
//	                     another key, 403 a destination outside the
//	                     prefixes or a push not naming this host, 409
//	                     replayed, older than the last for that
//	                     destination or that destination being installed,
//	                     410 expired, 400 malformed, 500 its issued time
//	                     could not be kept
//	GET  /v1/push/{id}   the push's PushStatus
//	POST /v1/push/{id}/takeover
//	                     a cluster.Takeover naming this host, a standby
//	                     representative of push id: it acts as its
//	                     rack's active representative for the rest of the
//	                     push; 200 and the PushStatus; 401 unsigned or
//	                     another key, 403 naming another host, 404 no
//	                     such push, 409 this host no standby in it or the
//	                     takeover replayed, 410 expired, 400 malformed
//	                     or for another push

// Defaults of PushConfig.
const (
	DefaultPushFallback = 10 * time.Second
	// maxPushes bounds the unexpired pushes remembered (and their nonces).
	maxPushes = 1024
)

// PushConfig configures the push service; it runs when Cluster is set.
type PushConfig struct {
	Cluster *cluster.Cluster
	// Key is the cluster's public key: only requests it signed are
	// carried out.
	Key ed25519.PublicKey
	// Host is this host's name in Cluster (default: os.Hostname()).
	Host string
	// Listen is where the pushers' requests come (default: the port of
	// Host's agent address, on every interface); Listener, when set, is
	// used instead.
	Listen   string
	Listener net.Listener
	// DestPrefixes are the directories pushes may install into
	// (required): a destination must lie under one, symbolic links
	// resolved.
	DestPrefixes []string
	// MaxLoad (load average per CPU) and MaxIOWait (a share of time) are
	// the throttle's thresholds (cluster.Throttle; 0: off). LoadSource
	// reads the host's load (default cluster.ProcLoad).
	MaxLoad, MaxIOWait float64
	LoadSource         cluster.LoadSource
	// Fallback is how long a host that is not one of its datacenter's
	// representatives waits with no piece arriving before it fetches from
	// the origin itself (its representatives are gone or stuck; default
	// DefaultPushFallback).
	Fallback time.Duration
	// Shell runs a request's command (default "/bin/sh").
	Shell string
}

// Push states.
const (
	PushFetching   = "fetching"   // verifying what is there, then downloading
	PushInstalling = "installing" // complete, being published at the destination
	PushThen       = "then"       // installed, the command running
	PushDone       = "done"       // installed (and the command succeeded); seeding until expiry
	PushFailed     = "failed"     // see Error
)

// PushStatus is one push as an agent reports it.
type PushStatus struct {
	ID    string `json:"id"`
	Host  string `json:"host"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Role: "rack+dc representative", "rack representative", "standby
	// representative" or "member" (roleName).
	Role string `json:"role"`
	Root string `json:"root"`
	Size int64  `json:"size"`
	// Done is the bytes verified at the destination's part file.
	Done int64 `json:"done"`
	// Bytes received from peers of the host's rack, from other racks'
	// hosts, from the origin (the pusher), and reused from the file
	// already at the destination (pieces of an earlier version).
	FromRack   int64 `json:"from_rack"`
	FromRacks  int64 `json:"from_other_racks"`
	FromOrigin int64 `json:"from_origin"`
	Reused     int64 `json:"reused"`
	// Throttled: the host's load held the rate down at the last check.
	Throttled bool      `json:"throttled,omitempty"`
	Started   time.Time `json:"started"`
	Installed time.Time `json:"installed,omitzero"`
	// Then is the command's outcome, once run.
	Then *ThenResult `json:"then,omitempty"`
	// Resumed counts the agent's restarts during the push.
	Resumed int `json:"resumed,omitempty"`
}

// ThenResult is what a push's command did.
type ThenResult struct {
	Exit int `json:"exit"` // -1: did not start, or killed
	// Output is the tail of its stdout and stderr together.
	Output string `json:"output"`
}

// pushSvc is the running push service.
type pushSvc struct {
	cfg    PushConfig
	self   *cluster.Host
	prefix []string // DestPrefixes, absolute, links resolved
	nonces *cluster.Nonces
	addr   net.Addr

	mu     sync.Mutex // guards the following
	pushes map[string]*push
	// last is when the newest push accepted for each destination was
	// issued; kept in StateDir/push-issued.json (lastIssuedFile).
	last *cluster.LastIssued
}

// push is one push request and its run; its fields are guarded by
// pushSvc.mu, but for the counters.
type push struct {
	req    cluster.Request
	status PushStatus
	ctr    *pushCounters
	// takenOver: the pusher told this host, a standby representative, to
	// take over (its rack's active ones are slow): it acts as an active
	// one for the rest of the push. Not kept across a restart.
	takenOver atomic.Bool
}

// pushRecord is what StateDir/pushes/ID.json keeps.
type pushRecord struct {
	Request cluster.Request `json:"request"`
	Status  PushStatus      `json:"status"`
}

func (c *PushConfig) setDefaults() error {
	if c.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("daemon: push: this host's name: %w", err)
		}
		c.Host = h
	}
	if c.Fallback <= 0 {
		c.Fallback = DefaultPushFallback
	}
	if c.Shell == "" {
		c.Shell = "/bin/sh"
	}
	if c.LoadSource == nil {
		c.LoadSource = &cluster.ProcLoad{}
	}
	if len(c.Key) != ed25519.PublicKeySize {
		return errors.New("daemon: push: the cluster's public key is required (--cluster-key)")
	}
	if len(c.DestPrefixes) == 0 {
		return errors.New("daemon: push: say where pushes may install (--push-dest-prefix DIR)")
	}
	return nil
}

// startPush starts the push service and resumes the unexpired pushes of
// an earlier run. Its listener, the one given or its own, is closed if it
// fails (Start closes the rest).
func (s *Server) startPush() (err error) {
	cfg := s.cfg.Push
	ln := cfg.Listener
	defer func() {
		if err != nil && ln != nil {
			ln.Close()
		}
	}()
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	self := cfg.Cluster.Hosts[cfg.Host]
	if self == nil {
		return fmt.Errorf("daemon: push: host %q is not in the cluster file (--cluster-host)", cfg.Host)
	}
	p := &pushSvc{cfg: cfg, self: self, nonces: cluster.NewNonces(maxPushes), pushes: map[string]*push{}}
	for _, d := range cfg.DestPrefixes {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("daemon: push destination prefix: %w", err)
		}
		r, err := filepath.EvalSymlinks(d)
		if err != nil {
			return fmt.Errorf("daemon: push destination prefix: %w", err)
		}
		r, err = filepath.Abs(r)
		if err != nil {
			return fmt.Errorf("daemon: push destination prefix: %w", err)
		}
		p.prefix = append(p.prefix, r)
	}
	if ln == nil {
		addr := cfg.Listen
		if addr == "" {
			_, port, _ := net.SplitHostPort(self.Agent)
			addr = ":" + port
		}
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("daemon: push: %w", err)
		}
	}
	p.addr = ln.Addr()
	s.push = p
	if err := os.MkdirAll(s.pushDir(), 0o700); err != nil {
		return fmt.Errorf("daemon: push: %w", err)
	}
	last, err := s.loadLastIssued()
	if err != nil {
		return err
	}
	p.last = last
	s.resumePushes()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/hello", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"host": self.Name, "peer": self.Peer})
	})
	mux.HandleFunc("POST /v1/push", s.handlePush)
	mux.HandleFunc("POST /v1/push/{id}/takeover", s.handleTakeover)
	mux.HandleFunc("GET /v1/push/{id}", func(w http.ResponseWriter, r *http.Request) {
		st, ok := s.pushStatus(r.PathValue("id"))
		if !ok {
			apiError(w, http.StatusNotFound, "no such push")
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	s.goServe("push", func() error { return httpserve.Run(s.ctx, hs, ln, 2*time.Second, nil) })
	s.log.Info("push service started", "host", self.Name, "listen", p.addr, "prefixes", p.prefix)
	return nil
}

// PushAddr is where the push service listens (nil when it does not run).
func (s *Server) PushAddr() net.Addr {
	if s.push == nil {
		return nil
	}
	return s.push.addr
}

func (s *Server) pushDir() string { return filepath.Join(s.cfg.StateDir, "pushes") }

// pushError is a refusal with its HTTP status.
type pushError struct {
	status int
	err    error
}

func (e *pushError) Error() string { return e.err.Error() }
func (e *pushError) Unwrap() error { return e.err }

func (s *Server) handlePush(w http.ResponseWriter, r *http.Request) {
	var req cluster.Request
	if !decode(w, r, &req) {
		return
	}
	if err := s.acceptPush(req, time.Now()); err != nil {
		s.refuse(w, r, "push", err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"id": req.ID()})
}

func (s *Server) handleTakeover(w http.ResponseWriter, r *http.Request) {
	var to cluster.Takeover
	if !decode(w, r, &to) {
		return
	}
	st, err := s.takeOver(r.PathValue("id"), to, time.Now())
	if err != nil {
		s.refuse(w, r, "takeover", err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// takeOver checks to and makes this host, a standby representative of
// push id, act as its rack's active one for the rest of the push.
func (s *Server) takeOver(id string, to cluster.Takeover, now time.Time) (PushStatus, error) {
	p := s.push
	if err := verifyError(to.Verify(p.cfg.Key, now)); err != nil {
		return PushStatus{}, err
	}
	if to.Push != id {
		return PushStatus{}, &pushError{http.StatusBadRequest, fmt.Errorf("the takeover is for push %s, not %s", to.Push, id)}
	}
	if to.Host != p.self.Name {
		return PushStatus{}, &pushError{http.StatusForbidden, fmt.Errorf("the takeover names host %q, not this one (%s)", to.Host, p.self.Name)}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.pushes[id]
	if ps == nil {
		return PushStatus{}, &pushError{http.StatusNotFound, fmt.Errorf("no push %s", id)}
	}
	seed, _ := hex.DecodeString(ps.req.Root)
	plan, err := cluster.NewPlan(p.cfg.Cluster, ps.req.Hosts, seed)
	if err != nil {
		return PushStatus{}, &pushError{http.StatusConflict, err}
	}
	if r := plan.Roles[p.self.Name]; r == nil || !r.Standby {
		return PushStatus{}, &pushError{http.StatusConflict, fmt.Errorf("this host is no standby representative in push %s", id)}
	}
	if err := p.nonces.Use(to.Nonce, to.Expires, now); err != nil {
		return PushStatus{}, &pushError{http.StatusConflict, err}
	}
	if !ps.takenOver.Swap(true) {
		s.log.Info("standby representative taking over, told by the pusher", "push", id)
	}
	return ps.liveLocked(), nil
}

// verifyError is a signed message's refusal (Verify's error) with its
// HTTP status; nil stays nil.
func verifyError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cluster.ErrUnsigned):
		return &pushError{http.StatusUnauthorized, err}
	case errors.Is(err, cluster.ErrExpired):
		return &pushError{http.StatusGone, err}
	}
	return &pushError{http.StatusBadRequest, err}
}

// refuse answers a refused request with its error's status.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, what string, err error) {
	status := http.StatusBadRequest
	if pe, ok := errors.AsType[*pushError](err); ok {
		status = pe.status
	}
	s.log.Warn(what+" refused", "from", r.RemoteAddr, "err", err)
	apiError(w, status, "%v", err)
}

// acceptPush checks req and starts it.
func (s *Server) acceptPush(req cluster.Request, now time.Time) error {
	p := s.push
	if err := verifyError(req.Verify(p.cfg.Key, now)); err != nil {
		return err
	}
	if !req.For(p.self.Name) {
		return &pushError{http.StatusForbidden, fmt.Errorf("the push does not name this host (%s)", p.self.Name)}
	}
	for _, h := range req.Hosts {
		if p.cfg.Cluster.Hosts[h] == nil {
			return &pushError{http.StatusBadRequest, fmt.Errorf("the push names host %q, which this host's cluster file does not", h)}
		}
	}
	dest, err := p.confineDest(p.expand(req.Dest))
	if err != nil {
		return &pushError{http.StatusForbidden, err}
	}
	if _, err := hex.DecodeString(req.Root); err != nil {
		return &pushError{http.StatusBadRequest, err}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A push issued before the last one accepted for its destination is
	// an old version coming back: refused, so it cannot roll back.
	if err := p.last.Check(dest, req.Issued); err != nil {
		return &pushError{http.StatusConflict, err}
	}
	if err := p.nonces.Use(req.Nonce, req.Expires, now); err != nil {
		return &pushError{http.StatusConflict, err}
	}
	for _, o := range p.pushes {
		if o.status.State == PushFetching || o.status.State == PushInstalling || o.status.State == PushThen {
			if d, _ := p.confineDest(p.expand(o.req.Dest)); d == dest {
				return &pushError{http.StatusConflict, fmt.Errorf("push %s is installing %s already", o.req.ID(), dest)}
			}
		}
	}
	// Kept before the push starts: were it not, a restart could let an
	// older request through. (The nonce stays used: a retry is a new
	// request.)
	p.last.Accept(dest, req.Issued, now)
	if err := s.saveLastIssuedLocked(); err != nil {
		s.log.Error("keeping the pushes' issued times", "err", err)
		return &pushError{http.StatusInternalServerError, fmt.Errorf("this host could not keep the push's issued time, which guards against rollbacks: %w", err)}
	}
	// Pushes past their expiry have ended (their runs with them): their
	// status and record go; their nonces are refused by Verify anyway.
	for id, o := range p.pushes {
		if !now.Before(o.req.Expires) {
			delete(p.pushes, id)
			os.Remove(filepath.Join(s.pushDir(), id+".json"))
		}
	}
	ps := &push{req: req, ctr: &pushCounters{}, status: PushStatus{ID: req.ID(), Host: p.self.Name, State: PushFetching, Root: req.Root, Size: req.Size, Started: now}}
	p.pushes[req.ID()] = ps
	s.savePushLocked(ps)
	s.runPush(ps, dest)
	return nil
}

// expand replaces "{host}" in a destination with this host's name, so
// one push can name a path per host.
func (p *pushSvc) expand(dest string) string {
	return strings.ReplaceAll(dest, "{host}", p.self.Name)
}

// confineDest returns dest, absolute with its directory's links
// resolved, if it lies under a prefix and is not itself a link or a
// directory. Its missing directories are made, only once the path is
// known to stay under the prefix: the longest part of it that exists is
// resolved first, and what is below cannot hold a link yet.
func (p *pushSvc) confineDest(dest string) (string, error) {
	if !filepath.IsAbs(dest) {
		return "", fmt.Errorf("destination %q is not absolute", dest)
	}
	dest = filepath.Clean(dest)
	dir, name := filepath.Split(dest)
	if name == "" {
		return "", fmt.Errorf("destination %q names no file", dest)
	}
	dir = filepath.Clean(dir)
	have, rest := dir, ""
	for {
		if _, err := os.Lstat(have); err == nil {
			break
		}
		parent := filepath.Dir(have)
		if parent == have {
			break
		}
		rest, have = filepath.Join(filepath.Base(have), rest), parent
	}
	rhave, err := filepath.EvalSymlinks(have)
	if err != nil {
		return "", fmt.Errorf("destination %q: %w", dest, err)
	}
	real := filepath.Join(rhave, rest, name)
	if !p.under(real) {
		return "", fmt.Errorf("destination %q is outside this host's push prefixes (%s)", dest, strings.Join(p.prefix, ", "))
	}
	if rest != "" {
		if err := os.MkdirAll(filepath.Join(rhave, rest), 0o755); err != nil {
			return "", fmt.Errorf("destination %q: %w", dest, err)
		}
	}
	if fi, err := os.Lstat(real); err == nil && (fi.Mode()&os.ModeSymlink != 0 || fi.IsDir()) {
		return "", fmt.Errorf("destination %q is a symbolic link or a directory", dest)
	}
	return real, nil
}

// under reports whether path lies inside one of the prefixes.
func (p *pushSvc) under(path string) bool {
	return slices.ContainsFunc(p.prefix, func(d string) bool { return within(d, path) })
}

// pushStatus returns push id's status with its live counters.
func (s *Server) pushStatus(id string) (PushStatus, bool) {
	p := s.push
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.pushes[id]
	if ps == nil {
		return PushStatus{}, false
	}
	return ps.liveLocked(), true
}

func (ps *push) liveLocked() PushStatus {
	st := ps.status
	c := ps.ctr
	st.Done = max(st.Done, c.done.Load())
	st.FromRack, st.FromRacks, st.FromOrigin = c.fromRack.Load(), c.fromRacks.Load(), c.fromOrigin.Load()
	st.Throttled = c.throttled.Load()
	if ps.takenOver.Load() {
		st.Role = roleTookOver
	}
	return st
}

// update changes push ps's status under the lock and keeps it.
func (s *Server) updatePush(ps *push, f func(st *PushStatus)) {
	p := s.push
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&ps.status)
	s.savePushLocked(ps)
}

// savePushLocked writes ps's record (p.mu held), atomically; a failure is
// logged: the push goes on, and a restart would not resume it.
func (s *Server) savePushLocked(ps *push) {
	data, err := json.Marshal(pushRecord{Request: ps.req, Status: ps.liveLocked()})
	if err == nil {
		err = writeAtomic(filepath.Join(s.pushDir(), ps.req.ID()+".json"), data)
	}
	if err != nil {
		s.log.Error("keeping the push's state", "push", ps.req.ID(), "err", err)
	}
}

// writeAtomic replaces the file at path with data: a temporary file in
// its directory, synced and renamed, so a crash leaves either the old
// file or the new one whole.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // nothing there once renamed
	defer tmp.Close()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	return store.Publish(tmp, path)
}

// lastIssuedFile, in StateDir, keeps pushSvc.last across restarts: the
// push records, which also hold the issued times, are removed once they
// expire, and an older request may still be valid then.
const lastIssuedFile = "push-issued.json"

// loadLastIssued reads lastIssuedFile; none is a first start. One that
// does not parse stops the push service, rather than let an old push
// roll a destination back.
func (s *Server) loadLastIssued() (*cluster.LastIssued, error) {
	path := filepath.Join(s.cfg.StateDir, lastIssuedFile)
	last := cluster.NewLastIssued()
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return last, nil
	case err != nil:
		return nil, fmt.Errorf("daemon: push: %w", err)
	}
	if err := json.Unmarshal(data, last); err != nil {
		return nil, fmt.Errorf("daemon: push: %s: %w (it guards against pushes of older versions; without it, one issued in the last %v could roll its destination back)",
			path, err, cluster.MaxLifetime)
	}
	return last, nil
}

// saveLastIssuedLocked writes pushSvc.last (p.mu held).
func (s *Server) saveLastIssuedLocked() error {
	data, err := json.Marshal(s.push.last)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.cfg.StateDir, lastIssuedFile), data)
}

// resumePushes takes back the pushes of an earlier run: their nonces and
// destinations, so none is replayed; those unfinished run again (their
// part files' pieces verified again), the others are reported as they
// ended until they expire.
func (s *Server) resumePushes() {
	p := s.push
	entries, _ := os.ReadDir(s.pushDir())
	now := time.Now()
	for _, e := range entries {
		path := filepath.Join(s.pushDir(), e.Name())
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(path)
		var rec pushRecord
		if err == nil {
			err = json.Unmarshal(data, &rec)
		}
		if err == nil {
			// Signed by the key configured now: a record is only kept state,
			// not a reason to act.
			err = rec.Request.Verify(p.cfg.Key, now)
		}
		if err != nil {
			os.Remove(path)
			continue
		}
		req := rec.Request
		p.nonces.Use(req.Nonce, req.Expires, now)
		dest, err := p.confineDest(p.expand(req.Dest))
		if err != nil {
			continue
		}
		p.last.Accept(dest, req.Issued, now)
		ps := &push{req: req, status: rec.Status, ctr: &pushCounters{}}
		ps.ctr.restore(rec.Status)
		p.pushes[req.ID()] = ps
		switch rec.Status.State {
		case PushDone, PushFailed:
			s.seedPushLater(ps, dest)
		default:
			ps.status.Resumed++
			ps.status.State = PushFetching
			s.log.Info("resuming a push", "push", req.ID(), "dest", dest)
			s.runPush(ps, dest)
		}
	}
	// What the records added (kept by an agent that had no file yet), and
	// what was forgotten, is kept.
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := s.saveLastIssuedLocked(); err != nil {
		s.log.Error("keeping the pushes' issued times", "err", err)
	}
}
